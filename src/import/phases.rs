//! Phases from change points: where the dependency's latency or failure share leaves its healthy level, moves to
//! another level, and comes back. The record's own first buckets are the healthy reference. Phases are named
//! `healthy`, `degraded-1`, `degraded-2`, ..., `recovered` (then `recovered-2` if it degrades again), for the
//! user to rename; expectations refer to them.
//!
//! What is measured per bucket: the median and p99 of the dependency's latency and the share of its calls that
//! failed (5xx, timeouts, resets), all dependencies together; with no dependency in the record, the SUT's own
//! latency and 5xx share. Not for deciding what a phase does: each bucket keeps its own behaviour.

use super::timeline::{DepBucket, Histogram, Timeline};

/// A bucket is degraded when its median latency is over this many times the healthy median (and at least
/// [`MIN_SHIFT`] above it), or its p99 over this many times the healthy p99 (p99 as [`tail`] takes it: two calls,
/// never one).
const LATENCY_FACTOR: f64 = 2.0;
/// A latency shift smaller than this is noise whatever the ratio (a 1 ms dependency at 2.5 ms is healthy).
const MIN_SHIFT: f64 = 0.005;
/// A bucket is degraded when its failure share is this much over the healthy share.
const FAILURE_SHIFT: f64 = 0.10;
/// Within a degraded stretch, a new phase begins when the median moves by this factor or the failure share by
/// [`LEVEL_FAILURE_SHIFT`] from the phase's first bucket.
const LEVEL_FACTOR: f64 = 3.0;
const LEVEL_FAILURE_SHIFT: f64 = 0.25;

/// A phase found in the record: its name and its buckets `[start, end)`.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseSpan {
    pub name: String,
    pub start: usize,
    pub end: usize,
    /// Whether the dependency was degraded during it.
    pub degraded: bool,
}

#[derive(Debug, Clone, Copy)]
struct Signal {
    p50: f64,
    p99: f64,
    failed: f64,
}

fn signal(latency: &Histogram, failed: f64) -> Option<Signal> {
    Some(Signal {
        p50: latency.quantile(0.5)?,
        p99: tail(latency)?,
        failed,
    })
}

/// The bucket's p99, but never a single call's: over 100 calls or fewer p99 is the slowest call, and one slow call
/// (a pause of the service's or of the host that wrote the record) is not a change of the dependency. So the tail
/// is the lower of p99 and the second-slowest call: a bucket is slow by its tail only when two calls are.
fn tail(latency: &Histogram) -> Option<f64> {
    let n = latency.count();
    let p99 = latency.quantile(0.99)?;
    if n < 2 {
        return Some(p99);
    }
    let second_slowest = latency.quantile((n - 1) as f64 / n as f64)?;
    Some(p99.min(second_slowest))
}

fn signals(t: &Timeline) -> Vec<Option<Signal>> {
    let with_deps = !t.dependencies().is_empty();
    (0..t.buckets())
        .map(|k| {
            if with_deps {
                let b: DepBucket = t.all_deps(k);
                if b.calls() == 0 {
                    return None;
                }
                let failed = b.failed_share();
                signal(&b.latency, failed).or(Some(Signal {
                    p50: f64::INFINITY,
                    p99: f64::INFINITY,
                    failed,
                }))
            } else {
                let s = t.sut(k);
                let answered: u64 = s.statuses.values().sum();
                let failed = if answered == 0 {
                    0.0
                } else {
                    s.statuses.range(500..).map(|(_, c)| c).sum::<u64>() as f64 / answered as f64
                };
                signal(&s.latency, failed).or((answered > 0).then_some(Signal {
                    p50: 0.0,
                    p99: 0.0,
                    failed,
                }))
            }
        })
        .collect()
}

