//! Matched entries end to end: faults that only the calls carrying a method, a header or gRPC metadata get, and
//! those a trigger picks (`every`, `calls`, `first` per connection), seen by curl over HTTP/1.1 and HTTP/2 and by
//! the h2 crate's client as gRPC, then what faultd recorded per entry.

use crate::common;

use common::http2::{connect, exchange, framed, get, grpc};
use faultd::recorder::MatchCounts;
use faultd::{Config, Options};

const VERSIONS: [&str; 2] = ["--http1.1", "--http2-prior-knowledge"];

async fn start(yaml: &str) -> faultd::Faultd {
    let config = Config::from_yaml(yaml, "matched.yaml").unwrap();
    faultd::start(config, Options::default()).await.unwrap()
}

/// `n` calls to `url` with curl in order, the statuses they got: over HTTP/1.1 one run of curl (one connection);
/// over HTTP/2 one run per call, since curl 7.88 fails a second request on a reused prior-knowledge connection
/// with "Error in the HTTP2 framing layer" whatever the server.
async fn calls(version: &str, args: &[&str], url: &str, n: usize) -> Vec<u16> {
    let mut with = vec![version];
    with.extend_from_slice(args);
    if version == "--http1.1" {
        return curl(&with, &vec![url.to_string(); n]).await;
    }
    let mut seen = Vec::new();
    for _ in 0..n {
        seen.extend(curl(&with, &[url.to_string()]).await);
    }
    seen
}

/// One curl run (one connection, its calls in order) of `urls` with `args`: the status of each call.
async fn curl(args: &[&str], urls: &[String]) -> Vec<u16> {
    let mut command = tokio::process::Command::new("curl");
    command.args(["-sS", "--max-time", "10", "-w", "%{http_code}\\n"]);
    command.args(args);
    for url in urls {
        command.args(["-o", "/dev/null", url]);
    }
    let out = command
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot start curl: {e} (apt-get install -y curl)"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "curl {args:?}: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines().map(|l| l.parse().unwrap()).collect()
}

