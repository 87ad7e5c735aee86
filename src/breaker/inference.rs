//! Inferring a breaker's state from traffic alone, for SUTs that expose nothing: the SUT keeps receiving load but
//! the calls stop reaching the dependency (open), a few calls get through (half-open probes), traffic returns
//! (closed). It works on any SUT because both sides of it are measured by faultline itself.
//!
//! The evidence is a ratio: calls at the dependency per request to the SUT, against the ratio seen while healthy.
//! Counting needs volume, so buckets are grouped into windows that each expect at least `min_expected` calls; the
//! window is the inference's time resolution and is stated on every transition. A pool filled with hung calls also
//! stops new calls from arriving, so "open" also needs the dependency to hold almost nothing in flight: an open
//! breaker fails fast, a saturated bulkhead does not.
//!
//! Not for SUTs whose calls to the dependency do not scale with their own load (caches, batch jobs).

use std::time::Duration;

use super::{BreakerState, BreakerTimeline, Source, Transition};

/// Thresholds of the inference. The defaults suit a breaker that stops (almost) all calls when open.
#[derive(Debug, Clone, Copy)]
pub struct InferenceParams {
    /// Below this share of the healthy call ratio, with little in flight, a window looks open.
    pub open_below: f64,
    /// At or above this share, a window looks closed.
    pub closed_above: f64,
    /// Calls a window must expect before it counts as evidence.
    pub min_expected: f64,
}

impl Default for InferenceParams {
    fn default() -> Self {
        InferenceParams {
            open_below: 0.1,
            closed_above: 0.5,
            min_expected: 10.0,
        }
    }
}

/// The traffic one inference reads, bucket by bucket on the run's clock.
#[derive(Debug, Clone)]
pub struct Traffic<'a> {
    pub bucket: Duration,
    /// Requests sent to the SUT per bucket.
    pub sut_sent: &'a [u64],
    /// Calls arriving at the dependency route per bucket.
    pub dependency_arrivals: &'a [u64],
    /// Most calls in flight at the dependency route per bucket.
    pub dependency_in_flight: &'a [u64],
    /// The buckets that show the healthy ratio (the first phase, usually).
    pub reference: std::ops::Range<usize>,
}

/// Why no timeline could be inferred.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InferenceError {
    #[error("no calls reached the dependency during the reference span, so there is no healthy ratio to compare with")]
    NoReference,
}

