//! Expectations: what a scenario says a good breaker does, written as structured YAML entries, resolved against the
//! scenario (phases, breakers and routes must exist) and evaluated on a finished run's `RunRecord`.
//!
//! Each result reads as one sentence with the measured value, the bound and PASS or FAIL, because that sentence is
//! what a person reads in CI: "breaker pricing opened 7.3 s after brownout began; expected within 5s: FAIL".
//! Evaluation never reaches back into running components; it only reads the record.

use std::time::Duration;

use faultline_units::{Dur, Rate, Share};
use serde::{Deserialize, Serialize};

use crate::breaker::{BreakerState, BreakerTimeline};
use crate::record::{OutcomeClass, PhaseSpan, RunRecord};

/// One entry of the scenario's `expect:` list, as written. Exactly one subject (`breaker`, `dependency`,
/// `sut_latency`, `sut_share`) and one check go together; `resolve` says which combinations make sense.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpectationSpec {
    /// A short identifier, used in reports and by `proof.fails`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Subject: a breaker named under `breakers:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<String>,
    /// Subject: a dependency route named under `dependency.routes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<String>,
    /// Subject: a percentile of the SUT's latency (from the intended send time): p50, p90, p99, p99.9, p99.99, max.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sut_latency: Option<String>,
    /// Subject: the share of SUT requests ending in one outcome class (ok, fallback, client_error, server_error,
    /// timeout, connect_error, dropped) or `error` (client, server, timeout and connect errors together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sut_share: Option<String>,

    /// The breaker opens within this long after the phase named by `after` begins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opens_within: Option<Dur>,
    /// The breaker closes within this long after the phase named by `after` begins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closes_within: Option<Dur>,
    /// The phase whose start `opens_within` / `closes_within` count from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The breaker never leaves closed during the phase named by `during` (or the whole run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stays_closed: Option<bool>,
    /// At most this many transitions during the phase (or the run): no flapping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transitions_at_most: Option<u32>,
    /// At most this many calls reach the dependency in each half-open window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes_per_half_open_at_most: Option<u32>,
    /// The route the breaker guards, for probe counting (default: the breaker's own `route`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,

    /// Calls in flight at the dependency stay below this (the pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight_below: Option<u64>,
    /// Calls in flight at the dependency stay at or under this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight_at_most: Option<u64>,
    /// The dependency's call rate while the breaker named by `while_open` is open stays below this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_while_open_below: Option<Rate>,
    /// Calls at the dependency per request sent to the SUT stay at or under this (retry amplification).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amplification_at_most: Option<f64>,

    /// Upper bound for `sut_latency` (a duration) or `sut_share` (a share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<String>,
    /// Lower bound for `sut_share` (a share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<String>,

    /// Only this phase counts (default: the whole run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub during: Option<String>,
    /// Only the time while this breaker is open counts (`true` means the scenario's only breaker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub while_open: Option<WhileOpen>,
    /// Stop the run as soon as this expectation has failed, where it can be checked while the run goes on (the
    /// calls in flight at the dependency, read from faultd once a second). The report is still written.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abort_on_fail: bool,
}

/// `while_open: true` or `while_open: pricing`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum WhileOpen {
    Only(bool),
    Breaker(String),
}

/// A latency percentile, as a quantile (`max` is 1.0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentile(pub f64);

impl Percentile {
    pub fn parse(s: &str) -> Option<Self> {
        if s == "max" {
            return Some(Percentile(1.0));
        }
        let p: f64 = s.strip_prefix('p')?.parse().ok()?;
        (p > 0.0 && p < 100.0).then_some(Percentile(p / 100.0))
    }

    pub fn label(self) -> String {
        if self.0 >= 1.0 {
            "max".into()
        } else {
            format!("p{}", trim(self.0 * 100.0))
        }
    }
}

/// Which requests a share counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShareOf {
    Class(OutcomeClass),
    /// Client errors, server errors, timeouts and connect errors together.
    Errors,
}

impl ShareOf {
    pub fn parse(s: &str) -> Option<Self> {
        if s == "error" || s == "errors" {
            return Some(ShareOf::Errors);
        }
        OutcomeClass::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .map(ShareOf::Class)
    }

