//! `result.json`: every figure and verdict of a run, versioned.
//!
//! The schema is documented in docs/result-json.md; bump `RESULT_VERSION` on any change a reader could notice.
//! Durations are seconds and latencies milliseconds, as floating point numbers, so that a reader needs no unit
//! parsing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::breaker::crosscheck::Disagreement;
use crate::breaker::BreakerTimeline;
use crate::expect::{Check, DependencyCheck, Expectation, Verdict};
use crate::record::{HandshakeBucket, LoadHandshakes, OutcomeClass, RunRecord};
use crate::run::{Ending, RunOutput};
use crate::scenario::Validated;

mod build;
mod dns;
pub mod postgres;

pub use build::tls_summary;
pub use dns::{dns_summary, DnsSummary, NameSummary, PhaseQueries};

/// The version of the result.json schema.
pub const RESULT_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResultFile {
    pub version: u32,
    pub scenario: ScenarioInfo,
    /// UTC, RFC 3339.
    pub started_at: String,
    pub ending: Ending,
    pub exit_code: i32,
    /// True when every expectation held and the run itself was sound.
    pub passed: bool,
    pub verdicts: Vec<Verdict>,
    /// Failures of the run itself (conservation of requests, a SUT that died), as sentences.
    pub run_errors: Vec<String>,
    /// What the run's exports (`--metrics-listen`, `--push`) could not do, as sentences. Never changes the verdicts
    /// or the exit code.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_exported: Vec<String>,
    pub phases: Vec<PhaseSummary>,
    pub totals: Totals,
    pub dependency: BTreeMap<String, RouteSummary>,
    /// Calls that reached faultd on no route (answered 404), with the routes there were: a SUT that calls the
    /// wrong path of its dependency shows here. Absent in files written before it was kept.
    #[serde(default)]
    pub unmatched: UnmatchedSummary,
    pub breakers: BTreeMap<String, BreakerSummary>,
    /// The first answer of each outcome class per request template, as the SUT sent it (a gRPC message decoded
    /// by its `.proto` type): HTTP/2 and gRPC runs. Absent in files written before they were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<loadgen::AnswerSample>,
    /// Changes of state that one of a breaker's timelines shows and another does not.
    #[serde(default)]
    pub disagreements: Vec<Disagreement>,
    pub series: Series,
    /// The series of the SUT's own metrics the expectations read (`sut_metric`), by selector, as scraped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sut_metrics: BTreeMap<String, crate::breaker::metrics::MetricSeries>,
    /// The file in the run's folder holding the CA the dependency's TLS certificates were signed with
    /// (`ca.pem`), when the embedded faultd minted one for the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// How many TLS handshakes happened: loadgen's to the SUT and the dependency's, when either spoke TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSummary>,
    /// What the dependency's resolver answered, per name, when the scenario gave it one (`dependency.dns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsSummary>,
    /// The agents that shared the load (`--agents N`), with their clock offsets; absent for one process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributed: Option<crate::agents::Distributed>,
    /// When the dependency was several faultd replicas behind one address: each one's own figures and how far
    /// apart their schedules started. Every other dependency figure is their merge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency_replicas: Option<ReplicasSummary>,
    /// When the run followed each request through the SUT (`correlate:`): the join's totals and the requests
    /// with the most dependency calls (the whole join is in `requests.csv` and `calls.csv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<crate::correlate::summary::FollowedSummary>,
    /// Per dependency route speaking `protocol: postgres`, per entry: its statements per phase.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub postgres: BTreeMap<String, BTreeMap<String, postgres::StatementSummary>>,
}

/// The faultd replicas that served the dependency together.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReplicasSummary {
    /// How many replicas.
    pub count: u32,
    /// The replicas' schedules started at most this many milliseconds apart: from the first start request sent to
    /// the last answer received (each replica set its origin in between). `None` if a start was not timed.
    pub start_spread_ms_at_most: Option<f64>,
    /// Each replica, in the scenario's order.
    pub replicas: Vec<ReplicaSummary>,
}

