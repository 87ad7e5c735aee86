//! Deterministic tests of the dispatcher and recorder together: a mock transport that "serves" by sleeping,
//! under paused tokio time, so arrivals, service times and the in-flight level are exact.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::outcome::Answer;
use crate::request::http1::compile::Wire;
use crate::request::http1::transport::{Transport, TransportError};
use crate::*;

/// A fake service: `serve` gives, for the moment a request reaches it, how long it takes and its status.
struct MockService<F>(F);

impl<F: Fn(Instant) -> (Duration, u16) + Send + Sync + 'static> Transport for MockService<F> {
    type Conn = ();

    fn connect(&self) -> impl Future<Output = Result<(), TransportError>> + Send {
        std::future::ready(Ok(()))
    }

    fn exchange<'a>(
        &'a self,
        _conn: &'a mut (),
        _request: &'a Wire,
    ) -> impl Future<Output = Result<(Answer, bool), TransportError>> + Send + 'a {
        let (delay, status) = (self.0)(Instant::now());
        async move {
            tokio::time::sleep(delay).await;
            if status == 0 {
                return Err(TransportError("connection reset".into()));
            }
            Ok((
                Answer {
                    status,
                    marked: false,
                },
                true,
            ))
        }
    }
}

fn service(
    f: impl Fn(Instant) -> (Duration, u16) + Send + Sync + 'static,
) -> MockService<impl Fn(Instant) -> (Duration, u16) + Send + Sync + 'static> {
    MockService(f)
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Starts `spec` over HTTP/1.1 lanes on `transport`, as `launch` does on the real client.
fn launch_on<T: Transport>(
    spec: LoadSpec,
    mut options: RunOptions,
    origin: Instant,
    transport: T,
    model: LoadModel,
) -> Result<LoadRun, LoadError> {
    let (target, run) = prepare(&spec, &mut options, origin, None)?;
    over_http1(run, transport, &spec, &options, &target, model)
}

const OPEN: LoadModel = LoadModel::Open(Pacing::Timer);

fn open_run<T: Transport>(spec: LoadSpec, duration: Duration, transport: T) -> LoadRun {
    let options = RunOptions::new("http://127.0.0.1:9", duration);
    launch_on(spec, options, Instant::now(), transport, OPEN).unwrap()
}

fn assert_conserved(r: &Recording) {
    assert!(r.conservation.holds, "{:?}", r.conservation);
    assert_eq!(r.conservation.sent, r.totals.total() + r.still_in_flight);
    assert_eq!(r.intended, r.sent + r.totals.dropped);
    let by_bucket: u64 = r.buckets.iter().map(|b| b.intended).sum();
    assert_eq!(
        by_bucket, r.intended,
        "every arrival is in exactly one bucket"
    );
}

#[tokio::test(start_paused = true)]
async fn in_flight_settles_at_rate_times_service_time() {
    let spec = LoadSpec::constant("100/s".parse().unwrap(), "/");
    let run = open_run(spec, ms(5000), service(|_| (ms(200), 200)));
    let r = run.finish().await;
    assert_conserved(&r);
    assert_eq!(r.intended, 500);
    assert_eq!(r.totals.ok, 500);
    // Little's law: L = λW = 100/s × 0.2 s = 20. An arrival and a completion can share an instant, so the
    // bucket maximum is 20 or 21.
    for b in &r.buckets[3..49] {
        assert!(
            (20..=21).contains(&b.in_flight),
            "{:?} in flight at {}",
            b.in_flight,
            b.start
        );
        assert_eq!(b.intended, 10, "100/s is exactly 10 per 100 ms bucket");
    }
    let corrected = r.histogram(Measure::Corrected, None, |_| true);
    assert_eq!(
        corrected.value_at_quantile(1.0),
        corrected.highest_equivalent(200_000_000)
    );
    let lag = r.histogram(Measure::SendLag, None, |_| true);
    assert_eq!(
        lag.max(),
        0,
        "paused time: every request goes out at its intended instant"
    );
}

