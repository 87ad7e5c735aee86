//! The demo over HTTP against a small fake dependency: endpoints, fallbacks and their headers, instances and
//! shared counters, the shared-breaker and no-timeout mistakes, the bulkhead, metrics and the webhook.
//! Real time, loopback only, each test well under a few seconds.

use crate::common;

use std::time::Duration;

use demo::{BreakerState, DemoConfig, Operation, Options};

async fn start_demo(yaml: &str, dep: std::net::SocketAddr, webhook: Option<String>) -> demo::Demo {
    let config = DemoConfig::from_yaml(yaml, "test.yaml").unwrap();
    let options = Options {
        dependency_url: format!("http://{dep}"),
        webhook,
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

fn header(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

#[tokio::test]
async fn the_product_page_serves_a_stale_price_and_default_reviews_when_the_dependency_fails() {
    let (fake, dep) = common::start().await;
    let demo = start_demo("operations: { pricing: {}, reviews: {} }", dep, None).await;
    let base = format!("http://{}", demo.addr());
    let c = client();

    let fresh = c.get(format!("{base}/product/7")).send().await.unwrap();
    assert_eq!(fresh.status(), 200);
    assert_eq!(header(&fresh, "x-fallback"), None);
    let page: serde_json::Value = fresh.json().await.unwrap();
    assert_eq!(page["price"]["path"], "/price/7");
    assert_eq!(page["reviews"]["path"], "/reviews/7");

    fake.set("/price/", 503, Duration::ZERO);
    fake.set("/reviews/", 500, Duration::ZERO);
    let degraded = c.get(format!("{base}/product/7")).send().await.unwrap();
    assert_eq!(degraded.status(), 200);
    assert_eq!(
        header(&degraded, "x-fallback").as_deref(),
        Some("stale, default")
    );
    assert_eq!(
        header(&degraded, "x-fallback-pricing").as_deref(),
        Some("stale")
    );
    assert_eq!(
        header(&degraded, "x-fallback-reviews").as_deref(),
        Some("default")
    );
    let page: serde_json::Value = degraded.json().await.unwrap();
    assert_eq!(
        page["price"]["path"], "/price/7",
        "the last good price of item 7"
    );
    assert_eq!(page["reviews"], serde_json::json!([]));

    let never_seen = c.get(format!("{base}/product/8")).send().await.unwrap();
    assert_eq!(
        header(&never_seen, "x-fallback-pricing").as_deref(),
        Some("default")
    );
    demo.shutdown().await;
}

#[tokio::test]
async fn a_client_error_from_the_dependency_passes_through_and_does_not_trip_the_breaker() {
    let (fake, dep) = common::start().await;
    let demo = start_demo(
        "operations: { pricing: { breaker: { min_calls: 5 } } }",
        dep,
        None,
    )
    .await;
    fake.set("/price/", 404, Duration::ZERO);
    let c = client();
    for _ in 0..20 {
        let r = c
            .get(format!("http://{}/product/1", demo.addr()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
    }
    assert_eq!(
        demo.breaker_state(Operation::Pricing, 0),
        Some(BreakerState::Closed)
    );
    demo.shutdown().await;
}

#[tokio::test]
async fn count_4xx_trips_the_breaker_on_client_errors() {
    let (fake, dep) = common::start().await;
    let demo = start_demo(
        "operations: { pricing: { breaker: { min_calls: 5 } } }\nmistakes: [ count_4xx ]",
        dep,
        None,
    )
    .await;
    fake.set("/price/", 404, Duration::ZERO);
    let c = client();
    for _ in 0..5 {
        c.get(format!("http://{}/product/1", demo.addr()))
            .send()
            .await
            .unwrap();
    }
    assert_eq!(
        demo.breaker_state(Operation::Pricing, 0),
        Some(BreakerState::Open)
    );
    demo.shutdown().await;
}

#[tokio::test]
async fn checkout_answers_503_with_retry_after_and_retries_with_one_idempotency_key() {
    let (fake, dep) = common::start().await;
    let demo = start_demo(
        "operations: { payments: { retries: { max: 2, backoff: 1ms } } }",
        dep,
        None,
    )
    .await;
    fake.set("/payments/", 502, Duration::ZERO);
    let r = client()
        .post(format!("http://{}/checkout", demo.addr()))
        .body("{\"amount\":5}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "payments never fake success");
    assert_eq!(header(&r, "retry-after").as_deref(), Some("5"));
    assert_eq!(header(&r, "x-fallback").as_deref(), Some("unavailable"));
    assert_eq!(fake.calls("/payments/"), 3, "one call and two retries");
    let keys = fake.route("/payments/").keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| k == &keys[0]), "{keys:?}");
    demo.shutdown().await;
}

#[tokio::test]
async fn operations_not_configured_are_left_out_of_the_page_and_their_endpoints_answer_404() {
    let (fake, dep) = common::start().await;
    let demo = start_demo("operations: { reviews: {} }", dep, None).await;
    let base = format!("http://{}", demo.addr());
    let c = client();
    let page: serde_json::Value = c
        .get(format!("{base}/product/3"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(page.get("price").is_none());
    assert_eq!(page["reviews"]["path"], "/reviews/3");
    assert_eq!(fake.calls("/price/"), 0);
    for (method, path) in [
        ("POST", "/checkout"),
        ("GET", "/admin/report"),
        ("GET", "/account/1"),
        ("POST", "/account/1"),
    ] {
        let r = c
            .request(method.parse().unwrap(), format!("{base}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{method} {path}");
    }
    demo.shutdown().await;
}

#[tokio::test]
async fn every_endpoint_calls_its_own_dependency_path() {
    let (fake, dep) = common::start().await;
    let demo = start_demo("{}", dep, None).await;
    let base = format!("http://{}", demo.addr());
    let c = client();
    assert_eq!(
        c.get(format!("{base}/admin/report"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        c.get(format!("{base}/account/4"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        c.post(format!("{base}/account/4"))
            .body("{}")
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        c.post(format!("{base}/checkout"))
            .body("{}")
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        c.get(format!("{base}/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        (
            fake.calls("/report"),
            fake.calls("/accounts/"),
            fake.calls("/payments/")
        ),
        (1, 2, 1)
    );
    demo.shutdown().await;
}

#[tokio::test]
async fn per_instance_breakers_never_see_enough_calls_and_shared_counters_trip_them_together() {
    // Seed 000's floor in small: 4 instances, a floor of 8 calls, 8 failing requests in total.
    let yaml =
        "instances: 4\noperations: { report: { retries: { max: 0 }, breaker: { min_calls: 8 } } }";
    for shared in [false, true] {
        let (fake, dep) = common::start().await;
        fake.set("/report", 500, Duration::ZERO);
        let demo = start_demo(&format!("{yaml}\nshared_counters: {shared}"), dep, None).await;
        let c = client();
        for _ in 0..8 {
            c.get(format!("http://{}/admin/report", demo.addr()))
                .send()
                .await
                .unwrap();
        }
        let states: Vec<_> = (0..4)
            .map(|i| demo.breaker_state(Operation::Report, i).unwrap())
            .collect();
        let opened: Vec<_> = demo
            .transitions()
            .into_iter()
            .filter(|t| t.to == BreakerState::Open)
            .map(|t| t.instance)
            .collect();
        if shared {
            assert_eq!(states, vec![BreakerState::Open; 4]);
            assert_eq!(
                opened,
                vec!["0", "1", "2", "3"],
                "each instance's breaker is observed opening"
            );
        } else {
            assert_eq!(
                states,
                vec![BreakerState::Closed; 4],
                "2 calls per instance against a floor of 8"
            );
            assert!(opened.is_empty());
        }
        demo.shutdown().await;
    }
}

#[tokio::test]
async fn the_shared_breaker_mistake_blocks_healthy_reviews_when_pricing_fails() {
    for mistaken in [false, true] {
        let (fake, dep) = common::start().await;
        fake.set("/price/", 500, Duration::ZERO);
        let mistakes = if mistaken { "[ shared_breaker ]" } else { "[]" };
        let yaml = format!(
            "operations: {{ pricing: {{ breaker: {{ min_calls: 5 }} }}, reviews: {{ breaker: {{ min_calls: 5 }} }} }}\nmistakes: {mistakes}"
        );
        let demo = start_demo(&yaml, dep, None).await;
        let c = client();
        for _ in 0..10 {
            c.get(format!("http://{}/product/1", demo.addr()))
                .send()
                .await
                .unwrap();
        }
        let reviews_before = fake.calls("/reviews/");
        let r = c
            .get(format!("http://{}/product/1", demo.addr()))
            .send()
            .await
            .unwrap();
        let reviews_fallback = header(&r, "x-fallback-reviews");
        if mistaken {
            assert_eq!(
                demo.breaker_state(Operation::Reviews, 0),
                Some(BreakerState::Open)
            );
            assert_eq!(
                reviews_fallback.as_deref(),
                Some("default"),
                "healthy reviews are cut off"
            );
            assert_eq!(fake.calls("/reviews/"), reviews_before);
        } else {
            assert_eq!(
                demo.breaker_state(Operation::Reviews, 0),
                Some(BreakerState::Closed)
            );
            assert_eq!(reviews_fallback, None);
            assert_eq!(fake.calls("/reviews/"), reviews_before + 1);
        }
        demo.shutdown().await;
    }
}

#[tokio::test]
async fn the_timeout_bounds_a_slow_call_and_no_timeout_waits_it_out() {
    for mistaken in [false, true] {
        let (fake, dep) = common::start().await;
        fake.set("/price/", 200, Duration::from_millis(600));
        let mistakes = if mistaken { "[ no_timeout ]" } else { "[]" };
        let demo = start_demo(
            &format!("operations: {{ pricing: {{ timeout: 100ms }} }}\nmistakes: {mistakes}"),
            dep,
            None,
        )
        .await;
        let start = std::time::Instant::now();
        let r = client()
            .get(format!("http://{}/product/1", demo.addr()))
            .send()
            .await
            .unwrap();
        let took = start.elapsed();
        if mistaken {
            assert_eq!(header(&r, "x-fallback"), None);
            assert!(took >= Duration::from_millis(600), "{took:?}");
        } else {
            assert_eq!(header(&r, "x-fallback").as_deref(), Some("default"));
            assert!(
                took >= Duration::from_millis(100) && took < Duration::from_millis(600),
                "{took:?}"
            );
        }
        demo.shutdown().await;
    }
}

#[tokio::test]
async fn the_bulkhead_caps_calls_in_flight_at_the_dependency_and_the_excess_gets_the_fallback() {
    let (fake, dep) = common::start().await;
    fake.set("/reviews/", 200, Duration::from_millis(300));
    let demo = start_demo(
        "operations: { reviews: { pool: 5, timeout: 2s } }",
        dep,
        None,
    )
    .await;
    let c = client();
    let calls = (0..20).map(|i| {
        let c = c.clone();
        let url = format!("http://{}/product/{i}", demo.addr());
        tokio::spawn(async move {
            c.get(url)
                .send()
                .await
                .unwrap()
                .headers()
                .get("x-fallback")
                .is_some()
        })
    });
    let mut fallbacks = 0;
    for call in calls.collect::<Vec<_>>() {
        fallbacks += call.await.unwrap() as usize;
    }
    assert!(
        fake.max_in_flight("/reviews/") <= 5,
        "{}",
        fake.max_in_flight("/reviews/")
    );
    assert_eq!(
        fake.calls("/reviews/") + fallbacks,
        20,
        "every request is served or gets the fallback"
    );
    assert!(fallbacks >= 15 - 5, "{fallbacks}");
    let metrics = demo.metrics_text();
    assert!(
        metrics.contains("circuit_breaker_fallback_total{reason=\"bulkhead_full\"}"),
        "{metrics}"
    );
    demo.shutdown().await;
}

#[tokio::test]
async fn metrics_use_the_seed_names_and_transitions_reach_the_webhook() {
    let (fake, dep) = common::start().await;
    fake.set("/price/", 503, Duration::ZERO);
    let hook = format!("http://{dep}/webhook");
    let demo = start_demo(
        "operations: { pricing: { breaker: { min_calls: 3, open_for: 200ms } } }",
        dep,
        Some(hook),
    )
    .await;
    let base = format!("http://{}", demo.addr());
    let c = client();
    for _ in 0..3 {
        c.get(format!("{base}/product/1")).send().await.unwrap();
    }
    fake.set("/price/", 200, Duration::ZERO);
    // Past `open_for` (200 ms), the next call is the half-open probe, which succeeds and closes the breaker.
    tokio::time::sleep(Duration::from_millis(250)).await;
    c.get(format!("{base}/product/1")).send().await.unwrap();
    let text = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        r#"circuit_breaker_state{dependency="pricing",operation="pricing",instance="0"} 0"#,
        r#"circuit_breaker_transitions_total{from="closed",to="open"} 1"#,
        r#"circuit_breaker_transitions_total{from="open",to="half_open"} 1"#,
        r#"circuit_breaker_transitions_total{from="half_open",to="closed"} 1"#,
        r#"circuit_breaker_requests_total{dependency="pricing",operation="pricing",instance="0",state="closed",outcome="failure"} 3"#,
        r#"circuit_breaker_requests_total{dependency="pricing",operation="pricing",instance="0",state="half_open",outcome="success"} 1"#,
        r#"circuit_breaker_fallback_total{reason="server_error"} 3"#,
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
    let kinds: Vec<_> = demo.transitions().iter().map(|t| (t.from, t.to)).collect();
    assert_eq!(
        kinds,
        vec![
            (BreakerState::Closed, BreakerState::Open),
            (BreakerState::Open, BreakerState::HalfOpen),
            (BreakerState::HalfOpen, BreakerState::Closed)
        ]
    );
    demo.shutdown().await;
    let posted = fake.webhook.lock().unwrap().clone();
    assert_eq!(posted.len(), 3, "{posted:?}");
    assert_eq!(posted[0]["breaker"], "pricing");
    assert_eq!(posted[0]["dependency"], "pricing");
    assert_eq!(posted[0]["operation"], "pricing");
    assert_eq!(posted[0]["instance"], "0");
    assert_eq!(
        (posted[0]["from"].as_str(), posted[0]["to"].as_str()),
        (Some("closed"), Some("open"))
    );
    assert!(posted[0]["at_unix_ms"].as_u64().unwrap() > 1_600_000_000_000);
}
