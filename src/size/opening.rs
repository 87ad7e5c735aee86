//! When a breaker would open on a recorded degradation: its rolling window played over the record bucket by
//! bucket, at the rate each instance sees. A call fails when it ends in an error (5xx, a reset, a caller's timeout)
//! or takes longer than the timeout, and its failure lands a timeout after it began; a success lands as it began.
//! The breaker opens at the first instant its window holds the floor of calls and the failure rate.
//!
//! Not for the arithmetic of a step (`arithmetic` has the timeout plus the rate's share of the window): a recorded
//! degradation ramps, and only the record knows when its calls cross the timeout.

use crate::import::CallOutcome;

use super::evidence::Evidence;

/// The breaker and the traffic it sees.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub timeout_s: f64,
    /// Calls per second one instance makes (the record's counts are scaled to it).
    pub rate_per_s: f64,
    pub failure_rate: f64,
    pub window_s: f64,
    pub min_calls: u32,
}

/// Seconds from the start of the record's degradation to the breaker's opening; `None` when it does not open
/// before the record ends.
pub fn opens_after(e: &Evidence, rule: &Rule) -> Option<f64> {
    let degraded = e.degraded()?;
    let recorded = e.rate().filter(|r| *r > 0.0)?;
    let scale = rule.rate_per_s / recorded;
    let b = e.bucket_s;
    let t_out = rule.timeout_s;
    // Per bucket: calls, and those that fail.
    let cells: Vec<(f64, f64)> = e
        .buckets
        .iter()
        .map(|bucket| {
            let calls = bucket.calls() as f64;
            let ok: u64 = bucket
                .outcomes
                .iter()
                .filter(|(o, _)| matches!(o, CallOutcome::Status(s) if *s < 500))
                .map(|(_, c)| c)
                .sum();
            let answered = bucket.latency.count();
            let slow = if answered > 0 {
                bucket.latency.count_above(t_out) / answered as f64
            } else {
                0.0
            };
            let failing = (calls - ok as f64) + ok as f64 * slow;
            (calls * scale, failing * scale)
        })
        .collect();
    let overlap = |from: f64, to: f64, lo: f64, hi: f64| ((to.min(hi) - from.max(lo)) / b).max(0.0);
    let start = degraded.start as f64 * b;
    let end = cells.len() as f64 * b + t_out;
    let step = (b / 10.0).clamp(1e-3, 0.05);
    let mut t = start;
    while t <= end {
        let lo = t - rule.window_s;
        let first = ((lo - t_out) / b).floor().max(0.0) as usize;
        let last = ((t / b).ceil() as usize).min(cells.len());
        let (mut total, mut failed) = (0.0, 0.0);
        for (k, (calls, failing)) in cells.iter().enumerate().take(last).skip(first) {
            let k0 = k as f64 * b;
            let ok_share = overlap(k0, k0 + b, lo, t);
            let fail_share = overlap(k0 + t_out, k0 + b + t_out, lo, t);
            total += (calls - failing) * ok_share + failing * fail_share;
            failed += failing * fail_share;
        }
        if total >= f64::from(rule.min_calls) && total > 0.0 && failed / total >= rule.failure_rate
        {
            return Some(t - start);
        }
        t += step;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::{DepBucket, Histogram, PhaseSpan};

    /// A record at 100 calls a second: healthy at 50 ms for `healthy` seconds, then at `slow` seconds.
    fn record(healthy: usize, degraded: usize, slow: f64) -> Evidence {
        let bucket = |latency: f64| {
            let mut h = Histogram::default();
            h.record_n(latency, 100);
            DepBucket {
                latency: h,
                outcomes: [(CallOutcome::Status(200), 100)].into_iter().collect(),
            }
        };
        let mut buckets: Vec<DepBucket> = (0..healthy).map(|_| bucket(0.05)).collect();
        buckets.extend((0..degraded).map(|_| bucket(slow)));
        Evidence {
            source: "test".into(),
            dependency: "d".into(),
            others: Vec::new(),
            bucket_s: 1.0,
            healthy_latency: buckets[0].latency.clone(),
            phases: vec![
                PhaseSpan {
                    name: "healthy".into(),
                    start: 0,
                    end: healthy,
                    degraded: false,
                },
                PhaseSpan {
                    name: "degraded-1".into(),
                    start: healthy,
                    end: healthy + degraded,
                    degraded: true,
                },
            ],
            buckets,
        }
    }

    fn rule(rate: f64, min_calls: u32) -> Rule {
        Rule {
            timeout_s: 0.25,
            rate_per_s: rate,
            failure_rate: 0.5,
            window_s: 10.0,
            min_calls,
        }
    }

    #[test]
    fn a_step_opens_a_timeout_plus_half_the_window_in() {
        let e = record(20, 30, 2.0);
        let at = opens_after(&e, &rule(100.0, 20)).unwrap();
        assert!((at - 5.25).abs() < 0.1, "{at}");
        // The rate does not move a rate threshold, as long as the floor is met.
        let at = opens_after(&e, &rule(500.0, 20)).unwrap();
        assert!((at - 5.25).abs() < 0.1, "{at}");
    }

    #[test]
    fn a_floor_the_window_never_holds_never_opens() {
        let e = record(20, 30, 2.0);
        assert_eq!(opens_after(&e, &rule(0.1, 20)), None);
    }

    #[test]
    fn a_degradation_under_the_timeout_never_opens() {
        let e = record(20, 30, 0.2);
        assert_eq!(opens_after(&e, &rule(100.0, 20)), None);
    }
}
