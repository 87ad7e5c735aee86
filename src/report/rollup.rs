//! Long runs: the per-bucket series of a run's files written at a width that keeps them bounded. A run of up to
//! `MAX_BUCKETS` buckets (10 minutes at the default 100 ms) is written at its own bucket; a longer one at 1 s,
//! past 100 minutes at 10 s, then 1 minute, 10 minutes and 1 hour, so the run's length makes at most `MAX_BUCKETS`
//! buckets in each series of load.json, dependency.json, sut.hlog and result.json, however long the run (the series
//! may hold a few more: calls that ended after the run's planned end).
//!
//! Rolling up keeps a recording a recording: counts are added, maxima stay maxima (the most in flight in a coarse
//! bucket is the most of its buckets), means are averaged over equal widths, and HDR histograms are merged exactly,
//! so a coarse bucket's percentiles are those of every request it covers. Each recording carries its new width, and
//! everything that reads one (`faultline report`, `compare`, `size`) reads it at that width.
//!
//! Not for verdicts (decided on the run's record before any file is written) nor for the charts' display points
//! (`html::display` thins those further, keeping each point's minimum and maximum).

use std::collections::BTreeMap;
use std::time::Duration;

use faultline_units::Dur;
use hdrhistogram::Histogram;

use crate::report::result::{DnsSummary, Series};

/// The most buckets a written series holds: 10 minutes at 100 ms.
pub const MAX_BUCKETS: usize = 6_000;

/// The widths a long run's series are written at, finest first, once its own bucket would give too many.
const STEPS: [Duration; 5] = [
    Duration::from_secs(1),
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(600),
    Duration::from_secs(3600),
];

/// How many of the run's buckets of width `bucket` make one written bucket, for a run `n` buckets long: 1 while
/// `n` is at most `MAX_BUCKETS`, else the finest of `STEPS` (rounded up to a whole number of buckets) that brings the
/// count under the bound.
pub fn factor(bucket: Duration, n: usize) -> usize {
    if n <= MAX_BUCKETS || bucket.is_zero() {
        return 1;
    }
    let per = |step: Duration| step.as_nanos().div_ceil(bucket.as_nanos()).max(1) as usize;
    STEPS
        .iter()
        .map(|&step| per(step))
        .find(|&k| n.div_ceil(k) <= MAX_BUCKETS)
        .unwrap_or_else(|| n.div_ceil(MAX_BUCKETS))
}

