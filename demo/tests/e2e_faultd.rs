//! End to end against faultd (seed 000 in small): 200 requests/s on the product page; the pricing dependency goes
//! from 5 ms to 2 s for three seconds, then recovers. The breaker must open, fallbacks (stale prices) must be
//! served while it is open, faultd must never hold more pricing calls than the bulkhead allows, the half-open
//! probes must be limited, and the breaker must close after recovery.
//!
//! Real time, about 7 s. Every bound below is derived from the configuration (window, timeout, open_for, pool,
//! probes) plus a slack for a noisy 2-core machine, never tuned to a measured value.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use demo::{BreakerState, DemoConfig, Options};

const RATE: u64 = 200; // requests per second
const RUN: Duration = Duration::from_millis(6_500);
const BROWNOUT_AT_MS: u64 = 1_000;
const RECOVERED_AT_MS: u64 = 4_000;
// The demo's pricing settings, as in DEMO below.
const TIMEOUT_MS: u64 = 250;
const POOL: u64 = 20;
const WINDOW_MS: u64 = 1_000;
const OPEN_FOR_MS: u64 = 1_000;
const HALF_OPEN_CALLS: u64 = 1;
const CLOSE_AFTER: u64 = 2;
/// Scheduling noise allowed on this machine on top of the physics (tokio timers, a busy CPU).
const SLACK_MS: u64 = 250;

