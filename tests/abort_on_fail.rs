//! `abort_on_fail`: an expectation that can be checked while the run goes on (calls in flight at a route, read from
//! faultd) stops the run as soon as it fails, and the report is still written with the failing verdict.

use std::process::Command;
use std::time::Instant;

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

#[test]
fn a_failed_pool_limit_stops_the_run_early_and_still_writes_the_report() {
    let dir = std::env::temp_dir().join(format!("faultline-abort-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("scenario.yaml");
    std::fs::write(&file, SCENARIO).unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(["run"])
        .arg(&file)
        .arg("--report-dir")
        .arg(dir.join("report"))
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The pool fills within a second of the hang (200/s, 20 slots); the check runs once a second, and the run then
    // waits at most the 2 s client timeout for requests in flight: far from the 30 s the scenario would last.
    assert!(elapsed.as_secs() < 15, "took {elapsed:?}");
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report/result.json")).unwrap())
            .unwrap();
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
