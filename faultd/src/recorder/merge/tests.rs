//! The tests of merging replicas' recordings: exact sums, maxima as bounds, and the mismatches refused.

use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

use super::*;
use crate::recorder::{new_histogram, Outcome, Recorder, StatusClasses};
use crate::tls::TlsRecording;

fn ms(n: u64) -> Dur {
    Dur(Duration::from_millis(n))
}

fn recording(routes: Vec<(&str, RouteRecording)>) -> Recording {
    Recording {
        schedule_started_unix_ms: Some(1_000),
        phases_entered: vec![PhaseEntry {
            name: "healthy".into(),
            at: ms(0),
        }],
        routes: routes
            .into_iter()
            .map(|(n, r)| (n.to_string(), r))
            .collect(),
        ..Recording::empty(Duration::from_millis(100))
    }
}

fn bucket(arrivals: u64, ok: u64, in_flight_max: u64, in_flight_mean: f64) -> RouteBucket {
    RouteBucket {
        arrivals,
        completed: StatusClasses {
            c2xx: ok,
            ..Default::default()
        },
        in_flight_max,
        in_flight_mean,
        ..Default::default()
    }
}

fn route(buckets: Vec<RouteBucket>, max_in_flight: u64) -> RouteRecording {
    let mut totals = RouteBucket::default();
    for b in &buckets {
        totals.add(b);
    }
    totals.in_flight_max = max_in_flight;
    RouteRecording {
        buckets,
        totals,
        max_in_flight,
        max_in_flight_lower_bound: None,
        in_flight: 0,
        latency: BTreeMap::new(),
        late: BTreeMap::new(),
        matched: BTreeMap::new(),
        instances: Vec::new(),
        redis: None,
    }
}

fn histogram(values_ms: &[u64]) -> Histogram<u64> {
    let mut h = new_histogram();
    for v in values_ms {
        h.record(v * 1_000_000 + 123).unwrap();
    }
    h
}

/// Asserts that two histograms hold the same counts in every bin, bit for bit, and encode to the same bytes.
/// The V2 header also carries the highest trackable value, which depends on the order in which an
/// auto-resizing histogram grew (its history, not its content), so the bytes are compared once each histogram
/// is added into a fresh one, which grows both to the same range.
fn assert_same_bins(a: &Histogram<u64>, b: &Histogram<u64>) {
    assert_eq!(a, b);
    let bins = |h: &Histogram<u64>| -> Vec<(u64, u64)> {
        h.iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    };
    assert_eq!(bins(a), bins(b));
    assert_eq!((a.len(), a.min(), a.max()), (b.len(), b.min(), b.max()));
    let fresh = |h: &Histogram<u64>| {
        let mut f = new_histogram();
        f.add(h).unwrap();
        faultline_hdr::encode(&f).unwrap()
    };
    assert_eq!(fresh(a), fresh(b));
}

