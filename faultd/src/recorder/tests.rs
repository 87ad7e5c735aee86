use super::*;

#[tokio::test(start_paused = true)]
async fn times_are_from_the_origin_on_either_side_of_the_recorders_own_start() {
    let recorder = Recorder::new(Duration::from_millis(100));
    let base = Instant::now();
    let s = Duration::from_secs;
    assert_eq!(
        recorder.time_ns(base + s(3)),
        0,
        "no origin yet: everything is at 0"
    );
    // An origin later than the recorder's start, and one earlier, with instants before and after each.
    recorder.set_origin(base + s(2), 1);
    assert_eq!(recorder.time_ns(base + s(5)), 3_000_000_000);
    assert_eq!(recorder.time_ns(base + s(1)), 0);
    recorder.set_origin(base - s(5), 1);
    assert_eq!(recorder.time_ns(base + s(1)), 6_000_000_000);
    assert_eq!(recorder.time_ns(base - s(2)), 3_000_000_000);
    assert_eq!(recorder.time_ns(base - s(7)), 0);
}

#[tokio::test(start_paused = true)]
async fn idle_routes_store_and_report_no_buckets_however_long_the_run() {
    let recorder = Arc::new(Recorder::new(Duration::from_millis(100)));
    recorder.set_origin(Instant::now(), 1);
    let idle: Vec<Arc<RouteRecorder>> = (0..500)
        .map(|i| recorder.route(&format!("idle-{i}")))
        .collect();
    let busy = recorder.route("busy");
    drop(recorder.arrive(busy.clone(), Arc::from("healthy")));
    for _ in 0..6 {
        // 60 s, 600 buckets of 100 ms, read as a runner polls.
        tokio::time::advance(Duration::from_secs(10)).await;
        let r = recorder.snapshot();
        assert!(
            idle.iter().all(|route| route.buckets_stored() == 0),
            "an idle route stored buckets"
        );
        for i in [0, 250, 499] {
            let route = &r.routes[&format!("idle-{i}")];
            assert_eq!(route.buckets, [], "idle-{i} reported a series");
            assert_eq!(route.totals.arrivals, 0);
        }
        // A route that saw a call keeps its series up to now, as before.
        assert_eq!(r.connections.len(), r.routes["busy"].buckets.len());
        assert_eq!(r.routes["busy"].totals.arrivals, 1);
    }
    assert_eq!(busy.buckets_stored(), CHUNK);
}

