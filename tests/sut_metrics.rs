//! Expectations on a SUT's own metrics (`sut_metric`), on a service faultline did not build: the Express app of
//! tests/services/node_express, whose counters are prom-client's (npm) and count opossum's events, and whose
//! process metrics are prom-client's defaults. The series are read by the same scrape as the breaker's state.
//!
//! Needs Node 18 or later and `npm ci --prefix tests/services/node_express` (the test command installs it).

use crate::hardening::{result_json, Scratch};
use crate::own_service_node::{free_port, run_file, start_service, text_of};

/// The service's breaker fails for 3 s and recovers; each expectation reads one of its series.
const SCENARIO: &str = r#"
name: node-express-metrics
description: The Express service's own counters and process metrics, judged while pricing fails and recovers.
duration: 10s
seed: 41
dependency:
  listen: 127.0.0.1:${FAULTD_PORT}
  routes:
    pricing: { path: /price/*, latency: { fixed: 5ms } }
  phases:
    - { name: healthy, at: 0s }
    - { name: failing, at: 3s, routes: { pricing: { errors: [ { share: 100%, status: 503 } ] } } }
    - { name: recovered, at: 6s, routes: { pricing: healthy } }
sut:
  url: http://127.0.0.1:${SUT_PORT}
load:
  rate: 50/s
  timeout: 2s
  requests: [ { get: "/quote/{rand:1..100}" } ]
  fallback_header: x-fallback
breakers:
  pricing:
    metrics: { metric: pricing_breaker_state, labels: { breaker: pricing },
               values: { closed: 0, open: 1, half_open: 2 }, interval: 100ms }
expect:
  # Opening takes half of a 2 s window of 50 calls a second to fail: many more than 4 failures.
  - { id: failures-counted, sut_metric: 'pricing_breaker_events_total{event="failure"}', at_end: { above: 4 }, during: failing }
  # Recovered: the half-open try finds pricing healthy, so nothing fails any more.
  - { id: quiet-after, sut_metric: 'pricing_breaker_events_total{event="failure"}', rate_below: 1/s, during: recovered }
  # While open opossum rejects every call: this bound is meant to fail.
  - { id: rejects, sut_metric: 'pricing_breaker_events_total{event="reject"}', rate_below: 1/s, during: failing, metrics: /metrics }
  - { id: event-loop, sut_metric: nodejs_eventloop_lag_seconds, max_below: 0.5 }
  - { id: misspelled, sut_metric: pricing_breaker_event_total, max_below: 1 }
  - { id: wrong-label, sut_metric: 'pricing_breaker_state{breaker="prices"}', max_below: 3 }
"#;

#[test]
fn a_services_own_counters_and_process_metrics_are_judged_and_a_wrong_name_is_inconclusive() {
    let scratch = Scratch::new("sut-metrics");
    let (faultd_port, sut_port) = (free_port(), free_port());
    let _service = start_service(
        sut_port,
        &format!("http://127.0.0.1:{faultd_port}"),
        "/price/",
        &scratch,
    );
    let scenario = scratch.write("scenario.yaml", SCENARIO);
    let report = scratch.path("report");
    let out = run_file(&scenario, faultd_port, sut_port, &report);
    let printed = text_of(&out);
    // The reject bound fails: exit 1.
    assert_eq!(out.status.code(), Some(1), "{printed}");
    let result = result_json(&report);
    let verdict = |id: &str| {
        result["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("no verdict {id}: {printed}"))
            .clone()
    };
    for id in ["failures-counted", "quiet-after", "event-loop"] {
        assert_eq!(verdict(id)["outcome"], "pass", "{id}: {printed}");
    }
    let rejects = verdict("rejects");
    assert_eq!(rejects["outcome"], "fail", "{printed}");
    // Open for most of the 3 s at 50 requests a second: tens of rejections a second between scrapes.
    let rate = rejects["measured"].as_f64().unwrap();
    assert!(rate > 10.0, "{}", rejects["sentence"]);
    let misspelled = verdict("misspelled");
    assert_eq!(misspelled["outcome"], "inconclusive", "{printed}");
    let sentence = misspelled["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("pricing_breaker_event_total never appeared in")
            && sentence.contains("the page had pricing_breaker_events_total"),
        "{sentence}"
    );
    let wrong_label = verdict("wrong-label");
    assert_eq!(wrong_label["outcome"], "inconclusive", "{printed}");
    assert!(
        wrong_label["sentence"]
            .as_str()
            .unwrap()
            .contains(r#"its name was there with the labels {breaker="pricing"}"#),
        "{}",
        wrong_label["sentence"]
    );
    // The series the verdicts read are in result.json, as docs/result-json.md says, and drawn in report.html.
    let schema = crate::report_files::documented_schema();
    let mut errors = Vec::new();
    crate::report_files::validate(&schema, &schema, &result, "$", &mut errors);
    assert!(errors.is_empty(), "{errors:#?}");
    let failures = &result["sut_metrics"][r#"pricing_breaker_events_total{event="failure"}"#];
    let points = failures["points"].as_array().unwrap();
    assert!(points.len() > 20, "a scrape every 100 ms: {failures}");
    let last = points.last().unwrap()[1].as_f64().unwrap();
    assert!(last > 4.0, "{failures}");
    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    assert!(
        html.contains("id=\"sut-metrics\""),
        "report.html draws the metrics"
    );
}