    fn name(self) -> &'static str {
        match self {
            ShareOf::Class(c) => c.name(),
            ShareOf::Errors => "error",
        }
    }

    fn count(self, by: &crate::record::ByClass) -> u64 {
        match self {
            ShareOf::Class(c) => by.get(c),
            ShareOf::Errors => [
                OutcomeClass::ClientError,
                OutcomeClass::ServerError,
                OutcomeClass::Timeout,
                OutcomeClass::ConnectError,
            ]
            .iter()
            .map(|&c| by.get(c))
            .sum(),
        }
    }
}

/// A resolved expectation: names checked against the scenario, bounds parsed into their types.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Expectation {
    OpensWithin {
        breaker: String,
        within: Dur,
        after: String,
    },
    ClosesWithin {
        breaker: String,
        within: Dur,
        after: String,
    },
    StaysClosed {
        breaker: String,
        during: Option<String>,
    },
    TransitionsAtMost {
        breaker: String,
        at_most: u32,
        during: Option<String>,
    },
    ProbesPerHalfOpenAtMost {
        breaker: String,
        route: String,
        at_most: u32,
    },
    MaxInFlight {
        route: String,
        bound: u64,
        inclusive: bool,
        during: Option<String>,
    },
    RateWhileOpen {
        route: String,
        breaker: String,
        below: Rate,
    },
    Amplification {
        route: String,
        at_most: f64,
        during: Option<String>,
    },
    SutLatency {
        percentile: Percentile,
        below: Dur,
        during: Option<String>,
        while_open: Option<String>,
    },
    SutShare {
        of: ShareOf,
        bound: Share,
        above: bool,
        during: Option<String>,
    },
}

/// What a scenario declares, for resolving names in expectations.
pub struct Names<'a> {
    pub phases: &'a [String],
    pub breakers: &'a [String],
    pub routes: &'a [String],
    /// The dependency route each breaker guards, where known.
    pub breaker_routes: &'a dyn Fn(&str) -> Option<String>,
}

impl ExpectationSpec {
    /// Checks the combination of fields and every name, and parses the bounds. The error says which field.
    pub fn resolve(&self, names: &Names<'_>) -> Result<Expectation, String> {
        let e = self.resolve_check(names)?;
        if self.abort_on_fail && !matches!(e, Expectation::MaxInFlight { .. }) {
            return Err("`abort_on_fail` works with `max_in_flight_below` / `max_in_flight_at_most`, which faultd can check while the run goes on; the other checks are judged on the whole recording after the run".into());
        }
        Ok(e)
    }

