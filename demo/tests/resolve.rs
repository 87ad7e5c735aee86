//! The demo calling its dependency by name through faultd's resolver: the name is asked for once a TTL with the
//! cache, once a call without it (`no_dns_cache`), and the calls reach faultd at the address it answered.
//!
//! Real time, under a second: 20 requests one after the other, on loopback.

use std::time::Duration;

use demo::{DemoConfig, Options};

const FAULTD: &str = "
bucket: 100ms
routes:
  pricing: { path: /price/*, latency: { fixed: 1ms } }
phases:
  - { name: healthy, at: 0s }
dns:
  names:
    pricing.internal: { a: [127.0.0.1], ttl: 30s }
";

const CALLS: u64 = 20;

/// Sends `CALLS` product requests to a demo calling `http://pricing.internal:PORT` through faultd's resolver, and
/// returns how many of them were answered 200 and how many queries faultd's resolver got for the name.
async fn run(mistakes: &str) -> (u64, u64) {
    let faultd = faultd::start(
        faultd::Config::from_yaml(FAULTD, "resolve-faultd.yaml").unwrap(),
        faultd::Options::default(),
    )
    .await
    .unwrap();
    faultd.start_schedule(tokio::time::Instant::now());
    let resolver = faultd.dns_addr().expect("faultd has a resolver");
    let yaml = format!(
        "dns: {{ resolver: \"{resolver}\" }}\nmistakes: [ {mistakes} ]\noperations: {{ pricing: {{}} }}\n"
    );
    let port = faultd.data_addr().port();
    let demo = demo::start(
        DemoConfig::from_yaml(&yaml, "resolve-demo.yaml").unwrap(),
        Options {
            dependency_url: format!("http://pricing.internal:{port}"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let client = demo::layers::client::http_client(None).unwrap();
    let mut ok = 0;
    for i in 0..CALLS {
        let r = client
            .get(format!("http://{}/product/{i}", demo.addr()))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .unwrap();
        let fallback = r.headers().get("x-fallback").is_some();
        if r.status() == 200 && !fallback {
            ok += 1;
        }
    }
    let queries = faultd
        .recording()
        .dns
        .expect("the resolver's recording")
        .names["pricing.internal"]
        .totals
        .total();
    demo.shutdown().await;
    faultd.shutdown().await;
    (ok, queries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_name_is_asked_once_a_ttl_and_every_call_reaches_the_address_it_resolved_to() {
    let (ok, queries) = run("").await;
    assert_eq!(ok, CALLS, "every call reached pricing at 127.0.0.1");
    assert_eq!(queries, 1, "one query for a 30 s TTL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_dns_cache_every_call_asks_the_resolver() {
    let (ok, queries) = run("no_dns_cache").await;
    assert_eq!(ok, CALLS);
    assert_eq!(queries, CALLS, "one query per call");
}
