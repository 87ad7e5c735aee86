//! A real Prometheus (Debian `prometheus`) scrapes `faultline run --metrics-listen` every 300 ms during a short run
//! against the demo (tests/fixtures/prometheus-breaker.yaml at time scale 0.5: 8 s, the dependency fails from 3 s,
//! the breaker opens about 0.5 s later); afterwards its HTTP API holds what result.json says: the request totals,
//! the breaker's opening between two consecutive scrapes, and each expectation's series ending at its verdict.
//!
//! The final values (the last requests counted, the verdicts only decided at the end) exist only once the run has
//! ended, so the run is given `--metrics-linger 10s`: the endpoint stays up until a scrape has read them (about one
//! scrape interval), and the `pool` expectation, pending until the end, must end held in Prometheus.

use crate::hardening;
use crate::peers;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

use hardening::Scratch;
use peers::{free_port, query_value, Peer};
use serde_json::Value;

/// Prometheus's scrape interval.
const SCRAPE: Duration = Duration::from_millis(300);
/// How often the runner hands its figures to the endpoint (src/run/mod.rs): a scraped state is at most this old.
const TICK: Duration = Duration::from_millis(250);
/// The scenario's `opens_within: 3s`, at the time scale of 0.5.
const OPENS_WITHIN_S: f64 = 3.0 * 0.5;

