//! A real Pushgateway (Debian `prometheus-pushgateway`) receives `faultline run --push` at the end of a short run
//! against the demo (tests/fixtures/prometheus-breaker.yaml at time scale 0.5: 8 s, the breaker opens and stays
//! open); read back through its JSON API (`GET /api/v1/metrics`), the group `job=faultline, scenario=<name>`
//! holds result.json's final values: the request totals by class, each verdict, the breaker's last state and
//! the run's length.

use crate::hardening;
use crate::peers;

use hardening::Scratch;
use peers::Peer;
use serde_json::Value;

#[test]
fn the_pushgateway_holds_the_final_totals_verdicts_and_breaker_state_of_the_run() {
    let gateway = Peer::start(
        "prometheus-pushgateway",
        "prometheus-pushgateway",
        // Debian's default persists every group to /var/lib/prometheus: keep them in memory only.
        |_, port| {
            vec![
                format!("--web.listen-address=127.0.0.1:{port}").into(),
                "--persistence.file=".into(),
            ]
        },
        "/-/ready",
    );
    let scratch = Scratch::new("real-pushgateway");
    let report = scratch.path("report");
    let result = peers::run_breaker_fixture(
        &report,
        &[
            "--push".into(),
            format!("http://127.0.0.1:{}", gateway.port),
        ],
    );

    let (status, body) = gateway
        .get("/api/v1/metrics")
        .expect("the Pushgateway answers");
    assert_eq!(status, 200, "{body}");
    let api: Value = serde_json::from_str(&body).unwrap();
    let groups = api["data"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{body}");
    let group = &groups[0];
    assert_eq!(group["last_push_successful"], true, "{body}");
    // Each sample of a family: its labels and value.
    let family = |name: &str| -> Vec<(Value, f64)> {
        let f = &group[name];
        assert!(f.is_object(), "no {name} in {body}");
        f["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                assert_eq!(m["labels"]["job"], "faultline");
                assert_eq!(m["labels"]["scenario"], "prometheus-breaker");
                (
                    m["labels"].clone(),
                    m["value"].as_str().unwrap().parse().unwrap(),
                )
            })
            .collect()
    };
    let single = |name: &str| {
        let samples = family(name);
        assert_eq!(samples.len(), 1, "{name}: {samples:?}");
        samples[0].1
    };

    let totals = &result["totals"];
    assert_eq!(
        single("faultline_offered_requests_total"),
        totals["intended"].as_f64().unwrap()
    );
    assert_eq!(
        single("faultline_sent_requests_total"),
        totals["sent"].as_f64().unwrap()
    );
    assert_eq!(
        single("faultline_sut_in_flight_requests"),
        totals["still_in_flight"].as_f64().unwrap()
    );
    let by_class = family("faultline_requests_total");
    let outcomes = totals["outcomes"].as_object().unwrap();
    assert_eq!(by_class.len(), outcomes.len(), "{by_class:?}");
    for (labels, n) in &by_class {
        let class = labels["class"].as_str().unwrap();
        assert_eq!(Some(*n), outcomes[class].as_f64(), "{class}");
    }
    assert!(outcomes["fallback"].as_f64().unwrap() > 0.0);
    assert_eq!(
        single("faultline_elapsed_seconds"),
        result["scenario"]["duration_s"].as_f64().unwrap()
    );

    let verdicts = result["verdicts"].as_array().unwrap();
    let statuses = family("faultline_expectation_status");
    assert_eq!(statuses.len(), verdicts.len(), "{statuses:?}");
    for v in verdicts {
        let (_, status) = statuses
            .iter()
            .find(|(l, _)| l["expectation"] == v["id"])
            .unwrap_or_else(|| panic!("no status for {}", v["id"]));
        let want = match v["outcome"].as_str() {
            Some("pass") => 1.0,
            Some("fail") => 2.0,
            other => panic!("{}: outcome {other:?}", v["id"]),
        };
        assert_eq!(*status, want, "{}", v["id"]);
    }

    // The breaker's last transition in result.json is the opening; the pushed state is open (1).
    let last = result["breakers"]["pricing"]["observed"]["transitions"]
        .as_array()
        .unwrap()
        .last()
        .expect("the breaker changed state")
        .clone();
    assert_eq!(last["to"], "open");
    let breaker = family("faultline_breaker_state");
    assert_eq!(breaker.len(), 1);
    assert_eq!(breaker[0].0["breaker"], "pricing");
    assert_eq!(breaker[0].1, 1.0);

    // The histogram holds every answered request: as many as the phases' latency distributions in result.json.
    let hist = &group["faultline_sut_latency_histogram_seconds"];
    assert_eq!(hist["type"], "HISTOGRAM", "{body}");
    let count: f64 = hist["metrics"][0]["count"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let answered: f64 = result["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["sut_latency"]["count"].as_f64().unwrap())
        .sum();
    assert!(count > 0.0);
    assert_eq!(count, answered, "{hist}");
}