const FAULTD: &str = "
bucket: 100ms
routes:
  pricing: { path: /price/*, latency: { fixed: 5ms } }
phases:
  - { name: healthy,   at: 0s }
  - { name: brownout,  at: 1s, routes: { pricing: { latency: { fixed: 2s } } } }
  - { name: recovered, at: 4s, routes: { pricing: healthy } }
";

const DEMO: &str = "
operations:
  pricing: { timeout: 250ms, pool: 20, fallback: stale,
             breaker: { failure_rate: 50%, window: 1s, min_calls: 10, open_for: 1s, half_open_calls: 1,
                        close_after: 2 } }
";

#[derive(Debug, Clone)]
struct Sample {
    sent_ms: u64,
    latency: Duration,
    status: u16,
    fallback: Option<String>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_opens_on_a_two_second_brownout_serves_stale_prices_limits_probes_and_closes_after_recovery(
) {
    let faultd_config = faultd::Config::from_yaml(FAULTD, "e2e-faultd.yaml").unwrap();
    let faultd = faultd::start(faultd_config, faultd::Options::default())
        .await
        .unwrap();
    let options = Options {
        dependency_url: format!("http://{}", faultd.data_addr()),
        ..Default::default()
    };
    let demo = demo::start(
        DemoConfig::from_yaml(DEMO, "e2e-demo.yaml").unwrap(),
        options,
    )
    .await
    .unwrap();
    let client = reqwest::Client::builder()
        .no_proxy()
        .tls_backend_preconfigured(demo::layers::client::tls_config(None).unwrap())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let base = format!("http://{}", demo.addr());

    // Open-model load: request i is due at i / RATE, whatever the answers do.
    let origin = tokio::time::Instant::now();
    let origin_unix_ms = unix_ms();
    faultd.start_schedule(origin);
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let total = RATE * RUN.as_millis() as u64 / 1_000;
    let mut tasks = Vec::new();
    for i in 0..total {
        let due = origin + Duration::from_micros(i * 1_000_000 / RATE);
        tokio::time::sleep_until(due).await;
        let (client, url, samples) = (
            client.clone(),
            format!("{base}/product/{}", i % 50),
            samples.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let response = client.get(url).send().await;
            let latency = due.elapsed();
            let (status, fallback) = match response {
                Ok(r) => (
                    r.status().as_u16(),
                    r.headers()
                        .get("x-fallback")
                        .map(|v| v.to_str().unwrap().to_string()),
                ),
                Err(_) => (0, None),
            };
            let sent_ms = (due - origin).as_millis() as u64;
            samples.lock().unwrap().push(Sample {
                sent_ms,
                latency,
                status,
                fallback,
            });
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let samples = samples.lock().unwrap().clone();
    let recording = faultd.recording();
    let transitions: Vec<_> = demo
        .transitions()
        .into_iter()
        .map(|t| (t.from, t.to, t.at_unix_ms.saturating_sub(origin_unix_ms)))
        .collect();
    let metrics = demo.metrics_text();
    demo.shutdown().await;
    faultd.shutdown().await;

    let pricing = &recording.routes["pricing"];
    eprintln!("transitions (ms from origin): {transitions:?}");
    eprintln!(
        "faultd pricing: max in flight {}, arrivals {}",
        pricing.max_in_flight, pricing.totals.arrivals
    );

    // Every request was answered with 200: a fresh price or a fallback, never an error.
    assert_eq!(samples.len() as u64, total);
    assert!(
        samples.iter().all(|s| s.status == 200),
        "{:?}",
        samples.iter().find(|s| s.status != 200)
    );

    // It opens: once the window (1 s) has turned over after the first timeouts (250 ms), it holds only failures.
    let (_, _, opened_ms) = *transitions
        .first()
        .expect("the breaker never changed state");
    assert_eq!(
        (transitions[0].0, transitions[0].1),
        (BreakerState::Closed, BreakerState::Open)
    );
    let open_deadline = BROWNOUT_AT_MS + WINDOW_MS + TIMEOUT_MS + SLACK_MS;
    assert!(
        (BROWNOUT_AT_MS..=open_deadline).contains(&opened_ms),
        "opened at {opened_ms} ms; expected by {open_deadline}"
    );

    // It closes after recovery: at worst a probe failed just before recovery, so one more open_for, then probes.
    let &(from, to, closed_ms) = transitions.last().unwrap();
    assert_eq!(
        (from, to),
        (BreakerState::HalfOpen, BreakerState::Closed),
        "{transitions:?}"
    );
    let close_deadline = RECOVERED_AT_MS + OPEN_FOR_MS + TIMEOUT_MS + SLACK_MS;
    assert!(
        (RECOVERED_AT_MS..=close_deadline).contains(&closed_ms),
        "closed at {closed_ms} ms; expected by {close_deadline}"
    );
    let half_opens = transitions
        .iter()
        .filter(|t| t.1 == BreakerState::HalfOpen)
        .count() as u64;
    assert!(half_opens >= 1);

    // The bulkhead bounds what faultd holds. Allowance: a call the demo gave up on leaves faultd when faultd sees
    // the connection close; at 200 calls/s, a lag of up to 10 ms lets 2 more arrive meanwhile.
    assert!(
        pricing.max_in_flight <= POOL + 2,
        "faultd held {} pricing calls; the pool is {POOL}",
        pricing.max_in_flight
    );
    assert!(
        metrics.contains(r#"circuit_breaker_fallback_total{reason="bulkhead_full"}"#),
        "the pool was never the limit"
    );

    // While open, only probes reach faultd, at most HALF_OPEN_CALLS at once. Buckets wholly inside the open
    // period, after the calls admitted while closed have timed out (timeout + slack).
    let bucket_ms = recording.bucket.get().as_millis() as u64;
    let quiet_from = opened_ms + TIMEOUT_MS + SLACK_MS;
    let inside: Vec<_> = pricing
        .buckets
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            *i as u64 * bucket_ms >= quiet_from && (*i as u64 + 1) * bucket_ms <= closed_ms
        })
        .map(|(_, b)| b)
        .collect();
    assert!(!inside.is_empty());
    let probes: u64 = inside.iter().map(|b| b.arrivals).sum();
    assert!(
        probes <= half_opens * CLOSE_AFTER,
        "{probes} calls reached faultd while open; {half_opens} half-open periods"
    );
    let most_at_once = inside.iter().map(|b| b.in_flight_max).max().unwrap_or(0);
    assert!(
        most_at_once <= HALF_OPEN_CALLS,
        "{most_at_once} probes in flight at once"
    );

    // While open, users get the stale price at once instead of waiting for the timeout.
    let open_samples: Vec<_> = samples
        .iter()
        .filter(|s| s.sent_ms >= opened_ms + SLACK_MS && s.sent_ms + SLACK_MS <= closed_ms)
        .collect();
    let stale = open_samples
        .iter()
        .filter(|s| s.fallback.as_deref() == Some("stale"))
        .count() as u64;
    assert!(
        stale + half_opens * CLOSE_AFTER >= open_samples.len() as u64,
        "{stale} stale of {}",
        open_samples.len()
    );
    let mut latencies: Vec<_> = open_samples.iter().map(|s| s.latency).collect();
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    assert!(
        median < Duration::from_millis(TIMEOUT_MS),
        "median {median:?} while open: the dependency is not called"
    );

    // After closing, fresh prices again. Most, not all: with a 5 ms dependency a fallback now means a stall of
    // the whole machine past the 250 ms timeout (seen with two compilers running beside the test).
    let after: Vec<_> = samples
        .iter()
        .filter(|s| s.sent_ms >= closed_ms + SLACK_MS)
        .collect();
    let fresh = after.iter().filter(|s| s.fallback.is_none()).count();
    assert!(
        !after.is_empty() && fresh * 2 > after.len(),
        "{fresh} fresh of {}",
        after.len()
    );
}