/// Whether a level departs from the healthy one: its median or its tail slower by [`LATENCY_FACTOR`] (and by
/// [`MIN_SHIFT`] at least), or its failure share higher by [`FAILURE_SHIFT`].
fn is_degraded(base: &Signal, s: &Signal) -> bool {
    let slow = s.p50 > (base.p50 * LATENCY_FACTOR).max(base.p50 + MIN_SHIFT)
        || s.p99 > (base.p99 * LATENCY_FACTOR).max(base.p99 + MIN_SHIFT);
    slow || s.failed > base.failed + FAILURE_SHIFT
}

/// Whether calls `b` are degraded against the healthy calls `base`, by the rule a record's change points are found
/// with: what a run's phase is judged by when a run, not a record, is read.
pub fn departs(base: &DepBucket, b: &DepBucket) -> bool {
    let failed = b.failed_share();
    match (
        signal(&base.latency, base.failed_share()),
        signal(&b.latency, failed),
    ) {
        (Some(base), Some(s)) => is_degraded(&base, &s),
        (base, None) => failed > base.map_or(0.0, |s| s.failed) + FAILURE_SHIFT,
        (None, Some(_)) => false,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The phases of a timeline, covering every bucket.
pub fn find_phases(t: &Timeline) -> Vec<PhaseSpan> {
    let sig = signals(t);
    let n = sig.len();
    let known: Vec<Signal> = sig.iter().flatten().copied().collect();
    let reference = known.len().div_ceil(10).max(1).min(known.len());
    let head = &known[..reference];
    let base = Signal {
        p50: median(head.iter().map(|s| s.p50).collect()),
        p99: median(head.iter().map(|s| s.p99).collect()),
        failed: median(head.iter().map(|s| s.failed).collect()),
    };
    let degraded = |s: &Signal| is_degraded(&base, s);
    // Each bucket's state; a bucket without calls keeps the state before it.
    let mut states: Vec<bool> = Vec::with_capacity(n);
    for s in &sig {
        let prev = states.last().copied().unwrap_or(false);
        states.push(s.as_ref().map_or(prev, degraded));
    }
    // A lone bucket between two of the other state is noise, not a phase.
    for k in 1..n.saturating_sub(1) {
        if states[k - 1] == states[k + 1] && states[k] != states[k - 1] {
            states[k] = states[k - 1];
        }
    }
    // So is a lone degraded last bucket after healthy ones: the record ends before a second bucket could confirm
    // the change, and the last bucket is often a partial one, whose few calls make one slow call its p99. A lone
    // healthy last bucket after a degraded stretch stays a recovery: one slow call cannot make a bucket healthy.
    if n >= 3 && states[n - 1] && !states[n - 2] && !states[n - 3] {
        states[n - 1] = false;
    }
    let mut spans: Vec<(usize, bool)> = Vec::new();
    let mut level: Option<Signal> = None;
    for k in 0..n {
        let new_state = spans.last().is_none_or(|(_, d)| *d != states[k]);
        // A change seldom falls on a bucket's edge: the first bucket of a phase holds some of the phase before,
        // so the level is the second bucket's, and a level lasting one bucket is noise as a state is.
        if !new_state && spans.last().is_some_and(|(start, _)| *start + 1 == k) {
            level = sig[k].or(level);
            continue;
        }
        let moved = |s: Option<Signal>| match (level, s) {
            (Some(l), Some(s)) if l.p50.is_finite() && s.p50.is_finite() => {
                let ratio = s.p50.max(1e-9) / l.p50.max(1e-9);
                !(1.0 / LEVEL_FACTOR..=LEVEL_FACTOR).contains(&ratio)
                    || (s.failed - l.failed).abs() > LEVEL_FAILURE_SHIFT
            }
            _ => false,
        };
        // The same for the phase's last bucket: a level must hold for two buckets, so the bucket where a
        // degraded stretch ends (partly degraded, mostly not) does not make a phase of its own.
        let new_level = states[k]
            && !new_state
            && moved(sig[k])
            && k + 1 < n
            && states[k + 1]
            && moved(sig[k + 1]);
        if new_state || new_level {
            spans.push((k, states[k]));
            level = sig[k];
        } else if level.is_none() {
            level = sig[k];
        }
    }
    let (mut degraded_n, mut recovered_n) = (0, 0);
    let mut seen_degraded = false;
    spans
        .iter()
        .enumerate()
        .map(|(i, (start, d))| {
            let name = if *d {
                seen_degraded = true;
                degraded_n += 1;
                format!("degraded-{degraded_n}")
            } else if !seen_degraded {
                "healthy".to_string()
            } else {
                recovered_n += 1;
                if recovered_n == 1 {
                    "recovered".to_string()
                } else {
                    format!("recovered-{recovered_n}")
                }
            };
            PhaseSpan {
                name,
                start: *start,
                end: spans.get(i + 1).map_or(n, |s| s.0),
                degraded: *d,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::{CallOutcome, DependencyCall, Record};

    /// 100 calls a second for `secs` seconds; the dependency takes `latency(second)` ms and fails with 503 in
    /// `failed(second)` of every 100 calls.
    fn timeline(
        secs: usize,
        latency: impl Fn(usize) -> f64,
        failed: impl Fn(usize) -> u64,
    ) -> Timeline {
        let mut t = Timeline::new(1.0, false);
        for s in 0..secs {
            for i in 0..100u64 {
                let at = 1000.0 + s as f64 + i as f64 / 100.0;
                let jitter = 1.0 + (i % 10) as f64 / 100.0;
                let status = if i < failed(s) { 503 } else { 200 };
                call_at(&mut t, at, latency(s) * jitter / 1e3, status);
            }
        }
        t
    }

    /// One request at `at` whose dependency call took `duration` seconds and answered `status`.
    fn call_at(t: &mut Timeline, at: f64, duration: f64, status: u16) {
        t.add(&Record {
            arrival: at,
            method: "GET".into(),
            target: "/p/1".into(),
            status: Some(200),
            duration: None,
            calls: vec![DependencyCall {
                peer: "dep".into(),
                at,
                duration: Some(duration),
                outcome: CallOutcome::Status(status),
            }],
        });
    }

    /// `n` calls of 800 ms from `from` on, 10 ms apart: a brownout's edge inside a bucket.
    fn slow_calls(t: &mut Timeline, from: f64, n: usize) {
        for i in 0..n {
            call_at(t, from + i as f64 / 100.0, 0.8, 200);
        }
    }

    fn summary(p: &[PhaseSpan]) -> Vec<(&str, usize, usize)> {
        p.iter()
            .map(|p| (p.name.as_str(), p.start, p.end))
            .collect()
    }

    #[test]
    fn a_brownout_is_healthy_degraded_recovered() {
        let t = timeline(
            30,
            |s| if (10..20).contains(&s) { 800.0 } else { 40.0 },
            |_| 0,
        );
        assert_eq!(
            summary(&find_phases(&t)),
            vec![
                ("healthy", 0, 10),
                ("degraded-1", 10, 20),
                ("recovered", 20, 30)
            ]
        );
    }

    #[test]
    fn a_brownout_that_worsens_into_errors_is_two_degraded_phases() {
        let t = timeline(
            40,
            |s| match s {
                10..20 => 300.0,
                20..30 => 2000.0,
                _ => 20.0,
            },
            |s| if (20..30).contains(&s) { 60 } else { 0 },
        );
        assert_eq!(
            summary(&find_phases(&t)),
            vec![
                ("healthy", 0, 10),
                ("degraded-1", 10, 20),
                ("degraded-2", 20, 30),
                ("recovered", 30, 40)
            ]
        );
    }

    #[test]
    fn a_brownout_beginning_inside_a_bucket_is_one_degraded_phase_from_that_bucket() {
        // Second 10 holds 30 calls of the brownout after 70 healthy ones: its median is healthy, its p99 is not.
        let mut t = timeline(
            30,
            |s| if (11..20).contains(&s) { 800.0 } else { 40.0 },
            |_| 0,
        );
        slow_calls(&mut t, 1010.7, 30);
        assert_eq!(
            summary(&find_phases(&t)),
            vec![
                ("healthy", 0, 10),
                ("degraded-1", 10, 20),
                ("recovered", 20, 30)
            ]
        );
    }

    #[test]
    fn a_brownout_ending_inside_a_bucket_does_not_make_a_phase_of_that_bucket() {
        // Second 20 holds 10 slow calls of the brownout's end among 100 healthy ones: its p99 is degraded, its
        // median healthy.
        let mut t = timeline(
            30,
            |s| if (10..20).contains(&s) { 800.0 } else { 40.0 },
            |_| 0,
        );
        slow_calls(&mut t, 1020.0, 10);
        assert_eq!(
            summary(&find_phases(&t)),
            vec![
                ("healthy", 0, 10),
                ("degraded-1", 10, 21),
                ("recovered", 21, 30)
            ]
        );
    }

    #[test]
    fn a_last_bucket_with_one_slow_call_among_few_is_not_a_phase() {
        // The record's last second is a partial one: a handful of healthy calls and one slow one, whose p99 is
        // that call.
        let mut t = timeline(
            12,
            |s| if (4..8).contains(&s) { 800.0 } else { 40.0 },
            |_| 0,
        );
        for k in 0..10 {
            call_at(&mut t, 1012.0 + k as f64 / 20.0, 0.040, 200);
        }
        slow_calls(&mut t, 1012.6, 1);
        assert_eq!(t.buckets(), 13);
        assert_eq!(
            summary(&find_phases(&t)),
            vec![
                ("healthy", 0, 4),
                ("degraded-1", 4, 8),
                ("recovered", 8, 13)
            ]
        );
    }

    #[test]
    fn one_slow_call_in_each_of_two_seconds_after_a_recovery_is_not_a_phase() {
        // 50 calls a second, as a record of a small service: a host stall made one call slow in each of seconds
        // 10 and 11 after the brownout of 4-9 s. Over 50 calls p99 is the slowest call, so each second would be
        // degraded by it, the healthy second 9 between the brownout and them would be filled in, and the whole
        // would be a second degraded level from 9 s.
        let mut t = Timeline::new(1.0, false);
        for s in 0..13usize {
            for i in 0..50u64 {
                let ms = if (4..9).contains(&s) {
                    160.0
                } else {
                    10.0 + (i % 5) as f64
                };
                call_at(&mut t, 1000.0 + s as f64 + i as f64 / 50.0, ms / 1e3, 200);
            }
        }
        call_at(&mut t, 1010.5, 0.038, 200);
        call_at(&mut t, 1011.5, 0.032, 200);
        assert_eq!(
            summary(&find_phases(&t)),
            vec![
                ("healthy", 0, 4),
                ("degraded-1", 4, 9),
                ("recovered", 9, 13)
            ]
        );
        // Two slow calls in a second are a change, and the same seconds make the phase that one call could not.
        call_at(&mut t, 1010.6, 0.038, 200);
        call_at(&mut t, 1011.6, 0.032, 200);
        assert_eq!(
            summary(&find_phases(&t)),
            vec![
                ("healthy", 0, 4),
                ("degraded-1", 4, 9),
                ("degraded-2", 9, 12),
                ("recovered", 12, 13)
            ]
        );
    }

    #[test]
    fn errors_alone_are_a_degraded_phase_and_one_slow_second_is_not() {
        let t = timeline(
            20,
            |s| if s == 3 { 500.0 } else { 30.0 },
            |s| if (8..12).contains(&s) { 40 } else { 0 },
        );
        assert_eq!(
            summary(&find_phases(&t)),
            vec![
                ("healthy", 0, 8),
                ("degraded-1", 8, 12),
                ("recovered", 12, 20)
            ]
        );
    }
}
