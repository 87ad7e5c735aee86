//! `faultline sweep` as a user runs it: the slow-dependency scenario swept over the demo's timeout, where the
//! recommended 250 ms holds every expectation and 5 s (the `no_timeout` mistake's effect) fills the pool; a service
//! faultline did not build (tests/services/node_express, opossum's breaker) swept over its breaker's timeout through
//! `{param.timeout.ms}`; the usage errors that stop a sweep before anything runs; and Ctrl-C in the middle of a
//! sweep, which keeps the table of the runs done.
//!
//! Timing: every wait is a poll with a deadline on something the test observes (a file a SUT writes as it starts,
//! the process's exit), never a fixed sleep.

use crate::hardening;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use hardening::{bin, signal, wait_until, Running, Scratch};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `faultline sweep SCENARIO --vary VARY --time-scale 0.5 --report-dir DIR` to its end.
fn sweep_at_half_time(scenario: &str, vary: &str, dir: &Path) -> Output {
    sweep(&[
        scenario,
        "--vary",
        vary,
        "--time-scale",
        "0.5",
        "--report-dir",
        dir.to_str().unwrap(),
    ])
}

/// `faultline sweep ARGS` to its end, with no terminal on stdin.
fn sweep(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_faultline"))
        .arg("sweep")
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text_of(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn sweep_json(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("sweep.json"))
        .unwrap_or_else(|e| panic!("{}/sweep.json: {e}", dir.display()));
    serde_json::from_str(&text).unwrap()
}

/// The cell of expectation `key` in run `row`.
fn cell<'a>(table: &'a Value, row: usize, key: &str) -> &'a Value {
    table["runs"][row]["cells"]
        .as_array()
        .and_then(|cells| cells.iter().find(|c| c["expectation"] == key))
        .unwrap_or_else(|| panic!("no cell {key} in run {row}: {table}"))
}

