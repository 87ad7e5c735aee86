//! Turns the components' own recordings (loadgen's and faultd's) into one `RunRecord` on the run's clock, so that
//! expectations and reports read a single shape whatever produced it.
//!
//! The same functions build a record once, after the run, and grow one second by second during it for the live
//! verdicts. Not for recording (the components do that) nor for breaker timelines (`run::watch` adds them).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::record::{
    ByClass, DependencyBucket, HandshakeBucket, LoadHandshakes, OutcomeClass, PhaseSpan, RunRecord,
    SutBucket,
};

/// Builds the record of a run of `duration` (the time actually run) from loadgen's recording (its time series,
/// its TLS handshakes and the reasons of its connect errors) and faultd's recording.
pub fn record(
    bucket: Duration,
    duration: Duration,
    phases: &[(String, Duration)],
    load: &loadgen::Recording,
    dependency: &faultd::Recording,
) -> RunRecord {
    let mut record = RunRecord::empty(bucket);
    append_sut(&mut record, &load.buckets);
    record.load_tls = load.tls.map(|t| LoadHandshakes {
        full: t.handshakes,
        resumed: t.resumed,
        failed: t.failed,
    });
    record.connect_errors = load.connect_errors.clone();
    record.sut_class_latency = load
        .phases
        .iter()
        .map(|p| {
            let by_class = p
                .classes
                .iter()
                .map(|(class, h)| (*class, h.corrected.0.clone()))
                .collect();
            (p.name.clone(), by_class)
        })
        .collect();
    advance(&mut record, duration, phases, dependency);
    record
}

/// Appends loadgen buckets to the SUT's series, each bucket's latency kept as the bytes it came in.
pub fn append_sut(record: &mut RunRecord, load: &[loadgen::Bucket]) {
    for b in load {
        push_sut(record, b, b.interval_histogram.clone());
    }
}

/// [`append_sut`] that moves each bucket's latency bytes into the record, leaving the bucket without them, so a
/// run that keeps loadgen's buckets as well does not hold the bytes twice; [`restore_latency`] hands them back.
pub fn append_sut_taking(record: &mut RunRecord, load: &mut [loadgen::Bucket]) {
    for b in load {
        let bytes = b.interval_histogram.take();
        push_sut(record, b, bytes);
    }
}

/// Hands the latency bytes [`append_sut_taking`] moved into `record` back to loadgen's buckets (bucket `i` of
/// `load` is the record's bucket `i`), for the recording written after the run.
pub fn restore_latency(record: &RunRecord, load: &mut [loadgen::Bucket]) {
    for (i, b) in load.iter_mut().enumerate() {
        if b.interval_histogram.is_none() {
            b.interval_histogram = record.sut_latency.encoded(i).map(<[u8]>::to_vec);
        }
    }
}

fn push_sut(record: &mut RunRecord, b: &loadgen::Bucket, latency_bytes: Option<Vec<u8>>) {
    let mut completed = ByClass::default();
    for class in OutcomeClass::ALL {
        completed.add(class, b.completed.get(class));
    }
    completed.add(OutcomeClass::Dropped, b.dropped);
    let latency = b.latency;
    record.sut.push(SutBucket {
        offered: b.intended,
        completed,
        in_flight: b.in_flight,
        p50: latency.map(|l| l.p50.get()),
        p90: latency.map(|l| l.p90.get()),
        p99: latency.map(|l| l.p99.get()),
        max: latency.map(|l| l.max.get()),
    });
    record.sut_latency.push_encoded(latency_bytes);
}

/// Sets how far the record reaches: its duration, the phases as far as they began, the SUT's series padded (or
/// cut) to that many buckets, and the dependency's series read afresh from `dependency` up to the same bucket.
pub fn advance(
    record: &mut RunRecord,
    duration: Duration,
    phases: &[(String, Duration)],
    dependency: &faultd::Recording,
) {
    advance_since(record, duration, phases, dependency, 0);
}