#[test]
fn counts_add_exactly_per_route_and_bucket() {
    let mut a = bucket(10, 7, 3, 1.5);
    a.resets = 1;
    a.hangs = 2;
    a.completed.c5xx = 3;
    a.grpc_status = BTreeMap::from([("OK".to_string(), 4), ("UNAVAILABLE".to_string(), 1)]);
    let mut b = bucket(6, 5, 2, 0.5);
    b.abandoned = 1;
    b.empty = 1;
    b.malformed = 2;
    b.completed.c4xx = 1;
    b.grpc_status = BTreeMap::from([("OK".to_string(), 2)]);
    let mut one = recording(vec![
        ("pricing", route(vec![a.clone(), bucket(1, 1, 1, 0.1)], 3)),
        ("reviews", route(vec![bucket(2, 2, 1, 0.2)], 1)),
    ]);
    one.unmatched = 3;
    one.connections = vec![ConnectionBucket {
        opened: 4,
        closed: 1,
        max_open: 4,
        shed: 1,
        http2_opened: 2,
    }];
    let mut two = recording(vec![("pricing", route(vec![b.clone()], 2))]);
    two.unmatched = 2;
    two.connections = vec![
        ConnectionBucket {
            opened: 2,
            closed: 2,
            max_open: 2,
            shed: 0,
            http2_opened: 1,
        },
        ConnectionBucket {
            opened: 1,
            ..Default::default()
        },
    ];

    let m = Recording::merge_replicas(&[one, two]).unwrap();
    let p = &m.routes["pricing"];
    assert_eq!(p.buckets.len(), 2, "the longer series is kept");
    let b0 = &p.buckets[0];
    assert_eq!(b0.arrivals, 16);
    assert_eq!(b0.completed.c2xx, 12);
    assert_eq!(b0.completed.c4xx, 1);
    assert_eq!(b0.completed.c5xx, 3);
    assert_eq!(
        (b0.resets, b0.hangs, b0.empty, b0.malformed, b0.abandoned),
        (1, 2, 1, 2, 1)
    );
    assert_eq!(b0.grpc_status["OK"], 6);
    assert_eq!(b0.grpc_status["UNAVAILABLE"], 1);
    assert_eq!(b0.departures(), a.departures() + b.departures());
    assert_eq!(
        p.buckets[1].arrivals, 1,
        "a bucket one replica lacks counts as empty there"
    );
    assert_eq!(p.totals.arrivals, 17);
    assert_eq!(p.totals.departures(), a.departures() + 1 + b.departures());
    // A route only one replica saw is that replica's, and its maximum stays exact (the other held nothing).
    let r = &m.routes["reviews"];
    assert_eq!(r.totals.arrivals, 2);
    assert_eq!(r.max_in_flight, 1);
    assert_eq!(r.max_in_flight_lower_bound, Some(1));
    assert_eq!(m.unmatched, 5);
    assert_eq!(m.connections.len(), 2);
    assert_eq!(
        m.connections[0],
        ConnectionBucket {
            opened: 6,
            closed: 3,
            max_open: 6,
            shed: 1,
            http2_opened: 3,
        }
    );
    assert_eq!(m.connections[1].opened, 1);
    assert_eq!(m.replicas, 2);
    assert!(m.in_flight_max_is_upper_bound);
}

#[test]
fn served_latency_histograms_add_bit_for_bit() {
    let a_ms = [1, 2, 40, 41, 2_000];
    let b_ms = [3, 40, 90_000, 7];
    let mut one = route(Vec::new(), 0);
    one.latency.insert("healthy".into(), histogram(&a_ms));
    one.latency.insert("brownout".into(), histogram(&[5]));
    one.late.insert("healthy".into(), histogram(&[1]));
    let mut two = route(Vec::new(), 0);
    two.latency.insert("healthy".into(), histogram(&b_ms));
    two.latency.insert("recovered".into(), histogram(&[6]));
    two.late.insert("healthy".into(), histogram(&[4]));
    let m = Recording::merge_replicas(&[
        recording(vec![("pricing", one)]),
        recording(vec![("pricing", two)]),
    ])
    .unwrap();
    let together: Vec<u64> = a_ms.iter().chain(&b_ms).copied().collect();
    let all = histogram(&together);
    let merged = &m.routes["pricing"].latency;
    assert_same_bins(&merged["healthy"], &all);
    assert_eq!(merged["brownout"], histogram(&[5]));
    assert_eq!(merged["recovered"], histogram(&[6]));
    // faultd's own lateness adds the same way.
    assert_same_bins(&m.routes["pricing"].late["healthy"], &histogram(&[1, 4]));
    // Through JSON (base64 V2+DEFLATE) and back, as the runner reads replicas, the sum is the same.
    let through_json = |r: &Recording| -> Recording {
        serde_json::from_str(&serde_json::to_string(r).unwrap()).unwrap()
    };
    let mut one = route(Vec::new(), 0);
    one.latency.insert("healthy".into(), histogram(&a_ms));
    let mut two = route(Vec::new(), 0);
    two.latency.insert("healthy".into(), histogram(&b_ms));
    let m = Recording::merge_replicas(&[
        through_json(&recording(vec![("pricing", one)])),
        through_json(&recording(vec![("pricing", two)])),
    ])
    .unwrap();
    assert_same_bins(&m.routes["pricing"].latency["healthy"], &all);
}

