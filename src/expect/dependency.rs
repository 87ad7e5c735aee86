//! Expectations on the traffic at the dependency, as faultd measured it: calls in flight stay under the pool
//! (seed 000's 200 connections), the call rate while the breaker is open stays low enough for the dependency to
//! recover, and calls per SUT request stay under a retry budget.
//!
//! Not for what the SUT claims about itself: every figure here is counted at the dependency.

use std::time::Duration;

use faultline_units::Rate;
use serde::{Deserialize, Serialize};

use super::words::{during_words, secs, trim, trim2};
use super::{ended, phase_words, span, timeline, Verdict};
use crate::breaker::BreakerState;
use crate::record::{OutcomeClass, RunRecord};

/// A check on one dependency route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DependencyCheck {
    MaxInFlight {
        route: String,
        bound: u64,
        inclusive: bool,
        during: Option<String>,
        /// Written `max_connections_*` (a TCP route, whose calls are connections): the words say connections open.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        connections: bool,
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
                connections,
            } => format!(
                "{} at {route} stay {} {bound}{}",
                if *connections {
                    "connections open"
                } else {
                    "calls in flight"
                },
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
        }
    }

    /// The rate while open spans every open window of the run: judged after it. Amplification only over a phase.
    pub(crate) fn decidable_live(&self) -> bool {
        match self {
            DependencyCheck::MaxInFlight { .. } => true,
            DependencyCheck::RateWhileOpen { .. } => false,
            DependencyCheck::Amplification { during, .. } => during.is_some(),
        }
    }

    /// The verdict once no later data can change it.
    pub(crate) fn decide(&self, name: String, record: &RunRecord) -> Option<Verdict> {
        let decided = |v: &Verdict| match self {
            // A peak once reached stays reached.
            DependencyCheck::MaxInFlight { during, .. } => !v.passed || ended(record, during),
            DependencyCheck::RateWhileOpen { .. } => false,
            DependencyCheck::Amplification { during, .. } => ended(record, during),
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
                connections,
            } => {
                let s = span(record, during);
                let what = if *connections {
                    "connections open"
                } else {
                    "calls in flight"
                };
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
                        "{what} at {route} peaked at {peak}{when} {}; expected {} {bound}",
                        phase_words(&s),
                        if *inclusive { "at or under" } else { "below" }
                    ),
                    Some(peak as f64),
                    Some(*bound as f64),
                )
            }
            DependencyCheck::RateWhileOpen {
                route,
                breaker,
                below,
            } => {
                let Some(series) = record.dependency.get(route) else {
                    return Verdict::unrecorded(name, route, Some(below.per_sec()));
                };
                let spans = timeline(record, breaker).spans_in(
                    BreakerState::Open,
                    Duration::ZERO,
                    record.duration,
                );
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
            DependencyCheck::Amplification {
                route,
                at_most,
                during,
            } => {
                let s = span(record, during);
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
        }
    }
}
