//! The per-request figure of each check of the `requests` family, and the verdict it comes to: one function per
//! check, each over the requests of the span with their calls at the route, in the order they arrived.
//!
//! Not for the sentence's frame or the distribution (`super`), nor for the join (`crate::correlate`).

use std::collections::BTreeMap;
use std::time::Duration;

use faultd::recorder::{CallEnd, TracedCall};

use super::{PerRequestBound, DEADLINE_TOLERANCE_MS};
use crate::correlate::Followed;
use crate::expect::words::trim2;

/// What a check came to: the measured figure (`None`: nothing to judge, the sentence says why), each judged
/// request's own figure, and which end of the figures is the bad one.
pub(super) struct Judged {
    pub measured: Option<f64>,
    pub bound: Option<f64>,
    pub passed: bool,
    pub sentence: String,
    pub unit: &'static str,
    /// (trace id, figure, what it was made of)
    pub per_request: Vec<(u128, f64, String)>,
    pub low_is_worse: bool,
}

type Calls<'a> = [(&'a Followed, Vec<&'a TracedCall>)];

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// From the end of `a` to the start of `b`, in ms; negative when `b` started before `a` ended.
fn gap_ms(a: &TracedCall, b: &TracedCall) -> f64 {
    ms(b.arrival.get()) - ms(a.ended.get())
}

fn held_ms(c: &TracedCall) -> f64 {
    ms(c.ended.get().saturating_sub(c.arrival.get()))
}

/// Judges `bound` over `followed` (the span's requests and their calls at the route); `timeout` is the budget
/// loadgen gave every request.
pub(super) fn judge(bound: PerRequestBound, followed: &Calls<'_>, timeout: Duration) -> Judged {
    use PerRequestBound as B;
    match bound {
        B::RetriesPerRequestAtMost(n) => retries(followed, n),
        B::RetrySpacingAtLeast(d) => spacing(followed, d.get()),
        B::RetryJitterAtLeast(s) => jitter(followed, s.fraction()),
        B::CallsAfterGiveUpAtMost(n) => after_give_up(followed, n),
        B::WastedWorkBelow(s) => wasted(followed, s.fraction()),
        B::DeadlinePropagated => deadlines(followed, timeout),
        B::HedgesPerRequestAtMost(n) => hedges(followed, n),
        B::HedgesCancelledWithin(d) => cancelled(followed, d.get()),
    }
}

fn nothing(sentence: String, unit: &'static str) -> Judged {
    Judged {
        measured: None,
        bound: None,
        passed: false,
        sentence,
        unit,
        per_request: Vec::new(),
        low_is_worse: false,
    }
}

/// A count per request whose largest must stay at or under `at_most`.
fn most_at_most(
    per_request: Vec<(u128, f64, String)>,
    at_most: u32,
    what: &str,
    unit: &'static str,
) -> Judged {
    let max = per_request.iter().map(|p| p.1).fold(0.0, f64::max);
    Judged {
        measured: Some(max),
        bound: Some(f64::from(at_most)),
        passed: max <= f64::from(at_most),
        sentence: format!(
            "the most {what} was {}; expected at most {at_most}",
            trim2(max)
        ),
        unit,
        per_request,
        low_is_worse: false,
    }
}

fn retries(followed: &Calls<'_>, at_most: u32) -> Judged {
    let per_request: Vec<(u128, f64, String)> = followed
        .iter()
        .filter(|(_, calls)| !calls.is_empty())
        .map(|(f, calls)| {
            let n = calls.len() - 1;
            (f.request.trace, n as f64, format!("{} calls", calls.len()))
        })
        .collect();
    most_at_most(per_request, at_most, "retries of one request", "retries")
}