#[test]
fn means_add_and_maxima_become_a_marked_upper_bound() {
    let one = recording(vec![(
        "pricing",
        route(vec![bucket(5, 5, 3, 1.25), bucket(0, 0, 9, 4.0)], 9),
    )]);
    let two = recording(vec![(
        "pricing",
        route(vec![bucket(5, 5, 4, 0.75), bucket(0, 0, 2, 1.0)], 4),
    )]);
    let three = recording(vec![("pricing", route(vec![bucket(1, 1, 1, 0.5)], 1))]);
    let m = Recording::merge_replicas(&[one, two, three]).unwrap();
    let p = &m.routes["pricing"];
    assert_eq!(p.buckets[0].in_flight_mean, 2.5);
    assert_eq!(p.buckets[1].in_flight_mean, 5.0);
    // The sum of the peaks (which may not have coincided) and the busiest replica's own peak.
    assert_eq!(p.buckets[0].in_flight_max, 8);
    assert_eq!(p.buckets[0].in_flight_max_lower_bound, Some(4));
    assert_eq!(p.buckets[1].in_flight_max, 11);
    assert_eq!(p.buckets[1].in_flight_max_lower_bound, Some(9));
    assert_eq!(p.max_in_flight, 14);
    assert_eq!(p.max_in_flight_lower_bound, Some(9));
    assert_eq!(p.totals.in_flight_max, 14);
    assert_eq!(p.totals.in_flight_max_lower_bound, Some(9));
    assert_eq!(m.replicas, 3);
    assert!(m.in_flight_max_is_upper_bound);
}

#[test]
fn merging_merged_recordings_keeps_both_bounds() {
    let r = |max: u64| recording(vec![("pricing", route(vec![bucket(1, 1, max, 1.0)], max))]);
    let ab = Recording::merge_replicas(&[r(3), r(7)]).unwrap();
    let cd = Recording::merge_replicas(&[r(5), r(2)]).unwrap();
    let all = Recording::merge_replicas(&[ab, cd]).unwrap();
    let flat = Recording::merge_replicas(&[r(3), r(7), r(5), r(2)]).unwrap();
    assert_eq!(all, flat);
    assert_eq!(all.routes["pricing"].buckets[0].in_flight_max, 17);
    assert_eq!(
        all.routes["pricing"].buckets[0].in_flight_max_lower_bound,
        Some(7)
    );
    assert_eq!(all.replicas, 4);
}

#[test]
fn one_recording_comes_back_unchanged_and_exact() {
    let one = recording(vec![("pricing", route(vec![bucket(5, 5, 3, 1.0)], 3))]);
    let m = Recording::merge_replicas(std::slice::from_ref(&one)).unwrap();
    assert_eq!(m, one);
    assert_eq!(m.replicas, 1);
    assert!(!m.in_flight_max_is_upper_bound);
    assert!(matches!(
        Recording::merge_replicas(&[]),
        Err(MergeError::Empty)
    ));
}

#[test]
fn first_arrivals_are_the_earliest_of_the_union() {
    let mut a = bucket(10, 0, 1, 0.0);
    a.first_arrivals_us = vec![10, 20, 30, 40, 50, 60, 70, 80];
    a.first_held_us = vec![
        Some(1),
        Some(2),
        None,
        Some(4),
        Some(5),
        Some(6),
        Some(7),
        Some(8),
    ];
    let mut b = bucket(3, 0, 1, 0.0);
    b.first_arrivals_us = vec![5, 45, 90];
    // A replica that did not time its calls' ends: theirs are unknown, the others' kept beside their arrivals.
    let m = Recording::merge_replicas(&[
        recording(vec![("pricing", route(vec![a], 1))]),
        recording(vec![("pricing", route(vec![b], 1))]),
    ])
    .unwrap();
    let b0 = &m.routes["pricing"].buckets[0];
    assert_eq!(b0.first_arrivals_us, vec![5, 10, 20, 30, 40, 45, 50, 60]);
    assert_eq!(
        b0.first_held_us,
        vec![
            None,
            Some(1),
            Some(2),
            None,
            Some(4),
            None,
            Some(5),
            Some(6)
        ]
    );
    assert_eq!(b0.arrivals, 13);
}

