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
//! - Exact timelines (webhook events, log lines) that show half-open: each half-open window, begun up to
//!   [`MARK_LATE`] before its mark (never before the middle of the open spell before it). A log line is stamped when
//!   the run reads it, which can be a moment after the probe it announces reached faultd; an open breaker lets
//!   nothing through, so a call just before the mark is that round's, while the calls just after the opening are
//!   the last ones let through before it.
//! - Exact timelines that never show half-open: each stretch from an opening (plus a few milliseconds, for calls
//!   already on their way) to the next opening or closing.
//! - Polled timelines (a metrics scrape): every scrape that saw the breaker open starts a new round, since the
//!   breaker was open between the calls on either side of it. Windows shorter than the interval are never seen,
//!   and yet their probes are counted one window at a time, as long as the breaker stays open longer than one
//!   interval before it probes again.
//! - Inferred timelines: each half-open window as inferred, widened back by the inference's window.
//!
//! Where a timeline is not exact, faultd's own timing then decides each round (`timed`): faultd knows when every
//! call arrived and when it answered, and no breaker leaves half-open before it knows how a probe went.
//!
//! Not for deciding the verdict (`breaker`), only for the rounds.

use std::ops::Range;
use std::time::Duration;

use crate::breaker::{BreakerState, BreakerTimeline};
use crate::record::{RunRecord, TimedCall};

/// Calls in flight when a breaker opens are still arriving for a moment after it: not probes.
pub(crate) const IN_TRANSIT: Duration = Duration::from_millis(5);

/// How much later than the probe it announces a half-open mark may be stamped (a log line read from a pipe by a
/// busy runner): the round is counted from this much before the mark.
const MARK_LATE: Duration = Duration::from_millis(50);

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
    /// What the calls after the round's first answer showed, when faultd's timing placed the round.
    pub after: After,
    /// Calls that arrived before the round's first answer, when faultd's timing placed the round (else 0).
    pub before_answer: u64,
    /// When faultd's timing shows the breaker closed at the end of this round: after its first answer and before
    /// the first call in flight beside another.
    pub closed_in: Option<Range<Duration>>,
}

