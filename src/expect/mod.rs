//! Expectations: what a scenario says a good breaker does, resolved against the scenario (phases, breakers and
//! routes must exist) and evaluated on a `RunRecord`, finished or still growing.
//!
//! Each result reads as one sentence with the measured value, the bound and PASS or FAIL, because that sentence is
//! what a person reads in CI: "breaker pricing opened 7.3 s after brownout began; expected within 5s: FAIL".
//! Evaluation never reaches back into running components; it only reads the record.
//!
//! One file per family: `breaker` (when it opens and closes, how it flaps, how many probes it lets through),
//! `dependency` (calls in flight, the call rate while open, retry amplification, TLS handshakes per request), `sut`
//! (latency percentiles, outcome shares and goodput, whole or over sliding windows), `metric` (any series of the
//! SUT's own metrics), `requests` (each SUT request and the calls it caused), `instances` (an instance of a route
//! ejected and returned, the healthy instances' calls in flight) and `dns` (how often the dependency's name is
//! asked for, how soon calls follow its move). `spec` is the format as written, `entry` the one
//! check an entry holds and its resolution. An [`Expectation`] carries its id, its abort flag and its check, and
//! judges itself: [`Expectation::evaluate`] on a finished run, [`Expectation::decide`] while the run goes on.

pub mod breaker;
pub mod dependency;
pub mod dns;
pub mod entry;
pub mod instances;
pub mod metric;
pub mod postgres;
mod probes;
pub mod redis;
pub mod requests;
pub mod spec;
pub mod sut;
pub(crate) mod words;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::breaker::BreakerTimeline;
use crate::record::{PhaseSpan, RunRecord};

pub use breaker::BreakerCheck;
pub use dependency::DependencyCheck;
pub use dns::DnsCheck;
pub use instances::InstanceCheck;
pub use metric::{MetricBound, MetricCheck};
pub use postgres::PostgresCheck;
pub use requests::{PerRequest, RequestsCheck};
pub use spec::{ExpectationSpec, Names, WhileOpen};
pub use sut::{Percentile, ShareOf, SutCheck};
pub use words::{ms, secs};

/// One resolved expectation: its id, whether its failure stops the run, and the check itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expectation {
    /// The scenario's `id`, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Stop the run as soon as this expectation is decided as failed.
    #[serde(default)]
    pub abort_on_fail: bool,
    pub check: Check,
}

/// What an expectation checks, by family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "family", rename_all = "snake_case")]
pub enum Check {
    Breaker(BreakerCheck),
    Dependency(DependencyCheck),
    Sut(SutCheck),
    Metric(MetricCheck),
    Requests(RequestsCheck),
    Instances(InstanceCheck),
    Redis(redis::RedisCheck),
    Postgres(PostgresCheck),
    Dns(DnsCheck),
}

impl Check {
    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        match self {
            Check::Breaker(c) => c.name(),
            Check::Dependency(c) => c.name(),
            Check::Sut(c) => c.name(),
            Check::Metric(c) => c.name(),
            Check::Requests(c) => c.name(),
            Check::Instances(c) => c.name(),
            Check::Redis(c) => c.name(),
            Check::Postgres(c) => c.name(),
            Check::Dns(c) => c.name(),
        }
    }

    /// Whether this check can be decided before the run ends (so `abort_on_fail` makes sense for it).
    pub fn decidable_live(&self) -> bool {
        match self {
            Check::Breaker(c) => c.decidable_live(),
            Check::Dependency(c) => c.decidable_live(),
            Check::Sut(c) => c.decidable_live(),
            Check::Metric(c) => c.decidable_live(),
            Check::Requests(c) => c.decidable_live(),
            Check::Instances(c) => c.decidable_live(),
            Check::Redis(c) => c.decidable_live(),
            Check::Postgres(c) => c.decidable_live(),
            Check::Dns(c) => c.decidable_live(),
        }
    }

    fn evaluate(&self, name: String, record: &RunRecord) -> Verdict {
        match self {
            Check::Breaker(c) => c.evaluate(name, record),
            Check::Dependency(c) => c.evaluate(name, record),
            Check::Sut(c) => c.evaluate(name, record),
            Check::Metric(c) => c.evaluate(name, record),
            Check::Requests(c) => c.evaluate(name, record),
            Check::Instances(c) => c.evaluate(name, record),
            Check::Redis(c) => c.evaluate(name, record),
            Check::Postgres(c) => c.evaluate(name, record),
            Check::Dns(c) => c.evaluate(name, record),
        }
    }

    fn decide(&self, name: String, record: &RunRecord) -> Option<Verdict> {
        match self {
            Check::Breaker(c) => c.decide(name, record),
            Check::Dependency(c) => c.decide(name, record),
            Check::Sut(c) => c.decide(name, record),
            Check::Metric(c) => c.decide(name, record),
            // Judged on the whole join, after the run.
            Check::Requests(_) => None,
            Check::Instances(c) => c.decide(name, record),
            // Counted per phase and over the run: judged on the finished run.
            Check::Redis(_) => None,
            Check::Postgres(c) => c.decide(name, record),
            Check::Dns(c) => c.decide(name, record),
        }
    }
}

