//! Expectations on the traffic at the dependency, as faultd measured it: calls in flight stay under the pool
//! (seed 000's 200 connections; on a TCP route, connections open; on HTTP/2, streams in flight), the call rate
//! while the breaker is open stays low enough for the dependency to recover, calls per SUT request stay under a
//! retry budget, and how many gRPC calls ended with a given status.
//!
//! Not for what the SUT claims about itself: every figure here is counted at the dependency.

use std::time::Duration;

use faultline_units::{Dur, GrpcCode, Rate};
use serde::{Deserialize, Serialize};

use super::sut::{window_words, windows};
use super::words::{during_words, secs, trim, trim2};
use super::{ended, phase_words, span, timeline, Outcome, Verdict};
use crate::breaker::BreakerState;
use crate::record::{DependencyBucket, PhaseSpan, RunRecord};

/// A check on one dependency route, or on the calls that matched none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DependencyCheck {
    MaxInFlight {
        route: String,
        bound: u64,
        inclusive: bool,
        during: Option<String>,
        /// What the scenario called the calls (`max_connections_*`, `max_streams_in_flight_*`): the words say it.
        #[serde(default, skip_serializing_if = "Counted::is_calls")]
        counted: Counted,
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
    /// TLS handshake attempts at the dependency's listener (the one `route` is served on) per SUT request, over the
    /// span or over every window of `over` inside it.
    HandshakeAmplification {
        route: String,
        at_most: f64,
        during: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        over: Option<Dur>,
    },
    /// gRPC calls at the route that ended with `code`: at least or at most `bound`.
    GrpcStatus {
        route: String,
        code: GrpcCode,
        bound: u64,
        at_least: bool,
        during: Option<String>,
    },
    /// Calls that reached the dependency on no route (a path the scenario's routes do not cover), over the run.
    Unmatched { at_most: u64 },
}

/// What one call in flight at a route is, in the scenario's words: faultd counts each the same way (a TCP route's
/// call is a connection, an HTTP/2 stream is a call), so the check is one and only its sentence differs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Counted {
    #[default]
    Calls,
    Connections,
    Streams,
}

impl Counted {
    fn is_calls(&self) -> bool {
        *self == Counted::Calls
    }

    fn words(self) -> &'static str {
        match self {
            Counted::Calls => "calls in flight",
            Counted::Connections => "connections open",
            Counted::Streams => "streams in flight",
        }
    }
}

