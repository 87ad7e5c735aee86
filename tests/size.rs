//! `faultline size`: seed 000's check-yourself answers from numbers on the command line, the same figures from an
//! access log and from a recorded run, the low-traffic floor's warning, the scenario `-o` writes (for the demo and
//! for a command), and a record sized into a scenario that proves its own recommended settings.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const LOG_FORMAT: &str = r#"$remote_addr - [$time_local] $msec "$request" $status $request_time"#;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("faultline-size-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn faultline(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(root())
        .args(args)
        .output()
        .expect("faultline runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `faultline size ARGS --json`, parsed.
fn sized(args: &[&str]) -> Value {
    let mut all = vec!["size"];
    all.extend_from_slice(args);
    all.push("--json");
    let (code, stdout, stderr) = faultline(&all);
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// `faultline ARGS` exits 2 and says `said` on standard error.
fn refused(args: &[&str], said: &str) {
    let (code, _, stderr) = faultline(args);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(said), "{stderr}");
}

fn close(v: &Value, expected: f64, tolerance: f64, what: &str) {
    let got = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {v}"));
    assert!(
        (got - expected).abs() <= expected * tolerance,
        "{what}: {got}, expected {expected} within {}%",
        tolerance * 100.0
    );
}

/// Seed 000's first check: 400 rps, a 60 ms p99, a 200-connection pool, a dependency degraded to a flat 3 s. Within
/// `tolerance` of the seed's answers: 1,200 in flight without a timeout, the pool full after 0.5 s, a 200 ms
/// timeout, 80 in flight with it.
fn check_yourself(s: &Value, tolerance: f64) {
    assert_eq!(s["timeout"]["seconds"], 0.2, "{s}");
    close(
        &s["in_flight"]["without_timeout"],
        1200.0,
        tolerance,
        "in flight without a timeout",
    );
    close(
        &s["in_flight"]["pool_full_after_s"],
        0.5,
        tolerance,
        "pool full after",
    );
    close(
        &s["in_flight"]["with_timeout"],
        80.0,
        tolerance,
        "in flight with the timeout",
    );
    assert_eq!(s["in_flight"]["pool"], 200);
}

#[test]
fn numbers_on_the_command_line_give_the_seeds_check_yourself_answers() {
    let s = sized(&[
        "--p99",
        "60ms",
        "--rate",
        "400/s",
        "--pool",
        "200",
        "--degraded",
        "3s",
    ]);
    check_yourself(&s, 0.0);
    assert_eq!(s["numbers"]["p99_s"]["from"], "given");
    // Seed 000's worked example: 500 rps, an 80 ms p99, a 30 s open window: 250 ms, 15,000 failed fast per trip.
    let s = sized(&["--p99", "80ms", "--rate", "500/s", "--degraded", "2s"]);
    assert_eq!(s["timeout"]["seconds"], 0.25);
    assert_eq!(s["in_flight"]["without_timeout"], 1000.0);
    assert_eq!(s["open_window"]["failed_fast_per_trip"], 15000.0);
    assert_eq!(s["breaker"]["opens_after_s"], 5.25);
    // The text carries the same numbers, each with its reason.
    let (code, text, stderr) = faultline(&[
        "size",
        "--p99",
        "60ms",
        "--rate",
        "400/s",
        "--pool",
        "200",
        "--degraded",
        "3s",
    ]);
    assert_eq!(code, 0, "{stderr}");
    // Lines are wrapped for a terminal; the words are what is said.
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        "Timeout: 200ms",
        "3 x the healthy p99 of 60ms is 180ms, rounded up to 200ms",
        "400/s x 3s = 1,200 against the pool of 200",
        "the pool is full 0.5 s into the degradation",
        "400/s x 200ms = 80 at most",
        "4,000 calls per window: the floor is met",
        "12,000 requests fail fast per trip",
    ] {
        assert!(text.contains(said), "missing {said:?} in:\n{text}");
    }
}

#[test]
fn a_floor_per_instance_never_met_is_a_warning_with_the_seeds_three_options() {
    let s = sized(&["--rate", "6/s", "--instances", "60", "--p99", "100ms"]);
    assert_eq!(s["breaker"]["floor_met"], false);
    close(
        &s["breaker"]["calls_per_window"],
        1.0,
        1e-9,
        "calls per window",
    );
    close(
        &s["breaker"]["window_needed_s"],
        200.0,
        1e-9,
        "window needed",
    );
    let warning = s["warnings"][0].as_str().unwrap();
    assert_eq!(s["warnings"].as_array().unwrap().len(), 1, "{s}");
    for said in [
        "never opens, even at 100% failures",
        "1 call per 10s window against a floor of 20",
        "widen the window",
        "lower the floor",
        "counters in Redis",
    ] {
        assert!(warning.contains(said), "missing {said:?} in {warning}");
    }
    // At 500 rps over 40 instances, seed 000's other case, the floor is met easily.
    let s = sized(&["--rate", "500/s", "--instances", "40", "--p99", "80ms"]);
    assert_eq!(s["breaker"]["floor_met"], true);
    assert!(s["warnings"].as_array().unwrap().is_empty(), "{s}");
}

