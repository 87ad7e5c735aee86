//! Expectations on a breaker's timeline: it opens within T after a phase begins, closes within T after recovery,
//! stays closed through noise, changes state at most K times (no flapping), and lets at most K probes through per
//! half-open window (seed 000's single probe, seed 003's three to five).
//!
//! Not for how a timeline is observed (`crate::breaker`) nor for the traffic at the dependency beyond counting
//! probes (`dependency`).

use std::time::Duration;

use faultline_units::Dur;
use serde::{Deserialize, Serialize};

use super::probes::{self, After, Round, RoundCount};
use super::words::{during_words, secs};
use super::{ended, phase_words, span, timeline, Outcome, Verdict};
use crate::breaker::{BreakerState, BreakerTimeline, Source, Transition};
use crate::record::RunRecord;
use faultd::recorder::FIRST_ARRIVALS;

/// A check on one breaker's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BreakerCheck {
    OpensWithin {
        breaker: String,
        within: Dur,
        after: String,
        /// The route the breaker guards, where known: faultd's timing of its calls can place an opening that a
        /// coarse source cannot.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        route: Option<String>,
    },
    ClosesWithin {
        breaker: String,
        within: Dur,
        after: String,
        /// The route the breaker guards, where known: faultd's timing of its calls can place a close that a coarse
        /// source cannot.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        route: Option<String>,
    },
    StaysClosed {
        breaker: String,
        during: Option<String>,
    },
    TransitionsAtMost {
        breaker: String,
        at_most: u32,
        during: Option<String>,
        /// The route the breaker guards, where known: its traffic shows changes a coarse source misses.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        route: Option<String>,
    },
    ProbesPerHalfOpenAtMost {
        breaker: String,
        route: String,
        at_most: u32,
    },
}

fn how(tr: &Transition) -> String {
    if tr.resolution.is_zero() {
        tr.source.to_string()
    } else {
        format!("{}, ±{}", tr.source, secs(tr.resolution))
    }
}

impl BreakerCheck {
    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        match self {
            BreakerCheck::OpensWithin {
                breaker,
                within,
                after,
                ..
            } => format!("breaker {breaker} opens within {within} after {after}"),
            BreakerCheck::ClosesWithin {
                breaker,
                within,
                after,
                ..
            } => format!("breaker {breaker} closes within {within} after {after}"),
            BreakerCheck::StaysClosed { breaker, during } => {
                format!("breaker {breaker} stays closed{}", during_words(during))
            }
            BreakerCheck::TransitionsAtMost {
                breaker,
                at_most,
                during,
                ..
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
                ..
            }
            | BreakerCheck::ClosesWithin {
                breaker,
                within,
                after,
                ..
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
                        let target = if closing {
                            BreakerState::Closed
                        } else {
                            BreakerState::Open
                        };
                        let bound_inside_resolution = t
                            .transitions_in(p.start, record.duration)
                            .find(|tr| tr.to == target)
                            .is_some_and(|tr| {
                                let delay = tr.at - p.start;
                                delay > within.get()
                                    && delay.saturating_sub(tr.resolution) <= within.get()
                            });
                        if v.inconclusive() || bound_inside_resolution {
                            // faultd's timing may yet place the change, from calls not recorded yet.
                            false
                        } else if v.passed {
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
            | BreakerCheck::TransitionsAtMost { during, .. } => v.failed() || ended(record, during),
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
                ..
            }
            | BreakerCheck::ClosesWithin {
                breaker,
                within,
                after,
                ..
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
                        // The change happened in (at - resolution, at]: decided only if the bound is not inside.
                        let delay = tr.at - phase.start;
                        let earliest = delay.saturating_sub(tr.resolution);
                        if delay > within.get() && earliest <= within.get() {
                            // A source that is not exact leaves it here; faultd's timing of the route may place it.
                            let timed = match self {
                                _ if t.is_exact() => None,
                                BreakerCheck::ClosesWithin { route: Some(route), .. } => close_by_timing(&name, record, breaker, route, tr, &phase, within.get()),
                                BreakerCheck::OpensWithin { route: Some(route), .. } => open_by_timing(&name, record, breaker, route, tr, &phase, within.get()),
                                _ => None,
                            };
                            if let Some(v) = timed {
                                return v;
                            }
                            return Verdict::with_outcome(name, Outcome::Inconclusive, format!("breaker {breaker} {verb} between {} and {} after {after} began ({}); the bound {within} lies inside that span, which a log or webhook source, or a shorter scrape interval, would decide", secs(earliest), secs(delay), how(tr)), Some(delay.as_secs_f64()), Some(within.as_secs_f64()));
                        }
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
                route,
            } => transitions(name, record, breaker, *at_most, during, route.as_deref()),
            BreakerCheck::ProbesPerHalfOpenAtMost {
                breaker,
                route,
                at_most,
            } => {
                if !record.dependency.contains_key(route) {
                    return Verdict::unrecorded(name, route, Some(*at_most as f64));
                };
                probes(name, record, breaker, route, *at_most)
            }
        }
    }
}

