//! docs/grafana/faultline.json queries only series the runner exports: every `faultline_*` name in a panel's
//! query is a sample name of the live endpoint's exposition (a gauge's name, a counter's `_total`, a histogram's
//! `_bucket`, `_sum` or `_count`).

use std::collections::BTreeSet;

use faultline::metrics::Metrics;
use faultline::scenario::{Overrides, Scenario};

fn names_in(expr: &str) -> Vec<String> {
    let re = regex::Regex::new(r"faultline_[a-z0-9_]+").unwrap();
    re.find_iter(expr).map(|m| m.as_str().to_string()).collect()
}

#[test]
fn every_query_of_the_dashboard_names_a_series_the_runner_exports() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let v = Scenario::load(
        &root.join("tests/fixtures/ci-summary.yaml"),
        &Overrides::default(),
    )
    .unwrap();
    let exposition = Metrics::new(&v).encode();
    let mut exported: BTreeSet<String> = BTreeSet::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        match kind {
            "counter" => {
                exported.insert(format!("{name}_total"));
            }
            "histogram" => {
                for s in ["_bucket", "_sum", "_count"] {
                    exported.insert(format!("{name}{s}"));
                }
            }
            _ => {
                exported.insert(name.to_string());
            }
        }
    }
    // Written once the first bucket of latencies is in (none before).
    exported.insert("faultline_sut_latency_seconds".into());

    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("docs/grafana/faultline.json")).unwrap(),
    )
    .unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queries.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for t in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = t["query"].as_str() {
            queries.push(q.to_string());
        }
    }
    assert!(queries.len() >= 9, "{queries:?}");
    let mut used = BTreeSet::new();
    for q in &queries {
        let names = names_in(q);
        assert!(!names.is_empty() || !q.contains("faultline"), "{q}");
        for n in names {
            assert!(
                exported.contains(&n),
                "{n} (in {q}) is not exported; exported: {exported:?}"
            );
            used.insert(n);
        }
    }
    // The panels the dashboard promises.
    for n in [
        "faultline_sut_latency_seconds",
        "faultline_sut_latency_histogram_seconds_bucket",
        "faultline_requests_total",
        "faultline_dependency_in_flight_calls",
        "faultline_dependency_pool_limit_calls",
        "faultline_breaker_state",
        "faultline_expectation_status",
    ] {
        assert!(used.contains(n), "no panel uses {n}");
    }
}
