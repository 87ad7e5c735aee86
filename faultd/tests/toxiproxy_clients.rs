//! The stock Toxiproxy clients, unmodified, against faultd's Toxiproxy API: `toxiproxy-python` (PyPI) and
//! `toxiproxy-node-client` (npm) each walk a proxy's life cycle and check the effects on real traffic.
//!
//! The clients are not vendored. Without them these tests fail, saying what to install; they never skip:
//! - Python: `python3 -m venv VENV && VENV/bin/pip install toxiproxy-python`, then `FAULTLINE_PYTHON=VENV/bin/python`
//!   (default `python3`).
//! - Node 18+: `npm ci --prefix faultd/tests/toxiproxy_clients` (or `npm install`); `FAULTLINE_NODE_MODULES` can
//!   point at another `node_modules` (default `faultd/tests/toxiproxy_clients/node_modules`).

use crate::tcp;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

pub(crate) fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/toxiproxy_clients")
}

/// Runs `command` with faultd's API and an echo upstream in its environment; fails with its output unless it
/// exits 0 within 60 s.
async fn run_client(mut command: Command, what: &str) {
    let echo = tcp::Echo::start().await;
    let f = tcp::faultd(7).await;
    let api = f.toxiproxy_addr().unwrap();
    command
        .env("FAULTD_TOXIPROXY", api.to_string())
        .env("ECHO_UPSTREAM", echo.addr.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the {what} test: {e}"));
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the {what} test did not finish within 60 s"))
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the {what} test failed:\n{text}");
    assert!(
        text.contains("ok: every proxy deleted"),
        "the {what} test stopped early:\n{text}"
    );
    f.shutdown().await;
}

/// The Python that has toxiproxy-python (`FAULTLINE_PYTHON`, default `python3`); fails saying how to install it
/// otherwise.
pub(crate) async fn python_with_the_client() -> String {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import toxiproxy.server"])
        .output()
        .await;
    let ready = matches!(&probe, Ok(o) if o.status.success());
    assert!(
        ready,
        "{python} cannot import the toxiproxy-python client ({}). scripts/test sets it up in .venv; or install it: \
         `python3 -m venv /path/to/venv && /path/to/venv/bin/pip install toxiproxy-python`, \
         then set FAULTLINE_PYTHON=/path/to/venv/bin/python",
        match &probe {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        }
    );
    python
}

#[tokio::test]
async fn toxiproxy_python_walks_the_life_cycle() {
    let python = python_with_the_client().await;
    let mut command = Command::new(&python);
    command.arg(scripts().join("test_python_client.py"));
    run_client(command, "toxiproxy-python").await;
}

#[tokio::test]
async fn toxiproxy_node_client_walks_the_life_cycle() {
    let modules = std::env::var("FAULTLINE_NODE_MODULES")
        .map(PathBuf::from)
        .unwrap_or_else(|_| scripts().join("node_modules"));
    assert!(
        modules.join("toxiproxy-node-client/package.json").is_file(),
        "toxiproxy-node-client is not installed in {}. scripts/test installs it; or install it: \
         `npm ci --prefix faultd/tests/toxiproxy_clients` (Node 18 or later), \
         or set FAULTLINE_NODE_MODULES to a node_modules that holds it",
        modules.display()
    );
    let mut command = Command::new("node");
    command
        .arg(scripts().join("test_node_client.js"))
        .env("NODE_PATH", &modules);
    run_client(command, "toxiproxy-node-client").await;
}
