//! Expectations on the dependency's name, as faultd's resolver and routes recorded it: how often the service asks
//! for it ("pricing.internal was asked at most 5 times a second during the outage": a service that resolves on
//! every call shows here) and how soon its calls follow a record that moved ("the calls reached `pricing-new`
//! within 10 s after `moved` began").
//!
//! For: reading such an entry (`{ dns: pricing.internal, queries_per_second_at_most: 5, during: outage }`,
//! `{ dns: pricing.internal, moved_within: 10s, after: moved, route: pricing-new }`), resolving its names, and
//! judging it on the record's `dns` and `dependency` series. Not for: answering or counting queries (faultd does)
//! nor the SUT's own answers while resolution fails, which `sut_share` and `sut_latency` with `during:` judge.
//!
//! DNS carries no port, so "the new address" is observed where it is served: the route whose listener the moved
//! record points at (`route`). Its first call after the phase began is the move; a route that was already called
//! before the phase cannot show one, and that verdict is inconclusive rather than a pass.

use std::time::Duration;

use faultline_units::Dur;
use serde::{Deserialize, Serialize};

use super::spec::ExpectationSpec;
use super::words::{secs, trim2};
use super::{ended, phase_words, span, Outcome, Verdict};
use crate::record::RunRecord;

/// The window the query rate is counted over: a second, or one bucket if buckets are longer.
const RATE_WINDOW: Duration = Duration::from_secs(1);

/// Before the phase of a move, how far back a call at the new address makes its arrivals meaningless.
const QUIET_BEFORE: Duration = Duration::from_secs(1);

/// A resolved check on one name faultd resolves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DnsCheck {
    /// The name, as its key in the recording (lower case, no final dot).
    pub name: String,
    pub bound: DnsBound,
}

/// What the name's queries, or the calls after its move, must do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DnsBound {
    /// In every 1 s window of the phase (or the run), at most this many queries per second.
    QueriesPerSecondAtMost {
        at_most: f64,
        during: Option<String>,
    },
    /// The first call at `route` comes within `within` after `after` begins.
    MovedWithin {
        within: Dur,
        after: String,
        route: String,
    },
}

/// A dns check as written, its names not yet resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct DnsEntry<'a> {
    name: &'a str,
    bound: WrittenBound<'a>,
}

#[derive(Debug, Clone, PartialEq)]
enum WrittenBound<'a> {
    Queries {
        at_most: f64,
        during: Option<&'a str>,
    },
    Moved {
        within: Dur,
        after: &'a str,
        route: &'a str,
    },
}

/// Resolves a name a field gives against the scenario (the field, the name), or says why it cannot.
pub type Lookup<'r> = &'r dyn Fn(&str, &str) -> Result<String, String>;

impl<'a> DnsEntry<'a> {
    /// The dns check an entry holds (it names `dns`), or what is wrong with it.
    pub fn read(spec: &'a ExpectationSpec) -> Option<Result<DnsEntry<'a>, String>> {
        let name = spec.dns.as_deref()?;
        let bound = match (spec.queries_per_second_at_most, spec.moved_within) {
            (Some(at_most), None) => {
                if !at_most.is_finite() || at_most < 0.0 {
                    return Some(Err(
                        "`queries_per_second_at_most` must be a non-negative number".into(),
                    ));
                }
                WrittenBound::Queries {
                    at_most,
                    during: spec.during.as_deref(),
                }
            }
            (None, Some(within)) => {
                let Some(after) = spec.after.as_deref() else {
                    return Some(Err("`moved_within` needs `after: <phase>`, the phase whose start the record changes at".into()));
                };
                let Some(route) = spec.route.as_deref() else {
                    return Some(Err("`moved_within` needs `route: <route>`, the route whose listener the moved record points at (DNS carries no port: the new address is observed where it is served)".into()));
                };
                WrittenBound::Moved {
                    within,
                    after,
                    route,
                }
            }
            _ => return Some(Err(
                "a `dns` expectation needs one of `queries_per_second_at_most` or `moved_within`"
                    .into(),
            )),
        };
        Some(Ok(DnsEntry { name, bound }))
    }

    /// The check, its name, phases and route resolved.
    pub fn resolve(
        self,
        dns_name: Lookup<'_>,
        route: Lookup<'_>,
        phase: Lookup<'_>,
    ) -> Result<DnsCheck, String> {
        let bound = match self.bound {
            WrittenBound::Queries { at_most, during } => DnsBound::QueriesPerSecondAtMost {
                at_most,
                during: during.map(|p| phase("during", p)).transpose()?,
            },
            WrittenBound::Moved {
                within,
                after,
                route: r,
            } => DnsBound::MovedWithin {
                within,
                after: phase("after", after)?,
                route: route("route", r)?,
            },
        };
        Ok(DnsCheck {
            name: dns_name("dns", self.name)?,
            bound,
        })
    }
}

impl DnsCheck {
    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        match &self.bound {
            DnsBound::QueriesPerSecondAtMost { at_most, during } => format!(
                "{} queries at most {}/s{}",
                self.name,
                trim2(*at_most),
                super::words::during_words(during)
            ),
            DnsBound::MovedWithin {
                within,
                after,
                route,
            } => format!(
                "{} moved to {route} within {within} after {after}",
                self.name
            ),
        }
    }