/// Each retry's spacing (from the previous call's end), with its number (1 for a request's first retry).
fn retry_gaps<'a>(calls: &'a [&'a TracedCall]) -> impl Iterator<Item = (usize, f64)> + 'a {
    calls
        .windows(2)
        .enumerate()
        .map(|(i, w)| (i + 1, gap_ms(w[0], w[1])))
}

fn spacing(followed: &Calls<'_>, at_least: Duration) -> Judged {
    let per_request: Vec<(u128, f64, String)> = followed
        .iter()
        .filter(|(_, calls)| calls.len() > 1)
        .map(|(f, calls)| {
            let (n, gap) = retry_gaps(calls)
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or((0, 0.0));
            (
                f.request.trace,
                gap,
                format!(
                    "retry {n} of {} started {} ms after the call before it ended",
                    calls.len() - 1,
                    trim2(gap)
                ),
            )
        })
        .collect();
    if per_request.is_empty() {
        return nothing("no request retried, so no spacing to judge".into(), "ms");
    }
    let min = per_request
        .iter()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min);
    let bound = ms(at_least);
    Judged {
        measured: Some(min),
        bound: Some(bound),
        passed: min >= bound,
        sentence: format!(
            "the shortest spacing of a retry after the call before it was {} ms; expected at least {} ms",
            trim2(min),
            trim2(bound)
        ),
        unit: "ms shortest spacing",
        per_request,
        low_is_worse: true,
    }
}

/// The spread of the spacing among retries of the same number (every first retry, every second, ...), so that
/// an exponential backoff without jitter still reads as lockstep: the count-weighted mean of each number's robust
/// coefficient of variation, [`MAD_TO_SD`] x the median absolute deviation over the median. A robust spread
/// because a busy machine delays a few retries by tens of milliseconds: those few would lift a standard deviation
/// over lockstep's threshold, and they leave the median absolute deviation where the bulk of the retries is.
fn jitter(followed: &Calls<'_>, at_least: f64) -> Judged {
    let mut by_number: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for (_, calls) in followed {
        for (n, gap) in retry_gaps(calls) {
            by_number.entry(n).or_default().push(gap.max(0.0));
        }
    }
    // Per retry number: the median spacing and the robust spread around it.
    let stats: BTreeMap<usize, (f64, f64)> = by_number
        .iter_mut()
        .filter(|(_, gaps)| gaps.len() > 1)
        .map(|(n, gaps)| {
            let middle = median(gaps);
            let mut off: Vec<f64> = gaps.iter().map(|g| (g - middle).abs()).collect();
            let cv = if middle > 0.0 {
                MAD_TO_SD * median(&mut off) / middle
            } else {
                0.0
            };
            (*n, (middle, cv))
        })
        .collect();
    let (weighted, count) = stats
        .iter()
        .fold((0.0, 0usize), |(sum, count), (n, (_, cv))| {
            let k = by_number[n].len();
            (sum + cv * k as f64, count + k)
        });
    if count == 0 {
        return nothing(
            "fewer than two retries of any one number (first, second, ...), so no spread to judge"
                .into(),
            "ms from the median spacing",
        );
    }
    let spread = weighted / count as f64;
    let per_request = followed
        .iter()
        .filter(|(_, calls)| calls.len() > 1)
        .filter_map(|(f, calls)| {
            let (n, off) = retry_gaps(calls)
                .filter_map(|(n, gap)| {
                    stats
                        .get(&n)
                        .map(|(middle, _)| (n, (gap.max(0.0) - middle).abs()))
                })
                .min_by(|a, b| a.1.total_cmp(&b.1))?;
            Some((
                f.request.trace,
                off,
                format!(
                    "retry {n} within {} ms of every retry {n}'s median",
                    trim2(off)
                ),
            ))
        })
        .collect();
    Judged {
        measured: Some(spread),
        bound: Some(at_least),
        passed: spread >= at_least,
        sentence: format!(
            "the retries' spacing spread by {}% of its median (robust: 1.4826 x median absolute deviation over median, among retries of the same number, over {count} retries); expected at least {}%",
            trim2(spread * 100.0),
            trim2(at_least * 100.0)
        ),
        unit: "ms from the median spacing",
        per_request,
        low_is_worse: true,
    }
}

