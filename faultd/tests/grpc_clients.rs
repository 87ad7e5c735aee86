//! grpcio (PyPI), an independent gRPC stack, against faultd's gRPC routes: each status with its message and
//! trailing metadata, deadlines, RST_STREAM, GOAWAY, the stream limit and matched entries as grpcio reports them
//! (`grpc_clients/test_grpcio.py`), then what faultd recorded of the same calls.
//!
//! grpcio is not vendored. Without it this test fails, saying what to install; it never skips:
//! `python3 -m venv VENV && VENV/bin/pip install grpcio`, then `FAULTLINE_PYTHON=VENV/bin/python` (default
//! `python3`).

use std::fmt::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use faultline_units::GrpcCode;
use tokio::process::Command;

/// The routes the script calls: one per non-OK status, and one per other check.
fn config() -> String {
    let mut yaml = String::from(
        "seed: 7\nhttp2: { max_concurrent_streams: 2 }\nroutes:\n\
         \x20 catalog: { path: /test.Catalog/GetProduct, grpc_response: { message: 0a03616263, metadata: { x-served-by: faultd }, trailers: { x-cache: miss } } }\n\
         \x20 echo: { path: /test.Echo/*, grpc_response: { echo: true } }\n\
         \x20 slow: { path: /test.Slow/Get, latency: { fixed: 3s } }\n\
         \x20 rst_internal: { path: /test.Rst/Internal, rst_stream: { share: 100%, code: INTERNAL_ERROR } }\n\
         \x20 rst_cancel: { path: /test.Rst/Cancel, rst_stream: { share: 100%, code: CANCEL } }\n\
         \x20 rst_calm: { path: /test.Rst/Calm, rst_stream: { share: 100%, code: ENHANCE_YOUR_CALM } }\n\
         \x20 rst_refused: { path: /test.Rst/Refused, rst_stream: { share: 100%, code: REFUSED_STREAM } }\n\
         \x20 graceful: { path: /test.GoAway/Graceful, goaway: { after: 3 } }\n\
         \x20 abrupt: { path: /test.GoAway/Abrupt, goaway: { after: 2, mode: abrupt } }\n\
         \x20 limited: { path: /test.Limited/Get, latency: { fixed: 200ms } }\n\
         \x20 watch: { path: /test.Prices/Watch, grpc_response: { message: '0801', stream: { messages: 5, interval: 20ms } } }\n\
         \x20 tenant: { path: /test.Tenant/Get, matched: [ { name: acme, match: { grpc_metadata: { x-tenant: '^acme$' } }, grpc_errors: [ { share: 100%, code: UNAVAILABLE, message: acme is down } ] }, { name: third, every: 3, grpc_errors: [ { share: 100%, code: RESOURCE_EXHAUSTED } ] } ] }\n\
         \x20 broken: { path: /test.Prices/Broken, grpc_response: { message: '0802', stream: { messages: 5, interval: 20ms } }, grpc_errors: [ { share: 100%, code: UNAVAILABLE, message: stream lost, after_messages: 2 } ] }\n",
    );
    for code in GrpcCode::all().filter(|c| *c != GrpcCode::OK) {
        let (name, n) = (code.name(), code.number());
        writeln!(
            yaml,
            "  code_{n}: {{ path: /test.Codes/{name}, grpc_errors: [ {{ share: 100%, code: {name}, \
             message: 'faultd says {name}: 100% sure \u{fc}', metadata: {{ x-code: '{n}', grpc-retry-pushback-ms: '250' }} }} ] }}"
        )
        .unwrap();
    }
    yaml
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_sees_every_status_deadline_reset_and_goaway_as_configured() {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import grpc"])
        .output()
        .await;
    assert!(
        matches!(&probe, Ok(o) if o.status.success()),
        "{python} cannot import grpcio ({}). scripts/test sets it up in .venv; or install it: \
         `python3 -m venv /path/to/venv && /path/to/venv/bin/pip install grpcio`, \
         then set FAULTLINE_PYTHON=/path/to/venv/bin/python",
        match &probe {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        }
    );
    let config = faultd::Config::from_yaml(&config(), "grpc_clients.yaml").unwrap();
    let f = faultd::start(config, faultd::Options::default())
        .await
        .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpc_clients/test_grpcio.py");
    let child = Command::new(&python)
        .arg(script)
        .env("FAULTD_ADDR", f.data_addr().to_string())
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("grpc_proxy")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {python}: {e}"));
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("the grpcio test did not finish within 90 s")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the grpcio test failed:\n{text}");
    assert!(
        text.contains("ok: all checks passed"),
        "the grpcio test stopped early:\n{text}"
    );

    let r = f.recording();
    for code in GrpcCode::all().filter(|c| *c != GrpcCode::OK) {
        let totals = &r.routes[&format!("code_{}", code.number())].totals;
        assert_eq!(
            totals.grpc_status.get(code.name()),
            Some(&1),
            "{code}: {totals:?}"
        );
    }
    assert_eq!(r.routes["catalog"].totals.grpc_status["OK"], 2);
    assert_eq!(r.routes["graceful"].totals.grpc_status["OK"], 7);
    assert_eq!(r.routes["watch"].totals.grpc_status["OK"], 1);
    assert_eq!(r.routes["broken"].totals.grpc_status["UNAVAILABLE"], 1);
    // Each entry counted the calls grpcio saw it take: the tenant's two, and two of the other six.
    let tenant = &r.routes["tenant"];
    let entry = |name: &str| (tenant.matched[name].matched, tenant.matched[name].taken);
    assert_eq!((entry("acme"), entry("third")), ((2, 2), (6, 2)));
    assert_eq!(tenant.totals.grpc_status["UNAVAILABLE"], 2);
    assert_eq!(tenant.totals.grpc_status["RESOURCE_EXHAUSTED"], 2);
    // The stream limit held: never more than 2 of the 6 concurrent calls at faultd.
    assert_eq!(r.routes["limited"].max_in_flight, 2);
    let http2: u64 = r.connections.iter().map(|c| c.http2_opened).sum();
    assert!(http2 >= 6, "{http2} HTTP/2 connections");
    f.shutdown().await;
}