impl DependencyCheck {
    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        match self {
            DependencyCheck::MaxInFlight {
                route,
                bound,
                inclusive,
                during,
                counted,
            } => format!(
                "{} at {route} stay {} {bound}{}",
                counted.words(),
                if *inclusive { "at or under" } else { "below" },
                during_words(during)
            ),
            DependencyCheck::RateWhileOpen {
                route,
                breaker,
                below,
            } => format!("{route} receives under {below} while {breaker} is open"),
            DependencyCheck::Amplification {
                route,
                at_most,
                during,
            } => format!(
                "calls at {route} per SUT request stay at or under {at_most}{}",
                during_words(during)
            ),
            DependencyCheck::HandshakeAmplification {
                route,
                at_most,
                during,
                over,
            } => format!(
                "TLS handshakes at {route}'s listener per SUT request stay at or under {at_most}{}{}",
                over.map(|w| format!(" over every {w} window"))
                    .unwrap_or_default(),
                during_words(during)
            ),
            DependencyCheck::GrpcStatus {
                route,
                code,
                bound,
                at_least,
                during,
            } => format!(
                "gRPC calls at {route} ending {code} number {} {bound}{}",
                if *at_least { "at least" } else { "at most" },
                during_words(during)
            ),
            DependencyCheck::Unmatched { at_most } => {
                format!("calls on no route of the dependency number at most {at_most}")
            }
        }
    }

    /// The rate while open spans every open window of the run: judged after it. Amplification only over a phase.
    pub(crate) fn decidable_live(&self) -> bool {
        match self {
            DependencyCheck::MaxInFlight { .. } => true,
            DependencyCheck::RateWhileOpen { .. } => false,
            DependencyCheck::Amplification { during, .. } => during.is_some(),
            DependencyCheck::HandshakeAmplification { during, over, .. } => {
                during.is_some() || over.is_some()
            }
            DependencyCheck::GrpcStatus { .. } => true,
            DependencyCheck::Unmatched { .. } => true,
        }
    }

    /// The verdict once no later data can change it.
    pub(crate) fn decide(&self, name: String, record: &RunRecord) -> Option<Verdict> {
        let decided = |v: &Verdict| match self {
            // A peak once reached stays reached.
            DependencyCheck::MaxInFlight { during, .. } => !v.passed || ended(record, during),
            DependencyCheck::RateWhileOpen { .. } => false,
            DependencyCheck::Amplification { during, .. } => ended(record, during),
            // A window over the bound stays over it; otherwise the span must be over.
            DependencyCheck::HandshakeAmplification { during, over, .. } => {
                (over.is_some() && !v.passed && v.measured.is_some()) || ended(record, during)
            }
            // A count only grows: once over an upper bound, or at a lower one, no later call changes it.
            DependencyCheck::GrpcStatus {
                at_least, during, ..
            } => v.passed == *at_least || ended(record, during),
            DependencyCheck::Unmatched { .. } => !v.passed,
        };
        if !self.decidable_live() {
            return None;
        }
        let v = self.evaluate(name, record);
        decided(&v).then_some(v)
    }

    /// Evaluates the check on a record.
    pub(crate) fn evaluate(&self, name: String, record: &RunRecord) -> Verdict {
        match self {
            DependencyCheck::MaxInFlight {
                route,
                bound,
                inclusive,
                during,
                counted,
            } => max_in_flight(name, record, route, *bound, *inclusive, during, *counted),
            DependencyCheck::RateWhileOpen {
                route,
                breaker,
                below,
            } => rate_while_open(name, record, route, breaker, below),
            DependencyCheck::Amplification {
                route,
                at_most,
                during,
            } => amplification(name, record, route, *at_most, during),
            DependencyCheck::HandshakeAmplification {
                route,
                at_most,
                during,
                over,
            } => handshake_amplification(name, record, route, *at_most, during, over),
            DependencyCheck::GrpcStatus {
                route,
                code,
                bound,
                at_least,
                during,
            } => grpc_status(name, record, route, code, (*bound, *at_least), during),
            DependencyCheck::Unmatched { at_most } => unmatched(name, record, *at_most),
        }
    }
}

/// The dependency's call rate while `breaker` was open, its first bucket of each open span skipped.
fn rate_while_open(
    name: String,
    record: &RunRecord,
    route: &str,
    breaker: &str,
    below: &Rate,
) -> Verdict {
    let Some(series) = record.dependency.get(route) else {
        return Verdict::unrecorded(name, route, Some(below.per_sec()));
    };
    let spans =
        timeline(record, breaker).spans_in(BreakerState::Open, Duration::ZERO, record.duration);
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
        .map(|&(a, b)| record.bucket * record.buckets_in(a + record.bucket, b).len() as u32)
        .sum();
    let rate = if measured_time.is_zero() {
        0.0
    } else {
        calls as f64 / measured_time.as_secs_f64()
    };
    Verdict::new(name, rate < below.per_sec(), format!("{route} received {calls} calls in {} while breaker {breaker} was open ({}/s); expected below {below}", secs(measured_time), trim(rate)), Some(rate), Some(below.per_sec()))
}

/// Calls at `route` per request sent to the SUT.
fn amplification(
    name: String,
    record: &RunRecord,
    route: &str,
    at_most: f64,
    during: &Option<String>,
) -> Verdict {
    let s = span(record, during);
    let Some(series) = record.dependency.get(route) else {
        return Verdict::unrecorded(name, route, Some(at_most));
    };
    let range = record.buckets_in(s.start, s.end);
    let calls: u64 = range
        .clone()
        .filter_map(|i| series.get(i))
        .map(|b| b.arrivals)
        .sum();
    let sent = record.sent_in(range);
    let what = format!("{route} received {calls} calls for {sent} SUT requests");
    per_request(name, &s, calls, sent, at_most, what)
}

