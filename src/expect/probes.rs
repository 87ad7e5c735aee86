//! Half-open rounds and the probes in them, from any breaker timeline, with the dependency's own record as the
//! count. An open breaker lets nothing through, so every call that reaches the route while the breaker is not
//! closed is a probe; what a timeline has to say is only where one round ends and the next begins, and how sure
//! that is.
//!
//! Each timeline places rounds as far as its resolution allows, and every round carries two counts: the calls
//! certainly in it and the calls possibly in it (a close seen by a 100 ms scrape happened up to 100 ms earlier,
//! and the traffic that returned in between cannot be told from the last probes). A round whose certain count is
//! over the bound fails; rounds whose possible counts are all within it pass; anything between is not decided by
//! that timeline.
//!
//! - Exact timelines (webhook events, log lines) that show half-open: each half-open window, exactly.
//! - Exact timelines that never show half-open: each stretch from an opening (plus a few milliseconds, for calls
//!   already on their way) to the next opening or closing.
//! - Polled timelines (a metrics scrape): every scrape that saw the breaker open starts a new round, since the
//!   breaker was open between the calls on either side of it. Windows shorter than the interval are never seen,
//!   and yet their probes are counted one window at a time, as long as the breaker stays open longer than one
//!   interval before it probes again.
//! - Inferred timelines: each half-open window as inferred, widened back by the inference's window.
//!
//! Not for deciding the verdict (`breaker`), only for the rounds.

use std::ops::Range;
use std::time::Duration;

use crate::breaker::{BreakerState, BreakerTimeline};
use crate::record::RunRecord;

/// Calls in flight when a breaker opens are still arriving for a moment after it: not probes.
pub(crate) const IN_TRANSIT: Duration = Duration::from_millis(5);

/// One half-open round as a timeline places it: calls in `certain` are probes of it for sure, calls in `possible`
/// (which holds `certain`) may be.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Round {
    pub certain: Range<Duration>,
    pub possible: Range<Duration>,
    /// Calls that certainly reached the route in this round.
    pub at_least: u64,
    /// Calls that may have been probes of this round.
    pub at_most: u64,
}

/// What one timeline says about the probes of every round.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RoundCount {
    pub rounds: Vec<Round>,
}

impl RoundCount {
    /// The rounds that certainly exceed `bound`.
    pub fn over(&self, bound: u64) -> impl Iterator<Item = &Round> {
        self.rounds.iter().filter(move |r| r.at_least > bound)
    }

    /// The rounds this timeline cannot decide: certainly within the bound, possibly over it.
    pub fn undecided(&self, bound: u64) -> impl Iterator<Item = &Round> {
        self.rounds
            .iter()
            .filter(move |r| r.at_least <= bound && r.at_most > bound)
    }
}

/// The rounds of `t` and their probes at `route`, over a run that lasted `record.duration`.
pub(crate) fn rounds(t: &BreakerTimeline, record: &RunRecord, route: &str) -> RoundCount {
    let end = record.duration;
    let count = |a: Duration, b: Duration| {
        if b > a {
            record.arrivals_between(route, a, b)
        } else {
            0
        }
    };
    // A round certainly from `a` to `b`, possibly from `pa` (<= a) to `pb` (>= b).
    let round = |pa: Duration, a: Duration, b: Duration, pb: Duration| {
        let b = b.max(a);
        let (pa, pb) = (pa.min(a), pb.max(b));
        Round {
            at_least: count(a, b),
            at_most: count(pa, pb),
            certain: a..b,
            possible: pa..pb,
        }
    };
    let shows_half_open = t
        .transitions
        .iter()
        .any(|tr| tr.to == BreakerState::HalfOpen);
    let mut rounds = Vec::new();
    if t.is_exact() && shows_half_open {
        for (a, b) in t.spans_in(BreakerState::HalfOpen, Duration::ZERO, end) {
            rounds.push(round(a, a, b, b));
        }
    } else if t.is_exact() {
        for (a, b) in not_closed(t, end) {
            let mut start = a;
            for tr in t
                .transitions_in(a, b)
                .filter(|tr| tr.to == BreakerState::Open)
            {
                if tr.at > start {
                    rounds.push(round(start + IN_TRANSIT, start + IN_TRANSIT, tr.at, tr.at));
                }
                start = tr.at;
            }
            rounds.push(round(start + IN_TRANSIT, start + IN_TRANSIT, b, b));
        }
    } else if !t.samples.is_empty() {
        rounds = polled(t, end, &round);
    } else {
        // Inferred: a window is only known to within the inference's window, at both ends.
        for (a, b) in t.spans_in(BreakerState::HalfOpen, Duration::ZERO, end) {
            let from = a.saturating_sub(t.resolution);
            let closes = t.state_at(b) == BreakerState::Closed && b < end;
            let certain_to = if closes {
                b.saturating_sub(t.resolution)
            } else {
                b
            };
            rounds.push(round(from, from, certain_to, b));
        }
    }
    RoundCount { rounds }
}

/// The spans in which the breaker was not closed: from an opening (or a half-open) to the next close.
fn not_closed(t: &BreakerTimeline, end: Duration) -> Vec<(Duration, Duration)> {
    let mut spans = Vec::new();
    let mut since: Option<Duration> = None;
    for tr in &t.transitions {
        match (since, tr.to) {
            (None, BreakerState::Open | BreakerState::HalfOpen) => since = Some(tr.at),
            (Some(a), BreakerState::Closed) => {
                spans.push((a, tr.at));
                since = None;
            }
            _ => {}
        }
    }
    if let Some(a) = since {
        spans.push((a, end));
    }
    spans
}

/// Rounds from a scrape's samples: inside each stretch of samples that are not closed, a new round starts at every
/// sample that saw the breaker open. The first round of a stretch skips the calls still on their way when it
/// opened; the last one, ended by a sample that saw it closed, is certain only up to the last sample that saw it
/// half-open (or open), and possible up to the closed sample.
fn polled(
    t: &BreakerTimeline,
    end: Duration,
    round: &dyn Fn(Duration, Duration, Duration, Duration) -> Round,
) -> Vec<Round> {
    let mut rounds = Vec::new();
    let samples = &t.samples;
    let mut i = 0;
    while i < samples.len() {
        if samples[i].1 == BreakerState::Closed {
            i += 1;
            continue;
        }
        // A stretch begins at sample i. Before it, the breaker was seen closed (or not seen at all).
        let before = if i > 0 {
            samples[i - 1].0
        } else {
            Duration::ZERO
        };
        let opened_here = samples[i].1 == BreakerState::Open;
        let (mut from, mut possible_from) = if opened_here {
            (samples[i].0 + IN_TRANSIT, samples[i].0 + IN_TRANSIT)
        } else {
            // First seen half-open: its probes may have begun at any time since the last closed sample.
            (samples[i].0, before)
        };
        let mut last_not_closed = samples[i].0;
        let mut j = i + 1;
        loop {
            match samples.get(j) {
                None => {
                    rounds.push(round(possible_from, from, end, end));
                    break;
                }
                Some(&(at, BreakerState::Open)) => {
                    rounds.push(round(possible_from, from, at, at));
                    from = at;
                    possible_from = at;
                    last_not_closed = at;
                }
                Some(&(at, BreakerState::HalfOpen)) => last_not_closed = at,
                Some(&(at, BreakerState::Closed)) => {
                    rounds.push(round(possible_from, from, last_not_closed, at));
                    break;
                }
            }
            j += 1;
        }
        i = j;
    }
    rounds
}