fn start_prometheus(metrics_port: u16) -> Peer {
    Peer::start(
        "prometheus",
        "prometheus",
        |dir, port| {
            let config = dir.write(
                "prometheus.yml",
                &format!(
                    "global:\n  scrape_interval: {}ms\n  scrape_timeout: 250ms\nscrape_configs:\n  - job_name: faultline\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n",
                    SCRAPE.as_millis()
                ),
            );
            [
                format!("--config.file={}", config.display()),
                format!("--storage.tsdb.path={}", dir.path("data").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
                "--log.level=warn".into(),
            ]
            .into_iter()
            .map(OsString::from)
            .collect()
        },
        "/-/ready",
    )
}

/// Waits until Prometheus scrapes the runner's address (it is down until the run starts): Prometheus hands new
/// targets to its scrape loops at most every 5 s, and a run that started before would lose its first seconds.
fn wait_for_target(prometheus: &Peer, metrics_port: u16) {
    let target = format!("127.0.0.1:{metrics_port}");
    hardening::wait_until(
        Duration::from_secs(20),
        "Prometheus to scrape the target",
        || {
            let Some((200, body)) = prometheus.get("/api/v1/targets?state=active") else {
                return false;
            };
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            v["data"]["activeTargets"]
                .as_array()
                .is_some_and(|targets| {
                    targets.iter().any(|t| {
                        t["labels"]["instance"] == target.as_str()
                            && t["lastScrape"]
                                .as_str()
                                .is_some_and(|at| !at.starts_with("0001-"))
                    })
                })
        },
    );
}

/// The `data.result` of a query to Prometheus's HTTP API (`/api/v1/query?query=...` or query_range).
fn api(prometheus: &Peer, path_and_query: &str) -> Vec<Value> {
    let (status, body) = prometheus
        .get(path_and_query)
        .unwrap_or_else(|| panic!("Prometheus did not answer {path_and_query}"));
    assert_eq!(status, 200, "{path_and_query}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{body}");
    v["data"]["result"].as_array().unwrap().clone()
}

/// Every raw sample of `selector` (as stored: one per scrape), by timestamp in milliseconds.
fn samples(prometheus: &Peer, selector: &str) -> BTreeMap<i64, f64> {
    let result = api(
        prometheus,
        &format!(
            "/api/v1/query?query={}",
            query_value(&format!("{selector}[10m]"))
        ),
    );
    assert_eq!(result.len(), 1, "{selector}: {result:?}");
    points(&result[0])
}

/// The `values` of one series of a matrix, by timestamp in milliseconds.
fn points(series: &Value) -> BTreeMap<i64, f64> {
    series["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                (p[0].as_f64().unwrap() * 1000.0).round() as i64,
                p[1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn prometheus_scraping_a_run_holds_its_totals_its_breaker_opening_and_its_verdicts() {
    let metrics_port = free_port();
    let prometheus = start_prometheus(metrics_port);
    wait_for_target(&prometheus, metrics_port);
    let scratch = Scratch::new("real-prometheus");
    let report = scratch.path("report");
    let result = peers::run_breaker_fixture(
        &report,
        &[
            "--metrics-listen".into(),
            format!("127.0.0.1:{metrics_port}"),
            "--metrics-linger".into(),
            "10s".into(),
        ],
    );

    // The totals: the last scraped value of each counter is result.json's.
    let totals = &result["totals"];
    let instant = |expr: &str| {
        let r = api(
            &prometheus,
            &format!("/api/v1/query?query={}", query_value(expr)),
        );
        assert_eq!(r.len(), 1, "{expr}: {r:?}\n{}", prometheus.log());
        r[0]["value"][1].as_str().unwrap().parse::<f64>().unwrap()
    };
    let last = |selector: &str| instant(&format!("last_over_time({selector}[10m])"));
    assert_eq!(
        last("faultline_offered_requests_total"),
        totals["intended"].as_f64().unwrap()
    );
    assert_eq!(
        last("faultline_sent_requests_total"),
        totals["sent"].as_f64().unwrap()
    );
    let outcomes = totals["outcomes"].as_object().unwrap();
    for (class, n) in outcomes {
        assert_eq!(
            last(&format!("faultline_requests_total{{class=\"{class}\"}}")),
            n.as_f64().unwrap(),
            "{class}"
        );
    }
    let sum: f64 = outcomes.values().map(|n| n.as_f64().unwrap()).sum();
    assert_eq!(
        instant("sum(last_over_time(faultline_requests_total[10m]))"),
        sum
    );
    assert_eq!(sum, totals["sent"].as_f64().unwrap());
    assert!(totals["outcomes"]["fallback"].as_f64().unwrap() > 0.0);

    // The breaker: the runner saw it open at `opened` (the demo's webhook event); the last scrape before shows it
    // not yet open, the first after shows it open, and they are consecutive scrapes. The run's time of a scrape
    // is the runner's `faultline_elapsed_seconds` in the same scrape (same timestamp).
    let opened = result["breakers"]["pricing"]["observed"]["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["to"] == "open")
        .expect("the breaker opened")["at"]
        .as_f64()
        .unwrap();
    let failing = result["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "failing")
        .unwrap()["start_s"]
        .as_f64()
        .unwrap();
    assert!(
        opened >= failing && opened <= failing + OPENS_WITHIN_S,
        "opened at {opened} s"
    );
    let elapsed = samples(&prometheus, "faultline_elapsed_seconds");
    let state = samples(&prometheus, "faultline_breaker_state{breaker=\"pricing\"}");
    let scrapes: Vec<(i64, f64, Option<f64>)> = elapsed
        .iter()
        .map(|(ts, e)| (*ts, *e, state.get(ts).copied()))
        .collect();
    let first_open = scrapes
        .iter()
        .position(|(_, _, s)| *s == Some(1.0))
        .unwrap_or_else(|| panic!("no scrape saw the breaker open: {scrapes:?}"));
    assert!(first_open > 0, "{scrapes:?}");
    let (ts0, e0, s0) = scrapes[first_open - 1];
    let (ts1, e1, _) = scrapes[first_open];
    assert_ne!(s0, Some(1.0));
    let interval = (ts1 - ts0) as f64 / 1000.0;
    assert!(
        interval < 1.5 * SCRAPE.as_secs_f64(),
        "the scrapes around the opening are {interval} s apart, not one interval: {scrapes:?}"
    );
    // 1 ms: the event's time and the tick's are read from the same clock a moment apart.
    assert!(
        e0 < opened + 0.001 && opened <= e1 + 0.001,
        "opened at {opened} s, scrapes saw the run at {e0} s (not open) and {e1} s (open)"
    );
    assert!(
        e1 - opened <= interval + TICK.as_secs_f64() + 0.001,
        "opened at {opened} s, first seen open at {e1} s"
    );
    // And so the series shows the opening where the scenario expects it, within a scrape interval and a tick.
    assert!(e1 >= failing && e1 <= failing + OPENS_WITHIN_S + interval + TICK.as_secs_f64());
    // It stays open to the end (open_for is 60 s).
    assert!(scrapes[first_open..]
        .iter()
        .all(|(_, _, s)| *s == Some(1.0)));

    // The expectations, over the whole run (query_range, one point per scrape interval): each series ends at its
    // verdict: 1 held, 2 failed. `pool` can only be judged at the end: pending until then. The points are counted
    // back from the last scrape, so the last one reads it: a grid counted from the first scrape ends up to an
    // interval before the last once the scrapes drift from their schedule (a host that stalls Prometheus), and
    // then reads the scrape before, still pending.
    let first = *elapsed.keys().next().unwrap();
    let end_ms = *elapsed.keys().last().unwrap();
    let step_ms = SCRAPE.as_millis() as i64;
    let start = (end_ms - (end_ms - first) / step_ms * step_ms) as f64 / 1000.0;
    let end = end_ms as f64 / 1000.0;
    let range = api(
        &prometheus,
        &format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={}",
            query_value("faultline_expectation_status"),
            SCRAPE.as_secs_f64()
        ),
    );
    let mut statuses: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for series in &range {
        let id = series["metric"]["expectation"]
            .as_str()
            .unwrap()
            .to_string();
        statuses.insert(id, points(series).into_values().collect());
    }
    for verdict in result["verdicts"].as_array().unwrap() {
        let id = verdict["id"].as_str().unwrap();
        let want = match verdict["outcome"].as_str() {
            Some("pass") => 1.0,
            Some("fail") => 2.0,
            other => panic!("{id}: outcome {other:?}"),
        };
        let series = &statuses[id];
        assert_eq!(series.last(), Some(&want), "{id}: {series:?}");
    }
    assert_eq!(statuses.len(), 3, "{statuses:?}");
    assert_eq!(statuses["pool"].first(), Some(&0.0), "{statuses:?}");
    assert_eq!(statuses["opens"].first(), Some(&0.0), "{statuses:?}");
}