impl Expectation {
    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        self.check.name()
    }

    /// Evaluates the expectation on a finished run.
    pub fn evaluate(&self, record: &RunRecord) -> Verdict {
        Verdict {
            id: self.id.clone(),
            ..self.check.evaluate(self.name(), record)
        }
    }

    /// The verdict, if it is already decided on `record`, a run still going on whose data is complete up to
    /// `record.duration`: no later data can change it. A pool overrun, a breaker that did not open by its deadline,
    /// a latency bound over a phase that has ended are decided; most bounds over the whole run are not until it ends.
    pub fn decide(&self, record: &RunRecord) -> Option<Verdict> {
        self.decide_after(record, 0)
    }

    /// [`Expectation::decide`] when it was already asked, and decided nothing, on a record of the same run that
    /// held its first `judged` buckets: the same verdict, reading only what may have changed where the family
    /// knows (the SUT's sliding windows that end after them, nothing for a phase still going on).
    pub fn decide_after(&self, record: &RunRecord, judged: usize) -> Option<Verdict> {
        let v = match &self.check {
            Check::Sut(c) => c.decide_after(self.name(), record, judged),
            check => check.decide(self.name(), record),
        }?;
        // More of the run may bring the evidence that decides it.
        if v.inconclusive() {
            return None;
        }
        Some(Verdict {
            id: self.id.clone(),
            ..v
        })
    }
}

/// What a verdict came to. Inconclusive is its own outcome: the evidence was too coarse to decide (a scrape that
/// cannot separate a probe from the traffic that returned after the close, a transition within its source's
/// resolution of the bound, a run stopped before the expectation's span), and it is neither a pass nor a failure
/// of the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Fail,
    Inconclusive,
}

impl Outcome {
    /// PASS, FAIL or INCONCLUSIVE, as sentences end.
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::Inconclusive => "INCONCLUSIVE",
        }
    }
}

/// The verdict on one expectation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The expectation's `id`, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// A short name for the expectation, e.g. "breaker pricing opens within 6s after brownout".
    pub name: String,
    /// The sentence with the measured value, the bound and PASS, FAIL or INCONCLUSIVE.
    pub sentence: String,
    /// True only for a pass.
    pub passed: bool,
    /// Pass, fail or inconclusive (absent in files written before inconclusive verdicts existed: read `passed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The measured figure, in the unit of the bound (seconds, calls, calls per second, a fraction), if any.
    pub measured: Option<f64>,
    pub bound: Option<f64>,
    /// For a check judged per SUT request: the distribution of its per-request figure and the worst requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_request: Option<PerRequest>,
}

impl Verdict {
    /// The verdict on a route the dependency's recording lacks (an external faultd configured with other routes).
    pub(crate) fn unrecorded(name: String, route: &str, bound: Option<f64>) -> Self {
        Verdict::new(
            name,
            false,
            format!("no recording of route {route}"),
            None,
            bound,
        )
    }

    /// A pass or a failure.
    pub(crate) fn new(
        name: String,
        passed: bool,
        text: String,
        measured: Option<f64>,
        bound: Option<f64>,
    ) -> Self {
        let outcome = if passed { Outcome::Pass } else { Outcome::Fail };
        Verdict::with_outcome(name, outcome, text, measured, bound)
    }

    /// A verdict of any outcome; the sentence ends with its word.
    pub fn with_outcome(
        name: String,
        outcome: Outcome,
        text: String,
        measured: Option<f64>,
        bound: Option<f64>,
    ) -> Self {
        Verdict {
            id: None,
            name,
            sentence: format!("{text}: {}", outcome.word()),
            passed: outcome == Outcome::Pass,
            outcome: Some(outcome),
            measured,
            bound,
            per_request: None,
        }
    }

    /// The sentence without its trailing outcome word (`: PASS`, `: FAIL`, `: INCONCLUSIVE`), for a report that
    /// shows the outcome apart.
    pub fn finding(&self) -> &str {
        self.sentence
            .trim_end_matches(": PASS")
            .trim_end_matches(": FAIL")
            .trim_end_matches(": INCONCLUSIVE")
    }

    /// Pass, fail or inconclusive.
    pub fn outcome(&self) -> Outcome {
        match (self.outcome, self.passed) {
            (Some(o), _) => o,
            (None, true) => Outcome::Pass,
            (None, false) => Outcome::Fail,
        }
    }

    /// Whether the expectation failed (an inconclusive verdict did not).
    pub fn failed(&self) -> bool {
        self.outcome() == Outcome::Fail
    }

    /// Whether the expectation could not be judged.
    pub fn inconclusive(&self) -> bool {
        self.outcome() == Outcome::Inconclusive
    }
}

/// The span an expectation's `during` names, or the whole run.
pub(crate) fn span(record: &RunRecord, during: &Option<String>) -> PhaseSpan {
    during
        .as_ref()
        .and_then(|p| record.phase(p))
        .unwrap_or_else(|| record.whole_run())
}

/// Whether a span of a record that is still growing has ended with data recorded after it, so that nothing later
/// can change what happened inside it. The whole run never has, until the run is over.
pub(crate) fn ended(record: &RunRecord, during: &Option<String>) -> bool {
    during.is_some() && span(record, during).end < record.duration
}

/// "during brownout", or "over the run".
pub(crate) fn phase_words(s: &PhaseSpan) -> String {
    if s.name == "the run" {
        "over the run".to_string()
    } else {
        format!("during {}", s.name)
    }
}

/// The timeline of `breaker` in the record (empty, so always closed, if it was never observed).
pub(crate) fn timeline<'a>(record: &'a RunRecord, breaker: &str) -> &'a BreakerTimeline {
    static EMPTY: BreakerTimeline = BreakerTimeline {
        transitions: Vec::new(),
        resolution: Duration::ZERO,
        gaps: Vec::new(),
        source: None,
        samples: Vec::new(),
    };
    record.breakers.get(breaker).unwrap_or(&EMPTY)
}

#[cfg(test)]
mod evidence_tests;
#[cfg(test)]
mod long_run_tests;
#[cfg(test)]
mod probe_timing_tests;
#[cfg(test)]
mod served_tests;
#[cfg(test)]
mod tests;