#[tokio::test(start_paused = true)]
async fn a_correlated_run_keeps_each_request_with_its_trace_id_and_times_and_an_uncorrelated_one_none(
) {
    let origin = Instant::now();
    // Every fifth request outlasts the 300 ms timeout.
    let mock = service(move |now| {
        let k = (now - origin).as_millis() / 10;
        (if k.is_multiple_of(5) { ms(400) } else { ms(20) }, 200)
    });
    let mut spec = LoadSpec::constant("100/s".parse().unwrap(), "/");
    spec.timeout = faultline_units::Dur(ms(300));
    let options = RunOptions {
        correlate: Some(faultline_units::trace::Correlate::default()),
        ..RunOptions::new("http://127.0.0.1:9", ms(1000))
    };
    let r = launch_on(spec.clone(), options, origin, mock, OPEN)
        .unwrap()
        .finish()
        .await;
    assert_conserved(&r);
    assert_eq!(r.requests.len() as u64, r.sent);
    let traces: std::collections::BTreeSet<u128> = r.requests.iter().map(|q| q.trace).collect();
    assert_eq!(traces.len(), r.requests.len(), "one trace id per request");
    for q in &r.requests {
        assert!(q.ended >= q.intended);
        let took = q.ended.get() - q.intended.get();
        match q.class {
            Outcome::Timeout => assert_eq!(took, ms(300), "{q:?}"),
            Outcome::Ok => assert_eq!(took, ms(20), "{q:?}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        r.requests
            .iter()
            .filter(|q| q.class == Outcome::Timeout)
            .count() as u64,
        r.totals.timeout
    );
    let plain = launch_on(
        spec,
        RunOptions::new("http://127.0.0.1:9", ms(1000)),
        Instant::now(),
        service(|_| (ms(20), 200)),
        OPEN,
    )
    .unwrap()
    .finish()
    .await;
    assert!(plain.requests.is_empty());
}

#[tokio::test(start_paused = true)]
async fn queueing_behind_a_stall_goes_into_corrected_latency_and_not_uncorrected() {
    // One connection, a 1 ms service that stalls for 1 s once, for the first request it sees after t = 1 s.
    let origin = Instant::now();
    let stalled = AtomicBool::new(false);
    let mock = service(move |now| {
        if now >= origin + ms(1000) && !stalled.swap(true, Ordering::SeqCst) {
            (ms(1000), 200)
        } else {
            (ms(1), 200)
        }
    });
    let mut spec = LoadSpec::constant("100/s".parse().unwrap(), "/");
    spec.connections = 1;
    let options = RunOptions {
        phases: vec![
            ("before".into(), ms(0)),
            ("stall".into(), ms(1000)),
            ("drain".into(), ms(2000)),
            ("after".into(), ms(2500)),
        ],
        ..RunOptions::new("http://127.0.0.1:9", ms(3000))
    };
    let run = launch_on(spec, options, origin, mock, OPEN).unwrap();
    let r = run.finish().await;
    assert_conserved(&r);
    assert_eq!(r.totals.ok, 300);

    let stall = |m| r.histogram(m, Some("stall"), |_| true);
    // The request at 1.00 s takes 1 s; the k-th one due after it (at 1 s + 10k ms) waits for the connection
    // until 2 s + k ms: a corrected latency of 1 s - 9k ms, so ~0.55 s at the median of the 100 in the phase.
    let corrected = stall(Measure::Corrected);
    assert!(corrected.max() >= 999_000_000, "{}", corrected.max());
    let median = corrected.value_at_quantile(0.5);
    assert!(
        (540_000_000..=560_000_000).contains(&median),
        "median {median}"
    );
    // Uncorrected sees one slow request (the stalled one itself) and service times of 1 ms for the queued ones.
    let uncorrected = stall(Measure::Uncorrected);
    assert!(
        uncorrected.value_at_quantile(0.99) <= 1_002_000,
        "p99 {}",
        uncorrected.value_at_quantile(0.99)
    );
    assert_eq!(
        uncorrected.count_between(2_000_000, u64::MAX),
        1,
        "only the stalled request itself is slow"
    );
    // Their send lag is the queueing time: it is what the two histograms differ by.
    assert!(r.histogram(Measure::SendLag, Some("stall"), |_| true).max() >= 980_000_000);
    assert_eq!(
        r.histogram(Measure::Late, None, |_| true).max(),
        0,
        "a wait for the one busy connection is the service's doing, not the generator's"
    );
    // Before the stall, and once the backlog of ~100 queued requests has drained (1 ms each against arrivals
    // every 10 ms: ~0.11 s after the stall ends), both agree on ~1 ms.
    for phase in ["before", "after"] {
        let c = r.histogram(Measure::Corrected, Some(phase), |_| true);
        assert!(c.max() <= 1_002_000, "{phase}: {}", c.max());
    }
}

#[tokio::test(start_paused = true)]
async fn the_generators_own_lateness_is_left_out_of_corrected_latency_and_kept_apart() {
    // A 1 ms service at 100/s. At 1.005 s the clock jumps 300 ms with nothing run in between, as when the host
    // stalls the generator's thread: the 30 arrivals due at 1.01-1.30 s go out together at 1.305 s.
    let origin = Instant::now();
    let spec = LoadSpec::constant("100/s".parse().unwrap(), "/");
    let options = RunOptions::new("http://127.0.0.1:9", ms(2000));
    let mock = service(|_| (ms(1), 200));
    let run = launch_on(spec, options, origin, mock, OPEN).unwrap();
    tokio::time::sleep_until(origin + ms(1005)).await;
    tokio::time::advance(ms(300)).await;
    let r = run.finish().await;
    assert_conserved(&r);
    assert_eq!(r.totals.ok, 200);

    let late = r.histogram(Measure::Late, None, |_| true);
    assert_eq!(
        late.count_between(1, u64::MAX),
        30,
        "the arrivals due in the stall"
    );
    assert!(late.max() >= 290_000_000, "{}", late.max());
    assert!(r.histogram(Measure::SendLag, None, |_| true).max() >= 290_000_000);
    // Each was answered in its 1 ms the moment the generator could send it: the stall is not the service's.
    let corrected = r.histogram(Measure::Corrected, None, |_| true);
    assert!(corrected.max() <= 1_002_000, "{}", corrected.max());
    let interval_max = r
        .buckets
        .iter()
        .filter_map(|b| b.latency)
        .map(|l| l.max.get())
        .max()
        .unwrap();
    assert!(interval_max <= ms(2), "{interval_max:?}");
}

#[tokio::test(start_paused = true)]
async fn arrivals_over_the_in_flight_cap_are_dropped_at_their_intended_time_not_delayed() {
    let mut spec = LoadSpec::constant("10/s".parse().unwrap(), "/");
    spec.max_in_flight = 5;
    let run = open_run(spec, ms(2000), service(|_| (ms(1000), 200)));
    let r = run.finish().await;
    assert_conserved(&r);
    assert_eq!(r.intended, 20, "the timetable is not slowed by the cap");
    // 0.0-0.4 s go out, 0.5-0.9 s find 5 in flight and are dropped; from 1.0 s each completion frees a place
    // for the arrival due at the same instant (completion and arrival share it, so it may be either).
    assert_eq!(r.buckets[..5].iter().map(|b| b.sent).sum::<u64>(), 5);
    assert_eq!(r.buckets[5..10].iter().map(|b| b.dropped).sum::<u64>(), 5);
    assert!(
        r.totals.dropped >= 5 && r.totals.dropped <= 10,
        "{}",
        r.totals.dropped
    );
    assert!(r.buckets.iter().all(|b| b.in_flight <= 5));
    assert!(!r.phases[0].classes.contains_key(&Outcome::Dropped));
}

#[tokio::test(start_paused = true)]
async fn every_request_ends_in_exactly_one_class() {
    let mut spec = LoadSpec::constant("100/s".parse().unwrap(), "/");
    spec.timeout = "300ms".parse().unwrap();
    spec.fallback_status = vec![503];
    let origin = Instant::now();
    // Cycle through the behaviours by arrival time: ok, 404, 500, 503 (fallback), reset, hang.
    let mock = service(move |now| match (now - origin).as_millis() / 10 % 6 {
        0 => (ms(5), 200),
        1 => (ms(5), 404),
        2 => (ms(5), 500),
        3 => (ms(5), 503),
        4 => (ms(5), 0),
        _ => (ms(10_000), 200),
    });
    let run = launch_on(
        spec,
        RunOptions::new("http://127.0.0.1:9", ms(600)),
        origin,
        mock,
        OPEN,
    )
    .unwrap();
    let r = run.finish().await;
    assert_conserved(&r);
    let t = r.totals;
    assert_eq!(
        (
            t.ok,
            t.client_error,
            t.server_error,
            t.fallback,
            t.connect_error,
            t.timeout
        ),
        (10, 10, 10, 10, 10, 10)
    );
    let timeouts = r.histogram(Measure::Corrected, None, |o| o == Outcome::Timeout);
    assert_eq!(
        timeouts.min(),
        timeouts.lowest_equivalent(300_000_000),
        "a timeout is charged its full wait"
    );
    assert_eq!(r.still_in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn stop_ends_the_schedule_and_requests_in_flight_still_finish() {
    let spec = LoadSpec::constant("10/s".parse().unwrap(), "/");
    let run = open_run(spec, ms(60_000), service(|_| (ms(500), 200)));
    tokio::time::sleep(ms(1050)).await;
    let progress = run.progress();
    assert_eq!(progress.intended, 11);
    assert_eq!(progress.in_flight, 5);
    assert_eq!(progress.completed, 6);
    assert!(progress.p99_last_second.is_some());
    run.stop();
    let r = run.finish().await;
    assert_conserved(&r);
    assert!(r.stopped_early);
    assert_eq!(r.intended, 11);
    assert_eq!(r.totals.ok, 11, "requests in flight at the stop complete");
}

#[tokio::test(start_paused = true)]
async fn the_closed_model_slows_down_with_the_service_and_hides_the_queueing() {
    let spec = LoadSpec::constant("1000/s".parse().unwrap(), "/");
    let options = RunOptions::new("http://127.0.0.1:9", ms(2000));
    let run = launch_on(
        spec,
        options,
        Instant::now(),
        service(|_| (ms(100), 200)),
        LoadModel::Closed(4),
    )
    .unwrap();
    let r = run.finish().await;
    assert_conserved(&r);
    assert_eq!(r.model, Model::Closed { users: 4 });
    // 4 users × 2 s / 100 ms = 80 requests, however high the "rate": the load follows the service.
    assert_eq!(r.totals.ok, 80);
    let c = r.histogram(Measure::Corrected, None, |_| true);
    let u = r.histogram(Measure::Uncorrected, None, |_| true);
    assert_eq!(
        c.max(),
        u.max(),
        "the closed model cannot tell queueing from service"
    );
}

#[test]
fn starting_outside_a_runtime_or_with_a_foreign_host_is_refused() {
    let spec = LoadSpec::constant("10/s".parse().unwrap(), "/");
    let e = start(
        spec.clone(),
        RunOptions::new("http://127.0.0.1:9", ms(10)),
        Instant::now(),
    );
    assert!(matches!(e, Err(LoadError::NoRuntime)));
    let e = start(
        spec,
        RunOptions::new("http://192.0.2.1:80", ms(10)),
        Instant::now(),
    );
    assert!(matches!(e, Err(LoadError::HostNotAllowed { .. })));
}

/// The intended times (from the origin) of the arrivals of `share` of a spec's timetable, with their indexes.
fn timetable(spec: &LoadSpec, share: Share) -> Vec<(u64, Duration)> {
    let target = target::Target::parse("http://127.0.0.1:9", &[]).unwrap();
    let given = Some(http1::replayed(&target));
    arrivals(spec, 42, ms(20_000), share, given)
        .unwrap()
        .map(|d| (d.index, d.arrival.intended))
        .collect()
}

#[test]
fn the_shares_of_a_timetable_add_up_to_it_arrival_for_arrival() {
    let dir = std::env::temp_dir().join(format!("loadgen-share-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("recorded.timetable");
    let lines: String = (0..500)
        .map(|i| {
            format!(
                "{}.{:03} GET /item/{i}\n",
                1_791_640_500 + i * 27 / 1000,
                i * 27 % 1000
            )
        })
        .collect();
    std::fs::write(&file, lines).unwrap();

    let uniform = LoadSpec::constant("250/s".parse().unwrap(), "/");
    let mut poisson = uniform.clone();
    poisson.arrivals = Arrivals::Poisson;
    let mut replayed = uniform.clone();
    replayed.rate = None;
    replayed.requests = Vec::new();
    replayed.replay = Some(Replay {
        file: file.display().to_string(),
        from: None,
        speed: 1.0,
        // Seeded thinning and repeating: each share must draw the same copies as the whole.
        scale_rate: 1.7,
    });
    for (name, spec) in [
        ("uniform", uniform),
        ("poisson", poisson),
        ("replay", replayed),
    ] {
        let whole = timetable(&spec, Share::WHOLE);
        assert!(whole.len() > 400, "{name}: {} arrivals", whole.len());
        for of in [2u32, 3, 4] {
            let mut union: Vec<(u64, Duration)> = (0..of)
                .flat_map(|index| timetable(&spec, Share { index, of }))
                .collect();
            union.sort();
            assert_eq!(union, whole, "{name}: {of} shares");
            let sizes: Vec<usize> = (0..of)
                .map(|index| timetable(&spec, Share { index, of }).len())
                .collect();
            let (least, most) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(
                most - least <= whole.len() / 20,
                "{name}: {of} shares of about equal size: {sizes:?}"
            );
        }
        // At 250/s every arrival is a batch of its own: share i of N holds the arrivals k with k % N == i.
        if name == "uniform" {
            let first = timetable(&spec, Share { index: 1, of: 3 });
            assert!(first.iter().all(|(k, _)| k % 3 == 1), "{name}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn above_10000_per_second_each_share_keeps_whole_batches_of_arrivals_one_wake_up_apart() {
    // 20,000/s: arrivals 50 us apart, two to a batch (due within 0.1 ms of the batch's first).
    let spec = LoadSpec::constant("20000/s".parse().unwrap(), "/");
    let target = target::Target::parse("http://127.0.0.1:9", &[]).unwrap();
    let given = || Some(http1::replayed(&target));
    let whole: Vec<dispatch::Due<Wire>> = arrivals(&spec, 1, ms(1000), Share::WHOLE, given())
        .unwrap()
        .collect();
    assert_eq!(whole.len(), 20_000);
    assert_eq!(whole.last().unwrap().batch, 9_999, "two arrivals a batch");
    let share: Vec<dispatch::Due<Wire>> =
        arrivals(&spec, 1, ms(1000), Share { index: 2, of: 4 }, given())
            .unwrap()
            .collect();
    assert_eq!(share.len(), 5_000, "a quarter of the arrivals");
    for pair in share.chunks(2) {
        // Whole batches: batch b = 4m + 2 holds arrivals 2b and 2b + 1, 0.05 ms apart.
        assert_eq!(pair[0].batch, pair[1].batch);
        assert_eq!(pair[0].batch % 4, 2);
        assert_eq!(
            (pair[0].index, pair[1].index),
            (2 * pair[0].batch, 2 * pair[0].batch + 1)
        );
        assert_eq!(
            pair[1].arrival.intended - pair[0].arrival.intended,
            Duration::from_micros(50)
        );
    }
}

/// Runs `share` of a Poisson load under paused time against a service whose answer depends only on the instant
/// a request reaches it (so the same arrival gets the same answer in every run).
async fn shared_run(share: Share) -> Recording {
    let origin = Instant::now();
    let mock = service(move |now| {
        let t = now.duration_since(origin).as_micros() as u64;
        // 1-60 ms, a server error for about one in nine, a reset for one in 31.
        let delay = ms(1 + (t / 100) % 60);
        let status = match t % 31 {
            0 => 0,
            _ if t.is_multiple_of(9) => 503,
            _ => 200,
        };
        (delay, status)
    });
    let mut spec = LoadSpec::constant("400/s".parse().unwrap(), "/");
    spec.arrivals = Arrivals::Poisson;
    let options = RunOptions {
        phases: vec![("healthy".into(), ms(0)), ("degraded".into(), ms(1500))],
        seed: 9,
        share,
        ..RunOptions::new("http://127.0.0.1:9", ms(3000))
    };
    let run = launch_on(spec, options, origin, mock, OPEN).unwrap();
    run.finish().await
}

#[tokio::test(start_paused = true)]
async fn merging_the_recordings_of_the_shares_gives_the_recording_of_the_whole() {
    let whole = shared_run(Share::WHOLE).await;
    assert_conserved(&whole);
    assert!(whole.totals.server_error > 0 && whole.totals.connect_error > 0);
    for of in [2u32, 4] {
        let mut parts = Vec::new();
        for index in 0..of {
            parts.push(shared_run(Share { index, of }).await);
        }
        let merged = Recording::merge(&parts).unwrap();
        assert_conserved(&merged);
        assert_eq!(merged.totals, whole.totals, "{of} shares");
        assert_eq!(
            (merged.intended, merged.sent, merged.still_in_flight),
            (whole.intended, whole.sent, whole.still_in_flight)
        );
        assert_eq!(merged.conservation, whole.conservation);
        assert_eq!(merged.connect_errors, whole.connect_errors);
        // Per phase and class, every histogram holds the same count at every value: bit for bit.
        assert_eq!(merged.phases, whole.phases, "{of} shares");
        for (m, w) in merged.phases.iter().zip(&whole.phases) {
            for (class, h) in &w.classes {
                let mh = &m.classes[class];
                for measure in [Measure::Corrected, Measure::Uncorrected, Measure::SendLag] {
                    let (a, b) = (mh.get(measure), h.get(measure));
                    assert_eq!(a.len(), b.len());
                    assert!(b
                        .iter_recorded()
                        .all(|v| a.count_at(v.value_iterated_to()) == v.count_at_value()));
                }
            }
        }
        // The series, bucket for bucket: counts equal, interval histograms equal value for value, percentiles
        // read from them equal; the most in flight is the sum of the shares' peaks, never below the whole's.
        assert_eq!(merged.buckets.len(), whole.buckets.len());
        for (i, (m, w)) in merged.buckets.iter().zip(&whole.buckets).enumerate() {
            assert_eq!(m.start, w.start, "bucket {i}");
            assert_eq!(
                (m.intended, m.sent, m.dropped, m.completed),
                (w.intended, w.sent, w.dropped, w.completed),
                "bucket {i}"
            );
            assert_eq!(m.latency, w.latency, "bucket {i}");
            let decode = |b: &Bucket| {
                b.interval_histogram
                    .as_ref()
                    .map(|bytes| recording::decode_histogram(bytes).unwrap())
            };
            assert_eq!(decode(m), decode(w), "bucket {i}");
            assert!(
                m.in_flight >= w.in_flight,
                "bucket {i}: {} < {}",
                m.in_flight,
                w.in_flight
            );
        }
    }
}

#[test]
fn recordings_of_different_runs_do_not_merge() {
    let a = Recording::empty(&[("run".into(), ms(0))], ms(100), ms(1000));
    let b = Recording::empty(&[("run".into(), ms(0))], ms(200), ms(1000));
    let c = Recording::empty(&[("warm".into(), ms(0))], ms(100), ms(1000));
    assert_eq!(
        Recording::merge(&[a.clone(), b]),
        Err(MergeError::Mismatch {
            part: 1,
            what: "bucket width"
        })
    );
    assert_eq!(
        Recording::merge(&[a, c]),
        Err(MergeError::Mismatch {
            part: 1,
            what: "phases"
        })
    );
    assert_eq!(Recording::merge(&[]), Err(MergeError::Empty));
}
