//! A dependency served by two faultd replicas behind one Service: two `faultd` processes on free loopback ports,
//! Debian's HAProxy in front of them (`mode http`, `balance roundrobin`), and `faultline run` with the demo SUT
//! calling HAProxy's address while `faultd.replicas` names both control APIs. The merged recording must add up to
//! what each replica recorded alone and to what loadgen sent, each replica must have taken about half, and every
//! report must read the maximum in flight as an upper bound. A replica that cannot be reached stops the run with
//! exit code 3, naming it.
//!
//! Needs `apt-get install -y haproxy` (the test fails, never skips, without it) and the faultd binary
//! (`cargo build --release -p faultd`).

use crate::hardening;
use crate::peers;

use std::ffi::OsString;
use std::time::Duration;

use hardening::{http, result_json, run_to_end, FaultdProcess, Scratch};
use peers::{free_port, Peer};
use serde_json::Value;

/// What each replica is started with; the run replaces it with the scenario's `dependency` section.
const REPLICA_CONFIG: &str = "routes:\n  pricing: { path: /price/*, latency: { fixed: 5ms } }\n";

/// The scenario: 3 s at 100 requests a second, every request one call to pricing (the demo's only operation), a
/// dependency that never fails, so no breaker opens and no fallback replaces a call.
fn scenario(service: &str, controls: &[&str]) -> String {
    format!(
        r#"name: replicas
duration: 3s
seed: 11
faultd:
  url: {service}
  replicas: [{controls}]
dependency:
  routes:
    pricing: {{ path: /price/*, latency: {{ fixed: 5ms }} }}
  phases:
    - {{ name: healthy, at: 0s }}
    - {{ name: busy, at: 1500ms, routes: {{ pricing: {{ latency: {{ fixed: 30ms }} }} }} }}
sut:
  demo:
    operations:
      pricing: {{ timeout: 1s, pool: 50, fallback: stale }}
load:
  rate: 100/s
  timeout: 2s
  requests: [ {{ get: "/product/{{rand:1..100}}" }} ]
  fallback_header: X-Fallback
expect:
  - {{ id: pool, dependency: pricing, max_in_flight_below: 50 }}
"#,
        controls = controls.join(", ")
    )
}

/// HAProxy in front of the replicas' data ports: one frontend on a free loopback port, round robin per request.
fn haproxy(backends: &[&str]) -> Peer {
    let servers: String = backends
        .iter()
        .enumerate()
        .map(|(i, url)| {
            format!(
                "  server replica{} {}\n",
                i + 1,
                url.trim_start_matches("http://")
            )
        })
        .collect();
    Peer::start(
        "haproxy",
        "haproxy",
        |dir, port| {
            let config = dir.write(
                "haproxy.cfg",
                &format!(
                    "global\n  maxconn 1000\n\
                     defaults\n  mode http\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
                     frontend service\n  bind 127.0.0.1:{port}\n  monitor-uri /haproxy-health\n  default_backend replicas\n\
                     backend replicas\n  balance roundrobin\n{servers}"
                ),
            );
            vec![
                OsString::from("-f"),
                config.into_os_string(),
                OsString::from("-db"),
            ]
        },
        "/haproxy-health",
    )
}

/// A replica's own recording, as its control API serves it.
fn own_recording(control: &str) -> faultd::Recording {
    let (status, body) = http(
        "GET",
        &format!("{control}/recording"),
        None,
        Duration::from_secs(5),
    )
    .expect("the replica answers");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn two_replicas_behind_haproxy_merge_into_one_recording_with_an_upper_bound_in_flight() {
    let scratch = Scratch::new("replicas");
    let config = scratch.write("replica.yaml", REPLICA_CONFIG);
    let replicas = [
        FaultdProcess::start(&config, &["--no-start"]),
        FaultdProcess::start(&config, &["--no-start"]),
    ];
    let data: Vec<&str> = replicas.iter().map(|r| r.data.as_str()).collect();
    let controls: Vec<&str> = replicas.iter().map(|r| r.control.as_str()).collect();
    let proxy = haproxy(&data);
    let service = format!("http://127.0.0.1:{}", proxy.port);
    let path = scratch.write("scenario.yaml", &scenario(&service, &controls));
    let report = scratch.path("report");

    let out = run_to_end(&path, &report);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{stderr}\nhaproxy:\n{}",
        proxy.log()
    );
    let result = result_json(&report);

    // What loadgen saw: every request answered in full, none from a fallback, so one call each at pricing.
    let sent = result["totals"]["sent"].as_u64().unwrap();
    assert!(sent >= 250, "3 s at 100/s: {sent}");
    assert_eq!(result["totals"]["outcomes"]["ok"], sent, "{result:#}");

    // What each replica recorded alone, read from its own control API after the run.
    let own: Vec<faultd::Recording> = controls.iter().map(|c| own_recording(c)).collect();
    let arrivals: Vec<u64> = own
        .iter()
        .map(|r| r.routes["pricing"].totals.arrivals)
        .collect();
    let merged: faultd::Recording =
        serde_json::from_str(&std::fs::read_to_string(report.join("dependency.json")).unwrap())
            .unwrap();
    let total = arrivals.iter().sum::<u64>();
    assert_eq!(merged.routes["pricing"].totals.arrivals, total);
    // result.json counts the calls in the run's buckets on the replicas' clocks, which start when the start request
    // arrives, within a round trip of t = 0: a last call held up past the run's end would be in dependency.json
    // only.
    let in_run = result["dependency"]["pricing"]["arrivals"]
        .as_u64()
        .unwrap();
    assert!(
        in_run <= total && total - in_run <= 2,
        "{in_run} of {total}"
    );
    assert_eq!(
        total, sent,
        "every request the SUT was sent made one call to pricing, through HAProxy to one replica"
    );
    for (i, n) in arrivals.iter().enumerate() {
        let share = *n as f64 / total as f64;
        assert!(
            (0.4..=0.6).contains(&share),
            "replica {} took {n} of {total} calls: round robin gives each about half",
            i + 1
        );
        assert_eq!(
            result["dependency_replicas"]["replicas"][i]["routes"]["pricing"]["arrivals"],
            *n
        );
        assert_eq!(
            result["dependency_replicas"]["replicas"][i]["control"],
            controls[i]
        );
    }
    // Completions and served latency add exactly; the maximum in flight is the sum of the replicas' own.
    let completed = |r: &faultd::Recording| r.routes["pricing"].totals.completed.c2xx;
    assert_eq!(completed(&merged), own.iter().map(completed).sum::<u64>());
    for phase in ["healthy", "busy"] {
        let served = |r: &faultd::Recording| r.routes["pricing"].latency[phase].len();
        assert_eq!(
            served(&merged),
            own.iter().map(served).sum::<u64>(),
            "{phase}"
        );
    }
    let peaks: Vec<u64> = own
        .iter()
        .map(|r| r.routes["pricing"].max_in_flight)
        .collect();
    let route = &merged.routes["pricing"];
    assert_eq!(route.max_in_flight, peaks.iter().sum::<u64>());
    assert_eq!(route.max_in_flight_lower_bound, peaks.iter().max().copied());
    assert_eq!(merged.replicas, 2);
    assert!(merged.in_flight_max_is_upper_bound);
    assert_eq!(
        merged
            .phases_entered
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        vec!["healthy", "busy"]
    );

    // Every report reads the maximum in flight as an upper bound.
    let pricing = &result["dependency"]["pricing"];
    assert_eq!(pricing["max_in_flight_is_upper_bound"], true);
    assert_eq!(pricing["max_in_flight"], route.max_in_flight);
    assert_eq!(result["dependency_replicas"]["count"], 2);
    let spread = result["dependency_replicas"]["start_spread_ms_at_most"]
        .as_f64()
        .unwrap();
    eprintln!("the replicas' schedules started at most {spread:.2} ms apart");
    assert!((0.0..1_000.0).contains(&spread), "{spread}");
    let verdict = &result["verdicts"][0]["sentence"];
    let expected = format!(
        "calls in flight at pricing peaked at most at {} ",
        route.max_in_flight
    );
    assert!(
        verdict.as_str().unwrap().starts_with(&expected)
            && verdict
                .as_str()
                .unwrap()
                .contains("(sum of 2 replicas' peaks, an upper bound)"),
        "{verdict}"
    );
    let summary = std::fs::read_to_string(report.join("summary.txt")).unwrap();
    assert!(
        summary.contains("Dependency (measured by 2 faultd replicas, their recordings merged)")
            && summary.contains(&format!(
                "calls in flight peaked at most at {} (sum of 2 replicas' peaks, an upper bound",
                route.max_in_flight
            )),
        "{summary}"
    );
    let page = std::fs::read_to_string(report.join("report.html")).unwrap();
    assert!(page.contains("\"in_flight_upper_bound\":\"sum of 2 replicas' peaks, an upper bound\""));
    assert!(
        stdout.contains("sum of 2 replicas' peaks, an upper bound"),
        "{stdout}"
    );

    // The run left every replica back at its base behaviour.
    for c in &controls {
        let (_, body) = http(
            "GET",
            &format!("{c}/schedule"),
            None,
            Duration::from_secs(5),
        )
        .unwrap();
        let schedule: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(schedule["state"], "healthy-reset", "{c}: {schedule}");
    }
}

#[test]
fn a_replica_that_cannot_be_reached_stops_the_run_with_exit_3_naming_it() {
    let scratch = Scratch::new("replica-down");
    let config = scratch.write("replica.yaml", REPLICA_CONFIG);
    let up = FaultdProcess::start(&config, &["--no-start"]);
    let down = format!("http://127.0.0.1:{}", free_port());
    let path = scratch.write(
        "scenario.yaml",
        &scenario(&up.data, &[up.control.as_str(), down.as_str()]),
    );
    let out = run_to_end(&path, &scratch.path("report"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("{down}/config")), "{stderr}");
    assert!(
        !stderr.contains(&format!("{}/config", up.control)),
        "{stderr}"
    );
}