#[tokio::test(start_paused = true)]
async fn buckets_count_arrivals_departures_and_exact_in_flight() {
    let recorder = Arc::new(Recorder::new(Duration::from_millis(100)));
    recorder.set_origin(Instant::now(), 1);
    let route = recorder.route("pricing");
    let phase: Arc<str> = Arc::from("healthy");
    // Two calls arrive at t=0; one completes at 50ms, the other hangs until 250ms.
    let mut a = recorder.arrive(route.clone(), phase.clone());
    let mut b = recorder.arrive(route.clone(), phase.clone());
    tokio::time::advance(Duration::from_millis(50)).await;
    a.set_outcome(Outcome::Completed(200));
    drop(a);
    tokio::time::advance(Duration::from_millis(200)).await;
    b.set_outcome(Outcome::Hang);
    drop(b);
    tokio::time::advance(Duration::from_millis(100)).await;
    let r = recorder.snapshot();
    let p = &r.routes["pricing"];
    assert_eq!(p.buckets.len(), 4);
    assert_eq!(p.buckets[0].arrivals, 2);
    assert_eq!(p.buckets[0].completed.c2xx, 1);
    assert_eq!(p.buckets[0].in_flight_max, 2);
    // Bucket 1 had no arrival but still held the hung call.
    assert_eq!(p.buckets[1].in_flight_max, 1);
    assert_eq!(p.buckets[2].hangs, 1);
    assert_eq!(p.buckets[3].in_flight_max, 0);
    // Both arrivals are timed, and so are their ends: the answer at 50 ms, the hang's end at 250 ms.
    assert_eq!(p.buckets[0].first_arrivals_us, vec![0, 0]);
    assert_eq!(
        p.buckets[0].first_held_us,
        vec![Some(50_000), Some(250_000)]
    );
    // Means: 2 calls for 50ms + 1 for 50ms over 100ms = 1.5; then 1, then 0.5, then 0.
    assert!(
        (p.buckets[0].in_flight_mean - 1.5).abs() < 1e-9,
        "{:?}",
        p.buckets[0]
    );
    assert!((p.buckets[1].in_flight_mean - 1.0).abs() < 1e-9);
    assert!((p.buckets[2].in_flight_mean - 0.5).abs() < 1e-9);
    assert_eq!(p.totals.arrivals, 2);
    assert_eq!(p.totals.departures(), 2);
    assert_eq!(p.max_in_flight, 2);
    assert_eq!(p.latency["healthy"].len(), 1);
    assert_eq!(
        p.latency["healthy"].max(),
        recorder_ns(Duration::from_millis(50))
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_that_outlasts_its_due_instant_records_faultds_lateness() {
    let recorder = Arc::new(Recorder::new(Duration::from_millis(100)));
    recorder.set_origin(Instant::now(), 1);
    let route = recorder.route("pricing");
    let phase: Arc<str> = Arc::from("healthy");
    // Due at 30 ms, left at 37 ms: served 37 ms, 7 ms of it faultd's own.
    let mut late = recorder.arrive(route.clone(), phase.clone());
    late.set_due(late.arrival() + Duration::from_millis(30));
    // A call with no due instant (a paced answer) and one that hangs with one add nothing.
    let paced = recorder.arrive(route.clone(), phase.clone());
    let mut hung = recorder.arrive(route.clone(), phase.clone());
    hung.set_due(hung.arrival());
    tokio::time::advance(Duration::from_millis(37)).await;
    for mut guard in [late, paced] {
        guard.set_outcome(Outcome::Completed(200));
    }
    hung.set_outcome(Outcome::Hang);
    drop(hung);
    let r = recorder.snapshot();
    let p = &r.routes["pricing"];
    assert_eq!(p.latency["healthy"].len(), 2);
    assert_eq!(p.late["healthy"].len(), 1);
    assert_eq!(
        p.late["healthy"].max(),
        recorder_ns(Duration::from_millis(7))
    );
    let json = serde_json::to_string(&r).unwrap();
    let back: Recording = serde_json::from_str(&json).unwrap();
    assert_eq!(back.routes["pricing"].late, p.late);
    // A recording from before faultd kept its lateness reads with none.
    let mut older: serde_json::Value = serde_json::from_str(&json).unwrap();
    older["routes"]["pricing"]
        .as_object_mut()
        .unwrap()
        .remove("late");
    let older: Recording = serde_json::from_value(older).unwrap();
    assert!(older.routes["pricing"].late.is_empty());
}

fn recorder_ns(d: Duration) -> u64 {
    let mut h = new_histogram();
    h.record(d.as_nanos() as u64).unwrap();
    h.max()
}

#[tokio::test(start_paused = true)]
async fn calls_before_the_schedule_starts_land_in_bucket_zero() {
    let recorder = Arc::new(Recorder::new(Duration::from_millis(100)));
    let route = recorder.route("r");
    tokio::time::advance(Duration::from_secs(5)).await;
    drop(recorder.arrive(route, Arc::from("before-start")));
    let r = recorder.snapshot();
    assert_eq!(r.routes["r"].buckets[0].arrivals, 1);
    assert_eq!(r.routes["r"].buckets[0].abandoned, 1);
    assert_eq!(r.schedule_started_unix_ms, None);
}

#[tokio::test(start_paused = true)]
async fn recording_round_trips_through_json_with_histograms() {
    let recorder = Arc::new(Recorder::new(Duration::from_millis(100)));
    recorder.set_origin(Instant::now(), 1_700_000_000_000);
    let route = recorder.route("r");
    let mut g = recorder.arrive(route, Arc::from("p"));
    tokio::time::advance(Duration::from_millis(40)).await;
    g.set_outcome(Outcome::Completed(503));
    drop(g);
    let r = recorder.snapshot();
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"5xx\":1"), "{json}");
    let back: Recording = serde_json::from_str(&json).unwrap();
    assert_eq!(back, r);
}

#[tokio::test(start_paused = true)]
async fn calls_that_matched_no_route_before_the_schedule_started_are_not_the_runs() {
    let recorder = Recorder::new(Duration::from_millis(100));
    recorder.unmatched("GET", "/price/1");
    assert_eq!(recorder.snapshot().unmatched, 1);
    recorder.set_origin(Instant::now(), 1);
    let fresh = recorder.snapshot();
    assert_eq!((fresh.unmatched, fresh.unmatched_paths.len()), (0, 0));
    recorder.unmatched("GET", "/prices/1");
    recorder.unmatched("GET", "/prices/1");
    let run = recorder.snapshot();
    assert_eq!(run.unmatched, 2);
    assert_eq!(run.unmatched_paths[0].path, "/prices/1");
    assert_eq!(run.unmatched_paths[0].calls, 2);
}

