//! A breaker whose half-open windows are shorter than the scrape that watches it: the demo's breaker in front of a
//! dependency that fails in 40 ms, probed once a second, scraped every 100 ms or every second; then opossum's (npm)
//! behind Express. The scrape sees almost none of the windows: faultd's timing of every call decides the probe
//! count. The right breaker passes (after its first probe's answer, silence or calls in flight together), the wrong
//! one fails (unlimited half-open lets a burst through before the first probe is answered).
//!
//! The recovered dependency answers in 25 ms: at 200 requests a second, five calls are in flight at once after the
//! close, so the close shows within a call or two of the probe's answer (with one call per answer it could not).
//!
//! The Python gRPC service of tests/services/python_grpc shows the two ends of what a scrape leaves to faultd's
//! timing: circuitbreaker (PyPI) admits every call while half-open and fails; pybreaker (PyPI) sends one call at a
//! time even when closed, which no timing can tell from probes in turn, and is inconclusive with that reason. The
//! same service on grpc.aio with pyfailsafe's breaker (PyPI) admits one trial call and passes by a 100 ms scrape, a
//! 1 s scrape and its log alike; set to admit four more beside the trial, it fails by all three.
//!
//! `for i in $(seq 20); do cargo test --release --test suite coarse_scrape -- --nocapture; done` runs it in a loop
//! and prints each run's outcomes.

use std::process::Command;

use serde_json::Value;

/// Held by each test for its whole length: their half-open windows last 10-40 ms and are placed from calls timed
/// to the millisecond, so this file's services and runs do not share the machine's two cores with each other (side
/// by side, in a suite running six tests at once, the traffic inference once placed 2 calls in a round of
/// opossum's that its own log showed holding 1, and the verdict was inconclusive).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

