//! `abort_on_fail`: an expectation that can be checked while the run goes on (calls in flight at a route, read from
//! faultd) stops the run as soon as it fails, and the report is still written with the failing verdict.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const SCENARIO: &str = r#"name: abort-on-fail
description: pricing hangs from 1 s; without a timeout the pool of 20 fills at once
duration: 30s
seed: 3
dependency:
  routes:
    pricing: { path: /price/*, latency: { fixed: 5ms } }
  phases:
    - { name: healthy, at: 0s }
    - { name: hang, at: 1s, routes: { pricing: { hang: 100% } } }
sut:
  demo:
    mistakes: [ no_timeout ]
    operations:
      pricing: { pool: 20, fallback: stale }
load:
  rate: 200/s
  timeout: 2s
  requests: [ { get: "/product/{rand:1..50}" } ]
  fallback_header: X-Fallback
expect:
  - { id: pool, dependency: pricing, max_in_flight_below: 20, abort_on_fail: true }
"#;

/// Runs `scenario` in a scratch folder (`name`): its exit code, how long it took, its result.json and the folder.
fn run(name: &str, scenario: &str) -> (Option<i32>, Duration, serde_json::Value, PathBuf) {
    let dir = std::env::temp_dir().join(format!("faultline-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("scenario.yaml");
    std::fs::write(&file, scenario).unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(["run"])
        .arg(&file)
        .arg("--report-dir")
        .arg(dir.join("report"))
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let result = std::fs::read_to_string(dir.join("report/result.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or_else(|_| panic!("no result.json; {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), elapsed, result, dir)
}

#[test]
fn a_failed_pool_limit_stops_the_run_early_and_still_writes_the_report() {
    let (code, elapsed, result, dir) = run("abort", SCENARIO);
    assert_eq!(code, Some(1), "{result}");
    // The pool fills within a second of the hang (200/s, 20 slots); the check runs once a second, and the run then
    // waits at most the 2 s client timeout for requests in flight: far from the 30 s the scenario would last.
    assert!(elapsed.as_secs() < 15, "took {elapsed:?}");
    assert_eq!(result["ending"]["kind"], "stopped_on_failure");
    assert!(result["ending"]["expectation"]
        .as_str()
        .unwrap()
        .contains("calls in flight at pricing"));
    assert_eq!(result["verdicts"][0]["passed"], false);
    assert!(result["verdicts"][0]["measured"].as_f64().unwrap() >= 20.0);
    let summary = std::fs::read_to_string(dir.join("report/summary.txt")).unwrap();
    assert!(summary.contains("STOPPED EARLY"), "{summary}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn abort_on_fail_is_refused_where_it_cannot_be_checked_live() {
    let text = SCENARIO.replace(
        "  - { id: pool, dependency: pricing, max_in_flight_below: 20, abort_on_fail: true }",
        "  - { id: share, sut_share: fallback, below: 5%, abort_on_fail: true }",
    );
    let e = faultline::scenario::Scenario::parse(&text, "s.yaml", &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("s.yaml:") && e.contains("expect[0]") && e.contains("abort_on_fail"),
        "{e}"
    );
}

/// Bad input only (404), which the recommended breaker rightly ignores: an expectation that it opens within 2 s
/// is decided as failed once 2 s (plus the scrape's resolution) have passed without an opening.
const NEVER_OPENS: &str = r#"name: never-opens
duration: 30s
seed: 3
dependency:
  routes:
    pricing: { path: /price/*, latency: { fixed: 5ms } }
  phases:
    - { name: healthy, at: 0s }
    - { name: bad-input, at: 1s, routes: { pricing: { errors: [ { share: 100%, status: 404 } ] } } }
sut:
  demo:
    operations:
      pricing: { timeout: 250ms, pool: 50, fallback: stale,
                 breaker: { failure_rate: 50%, window: 2s, min_calls: 10, open_for: 5s, half_open_calls: 1 } }
load:
  rate: 100/s
  timeout: 1s
  requests: [ { get: "/product/{rand:1..50}" } ]
  fallback_header: X-Fallback
breakers:
  pricing: { metrics: { path: /metrics, preset: seed } }
expect:
  - { id: opens, breaker: pricing, opens_within: 2s, after: bad-input, abort_on_fail: true }
  - { id: pool, dependency: pricing, max_in_flight_below: 50 }
"#;

#[test]
fn a_breaker_that_has_not_opened_by_its_deadline_stops_the_run() {
    let (code, elapsed, result, dir) = run("abort-open", NEVER_OPENS);
    assert_eq!(code, Some(1), "{result}");
    // Decided at 3.1 s of run time; loadgen's buckets settle a second later, the check runs once a second and the
    // load drains within its 1 s timeout: well under half the 30 s the scenario would last.
    assert!(elapsed.as_secs() < 15, "took {elapsed:?}");
    assert_eq!(result["ending"]["kind"], "stopped_on_failure");
    let why = result["ending"]["expectation"].as_str().unwrap();
    assert!(
        why.starts_with("opens: breaker pricing never opened after bad-input began"),
        "{why}"
    );
    assert_eq!(result["verdicts"][0]["passed"], false);
    std::fs::remove_dir_all(&dir).ok();
}
