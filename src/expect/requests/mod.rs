//! Expectations judged per SUT request, on the join of loadgen's requests with the dependency calls each one
//! caused (`crate::correlate`): retries per request, the spacing of retries and its jitter, calls started after
//! the caller gave up, work wasted on callers that had gone, deadlines propagated, hedges per request and how soon
//! a losing hedge is cancelled. Each verdict carries the distribution of its per-request figure (p50, p99, max)
//! and the worst requests by trace id.
//!
//! Without propagation (no call at the route carries the trace id of a request of the run) every one is
//! inconclusive, with that reason: the join cannot be guessed. Not for the join itself, nor for the per-request
//! figures (`figures`).

mod figures;

use faultline_units::{Dur, Share};
use serde::{Deserialize, Serialize};

use super::words::{during_words, trim2};
use super::{phase_words, span, Outcome, Verdict};
use crate::correlate::{Followed, Join};
use crate::record::RunRecord;
use figures::Judged;

/// The tolerance of `deadline_propagated`: the transit from loadgen to the SUT and from the SUT to faultd, which a
/// loaded host stretches to a few milliseconds, is no SUT's to subtract from the budget it passes on.
pub const DEADLINE_TOLERANCE_MS: f64 = 10.0;

/// How many of the worst requests a verdict names.
const WORST: usize = 5;

/// The bound of one check of the family, as written.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PerRequestBound {
    RetriesPerRequestAtMost(u32),
    RetrySpacingAtLeast(Dur),
    RetryJitterAtLeast(Share),
    CallsAfterGiveUpAtMost(u64),
    WastedWorkBelow(Share),
    DeadlinePropagated,
    HedgesPerRequestAtMost(u32),
    HedgesCancelledWithin(Dur),
}

/// The field that names each check of the family, for `entry::CHECKS`.
pub const FIELDS: [&str; 8] = [
    "retries_per_request_at_most",
    "retry_spacing_at_least",
    "retry_jitter_at_least",
    "calls_after_give_up_at_most",
    "wasted_work_below",
    "deadline_propagated",
    "hedges_per_request_at_most",
    "hedges_cancelled_within",
];

/// An entry of the family as written: its bound and phase, the route beside it in `Entry`.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestsEntry<'a> {
    pub bound: PerRequestBound,
    pub during: Option<&'a str>,
}

impl<'a> RequestsEntry<'a> {
    /// The entry when `spec` holds a check of this family (`None` otherwise), or what is wrong with it.
    pub fn read(spec: &'a super::ExpectationSpec) -> Option<Result<RequestsEntry<'a>, String>> {
        use PerRequestBound as B;
        let bound = if let Some(n) = spec.retries_per_request_at_most {
            B::RetriesPerRequestAtMost(n)
        } else if let Some(d) = spec.retry_spacing_at_least {
            B::RetrySpacingAtLeast(d)
        } else if let Some(s) = spec.retry_jitter_at_least {
            B::RetryJitterAtLeast(s)
        } else if let Some(n) = spec.calls_after_give_up_at_most {
            B::CallsAfterGiveUpAtMost(n)
        } else if let Some(s) = spec.wasted_work_below {
            B::WastedWorkBelow(s)
        } else if let Some(p) = spec.deadline_propagated {
            if !p {
                return Some(Err("`deadline_propagated` takes `true` (a deadline not propagated is not a bound to hold): remove the entry or write `true`".into()));
            }
            B::DeadlinePropagated
        } else if let Some(n) = spec.hedges_per_request_at_most {
            B::HedgesPerRequestAtMost(n)
        } else if let Some(d) = spec.hedges_cancelled_within {
            B::HedgesCancelledWithin(d)
        } else {
            return None;
        };
        Some(Ok(RequestsEntry {
            bound,
            during: spec.during.as_deref(),
        }))
    }
}

/// A check on the calls each SUT request caused at one route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestsCheck {
    pub route: String,
    pub bound: PerRequestBound,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub during: Option<String>,
}

/// The distribution of a verdict's per-request figure, and the requests that fared worst.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerRequest {
    /// What the figure is, with its unit: "retries", "ms from the previous call's end", ...
    pub figure: String,
    /// How many requests had the figure (those the check could judge).
    pub requests: u64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    /// The worst requests, worst first.
    pub worst: Vec<Offender>,
}

/// One of the worst requests of a verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offender {
    /// Its trace id, 32 hex digits, as `requests.csv` and the SUT's own traces have it.
    pub trace_id: String,
    pub figure: f64,
    /// What the figure was made of, in a few words.
    pub what: String,
}