const SCENARIO: &str = r#"name: coarse-scrape
description: half-open windows of ~40 ms under a 100 ms scrape
duration: 12s
seed: 11
# faultd times the first 8 calls of each bucket and route: 10 ms holds 2 at 200 requests a second.
bucket: 10ms
dependency:
  routes:
    pricing: { path: /price/*, latency: { fixed: 2ms } }
  phases:
    - { name: healthy, at: 0s }
    - { name: outage, at: 3s, routes: { pricing: { latency: { fixed: 40ms }, errors: [ { share: 100%, status: 503 } ] } } }
    - { name: recovered, at: 9s, routes: { pricing: { latency: { fixed: 25ms } } } }
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
  # Every probe before 9 s fails and opens it again for 1 s: the first one after comes within 1.04 s, is answered
  # 25 ms later, and the calls overlap within two spacings (10 ms). 1.2 s leaves 120 ms for a loaded machine. Where
  # a scrape sees the close too late to decide, faultd's timing places it.
  - { id: closes, breaker: pricing, closes_within: 1200ms, after: recovered }
"#;

/// Runs `scenario` (with `mistakes`), returning the exit code and each verdict's id, outcome and sentence.
fn run(
    name: &str,
    scenario: &str,
    mistakes: &[&str],
) -> (Option<i32>, Vec<(String, String, String)>) {
    let dir = std::env::temp_dir().join(format!("faultline-coarse-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("scenario.yaml");
    std::fs::write(&file, scenario).unwrap();
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
fn windows_shorter_than_the_scrape_pass_the_right_breaker_and_fail_the_wrong_one() {
    let _alone = one_at_a_time();
    let (code, right) = run("right", SCENARIO, &[]);
    for (id, outcome, sentence) in &right {
        println!("recommended: {id}: {outcome}: {sentence}");
    }
    for id in ["opens", "one-probe", "no-flapping", "closes"] {
        let (_, o, sentence) = outcome(&right, id);
        assert_eq!(o, "pass", "{id}: {sentence}");
    }
    assert!(
        outcome(&right, "one-probe")
            .2
            .contains("each ended by faultd's timing"),
        "{right:?}"
    );
    assert_eq!(code, Some(0), "{right:?}");

    let (code, wrong) = run("wrong", SCENARIO, &["unlimited_half_open"]);
    for (id, outcome, sentence) in &wrong {
        println!("unlimited_half_open: {id}: {outcome}: {sentence}");
    }
    // Shown by the calls before the first probe's answer, or (on a loaded machine, where fewer of them come before
    // it) by those before a scrape that saw the breaker still half-open: either way admitted while half-open.
    let (_, o, sentence) = outcome(&wrong, "one-probe");
    assert_eq!(o, "fail", "{sentence}");
    assert!(
        sentence.contains("so all of them admitted while half-open"),
        "{sentence}"
    );
    assert_eq!(code, Some(1));
}

#[test]
fn a_one_second_scrape_still_counts_one_probe_per_round_and_times_the_opening_and_the_close() {
    let _alone = one_at_a_time();
    // Open for 1 s between probes, scraped every second: two rounds can fall between the same two samples.
    let scenario = SCENARIO.replace("interval: 100ms", "interval: 1s");
    let (_, right) = run("right-1s", &scenario, &[]);
    for (id, outcome, sentence) in &right {
        println!("recommended, 1 s scrape: {id}: {outcome}: {sentence}");
    }
    for id in ["one-probe", "closes", "opens"] {
        let (_, o, sentence) = outcome(&right, id);
        assert_eq!(o, "pass", "{id}: {sentence}");
    }
    // The opening at about 1 s into the outage is seen by the 1 s scrape only to within (1 s, 2 s]: the bound of
    // 2 s lies inside, and faultd's timing places it (the last call let through, then quiet).
    assert!(
        outcome(&right, "opens")
            .2
            .contains("placed by faultd's timing"),
        "{right:?}"
    );
}

/// opossum behind Express, started by the run; its breaker watched by a 100 ms scrape and by its own log lines.
const OPOSSUM: &str = r#"name: opossum-probes
description: opossum's half-open windows of ~25 ms under a 100 ms scrape
duration: 12s
seed: 5
bucket: 10ms
dependency:
  routes:
    pricing: { path: /price/*, latency: { fixed: 5ms } }
  phases:
    - { name: healthy, at: 0s }
    - { name: failing, at: 3s, routes: { pricing: { latency: { fixed: 25ms }, errors: [ { share: 100%, status: 503 } ] } } }
    - { name: recovered, at: 8s, routes: { pricing: { latency: { fixed: 25ms } } } }
sut:
  command: [ node, "@SERVICE@/server.js" ]
  env: { PORT: "{sut.port}", PRICING_URL: "{faultd.url}", BREAKER_RESET_MS: "1000" }
  url: http://127.0.0.1:{sut.port}
  ready: /health
load:
  rate: 200/s
  timeout: 2s
  requests: [ { get: "/quote/{rand:1..100}" } ]
  fallback_header: x-fallback
breakers:
  by_metrics:
    route: pricing
    metrics: { metric: pricing_breaker_state, labels: { breaker: pricing },
               values: { closed: 0, open: 1, half_open: 2 }, interval: 100ms }
  by_log:
    route: pricing
    log: { pattern: 'breaker pricing -> (?P<state>\w+)' }
expect:
  - { id: by-metrics, breaker: by_metrics, probes_per_half_open_at_most: 1 }
  - { id: by-log, breaker: by_log, probes_per_half_open_at_most: 1 }
"#;

#[test]
fn opossums_one_probe_passes_by_the_scrape_as_by_its_log() {
    let _alone = one_at_a_time();
    let service =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/node_express");
    assert!(
        service.join("node_modules/opossum").is_dir(),
        "the service's packages are missing: npm ci --prefix tests/services/node_express (Node 18 or later)"
    );
    let scenario = OPOSSUM.replace("@SERVICE@", &service.display().to_string());
    let (code, verdicts) = run("opossum", &scenario, &[]);
    for (id, outcome, sentence) in &verdicts {
        println!("opossum: {id}: {outcome}: {sentence}");
    }
    for id in ["by-metrics", "by-log"] {
        let (_, o, sentence) = outcome(&verdicts, id);
        assert_eq!(o, "pass", "{id}: {sentence}");
    }
    assert_eq!(code, Some(0), "{verdicts:?}");
}

/// The Python gRPC service with `@VALUE@`'s breaker, scraped every 100 ms on port `@METRICS@`.
const PYTHON: &str = r#"name: python-grpc-probes
description: a Python breaker's half-open rounds under a 100 ms scrape
duration: 12s
seed: 9
bucket: 10ms
dependency:
  routes:
    pricing: { path: /price/*, latency: { fixed: 2ms } }
  phases:
    - { name: healthy, at: 0s }
    - { name: failing, at: 3s, routes: { pricing: { latency: { fixed: 25ms }, errors: [ { share: 100%, status: 503 } ] } } }
    - { name: recovered, at: 8s, routes: { pricing: { latency: { fixed: 10ms } } } }
sut:
  command: [ "@PYTHON@", "@SERVICE@/prices.py" ]
  env: { PORT: "{sut.port}", PRICING_URL: "{faultd.url}", METRICS_PORT: "@METRICS@", BREAKER: "@VALUE@",
         RESET_MS: "1000", FAIL_MAX: "5" }
  url: http://127.0.0.1:{sut.port}
  ready: { tcp: true }
  ready_timeout: 20s
load:
  rate: 50/s
  timeout: 3s
  requests: [ { grpc: /shop.Prices/Get, message: 0a023432 } ]
  fallback_header: x-fallback
breakers:
  pricing:
    metrics: { url: "http://127.0.0.1:@METRICS@/metrics", metric: pricing_breaker_state, labels: { breaker: pricing },
               values: { closed: 0, open: 1, half_open: 2 }, interval: 100ms }
expect:
  - { id: one-probe, breaker: pricing, probes_per_half_open_at_most: 1 }
"#;

/// Runs `template`, a scenario of the Python gRPC service of tests/services/python_grpc, with its `@PYTHON@`,
/// `@SERVICE@` and `@METRICS@` filled in and `@VALUE@` set to `value`; prints the verdicts and returns them.
fn python_run(label: &str, template: &str, value: &str) -> Vec<(String, String, String)> {
    // .cargo/config.toml hands the tests scripts/test's .venv, which has grpcio and the breakers of
    // tests/requirements.txt.
    let python = crate::hardening::python_with("grpc, pybreaker, circuitbreaker, failsafe");
    let service =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/python_grpc");
    let metrics = faultline_units::port::handed_out().expect("a free loopback port");
    let scenario = template
        .replace("@PYTHON@", &python)
        .replace("@SERVICE@", &service.display().to_string())
        .replace("@METRICS@", &metrics.to_string())
        .replace("@VALUE@", value);
    let (_, verdicts) = run(&format!("{label}-{value}"), &scenario, &[]);
    for (id, outcome, sentence) in &verdicts {
        println!("{label} {value}: {id}: {outcome}: {sentence}");
    }
    verdicts
}

/// The verdict on the Python service's probes with `library`'s breaker.
fn python_probes(library: &str) -> (String, String) {
    let verdicts = python_run("python", PYTHON, library);
    let (_, o, sentence) = outcome(&verdicts, "one-probe");
    (o.clone(), sentence.clone())
}

#[test]
fn circuitbreakers_half_open_lets_calls_through_before_the_probe_is_answered_and_fails() {
    let _alone = one_at_a_time();
    let (outcome, sentence) = python_probes("circuitbreaker");
    assert_eq!(outcome, "fail", "{sentence}");
    assert!(
        sentence.contains("so all of them admitted while half-open"),
        "{sentence}"
    );
}

#[test]
fn pybreakers_calls_one_at_a_time_leave_its_probe_count_undecided_and_say_why() {
    let _alone = one_at_a_time();
    let (outcome, sentence) = python_probes("pybreaker");
    assert_eq!(outcome, "inconclusive", "{sentence}");
    assert!(
        sentence.contains("every call waited for the one before it"),
        "{sentence}"
    );
}

/// The Python gRPC service on grpc.aio with pyfailsafe's breaker (`HALF_OPEN_RATIO` @VALUE@), its state scraped
/// every 100 ms and every second from the same gauge on port `@METRICS@`, and read from its log lines.
const FAILSAFE: &str = r#"name: python-failsafe-probes
description: pyfailsafe's half-open rounds of ~25 ms under a 100 ms and a 1 s scrape
duration: 12s
seed: 9
bucket: 10ms
dependency:
  routes:
    pricing: { path: /price/*, latency: { fixed: 2ms } }
  phases:
    - { name: healthy, at: 0s }
    - { name: failing, at: 3s, routes: { pricing: { latency: { fixed: 25ms }, errors: [ { share: 100%, status: 503 } ] } } }
    - { name: recovered, at: 8s, routes: { pricing: { latency: { fixed: 25ms } } } }
sut:
  command: [ "@PYTHON@", "@SERVICE@/prices_failsafe.py" ]
  env: { PORT: "{sut.port}", PRICING_URL: "{faultd.url}", METRICS_PORT: "@METRICS@", HALF_OPEN_RATIO: "@VALUE@",
         RESET_MS: "1000", FAIL_MAX: "5" }
  url: http://127.0.0.1:{sut.port}
  ready: { tcp: true }
  ready_timeout: 20s
# 200 requests a second at 25 ms: five calls in flight once it closes, so faultd's timing shows the close.
load:
  rate: 200/s
  timeout: 3s
  requests: [ { grpc: /shop.Prices/Get, message: 0a023432 } ]
  fallback_header: x-fallback
breakers:
  by_100ms:
    route: pricing
    metrics: { url: "http://127.0.0.1:@METRICS@/metrics", metric: pricing_breaker_state, labels: { breaker: pricing },
               values: { closed: 0, open: 1, half_open: 2 }, interval: 100ms }
  by_1s:
    route: pricing
    metrics: { url: "http://127.0.0.1:@METRICS@/metrics", metric: pricing_breaker_state, labels: { breaker: pricing },
               values: { closed: 0, open: 1, half_open: 2 }, interval: 1s }
  by_log:
    route: pricing
    log: { pattern: 'breaker pricing: (?P<state>[\w-]+)' }
expect:
  - { id: by-100ms, breaker: by_100ms, probes_per_half_open_at_most: 1 }
  - { id: by-1s, breaker: by_1s, probes_per_half_open_at_most: 1 }
  - { id: by-log, breaker: by_log, probes_per_half_open_at_most: 1 }
"#;

/// The verdicts on pyfailsafe's probes, admitting `ratio` of the calls that come while its trial is out.
fn failsafe_probes(ratio: &str) -> Vec<(String, String, String)> {
    python_run("pyfailsafe", FAILSAFE, ratio)
}

#[test]
fn pyfailsafes_one_trial_call_passes_by_a_100ms_scrape_a_1s_scrape_and_its_log() {
    let _alone = one_at_a_time();
    let verdicts = failsafe_probes("0");
    for id in ["by-100ms", "by-1s", "by-log"] {
        let (_, o, sentence) = outcome(&verdicts, id);
        assert_eq!(o, "pass", "{id}: {sentence}");
    }
    assert!(
        outcome(&verdicts, "by-1s")
            .2
            .contains("each ended by faultd's timing"),
        "{verdicts:?}"
    );
}

#[test]
fn pyfailsafe_admitting_five_at_once_fails_by_either_scrape_and_its_log() {
    let _alone = one_at_a_time();
    let verdicts = failsafe_probes("0.05");
    for id in ["by-100ms", "by-1s", "by-log"] {
        let (_, o, sentence) = outcome(&verdicts, id);
        assert_eq!(o, "fail", "{id}: {sentence}");
    }
    for id in ["by-100ms", "by-1s"] {
        let sentence = &outcome(&verdicts, id).2;
        assert!(
            sentence.contains("so all of them admitted while half-open"),
            "{sentence}"
        );
    }
}