#[test]
fn phases_must_agree_and_the_furthest_along_is_kept() {
    let entry = |name: &str, at: u64| PhaseEntry {
        name: name.into(),
        at: ms(at),
    };
    let mut one = recording(Vec::new());
    one.phases_entered = vec![entry("healthy", 0), entry("brownout", 2_000)];
    one.schedule_started_unix_ms = Some(1_005);
    let mut two = recording(Vec::new());
    two.phases_entered = vec![
        entry("healthy", 0),
        entry("brownout", 2_000),
        entry("recovered", 4_000),
    ];
    two.schedule_started_unix_ms = Some(1_002);
    let m = Recording::merge_replicas(&[one.clone(), two.clone()]).unwrap();
    assert_eq!(m.phases_entered, two.phases_entered);
    assert_eq!(
        m.schedule_started_unix_ms,
        Some(1_002),
        "the earliest origin"
    );
    // A reset to healthy lands at each replica's own time: the earliest is kept.
    one.phases_entered.push(entry(crate::HEALTHY_RESET, 2_500));
    two.phases_entered = vec![
        entry("healthy", 0),
        entry("brownout", 2_000),
        entry(crate::HEALTHY_RESET, 2_480),
    ];
    let m = Recording::merge_replicas(&[one.clone(), two]).unwrap();
    assert_eq!(m.phases_entered[2], entry(crate::HEALTHY_RESET, 2_480));

    let mut other = recording(Vec::new());
    other.phases_entered = vec![entry("healthy", 0), entry("outage", 2_000)];
    let e = Recording::merge_replicas(&[one.clone(), other]).unwrap_err();
    assert!(matches!(e, MergeError::Phases { replica: 1, .. }), "{e}");
    let mut coarse = recording(Vec::new());
    coarse.bucket = ms(200);
    let e = Recording::merge_replicas(&[one, coarse]).unwrap_err();
    assert!(
        e.to_string()
            .contains("replica 1 records in buckets of 200ms"),
        "{e}"
    );
}

#[test]
fn tls_handshakes_add() {
    let tls = |ok: u64, expired: u64, delayed: u64| {
        let b = TlsBucket {
            handshakes: BTreeMap::from([("ok".to_string(), ok), ("expired".to_string(), expired)]),
            delayed,
        };
        TlsRecording {
            buckets: vec![b.clone()],
            totals: b,
        }
    };
    let mut one = recording(Vec::new());
    one.tls = Some(tls(3, 1, 0));
    let mut two = recording(Vec::new());
    two.tls = Some(tls(4, 0, 2));
    let m = Recording::merge_replicas(&[one, two, recording(Vec::new())]).unwrap();
    let t = m.tls.unwrap();
    assert_eq!(t.totals.handshakes["ok"], 7);
    assert_eq!(t.totals.handshakes["expired"], 1);
    assert_eq!(t.totals.delayed, 2);
    assert_eq!(t.buckets[0].handshakes["ok"], 7);
}

#[test]
fn tcp_routes_merge_as_calls() {
    let tcp = |attempts: u64, max_open: u64, mean_open: f64| {
        let b = crate::tcp::record::TcpBucket {
            attempts,
            max_open,
            mean_open,
            closed: attempts,
            ..Default::default()
        };
        crate::tcp::TcpRouteRecording {
            max_open,
            totals: b.clone(),
            buckets: vec![b],
            ..Default::default()
        }
        .as_calls()
    };
    let m = Recording::merge_replicas(&[
        recording(vec![("db", tcp(4, 3, 2.0))]),
        recording(vec![("db", tcp(6, 5, 1.5))]),
    ])
    .unwrap();
    let db = &m.routes["db"];
    assert_eq!(db.totals.arrivals, 10);
    assert_eq!(db.buckets[0].in_flight_mean, 3.5);
    assert_eq!(db.max_in_flight, 8);
    assert_eq!(db.max_in_flight_lower_bound, Some(5));
}

#[test]
fn older_json_reads_as_one_exact_faultd() {
    let one = recording(vec![("pricing", route(vec![bucket(1, 1, 1, 1.0)], 1))]);
    let mut json = serde_json::to_value(&one).unwrap();
    let map = json.as_object_mut().unwrap();
    assert_eq!(map.remove("replicas"), Some(serde_json::json!(1)));
    assert_eq!(
        map.remove("in_flight_max_is_upper_bound"),
        Some(serde_json::json!(false))
    );
    let text = json.to_string();
    assert!(
        !text.contains("lower_bound"),
        "absent for one faultd: {text}"
    );
    let back: Recording = serde_json::from_value(json).unwrap();
    assert_eq!(back, one);
    let m = Recording::merge_replicas(&[one.clone(), one]).unwrap();
    let back: Recording = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back, m);
}