    fn resolve_check(&self, names: &Names<'_>) -> Result<Expectation, String> {
        let phase = |field: &str, p: &Option<String>| -> Result<Option<String>, String> {
            match p {
                None => Ok(None),
                Some(p) if names.phases.contains(p) => Ok(Some(p.clone())),
                Some(p) => Err(format!(
                    "`{field}` names phase `{p}`, which the scenario does not have (phases: {})",
                    list(names.phases)
                )),
            }
        };
        let breaker = |b: &str| -> Result<String, String> {
            if names.breakers.iter().any(|n| n == b) {
                Ok(b.to_string())
            } else {
                Err(format!(
                    "`breaker` names `{b}`, which is not under `breakers:` (breakers: {})",
                    list(names.breakers)
                ))
            }
        };
        let route = |field: &str, r: &str| -> Result<String, String> {
            if names.routes.iter().any(|n| n == r) {
                Ok(r.to_string())
            } else {
                Err(format!("`{field}` names route `{r}`, which is not under `dependency.routes` (routes: {})", list(names.routes)))
            }
        };
        let while_open = |w: &Option<WhileOpen>| -> Result<Option<String>, String> {
            match w {
                None | Some(WhileOpen::Only(false)) => Ok(None),
                Some(WhileOpen::Only(true)) => match names.breakers {
                    [only] => Ok(Some(only.clone())),
                    _ => Err("`while_open: true` needs exactly one breaker in the scenario; name the breaker instead".into()),
                },
                Some(WhileOpen::Breaker(b)) => breaker(b).map(Some),
            }
        };
        let subjects = [
            self.breaker.is_some() && self.dependency.is_none(),
            self.dependency.is_some(),
            self.sut_latency.is_some(),
            self.sut_share.is_some(),
        ];
        if subjects.iter().filter(|s| **s).count() != 1 {
            return Err("an expectation needs exactly one subject: `breaker`, `dependency`, `sut_latency` or `sut_share`".into());
        }
        let during = phase("during", &self.during)?;

        if let Some(p) = &self.sut_latency {
            let percentile = Percentile::parse(p).ok_or_else(|| {
                format!("`sut_latency` is {p:?}; expected p50, p90, p99, p99.9, p99.99 or max")
            })?;
            let below = self
                .below
                .as_deref()
                .ok_or("`sut_latency` needs `below: <duration>`")?;
            let below: Dur = below.parse().map_err(|e| format!("`below`: {e}"))?;
            return Ok(Expectation::SutLatency {
                percentile,
                below,
                during,
                while_open: while_open(&self.while_open)?,
            });
        }
        if let Some(s) = &self.sut_share {
            let of = ShareOf::parse(s).ok_or_else(|| format!("`sut_share` is {s:?}; expected one of ok, fallback, client_error, server_error, timeout, connect_error, dropped, error"))?;
            let (text, above) = match (&self.above, &self.below) {
                (Some(a), None) => (a, true),
                (None, Some(b)) => (b, false),
                _ => return Err("`sut_share` needs exactly one of `above` or `below`".into()),
            };
            let bound: Share = text
                .parse()
                .map_err(|e| format!("`{}`: {e}", if above { "above" } else { "below" }))?;
            return Ok(Expectation::SutShare {
                of,
                bound,
                above,
                during,
            });
        }
        if let Some(r) = &self.dependency {
            let route = route("dependency", r)?;
            if let Some(bound) = self.max_in_flight_below {
                return Ok(Expectation::MaxInFlight {
                    route,
                    bound,
                    inclusive: false,
                    during,
                });
            }
            if let Some(bound) = self.max_in_flight_at_most {
                return Ok(Expectation::MaxInFlight {
                    route,
                    bound,
                    inclusive: true,
                    during,
                });
            }
            if let Some(below) = self.rate_while_open_below {
                let b = match (&self.breaker, while_open(&self.while_open)?) {
                    (Some(b), _) => breaker(b)?,
                    (None, Some(b)) => b,
                    (None, None) => {
                        return Err("`rate_while_open_below` needs `while_open: <breaker>`".into())
                    }
                };
                return Ok(Expectation::RateWhileOpen {
                    route,
                    breaker: b,
                    below,
                });
            }
            if let Some(at_most) = self.amplification_at_most {
                if !(at_most.is_finite() && at_most >= 0.0) {
                    return Err("`amplification_at_most` must be a non-negative number".into());
                }
                return Ok(Expectation::Amplification {
                    route,
                    at_most,
                    during,
                });
            }
            return Err("a `dependency` expectation needs one of `max_in_flight_below`, `max_in_flight_at_most`, `rate_while_open_below`, `amplification_at_most`".into());
        }
        let b = breaker(self.breaker.as_deref().unwrap_or_default())?;
        let after = || -> Result<String, String> {
            phase("after", &self.after)?
                .ok_or_else(|| "this check needs `after: <phase>`".to_string())
        };
        if let Some(within) = self.opens_within {
            return Ok(Expectation::OpensWithin {
                breaker: b,
                within,
                after: after()?,
            });
        }
        if let Some(within) = self.closes_within {
            return Ok(Expectation::ClosesWithin {
                breaker: b,
                within,
                after: after()?,
            });
        }
        if self.stays_closed == Some(true) {
            return Ok(Expectation::StaysClosed { breaker: b, during });
        }
        if let Some(at_most) = self.transitions_at_most {
            return Ok(Expectation::TransitionsAtMost {
                breaker: b,
                at_most,
                during,
            });
        }
        if let Some(at_most) = self.probes_per_half_open_at_most {
            let route = match &self.route {
                Some(r) => route("route", r)?,
                None => (names.breaker_routes)(&b).ok_or_else(|| format!("`probes_per_half_open_at_most` needs `route:` (the dependency route breaker `{b}` guards)"))?,
            };
            return Ok(Expectation::ProbesPerHalfOpenAtMost {
                breaker: b,
                route,
                at_most,
            });
        }
        Err("a `breaker` expectation needs one of `opens_within`, `closes_within`, `stays_closed: true`, `transitions_at_most`, `probes_per_half_open_at_most`".into())
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
    /// The sentence with the measured value, the bound and PASS or FAIL.
    pub sentence: String,
    pub passed: bool,
    /// The measured figure, in the unit of the bound (seconds, calls, calls per second, a fraction), if any.
    pub measured: Option<f64>,
    pub bound: Option<f64>,
}

impl Verdict {
    /// The verdict on a route the dependency's recording lacks (an external faultd configured with other routes).
    fn unrecorded(name: String, route: &str, bound: Option<f64>) -> Self {
        Verdict::new(
            name,
            false,
            format!("no recording of route {route}"),
            None,
            bound,
        )
    }