/// Scales a median absolute deviation to the standard deviation it estimates on a normal spread, so that the
/// robust spread reads like the familiar standard deviation over mean.
const MAD_TO_SD: f64 = 1.4826;

/// The median of `values` (sorted in place); 0 for none.
fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn after_give_up(followed: &Calls<'_>, at_most: u64) -> Judged {
    let per_request: Vec<(u128, f64, String)> = followed
        .iter()
        .filter(|(_, calls)| !calls.is_empty())
        .map(|(f, calls)| {
            let late = calls.iter().filter(|c| c.arrival > f.request.ended).count();
            (
                f.request.trace,
                late as f64,
                format!(
                    "{late} of {} calls after the request ended ({})",
                    calls.len(),
                    f.request.class.name()
                ),
            )
        })
        .collect();
    let total: f64 = per_request.iter().map(|p| p.1).sum();
    Judged {
        measured: Some(total),
        bound: Some(at_most as f64),
        passed: total <= at_most as f64,
        sentence: format!(
            "{} calls started after their caller had given up (timed out or answered); expected at most {at_most}",
            trim2(total)
        ),
        unit: "calls after give-up",
        per_request,
        low_is_worse: false,
    }
}

fn wasted(followed: &Calls<'_>, below: f64) -> Judged {
    let (mut wasted_total, mut held_total) = (0.0, 0.0);
    let per_request: Vec<(u128, f64, String)> = followed
        .iter()
        .filter(|(_, calls)| !calls.is_empty())
        .filter_map(|(f, calls)| {
            let gone = ms(f.request.ended.get());
            let held: f64 = calls.iter().map(|c| held_ms(c)).sum();
            let wasted: f64 = calls
                .iter()
                .map(|c| (ms(c.ended.get()) - ms(c.arrival.get()).max(gone)).max(0.0))
                .sum();
            wasted_total += wasted;
            held_total += held;
            (held > 0.0).then(|| {
                (
                    f.request.trace,
                    wasted / held * 100.0,
                    format!(
                        "{} of {} ms at the dependency after its caller had gone",
                        trim2(wasted),
                        trim2(held)
                    ),
                )
            })
        })
        .collect();
    let share = if held_total > 0.0 {
        wasted_total / held_total
    } else {
        0.0
    };
    Judged {
        measured: Some(share),
        bound: Some(below),
        passed: share < below,
        sentence: format!(
            "{}% of the time the dependency spent on calls ({} of {} ms) came after their caller had gone; expected below {}%",
            trim2(share * 100.0),
            trim2(wasted_total),
            trim2(held_total),
            trim2(below * 100.0)
        ),
        unit: "% wasted",
        per_request,
        low_is_worse: false,
    }
}

fn deadlines(followed: &Calls<'_>, timeout: Duration) -> Judged {
    let (mut missing, mut over, mut calls_seen) = (0usize, 0usize, 0usize);
    let mut most_over = f64::NEG_INFINITY;
    let per_request: Vec<(u128, f64, String)> = followed
        .iter()
        .filter(|(_, calls)| !calls.is_empty())
        .map(|(f, calls)| {
            // The caller's deadline: the budget its deadline header gave, counted from when loadgen sent it (its
            // timer starts there, so its own lateness in sending is not the SUT's to propagate).
            let intended = f.request.intended.get();
            let start = f.request.sent.map_or(intended, |s| s.get().max(intended));
            let due = ms(start) + ms(timeout);
            let mut broken = 0usize;
            let mut what = format!("{} calls, each within its caller's budget", calls.len());
            for c in calls {
                calls_seen += 1;
                let left = due - ms(c.arrival.get());
                match c.deadline {
                    None => {
                        missing += 1;
                        broken += 1;
                        what = format!("a call with no deadline, {} ms left", trim2(left));
                    }
                    Some(d) => {
                        let excess = ms(d.get()) - left;
                        most_over = most_over.max(excess);
                        if excess > DEADLINE_TOLERANCE_MS {
                            over += 1;
                            broken += 1;
                            what = format!(
                                "a deadline of {} ms with {} ms left",
                                trim2(ms(d.get())),
                                trim2(left)
                            );
                        }
                    }
                }
            }
            (f.request.trace, broken as f64, what)
        })
        .collect();
    let broken = missing + over;
    let most = if most_over.is_finite() {
        format!(
            "; the most a deadline exceeded the budget left was {} ms",
            trim2(most_over)
        )
    } else {
        String::new()
    };
    Judged {
        measured: Some(broken as f64),
        bound: Some(0.0),
        passed: broken == 0,
        sentence: format!(
            "{missing} of {calls_seen} calls carried no deadline and {over} one over their caller's remaining budget (plus {} ms){most}; expected none",
            trim2(DEADLINE_TOLERANCE_MS)
        ),
        unit: "calls without the caller's deadline",
        per_request,
        low_is_worse: false,
    }
}