/// Every call recorded by one of two replicas and, at the same instants, by one recorder that saw them all:
/// the merge of the two equals the one in everything but the maxima, which bracket the one's.
#[tokio::test(start_paused = true)]
async fn two_replicas_merge_to_what_one_recorder_of_every_call_saw() {
    let step = Duration::from_millis(100);
    let recorders: Vec<Arc<Recorder>> = (0..3).map(|_| Arc::new(Recorder::new(step))).collect();
    let origin = Instant::now();
    for r in &recorders {
        r.set_origin(origin, 1);
    }
    let (replicas, together) = (&recorders[..2], &recorders[2]);
    let phase: Arc<str> = Arc::from("healthy");
    // (replica, arrival ms, served ms, status): replica 0's calls pile up early, replica 1's later, so their
    // peaks do not coincide.
    let calls: Vec<(usize, u64, u64, u16)> = vec![
        (0, 0, 50, 200),
        (0, 5, 60, 200),
        (0, 10, 170, 503),
        (1, 30, 10, 200),
        (1, 120, 90, 200),
        (1, 125, 95, 404),
        (1, 130, 40, 200),
        (0, 210, 20, 200),
    ];
    let mut events: Vec<(u64, usize, bool)> = Vec::new();
    for (i, (_, at, served, _)) in calls.iter().enumerate() {
        events.push((*at, i, true));
        events.push((at + served, i, false));
    }
    events.sort();
    let mut guards: BTreeMap<usize, (crate::recorder::CallGuard, crate::recorder::CallGuard)> =
        BTreeMap::new();
    let mut now = 0;
    for (at, i, arrives) in events {
        tokio::time::advance(Duration::from_millis(at - now)).await;
        now = at;
        let (replica, _, _, status) = calls[i];
        if arrives {
            let arrive = |r: &Arc<Recorder>| r.arrive(r.route("pricing"), phase.clone());
            guards.insert(i, (arrive(&replicas[replica]), arrive(together)));
        } else if let Some((mut a, mut b)) = guards.remove(&i) {
            a.set_outcome(Outcome::Completed(status));
            b.set_outcome(Outcome::Completed(status));
        }
    }
    tokio::time::advance(Duration::from_millis(400 - now)).await;
    let m = Recording::merge_replicas(&[replicas[0].snapshot(), replicas[1].snapshot()]).unwrap();
    let one = together.snapshot();
    let (mp, op) = (&m.routes["pricing"], &one.routes["pricing"]);
    assert_eq!(mp.buckets.len(), op.buckets.len());
    for (i, (mb, ob)) in mp.buckets.iter().zip(&op.buckets).enumerate() {
        assert_eq!(mb.arrivals, ob.arrivals, "bucket {i}");
        assert_eq!(mb.completed, ob.completed, "bucket {i}");
        assert_eq!(mb.first_arrivals_us, ob.first_arrivals_us, "bucket {i}");
        assert!(
            (mb.in_flight_mean - ob.in_flight_mean).abs() < 1e-9,
            "bucket {i}: {mb:?} {ob:?}"
        );
        let lower = mb.in_flight_max_lower_bound.unwrap();
        assert!(
            lower <= ob.in_flight_max && ob.in_flight_max <= mb.in_flight_max,
            "bucket {i}: {mb:?} {ob:?}"
        );
    }
    assert_eq!(mp.totals.arrivals, 8);
    assert!((mp.totals.in_flight_mean - op.totals.in_flight_mean).abs() < 1e-9);
    // Replica 0 held 3 at once and replica 1 held 3 at once, at different times: 4 at once in truth.
    assert_eq!(op.max_in_flight, 4);
    assert_eq!(mp.max_in_flight, 6);
    assert_eq!(mp.max_in_flight_lower_bound, Some(3));
    assert_same_bins(&mp.latency["healthy"], &op.latency["healthy"]);
    assert_eq!(mp.latency["healthy"].len(), 8);
}