/// Infers the breaker timeline. The window (and so the resolution) is the smallest whole number of buckets that
/// expects `min_expected` calls at the average healthy call rate.
pub fn infer(
    traffic: Traffic<'_>,
    params: InferenceParams,
) -> Result<BreakerTimeline, InferenceError> {
    let n = traffic
        .sut_sent
        .len()
        .min(traffic.dependency_arrivals.len());
    let reference = traffic.reference.start.min(n)..traffic.reference.end.min(n);
    let ref_sut: u64 = traffic.sut_sent[reference.clone()].iter().sum();
    let ref_dep: u64 = traffic.dependency_arrivals[reference.clone()].iter().sum();
    if ref_sut == 0 || ref_dep == 0 {
        return Err(InferenceError::NoReference);
    }
    let ratio = ref_dep as f64 / ref_sut as f64;
    let calls_per_bucket = ref_dep as f64 / reference.len().max(1) as f64;
    let window = ((params.min_expected / calls_per_bucket).ceil() as usize).clamp(1, n.max(1));
    let resolution = traffic.bucket * window as u32;

    let mut timeline = BreakerTimeline {
        transitions: Vec::new(),
        resolution,
        gaps: Vec::new(),
        source: Some(Source::Inferred),
        samples: Vec::new(),
    };
    let mut state = BreakerState::Closed;
    let change = |timeline: &mut BreakerTimeline,
                  state: &mut BreakerState,
                  to: BreakerState,
                  at: Duration| {
        timeline.transitions.push(Transition {
            at,
            from: *state,
            to,
            source: Source::Inferred,
            resolution,
        });
        *state = to;
    };
    // Calls stop arriving the moment a breaker opens, but the calls it let through before still drain until their
    // timeout; the opening is dated back to the first quiet window, not to the end of the drain.
    let mut quiet_since: Option<Duration> = None;
    for start in (0..n).step_by(window) {
        let end = (start + window).min(n);
        let expected = ratio * traffic.sut_sent[start..end].iter().sum::<u64>() as f64;
        if expected < params.min_expected / 2.0 {
            continue;
        }
        let arrived = traffic.dependency_arrivals[start..end].iter().sum::<u64>() as f64;
        let held_at_end = traffic
            .dependency_in_flight
            .get(end - 1)
            .copied()
            .unwrap_or(0) as f64;
        let share = arrived / expected;
        let at = traffic.bucket * start as u32;
        let quiet = share < params.open_below;
        if !quiet {
            quiet_since = None;
        } else if quiet_since.is_none() {
            quiet_since = Some(at);
        }
        let looks_open = quiet && held_at_end <= (params.open_below * expected).max(2.0);
        match state {
            BreakerState::Closed if looks_open => change(
                &mut timeline,
                &mut state,
                BreakerState::Open,
                quiet_since.unwrap_or(at),
            ),
            BreakerState::Open if share >= params.closed_above => {
                change(&mut timeline, &mut state, BreakerState::HalfOpen, at);
                change(
                    &mut timeline,
                    &mut state,
                    BreakerState::Closed,
                    traffic.bucket * end as u32,
                );
            }
            BreakerState::Open if arrived > 0.0 => {
                change(&mut timeline, &mut state, BreakerState::HalfOpen, at)
            }
            BreakerState::HalfOpen if share >= params.closed_above => {
                change(&mut timeline, &mut state, BreakerState::Closed, at)
            }
            BreakerState::HalfOpen if arrived == 0.0 => {
                change(&mut timeline, &mut state, BreakerState::Open, at)
            }
            _ => {}
        }
    }
    Ok(timeline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use BreakerState::*;

    const BUCKET: Duration = Duration::from_millis(100);

    /// 500 rps to the SUT (50 per 100 ms bucket), one dependency call per request unless `dep` says otherwise.
    fn run(
        dep: impl Fn(usize) -> u64,
        in_flight: impl Fn(usize) -> u64,
        buckets: usize,
    ) -> BreakerTimeline {
        let sut = vec![50; buckets];
        let arrivals: Vec<u64> = (0..buckets).map(dep).collect();
        let held: Vec<u64> = (0..buckets).map(in_flight).collect();
        infer(
            Traffic {
                bucket: BUCKET,
                sut_sent: &sut,
                dependency_arrivals: &arrivals,
                dependency_in_flight: &held,
                reference: 0..50,
            },
            InferenceParams::default(),
        )
        .unwrap()
    }

    fn states(t: &BreakerTimeline) -> Vec<(u128, BreakerState)> {
        t.transitions
            .iter()
            .map(|tr| (tr.at.as_millis(), tr.to))
            .collect()
    }

    #[test]
    fn steady_traffic_infers_no_transition() {
        let t = run(|_| 50, |_| 3, 200);
        assert!(t.transitions.is_empty());
        assert_eq!(t.resolution, BUCKET);
    }

    #[test]
    fn calls_stopping_while_the_sut_keeps_its_load_is_an_open_breaker() {
        let t = run(
            |i| if i < 100 { 50 } else { 0 },
            |i| if i < 100 { 10 } else { 0 },
            200,
        );
        assert_eq!(states(&t), vec![(10_000, Open)]);
        assert_eq!(t.transitions[0].source, Source::Inferred);
    }

    #[test]
    fn a_sparse_probe_after_the_open_window_is_half_open_and_returning_traffic_closes() {
        // Open from 10 s; one probe at 13 s that fails; another at 16 s that succeeds; traffic back from 16.1 s.
        let dep = |i: usize| match i {
            0..=99 => 50,
            130 | 160 => 1,
            161.. => 50,
            _ => 0,
        };
        let t = run(dep, |i| if (100..=160).contains(&i) { 0 } else { 10 }, 250);
        assert_eq!(
            states(&t),
            vec![
                (10_000, Open),
                (13_000, HalfOpen),
                (13_100, Open),
                (16_000, HalfOpen),
                (16_100, Closed)
            ]
        );
    }

    #[test]
    fn a_breaker_that_opens_closes_and_reopens_is_seen_twice() {
        let dep = |i: usize| {
            if (60..90).contains(&i) || (150..180).contains(&i) {
                0
            } else {
                50
            }
        };
        let t = run(dep, |_| 0, 200);
        let opens = t.transitions.iter().filter(|tr| tr.to == Open).count();
        assert_eq!(opens, 2);
        assert_eq!(t.state_at(Duration::from_secs(20)), Closed);
    }

    #[test]
    fn the_opening_is_dated_to_when_calls_stopped_not_to_when_the_last_ones_drained() {
        // Calls stop at 10 s; the ones in flight take 300 ms to time out.
        let t = run(
            |i| if i < 100 { 50 } else { 0 },
            |i| if i < 103 { 120 } else { 0 },
            200,
        );
        assert_eq!(states(&t), vec![(10_000, Open)]);
    }

    #[test]
    fn a_pool_full_of_hung_calls_is_not_mistaken_for_an_open_breaker() {
        // A dependency that hangs: arrivals stop because the bulkhead is full of calls that never return.
        let t = run(
            |i| if i < 100 { 50 } else { 0 },
            |i| if i < 100 { 10 } else { 200 },
            200,
        );
        assert!(t.transitions.is_empty(), "{:?}", t.transitions);
    }

    #[test]
    fn low_traffic_widens_the_window_and_states_it_as_the_resolution() {
        // 6 rps: 0.6 calls per bucket, so a window of 17 buckets expects 10 calls.
        let sut: Vec<u64> = (0..400).map(|i| if i % 5 < 3 { 1 } else { 0 }).collect();
        let dep: Vec<u64> = sut
            .iter()
            .enumerate()
            .map(|(i, &s)| if i < 200 { s } else { 0 })
            .collect();
        let t = infer(
            Traffic {
                bucket: BUCKET,
                sut_sent: &sut,
                dependency_arrivals: &dep,
                dependency_in_flight: &vec![0; 400],
                reference: 0..100,
            },
            InferenceParams::default(),
        )
        .unwrap();
        assert_eq!(t.resolution, BUCKET * 17);
        assert_eq!(t.transitions.len(), 1);
        let at = t.transitions[0].at;
        assert!(
            at >= Duration::from_secs(20) && at < Duration::from_secs(20) + t.resolution,
            "{at:?}"
        );
    }

    #[test]
    fn no_calls_in_the_reference_span_is_an_error_not_a_guess() {
        let sut = vec![50; 10];
        let err = infer(
            Traffic {
                bucket: BUCKET,
                sut_sent: &sut,
                dependency_arrivals: &[0; 10],
                dependency_in_flight: &[0; 10],
                reference: 0..10,
            },
            InferenceParams::default(),
        )
        .unwrap_err();
        assert_eq!(err, InferenceError::NoReference);
    }
}
