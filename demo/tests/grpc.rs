//! The demo calling its dependency over gRPC, against faultd's gRPC routes: each operation calls its method with
//! its item as the message, the breaker counts UNAVAILABLE and DEADLINE_EXCEEDED and not INVALID_ARGUMENT (unless
//! `count_4xx` is on), the fallbacks are served as over HTTP, and a GOAWAY moves the calls to a new connection
//! without losing any. Real time, loopback only, each test a second or two.

use std::time::Duration;

use demo::{BreakerState, DemoConfig, Operation, Options};

async fn start_faultd(yaml: &str) -> faultd::Faultd {
    let config = faultd::Config::from_yaml(yaml, "grpc-test.yaml").unwrap();
    faultd::start(config, faultd::Options::default())
        .await
        .unwrap()
}

async fn start_demo(yaml: &str, faultd: &faultd::Faultd) -> demo::Demo {
    let config = DemoConfig::from_yaml(yaml, "test.yaml").unwrap();
    let options = Options {
        dependency_url: format!("http://{}", faultd.data_addr()),
        ..Default::default()
    };
    demo::start(config, options).await.unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .tls_backend_preconfigured(demo::layers::client::tls_config(None).unwrap())
        .build()
        .unwrap()
}

/// GETs `path` on the demo `n` times; returns each status and `X-Fallback`.
async fn get_n(demo: &demo::Demo, path: &str, n: usize) -> Vec<(u16, Option<String>)> {
    let c = client();
    let mut out = Vec::new();
    for _ in 0..n {
        let r = c
            .get(format!("http://{}{path}", demo.addr()))
            .send()
            .await
            .unwrap();
        let fallback = r
            .headers()
            .get("x-fallback")
            .map(|v| v.to_str().unwrap().to_string());
        out.push((r.status().as_u16(), fallback));
    }
    out
}

fn grpc_status(f: &faultd::Faultd, route: &str) -> std::collections::BTreeMap<String, u64> {
    f.recording().routes[route].totals.grpc_status.clone()
}

#[tokio::test]
async fn each_operation_calls_its_method_and_the_answer_is_the_message() {
    let f = start_faultd(
        "routes:\n  accounts: { path: /demo.Accounts/*, grpc_response: { echo: true } }\n",
    )
    .await;
    let demo = start_demo(
        "protocol: grpc\noperations: { account-read: {}, account-write: {} }",
        &f,
    )
    .await;
    let c = client();
    let read = c
        .get(format!("http://{}/account/42", demo.addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    // The echoed message: field 1 (the item id) as protobuf.
    assert_eq!(&read.bytes().await.unwrap()[..], &[0x0a, 2, b'4', b'2']);
    let write = c
        .post(format!("http://{}/account/7", demo.addr()))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), 200);
    assert_eq!(
        &write.bytes().await.unwrap()[..],
        &[0x0a, 1, b'7', 0x12, 2, b'{', b'}']
    );
    assert_eq!(grpc_status(&f, "accounts")["OK"], 2);
    let r = f.recording();
    let http2: u64 = r.connections.iter().map(|c| c.http2_opened).sum();
    assert_eq!(http2, 1, "both operations share one HTTP/2 connection");
    demo.shutdown().await;
    f.shutdown().await;
}

#[tokio::test]
async fn unavailable_opens_the_breaker_and_the_stale_price_is_served() {
    let f = start_faultd(
        "routes:\n  pricing: { path: /demo.Pricing/GetPrice, grpc_response: { message: 0801 } }\n",
    )
    .await;
    let demo = start_demo(
        "protocol: grpc\noperations: { pricing: { fallback: stale, breaker: { min_calls: 5 } } }",
        &f,
    )
    .await;
    assert_eq!(get_n(&demo, "/product/1", 1).await, [(200, None)]);
    f.set_route(
        "pricing",
        &serde_saphyr::from_str(
            "grpc_errors: [ { share: 100%, code: UNAVAILABLE, message: overloaded } ]",
        )
        .unwrap(),
    )
    .unwrap();
    let answers = get_n(&demo, "/product/1", 10).await;
    assert!(
        answers
            .iter()
            .all(|(s, fb)| *s == 200 && fb.as_deref() == Some("stale")),
        "{answers:?}"
    );
    assert_eq!(
        demo.breaker_state(Operation::Pricing, 0),
        Some(BreakerState::Open)
    );
    assert_eq!(
        grpc_status(&f, "pricing")["UNAVAILABLE"],
        4,
        "the window held the healthy call and four failures (min_calls 5, 80%): it opened, and the rest never \
         reached the dependency"
    );
    demo.shutdown().await;
    f.shutdown().await;
}