fn counts(f: &faultd::Faultd, route: &str, entry: &str) -> (u64, u64) {
    let MatchCounts { matched, taken } = f.recording().routes[route].matched[entry];
    (matched, taken)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_only_fault_fails_posts_and_a_header_fault_only_its_tenant_over_either_version() {
    for version in VERSIONS {
        let f = start(
            "routes:\n  orders: { path: /orders, matched: [ { name: posts, match: { method: POST }, errors: [ { share: 100%, status: 503 } ] } ] }\n  \
             tenants: { path: /tenants, matched: [ { name: acme, match: { header: { x-tenant: '^acme$' } }, errors: [ { share: 100%, status: 429 } ] } ] }\n",
        )
        .await;
        let (orders, tenants) = (
            format!("http://{}/orders", f.data_addr()),
            format!("http://{}/tenants", f.data_addr()),
        );
        let post = ["-X", "POST"];
        assert_eq!(
            calls(version, &post, &orders, 2).await,
            [503, 503],
            "{version}"
        );
        assert_eq!(
            calls(version, &[], &orders, 2).await,
            [200, 200],
            "{version}"
        );
        assert_eq!(counts(&f, "orders", "posts"), (2, 2));
        let tenant = |t: &'static str| ["-H", t];
        assert_eq!(
            calls(version, &tenant("x-tenant: acme"), &tenants, 2).await,
            [429, 429]
        );
        assert_eq!(
            calls(version, &tenant("x-tenant: acme-2"), &tenants, 2).await,
            [200, 200]
        );
        assert_eq!(calls(version, &[], &tenants, 2).await, [200, 200]);
        assert_eq!(counts(&f, "tenants", "acme"), (2, 2));
        f.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_third_call_and_the_first_two_calls_fail_exactly_over_either_version() {
    for version in VERSIONS {
        let f = start(
            "routes:\n  every: { path: /every, matched: [ { every: 3, errors: [ { share: 100%, status: 503 } ] } ] }\n  \
             listed: { path: /listed, matched: [ { calls: [1, 2], errors: [ { share: 100%, status: 503 } ] } ] }\n",
        )
        .await;
        let url = |path: &str| format!("http://{}{path}", f.data_addr());
        let seen = calls(version, &[], &url("/every"), 10).await;
        let failed: Vec<usize> = (1..=10).filter(|n| seen[n - 1] == 503).collect();
        assert_eq!(failed, [3, 6, 9], "{version}: {seen:?}");
        assert!(seen.iter().all(|s| [200, 503].contains(s)), "{seen:?}");
        assert_eq!(counts(&f, "every", "matched[0]"), (10, 3));
        // Counted per route: a second connection goes on from the first one's count.
        assert_eq!(
            calls(version, &[], &url("/listed"), 3).await,
            [503, 503, 200]
        );
        assert_eq!(calls(version, &[], &url("/listed"), 2).await, [200, 200]);
        assert_eq!(counts(&f, "listed", "matched[0]"), (5, 2));
        f.shutdown().await;
    }
}

const FIRST_ONE: &str =
    "routes:\n  fresh: { path: /fresh, matched: [ { first: 1, errors: [ { share: 100%, status: 503 } ] } ] }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_one_per_connection_fails_the_first_call_of_each_new_http1_connection() {
    let f = start(FIRST_ONE).await;
    let urls = vec![format!("http://{}/fresh", f.data_addr()); 3];
    for _ in 0..3 {
        assert_eq!(curl(&["--http1.1"], &urls).await, [503, 200, 200]);
    }
    assert_eq!(counts(&f, "fresh", "matched[0]"), (9, 3));
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_one_per_connection_fails_the_first_stream_of_each_new_http2_connection() {
    let f = start(FIRST_ONE).await;
    let addr = f.data_addr();
    // Three streams on each connection, with the h2 crate's client: curl 7.88 cannot reuse one (see `calls`).
    for _ in 0..3 {
        let client = connect(addr).await;
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(
                exchange(&client, get(addr, "/fresh"), b"")
                    .await
                    .unwrap()
                    .status,
            );
        }
        assert_eq!(seen, [503, 200, 200]);
    }
    assert_eq!(counts(&f, "fresh", "matched[0]"), (9, 3));
    // One curl run over HTTP/2 is one new connection: its call is the first.
    assert_eq!(
        curl(
            &["--http2-prior-knowledge"],
            &[format!("http://{addr}/fresh")]
        )
        .await,
        [503]
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_metadata_picks_the_calls_that_get_the_status_and_triggers_count_grpc_calls() {
    let f = start(
        "routes:\n  cart:\n    path: /shop.Cart/*\n    matched:\n      \
         - { name: acme, match: { grpc_metadata: { x-tenant: '^acme$' } }, grpc_errors: [ { share: 100%, code: UNAVAILABLE } ] }\n      \
         - { name: every-other, match: { path: 'Checkout$' }, every: 2, grpc_errors: [ { share: 100%, code: RESOURCE_EXHAUSTED } ] }\n      \
         - { name: first-two, match: { path: 'Refund$' }, calls: [1, 2], grpc_errors: [ { share: 100%, code: ABORTED } ] }\n",
    )
    .await;
    let addr = f.data_addr();
    let client = connect(addr).await;
    let status = |method: &'static str, tenant: Option<&'static str>| {
        let client = client.clone();
        async move {
            let mut request = grpc(addr, method, None);
            if let Some(t) = tenant {
                request.headers_mut().insert("x-tenant", t.parse().unwrap());
            }
            let a = exchange(&client, request, &framed(b"\x08\x01"))
                .await
                .unwrap();
            a.grpc_status().unwrap().to_string()
        }
    };
    for _ in 0..3 {
        assert_eq!(status("/shop.Cart/Add", Some("acme")).await, "14");
        assert_eq!(status("/shop.Cart/Add", Some("globex")).await, "0");
    }
    let mut checkout = Vec::new();
    let mut refund = Vec::new();
    for _ in 0..4 {
        checkout.push(status("/shop.Cart/Checkout", None).await);
        refund.push(status("/shop.Cart/Refund", None).await);
    }
    assert_eq!(checkout, ["0", "8", "0", "8"]);
    assert_eq!(refund, ["10", "10", "0", "0"]);
    // The same header on a call that is not gRPC is no metadata.
    let plain = curl(
        &[
            "--http2-prior-knowledge",
            "-X",
            "POST",
            "-H",
            "x-tenant: acme",
        ],
        &[format!("http://{addr}/shop.Cart/Add")],
    )
    .await;
    assert_eq!(plain, [200]);
    let r = f.recording();
    let cart = &r.routes["cart"];
    let entry = |name: &str| (cart.matched[name].matched, cart.matched[name].taken);
    assert_eq!(entry("acme"), (3, 3));
    assert_eq!(entry("every-other"), (4, 2));
    assert_eq!(entry("first-two"), (4, 2));
    assert_eq!(cart.totals.grpc_status["UNAVAILABLE"], 3);
    assert_eq!(cart.totals.grpc_status["RESOURCE_EXHAUSTED"], 2);
    assert_eq!(cart.totals.grpc_status["ABORTED"], 2);
    assert_eq!(cart.totals.grpc_status["OK"], 7);
    f.shutdown().await;
}