/// Every timeline there is for `breaker`: its sources and the inferred one (or the one timeline of a record
/// built without them).
fn evidence<'a>(record: &'a RunRecord, breaker: &str) -> Vec<&'a BreakerTimeline> {
    match record.evidence.get(breaker) {
        Some(all) if !all.is_empty() => all.iter().collect(),
        _ => vec![timeline(record, breaker)],
    }
}

/// "webhook events" or "a metrics scrape (±100 ms)".
fn label(t: &BreakerTimeline) -> String {
    let source = t
        .source
        .or_else(|| t.transitions.first().map(|tr| tr.source))
        .map(|s| s.to_string())
        .unwrap_or_else(|| "no source".into());
    if t.is_exact() {
        source
    } else {
        format!("{source}, ±{}", secs(t.resolution))
    }
}

fn counts(rounds: &[Round]) -> String {
    rounds
        .iter()
        .map(|r| {
            if r.at_least == r.at_most {
                r.at_least.to_string()
            } else {
                format!("{}-{}", r.at_least, r.at_most)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A close a source that is not exact placed only to within its resolution, placed again by faultd's timing of the calls
/// at `route`: after a round's first answer and before the first call in flight beside another
/// ([`Round::closed_in`]). `None` when the timing places no close inside the source's span.
fn close_by_timing(
    name: &str,
    record: &RunRecord,
    breaker: &str,
    route: &str,
    tr: &Transition,
    phase: &crate::record::PhaseSpan,
    within: Duration,
) -> Option<Verdict> {
    let t = timeline(record, breaker);
    let seen_from = tr.at.saturating_sub(tr.resolution);
    let (lo, hi) = probes::rounds(t, record, route)
        .rounds
        .iter()
        .filter_map(|r| r.closed_in.clone())
        .map(|c| (c.start.max(seen_from), c.end.min(tr.at)))
        .find(|(lo, hi)| lo <= hi && *lo >= phase.start)?;
    let secs = |d: Duration| format!("{:.3} s", d.as_secs_f64());
    let how = format!("{}, placed by faultd's timing: after its probe's answer at {} and before calls were in flight together at {}", how(tr), secs(lo), secs(hi));
    Some(timed_verdict(
        name,
        breaker,
        "closed",
        phase,
        lo..hi,
        &how,
        within,
    ))
}

/// The verdict on a change of state (`verb`: opened, closed) that faultd's timing placed in `placed`, `how` saying
/// so: PASS when all of it is within `within` of `phase`'s start, FAIL when none of it is, INCONCLUSIVE between.
/// To the millisecond, since the span is as narrow as the spacing of a few calls.
fn timed_verdict(
    name: &str,
    breaker: &str,
    verb: &str,
    phase: &crate::record::PhaseSpan,
    placed: std::ops::Range<Duration>,
    how: &str,
    within: Duration,
) -> Verdict {
    let after = &phase.name;
    let (earliest, latest) = (placed.start - phase.start, placed.end - phase.start);
    let secs = |d: Duration| format!("{:.3} s", d.as_secs_f64());
    let bound = Some(within.as_secs_f64());
    if latest <= within {
        Verdict::new(
            name.to_string(),
            true,
            format!(
                "breaker {breaker} {verb} {} after {after} began ({how}); expected within {}",
                secs(latest),
                secs(within)
            ),
            Some(latest.as_secs_f64()),
            bound,
        )
    } else if earliest > within {
        Verdict::new(name.to_string(), false, format!("breaker {breaker} {verb} {} after {after} began at the earliest ({how}); expected within {}", secs(earliest), secs(within)), Some(earliest.as_secs_f64()), bound)
    } else {
        Verdict::with_outcome(name.to_string(), Outcome::Inconclusive, format!("breaker {breaker} {verb} between {} and {} after {after} began ({how}); the bound {} lies inside that span, which a log or webhook source would decide", secs(earliest), secs(latest), secs(within)), Some(latest.as_secs_f64()), bound)
    }
}

/// An opening a source that is not exact placed only to within its resolution, placed again by faultd's timing of the calls
/// at `route` ([`probes::opened_in`]): after the last call let through and before the quiet that followed it had
/// lasted ten spacings of the offered load. `None` when the timing places no opening inside the source's span.
fn open_by_timing(
    name: &str,
    record: &RunRecord,
    breaker: &str,
    route: &str,
    tr: &Transition,
    phase: &crate::record::PhaseSpan,
    within: Duration,
) -> Option<Verdict> {
    let seen = tr.at.saturating_sub(tr.resolution).max(phase.start)..tr.at;
    let placed = probes::opened_in(record, route, &seen)?;
    let secs = |d: Duration| format!("{:.3} s", d.as_secs_f64());
    let how = format!("{}, placed by faultd's timing: after the last call let through at {} and before the quiet after it showed the breaker open at {}", how(tr), secs(placed.start), secs(placed.end));
    Some(timed_verdict(
        name, breaker, "opened", phase, placed, &how, within,
    ))
}

/// Why a round's count is not decided, from what faultd's timing showed after its first answer.
fn undecided_because(r: &Round, rc: &RoundCount, source: &str, record: &RunRecord) -> String {
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
    match r.after {
        After::Placed | After::Nothing => {
            let rate = record.offered_rate_near(&r.possible);
            let timed = FIRST_ARRIVALS as f64;
            let hint = if rate * record.bucket.as_secs_f64() > timed {
                // The largest whole 10 ms that holds no more calls than faultd times, at the offered rate.
                let fits = ((timed / rate * 100.0).floor() * 10.0).max(10.0);
                format!(", and faultd, which times the first {FIRST_ARRIVALS} calls of each bucket, could not time them all at {rate:.0} requests a second in buckets of {}: `bucket: {fits:.0}ms` would let it decide by when the probes were answered", ms(record.bucket))
            } else {
                String::new()
            };
            format!("{source} cannot separate its last probes from the traffic that returned when it closed{hint}")
        }
        After::OnePerAnswer => format!("after the first probe was answered ({} after it came), every call waited for the one before it to be answered, as the probes of a breaker that needs several successes do, and as calls do through a service that lets one at a time through its closed breaker; {source} cannot tell which", ms(r.certain.end - r.certain.start)),
        After::Closed => "calls in flight together show it closed by then, but after some of its later calls were answered, so those may have been probes too".into(),
        After::SeveralAtOnce => {
            let most = rc.rounds.iter().map(|r| r.before_answer).max().unwrap_or(0);
            format!("in some round {most} calls came before the first probe was answered, so the breaker admits several at once, and the calls in flight together after an answer may have been probes as well as the traffic of a closed breaker")
        }
        After::TooFast => "the first probes were answered before the load offered meanwhile could have shown a second call, so it cannot be told whether the breaker admits several at once, which would make the calls in flight together after an answer probes too".into(),
    }
}

fn span_words(r: &std::ops::Range<Duration>) -> String {
    format!("{:.2}-{:.2} s", r.start.as_secs_f64(), r.end.as_secs_f64())
}

/// Probes per half-open round, counted at the dependency. An exact source places the rounds on its own; otherwise
/// a round that certainly holds too many calls fails, rounds that all hold few enough pass, and anything between
/// (or sources that contradict each other) is not decided.
fn probes(name: String, record: &RunRecord, breaker: &str, route: &str, at_most: u32) -> Verdict {
    let bound = at_most as u64;
    let ev = evidence(record, breaker);
    let judged: Vec<(&BreakerTimeline, RoundCount)> = ev
        .iter()
        .map(|t| (*t, probes::rounds(t, record, route)))
        .filter(|(_, rc)| !rc.rounds.is_empty())
        .collect();
    let expected = format!("expected at most {at_most}");
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            one.to_string()
        } else {
            many.to_string()
        }
    };
    if judged.is_empty() {
        let seen = ev.iter().map(|t| label(t)).collect::<Vec<_>>().join(" or ");
        let half_opened: usize = ev
            .iter()
            .map(|t| {
                t.transitions
                    .iter()
                    .filter(|tr| tr.to == BreakerState::HalfOpen)
                    .count()
            })
            .sum();
        // A timeline can show half-open rounds that faultd's calls cannot place (no call arrived in any of them).
        let why = if half_opened == 0 {
            format!("breaker {breaker} never left closed as {seen} saw it, so there were no half-open rounds to count probes in")
        } else {
            let times = plural(half_opened, "once", &format!("{half_opened} times"));
            format!("breaker {breaker} went half-open {times} as {seen} saw it, but no call at {route} could be placed in a round of its own, so there were no probes to count")
        };
        return Verdict::with_outcome(
            name,
            Outcome::Inconclusive,
            format!("{why}; {expected} per round"),
            None,
            Some(at_most as f64),
        );
    }
    let summary = |t: &BreakerTimeline, rc: &RoundCount| {
        let worst = rc.rounds.iter().map(|r| r.at_most).max().unwrap_or(0);
        // A polled timeline's stretch between two samples that saw the breaker open, with no call in it, is no
        // round: the breaker stayed open.
        let rounds: Vec<Round> = rc
            .rounds
            .iter()
            .filter(|r| r.at_most > 0 || t.samples.is_empty())
            .cloned()
            .collect();
        let n = rounds.len();
        let by = if rc.rounds.iter().any(|r| r.after != After::Placed) {
            format!("rounds found by {}, each ended by faultd's timing of its calls: after the first probe's answer, silence (open again) or calls in flight together (closed)", label(t))
        } else {
            format!("rounds placed by {}, calls counted by faultd", label(t))
        };
        format!(
            "at most {worst} {} reached {route} in any of breaker {breaker}'s {n} half-open {} (counts: {}; {by})",
            plural(worst as usize, "call", "calls"),
            plural(n, "round", "rounds"),
            counts(&rounds),
        )
    };
    if let Some((t, rc)) = judged.iter().find(|(t, _)| t.is_exact()) {
        let worst = rc.rounds.iter().map(|r| r.at_least).max().unwrap_or(0);
        return Verdict::new(
            name,
            worst <= bound,
            format!("{}; {expected}", summary(t, rc)),
            Some(worst as f64),
            Some(at_most as f64),
        );
    }
    let failing = judged.iter().find_map(|(t, rc)| {
        rc.over(bound)
            .max_by_key(|r| r.at_least)
            .map(|r| (*t, r.clone()))
    });
    let passing = judged
        .iter()
        .find(|(_, rc)| rc.undecided(bound).next().is_none() && rc.over(bound).next().is_none());
    match (failing, passing) {
        (Some((t, r)), None) => {
            let how = if r.after != After::Placed && r.before_answer < r.at_least {
                format!("{}, before a scrape that saw it half-open, so all of them admitted while half-open; found by {}, timed by faultd", span_words(&r.possible), label(t))
            } else if r.after == After::Placed {
                format!("{}, placed by {}, calls counted by faultd", span_words(&r.certain), label(t))
            } else {
                format!("{}, before its first probe was answered, so all of them admitted while half-open; found by {}, timed by faultd", span_words(&r.certain), label(t))
            };
            Verdict::new(name, false, format!("{} calls reached {route} in one half-open round of breaker {breaker} ({how}); {expected}", r.at_least), Some(r.at_least as f64), Some(at_most as f64))
        }
        (None, Some((t, rc))) => {
            let worst = rc.rounds.iter().map(|r| r.at_most).max().unwrap_or(0);
            Verdict::new(name, true, format!("{}; {expected}", summary(t, rc)), Some(worst as f64), Some(at_most as f64))
        }
        (Some((ft, fr)), Some((pt, _))) => Verdict::with_outcome(name, Outcome::Inconclusive, format!("the sources disagree: {} places {} calls at {route} in one half-open round of breaker {breaker} ({}), while {} places at most {at_most} in every round; {expected}", label(ft), fr.at_least, span_words(&fr.certain), label(pt)), None, Some(at_most as f64)),
        (None, None) => {
            let (t, rc) = &judged[0];
            let r = rc.undecided(bound).next().cloned().unwrap_or_else(|| rc.rounds[0].clone());
            let why = undecided_because(&r, rc, &label(t), record);
            Verdict::with_outcome(name, Outcome::Inconclusive, format!("breaker {breaker}'s half-open round at {} had between {} and {} calls at {route}: {why}; a log or webhook source would decide it; {expected}", span_words(&r.possible), r.at_least, r.at_most), None, Some(at_most as f64))
        }
    }
}

/// Transitions in a span. An exact source counts them. Otherwise every source gives a lower bound, and so does the
/// traffic: each burst of calls that reached the route while a scrape saw the breaker open is a half-open window
/// the scrape missed, two changes of state. Too many is a failure on any of these; few enough passes only where
/// the traffic could have shown more.
fn transitions(
    name: String,
    record: &RunRecord,
    breaker: &str,
    at_most: u32,
    during: &Option<String>,
    route: Option<&str>,
) -> Verdict {
    let s = span(record, during);
    let ev = evidence(record, breaker);
    let count = |t: &BreakerTimeline| t.transitions_in(s.start, s.end).count();
    let expected = format!("expected at most {at_most}");
    if let Some(t) = ev.iter().find(|t| t.is_exact()) {
        let n = count(t);
        return Verdict::new(
            name,
            n <= at_most as usize,
            format!(
                "breaker {breaker} changed state {n} times {} ({}); {expected}",
                phase_words(&s),
                label(t)
            ),
            Some(n as f64),
            Some(at_most as f64),
        );
    }
    let (seen, by) = ev
        .iter()
        .map(|t| (count(t), *t))
        .max_by_key(|(n, _)| *n)
        .unwrap_or((0, timeline(record, breaker)));
    // Windows a scrape missed, shown by the calls that reached the route while it saw the breaker open.
    let mut implied = (0usize, seen, by);
    if let Some(route) = route.filter(|r| record.dependency.contains_key(*r)) {
        for t in ev.iter().filter(|t| !t.samples.is_empty()) {
            // Each missed window is two changes (open, half-open, open again); the last one, ended by a close
            // the scrape did see, is one more (half-open before the close).
            let missed: Vec<usize> = probes::rounds(t, record, route)
                .rounds
                .iter()
                .filter(|r| r.certain.start >= s.start && r.certain.end <= s.end)
                .filter(|r| r.at_least > 0)
                .filter(|r| {
                    !t.samples
                        .iter()
                        .any(|(at, st)| *st == BreakerState::HalfOpen && r.certain.contains(at))
                })
                .map(|r| {
                    if t.state_at(r.possible.end) == BreakerState::Closed {
                        1
                    } else {
                        2
                    }
                })
                .collect();
            let n = count(t) + missed.iter().sum::<usize>();
            let missed = missed.len();
            if n > implied.1 {
                implied = (missed, n, *t);
            }
        }
    }
    let (missed, lower, t) = implied;
    if lower > at_most as usize {
        let how = if missed > 0 {
            format!(
                "{} seen by {}, and {} more implied by the {missed} {} of calls that reached {} while it saw the breaker open",
                count(t),
                label(t),
                lower - count(t),
                if missed == 1 { "burst" } else { "bursts" },
                route.unwrap_or("the route")
            )
        } else {
            format!("seen by {}", label(t))
        };
        return Verdict::new(
            name,
            false,
            format!(
                "breaker {breaker} changed state at least {lower} times {} ({how}); {expected}",
                phase_words(&s)
            ),
            Some(lower as f64),
            Some(at_most as f64),
        );
    }
    let traffic_watched = ev.iter().any(|t| t.source == Some(Source::Inferred));
    if traffic_watched {
        return Verdict::new(name, true, format!("breaker {breaker} changed state {lower} times {} ({}; the traffic at {} shows no more); {expected}", phase_words(&s), label(t), route.unwrap_or("its route")), Some(lower as f64), Some(at_most as f64));
    }
    Verdict::with_outcome(name, Outcome::Inconclusive, format!("breaker {breaker} changed state {lower} times {} as {} saw it, but changes faster than that would not show and nothing finer watched it: a log or webhook source, a shorter interval, or the breaker's `route:` (so its traffic can show them) would decide it; {expected}", phase_words(&s), label(t)), Some(lower as f64), Some(at_most as f64))
}