/// Adds `from` into `into`; both auto-resize, so only a value past the histogram's range could fail, and that one
/// is added value by value.
fn add_histogram(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    if into.add(from).is_err() {
        for v in from.iter_recorded() {
            into.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
    }
}

/// The load's recording with its time series `k` buckets to one. Phases, totals and every per-phase histogram are
/// untouched.
pub fn load(rec: &loadgen::Recording, k: usize) -> loadgen::Recording {
    let mut out = rec.clone();
    if k > 1 {
        out.bucket = Dur(rec.bucket.get() * k as u32);
        out.buckets = rec.buckets.chunks(k).map(load_bucket).collect();
    }
    out
}

/// One coarse bucket of the load: counts added, the most in flight kept, the interval histograms merged and the
/// percentiles read from the merge.
fn load_bucket(group: &[loadgen::Bucket]) -> loadgen::Bucket {
    let mut out = loadgen::Bucket {
        start: group.first().map(|b| b.start).unwrap_or_default(),
        ..Default::default()
    };
    let mut merged: Option<Histogram<u64>> = None;
    let mut slowest: Option<loadgen::BucketLatency> = None;
    for b in group {
        out.intended += b.intended;
        out.sent += b.sent;
        out.dropped += b.dropped;
        out.completed += b.completed;
        out.in_flight = out.in_flight.max(b.in_flight);
        // A bucket whose histogram does not decode is left out of the merge, as the interval log leaves it out.
        let decoded = b
            .interval_histogram
            .as_deref()
            .and_then(|bytes| loadgen::recording::decode_histogram(bytes).ok());
        match (decoded, &mut merged) {
            (Some(h), Some(sum)) => add_histogram(sum, &h),
            (Some(h), None) => merged = Some(h),
            (None, _) => {}
        }
        if let Some(l) = b.latency {
            slowest = Some(slowest.map_or(l, |s| loadgen::BucketLatency {
                p50: s.p50.max(l.p50),
                p90: s.p90.max(l.p90),
                p99: s.p99.max(l.p99),
                max: s.max.max(l.max),
            }));
        }
    }
    match merged {
        Some(h) => {
            out.latency = loadgen::BucketLatency::of(&h);
            out.interval_histogram = Some(loadgen::recording::encode_histogram(&h));
        }
        // Buckets with percentiles but no histogram to merge: the slowest of each, an upper bound.
        None => out.latency = slowest,
    }
    out
}

/// The dependency's recording with every per-bucket series (routes and their instances, connections, TLS
/// handshakes, DNS queries) `k` buckets to one. Totals, per-phase histograms and counts are untouched.
pub fn dependency(rec: &faultd::Recording, k: usize) -> faultd::Recording {
    let mut out = rec.clone();
    if k <= 1 {
        return out;
    }
    let fine = rec.bucket.get();
    out.bucket = Dur(fine * k as u32);
    for route in out.routes.values_mut() {
        roll_route(route, k, fine);
    }
    out.connections = rec
        .connections
        .chunks(k)
        .map(|g| {
            g.iter().fold(faultd::ConnectionBucket::default(), |a, b| {
                faultd::ConnectionBucket {
                    opened: a.opened + b.opened,
                    closed: a.closed + b.closed,
                    max_open: a.max_open.max(b.max_open),
                    shed: a.shed + b.shed,
                    http2_opened: a.http2_opened + b.http2_opened,
                }
            })
        })
        .collect();
    if let Some(tls) = &mut out.tls {
        tls.buckets = tls.buckets.chunks(k).map(tls_bucket).collect();
    }
    if let Some(dns) = &mut out.dns {
        for name in dns
            .names
            .values_mut()
            .chain(std::iter::once(&mut dns.other))
        {
            name.buckets = name.buckets.chunks(k).map(dns_bucket).collect();
        }
    }
    out
}

fn roll_route(route: &mut faultd::RouteRecording, k: usize, fine: Duration) {
    route.buckets = route
        .buckets
        .chunks(k)
        .map(|g| route_bucket(g, fine))
        .collect();
    for instance in &mut route.instances {
        roll_route(instance, k, fine);
    }
}

/// One coarse bucket of a route: counts added, the most in flight kept (and its lower bound), the mean in flight
/// averaged over the buckets it covers, and the first arrivals of the coarse bucket (at most as many as one bucket
/// keeps) placed from its start.
fn route_bucket(group: &[faultd::RouteBucket], fine: Duration) -> faultd::RouteBucket {
    let mut out = faultd::RouteBucket::default();
    let keep = group
        .iter()
        .map(|b| b.first_arrivals_us.len())
        .max()
        .unwrap_or(0);
    let timed_held = group.iter().any(|b| !b.first_held_us.is_empty());
    let mut mean_sum = 0.0;
    for (j, b) in group.iter().enumerate() {
        out.add(b);
        out.in_flight_max = out.in_flight_max.max(b.in_flight_max);
        out.in_flight_max_lower_bound =
            match (out.in_flight_max_lower_bound, b.in_flight_max_lower_bound) {
                (Some(a), Some(c)) => Some(a.max(c)),
                (a, c) => a.or(c),
            };
        mean_sum += b.in_flight_mean;
        // The coarse bucket's first arrivals are the first of its buckets' in time order, offset by where each
        // bucket starts; an offset past u32 microseconds (71 minutes) is not kept.
        let offset = (fine * j as u32).as_micros();
        for (i, at) in b.first_arrivals_us.iter().enumerate() {
            if out.first_arrivals_us.len() >= keep {
                break;
            }
            let Ok(at) = u32::try_from(offset + u128::from(*at)) else {
                break;
            };
            out.first_arrivals_us.push(at);
            if timed_held {
                out.first_held_us
                    .push(b.first_held_us.get(i).copied().flatten());
            }
        }
    }
    out.in_flight_mean = mean_sum / group.len().max(1) as f64;
    out
}

fn tls_bucket(group: &[faultd::tls::TlsBucket]) -> faultd::tls::TlsBucket {
    let mut out = faultd::tls::TlsBucket::default();
    for b in group {
        add_counts(&mut out.handshakes, &b.handshakes);
        out.delayed += b.delayed;
    }
    out
}

fn dns_bucket(group: &[faultd::dns::DnsBucket]) -> faultd::dns::DnsBucket {
    let mut out = faultd::dns::DnsBucket::default();
    for b in group {
        add_counts(&mut out.queries, &b.queries);
        add_counts(&mut out.answers, &b.answers);
        out.delayed += b.delayed;
        out.delay_max_ms = out.delay_max_ms.max(b.delay_max_ms);
    }
    out
}

fn add_counts(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (key, n) in from {
        *into.entry(key.clone()).or_insert(0) += n;
    }
}

/// result.json's series `k` buckets to one: counts added, the most in flight kept, and the latency percentiles
/// those of `load`'s coarse buckets (already rolled up by [`load`]: read from the merge of their histograms, so the
/// p99 of a coarse bucket is the p99 of every request it covers). Where `load` has no such series, each coarse
/// bucket's percentiles are the slowest of the buckets it covers, an upper bound.
pub fn series(s: &Series, k: usize, load: &loadgen::Recording) -> Series {
    if k <= 1 {
        return s.clone();
    }
    let sum = |v: &Vec<u64>| v.chunks(k).map(|g| g.iter().sum()).collect::<Vec<u64>>();
    let max = |v: &Vec<u64>| {
        v.chunks(k)
            .map(|g| g.iter().copied().max().unwrap_or(0))
            .collect::<Vec<u64>>()
    };
    let coarse = (load.buckets.len() == s.offered.len().div_ceil(k)).then_some(&load.buckets);
    let ms = |d: Dur| (d.get().as_secs_f64() * 1e6).round() / 1e3;
    let latency = |v: &Vec<Option<f64>>, pick: fn(&loadgen::BucketLatency) -> Dur| {
        v.chunks(k)
            .enumerate()
            .map(|(j, g)| match coarse {
                Some(buckets) => buckets[j].latency.as_ref().map(|l| ms(pick(l))),
                None => g.iter().flatten().copied().reduce(f64::max),
            })
            .collect::<Vec<Option<f64>>>()
    };
    Series {
        bucket_s: s.bucket_s * k as f64,
        offered: sum(&s.offered),
        completed: s
            .completed
            .iter()
            .map(|(c, v)| (c.clone(), sum(v)))
            .collect(),
        sut_in_flight: max(&s.sut_in_flight),
        p50_ms: latency(&s.p50_ms, |l| l.p50),
        p90_ms: latency(&s.p90_ms, |l| l.p90),
        p99_ms: latency(&s.p99_ms, |l| l.p99),
        max_ms: latency(&s.max_ms, |l| l.max),
        dependency_arrivals: s
            .dependency_arrivals
            .iter()
            .map(|(r, v)| (r.clone(), sum(v)))
            .collect(),
        dependency_in_flight: s
            .dependency_in_flight
            .iter()
            .map(|(r, v)| (r.clone(), max(v)))
            .collect(),
        handshakes: s
            .handshakes
            .iter()
            .map(|(o, v)| (o.clone(), sum(v)))
            .collect(),
        instance_arrivals: s
            .instance_arrivals
            .iter()
            .map(|(r, each)| (r.clone(), each.iter().map(sum).collect()))
            .collect(),
    }
}

/// result.json's DNS queries per bucket, `k` buckets to one (they share `series.bucket_s`).
pub fn dns(d: &mut DnsSummary, k: usize) {
    if k <= 1 {
        return;
    }
    for name in d.names.values_mut().chain(std::iter::once(&mut d.other)) {
        name.series = name.series.chunks(k).map(|g| g.iter().sum()).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS100: Duration = Duration::from_millis(100);

    #[test]
    fn the_width_is_the_runs_own_up_to_ten_minutes_then_the_finest_step_that_bounds_it() {
        assert_eq!(factor(MS100, 6_000), 1, "10 minutes at 100 ms");
        assert_eq!(factor(MS100, 6_001), 10, "past it, 1 s");
        assert_eq!(factor(MS100, 36_000), 10, "an hour at 1 s: 3,600 buckets");
        assert_eq!(
            factor(MS100, 8 * 36_000),
            100,
            "eight hours at 10 s: 2,880 buckets"
        );
        assert_eq!(
            factor(MS100, 7 * 24 * 36_000),
            6_000,
            "a week at 10 min: 1,008 buckets"
        );
        // A bucket that does not divide a step: the step rounded up to whole buckets.
        assert_eq!(factor(Duration::from_millis(300), 7_000), 4);
        assert_eq!(factor(Duration::ZERO, 1_000_000), 1);
    }

    fn route(i: u32) -> faultd::RouteBucket {
        faultd::RouteBucket {
            arrivals: 3,
            first_arrivals_us: vec![10 + i, 20 + i, 30 + i],
            first_held_us: vec![Some(5), None, Some(7)],
            completed: faultd::StatusClasses {
                c2xx: 2,
                c5xx: 1,
                ..Default::default()
            },
            in_flight_max: u64::from(i),
            in_flight_max_lower_bound: (i == 1).then_some(1),
            in_flight_mean: f64::from(i),
            grpc_status: BTreeMap::from([("OK".to_string(), 1)]),
            ..Default::default()
        }
    }

    #[test]
    fn a_coarse_route_bucket_adds_counts_keeps_its_peak_and_its_first_arrivals_in_order() {
        let group: Vec<faultd::RouteBucket> = (0..4).map(route).collect();
        let b = route_bucket(&group, MS100);
        assert_eq!(b.arrivals, 12);
        assert_eq!(b.completed.c5xx, 4);
        assert_eq!(b.grpc_status["OK"], 4);
        assert_eq!(b.in_flight_max, 3);
        assert_eq!(b.in_flight_max_lower_bound, Some(1));
        assert_eq!(b.in_flight_mean, 1.5);
        // The first three of the first bucket, then the second bucket's from 100 ms on: at most 3 (one bucket's).
        assert_eq!(b.first_arrivals_us, vec![10, 20, 30]);
        assert_eq!(b.first_held_us, vec![Some(5), None, Some(7)]);
        let sparse = vec![
            faultd::RouteBucket::default(),
            route(0),
            faultd::RouteBucket::default(),
            route(3),
        ];
        let b = route_bucket(&sparse, MS100);
        assert_eq!(b.first_arrivals_us, vec![100_010, 100_020, 100_030]);
    }

    #[test]
    fn a_coarse_load_bucket_reads_its_percentiles_from_the_merged_histograms() {
        let bucket = |values: &[u64], in_flight| {
            let mut h = loadgen::recording::new_histogram();
            values.iter().for_each(|v| h.record(*v).unwrap());
            loadgen::Bucket {
                intended: values.len() as u64,
                sent: values.len() as u64,
                in_flight,
                latency: loadgen::BucketLatency::of(&h),
                interval_histogram: Some(loadgen::recording::encode_histogram(&h)),
                ..Default::default()
            }
        };
        let fast: Vec<u64> = (1..=99).map(|v| v * 1_000).collect();
        let group = vec![
            bucket(&fast, 4),
            bucket(&[2_000_000_000], 9),
            bucket(&[], 1),
        ];
        let b = load_bucket(&group);
        assert_eq!(b.intended, 100);
        assert_eq!(b.in_flight, 9);
        let l = b.latency.unwrap();
        // 100 requests: the 50th is 50 us, the slowest the one 2 s request, which is also the 100th percentile.
        assert!(l.p50.get().as_nanos().abs_diff(50_000) < 100, "{l:?}");
        assert!(l.max.get() >= Duration::from_secs(2), "{l:?}");
        let merged =
            loadgen::recording::decode_histogram(b.interval_histogram.as_ref().unwrap()).unwrap();
        assert_eq!(merged.len(), 100);
    }
}