    fn new(
        name: String,
        passed: bool,
        text: String,
        measured: Option<f64>,
        bound: Option<f64>,
    ) -> Self {
        let sentence = format!("{text}: {}", if passed { "PASS" } else { "FAIL" });
        Verdict {
            id: None,
            name,
            sentence,
            passed,
            measured,
            bound,
        }
    }
}

impl Expectation {
    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        let during = |d: &Option<String>| {
            d.as_ref()
                .map(|p| format!(" during {p}"))
                .unwrap_or_default()
        };
        match self {
            Expectation::OpensWithin {
                breaker,
                within,
                after,
            } => format!("breaker {breaker} opens within {within} after {after}"),
            Expectation::ClosesWithin {
                breaker,
                within,
                after,
            } => format!("breaker {breaker} closes within {within} after {after}"),
            Expectation::StaysClosed { breaker, during: d } => {
                format!("breaker {breaker} stays closed{}", during(d))
            }
            Expectation::TransitionsAtMost {
                breaker,
                at_most,
                during: d,
            } => format!(
                "breaker {breaker} changes state at most {at_most} times{}",
                during(d)
            ),
            Expectation::ProbesPerHalfOpenAtMost {
                breaker, at_most, ..
            } => format!(
                "breaker {breaker} lets at most {at_most} probes through per half-open window"
            ),
            Expectation::MaxInFlight {
                route,
                bound,
                inclusive,
                during: d,
            } => format!(
                "calls in flight at {route} stay {} {bound}{}",
                if *inclusive { "at or under" } else { "below" },
                during(d)
            ),
            Expectation::RateWhileOpen {
                route,
                breaker,
                below,
            } => format!("{route} receives under {below} while {breaker} is open"),
            Expectation::Amplification {
                route,
                at_most,
                during: d,
            } => format!(
                "calls at {route} per SUT request stay at or under {at_most}{}",
                during(d)
            ),
            Expectation::SutLatency {
                percentile,
                below,
                during: d,
                while_open,
            } => format!(
                "SUT {} stays below {below}{}{}",
                percentile.label(),
                during(d),
                while_open
                    .as_ref()
                    .map(|b| format!(" while {b} is open"))
                    .unwrap_or_default()
            ),
            Expectation::SutShare {
                of,
                bound,
                above,
                during: d,
            } => format!(
                "{} share stays {} {bound}{}",
                of.name(),
                if *above { "above" } else { "below" },
                during(d)
            ),
        }
    }