/// [`advance`] from a recording whose series start at bucket `from` (`Dependency::recording_since`): the
/// dependency's buckets before `from` are kept as the record holds them, those from `from` on are replaced, so the
/// work follows the buckets read, not the run's length. The run-wide figures are taken whole.
pub fn advance_since(
    record: &mut RunRecord,
    duration: Duration,
    phases: &[(String, Duration)],
    dependency: &faultd::Recording,
    from: usize,
) {
    let n = (duration
        .as_nanos()
        .div_ceil(record.bucket.as_nanos().max(1))) as usize;
    let from = from.min(n);
    record.duration = duration;
    record.phases = spans(phases, duration);
    record.sut.resize_with(n, SutBucket::default);
    record.sut_latency.resize(n);
    let upper_bound = dependency.in_flight_max_is_upper_bound;
    record.dependency_replicas = dependency.replicas.max(1);
    let mut routes = BTreeMap::new();
    let mut instances = BTreeMap::new();
    for (name, route) in &dependency.routes {
        let mut kept = record.dependency.remove(name).unwrap_or_default();
        splice(&mut kept, from, n, |i| {
            bucket(route.buckets.get(i)?, upper_bound)
        });
        routes.insert(name.clone(), kept);
        if !route.instances.is_empty() {
            let mut kept = record.instances.remove(name).unwrap_or_default();
            kept.resize_with(route.instances.len(), Vec::new);
            for (series, i) in kept.iter_mut().zip(&route.instances) {
                splice(series, from, n, |k| bucket(i.buckets.get(k)?, upper_bound));
            }
            instances.insert(name.clone(), kept);
        }
    }
    record.dependency = routes;
    record.instances = instances;
    record.entries = dependency
        .routes
        .iter()
        .filter(|(_, r)| !r.matched.is_empty())
        .map(|(name, r)| (name.clone(), r.matched.clone()))
        .collect();
    record.redis = dependency
        .routes
        .iter()
        .filter_map(|(name, r)| r.redis.clone().map(|x| (name.clone(), x)))
        .collect();
    record.unmatched = dependency.unmatched;
    record.postgres = dependency.postgres.clone();
    record.unmatched_paths = dependency.unmatched_paths.clone();
    record.dns = dependency.dns.clone();
    record.handshakes = dependency.tls.as_ref().map(|tls| {
        let mut kept = record.handshakes.take().unwrap_or_default();
        splice(&mut kept, from, n, |i| {
            tls.buckets.get(i).map(|b| HandshakeBucket {
                outcomes: b.handshakes.clone(),
                delayed: b.delayed,
            })
        });
        kept
    });
}

/// Where the next read of the dependency's recording may start once the record holds `n` buckets read from
/// `from` on: a second behind the end, where faultd may still count late arrivals, or earlier at the first bucket
/// holding a timed call still in flight (its answer's time is yet to come).
pub fn next_read_from(record: &RunRecord, from: usize) -> usize {
    let n = record.sut.len();
    let settling = (Duration::from_secs(1).as_nanos() / record.bucket.as_nanos().max(1)) as usize;
    let unanswered = |series: &[DependencyBucket]| {
        series
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, b)| b.first_held.iter().any(Option::is_none))
            .map(|(i, _)| i)
    };
    let routes = record.dependency.values().map(Vec::as_slice);
    let instances = record.instances.values().flatten().map(Vec::as_slice);
    routes
        .chain(instances)
        .filter_map(unanswered)
        .fold(n.saturating_sub(settling.max(1)), usize::min)
}

/// Sets `series` to `n` buckets: those before `from` as they are (padded with empty ones), the rest from `fresh`
/// (indexed from `from`; a missing bucket is an empty one).
fn splice<T: Default>(
    series: &mut Vec<T>,
    from: usize,
    n: usize,
    fresh: impl Fn(usize) -> Option<T>,
) {
    series.truncate(from);
    series.resize_with(from, T::default);
    series.extend((from..n).map(|i| fresh(i - from).unwrap_or_default()));
}

/// One of faultd's buckets in the record's shape.
fn bucket(b: &faultd::RouteBucket, upper_bound: bool) -> Option<DependencyBucket> {
    Some(DependencyBucket {
        arrivals: b.arrivals,
        in_flight_max: b.in_flight_max,
        in_flight_max_at_least: upper_bound
            .then(|| b.in_flight_max_lower_bound.unwrap_or(b.in_flight_max)),
        first_arrivals: b
            .first_arrivals_us
            .iter()
            .map(|us| Duration::from_micros(u64::from(*us)))
            .collect(),
        first_held: b
            .first_held_us
            .iter()
            .map(|us| us.map(|us| Duration::from_micros(u64::from(us))))
            .collect(),
        grpc_status: b.grpc_status.clone(),
    })
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

    fn dependency(tls: Option<faultd::tls::TlsRecording>) -> faultd::Recording {
        faultd::Recording {
            tls,
            ..faultd::Recording::empty(Duration::from_millis(100))
        }
    }

    #[test]
    fn the_dependencys_handshakes_are_read_per_bucket_and_padded_to_the_record() {
        let bucket = |outcome: &str, n: u64, delayed: u64| faultd::tls::TlsBucket {
            handshakes: BTreeMap::from([(outcome.to_string(), n)]),
            delayed,
        };
        let tls = faultd::tls::TlsRecording {
            buckets: vec![bucket("resumed", 1, 0), bucket("expired", 3, 1)],
            ..Default::default()
        };
        let mut r = RunRecord::empty(Duration::from_millis(100));
        advance(
            &mut r,
            s(0.4),
            &[("healthy".to_string(), s(0.0))],
            &dependency(Some(tls)),
        );
        let h = r.handshakes.clone().unwrap();
        assert_eq!(h.len(), 4, "one bucket per 100 ms of the run");
        assert_eq!(h[1].outcomes["expired"], 3);
        assert_eq!(h[1].delayed, 1);
        assert_eq!(h[3], HandshakeBucket::default());
        assert_eq!(r.handshakes_in(0..4), 4);

        let mut cleartext = RunRecord::empty(Duration::from_millis(100));
        advance(&mut cleartext, s(0.4), &[], &dependency(None));
        assert_eq!(cleartext.handshakes, None);
        assert_eq!(cleartext.handshakes_in(0..4), 0);
    }
}