    /// Both can be decided while the run goes on.
    pub(crate) fn decidable_live(&self) -> bool {
        true
    }

    /// A rate broken in one window is broken for good, a move seen is seen; the rest wait for their span's end.
    pub(crate) fn decide(&self, name: String, record: &RunRecord) -> Option<Verdict> {
        let v = self.evaluate(name, record);
        match &self.bound {
            DnsBound::QueriesPerSecondAtMost { during, .. } => {
                (v.failed() || ended(record, during)).then_some(v)
            }
            DnsBound::MovedWithin { .. } => Some(v),
        }
    }

    pub(crate) fn evaluate(&self, name: String, record: &RunRecord) -> Verdict {
        let Some(dns) = record.dns.as_ref() else {
            return Verdict::with_outcome(
                name,
                Outcome::Inconclusive,
                "no recording of the dependency's resolver".into(),
                None,
                None,
            );
        };
        let empty = Default::default();
        let series = dns.names.get(&self.name).unwrap_or(&empty);
        match &self.bound {
            DnsBound::QueriesPerSecondAtMost { at_most, during } => {
                self.rate(name, record, &series.buckets, *at_most, during)
            }
            DnsBound::MovedWithin {
                within,
                after,
                route,
            } => self.moved(name, record, &series.buckets, *within, after, route),
        }
    }

    /// Judged on the busiest window of whole buckets one second long (a bucket, if buckets are longer), sliding by
    /// a bucket: "at most N a second" holds in every second, so a burst of re-resolutions when a TTL expires
    /// everywhere at once shows, where a mean over the phase would hide it. The mean is said beside it.
    fn rate(
        &self,
        name: String,
        record: &RunRecord,
        buckets: &[faultd::dns::DnsBucket],
        at_most: f64,
        during: &Option<String>,
    ) -> Verdict {
        let s = span(record, during);
        let end = s.end.min(record.duration);
        let range = record.buckets_in(s.start, end);
        let bound = Some(at_most);
        let count = |i: usize| buckets.get(i).map_or(0, |b| b.total());
        let step = record.bucket.max(Duration::from_nanos(1));
        let width = (RATE_WINDOW.as_nanos().div_ceil(step.as_nanos()) as usize).max(1);
        if range.is_empty() {
            let text = format!("{}: no time recorded {}", self.name, phase_words(&s));
            return Verdict::with_outcome(name, Outcome::Inconclusive, text, None, bound);
        }
        let window = step * width as u32;
        let total: u64 = range.clone().map(count).sum();
        let mean = total as f64 / (step * range.len() as u32).as_secs_f64();
        // A span shorter than the window is one window, its count over its own length.
        let (peak, at, peak_len) = if range.len() <= width {
            (total, range.start, range.len())
        } else {
            let mut best = (0, range.start);
            let mut sum: u64 = (range.start..range.start + width).map(count).sum();
            for first in range.start..=range.end - width {
                if first > range.start {
                    sum = sum + count(first + width - 1) - count(first - 1);
                }
                if sum > best.0 {
                    best = (sum, first);
                }
            }
            (best.0, best.1, width)
        };
        let peak_window = step * peak_len as u32;
        let per_sec = peak as f64 / peak_window.as_secs_f64();
        let from = record.bucket_start(at);
        let text = format!(
            "{} was asked {} in the busiest {} window, {:.1}-{:.1} s ({}/s; {} queries {}, {}/s on average); expected at most {}/s in every {} window",
            self.name,
            times(peak),
            secs(peak_window),
            from.as_secs_f64(),
            (from + peak_window).as_secs_f64(),
            trim2(per_sec),
            total,
            phase_words(&s),
            trim2(mean),
            trim2(at_most),
            secs(window),
        );
        Verdict::new(name, per_sec <= at_most, text, Some(per_sec), bound)
    }

