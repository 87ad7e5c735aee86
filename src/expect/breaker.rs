//! Expectations on a breaker's timeline: it opens within T after a phase begins, closes within T after recovery,
//! stays closed through noise, changes state at most K times (no flapping), and lets at most K probes through per
//! half-open window (seed 000's single probe, seed 003's three to five).
//!
//! Not for how a timeline is observed (`crate::breaker`) nor for the traffic at the dependency beyond counting
//! probes (`dependency`).

use std::time::Duration;

use faultline_units::Dur;
use serde::{Deserialize, Serialize};

use super::words::{during_words, secs};
use super::{ended, phase_words, span, timeline, Verdict};
use crate::breaker::{BreakerState, BreakerTimeline, Transition};
use crate::record::RunRecord;

/// A check on one breaker's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BreakerCheck {
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
}

fn how(tr: &Transition) -> String {
    format!("{}, ±{}", tr.source, secs(tr.resolution))
}

impl BreakerCheck {
    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        match self {
            BreakerCheck::OpensWithin {
                breaker,
                within,
                after,
            } => format!("breaker {breaker} opens within {within} after {after}"),
            BreakerCheck::ClosesWithin {
                breaker,
                within,
                after,
            } => format!("breaker {breaker} closes within {within} after {after}"),
            BreakerCheck::StaysClosed { breaker, during } => {
                format!("breaker {breaker} stays closed{}", during_words(during))
            }
            BreakerCheck::TransitionsAtMost {
                breaker,
                at_most,
                during,
            } => format!(
                "breaker {breaker} changes state at most {at_most} times{}",
                during_words(during)
            ),
            BreakerCheck::ProbesPerHalfOpenAtMost {
                breaker, at_most, ..
            } => format!(
                "breaker {breaker} lets at most {at_most} probes through per half-open window"
            ),
        }
    }

    /// Probes are counted per half-open window, and the last window may still be open: judged after the run.
    pub(crate) fn decidable_live(&self) -> bool {
        !matches!(self, BreakerCheck::ProbesPerHalfOpenAtMost { .. })
    }

    /// The verdict once no later observation can change it.
    pub(crate) fn decide(&self, name: String, record: &RunRecord) -> Option<Verdict> {
        let v = self.evaluate(name, record);
        let decided = match self {
            BreakerCheck::OpensWithin {
                breaker,
                within,
                after,
            }
            | BreakerCheck::ClosesWithin {
                breaker,
                within,
                after,
            } => {
                let t = timeline(record, breaker);
                match record.phase(after) {
                    // A phase that has not begun yet may still begin.
                    None => false,
                    Some(p) => {
                        let deadline_passed =
                            record.duration > p.start + within.get() + t.resolution;
                        let quiet_since_start =
                            t.transitions_in(p.start, record.duration).next().is_none();
                        let closing = matches!(self, BreakerCheck::ClosesWithin { .. });
                        if v.passed {
                            // A transition seen in time cannot move; "already closed and stayed closed" can still
                            // be undone by a later opening, so it waits for the end of the run.
                            !(closing
                                && t.state_at(p.start) == BreakerState::Closed
                                && quiet_since_start)
                        } else {
                            // Too late, already open, or nothing by the deadline (plus the resolution, within which
                            // a late observation could still place the transition in time).
                            v.measured.is_some() || deadline_passed
                        }
                    }
                }
            }
            // Leaving closed and changing state too often cannot be undone; holding can only be known at the end.
            BreakerCheck::StaysClosed { during, .. }
            | BreakerCheck::TransitionsAtMost { during, .. } => !v.passed || ended(record, during),
            BreakerCheck::ProbesPerHalfOpenAtMost { .. } => false,
        };
        decided.then_some(v)
    }

    /// Evaluates the check on a record.
    pub(crate) fn evaluate(&self, name: String, record: &RunRecord) -> Verdict {
        match self {
            BreakerCheck::OpensWithin {
                breaker,
                within,
                after,
            }
            | BreakerCheck::ClosesWithin {
                breaker,
                within,
                after,
            } => {
                let opening = matches!(self, BreakerCheck::OpensWithin { .. });
                let (target, verb) = if opening {
                    (BreakerState::Open, "opened")
                } else {
                    (BreakerState::Closed, "closed")
                };
                let t = timeline(record, breaker);
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
            BreakerCheck::StaysClosed { breaker, during } => {
                let s = span(record, during);
                let t = timeline(record, breaker);
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
            BreakerCheck::TransitionsAtMost {
                breaker,
                at_most,
                during,
            } => {
                let s = span(record, during);
                let n = timeline(record, breaker)
                    .transitions_in(s.start, s.end)
                    .count();
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
            BreakerCheck::ProbesPerHalfOpenAtMost {
                breaker,
                route,
                at_most,
            } => {
                let t = timeline(record, breaker);
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
