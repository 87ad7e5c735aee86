//! Requests followed through a service faultline did not build: a Python HTTP service instrumented with the
//! OpenTelemetry SDK (its global W3C propagator) whose retries are tenacity's (tests/services/python_otel). The
//! runner joins its dependency calls with loadgen's requests by trace id: every call is attributed to exactly one
//! request, counted against faultd's and loadgen's own totals, and the requests expectations judge tenacity's
//! backoff and jitter. Started without propagation, the same service gets INCONCLUSIVE (exit 4) with the reason.
//!
//! opentelemetry-sdk and tenacity are not vendored: without them this test fails, saying what to install.

use crate::hardening;

use std::collections::BTreeMap;

use hardening::*;
use serde_json::Value;

const SCENARIO: &str = "tests/services/python_otel/scenario.yaml";

/// Runs the service's scenario, `PROPAGATE` set to `propagate`; returns the exit code, result.json and the
/// report's folder.
fn run(scratch: &Scratch, propagate: &str) -> (Option<i32>, Value, std::path::PathBuf, String) {
    python_with("opentelemetry.sdk.trace, tenacity");
    let text = std::fs::read_to_string(SCENARIO).unwrap();
    let line = "PROPAGATE: \"1\"";
    assert!(text.contains(line), "{SCENARIO} no longer sets {line}");
    let path = scratch.write(
        "scenario.yaml",
        &text.replacen(line, &format!("PROPAGATE: \"{propagate}\""), 1),
    );
    let report = scratch.path("report");
    let out = run_to_end(&path, &report);
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), result_json(&report), report, said)
}

fn csv(path: &std::path::Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

#[test]
fn an_opentelemetry_service_with_tenacity_is_followed_call_by_call_and_its_retries_judged() {
    let scratch = Scratch::new("correlation");
    let (code, result, report, said) = run(&scratch, "1");
    assert_eq!(code, Some(0), "{said}");
    for v in result["verdicts"].as_array().unwrap() {
        assert_eq!(v["outcome"], "pass", "{}", v["sentence"]);
        assert!(v["per_request"]["requests"].as_u64().unwrap() > 0, "{v}");
    }
    // The join and the per-request figures are in result.json as docs/result-json.md says.
    let schema = crate::report_files::documented_schema();
    let mut errors = Vec::new();
    crate::report_files::validate(&schema, &schema, &result, "$", &mut errors);
    assert!(errors.is_empty(), "{errors:#?}");
    // The brownout made tenacity retry.
    let attempts = &result["verdicts"][0];
    assert!(attempts["measured"].as_f64().unwrap() >= 1.0, "{attempts}");

    // The join is exact, against each side's own totals: loadgen's requests sent, faultd's arrivals (over the
    // whole recording, the retries of the last requests after the schedule's end included).
    let followed = &result["requests"];
    let read = |file: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(report.join(file)).unwrap()).unwrap()
    };
    let sent = read("load.json")["sent"].as_u64().unwrap();
    let arrivals = read("dependency.json")["routes"]["pricing"]["totals"]["arrivals"]
        .as_u64()
        .unwrap();
    assert_eq!(followed["requests"].as_u64(), Some(sent), "{followed}");
    assert_eq!(followed["calls"].as_u64(), Some(arrivals), "{followed}");
    assert_eq!(
        followed["attributed"].as_u64(),
        Some(arrivals),
        "{followed}"
    );
    assert_eq!(
        (followed["untraced"].as_u64(), followed["foreign"].as_u64()),
        (Some(0), Some(0))
    );
    let requests = csv(&report.join("requests.csv"));
    let calls = csv(&report.join("calls.csv"));
    assert_eq!(requests.len() as u64, sent);
    assert_eq!(calls.len() as u64, arrivals);
    let mut per_trace: BTreeMap<&str, u64> = BTreeMap::new();
    for c in &calls {
        assert_eq!(c[0].len(), 32, "a call without a trace id: {c:?}");
        assert_eq!(c[1].len(), 16, "a call without its parent span: {c:?}");
        *per_trace.entry(&c[0]).or_default() += 1;
    }
    let mut attributed = 0;
    for r in &requests {
        let n: u64 = r[5].parse().unwrap();
        assert_eq!(per_trace.remove(r[0].as_str()).unwrap_or(0), n, "{r:?}");
        attributed += n;
    }
    assert!(per_trace.is_empty(), "calls of no request: {per_trace:?}");
    assert_eq!(attributed, arrivals);
    let summary = std::fs::read_to_string(report.join("summary.txt")).unwrap();
    assert!(summary.contains("Requests followed"), "{summary}");
}

#[test]
fn the_same_service_without_propagation_is_inconclusive_and_says_why() {
    let scratch = Scratch::new("correlation-off");
    let (code, result, report, said) = run(&scratch, "0");
    assert_eq!(code, Some(4), "{said}");
    for v in result["verdicts"].as_array().unwrap() {
        assert_eq!(v["outcome"], "inconclusive", "{}", v["sentence"]);
        let s = v["sentence"].as_str().unwrap();
        assert!(
            s.contains("without a trace id") && s.contains("does not propagate"),
            "{s}"
        );
    }
    let followed = &result["requests"];
    assert_eq!(followed["attributed"].as_u64(), Some(0), "{followed}");
    assert_eq!(followed["untraced"], followed["calls"], "{followed}");
    assert!(report.join("calls.csv").exists());
}
