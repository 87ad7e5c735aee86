//! End-to-end over real loopback sockets: the physics the open model promises (Little's law, queueing charged
//! from the intended time), with tolerances derived from the physics and the bucket size, not tuned.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use loadgen::{start, LoadSpec, Measure, Outcome, Recording, RunOptions};
use tokio::time::Instant;

fn assert_conserved(r: &Recording) {
    assert!(r.conservation.holds, "{:?}", r.conservation);
    assert_eq!(r.conservation.sent, r.totals.total() + r.still_in_flight);
    assert_eq!(r.intended, r.sent + r.totals.dropped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200ms_service_at_100_per_second_keeps_the_rate_and_holds_about_20_in_flight() {
    let base = common::serve(Router::new().route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            "ok"
        }),
    ))
    .await;
    let spec = LoadSpec::constant("100/s".parse().unwrap(), "/slow");
    let run = start(
        spec,
        RunOptions::new(base, Duration::from_secs(5)),
        Instant::now(),
    )
    .unwrap();
    let r = run.finish().await;
    assert_conserved(&r);
    assert_eq!(r.intended, 500, "the timetable is exact: 5 s × 100/s");
    assert_eq!(r.totals.ok, 500);
    for b in &r.buckets[..50] {
        assert_eq!(
            b.sent, 10,
            "10 per 100 ms bucket by intended time, at {}",
            b.start
        );
    }

    // Achieved rate by completion time over [1 s, 5 s): the completions of the arrivals due in
    // [0.8 s, 4.8 s), i.e. 400, give or take the arrivals whose own latency (W = 200 ms + ε) moves them across
    // an edge. With ε varying by at most 50 ms on a noisy machine, that is at most 5 per edge: ±10 / 4 s.
    let achieved = r.completion_rate(Duration::from_secs(1), Duration::from_secs(5));
    assert!((97.5..=102.5).contains(&achieved), "achieved {achieved}/s");

    // Little's law: L = λW with λ = 100/s and W the measured latency. The bucket maximum of a level that
    // oscillates between ⌊λW⌋ and ⌈λW⌉ + 1 (an arrival and a completion within the same instant).
    let corrected = r.histogram(Measure::Corrected, None, |o| o == Outcome::Ok);
    let w_low: f64 = 0.200;
    let w_high = corrected.value_at_quantile(0.99) as f64 / 1e9;
    let mut levels: Vec<u64> = r.buckets[10..50].iter().map(|b| b.in_flight).collect();
    levels.sort_unstable();
    let median = levels[levels.len() / 2];
    let (low, high) = (
        (100.0 * w_low).floor() as u64,
        (100.0 * w_high).ceil() as u64 + 1,
    );
    assert!(
        (low..=high).contains(&median),
        "median in flight {median}, expected {low}..={high} (W p99 {w_high}s)"
    );
    assert_eq!(r.still_in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_second_stall_is_charged_to_corrected_latency_and_not_to_service_time() {
    let origin = Instant::now();
    let stalled = Arc::new(AtomicBool::new(false));
    let base = common::serve(Router::new().route(
        "/",
        get(move || {
            let stalled = stalled.clone();
            async move {
                // The first request that reaches the server after t = 1 s stalls it for a second.
                if origin.elapsed() >= Duration::from_secs(1)
                    && !stalled.swap(true, Ordering::SeqCst)
                {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                "ok"
            }
        }),
    ))
    .await;
    // One connection, like a client whose pool is exhausted: arrivals during the stall queue in the generator.
    let mut spec = LoadSpec::constant("100/s".parse().unwrap(), "/");
    spec.connections = 1;
    let options = RunOptions {
        phases: vec![
            ("before".into(), Duration::ZERO),
            ("stall".into(), Duration::from_secs(1)),
        ],
        ..RunOptions::new(base, Duration::from_secs(3))
    };
    let r = start(spec, options, origin).unwrap().finish().await;
    assert_conserved(&r);
    assert_eq!(r.totals.ok, 300);

    let stall = |m| r.histogram(m, Some("stall"), |_| true);
    // Arrivals due during the stall waited up to 1 s for the connection: the corrected histogram has it. The
    // k-th arrival after the stall began waits ~1 s - k × 10 ms, so half of the first second's 100 wait > 0.4 s
    // even if draining the queue cost as much as 1 ms per request.
    let corrected = stall(Measure::Corrected);
    assert!(
        corrected.max() >= 950_000_000,
        "corrected max {}",
        corrected.max()
    );
    assert!(
        corrected.count_between(400_000_000, u64::MAX) >= 40,
        "{}",
        corrected.count_between(400_000_000, u64::MAX)
    );
    // Their service time, from when they got the connection, is a plain loopback exchange: only the stalled
    // request itself took long once it was on the wire.
    let uncorrected = stall(Measure::Uncorrected);
    assert_eq!(
        uncorrected.count_between(400_000_000, u64::MAX),
        1,
        "only the stalled request is slow on the wire"
    );
    // Before the stall nothing queued: both histograms agree that nothing took 400 ms.
    let before = r.histogram(Measure::Corrected, Some("before"), |_| true);
    assert_eq!(before.count_between(400_000_000, u64::MAX), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_gives_connect_errors_and_a_hung_server_gives_timeouts() {
    let mut spec = LoadSpec::constant("20/s".parse().unwrap(), "/");
    spec.timeout = "200ms".parse().unwrap();
    let refused = format!("http://127.0.0.1:{}", common::closed_port());
    let r = start(
        spec.clone(),
        RunOptions::new(refused, Duration::from_millis(500)),
        Instant::now(),
    )
    .unwrap()
    .finish()
    .await;
    assert_conserved(&r);
    assert_eq!(r.totals.connect_error, 10);

    let hung =
        common::serve(Router::new().route("/", get(std::future::pending::<&'static str>))).await;
    let r = start(
        spec,
        RunOptions::new(hung, Duration::from_millis(500)),
        Instant::now(),
    )
    .unwrap()
    .finish()
    .await;
    assert_conserved(&r);
    assert_eq!(r.totals.timeout, 10);
    let t = r.histogram(Measure::Corrected, None, |o| o == Outcome::Timeout);
    assert!(
        t.min() >= t.lowest_equivalent(200_000_000),
        "a timeout is charged at least the timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_connection_the_server_closed_while_idle_is_replaced_without_an_error() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A server that answers one request per connection and then closes it without saying so (no
    // `connection: close`): every reuse finds a dead connection, which must be retried on a fresh one.
    let listener = common::listener();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 1024];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
            });
        }
    });
    let mut spec = LoadSpec::constant("50/s".parse().unwrap(), "/");
    spec.connections = 1;
    let r = start(
        spec,
        RunOptions::new(base, Duration::from_millis(1000)),
        Instant::now(),
    )
    .unwrap()
    .finish()
    .await;
    assert_conserved(&r);
    assert_eq!(r.totals.ok, 50, "{:?}", r.totals);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        50,
        "one fresh connection per request, as the server demands"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wider_coalescing_window_sends_arrivals_late_by_their_place_in_a_batch_and_times_answers_by_arrival(
) {
    let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = served.clone();
    let base = common::serve(Router::new().route(
        "/",
        get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { "ok" }
        }),
    ))
    .await;
    // 2,000/s uniform is an arrival every 0.5 ms; a 2 ms window sends four per wake-up, at the fourth's time.
    let mut spec = LoadSpec::constant("2000/s".parse().unwrap(), "/");
    spec.coalesce = "2ms".parse().unwrap();
    let r = start(
        spec,
        RunOptions::new(base, Duration::from_secs(1)),
        Instant::now(),
    )
    .unwrap()
    .finish()
    .await;
    assert_conserved(&r);
    assert_eq!(r.totals.ok, 2000, "{:?}", r.totals);
    assert_eq!(
        served.load(Ordering::SeqCst),
        2000,
        "the server's own count"
    );
    // Within a batch the arrivals are sent 1.5, 1, 0.5 and 0 ms after their intended times, and a late wake-up
    // only adds to that: at least half of them go 0.5 ms late or more, whatever the machine.
    let lag = r.histogram(Measure::SendLag, None, |_| true);
    assert!(
        lag.value_at_quantile(0.5) >= 500_000,
        "send lag p50 {} ns: the window did not batch",
        lag.value_at_quantile(0.5)
    );
    // The wait for the batch is the generator's own, like a late wake-up: kept as its lateness...
    let late = r.histogram(Measure::Late, None, |_| true);
    assert!(
        late.value_at_quantile(0.5) >= 500_000,
        "generator's lateness p50 {} ns",
        late.value_at_quantile(0.5)
    );
    // ...and left out of the corrected latency, which counts from when the request was ready to go. Answers held
    // in the kernel for the next wake-up (2 ms after the send) end when they arrived, not when that wake-up read
    // them: read-time endings would put the median near 2 ms, a loopback answer's is a small fraction of that.
    for measure in [Measure::Uncorrected, Measure::Corrected] {
        let h = r.histogram(measure, None, |_| true);
        assert!(
            h.value_at_quantile(0.5) < 1_000_000,
            "{measure:?} p50 {} ns: the batch's wait or the hold counted",
            h.value_at_quantile(0.5)
        );
    }
}