/// TLS handshake attempts at the dependency's listener per request sent to the SUT, whole or in the worst window.
fn handshake_amplification(
    name: String,
    record: &RunRecord,
    route: &str,
    at_most: f64,
    during: &Option<String>,
    over: &Option<Dur>,
) -> Verdict {
    let s = span(record, during);
    if record.handshakes.is_none() {
        return Verdict::new(
                name,
                false,
                format!("no TLS handshakes were recorded at {route}'s listener: the dependency does not speak TLS; expected at most {at_most} per SUT request"),
                None,
                Some(at_most),
            );
    }
    let ratio_words = |attempts: u64, sent: u64| {
        format!("{route}'s TLS listener took {attempts} handshake attempts for {sent} SUT requests")
    };
    let Some(w) = over else {
        let range = record.buckets_in(s.start, s.end);
        let attempts = record.handshakes_in(range.clone());
        let sent = record.sent_in(range);
        return per_request(
            name,
            &s,
            attempts,
            sent,
            at_most,
            ratio_words(attempts, sent),
        );
    };
    // The worst window decides; a window in which the SUT was sent nothing has no ratio.
    let (ranges, _) = windows(record, &s, w.get());
    let worst = ranges
        .into_iter()
        .filter_map(|r| {
            let sent = record.sent_in(r.clone());
            (sent > 0).then(|| (record.handshakes_in(r.clone()), sent, r))
        })
        .max_by(|a, b| (a.0 as f64 / a.1 as f64).total_cmp(&(b.0 as f64 / b.1 as f64)));
    let Some((attempts, sent, r)) = worst else {
        return Verdict::new(
            name,
            false,
            format!(
                "no {w} window {} had a request sent to the SUT",
                phase_words(&s)
            ),
            None,
            Some(at_most),
        );
    };
    let ratio = attempts as f64 / sent as f64;
    Verdict::new(name, ratio <= at_most, format!("{} in the worst {w} window {}, {} ({} per request); expected at most {at_most} in every {w} window", ratio_words(attempts, sent), phase_words(&s), window_words(record, &r), trim2(ratio)), Some(ratio), Some(at_most))
}

/// gRPC calls at `route` that ended with `code`, against a bound.
fn grpc_status(
    name: String,
    record: &RunRecord,
    route: &str,
    code: &GrpcCode,
    (bound, at_least): (u64, bool),
    during: &Option<String>,
) -> Verdict {
    let s = span(record, during);
    let Some(series) = record.dependency.get(route) else {
        return Verdict::unrecorded(name, route, Some(bound as f64));
    };
    let range = record.buckets_in(s.start, s.end);
    let (mut matching, mut all) = (0_u64, 0_u64);
    for b in range.filter_map(|i| series.get(i)) {
        matching += b.grpc_status.get(code.name()).copied().unwrap_or(0);
        all += b.grpc_status.values().sum::<u64>();
    }
    let passed = if at_least {
        matching >= bound
    } else {
        matching <= bound
    };
    Verdict::new(
        name,
        passed,
        format!(
            "{matching} of {all} gRPC calls at {route} ended {code} {}; expected {} {bound}",
            phase_words(&s),
            if at_least { "at least" } else { "at most" }
        ),
        Some(matching as f64),
        Some(bound as f64),
    )
}

/// Calls that matched no route against a bound, with the methods and paths most called: where a SUT that calls a
/// path the scenario does not cover is calling.
fn unmatched(name: String, record: &RunRecord, at_most: u64) -> Verdict {
    let n = record.unmatched;
    let found = if n == 0 {
        "no call reached the dependency on a path no route matches".to_string()
    } else {
        let paths: Vec<String> = record
            .unmatched_paths
            .iter()
            .take(3)
            .map(|p| format!("{} {} ({})", p.method, p.path, p.calls))
            .collect();
        let more = if record.unmatched_paths.len() > paths.len() {
            ", ..."
        } else {
            ""
        };
        format!(
            "{n} call{} reached the dependency on no route ({}{more})",
            if n == 1 { "" } else { "s" },
            paths.join(", ")
        )
    };
    Verdict::new(
        name,
        n <= at_most,
        format!("{found}; expected at most {at_most}"),
        Some(n as f64),
        Some(at_most as f64),
    )
}