#[tokio::test]
async fn invalid_argument_passes_through_as_400_and_only_count_4xx_counts_it() {
    let f = start_faultd(
        "routes:\n  pricing: { path: /demo.Pricing/*, grpc_errors: [ { share: 100%, code: INVALID_ARGUMENT, message: bad id } ] }\n",
    )
    .await;
    let recommended = start_demo(
        "protocol: grpc\noperations: { pricing: { breaker: { min_calls: 5 } } }",
        &f,
    )
    .await;
    let answers = get_n(&recommended, "/product/x", 20).await;
    assert!(answers.iter().all(|a| *a == (400, None)), "{answers:?}");
    assert_eq!(
        recommended.breaker_state(Operation::Pricing, 0),
        Some(BreakerState::Closed)
    );
    recommended.shutdown().await;

    let mistaken = start_demo(
        "protocol: grpc\noperations: { pricing: { breaker: { min_calls: 5 } } }\nmistakes: [ count_4xx ]",
        &f,
    )
    .await;
    get_n(&mistaken, "/product/x", 5).await;
    assert_eq!(
        mistaken.breaker_state(Operation::Pricing, 0),
        Some(BreakerState::Open)
    );
    mistaken.shutdown().await;
    f.shutdown().await;
}

#[tokio::test]
async fn a_slow_dependency_ends_at_the_deadline_the_demo_sends_and_counts_as_a_failure() {
    let f = start_faultd("routes:\n  pricing: { path: /demo.Pricing/*, latency: { fixed: 2s } }\n")
        .await;
    let demo = start_demo(
        "protocol: grpc\noperations: { pricing: { timeout: 100ms, fallback: default, breaker: { min_calls: 3 } } }",
        &f,
    )
    .await;
    let started = std::time::Instant::now();
    let answers = get_n(&demo, "/product/1", 3).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "three calls ended at their 100 ms deadline, not after the 2 s delay"
    );
    assert!(
        answers
            .iter()
            .all(|(s, fb)| *s == 200 && fb.as_deref() == Some("default")),
        "{answers:?}"
    );
    assert_eq!(
        demo.breaker_state(Operation::Pricing, 0),
        Some(BreakerState::Open)
    );
    demo.shutdown().await;
    // faultd ended each call at the deadline the demo sent (or saw the demo give up at the same instant). Served to
    // the end, a call would stay in flight 2 s from its arrival, which is after `started`; so every call leaving
    // before `started` + 1.9 s tells the two apart, with over 1.5 s to spare after the three 100 ms deadlines.
    let undecided_after = started + Duration::from_millis(1900);
    while f.recording().routes["pricing"].in_flight != 0 {
        assert!(
            std::time::Instant::now() < undecided_after,
            "calls still in flight at faultd 1.9 s after the first began: not ended at their deadline"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f.shutdown().await;
}

#[tokio::test]
async fn a_graceful_goaway_every_few_streams_moves_calls_to_new_connections_and_loses_none() {
    let f = start_faultd(
        "routes:\n  pricing: { path: /demo.Pricing/*, grpc_response: { message: 0801 }, goaway: { after: 3 } }\n",
    )
    .await;
    let demo = start_demo("protocol: grpc\noperations: { pricing: {} }", &f).await;
    let answers = get_n(&demo, "/product/1", 12).await;
    assert!(answers.iter().all(|a| *a == (200, None)), "{answers:?}");
    let r = f.recording();
    let http2: u64 = r.connections.iter().map(|c| c.http2_opened).sum();
    assert_eq!(http2, 4, "one connection per three streams");
    assert_eq!(grpc_status(&f, "pricing")["OK"], 12);
    demo.shutdown().await;
    f.shutdown().await;
}
