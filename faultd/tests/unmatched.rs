//! Calls that match no route: answered 404 by default, or forwarded to `unmatched.proxy` untouched by any fault;
//! counted as unmatched either way.

use crate::common;

use std::net::SocketAddr;

use common::{call, get};
use faultd::{Config, Options};

async fn start(yaml: &str) -> faultd::Faultd {
    let config = Config::from_yaml(yaml, "unmatched.yaml").unwrap();
    let options = Options {
        control: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        ..Options::default()
    };
    faultd::start(config, options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmatched_calls_are_answered_404_by_default_and_forwarded_when_a_proxy_is_given() {
    // The real dependency: answers everything with its own header.
    let real = start(
        "routes:\n  any: { path: /**, response: { status: 203, headers: { x-real: 'yes' } } }\n",
    )
    .await;
    let by_default =
        start("routes:\n  pricing: { path: /price/*, response: { status: 201 } }\n").await;
    let reply = get(by_default.data_addr(), "/stock/1").await;
    assert_eq!(reply.status(), Some(404));
    assert_eq!(by_default.recording().unmatched, 1);

    let forwarding = start(&format!(
        "routes:\n  pricing: {{ path: /price/*, errors: [ {{ share: 100%, status: 503 }} ] }}\n\
         unmatched: {{ proxy: 'http://{}' }}\n",
        real.data_addr()
    ))
    .await;
    // A route's call gets the fault; any other reaches the real dependency with its path and query.
    assert_eq!(
        get(forwarding.data_addr(), "/price/1").await.status(),
        Some(503)
    );
    let reply = call(forwarding.data_addr(), "POST", "/stock/7?x=1", &[], b"{}").await;
    assert_eq!(reply.status(), Some(203));
    assert_eq!(reply.header("x-real").as_deref(), Some("yes"));
    let r = forwarding.recording();
    assert_eq!(r.unmatched, 1);
    assert_eq!(r.unmatched_paths[0].method, "POST");
    assert_eq!(r.unmatched_paths[0].path, "/stock/7");
    assert_eq!(r.routes["pricing"].totals.arrivals, 1);
    assert_eq!(real.recording().routes["any"].totals.arrivals, 1);

    // An upstream that does not answer: 502 with the reason, still counted.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = start(&format!(
        "routes:\n  pricing: {{ path: /price/* }}\nunmatched: {{ proxy: 'http://127.0.0.1:{port}' }}\n"
    ))
    .await;
    let reply = get(gone.data_addr(), "/stock/1").await;
    assert_eq!(reply.status(), Some(502));
    assert!(
        String::from_utf8_lossy(reply.body()).contains("failed"),
        "{:?}",
        String::from_utf8_lossy(reply.body())
    );
    assert_eq!(gone.recording().unmatched, 1);
    for f in [real, by_default, forwarding, gone] {
        f.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmatched_proxy_to_faultds_own_listener_and_a_status_other_than_404_are_refused() {
    let f = start("routes:\n  pricing: { path: /price/* }\n").await;
    let control = f.control_addr().unwrap();
    let body = serde_json::json!({
        "routes": { "pricing": { "path": "/price/*" } },
        "unmatched": { "proxy": format!("http://{}", f.data_addr()) }
    })
    .to_string();
    let reply = call(control, "PUT", "/config", &[], body.as_bytes()).await;
    assert_eq!(reply.status(), Some(400));
    let v: serde_json::Value = serde_json::from_slice(reply.body()).unwrap();
    assert_eq!(v["field"], "unmatched.proxy", "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("faultd's own listener"),
        "{v}"
    );

    let e = Config::from_yaml("routes: {}\nunmatched: 500\n", "u.yaml").unwrap_err();
    assert_eq!(e.field, "unmatched");
    assert!(e.message.contains("give 404"), "{e}");
    let e = Config::from_yaml("routes: {}\nunmatched: { forward: x }\n", "u.yaml").unwrap_err();
    assert!(e.to_string().contains("404, or `{ proxy: URL }`"), "{e}");
    f.shutdown().await;
}