/// One replica's own figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReplicaSummary {
    /// Its control API.
    pub control: String,
    /// When the request that started its schedule left, in milliseconds from t = 0 (negative: before it).
    pub start_sent_ms: Option<f64>,
    /// When that request's answer arrived, in milliseconds from t = 0.
    pub start_answered_ms: Option<f64>,
    /// Its own origin as Unix milliseconds, by its own clock.
    pub schedule_started_unix_ms: Option<u64>,
    /// Per route: the calls that reached this replica and the most it held at once (exact for the replica).
    pub routes: BTreeMap<String, ReplicaRoute>,
}

/// One route at one replica.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReplicaRoute {
    pub arrivals: u64,
    pub max_in_flight: u64,
}

impl ReplicasSummary {
    /// The replicas of a run, or `None` when the dependency was one faultd.
    pub fn of(replicas: &[crate::run::replicas::ReplicaRecording]) -> Option<ReplicasSummary> {
        if replicas.len() < 2 {
            return None;
        }
        let each: Vec<ReplicaSummary> = replicas
            .iter()
            .map(|r| ReplicaSummary {
                control: r.control.clone(),
                start_sent_ms: r.start.map(|w| w.sent_ms),
                start_answered_ms: r.start.map(|w| w.answered_ms),
                schedule_started_unix_ms: r.recording.schedule_started_unix_ms,
                routes: r
                    .recording
                    .routes
                    .iter()
                    .map(|(name, route)| {
                        (
                            name.clone(),
                            ReplicaRoute {
                                arrivals: route.totals.arrivals,
                                max_in_flight: route.max_in_flight,
                            },
                        )
                    })
                    .collect(),
            })
            .collect();
        let sent = each
            .iter()
            .map(|r| r.start_sent_ms)
            .collect::<Option<Vec<f64>>>();
        let answered = each
            .iter()
            .map(|r| r.start_answered_ms)
            .collect::<Option<Vec<f64>>>();
        let start_spread_ms_at_most = sent.zip(answered).map(|(sent, answered)| {
            let first = sent.iter().copied().fold(f64::INFINITY, f64::min);
            let last = answered.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (last - first).max(0.0)
        });
        Some(ReplicasSummary {
            count: replicas.len() as u32,
            start_spread_ms_at_most,
            replicas: each,
        })
    }

    /// "sum of 2 replicas' peaks, an upper bound": how a merged maximum in flight reads.
    pub fn upper_bound_words(count: u32) -> String {
        format!("sum of {count} replicas' peaks, an upper bound")
    }

    /// "calls in flight peaked at most at 137 (sum of 2 replicas' peaks, an upper bound; at least 70, the busiest
    /// replica alone)": a route's merged peak as the reports word it.
    pub fn peak_words(&self, route: &RouteSummary) -> String {
        format!(
            "calls in flight peaked at most at {} ({}{})",
            route.max_in_flight,
            ReplicasSummary::upper_bound_words(self.count),
            route
                .max_in_flight_at_least
                .map(|n| format!("; at least {n}, the busiest replica alone"))
                .unwrap_or_default()
        )
    }
}

/// The run's TLS handshakes on both sides of the SUT.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TlsSummary {
    /// loadgen's handshakes with the SUT, when the SUT was reached over `https://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadHandshakes>,
    /// The handshakes the dependency's TLS listener took, when it spoke TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<ListenerHandshakes>,
}

/// What one TLS listener of the dependency recorded, over the run and per phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ListenerHandshakes {
    /// The listener: `data`, faultd's data plane, which every HTTP route shares.
    pub listener: String,
    /// Every handshake attempt (every connection that sent a hello), whatever its outcome.
    pub attempts: u64,
    /// Attempts by outcome (`ok`, `resumed`, `expired`, `alert`, `wrong_name`, `untrusted`, `truncated`, ...).
    pub outcomes: BTreeMap<String, u64>,
    /// Attempts the `delay` fault held.
    pub delayed: u64,
    /// The same per phase, by the time each handshake ended.
    pub phases: Vec<PhaseHandshakes>,
}

