//! Runs of hours, fed bucket by bucket as the live record grows: the record's bytes per bucket stay the same
//! whatever the run's length, a second's worth of asking the expectations reads as many histograms late in the run
//! as early, and what is decided is what a whole evaluation says.

use std::collections::BTreeMap;
use std::time::Duration;

use super::tests::resolve;
use crate::observe;
use crate::record::RunRecord;

const BUCKET: Duration = Duration::from_millis(100);

/// Buckets that arrive in one second, as the runner takes them.
const PER_TICK: usize = 10;

fn phases() -> Vec<(String, Duration)> {
    vec![
        ("healthy".into(), Duration::ZERO),
        ("brownout".into(), Duration::from_secs(200)),
        ("recovered".into(), Duration::from_secs(300)),
    ]
}

/// loadgen's bucket `i`: 100 requests, 2 to 40 ms, slower in the brownout.
fn load_bucket(i: usize) -> loadgen::Bucket {
    let mut h = faultline_hdr::new_histogram();
    let slow = if (2000..3000).contains(&i) { 10 } else { 1 };
    for k in 0..100u64 {
        h.record((2 + (k + i as u64) % 39) * slow * 1_000_000)
            .unwrap();
    }
    let completed = loadgen::ClassCounts {
        ok: 100,
        ..Default::default()
    };
    loadgen::Bucket {
        intended: 100,
        sent: 100,
        completed,
        latency: loadgen::BucketLatency::of(&h),
        interval_histogram: Some(faultline_hdr::encode(&h).unwrap()),
        ..Default::default()
    }
}

/// faultd's recording read since bucket `from`, up to bucket `n`: 30 calls per bucket on one route, the first few
/// timed.
fn dependency_since(from: usize, n: usize) -> faultd::Recording {
    let bucket = faultd::RouteBucket {
        arrivals: 30,
        first_arrivals_us: vec![100, 2_000, 5_000],
        first_held_us: vec![Some(900), Some(1_000), Some(1_100)],
        in_flight_max: 4,
        ..Default::default()
    };
    let route = faultd::RouteRecording {
        buckets: vec![bucket; n - from],
        ..Default::default()
    };
    faultd::Recording {
        routes: BTreeMap::from([("pricing".to_string(), route)]),
        ..faultd::Recording::empty(BUCKET)
    }
}

/// One second of the run: its buckets appended, faultd read since where the last read left off.
fn tick(record: &mut RunRecord, from: &mut usize, loads: &mut Vec<loadgen::Bucket>) {
    let n = record.sut.len() + PER_TICK;
    let mut fresh: Vec<loadgen::Bucket> = (record.sut.len()..n).map(load_bucket).collect();
    observe::append_sut_taking(record, &mut fresh);
    loads.extend(fresh);
    let rec = dependency_since(*from, n);
    observe::advance_since(record, BUCKET * n as u32, &phases(), &rec, *from);
    *from = observe::next_read_from(record, *from);
}

#[test]
fn a_long_runs_record_keeps_the_same_bytes_per_bucket_and_hands_loadgens_bytes_back() {
    let mut record = RunRecord::empty(BUCKET);
    let (mut from, mut loads) = (0, Vec::new());
    let mut per_bucket = Vec::new();
    // 36,000 buckets: an hour at 100 ms. Vectors grow by doubling, so the figure is taken where each is full.
    while record.sut.len() < 36_000 {
        tick(&mut record, &mut from, &mut loads);
        let n = record.sut.len();
        if [4_090, 8_190, 16_380, 32_760].contains(&n) {
            per_bucket.push(record.heap_bytes() as f64 / n as f64);
        }
    }
    let (low, high) = per_bucket
        .iter()
        .fold((f64::MAX, 0.0_f64), |(l, h), b| (l.min(*b), h.max(*b)));
    assert!(
        high <= low * 1.05,
        "bytes per bucket grew with the run: {per_bucket:?}"
    );
    // One decoded histogram alone is over 100 kB; the whole bucket, both series and its latency bytes, is under 1 kB.
    assert!(high < 800.0, "{high} bytes per bucket");
    // The dependency's series was read a second at a time, yet holds every bucket.
    assert_eq!(record.dependency["pricing"].len(), 36_000);
    assert!(record.dependency["pricing"]
        .iter()
        .all(|b| b.arrivals == 30));
    // loadgen's buckets did not keep their latency bytes beside the record's; they get them back at the end.
    assert!(loads.iter().all(|b| b.interval_histogram.is_none()));
    observe::restore_latency(&record, &mut loads);
    assert_eq!(loads[1234], load_bucket(1234));
}

#[test]
fn a_seconds_work_on_the_live_record_does_not_grow_with_the_runs_length() {
    let expectations = [
        "{ sut_latency: p99, below: 1s, over: 10s }",
        "{ sut_share: ok, above: 50%, over: 10s }",
        "{ sut_latency: p99, below: 1s, during: recovered }",
        "{ sut_latency: p99, below: 100ms, during: brownout }",
    ]
    .map(|e| resolve(e).unwrap());
    let mut record = RunRecord::empty(BUCKET);
    let (mut from, mut loads) = (0, Vec::new());
    let mut decided = vec![None; expectations.len()];
    let mut work = Vec::new();
    let mut judged = 0;
    while record.sut.len() < 3_600 {
        tick(&mut record, &mut from, &mut loads);
        let before = record.sut_latency.decoded();
        for (e, slot) in expectations.iter().zip(decided.iter_mut()) {
            if slot.is_none() {
                *slot = e.decide_after(&record, judged);
            }
        }
        judged = record.sut.len();
        work.push(record.sut_latency.decoded() - before);
    }
    // The brownout's bound is decided once it ends (at 300 s, read as 10-s blocks), the rest go on to the end.
    let brownout = decided[3]
        .as_ref()
        .expect("decided when the brownout ended");
    assert!(!brownout.passed, "{}", brownout.sentence);
    assert_eq!(
        brownout.sentence,
        expectations[3].evaluate(&record).sentence,
        "a decided verdict is what the whole evaluation says"
    );
    assert!(decided[..3].iter().all(Option::is_none));
    // The late stretch holds the brownout's decision too: one histogram per 10-s block of it.
    let early: u64 = work[10..60].iter().sum();
    let late: u64 = work[300..350].iter().sum();
    assert!(
        late <= early + 10,
        "50 s of asking decoded {early} histograms early in the run and {late} late"
    );
    let (w, p) = (work[20], work[340]);
    assert!(
        w > 0 && w < 400,
        "a second's windows decoded {w} histograms"
    );
    assert!(p < 400, "{p}");
}
