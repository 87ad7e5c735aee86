//! A service faultline did not build, started as a command SUT whatever it offers for readiness: a gRPC service in
//! Python (grpcio) whose breaker is pybreaker's (tests/services/python_grpc). It has no HTTP health path, so the
//! run waits for its port to accept, or for the line it prints when it serves; loadgen drives it over gRPC while
//! its dependency browns out, and the breaker's transitions are read from the lines pybreaker's listener prints.
//!
//! grpcio and pybreaker are not vendored. Without them this test fails, saying what to install; it never skips:
//! `python3 -m venv VENV && VENV/bin/pip install grpcio pybreaker`, then `FAULTLINE_PYTHON=VENV/bin/python`
//! (default `python3`).

use crate::hardening;

use hardening::*;
use serde_json::Value;

const SCENARIO: &str = "tests/services/python_grpc/scenario.yaml";
const READY_BY_PORT: &str = "ready: { tcp: true }";

/// Runs the service's scenario with `ready` in place of its own readiness; returns result.json.
fn run_with(scratch: &Scratch, ready: &str) -> Value {
    let text = std::fs::read_to_string(SCENARIO).unwrap();
    assert!(
        text.contains(READY_BY_PORT),
        "{SCENARIO} no longer waits with `{READY_BY_PORT}`"
    );
    let path = scratch.write("scenario.yaml", &text.replacen(READY_BY_PORT, ready, 1));
    let report = scratch.path("report");
    let out = run_to_end(&path, &report);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{ready}\n{stdout}\n{stderr}");
    result_json(&report)
}

/// The start of phase `name`, in seconds from t = 0.
fn phase_start(result: &Value, name: &str) -> f64 {
    result["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no phase {name}: {}", result["phases"]))["start_s"]
        .as_f64()
        .unwrap()
}

/// The breaker was seen, from its log lines, opening during the brownout and closing after the recovery, each
/// within the scenario's bound; every expectation passed.
fn assert_breaker_read_from_the_log(result: &Value, ready: &str) {
    for v in result["verdicts"].as_array().unwrap() {
        assert_eq!(v["outcome"], "pass", "{ready}: {}", v["sentence"]);
    }
    let bound = |id: &str| {
        let v = result["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("no verdict {id}"));
        v["bound"].as_f64().unwrap()
    };
    let (brownout, recovered) = (
        phase_start(result, "brownout"),
        phase_start(result, "recovered"),
    );
    let observed = &result["breakers"]["pricing"]["observed"];
    assert_eq!(observed["source"], "log", "{ready}: {observed}");
    let transitions = observed["transitions"].as_array().unwrap();
    let at = |t: &Value| t["at"].as_f64().unwrap();
    let first_open = transitions
        .iter()
        .find(|t| t["to"] == "open")
        .unwrap_or_else(|| panic!("{ready}: never opened: {observed}"));
    assert!(
        at(first_open) > brownout && at(first_open) <= brownout + bound("opens"),
        "{ready}: opened at {} (brownout at {brownout}s): {observed}",
        at(first_open)
    );
    let closed_after_recovery = transitions
        .iter()
        .find(|t| t["to"] == "closed" && at(t) >= recovered)
        .unwrap_or_else(|| panic!("{ready}: never closed after the recovery: {observed}"));
    assert!(
        at(closed_after_recovery) <= recovered + bound("recovers"),
        "{ready}: closed at {} (recovered at {recovered}s): {observed}",
        at(closed_after_recovery)
    );
    assert!(
        transitions.iter().all(|t| t["source"] == "log"),
        "{ready}: {observed}"
    );
    // While it was open the service answered its fallback, which loadgen counted as such.
    let fallbacks = result["totals"]["outcomes"]["fallback"]
        .as_u64()
        .unwrap_or(0);
    assert!(fallbacks > 0, "{ready}: {}", result["totals"]);
}

#[test]
fn a_python_grpc_service_is_ready_by_its_port_or_its_log_line_and_its_pybreaker_is_read_from_its_output(
) {
    require_python_with_grpcio_and_pybreaker();
    for ready in [
        READY_BY_PORT,
        r"ready: { log: '^serving shop\.Prices on ' }",
    ] {
        let scratch = Scratch::new("own-service-grpc");
        let result = run_with(&scratch, ready);
        assert_breaker_read_from_the_log(&result, ready);
    }
}
