//! loadgen's HTTP/2 and gRPC client against faultd over loopback: each gRPC status lands in its outcome class
//! (counted against what faultd says it answered), a client deadline ends in `timeout` at the deadline, a reset
//! stream is `connect_error`, a stream limit turns arrivals into `dropped` instead of a hidden wait, and
//! conservation holds throughout. Every run is short and bounded.

use std::time::Duration;

use faultline_units::GrpcCode;
use loadgen::{start, LoadSpec, Measure, Outcome, Recording, RequestTemplate, RunOptions};
use tokio::time::Instant;

fn assert_conserved(r: &Recording) {
    assert!(r.conservation.holds, "{:?}", r.conservation);
    assert_eq!(r.conservation.sent, r.totals.total() + r.still_in_flight);
    assert_eq!(r.intended, r.sent + r.totals.dropped);
}

async fn faultd(yaml: &str) -> faultd::Faultd {
    let config = faultd::Config::from_yaml(yaml, "test.yaml").unwrap();
    faultd::start(config, faultd::Options::default())
        .await
        .unwrap()
}

fn grpc_spec(rate: &str, method: &str) -> LoadSpec {
    let mut spec = LoadSpec::constant(rate.parse().unwrap(), "/");
    spec.requests = vec![RequestTemplate {
        grpc: Some(method.into()),
        message: Some("0801".into()),
        metadata: [("x-tenant".to_string(), "load".to_string())].into(),
        ..Default::default()
    }];
    spec.timeout = "2s".parse().unwrap();
    spec.connections = 2;
    spec
}