    /// The first call at `route` from the start of `after`: the SUT resolved the moved record and called there.
    fn moved(
        &self,
        name: String,
        record: &RunRecord,
        buckets: &[faultd::dns::DnsBucket],
        within: Dur,
        after: &str,
        route: &str,
    ) -> Verdict {
        let bound = Some(within.as_secs_f64());
        let inconclusive = |text: String| {
            Verdict::with_outcome(name.clone(), Outcome::Inconclusive, text, None, bound)
        };
        let Some(phase) = record.phase(after).filter(|p| p.start < record.duration) else {
            return inconclusive(format!("{after} never began, so {} never moved", self.name));
        };
        let Some(calls) = record.dependency.get(route) else {
            return Verdict::unrecorded(name, route, bound);
        };
        let before =
            record.arrivals_between(route, phase.start.saturating_sub(QUIET_BEFORE), phase.start);
        if before > 0 {
            return inconclusive(format!(
                "{route} took {before} calls in the {} before {after} began, so its calls cannot show that {} moved there",
                secs(QUIET_BEFORE),
                self.name
            ));
        }
        let deadline = phase.start + within.get();
        let first = record
            .buckets_in(phase.start, record.duration)
            .find_map(|i| {
                let b = calls.get(i).filter(|b| b.arrivals > 0)?;
                let start = record.bucket_start(i);
                // A timed arrival places the call within its bucket; without one, the bucket's end is the latest.
                let at = b
                    .first_arrivals
                    .iter()
                    .min()
                    .map_or(start + record.bucket, |off| start + *off);
                Some(at.max(phase.start))
            });
        let asked: u64 = record
            .buckets_in(phase.start, deadline.min(record.duration))
            .filter_map(|i| buckets.get(i))
            .map(|b| b.total())
            .sum();
        let asked = format!("{} was asked {} in that span", self.name, times(asked));
        match first {
            Some(at) => {
                let took = at - phase.start;
                Verdict::new(
                    name,
                    at <= deadline,
                    format!(
                        "the first call reached {route} {} after {after} began ({asked}); expected within {within}",
                        secs(took)
                    ),
                    Some(took.as_secs_f64()),
                    bound,
                )
            }
            None if record.duration < deadline => inconclusive(format!(
                "no call reached {route} in the {} of {after} the run recorded, shorter than {within}",
                secs(record.duration - phase.start)
            )),
            None => {
                let sent = record.sent_in(record.buckets_in(phase.start, deadline));
                if sent == 0 {
                    return inconclusive(format!(
                        "the SUT was sent no request in the {within} after {after} began, so it had no call to move"
                    ));
                }
                Verdict::new(
                    name,
                    false,
                    format!(
                        "no call reached {route} in the {within} after {after} began ({sent} SUT requests; {asked}); expected within {within}"
                    ),
                    None,
                    bound,
                )
            }
        }
    }
}

/// "once", "2 times".
fn times(n: u64) -> String {
    match n {
        1 => "once".to_string(),
        n => format!("{n} times"),
    }
}

#[cfg(test)]
#[path = "dns_tests.rs"]
mod tests;
