//! Fuzzes the bodies of faultd's Toxiproxy API POST endpoints through the API's own router (`toxiproxy::router`),
//! so each body meets the same reading (`{}` for an empty body, path-naming errors) and the same validation
//! (`TcpRoutes`) as on the wire. The first byte picks the endpoint, the rest is the body:
//! 0 `POST /proxies`, 1 `POST /populate`, 2 `POST /proxies/p`, 3 `POST /proxies/p/toxics`,
//! 4 `POST /proxies/p/toxics/t`. Before each input the routes hold one proxy `p` (listening on a free loopback
//! port, upstream a loopback port) with one latency toxic `t`; after it they are cleared.
//!
//! Checked: no panic; every answer is a success or a 4xx in Toxiproxy's error shape (`{"error": <non-empty
//! text>, "status": <the HTTP status>}`); a 5xx is a failure.
//!
//! Not for the data plane: nothing connects to the proxies.

#![no_main]

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use faultd::tcp::{ProxySpec, TcpRoutes, TcpSettings, ToxicSpec};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

const ENDPOINTS: [&str; 5] = [
    "/proxies",
    "/populate",
    "/proxies/p",
    "/proxies/p/toxics",
    "/proxies/p/toxics/t",
];

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let path = ENDPOINTS[usize::from(pick) % ENDPOINTS.len()];
    runtime().block_on(async {
        let routes = Arc::new(TcpRoutes::new(TcpSettings::default()));
        routes
            .create(ProxySpec::new("p", "127.0.0.1:0", "127.0.0.1:9"))
            .expect("the seed proxy is valid");
        let toxic: ToxicSpec = serde_json::from_str(
            r#"{"name": "t", "type": "latency", "attributes": {"latency": 100, "jitter": 10}}"#,
        )
        .expect("the seed toxic parses");
        routes
            .add_toxic("p", toxic)
            .expect("the seed toxic is valid");
        let request = Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body.to_vec()))
            .expect("a request");
        let answer = faultd::toxiproxy::router(routes.clone())
            .oneshot(request)
            .await
            .expect("the router answers");
        let status = answer.status();
        assert!(!status.is_server_error(), "{path}: {status}");
        if status.is_client_error() {
            let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20)
                .await
                .expect("the error body is read");
            let error: serde_json::Value =
                serde_json::from_slice(&bytes).expect("the error is JSON");
            assert_eq!(error["status"], status.as_u16(), "{error}");
            assert!(
                error["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{error}"
            );
        }
        routes.clear();
        // Let the stopped routes' tasks run to their end, so their listening sockets are closed before the next
        // input binds again.
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    });
});