#[test]
fn a_sweep_of_the_demo_timeout_passes_the_recommended_250ms_and_fails_the_pool_at_5s() {
    let scratch = Scratch::new("sweep-slow-dependency");
    let dir = scratch.path("sweep");
    let started = Instant::now();
    let out = sweep_at_half_time("scenarios/slow-dependency.yaml", "timeout=250ms,5s", &dir);
    let printed = text_of(&out);
    eprintln!(
        "slow-dependency sweep took {:?}\n{printed}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(0), "{printed}");
    assert!(
        printed.contains(
            "sweep of slow-dependency over timeout: 2 runs, at least 1m 30s of real time"
        ),
        "{printed}"
    );
    let table = sweep_json(&dir);
    assert_eq!(table["planned"], 2);
    assert_eq!(table["interrupted"], false);
    assert_eq!(
        table["parameters"][0]["reaches"],
        "sut.demo.operations.pricing.timeout"
    );
    let runs = table["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["label"], "timeout=250ms");
    assert_eq!(runs[0]["status"], "passed", "{table}");
    for c in runs[0]["cells"].as_array().unwrap() {
        assert_eq!(c["outcome"], "pass", "{}", c["sentence"]);
    }
    assert_eq!(runs[1]["label"], "timeout=5s");
    assert_eq!(runs[1]["status"], "failed");
    let pool = cell(&table, 1, "pool");
    assert_eq!(pool["outcome"], "fail", "{}", pool["sentence"]);
    assert!(
        pool["margin"].as_f64().is_some_and(|m| m <= 0.0),
        "a shortfall: {pool}"
    );
    let room = cell(&table, 0, "pool")["margin"].as_f64().unwrap();
    assert!(room > 0.0, "the recommended pool has room: {room}");
    for (i, label) in ["01-timeout=250ms", "02-timeout=5s"].iter().enumerate() {
        assert!(
            dir.join(label).join("result.json").is_file(),
            "run {i}'s report in {label}"
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("passed every expectation: timeout=250ms"),
        "{stdout}"
    );
    let md = std::fs::read_to_string(dir.join("sweep.md")).unwrap();
    assert!(md.contains("| `timeout=5s` | failed |"), "{md}");
    let html = std::fs::read_to_string(dir.join("sweep.html")).unwrap();
    assert!(
        html.contains("<a href=\"02-timeout=5s/report.html\">"),
        "{html}"
    );
}

fn node_service() -> PathBuf {
    let dir = root().join("tests/services/node_express");
    assert!(
        dir.join("node_modules/opossum").is_dir(),
        "the service's packages are missing: npm ci --prefix tests/services/node_express (Node 18 or later)"
    );
    dir
}

/// The Express service with opossum's breaker as a command SUT, its breaker's timeout the sweep's parameter.
/// Pricing answers in 200 ms (100 ms at a time scale of 0.5).
fn node_scenario(scratch: &Scratch) -> PathBuf {
    let server = node_service().join("server.js");
    scratch.write(
        "node.yaml",
        &format!(
            r#"name: node-breaker-timeout
duration: 4s
seed: 11
dependency:
  routes:
    pricing: {{ path: /price/*, latency: {{ fixed: 200ms }} }}
sut:
  command: [ node, "{}" ]
  env:
    PORT: "{{sut.port}}"
    PRICING_URL: "{{faultd.url}}"
    BREAKER_TIMEOUT_MS: "{{param.timeout.ms}}"
  url: http://127.0.0.1:{{sut.port}}
  ready: /health
  ready_timeout: 20s
load:
  rate: 50/s
  timeout: 2s
  requests: [ {{ get: "/quote/{{rand:1..100}}" }} ]
  fallback_header: x-fallback
expect:
  # Answered by pricing, not by opossum's fallback: the breaker's timeout must outlast pricing's latency.
  - {{ id: answered, sut_share: fallback, below: 10% }}
"#,
            server.display()
        ),
    )
}

#[test]
fn a_command_sut_reads_each_value_through_its_placeholder_scaled_with_the_run() {
    let scratch = Scratch::new("sweep-node");
    let dir = scratch.path("sweep");
    let scenario = node_scenario(&scratch);
    let started = Instant::now();
    // At a time scale of 0.5 pricing answers in 100 ms, and {param.timeout.ms} gives the service 60 and 300: the
    // first times every call out (unscaled, 120 ms would have outlasted pricing), the second none.
    let out = sweep_at_half_time(scenario.to_str().unwrap(), "timeout=120ms,600ms", &dir);
    let printed = text_of(&out);
    eprintln!("node sweep took {:?}\n{printed}", started.elapsed());
    assert_eq!(out.status.code(), Some(0), "{printed}");
    let table = sweep_json(&dir);
    assert_eq!(table["parameters"][0]["reaches"], "{param.timeout}");
    let short = cell(&table, 0, "answered");
    assert_eq!(short["outcome"], "fail", "{}", short["sentence"]);
    assert!(
        short["measured"].as_f64().is_some_and(|share| share > 0.9),
        "a 60 ms timeout against 100 ms answers falls back on nearly every call: {short}"
    );
    let long = cell(&table, 1, "answered");
    assert_eq!(long["outcome"], "pass", "{}", long["sentence"]);
    assert!(long["margin"].as_f64().is_some_and(|m| m > 0.05), "{long}");
    assert_eq!(table["runs"][1]["status"], "passed");
}

#[test]
fn an_unknown_field_an_unread_parameter_or_too_many_runs_unconfirmed_stop_the_sweep_before_it_runs()
{
    let scratch = Scratch::new("sweep-errors");
    let dir = scratch.path("sweep");
    let report = dir.to_str().unwrap();
    let node = node_scenario(&scratch);
    let cases: [(Vec<&str>, &str); 4] = [
        (
            vec!["scenarios/slow-dependency.yaml", "--vary", "tmeout=1s"],
            "--vary tmeout: the demo's operations have no field `tmeout`; vary one of: ",
        ),
        (
            vec!["scenarios/slow-dependency.yaml", "--vary", "timeout=fast"],
            "the combination timeout=fast is refused: sut.demo.operations.pricing.timeout: ",
        ),
        (
            vec![node.to_str().unwrap(), "--vary", "timeout=1s", "--vary", "retries=1,2"],
            "--vary retries: the SUT never reads this parameter",
        ),
        (
            vec![
                "scenarios/slow-dependency.yaml",
                "--vary",
                "timeout=100ms,200ms,300ms,400ms,500ms,600ms,700ms",
                "--vary",
                "open_for=5s,10s,30s",
            ],
            "a sweep of 21 runs (more than 20) is confirmed first, and there is no terminal to ask on: pass --yes",
        ),
    ];
    for (args, said) in cases {
        let mut args = args;
        args.extend(["--report-dir", report]);
        let started = Instant::now();
        let out = sweep(&args);
        let printed = text_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {printed}");
        assert!(printed.contains(said), "{args:?}: {printed}");
        assert!(!dir.exists(), "{args:?}: nothing ran");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{args:?}: refused at once"
        );
    }
}

#[test]
fn ctrl_c_in_the_middle_of_a_sweep_keeps_the_runs_done_and_marks_the_one_it_stopped() {
    let scratch = Scratch::new("sweep-interrupted");
    let dir = scratch.path("sweep");
    // The SUT is faultd serving /work/*; each run's SUT notes it started in a file named after the run's value.
    scratch.write(
        "sut.yaml",
        "routes:\n  health: { path: /health }\n  work: { path: /work/*, latency: { fixed: 5ms } }\n",
    );
    let script = format!(
        "echo $$ > {dir}/started-{{param.run}}; exec {faultd} --config {dir}/sut.yaml --listen 127.0.0.1:{{sut.port}}",
        dir = scratch.0.display(),
        faultd = bin("faultd").display()
    );
    let scenario = scratch.write(
        "scenario.yaml",
        &format!(
            r#"name: interrupted-sweep
duration: 3s
seed: 3
dependency:
  routes:
    pricing: {{ path: /price/*, latency: {{ fixed: 5ms }} }}
sut:
  command: [ /bin/sh, -c, "{script}" ]
  url: http://127.0.0.1:{{sut.port}}
  ready: /health
  ready_timeout: 20s
load:
  rate: 50/s
  requests: [ {{ get: "/work/1" }} ]
expect:
  - {{ id: fast, sut_latency: p99, below: 1s }}
"#
        ),
    );
    let out = std::fs::File::create(scratch.path("sweep.stdout")).unwrap();
    let err = std::fs::File::create(scratch.path("sweep.stderr")).unwrap();
    let mut running = Running(
        Command::new(env!("CARGO_BIN_EXE_faultline"))
            .args(["sweep", scenario.to_str().unwrap(), "--vary", "run=a,b,c"])
            .arg("--report-dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap(),
    );
    // The second run's SUT has started: that run hears signals already, and the first run's table is written.
    wait_until(Duration::from_secs(60), "the second run's SUT", || {
        scratch.path("started-b").exists()
    });
    assert_eq!(sweep_json(&dir)["runs"].as_array().map(Vec::len), Some(1));
    signal(running.pid(), libc::SIGINT);
    let code = running.wait_for_exit(Duration::from_secs(30));
    let stderr = std::fs::read_to_string(scratch.path("sweep.stderr")).unwrap_or_default();
    assert_eq!(code, Some(130), "{stderr}");
    let table = sweep_json(&dir);
    assert_eq!(table["interrupted"], true, "{table}");
    assert_eq!(table["planned"], 3);
    let runs = table["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{table}");
    assert_eq!(runs[0]["status"], "passed", "{table}");
    assert_eq!(runs[1]["label"], "run=b");
    assert_eq!(runs[1]["status"], "interrupted", "{table}");
    assert_eq!(runs[1]["exit_code"], 130);
    assert!(!scratch.path("started-c").exists(), "no third run");
    let stdout = std::fs::read_to_string(scratch.path("sweep.stdout")).unwrap_or_default();
    assert!(
        stdout.contains("stopped after 2 of 3 runs (interrupted)"),
        "{stdout}"
    );
    let md = std::fs::read_to_string(dir.join("sweep.md")).unwrap();
    assert!(md.contains("| `run=b` | interrupted (exit 130) |"), "{md}");
}