/// What faultd's timing showed after a round's first probe was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// The timeline alone placed the round: it is exact, or faultd did not time every call in it.
    Placed,
    /// Nothing else reached the route before the breaker was open again (or the run ended).
    Nothing,
    /// A call arrived while another was still in flight, so the breaker was no longer admitting one call at a
    /// time: it had closed on the answers that had come by then.
    Closed,
    /// Every later call waited for the one before it to be answered, as a breaker that admits one probe after
    /// another would have them; so would a service that lets one call at a time through a closed breaker.
    OnePerAnswer,
    /// More than one call reached the route before the first answer: a breaker that admits several at once could
    /// also have admitted the calls that came after it.
    SeveralAtOnce,
    /// The first probe was answered too soon for a second call to have shown whether the breaker admits several
    /// at once: the load offered while first probes were in flight was too small.
    TooFast,
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
            after: After::Placed,
            before_answer: 0,
            closed_in: None,
        }
    };
    let shows_half_open = t
        .transitions
        .iter()
        .any(|tr| tr.to == BreakerState::HalfOpen);
    let mut rounds = Vec::new();
    if t.is_exact() && shows_half_open {
        for (a, b) in t.spans_in(BreakerState::HalfOpen, Duration::ZERO, end) {
            let opened = t
                .transitions
                .iter()
                .rfind(|tr| tr.at <= a && tr.to == BreakerState::Open)
                .map(|tr| tr.at);
            let from = match opened {
                Some(o) => a.saturating_sub(MARK_LATE).max(o + (a - o) / 2),
                None => a,
            };
            rounds.push(round(from, from, b, b));
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
    if !t.is_exact() {
        rounds = rounds
            .into_iter()
            .flat_map(|r| timed(&r, t, record, route).unwrap_or_else(|| vec![r]))
            .collect();
        trust_overlaps(&mut rounds, record, route);
    }
    RoundCount { rounds }
}

/// A spell with nothing in flight and nothing arriving that lasts this many mean spacings of the offered load shows
/// the breaker open: one that admits a probe after each answer would have let the next request through long before
/// (a chance of e^-10 under Poisson arrivals).
const QUIET_SPACINGS: f64 = 10.0;

/// The load offered while first probes were in flight that a breaker admitting several calls at once would have
/// shown by a second call before some first answer: missed with a chance of e^-3 (5%) under Poisson arrivals.
const SEVERAL_AT_ONCE_SHOWN: f64 = 3.0;

/// How much earlier than faultd's end of a call another must arrive to have been in flight with it. faultd ends a
/// call when its handler lets go of it, which on a loaded machine comes some milliseconds after the answer left
/// (a tokio wake-up is late by up to ~4 ms at p99 on a busy 2-core machine): a service that sends its next call
/// the moment an answer reaches it can have that call arrive "before" the answer by that much. Nearer than this,
/// two calls are taken one after the other.
const AT_ONCE_MARGIN: Duration = Duration::from_millis(5);

/// The half-open rounds inside one round a polled or inferred timeline placed, from faultd's timing of every call
/// in it; `None` when faultd did not time them all, or its timing finds no round where the timeline saw one.
///
/// The first call in it is a probe. Every call that arrives before that probe is answered (by more than
/// [`AT_ONCE_MARGIN`], as for every "in flight together" below) is an admission of the same round, since no breaker leaves half-open before it knows how a probe went. After the answer:
/// - a spell of `QUIET_SPACINGS` with nothing in flight ends the round (the breaker was open again), and the next
///   call starts another;
/// - a call that arrives while another that came after the answer is still in flight shows the breaker closed by
///   then (one that admits one probe after each answer never has two in flight): the close came on one of the
///   answers before that call, so the round's admissions are at most the calls up to the latest of them;
/// - with neither, every call up to the end of the timeline's round may have been a probe.
fn timed(
    round: &Round,
    t: &BreakerTimeline,
    record: &RunRecord,
    route: &str,
) -> Option<Vec<Round>> {
    // A round that starts at a sample which saw the breaker open starts with a probe. Any other (first seen
    // half-open, or inferred) may start with the traffic before the opening, or after its probe: its rounds are
    // found from the quiet spell before them, looked for up to a second earlier.
    let known_open = !t.samples.is_empty() && round.possible.start == round.certain.start;
    let from = if known_open {
        round.possible.start
    } else {
        round.possible.start.saturating_sub(Duration::from_secs(1))
    };
    let calls = record.timed_calls(route, from, round.possible.end)?;
    if calls.is_empty() {
        return None;
    }
    let closes = t.state_at(round.possible.end) == BreakerState::Closed;
    let later = if closes {
        let end = round.possible.end;
        record
            .timed_calls(
                route,
                end,
                (end + Duration::from_secs(1)).min(record.duration),
            )
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let rate = record.offered_rate_near(&round.possible);
    let quiet = if rate > 0.0 {
        Duration::from_secs_f64(QUIET_SPACINGS / rate)
    } else {
        Duration::MAX
    };
    let answered = |c: &TimedCall| c.answered.unwrap_or(Duration::MAX);
    // Arriving before `answer` by more than the margin: the two were in flight together.
    let before = |arrival: Duration, answer: Duration| arrival + AT_ONCE_MARGIN < answer;
    // Nothing in flight from `idle` to `next` while the SUT was offered the load that many spacings carry.
    let quiet_between = |idle: Duration, next: Duration| {
        next > idle
            && next - idle > quiet
            && record.sent_between(idle, next) >= QUIET_SPACINGS / 2.0
    };
    let mut i = 0;
    if !known_open {
        let mut busy_until = Duration::ZERO;
        while i < calls.len() && !(i > 0 && quiet_between(busy_until, calls[i].at)) {
            busy_until = busy_until.max(answered(&calls[i]));
            i += 1;
        }
        if i == calls.len() {
            // Inferred from the same traffic at a coarser grain: with no quiet spell in it, the breaker was never
            // open here. A scrape that saw it half-open is believed, and left to place the round itself.
            return t.samples.is_empty().then(Vec::new);
        }
    }
    // The calls just after the window serve only the round the timeline saw closed: they may still show the
    // overlap (their breaker was closed, and on an answer that came before them).
    let n = calls.len();
    let mut calls = calls;
    calls.extend(later);
    let mut out = Vec::new();
    while i < n {
        let first_answer = answered(&calls[i]);
        let mut j = i + 1;
        while j < n && before(calls[j].at, first_answer) {
            j += 1;
        }
        // Calls after the answer, up to a quiet spell; the first overlap among them, and the latest answer before it.
        let mut busy_until = calls[i..j]
            .iter()
            .map(answered)
            .max()
            .unwrap_or(first_answer);
        let mut settled_by: Option<Duration> = None;
        let mut overlap_at: Option<Duration> = None;
        let mut k = j;
        while k < calls.len() {
            if k >= n && (k == j || settled_by.is_some() || !closes) {
                break;
            }
            let c = calls[k];
            if quiet_between(busy_until, c.at) {
                break;
            }
            if settled_by.is_none() && calls[j..k].iter().any(|e| before(c.at, answered(e))) {
                settled_by = calls[i..k].iter().map(answered).filter(|a| *a < c.at).max();
                overlap_at = Some(c.at);
            }
            busy_until = busy_until.max(answered(&c));
            k += 1;
        }
        let k = k.min(n);
        let end = if k < n {
            calls[k].at
        } else {
            round.possible.end
        };
        let first = (j - i) as u64;
        // A polled timeline that saw the breaker half-open after the probe makes every call before that sample one.
        let seen_half_open = t
            .samples
            .iter()
            .filter(|(at, st)| *st == BreakerState::HalfOpen && (calls[i].at..end).contains(at))
            .map(|(at, _)| *at)
            .max();
        let before_sample = seen_half_open
            .map(|s| calls[i..k].iter().filter(|c| c.at <= s).count() as u64)
            .unwrap_or(0);
        let at_least = first.max(before_sample);
        let (at_most, after) = if j == k {
            (first, After::Nothing)
        } else if let Some(a) = settled_by {
            let n = calls[i..k].iter().filter(|c| c.at <= a).count() as u64;
            (n, After::Closed)
        } else {
            ((k - i) as u64, After::OnePerAnswer)
        };
        if end <= round.possible.start {
            // A round before this one, found only to place this one.
            i = k;
            continue;
        }
        out.push(Round {
            certain: calls[i].at..first_answer.min(end),
            possible: calls[i].at..end,
            at_least,
            at_most: at_most.max(at_least),
            after,
            before_answer: first,
            closed_in: overlap_at
                .filter(|_| after == After::Closed)
                .map(|c| first_answer..c),
        });
        i = k;
    }
    (!out.is_empty() || t.samples.is_empty()).then_some(out)
}

/// An overlap shows a close only if the breaker admits one call at a time while a probe is out. Where a round
/// admitted several before its first answer, or the load offered while first probes were out was too small for a
/// second one to show, the calls after the answer may have been probes too.
fn trust_overlaps(rounds: &mut [Round], record: &RunRecord, route: &str) {
    let several = rounds.iter().any(|r| r.before_answer > 1);
    let offered: f64 = rounds
        .iter()
        .filter(|r| r.after != After::Placed)
        .map(|r| {
            let rate = record.offered_rate_near(&r.certain);
            rate * (r.certain.end - r.certain.start).as_secs_f64()
        })
        .sum();
    if several || offered < SEVERAL_AT_ONCE_SHOWN {
        for r in rounds.iter_mut().filter(|r| r.after == After::Closed) {
            r.at_most =
                r.at_most
                    .max(record.arrivals_between(route, r.possible.start, r.possible.end));
            r.closed_in = None;
            r.after = if several {
                After::SeveralAtOnce
            } else {
                After::TooFast
            };
        }
    }
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

/// Where faultd's timing of the calls at `route` places an opening that a coarse source saw only to within
/// `seen`: after the last call that arrived before the first quiet spell that reaches into `seen` (less
/// [`IN_TRANSIT`]: that call was let through, so the breaker was not open yet), and before that spell had lasted
/// `QUIET_SPACINGS` mean spacings of the offered load (a closed breaker would have let a call through by then;
/// with nothing held in flight, so that a pool full of hung calls does not pass for an open breaker). `None` when
/// faultd did not time every call near it, or no quiet spell places it inside `seen`.
pub(crate) fn opened_in(
    record: &RunRecord,
    route: &str,
    seen: &Range<Duration>,
) -> Option<Range<Duration>> {
    let rate = record.offered_rate_near(seen);
    if rate <= 0.0 {
        return None;
    }
    let quiet = Duration::from_secs_f64(QUIET_SPACINGS / rate);
    let from = seen.start.saturating_sub(quiet * 2);
    let to = (seen.end + quiet * 2).min(record.duration);
    let calls = record.timed_calls(route, from, to)?;
    let quiet_between = |idle: Duration, next: Duration| {
        next > idle
            && next - idle > quiet
            && record.sent_between(idle, next) >= QUIET_SPACINGS / 2.0
    };
    // The opening after the call at `last`, the route idle from `idle` on.
    let place = |last: Duration, idle: Duration| {
        let lo = last.saturating_sub(IN_TRANSIT).max(seen.start);
        let hi = (idle + quiet).min(seen.end);
        (lo <= hi).then_some(lo..hi)
    };
    let mut before: Option<(Duration, Duration)> = None;
    for c in &calls {
        if let Some((last, idle)) = before {
            if quiet_between(idle, c.at) && idle + quiet >= seen.start {
                return place(last, idle);
            }
        }
        let answered = c.answered.unwrap_or(record.duration);
        before = Some(match before {
            Some((_, idle)) => (c.at, idle.max(answered)),
            None => (c.at, answered),
        });
    }
    // The spell may run on past the calls timed here: the breaker stayed open.
    let (last, idle) = before?;
    if quiet_between(idle, to) {
        return place(last, idle);
    }
    None
}