/// nginx's log of 400 requests a second to a dependency: 10 s healthy (a p99 just under 60 ms), 5 s at a flat 3 s,
/// 5 s healthy again; lines in the order nginx writes them, by end time.
fn degradation_log() -> String {
    const T0: f64 = 1_791_640_500.0;
    let mut lines: Vec<(f64, String)> = Vec::new();
    for s in 0..20usize {
        for i in 0..400usize {
            let arrival = T0 + s as f64 + i as f64 / 400.0;
            let took = if (10..15).contains(&s) {
                3.0
            } else {
                0.020 + (i % 100) as f64 * 0.0004
            };
            let end = arrival + took;
            let secs = (end - T0).floor() as u64;
            lines.push((
                end,
                format!(
                    r#"127.0.0.1 - [10/Oct/2026:13:55:{secs:02} +0000] {end:.3} "GET /price/{i} HTTP/1.1" 200 {took:.3}"#
                ),
            ));
        }
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    lines.into_iter().map(|(_, l)| l + "\n").collect()
}

#[test]
fn an_access_log_gives_the_same_figures_and_a_scenario_that_replays_it() {
    let dir = tmp("log");
    let log = dir.join("pricing.log");
    std::fs::write(&log, degradation_log()).unwrap();
    let log = log.to_str().unwrap();
    let record = [log, "--format", "nginx", "--log-format", LOG_FORMAT];
    let mut args = record.to_vec();
    args.extend(["--pool", "200"]);
    let s = sized(&args);
    assert_eq!(s["numbers"]["p99_s"]["from"], "record");
    assert_eq!(s["numbers"]["rate_per_s"]["value"], 400.0);
    // The recorded latency is kept in bins 2% wide: within 2% of the seed's answers.
    check_yourself(&s, 0.02);
    // The timeout's cost is read from the distribution: no healthy call took 200 ms.
    assert_eq!(s["timeout"]["cut_calls"], 0.0);
    assert_eq!(s["timeout"]["healthy_calls"], 4000);
    // Played bucket by bucket, the recorded step opens the breaker a timeout plus half the window in.
    close(
        &s["breaker"]["opens_on_record_s"],
        5.2,
        0.05,
        "opens on the record",
    );
    // The scenario replays the degradation second by second and validates as written.
    let out = dir.join("sized.yaml");
    let mut args = vec!["size"];
    args.extend(record);
    args.extend(["--pool", "200", "-o", out.to_str().unwrap()]);
    let (code, _, stderr) = faultline(&args);
    assert_eq!(code, 0, "{stderr}");
    let yaml = std::fs::read_to_string(&out).unwrap();
    for said in [
        "timeout: 200ms, pool: 200, fallback: stale",
        "- { name: degraded, at: 10s, routes: { pricing: { latency: { histogram:",
        "- { name: degraded.4, at: 14s,",
        "- { name: recovered, at: 15s, routes: { pricing: healthy } }",
        "opens_within: 7s, after: degraded",
        "max_in_flight_below: 200",
        "mistake: [ no_timeout ]",
    ] {
        assert!(yaml.contains(said), "missing {said:?} in:\n{yaml}");
    }
    let (code, _, stderr) = faultline(&["validate", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    // Without it, it is refused: a file needs its format.
    refused(&["size", log], "give the record's --format");
    refused(&["size"], "nothing to size from");
}

#[test]
fn a_recorded_run_gives_the_same_figures() {
    let dir = tmp("run");
    // faultd serves the load itself, so that the degraded calls are held to their end (a service with a timeout
    // would cut them, and faultd would record the cut, not the degradation).
    let scenario = dir.join("recorded.yaml");
    std::fs::write(
        &scenario,
        r#"name: recorded-degradation
description: The dependency served straight to the load, healthy at a 60 ms p99, then a flat 3 s.
duration: 15s
seed: 3
dependency:
  routes:
    pricing: { path: /**, latency: { p50: 30ms, p99: 60ms } }
  phases:
    - { name: healthy, at: 0s }
    - { name: degraded, at: 10s, routes: { pricing: { latency: { fixed: 3s } } } }
sut:
  url: "{faultd.url}"
load:
  rate: 400/s
  timeout: 10s
  requests: [ { get: "/price/{rand:1..1000}" } ]
"#,
    )
    .unwrap();
    let run = dir.join("run");
    let (code, _, stderr) = faultline(&[
        "run",
        scenario.to_str().unwrap(),
        "--report-dir",
        run.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let s = sized(&[run.to_str().unwrap(), "--pool", "200"]);
    assert_eq!(s["numbers"]["dependency"], "pricing");
    assert_eq!(s["numbers"]["rate_per_s"]["from"], "record");
    close(&s["numbers"]["rate_per_s"]["value"], 400.0, 0.02, "rate");
    check_yourself(&s, 0.02);
    refused(
        &["size", run.to_str().unwrap(), "--dependency", "nope"],
        "no dependency `nope` in the record; it has pricing",
    );
}

#[test]
fn a_command_gets_the_settings_in_its_environment_scaled_with_the_run() {
    let dir = tmp("command");
    let out = dir.join("mine.yaml");
    let (code, _, stderr) = faultline(&[
        "size",
        "--p99",
        "80ms",
        "--rate",
        "50/s",
        "--degraded",
        "2s",
        "-o",
        out.to_str().unwrap(),
        "--command",
        "node server.js",
        "--dependency-env",
        "PRICING_URL",
        "--get",
        "/quote/1",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let yaml = std::fs::read_to_string(&out).unwrap();
    for said in [
        "command: [ \"node\", \"server.js\" ]",
        "PRICING_URL: \"{faultd.url}\"",
        "BREAKER_TIMEOUT_MS: \"{ms:250ms}\"",
        "BREAKER_OPEN_MS: \"{ms:30s}\"",
        "BREAKER_MIN_CALLS: \"20\"",
        "pricing: { inferred: true }",
        "get: \"/quote/1\"",
    ] {
        assert!(yaml.contains(said), "missing {said:?} in:\n{yaml}");
    }
    assert!(!yaml.contains("proof:"), "{yaml}");
    // An existing file is kept unless --force.
    let again = [
        "size",
        "--p99",
        "80ms",
        "--rate",
        "50/s",
        "-o",
        out.to_str().unwrap(),
    ];
    refused(&again, "give --force");
}

#[test]
fn the_hotel_reviews_record_sized_proves_its_own_settings() {
    let dir = tmp("hotel");
    let out = dir.join("hotel.yaml");
    let format = r#"$remote_addr - [$time_local] $msec "$request" $status $request_time "$upstream_addr" "$upstream_response_time" "$upstream_status""#;
    let (code, text, stderr) = faultline(&[
        "size",
        "scenarios/traces/hotel-reviews.nginx.log",
        "--format",
        "nginx",
        "--log-format",
        format,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    // Seed 001's fix was an 800 ms timeout; 3x the recorded p99 comes to the same.
    assert!(text.contains("Timeout: 800ms"), "{text}");
    assert!(
        text.contains("on the recorded degradation, played bucket by bucket, it opens"),
        "{text}"
    );
    // Both runs at half time: the recommended settings pass every expectation, and without a timeout the pool fills.
    let (code, stdout, stderr) = faultline(&[
        "prove",
        out.to_str().unwrap(),
        "--time-scale",
        "0.5",
        "--report-dir",
        dir.join("reports").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("PROVEN sized-"), "{stdout}");
}

#[test]
fn a_service_of_its_own_sized_opens_in_time_but_its_breakers_timeout_does_not_free_the_call() {
    // The Express service of tests/services/node_express: opossum's breaker (50% over 2 s, at least 10 calls),
    // its timeout read from BREAKER_TIMEOUT_MS, its fetch aborted after 1 s whatever the breaker's timeout.
    let service = root().join("tests/services/node_express");
    assert!(
        service.join("node_modules/opossum").is_dir(),
        "the service's packages are missing: npm ci --prefix tests/services/node_express (Node 18 or later)"
    );
    let dir = tmp("node");
    let out = dir.join("node.yaml");
    let (code, _, stderr) = faultline(&[
        "size",
        "--p99",
        "20ms",
        "--rate",
        "50/s",
        "--degraded",
        "2s",
        "--window",
        "2s",
        "--min-calls",
        "10",
        "--open-for",
        "2s",
        "-o",
        out.to_str().unwrap(),
        "--command",
        "node tests/services/node_express/server.js",
        "--dependency-env",
        "PRICING_URL",
        "--get",
        "/quote/1",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let report = dir.join("run");
    let (code, stdout, stderr) = faultline(&[
        "run",
        out.to_str().unwrap(),
        "--report-dir",
        report.to_str().unwrap(),
    ]);
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("result.json")).unwrap())
            .unwrap_or_else(|e| panic!("{e}\n{stdout}\n{stderr}"));
    let verdict = |id: &str| {
        result["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("no verdict {id}: {stdout}"))
            .clone()
    };
    // The arithmetic's opening (the 60 ms timeout, then half the 2 s window) holds for opossum, and so does the close.
    assert_eq!(verdict("opens")["passed"], true, "{stdout}");
    assert_eq!(verdict("recovers")["passed"], true, "{stdout}");
    // Its timeout rejects the caller's promise but leaves the fetch running until its own 1 s abort: 50/s x 1 s
    // calls stay in flight at the dependency, far over the 3 a 60 ms timeout would hold (Little's law).
    let pool = verdict("pool");
    assert_eq!(pool["passed"], false, "{stdout}");
    assert!(pool["measured"].as_f64().unwrap() >= 30.0, "{pool}");
    assert_eq!(code, 1, "{stdout}\n{stderr}");
}