/// Calls in flight at `route` against the pool's bound. From one faultd the peak is exact. From several replicas the
/// true peak lies between the busiest replica's own and the sum of every replica's (their peaks need not have
/// coincided): the sum under the bound passes, one replica alone over it fails, and in between the verdict is
/// inconclusive, since nothing recorded can tell.
fn max_in_flight(
    name: String,
    record: &RunRecord,
    route: &str,
    bound: u64,
    inclusive: bool,
    during: &Option<String>,
    counted: Counted,
) -> Verdict {
    let s = span(record, during);
    let what = counted.words();
    let Some(series) = record.dependency.get(route) else {
        return Verdict::unrecorded(name, route, Some(bound as f64));
    };
    let range = record.buckets_in(s.start, s.end);
    let peak_of = |of: fn(&DependencyBucket) -> u64| {
        range
            .clone()
            .filter_map(|i| series.get(i).map(|b| (of(b), i)))
            .max_by_key(|&(v, i)| (v, std::cmp::Reverse(i)))
            .unwrap_or((0, 0))
    };
    let allowed = |n: u64| if inclusive { n <= bound } else { n < bound };
    let when = |(peak, at): (u64, usize)| {
        if peak > 0 {
            format!(" at {}", secs(record.bucket_start(at)))
        } else {
            String::new()
        }
    };
    let expected = format!(
        "expected {} {bound}",
        if inclusive { "at or under" } else { "below" }
    );
    let (peak, at) = peak_of(|b| b.in_flight_max);
    if !record.in_flight_is_upper_bound() {
        return Verdict::new(
            name,
            allowed(peak),
            format!(
                "{what} at {route} peaked at {peak}{} {}; {expected}",
                when((peak, at)),
                phase_words(&s)
            ),
            Some(peak as f64),
            Some(bound as f64),
        );
    }
    let n = record.dependency_replicas;
    let sum = format!("sum of {n} replicas' peaks, an upper bound");
    let (least, least_at) = peak_of(|b| b.in_flight_max_at_least.unwrap_or(b.in_flight_max));
    if allowed(peak) {
        Verdict::new(
            name,
            true,
            format!(
                "{what} at {route} peaked at most at {peak}{} ({sum}) {}; {expected}",
                when((peak, at)),
                phase_words(&s)
            ),
            Some(peak as f64),
            Some(bound as f64),
        )
    } else if !allowed(least) {
        Verdict::new(
            name,
            false,
            format!(
                "{what} at {route} peaked at {least} at one replica alone{} (the sum of {n} replicas' peaks is {peak}) {}; {expected}",
                when((least, least_at)),
                phase_words(&s)
            ),
            Some(least as f64),
            Some(bound as f64),
        )
    } else {
        Verdict::with_outcome(
            name,
            Outcome::Inconclusive,
            format!(
                "{what} at {route} peaked at most at {peak}{} ({sum}) and at least at {least} (the busiest replica alone) {}; {expected}, which lies between the two: the replicas' peaks may or may not have coincided",
                when((peak, at)),
                phase_words(&s)
            ),
            None,
            Some(bound as f64),
        )
    }
}

/// A count at the dependency (`what` says of what, with the figures) per SUT request sent over the span, against
/// `at_most`; a span in which the SUT was sent nothing has no ratio and fails.
pub(super) fn per_request(
    name: String,
    s: &PhaseSpan,
    counted: u64,
    sent: u64,
    at_most: f64,
    what: String,
) -> Verdict {
    if sent == 0 {
        return Verdict::new(
            name,
            false,
            format!("no requests were sent to the SUT {}", phase_words(s)),
            None,
            Some(at_most),
        );
    }
    let ratio = counted as f64 / sent as f64;
    Verdict::new(
        name,
        ratio <= at_most,
        format!(
            "{what} {} ({} per request); expected at most {at_most}",
            phase_words(s),
            trim2(ratio)
        ),
        Some(ratio),
        Some(at_most),
    )
}