#[tokio::test(start_paused = true)]
async fn matched_entries_are_counted_by_name_merged_by_sum_and_absent_in_older_recordings() {
    let recorder = Arc::new(Recorder::new(Duration::from_millis(100)));
    recorder.set_origin(Instant::now(), 1);
    let route = recorder.route("orders");
    // The base's entry and a phase's entry of the same name count together; an entry no call matched is left out.
    let (base, phase) = (route.entry_tally("acme"), route.entry_tally("acme"));
    let idle = route.entry_tally("matched[1]");
    base.count(true);
    phase.count(false);
    phase.count(true);
    drop(idle);
    drop(recorder.arrive(route.clone(), Arc::from("healthy")));
    let r = recorder.snapshot();
    let counts = MatchCounts {
        matched: 3,
        taken: 2,
    };
    assert_eq!(
        r.routes["orders"].matched,
        BTreeMap::from([("acme".to_string(), counts)])
    );
    let merged = Recording::merge_replicas(&[r.clone(), r.clone()]).unwrap();
    assert_eq!(merged.routes["orders"].matched["acme"].taken, 4);
    let mut older = serde_json::to_value(&r).unwrap();
    older["routes"]["orders"]
        .as_object_mut()
        .unwrap()
        .remove("matched");
    let older: Recording = serde_json::from_value(older).unwrap();
    assert!(older.routes["orders"].matched.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_read_since_a_bucket_is_the_whole_read_cut_there_with_the_same_run_wide_figures() {
    let recorder = Arc::new(Recorder::new(Duration::from_millis(100)));
    recorder.set_origin(Instant::now(), 1);
    let route = recorder.route("pricing");
    let phase: Arc<str> = Arc::from("healthy");
    // A call held across many buckets (the level in flight is carried from bucket to bucket), short calls now and
    // then, and reads since a moving bucket as a runner polls, each compared with a whole read at the same instant.
    let mut long = Some(recorder.arrive(route.clone(), phase.clone()));
    let _connection = recorder.connection_opened();
    let mut from = 0;
    for step in 0..120u64 {
        let mut call = recorder.arrive(route.clone(), phase.clone());
        tokio::time::advance(Duration::from_millis(30 + step % 7 * 20)).await;
        call.set_outcome(Outcome::Completed(if step % 3 == 0 { 503 } else { 200 }));
        drop(call);
        if step == 90 {
            drop(long.take());
        }
        tokio::time::advance(Duration::from_millis(170)).await;
        let whole = recorder.snapshot();
        let since = recorder.snapshot_since(from);
        let mut cut = whole.clone();
        cut.drop_buckets_before(from);
        assert_eq!(since, cut, "read since bucket {from} at step {step}");
        assert_eq!(
            since.routes["pricing"].totals,
            whole.routes["pricing"].totals
        );
        // The next read starts a second (10 buckets) behind the end, as the runner's does.
        from = whole.routes["pricing"].buckets.len().saturating_sub(10);
    }
    assert!(from > 100, "the reads moved on: {from}");
}

#[tokio::test(start_paused = true)]
async fn only_the_phases_written_to_last_keep_decoded_histograms_and_a_packed_one_loses_nothing() {
    let recorder = Arc::new(Recorder::new(Duration::from_millis(100)));
    recorder.set_origin(Instant::now(), 1);
    let route = recorder.route("pricing");
    let phases: Vec<Arc<str>> = (0..6).map(|k| Arc::from(format!("p{k}"))).collect();
    // A call of the first phase that ends after the last one began.
    let mut held = Some(recorder.arrive(route.clone(), phases[0].clone()));
    let mut most_live = 0;
    for (k, phase) in phases.iter().enumerate() {
        for _ in 0..3 {
            let mut call = recorder.arrive(route.clone(), phase.clone());
            tokio::time::advance(Duration::from_millis(10 * (k as u64 + 1))).await;
            call.set_outcome(Outcome::Completed(200));
            drop(call);
            most_live = most_live.max(route.histograms.lock().unwrap().live());
        }
    }
    held.as_mut().unwrap().set_outcome(Outcome::Completed(200));
    drop(held.take());
    assert_eq!(most_live, latencies::LIVE);
    assert_eq!(route.histograms.lock().unwrap().live(), latencies::LIVE);

    let r = recorder.snapshot();
    let latency = &r.routes["pricing"].latency;
    assert_eq!(latency.len(), 6);
    for (k, phase) in phases.iter().enumerate() {
        let h = &latency[&**phase];
        let slowest = if k == 0 { 630 } else { 10 * (k as u64 + 1) };
        assert_eq!(h.len(), 3 + u64::from(k == 0), "{phase}");
        assert_eq!(
            h.max(),
            h.highest_equivalent(slowest * 1_000_000),
            "{phase}"
        );
    }
    // A read of the newest buckets leaves the histograms out.
    assert!(recorder.snapshot_since(5).routes["pricing"]
        .latency
        .is_empty());
}
