//! What the demo hands on to its dependency over HTTP: the caller's trace id in a `traceparent` of each call's own
//! (a new span id), the caller's remaining budget in `x-request-timeout`, and the end of each call when the caller
//! has gone; with the `no_deadline_propagation` mistake, no deadline and a call that outlives its caller.
//! Real time, loopback only, each test under two seconds.

use crate::common;

use std::time::Duration;

use demo::{DemoConfig, Options};

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async fn start_demo(yaml: &str, dep: std::net::SocketAddr) -> demo::Demo {
    let config = DemoConfig::from_yaml(yaml, "test.yaml").unwrap();
    let options = Options {
        dependency_url: format!("http://{dep}"),
        ..Default::default()
    };
    demo::start(config, options).await.unwrap()
}

/// GETs the product page as a caller with a trace context and, if given, a deadline (which it also keeps).
async fn get_product(demo: &demo::Demo, deadline_ms: Option<u64>) {
    let mut request = reqwest::Client::builder()
        .no_proxy()
        .tls_backend_preconfigured(demo::layers::client::tls_config(None).unwrap())
        .build()
        .unwrap()
        .get(format!("http://{}/product/1", demo.addr()))
        .header("traceparent", PARENT);
    if let Some(ms) = deadline_ms {
        request = request
            .header("x-request-timeout", ms.to_string())
            .timeout(Duration::from_millis(ms));
    }
    let _ = request.send().await;
}

fn budget(sent: &Option<String>) -> u64 {
    sent.as_deref().expect("a deadline header").parse().unwrap()
}

#[tokio::test]
async fn every_call_carries_the_callers_trace_id_with_a_span_of_its_own_and_the_remaining_budget() {
    let (fake, dep) = common::start().await;
    let demo = start_demo("operations: { pricing: {}, reviews: {} }", dep).await;
    get_product(&demo, Some(150)).await;
    let price = fake.route("/price/").propagated.lock().unwrap().clone();
    let reviews = fake.route("/reviews/").propagated.lock().unwrap().clone();
    assert_eq!((price.len(), reviews.len()), (1, 1));
    let (p, r) = (price[0].0.clone().unwrap(), reviews[0].0.clone().unwrap());
    for child in [&p, &r] {
        assert_eq!(
            &child[..36],
            &PARENT[..36],
            "the caller's trace id: {child}"
        );
        assert_ne!(&child[36..52], &PARENT[36..52], "a new span id: {child}");
    }
    assert_ne!(p, r, "each call has its own span id");
    // The caller's 150 ms is shorter than both timeouts (250 ms, 800 ms): what is left of it is sent.
    for sent in [&price[0].1, &reviews[0].1] {
        assert!((1..=150).contains(&budget(sent)), "{sent:?}");
    }
    // Without a deadline from the caller, the call's own timeout is its deadline.
    get_product(&demo, None).await;
    let price = fake.route("/price/").propagated.lock().unwrap().clone();
    assert!((200..=250).contains(&budget(&price[1].1)), "{price:?}");
    demo.shutdown().await;
}

/// Waits (at most 3 s) for the first call on `/price/` to end; returns how long it lasted and whether it was
/// answered.
async fn first_price_call_ended(fake: &common::Fake) -> (Duration, bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        if let Some(&ended) = fake.route("/price/").ended.lock().unwrap().first() {
            return ended;
        }
        assert!(std::time::Instant::now() < deadline, "the call never ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_call_ends_with_its_callers_deadline_and_without_propagation_it_runs_on_unanswered() {
    // The dependency takes 600 ms; the operation would wait 2 s; the caller gives up after 100 ms.
    let yaml = "operations: { pricing: { timeout: 2s } }";
    let (fake, dep) = common::start().await;
    fake.set("/price/", 200, Duration::from_millis(600));
    let demo = start_demo(yaml, dep).await;
    get_product(&demo, Some(100)).await;
    let (lasted, answered) = first_price_call_ended(&fake).await;
    assert!(!answered, "the demo left the call at the caller's deadline");
    assert!(lasted < Duration::from_millis(500), "{lasted:?}");
    demo.shutdown().await;

    let (fake, dep) = common::start().await;
    fake.set("/price/", 200, Duration::from_millis(600));
    let mistaken = format!("{yaml}\nmistakes: [ no_deadline_propagation ]");
    let demo = start_demo(&mistaken, dep).await;
    get_product(&demo, Some(100)).await;
    let (lasted, answered) = first_price_call_ended(&fake).await;
    assert!(
        answered && lasted >= Duration::from_millis(600),
        "served for nobody: {lasted:?}"
    );
    let sent = fake.route("/price/").propagated.lock().unwrap()[0].clone();
    assert_eq!(sent.1, None, "no deadline sent");
    assert!(sent.0.is_some(), "the trace id still is");
    demo.shutdown().await;
}