/// The most calls of one request in flight at once.
fn most_at_once(calls: &[&TracedCall]) -> usize {
    let mut edges: Vec<(Duration, i32)> = calls
        .iter()
        .flat_map(|c| [(c.arrival.get(), 1), (c.ended.get(), -1)])
        .collect();
    // An end and a start at the same instant do not overlap.
    edges.sort();
    let (mut level, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        level += step;
        most = most.max(level);
    }
    most.max(0) as usize
}

fn hedges(followed: &Calls<'_>, at_most: u32) -> Judged {
    let per_request: Vec<(u128, f64, String)> = followed
        .iter()
        .filter(|(_, calls)| !calls.is_empty())
        .map(|(f, calls)| {
            let most = most_at_once(calls);
            (
                f.request.trace,
                (most - 1) as f64,
                format!("{most} of {} calls at once", calls.len()),
            )
        })
        .collect();
    most_at_most(
        per_request,
        at_most,
        "hedges of one request (its calls in flight at once, minus one)",
        "hedges",
    )
}

/// The first answer among a request's calls that overlapped another, and how long after it the last of the
/// calls still in flight then ended.
fn cancel_lag(calls: &[&TracedCall]) -> Option<(f64, usize)> {
    if most_at_once(calls) < 2 {
        return None;
    }
    let winner = calls
        .iter()
        .filter(|c| c.end == CallEnd::Answered)
        .min_by_key(|c| c.ended)?;
    let losers: Vec<&&TracedCall> = calls
        .iter()
        .filter(|c| c.arrival < winner.ended && c.ended > winner.ended)
        .collect();
    let lag = losers
        .iter()
        .map(|c| ms(c.ended.get()) - ms(winner.ended.get()))
        .fold(0.0, f64::max);
    Some((lag, losers.len()))
}

fn cancelled(followed: &Calls<'_>, within: Duration) -> Judged {
    let per_request: Vec<(u128, f64, String)> = followed
        .iter()
        .filter_map(|(f, calls)| {
            let (lag, losers) = cancel_lag(calls)?;
            Some((
                f.request.trace,
                lag,
                format!(
                    "{losers} losing calls, the last ended {} ms after the winner's answer",
                    trim2(lag)
                ),
            ))
        })
        .collect();
    if per_request.is_empty() {
        return nothing(
            "no request had two calls in flight at once with one answered, so no hedge to judge"
                .into(),
            "ms after the winner",
        );
    }
    let max = per_request.iter().map(|p| p.1).fold(0.0, f64::max);
    let bound = ms(within);
    Judged {
        measured: Some(max),
        bound: Some(bound),
        passed: max <= bound,
        sentence: format!(
            "the last losing hedge ended {} ms after its winner's answer; expected within {} ms",
            trim2(max),
            trim2(bound)
        ),
        unit: "ms after the winner",
        per_request,
        low_is_worse: false,
    }
}
