//! Turns the components' own recordings (loadgen's and faultd's) into one `RunRecord` on the run's clock, so that
//! expectations and reports read a single shape whatever produced it.
//!
//! Not for recording (the components do that) nor for breaker timelines (the runner adds them).

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;

use crate::record::{ByClass, DependencyBucket, OutcomeClass, PhaseSpan, RunRecord, SutBucket};

/// Builds the record of a run of `duration` (the time actually run) from its recordings.
pub fn record(
    bucket: Duration,
    duration: Duration,
    phases: &[(String, Duration)],
    load: &loadgen::Recording,
    dependency: &faultd::Recording,
) -> RunRecord {
    let n = (duration.as_nanos().div_ceil(bucket.as_nanos().max(1))) as usize;
    let mut sut = Vec::with_capacity(n);
    let mut sut_latency = Vec::with_capacity(n);
    let mut decoder = Deserializer::new();
    for i in 0..n {
        let Some(b) = load.buckets.get(i) else {
            sut.push(SutBucket::default());
            sut_latency.push(empty_histogram());
            continue;
        };
        let mut completed = ByClass::default();
        for class in OutcomeClass::ALL {
            completed.add(class, b.completed.get(class));
        }
        completed.add(OutcomeClass::Dropped, b.dropped);
        let latency = b.latency;
        sut.push(SutBucket {
            offered: b.intended,
            completed,
            in_flight: b.in_flight,
            p50: latency.map(|l| l.p50.get()),
            p90: latency.map(|l| l.p90.get()),
            p99: latency.map(|l| l.p99.get()),
            max: latency.map(|l| l.max.get()),
        });
        let h = b
            .interval_histogram
            .as_ref()
            .and_then(|bytes| decoder.deserialize::<u64, _>(&mut bytes.as_slice()).ok())
            .unwrap_or_else(empty_histogram);
        sut_latency.push(h);
    }

    let mut routes = BTreeMap::new();
    for (name, route) in &dependency.routes {
        let series: Vec<DependencyBucket> = (0..n)
            .map(|i| {
                route
                    .buckets
                    .get(i)
                    .map(|b| DependencyBucket {
                        arrivals: b.arrivals,
                        in_flight_max: b.in_flight_max,
                        first_arrivals: b
                            .first_arrivals_us
                            .iter()
                            .map(|us| Duration::from_micros(u64::from(*us)))
                            .collect(),
                    })
                    .unwrap_or_default()
            })
            .collect();
        routes.insert(name.clone(), series);
    }

    RunRecord {
        bucket,
        duration,
        phases: spans(phases, duration),
        sut,
        sut_latency,
        dependency: routes,
        breakers: BTreeMap::new(),
    }
}

/// Phase spans from their start times, each ending where the next begins; phases that never began are left out.
pub fn spans(phases: &[(String, Duration)], duration: Duration) -> Vec<PhaseSpan> {
    let mut out = Vec::new();
    for (i, (name, start)) in phases.iter().enumerate() {
        if *start >= duration && i > 0 {
            break;
        }
        let end = phases
            .get(i + 1)
            .map(|(_, s)| *s)
            .unwrap_or(duration)
            .min(duration);
        out.push(PhaseSpan {
            name: name.clone(),
            start: *start,
            end: end.max(*start),
        });
    }
    out
}

fn empty_histogram() -> Histogram<u64> {
    Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits is a valid precision"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    #[test]
    fn phases_end_where_the_next_begins_and_are_clipped_to_the_run() {
        let phases = vec![
            ("healthy".to_string(), s(0.0)),
            ("brownout".to_string(), s(20.0)),
            ("recovered".to_string(), s(60.0)),
        ];
        let full = spans(&phases, s(90.0));
        assert_eq!(
            full.iter()
                .map(|p| (p.name.as_str(), p.start, p.end))
                .collect::<Vec<_>>(),
            vec![
                ("healthy", s(0.0), s(20.0)),
                ("brownout", s(20.0), s(60.0)),
                ("recovered", s(60.0), s(90.0)),
            ]
        );
        let aborted = spans(&phases, s(30.0));
        assert_eq!(aborted.len(), 2);
        assert_eq!(aborted[1].end, s(30.0));
    }
}