/// One phase's handshakes at a listener.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PhaseHandshakes {
    pub name: String,
    pub attempts: u64,
    pub outcomes: BTreeMap<String, u64>,
    pub delayed: u64,
}

/// The name of faultd's data listener in the report: TLS wraps the data plane as a whole, so its handshakes are
/// counted per listener, not per route.
pub const DATA_LISTENER: &str = "data";

/// The name of the run's CA file in the report folder.
pub const CA_FILE: &str = "ca.pem";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScenarioInfo {
    pub name: String,
    pub description: Option<String>,
    pub file: String,
    pub seed: Option<u64>,
    pub time_scale: f64,
    /// Seconds, after time scaling.
    pub duration_s: f64,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles::default();
        }
        let ms = |v: u64| v as f64 / 1e6;
        Percentiles {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.5)),
            p90_ms: ms(h.value_at_quantile(0.9)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PhaseSummary {
    pub name: String,
    pub start_s: f64,
    pub end_s: f64,
    /// Requests per second the schedule offered during the phase.
    pub offered_rate: f64,
    /// Requests per second that completed during the phase.
    pub achieved_rate: f64,
    /// SUT latency from the intended send time (corrected), requests that got an answer.
    pub sut_latency: Percentiles,
    /// SUT service time from the actual send (uncorrected).
    pub sut_service_time: Percentiles,
    /// Outcomes of the requests scheduled in the phase.
    pub outcomes: BTreeMap<String, u64>,
    /// Most calls in flight at each dependency route during the phase.
    pub dependency_max_in_flight: BTreeMap<String, u64>,
    /// The latency faultd served on each route during the phase.
    pub dependency_latency: BTreeMap<String, Percentiles>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Totals {
    pub intended: u64,
    pub sent: u64,
    pub outcomes: BTreeMap<String, u64>,
    pub still_in_flight: u64,
    pub conserved: bool,
    /// The `connect_error` class by reason (a refused connect, a failed TLS handshake such as `tls: certificate
    /// expired`, a broken exchange), when there were any.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub connect_errors: BTreeMap<String, u64>,
    /// How late the load generator itself was in sending (a host stall, a starved runtime), over the requests that
    /// got an answer or a timeout; left out of every SUT latency. Absent in files written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_late: Option<GeneratorLate>,
}

/// The load generator's own lateness: from a request's intended send time to when the generator was ready to send
/// it, not counting a wait for a connection the SUT was still using (that is the SUT's, and in its latency).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct GeneratorLate {
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The load's `coalesce` window, when the scenario widened it past loadgen's default: up to this much of the
    /// lateness was the pacing the scenario chose, not a stall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesce_ms: Option<f64>,
}

impl GeneratorLate {
    /// Over every request of `load` that was sent; `None` when nothing was, or the recording predates the measure.
    pub fn of(load: &loadgen::Recording) -> Option<GeneratorLate> {
        let late = load.histogram(loadgen::Measure::Late, None, |o| {
            o != loadgen::Outcome::Dropped
        });
        p99_and_max(&late).map(|(p99_ms, max_ms)| GeneratorLate {
            p99_ms,
            max_ms,
            coalesce_ms: None,
        })
    }

    /// Notes the load's `coalesce` window when it is wider than loadgen's default, whose lateness is a wake-up's.
    pub fn with_window(mut self, coalesce: std::time::Duration) -> GeneratorLate {
        self.coalesce_ms =
            (coalesce > loadgen::DEFAULT_COALESCE).then_some(coalesce.as_secs_f64() * 1e3);
        self
    }

    /// How the reports say it, beside the latencies it was left out of.
    pub fn words(&self) -> String {
        let window = self.coalesce_ms.map_or(String::new(), |c| {
            format!(" (up to {c:.2} ms of it by choice: the scenario's load.coalesce window)")
        });
        format!(
            "the load generator's own lateness in sending, left out of these latencies: p99 {:.2} ms, max {:.2} ms{window}",
            self.p99_ms, self.max_ms
        )
    }

    /// The sentence under a latency table of the HTML page and the CI step summary.
    pub fn note(&self) -> String {
        format!(
            "Latencies are from the intended send time; {}.",
            self.words()
        )
    }
}

/// The p99 and maximum of a histogram of nanoseconds, in ms; `None` when it is empty.
fn p99_and_max(h: &hdrhistogram::Histogram<u64>) -> Option<(f64, f64)> {
    (!h.is_empty()).then(|| (h.value_at_quantile(0.99) as f64 / 1e6, h.max() as f64 / 1e6))
}

/// faultd's own lateness on a route: how long after its answer was due (arrival plus the delay drawn) each call
/// left, over the calls answered whole when their delay ended. A host stall or a starved runtime shows here, and
/// in the served latency, where it is not the scenario's.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct FaultdLate {
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl FaultdLate {
    /// Over every phase of `route`; `None` when no call was timed, or the recording predates the measure.
    pub fn of(route: &faultd::RouteRecording) -> Option<FaultdLate> {
        let mut all = faultline_hdr::new_histogram();
        for h in route.late.values() {
            // Histograms of one codec add; one that did not would only leave the figure short.
            let _ = all.add(h);
        }
        p99_and_max(&all).map(|(p99_ms, max_ms)| FaultdLate { p99_ms, max_ms })
    }

    /// How the reports say it, after the route's name.
    pub fn words(&self) -> String {
        format!(
            "faultd's own lateness in answering, part of its served latency: p99 {:.2} ms, max {:.2} ms",
            self.p99_ms, self.max_ms
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RouteSummary {
    pub arrivals: u64,
    /// The most calls faultd held at once; over several replicas the sum of their own peaks, an upper bound.
    pub max_in_flight: u64,
    /// True when `max_in_flight` (and every other maximum in flight of the route in this file) is such a sum.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub max_in_flight_is_upper_bound: bool,
    /// With several replicas: the most calls one replica held at once, which the true maximum is at least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight_at_least: Option<u64>,
    /// The pool limit the scenario's in-flight expectations put on the route (the tightest), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_limit: Option<PoolLimit>,
    /// faultd's own lateness in answering the route's calls; absent when none was timed, and in files written
    /// before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faultd_late: Option<FaultdLate>,
    /// Per instance of a route served by several (`instances: N`), instance 1 first; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceSummary>,
}

/// One instance of a dependency route over the run, as faultd measured it at the instance's own listener.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct InstanceSummary {
    /// Calls (on a TCP route, connections) that reached the instance.
    pub arrivals: u64,
    /// The most calls the instance held at once.
    pub max_in_flight: u64,
}

/// Calls that matched no route of the dependency.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UnmatchedSummary {
    /// Calls that matched no route, over the run.
    pub calls: u64,
    /// Their methods and paths with the most calls, at most 20, most first.
    pub paths: Vec<faultd::UnmatchedPath>,
    /// The HTTP routes there were, as `NAME METHOD PATTERN` (`*` for any method).
    pub routes: Vec<String>,
    /// The upstream they were forwarded to (`dependency.unmatched.proxy`); absent when they were answered 404.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_to: Option<String>,
}

impl UnmatchedSummary {
    /// The unmatched calls of a recording, beside the routes of the configuration it was recorded under.
    pub fn of(recording: &faultd::Recording, config: &faultd::Config) -> UnmatchedSummary {
        UnmatchedSummary {
            calls: recording.unmatched,
            paths: recording.unmatched_paths.clone(),
            routes: config
                .routes
                .iter()
                .filter(|(_, r)| r.tcp.is_none())
                .map(|(name, r)| {
                    format!("{name} {} {}", r.method.as_deref().unwrap_or("*"), r.path)
                })
                .collect(),
            forwarded_to: config
                .unmatched
                .as_ref()
                .and_then(|u| u.proxy())
                .map(|p| p.url().to_string()),
        }
    }

    /// What became of the calls, for a sentence: "answered 404" or "forwarded to URL".
    pub fn fate(&self) -> String {
        match &self.forwarded_to {
            Some(url) => format!("forwarded to {url}"),
            None => "answered 404".to_string(),
        }
    }

    /// The warning a run with unmatched calls ends with: how many, where they went, and the routes there were.
    pub fn warning(&self) -> Option<String> {
        if self.calls == 0 {
            return None;
        }
        let shown: Vec<String> = self
            .paths
            .iter()
            .take(5)
            .map(|p| format!("{} {} ({})", p.method, p.path, p.calls))
            .collect();
        let more = if self.paths.len() > shown.len()
            || self.paths.iter().map(|p| p.calls).sum::<u64>() < self.calls
        {
            ", ..."
        } else {
            ""
        };
        let routes = if self.routes.is_empty() {
            "none".to_string()
        } else {
            self.routes.join("; ")
        };
        Some(match &self.forwarded_to {
            // Forwarding them was asked for: a note of where they went, not a warning.
            Some(_) => format!(
                "note: {} calls to the dependency matched no route and were {}, without faults: {}{more}. The \
                 routes are: {routes}.",
                self.calls,
                self.fate(),
                shown.join(", "),
            ),
            None => format!(
                "warning: {} calls to the dependency matched no route and were answered 404: {}{more}. The \
                 routes are: {routes}. Check the URL and path the SUT calls its dependency with.",
                self.calls,
                shown.join(", "),
            ),
        })
    }
}

/// The limit a `max_in_flight_below` / `max_in_flight_at_most` expectation puts on a route's calls in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolLimit {
    /// The bound, in calls.
    pub bound: u64,
    /// True for "at or under" (`max_in_flight_at_most`), false for "below".
    pub inclusive: bool,
}

impl PoolLimit {
    /// The most calls in flight the limit allows.
    fn allows(self) -> u64 {
        if self.inclusive {
            self.bound
        } else {
            self.bound.saturating_sub(1)
        }
    }
}

/// The pool limit per route from the in-flight expectations. With several on one route the tightest wins,
/// whatever the phase each one is about.
pub fn pool_limits(expectations: &[Expectation]) -> BTreeMap<String, PoolLimit> {
    let mut limits: BTreeMap<String, PoolLimit> = BTreeMap::new();
    for e in expectations {
        let Check::Dependency(DependencyCheck::MaxInFlight {
            route,
            bound,
            inclusive,
            ..
        }) = &e.check
        else {
            continue;
        };
        let limit = PoolLimit {
            bound: *bound,
            inclusive: *inclusive,
        };
        limits
            .entry(route.clone())
            .and_modify(|l| {
                if limit.allows() < l.allows() {
                    *l = limit
                }
            })
            .or_insert(limit);
    }
    limits
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BreakerSummary {
    /// The timeline the verdicts time transitions with: the finest of the breaker's sources.
    pub observed: BreakerTimeline,
    /// The timeline inferred from traffic, for comparison, where the breaker's route is known.
    pub inferred: Option<BreakerTimeline>,
    /// Every timeline of the breaker's own sources, when it has more than one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<BreakerTimeline>,
}

/// The time series behind the charts, one value per bucket.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Series {
    pub bucket_s: f64,
    pub offered: Vec<u64>,
    pub completed: BTreeMap<String, Vec<u64>>,
    pub sut_in_flight: Vec<u64>,
    pub p50_ms: Vec<Option<f64>>,
    pub p90_ms: Vec<Option<f64>>,
    pub p99_ms: Vec<Option<f64>>,
    pub max_ms: Vec<Option<f64>>,
    pub dependency_arrivals: BTreeMap<String, Vec<u64>>,
    pub dependency_in_flight: BTreeMap<String, Vec<u64>>,
    /// TLS handshakes that ended at the dependency's listener per bucket, by outcome (outcomes never seen are left
    /// out); empty without TLS.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub handshakes: BTreeMap<String, Vec<u64>>,
    /// Calls that reached each instance per bucket, per route served by instances (instance 1 first); empty when
    /// no route has instances.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instance_arrivals: BTreeMap<String, Vec<Vec<u64>>>,
}
