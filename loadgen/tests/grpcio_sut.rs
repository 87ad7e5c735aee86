//! loadgen driving a gRPC service it did not write: a small grpcio server (`grpcio_sut/server.py`, generic handlers,
//! no protoc) that calls faultd over gRPC and passes the dependency's answer or status through. loadgen's outcome
//! classes must agree call for call with what the server logged it answered, and with what faultd answered it.
//!
//! grpcio is not vendored. Without it this test fails, saying what to install; it never skips:
//! `python3 -m venv VENV && VENV/bin/pip install grpcio`, then `FAULTLINE_PYTHON=VENV/bin/python` (default
//! `python3`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use loadgen::{start, LoadSpec, Measure, Outcome, RequestTemplate, RunOptions};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

/// The grpcio server, killed when the test ends however it ends.
struct Server {
    child: Child,
    lines: tokio::io::Lines<BufReader<ChildStdout>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Server {
    async fn start(faultd: std::net::SocketAddr) -> (Server, u16) {
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
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpcio_sut/server.py");
        let mut child = Command::new(&python)
            .arg(script)
            .env("FAULTD_ADDR", faultd.to_string())
            .env_remove("http_proxy")
            .env_remove("https_proxy")
            .env_remove("grpc_proxy")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {python}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let mut server = Server {
            child,
            lines: BufReader::new(stdout).lines(),
        };
        let first = tokio::time::timeout(Duration::from_secs(20), server.lines.next_line())
            .await
            .expect("the grpcio server did not start within 20 s")
            .unwrap()
            .expect("the grpcio server exited before listening");
        let port = first
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
        (server, port)
    }

    /// Closes its stdin (it stops) and returns how many calls it logged per status.
    async fn stop(mut self) -> BTreeMap<String, u64> {
        let mut stdin = self.child.stdin.take().unwrap();
        stdin.shutdown().await.unwrap();
        drop(stdin);
        let mut logged = BTreeMap::new();
        let read = async {
            while let Some(line) = self.lines.next_line().await.unwrap() {
                if let Some(status) = line.strip_prefix("call ") {
                    *logged.entry(status.to_string()).or_insert(0) += 1;
                } else if line == "stopped" {
                    return;
                }
            }
            panic!("the grpcio server ended without saying it stopped");
        };
        tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .expect("the grpcio server did not stop within 20 s");
        logged
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_agree_with_what_a_grpcio_server_logged_and_its_dependency_answered() {
    let config = faultd::Config::from_yaml(
        "seed: 5\nroutes:\n  product: { path: /shop.Catalog/*, latency: { fixed: 20ms }, grpc_response: { echo: true }, \
         grpc_errors: [ { share: 20%, code: UNAVAILABLE }, { share: 20%, code: INVALID_ARGUMENT }, \
         { share: 10%, code: DEADLINE_EXCEEDED } ] }\n",
        "grpcio_sut.yaml",
    )
    .unwrap();
    let f = faultd::start(config, faultd::Options::default())
        .await
        .unwrap();
    let (server, port) = Server::start(f.data_addr()).await;

    let mut spec = LoadSpec::constant("100/s".parse().unwrap(), "/");
    spec.requests = vec![RequestTemplate {
        grpc: Some("/shop.Catalog/GetProduct".into()),
        message: Some("0801".into()),
        ..Default::default()
    }];
    spec.timeout = "3s".parse().unwrap();
    let options = RunOptions::new(format!("http://127.0.0.1:{port}"), Duration::from_secs(2));
    let r = start(spec, options, Instant::now()).unwrap().finish().await;
    let logged = server.stop().await;
    let n = |code: &str| logged.get(code).copied().unwrap_or(0);

    assert!(r.conservation.holds, "{:?}", r.conservation);
    assert_eq!(r.intended, 200);
    assert_eq!(r.still_in_flight + r.totals.dropped, 0, "{:?}", r.totals);
    // Call for call: each status the server answered is one outcome in its class.
    assert_eq!(r.totals.ok, n("OK"), "{logged:?} {:?}", r.totals);
    assert_eq!(r.totals.server_error, n("UNAVAILABLE"), "{logged:?}");
    assert_eq!(r.totals.client_error, n("INVALID_ARGUMENT"), "{logged:?}");
    assert_eq!(r.totals.timeout, n("DEADLINE_EXCEEDED"), "{logged:?}");
    assert_eq!(logged.values().sum::<u64>(), 200, "{logged:?}");
    assert_eq!(r.totals.connect_error + r.totals.fallback, 0);
    // And the server passed through what faultd answered.
    assert_eq!(
        f.recording().routes["product"].totals.grpc_status,
        logged,
        "faultd's statuses and the server's log"
    );
    assert!(n("OK") > 60 && n("UNAVAILABLE") > 20 && n("INVALID_ARGUMENT") > 20);
    // Latency: every call waited for faultd's 20 ms, and none for anything like the 3 s client timeout.
    let answered = r.histogram(Measure::Corrected, None, |_| true);
    assert!(answered.min() >= 20_000_000, "{} ns", answered.min());
    assert!(answered.max() < 1_000_000_000, "{} ns", answered.max());
    let ok = r.histogram(Measure::Corrected, None, |o| o == Outcome::Ok);
    assert_eq!(ok.len(), n("OK"));
    f.shutdown().await;
}