    /// Evaluates the expectation on a finished run.
    pub fn evaluate(&self, record: &RunRecord) -> Verdict {
        let name = self.name();
        let span = |during: &Option<String>| -> PhaseSpan {
            during
                .as_ref()
                .and_then(|p| record.phase(p))
                .unwrap_or_else(|| record.whole_run())
        };
        let phase_words = |s: &PhaseSpan| {
            if s.name == "the run" {
                "over the run".to_string()
            } else {
                format!("during {}", s.name)
            }
        };
        let empty = BreakerTimeline::default();
        let timeline = |b: &str| record.breakers.get(b).unwrap_or(&empty);
        let how =
            |tr: &crate::breaker::Transition| format!("{}, ±{}", tr.source, secs(tr.resolution));

        match self {
            Expectation::OpensWithin {
                breaker,
                within,
                after,
            }
            | Expectation::ClosesWithin {
                breaker,
                within,
                after,
            } => {
                let opening = matches!(self, Expectation::OpensWithin { .. });
                let (target, verb) = if opening {
                    (BreakerState::Open, "opened")
                } else {
                    (BreakerState::Closed, "closed")
                };
                let t = timeline(breaker);
                let Some(phase) = record.phase(after) else {
                    return Verdict::new(
                        name,
                        false,
                        format!(
                            "phase {after} never began (the run ended at {})",
                            secs(record.duration)
                        ),
                        None,
                        Some(within.as_secs_f64()),
                    );
                };
                let at_start = t.state_at(phase.start);
                if opening && at_start == BreakerState::Open {
                    let when = t
                        .transitions
                        .iter()
                        .rfind(|tr| tr.at <= phase.start && tr.to == BreakerState::Open)
                        .map(|tr| tr.at)
                        .unwrap_or_default();
                    return Verdict::new(name, false, format!("breaker {breaker} was already open when {after} began (it opened at {}, before the fault); expected to open within {within} after", secs(when)), Some(0.0), Some(within.as_secs_f64()));
                }
                if !opening
                    && at_start == BreakerState::Closed
                    && t.transitions_in(phase.start, record.duration)
                        .next()
                        .is_none()
                {
                    return Verdict::new(name, true, format!("breaker {breaker} was already closed when {after} began and stayed closed; expected to close within {within}"), Some(0.0), Some(within.as_secs_f64()));
                }
                match t.transitions_in(phase.start, record.duration).find(|tr| tr.to == target) {
                    Some(tr) => {
                        let delay = tr.at - phase.start;
                        let passed = delay <= within.get();
                        Verdict::new(name, passed, format!("breaker {breaker} {verb} {} after {after} began ({}); expected within {within}", secs(delay), how(tr)), Some(delay.as_secs_f64()), Some(within.as_secs_f64()))
                    }
                    None => Verdict::new(name, false, format!("breaker {breaker} never {verb} after {after} began ({} of the run followed); expected within {within}", secs(record.duration.saturating_sub(phase.start))), None, Some(within.as_secs_f64())),
                }
            }
            Expectation::StaysClosed { breaker, during } => {
                let s = span(during);
                let t = timeline(breaker);
                let first_not_closed = if t.state_at(s.start) != BreakerState::Closed {
                    Some((s.start, t.state_at(s.start)))
                } else {
                    t.transitions_in(s.start, s.end)
                        .find(|tr| tr.to != BreakerState::Closed)
                        .map(|tr| (tr.at, tr.to))
                };
                match first_not_closed {
                    None => Verdict::new(name, true, format!("breaker {breaker} stayed closed {}; expected to stay closed", phase_words(&s)), Some(0.0), Some(0.0)),
                    Some((at, state)) => Verdict::new(name, false, format!("breaker {breaker} was {state} at {}, {} into {}; expected to stay closed", secs(at), secs(at - s.start), s.name), Some(at.as_secs_f64()), None),
                }
            }
            Expectation::TransitionsAtMost {
                breaker,
                at_most,
                during,
            } => {
                let s = span(during);
                let n = timeline(breaker).transitions_in(s.start, s.end).count();
                Verdict::new(
                    name,
                    n <= *at_most as usize,
                    format!(
                        "breaker {breaker} changed state {n} times {}; expected at most {at_most}",
                        phase_words(&s)
                    ),
                    Some(n as f64),
                    Some(*at_most as f64),
                )
            }
            Expectation::ProbesPerHalfOpenAtMost {
                breaker,
                route,
                at_most,
            } => {
                let t = timeline(breaker);
                if !record.dependency.contains_key(route) {
                    return Verdict::unrecorded(name, route, Some(*at_most as f64));
                };
                let (windows, too_short) = half_open_windows(t, record.duration);
                let unjudged = if too_short > 0 {
                    format!(
                        ", {too_short} more closed within the ±{} resolution and were not counted",
                        secs(t.resolution)
                    )
                } else {
                    String::new()
                };
                if windows.is_empty() {
                    let why = if too_short > 0 {
                        format!("breaker {breaker}'s half-open windows{unjudged}")
                    } else {
                        format!("breaker {breaker} never went half-open")
                    };
                    return Verdict::new(name, false, format!("{why}, so no probes could be counted; expected at most {at_most} per half-open window"), None, Some(*at_most as f64));
                }
                let counts: Vec<u64> = windows
                    .iter()
                    .map(|&(start, end)| record.arrivals_between(route, start, end))
                    .collect();
                let worst = counts.iter().copied().max().unwrap_or(0);
                Verdict::new(
                    name,
                    worst <= *at_most as u64,
                    format!("at most {worst} call{} reached {route} in any of breaker {breaker}'s {} half-open window{} (counts: {}{unjudged}); expected at most {at_most}", if worst == 1 { "" } else { "s" }, windows.len(), if windows.len() == 1 { "" } else { "s" }, counts.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
                    Some(worst as f64),
                    Some(*at_most as f64),
                )
            }
            Expectation::MaxInFlight {
                route,
                bound,
                inclusive,
                during,
            } => {
                let s = span(during);
                let Some(series) = record.dependency.get(route) else {
                    return Verdict::unrecorded(name, route, Some(*bound as f64));
                };
                let range = record.buckets_in(s.start, s.end);
                let (peak, at) = range
                    .clone()
                    .filter_map(|i| series.get(i).map(|b| (b.in_flight_max, i)))
                    .max_by_key(|&(v, i)| (v, std::cmp::Reverse(i)))
                    .unwrap_or((0, 0));
                let passed = if *inclusive {
                    peak <= *bound
                } else {
                    peak < *bound
                };
                let when = if peak > 0 {
                    format!(" at {}", secs(record.bucket_start(at)))
                } else {
                    String::new()
                };
                Verdict::new(
                    name,
                    passed,
                    format!(
                        "calls in flight at {route} peaked at {peak}{when} {}; expected {} {bound}",
                        phase_words(&s),
                        if *inclusive { "at or under" } else { "below" }
                    ),
                    Some(peak as f64),
                    Some(*bound as f64),
                )
            }
            Expectation::RateWhileOpen {
                route,
                breaker,
                below,
            } => {
                let Some(series) = record.dependency.get(route) else {
                    return Verdict::unrecorded(name, route, Some(below.per_sec()));
                };
                let spans =
                    timeline(breaker).spans_in(BreakerState::Open, Duration::ZERO, record.duration);
                let open: Duration = spans.iter().map(|(a, b)| *b - *a).sum();
                if open < record.bucket {
                    return Verdict::new(name, false, format!("breaker {breaker} was never open long enough to measure {route}'s call rate; expected below {below} while open"), None, Some(below.per_sec()));
                }
                // Calls sent just before the breaker opened may still arrive in its first bucket: skip that bucket.
                let calls: u64 = spans
                    .iter()
                    .flat_map(|&(a, b)| record.buckets_in(a + record.bucket, b))
                    .filter_map(|i| series.get(i))
                    .map(|b| b.arrivals)
                    .sum();
                let measured_time: Duration = spans
                    .iter()
                    .map(|&(a, b)| {
                        record.bucket * record.buckets_in(a + record.bucket, b).len() as u32
                    })
                    .sum();
                let rate = if measured_time.is_zero() {
                    0.0
                } else {
                    calls as f64 / measured_time.as_secs_f64()
                };
                Verdict::new(name, rate < below.per_sec(), format!("{route} received {calls} calls in {} while breaker {breaker} was open ({}/s); expected below {below}", secs(measured_time), trim(rate)), Some(rate), Some(below.per_sec()))
            }
            Expectation::Amplification {
                route,
                at_most,
                during,
            } => {
                let s = span(during);
                let Some(series) = record.dependency.get(route) else {
                    return Verdict::unrecorded(name, route, Some(*at_most));
                };
                let range = record.buckets_in(s.start, s.end);
                let calls: u64 = range
                    .clone()
                    .filter_map(|i| series.get(i))
                    .map(|b| b.arrivals)
                    .sum();
                let sent: u64 = range
                    .filter_map(|i| record.sut.get(i))
                    .map(|b| {
                        b.offered
                            .saturating_sub(b.completed.get(OutcomeClass::Dropped))
                    })
                    .sum();
                if sent == 0 {
                    return Verdict::new(
                        name,
                        false,
                        format!("no requests were sent to the SUT {}", phase_words(&s)),
                        None,
                        Some(*at_most),
                    );
                }
                let ratio = calls as f64 / sent as f64;
                Verdict::new(name, ratio <= *at_most, format!("{route} received {calls} calls for {sent} SUT requests {} ({} per request); expected at most {at_most}", phase_words(&s), trim2(ratio)), Some(ratio), Some(*at_most))
            }
            Expectation::SutLatency {
                percentile,
                below,
                during,
                while_open,
            } => {
                let s = span(during);
                let mut spans = vec![(s.start, s.end)];
                if let Some(b) = while_open {
                    spans = timeline(b).spans_in(BreakerState::Open, s.start, s.end);
                }
                let buckets: Vec<usize> = spans
                    .iter()
                    .flat_map(|&(a, b)| record.buckets_in(a, b))
                    .collect();
                let context = format!(
                    "{}{}",
                    phase_words(&s),
                    while_open
                        .as_ref()
                        .map(|b| format!(" while {b} was open"))
                        .unwrap_or_default()
                );
                match record.sut_percentile(buckets.into_iter(), percentile.0) {
                    Some(v) => Verdict::new(name, v < below.get(), format!("SUT {} was {} {context}; expected below {below}", percentile.label(), ms(v)), Some(v.as_secs_f64()), Some(below.as_secs_f64())),
                    None => Verdict::new(name, false, format!("no SUT request completed {context}, so there is no {} to check; expected below {below}", percentile.label()), None, Some(below.as_secs_f64())),
                }
            }
            Expectation::SutShare {
                of,
                bound,
                above,
                during,
            } => {
                let s = span(during);
                let mut by = crate::record::ByClass::default();
                for i in record.buckets_in(s.start, s.end) {
                    if let Some(b) = record.sut.get(i) {
                        by.merge(&b.completed);
                    }
                }
                let total = by.total();
                if total == 0 {
                    return Verdict::new(
                        name,
                        false,
                        format!("no SUT request ended {}", phase_words(&s)),
                        None,
                        Some(bound.fraction()),
                    );
                }
                let n = of.count(&by);
                let share = n as f64 / total as f64;
                let passed = if *above {
                    share > bound.fraction()
                } else {
                    share < bound.fraction()
                };
                Verdict::new(
                    name,
                    passed,
                    format!(
                        "{} share was {}% {} ({n} of {total} requests); expected {} {bound}",
                        of.name(),
                        trim2(share * 100.0),
                        phase_words(&s),
                        if *above { "above" } else { "below" }
                    ),
                    Some(share),
                    Some(bound.fraction()),
                )
            }
        }
    }
}

/// The half-open windows of a timeline, each widened backwards by the timeline's resolution (a scraped start is
/// late by up to one interval, and the breaker was open before it, so nothing is wrongly counted) and, when it ends
/// in closing, cut short by the resolution (after a close, returning traffic must not count as probes).
fn half_open_windows(
    t: &BreakerTimeline,
    end_of_run: Duration,
) -> (Vec<(Duration, Duration)>, usize) {
    let mut windows = Vec::new();
    let mut too_short = 0;
    for (start, end) in t.spans_in(BreakerState::HalfOpen, Duration::ZERO, end_of_run) {
        let closes = t.state_at(end) == BreakerState::Closed && end < end_of_run;
        let from = start.saturating_sub(t.resolution);
        if closes && !t.resolution.is_zero() && end - start <= t.resolution * 2 {
            // Closed within about one observation: where the probes end and the returning traffic begins cannot
            // be told at this resolution, so the window is reported, not judged.
            too_short += 1;
            continue;
        }
        let to = if closes {
            end.saturating_sub(t.resolution).max(start)
        } else {
            end
        };
        windows.push((from, to.max(from)));
    }
    (windows, too_short)
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn trim2(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Seconds with one decimal: "7.3 s".
pub fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 && s > 0.0 {
        let ms = s * 1000.0;
        if ms >= 10.0 {
            format!("{ms:.0} ms")
        } else {
            format!("{} ms", trim2(ms))
        }
    } else {
        format!("{:.1} s", s)
    }
}

/// Milliseconds with up to three decimals: "12.3 ms".
pub fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1000.0;
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{} ms", trim2(v))
    }
}

#[cfg(test)]
mod tests;