async fn run(spec: LoadSpec, addr: std::net::SocketAddr, seconds: u64) -> Recording {
    let options = RunOptions::new(format!("http://{addr}"), Duration::from_secs(seconds));
    start(spec, options, Instant::now()).unwrap().finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_grpc_status_lands_in_its_outcome_class_as_faultd_answered_it() {
    let f = faultd(
        "seed: 3\nroutes:\n  product: { path: /shop.Catalog/*, grpc_response: { echo: true }, grpc_errors: [\n\
         \x20   { share: 15%, code: UNAVAILABLE }, { share: 15%, code: INVALID_ARGUMENT },\n\
         \x20   { share: 15%, code: INTERNAL }, { share: 15%, code: DEADLINE_EXCEEDED },\n\
         \x20   { share: 10%, code: RESOURCE_EXHAUSTED, metadata: { x-degraded: 'yes' } } ] }\n",
    )
    .await;
    let mut spec = grpc_spec("400/s", "/shop.Catalog/GetProduct");
    spec.fallback_grpc_status = vec![GrpcCode::UNAVAILABLE];
    spec.fallback_header = Some("x-degraded".into());
    let r = run(spec, f.data_addr(), 1).await;
    assert_conserved(&r);
    assert_eq!(r.intended, 400);
    assert_eq!(r.still_in_flight, 0);
    let served = &f.recording().routes["product"].totals.grpc_status;
    let n = |code: &str| served.get(code).copied().unwrap_or(0);
    assert_eq!(r.totals.ok, n("OK"), "{served:?} {:?}", r.totals);
    assert_eq!(
        r.totals.fallback,
        n("UNAVAILABLE") + n("RESOURCE_EXHAUSTED")
    );
    assert_eq!(r.totals.client_error, n("INVALID_ARGUMENT"));
    assert_eq!(r.totals.server_error, n("INTERNAL"));
    assert_eq!(r.totals.timeout, n("DEADLINE_EXCEEDED"));
    assert_eq!(r.totals.connect_error + r.totals.dropped, 0);
    assert!(r.totals.ok > 50 && r.totals.fallback > 20, "{:?}", r.totals);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_deadline_shorter_than_the_delay_is_a_timeout_at_the_deadline() {
    let f = faultd("routes:\n  slow: { path: /shop.Catalog/*, latency: { fixed: 3s } }\n").await;
    let mut spec = grpc_spec("40/s", "/shop.Catalog/GetProduct");
    spec.requests[0].deadline = Some("150ms".parse().unwrap());
    let r = run(spec, f.data_addr(), 1).await;
    assert_conserved(&r);
    assert_eq!(r.totals.timeout, 40, "{:?}", r.totals);
    let h = r.histogram(Measure::Corrected, None, |o| o == Outcome::Timeout);
    assert!(
        h.min() >= 149_000_000,
        "ended before the deadline: {} ns",
        h.min()
    );
    assert!(
        h.value_at_quantile(0.99) < 1_000_000_000,
        "{} ns",
        h.value_at_quantile(0.99)
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_stream_is_a_connect_error_and_plain_http2_requests_are_classified_by_status() {
    let f = faultd(
        "routes:\n  refused: { path: /shop.Catalog/*, rst_stream: { share: 100%, code: CANCEL } }\n\
         \x20 price: { path: /price/*, errors: [ { share: 50%, status: 503 } ] }\n",
    )
    .await;
    let r = run(
        grpc_spec("50/s", "/shop.Catalog/GetProduct"),
        f.data_addr(),
        1,
    )
    .await;
    assert_conserved(&r);
    assert_eq!(r.totals.connect_error, 50, "{:?}", r.totals);

    let mut spec = LoadSpec::constant("100/s".parse().unwrap(), "/price/{rand:1..9}");
    spec.requests[0].http2 = true;
    spec.connections = 1;
    let r = run(spec, f.data_addr(), 1).await;
    assert_conserved(&r);
    let price = &f.recording().routes["price"].totals;
    assert_eq!(r.totals.ok, price.completed.c2xx);
    assert_eq!(r.totals.server_error, price.completed.c5xx);
    assert_eq!(r.totals.ok + r.totals.server_error, 100);
    let http2: u64 = f
        .recording()
        .connections
        .iter()
        .map(|c| c.http2_opened)
        .sum();
    assert_eq!(http2, 3, "two gRPC connections and one for the REST load");
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrivals_over_the_stream_limit_are_dropped_not_queued() {
    let f = faultd(
        "http2: { max_concurrent_streams: 3 }\nroutes:\n  slow: { path: /shop.Catalog/*, latency: { fixed: 400ms } }\n",
    )
    .await;
    let mut spec = grpc_spec("50/s", "/shop.Catalog/GetProduct");
    spec.connections = 1;
    spec.streams_per_connection = 10;
    let r = run(spec, f.data_addr(), 1).await;
    assert_conserved(&r);
    // The server's limit (3) is below ours (10): once its SETTINGS arrive, a 4th stream is refused, never queued.
    assert!(f.recording().routes["slow"].max_in_flight <= 3);
    assert!(r.totals.dropped >= 30, "{:?}", r.totals);
    assert_eq!(r.totals.ok + r.totals.dropped, 50, "{:?}", r.totals);
    let h = r.histogram(Measure::Corrected, None, |o| o == Outcome::Ok);
    assert!(
        h.max() < 1_000_000_000,
        "a call waited for a stream: {} ns",
        h.max()
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_closed_model_over_http2_keeps_one_stream_per_user_and_waits_for_each_answer() {
    let f = faultd("routes:\n  product: { path: /shop.Catalog/*, latency: { fixed: 20ms }, grpc_response: { echo: true } }\n").await;
    let mut spec = grpc_spec("1/s", "/shop.Catalog/GetProduct");
    spec.streams_per_connection = 8;
    let options = RunOptions::new(format!("http://{}", f.data_addr()), Duration::from_secs(1));
    let r = loadgen::start_closed(spec, options, 6, Instant::now())
        .unwrap()
        .finish()
        .await;
    assert_conserved(&r);
    let route = &f.recording().routes["product"];
    // Six users, each with one call outstanding at a time: faultd never holds more than six.
    assert_eq!(route.max_in_flight, 6);
    // Each call takes at least its 20 ms, so a user makes at most 50 in the second, and the rate ignored.
    assert!(r.totals.ok <= 6 * 50 + 6, "{:?}", r.totals);
    assert!(r.totals.ok >= 100, "{:?}", r.totals);
    assert_eq!(r.totals.ok, route.totals.grpc_status["OK"]);
    assert_eq!(r.totals.dropped + r.totals.connect_error, 0);
    f.shutdown().await;
}