impl RequestsCheck {
    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        use PerRequestBound as B;
        let what = match self.bound {
            B::RetriesPerRequestAtMost(n) => format!("at most {n} retries per request"),
            B::RetrySpacingAtLeast(d) => format!("retries spaced at least {d}"),
            B::RetryJitterAtLeast(s) => format!("retry jitter at least {s}"),
            B::CallsAfterGiveUpAtMost(n) => format!("at most {n} calls after the caller gave up"),
            B::WastedWorkBelow(s) => format!("wasted work below {s}"),
            B::DeadlinePropagated => "deadline propagated".to_string(),
            B::HedgesPerRequestAtMost(n) => format!("at most {n} hedges per request"),
            B::HedgesCancelledWithin(d) => format!("losing hedges cancelled within {d}"),
        };
        format!("{} calls: {what}{}", self.route, during_words(&self.during))
    }

    /// Judged on the whole join, after the run.
    pub(crate) fn decidable_live(&self) -> bool {
        false
    }

    /// Evaluates the check on the record's join.
    pub(crate) fn evaluate(&self, name: String, record: &RunRecord) -> Verdict {
        let s = span(record, &self.during);
        let where_ = phase_words(&s);
        let Some(join) = record.requests.as_deref() else {
            return inconclusive(
                name,
                format!(
                    "{} {where_}: the run did not follow its requests (no `correlate:`)",
                    self.route
                ),
            );
        };
        let followed: Vec<(&Followed, Vec<&faultd::recorder::TracedCall>)> = join
            .requests
            .iter()
            .filter(|f| f.request.intended.get() >= s.start && f.request.intended.get() < s.end)
            .map(|f| {
                (
                    f,
                    f.calls.iter().filter(|c| c.route == self.route).collect(),
                )
            })
            .collect();
        if followed.iter().all(|(_, calls)| calls.is_empty()) {
            return inconclusive(name, unpropagated(join, &self.route, &where_));
        }
        let judged = figures::judge(self.bound, &followed, join.timeout);
        verdict(name, self, judged, &where_)
    }
}

/// Why nothing could be joined at `route`: no call there carried the trace id of a request of the run.
fn unpropagated(join: &Join, route: &str, where_: &str) -> String {
    let at_route = |calls: &mut dyn Iterator<Item = &faultd::recorder::TracedCall>| {
        calls.filter(|c| c.route == route).count()
    };
    let untraced = at_route(&mut join.others.iter().filter(|c| c.trace.is_none()));
    let foreign = at_route(&mut join.others.iter().filter(|c| c.trace.is_some()));
    format!(
        "no call at {route} {where_} carried the trace id of a request of the run ({untraced} calls without a trace id, {foreign} with another's, of {} requests sent): the SUT does not propagate its callers' trace context, so calls cannot be followed to requests",
        join.requests.len()
    )
}

fn inconclusive(name: String, text: String) -> Verdict {
    Verdict::with_outcome(name, Outcome::Inconclusive, text, None, None)
}

/// The verdict of a judged check: its sentence, the measured figure against the bound, and the evidence.
fn verdict(name: String, check: &RequestsCheck, j: Judged, where_: &str) -> Verdict {
    let Some(measured) = j.measured else {
        return inconclusive(name, format!("{} {where_}: {}", check.route, j.sentence));
    };
    let mut figures: Vec<f64> = j.per_request.iter().map(|(_, f, _)| *f).collect();
    figures.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let rank = ((q * figures.len() as f64).ceil() as usize).clamp(1, figures.len().max(1));
        figures.get(rank - 1).copied().unwrap_or(0.0)
    };
    let mut worst = j.per_request.clone();
    if j.low_is_worse {
        worst.sort_by(|a, b| a.1.total_cmp(&b.1));
    } else {
        worst.sort_by(|a, b| b.1.total_cmp(&a.1));
    }
    // A request with nothing against it (no retry, no hedge, no call after give-up) is no offender.
    if !j.low_is_worse {
        worst.retain(|w| w.1 > 0.0);
    }
    worst.truncate(WORST);
    let evidence = PerRequest {
        figure: j.unit.to_string(),
        requests: figures.len() as u64,
        p50: at(0.50),
        p99: at(0.99),
        max: figures.last().copied().unwrap_or(0.0),
        worst: worst
            .into_iter()
            .map(|(trace, figure, what)| Offender {
                trace_id: format!("{trace:032x}"),
                figure,
                what,
            })
            .collect(),
    };
    let text = format!(
        "{} {where_}: {} (per request p50 {}, p99 {}, max {} {} over {} requests)",
        check.route,
        j.sentence,
        trim2(evidence.p50),
        trim2(evidence.p99),
        trim2(evidence.max),
        j.unit,
        evidence.requests
    );
    let mut v = Verdict::new(name, j.passed, text, Some(measured), j.bound);
    v.per_request = Some(evidence);
    v
}

#[cfg(test)]
mod tests;
