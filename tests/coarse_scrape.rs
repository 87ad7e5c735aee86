//! A breaker whose half-open windows are shorter than the scrape that watches it: the demo's breaker in front of a
//! dependency that fails in 40 ms, probed once a second, scraped every 100 ms. The scrape sees almost none of the
//! windows; the verdicts must never fail the right breaker for it (a probe count it cannot make is inconclusive,
//! not a failure) and must still fail the wrong one (unlimited half-open lets a burst through every window, which
//! faultd counts between two scrapes that saw the breaker open).
//!
//! `for i in $(seq 20); do cargo test --release --test coarse_scrape -- --nocapture; done` runs it in a loop and
//! prints each run's outcomes.

use std::process::Command;

use serde_json::Value;

const SCENARIO: &str = r#"name: coarse-scrape
description: half-open windows of ~40 ms under a 100 ms scrape
duration: 12s
seed: 11
dependency:
  routes:
    pricing: { path: /price/*, latency: { fixed: 2ms } }
  phases:
    - { name: healthy, at: 0s }
    - { name: outage, at: 3s, routes: { pricing: { latency: { fixed: 40ms }, errors: [ { share: 100%, status: 503 } ] } } }
    - { name: recovered, at: 9s, routes: { pricing: healthy } }
sut:
  demo:
    operations:
      pricing: { timeout: 250ms, pool: 100, fallback: stale,
                 breaker: { failure_rate: 50%, window: 2s, min_calls: 20, open_for: 1s, half_open_calls: 1 } }
load:
  rate: 200/s
  timeout: 2s
  requests: [ { get: "/product/{rand:1..100}" } ]
  fallback_header: X-Fallback
breakers:
  pricing: { metrics: { path: /metrics, preset: seed, interval: 100ms } }
expect:
  - { id: opens, breaker: pricing, opens_within: 2s, after: outage }
  - { id: one-probe, breaker: pricing, probes_per_half_open_at_most: 1 }
  - { id: no-flapping, breaker: pricing, transitions_at_most: 40 }
"#;

/// Runs the scenario (with `mistakes`), returning the exit code and each verdict's id and outcome.
fn run(name: &str, mistakes: &[&str]) -> (Option<i32>, Vec<(String, String, String)>) {
    let dir = std::env::temp_dir().join(format!("faultline-coarse-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("scenario.yaml");
    std::fs::write(&file, SCENARIO).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_faultline"));
    cmd.arg("run")
        .arg(&file)
        .arg("--report-dir")
        .arg(dir.join("report"));
    for m in mistakes {
        cmd.args(["--mistake", m]);
    }
    let out = cmd.output().unwrap();
    let text = std::fs::read_to_string(dir.join("report/result.json"))
        .unwrap_or_else(|_| panic!("no result.json: {}", String::from_utf8_lossy(&out.stderr)));
    let result: Value = serde_json::from_str(&text).unwrap();
    let verdicts = result["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap_or_default().to_string(),
                v["outcome"].as_str().unwrap_or_default().to_string(),
                v["sentence"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    (out.status.code(), verdicts)
}

fn outcome<'a>(verdicts: &'a [(String, String, String)], id: &str) -> &'a (String, String, String) {
    verdicts.iter().find(|(i, ..)| i == id).unwrap()
}

#[test]
fn windows_shorter_than_the_scrape_never_fail_the_right_breaker_and_still_fail_the_wrong_one() {
    let (code, right) = run("right", &[]);
    for (id, outcome, sentence) in &right {
        println!("recommended: {id}: {outcome}: {sentence}");
    }
    assert_eq!(outcome(&right, "opens").1, "pass", "{right:?}");
    for id in ["one-probe", "no-flapping"] {
        let (_, o, sentence) = outcome(&right, id);
        assert_ne!(
            o, "fail",
            "the right breaker failed {id} for want of resolution: {sentence}"
        );
    }
    assert!(
        matches!(code, Some(0) | Some(4)),
        "exit {code:?}: {right:?}"
    );

    let (code, wrong) = run("wrong", &["unlimited_half_open"]);
    for (id, outcome, sentence) in &wrong {
        println!("unlimited_half_open: {id}: {outcome}: {sentence}");
    }
    let (_, o, sentence) = outcome(&wrong, "one-probe");
    assert_eq!(o, "fail", "{sentence}");
    assert_eq!(code, Some(1));
}
