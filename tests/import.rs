//! `faultline import` on records it did not write: a synthetic nginx access log of a brownout (generated here, so
//! every figure the test checks is known exactly), the fixture logs of each format, and bad input.
//!
//! The round trip imports the brownout, runs the scenario it wrote against the bundled demo with the embedded
//! faultd, and checks that what faultd served and what loadgen offered match the log.

use std::path::{Path, PathBuf};
use std::process::Command;

use faultline::import::{import, Format, ImportOptions, PhaseMode};
use faultline::scenario::{Overrides, Scenario};
use serde_json::Value;

/// The `log_format` of the synthetic log: arrival-independent end time ($msec), the request's and the upstream's
/// times, the upstream's address and status.
const LOG_FORMAT: &str = r#"$remote_addr - [$time_local] $msec "$request" $status $request_time "$upstream_addr" "$upstream_response_time" "$upstream_status""#;

/// 2026-10-10T13:55:00Z.
const T0: f64 = 1_791_640_500.0;
const SECONDS: usize = 30;
const PER_SECOND: usize = 100;

/// The dependency's latency in ms for request `i` of second `s`: 20 ms healthy, 400 ms in the brownout
/// (seconds 10 to 19), each spread over +0..18% by `i`.
fn upstream_ms(s: usize, i: usize) -> f64 {
    let base = if (10..20).contains(&s) { 400.0 } else { 20.0 };
    base * (1.0 + (i % 10) as f64 * 0.02)
}

/// 10% of the brownout's calls fail with 503.
fn upstream_status(s: usize, i: usize) -> u16 {
    if (10..20).contains(&s) && i % 10 == 3 {
        503
    } else {
        200
    }
}

fn clf(t: f64) -> String {
    // T0 is 13:55:00 on 10 Oct 2026; the log's seconds stay inside the hour.
    let secs = (t - T0).floor() as u64;
    format!(
        "10/Oct/2026:13:{:02}:{:02} +0000",
        55 + secs / 60,
        secs % 60
    )
}

/// The brownout's log, in the order nginx writes it (by end time).
fn brownout_log() -> String {
    let mut lines: Vec<(f64, String)> = Vec::new();
    for s in 0..SECONDS {
        for i in 0..PER_SECOND {
            let arrival = T0 + s as f64 + i as f64 / PER_SECOND as f64 + 0.005;
            let up = upstream_ms(s, i) / 1e3;
            let req = up + 0.001;
            let end = arrival + req;
            let status = upstream_status(s, i);
            let id = (s * PER_SECOND + i) % 1000 + 1;
            lines.push((
                end,
                format!(
                    r#"127.0.0.1 - [{}] {end:.3} "GET /product/{id} HTTP/1.1" {status} {req:.3} "127.0.0.1:9000" "{up:.3}" "{status}""#,
                    clf(end)
                ),
            ));
        }
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    lines.into_iter().map(|(_, l)| l + "\n").collect()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("faultline-import-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn nginx_options(speed: f64, bucket: f64) -> ImportOptions {
    ImportOptions {
        format: Format::Nginx,
        log_format: Some(LOG_FORMAT.into()),
        bucket,
        speed,
        name: Some("brownout".into()),
        phases: PhaseMode::Buckets,
        ..ImportOptions::default()
    }
}

/// The percentile `q` of a list of values, nearest rank.
fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

#[test]
fn a_brownout_log_becomes_a_valid_scenario_with_its_rates_phases_and_histograms() {
    let dir = tmp("model");
    let log = dir.join("access.log");
    std::fs::write(&log, brownout_log()).unwrap();
    let imported = import(std::slice::from_ref(&log), &nginx_options(1.0, 1.0)).unwrap();
    assert_eq!(
        (imported.lines, imported.records, imported.bad),
        (3000, 3000, 0)
    );
    let scenario = dir.join("brownout.yaml");
    std::fs::write(&scenario, &imported.yaml).unwrap();
    let v = Scenario::load(&scenario, &Overrides::default())
        .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
    let s = &v.scenario;
    assert_eq!(s.duration.to_string(), "30s");

    // The phases: one per bucket, named after the change points the brownout makes.
    let names: Vec<(String, String)> = s
        .dependency
        .phases
        .iter()
        .map(|p| (p.name.clone(), p.at.to_string()))
        .collect();
    assert_eq!(names.len(), SECONDS);
    assert_eq!(names[0], ("healthy".into(), "0s".into()));
    assert_eq!(names[9], ("healthy.9".into(), "9s".into()));
    assert_eq!(names[10], ("degraded-1".into(), "10s".into()));
    assert_eq!(names[20], ("recovered".into(), "20s".into()));

    // The load: 100 arrivals in every second of the record, so one rate, then nothing.
    let rate = serde_json::to_value(&s.load.rate).unwrap();
    assert_eq!(
        rate,
        serde_json::json!([ { "at": "0s", "rate": "100/s" }, { "at": "30s", "rate": "0/s" } ])
    );
    // One template: the product ids seen, as a range.
    let requests = serde_json::to_value(&s.load.requests).unwrap();
    assert_eq!(requests[0]["get"], "/product/{rand:1..1000}");
    assert_eq!(requests.as_array().unwrap().len(), 1);

    // The dependency in second 12: its histogram plays the log's percentiles back within a 2% bin, and 10% 503s.
    let route = "dependency";
    let phase = &s.dependency.phases[12];
    let faultd::config::PhaseRoute::Set(b) = &phase.routes[route] else {
        panic!("second 12 sets the route");
    };
    let model = b.latency.as_ref().unwrap().model().unwrap();
    // Every call of the second, the 503s too (they waited as long: nginx timed them the same way).
    let recorded: Vec<f64> = (0..PER_SECOND).map(|i| upstream_ms(12, i)).collect();
    for q in [0.5, 0.9, 0.99] {
        let want = percentile(recorded.clone(), q);
        let got = model.quantile(q).as_secs_f64() * 1e3;
        assert!(
            (got - want).abs() / want <= 0.03,
            "p{}: played {got} ms, recorded {want} ms",
            q * 100.0
        );
    }
    let errors = serde_json::to_value(&b.errors).unwrap();
    assert_eq!(
        errors,
        serde_json::json!([ { "share": "10%", "status": 503 } ])
    );
    // A healthy second has no error.
    let faultd::config::PhaseRoute::Set(h) = &s.dependency.phases[3].routes[route] else {
        panic!("second 3 sets the route");
    };
    assert_eq!(
        serde_json::to_value(&h.errors).unwrap(),
        serde_json::json!([])
    );
    assert!(imported.yaml.contains("# expect:"), "{}", imported.yaml);
}

#[test]
fn found_phases_play_each_phase_whole_and_bound_what_the_stand_in_reproduces() {
    let dir = tmp("found");
    let log = dir.join("access.log");
    std::fs::write(&log, brownout_log()).unwrap();
    let options = ImportOptions {
        phases: PhaseMode::Found,
        ..nginx_options(1.0, 1.0)
    };
    let imported = import(std::slice::from_ref(&log), &options).unwrap();
    let scenario = dir.join("brownout.yaml");
    std::fs::write(&scenario, &imported.yaml).unwrap();
    let v = Scenario::load(&scenario, &Overrides::default())
        .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
    let s = &v.scenario;
    let names: Vec<(String, String)> = s
        .dependency
        .phases
        .iter()
        .map(|p| (p.name.clone(), p.at.to_string()))
        .collect();
    assert_eq!(names, brownout_phases("10s", "20s"));
    // degraded-1 plays its ten seconds' calls together: their percentiles within a 2% bin, and 10% 503s.
    let faultd::config::PhaseRoute::Set(b) = &s.dependency.phases[1].routes["dependency"] else {
        panic!("degraded-1 sets the route");
    };
    let model = b.latency.as_ref().unwrap().model().unwrap();
    let recorded: Vec<f64> = (10..20)
        .flat_map(|s| (0..PER_SECOND).map(move |i| upstream_ms(s, i)))
        .collect();
    for q in [0.5, 0.99] {
        let want = percentile(recorded.clone(), q);
        let got = model.quantile(q).as_secs_f64() * 1e3;
        assert!((got - want).abs() / want <= 0.03, "p{q}: {got} vs {want}");
    }
    assert_eq!(
        serde_json::to_value(&b.errors).unwrap(),
        serde_json::json!([ { "share": "10%", "status": 503 } ])
    );
    // faultd stands in for the service, and each phase's 5xx share and p99 are bounded: below 1% where it plays
    // no 5xx, above the low end of the draw's band where it plays 10% (1,000 requests and the ~2 of healthy
    // answered in it: (100 - 3 x 9.49) / 1002); after the brownout, its last ~48 requests (100/s times its slowest,
    // 480 ms) answer in `recovered`, so its 5xx share may reach 1.1% and its p99 the brownout's slowest.
    assert_eq!(s.sut.url.as_deref(), Some("{faultd.url}"));
    assert_eq!(v.expectations.len(), 6, "{}", imported.yaml);
    assert!(
        imported
            .yaml
            .contains("sut_share: server_error, above: 7.136%, during: degraded-1"),
        "{}",
        imported.yaml
    );
    for line in [
        "sut_share: server_error, below: 1%, during: healthy }   # faultd plays no 5xx",
        "sut_share: server_error, below: 1.1%, during: recovered }",
        "sut_latency: p99, below: 507ms, during: recovered }",
    ] {
        assert!(imported.yaml.contains(line), "{line}\n{}", imported.yaml);
    }
}

#[test]
fn speed_and_scale_rate_compress_time_and_multiply_the_load() {
    let dir = tmp("speed");
    let log = dir.join("access.log");
    std::fs::write(&log, brownout_log()).unwrap();
    let mut o = nginx_options(2.0, 1.0);
    o.scale_rate = 3.0;
    let imported = import(std::slice::from_ref(&log), &o).unwrap();
    let scenario = dir.join("fast.yaml");
    std::fs::write(&scenario, &imported.yaml).unwrap();
    let v = Scenario::load(&scenario, &Overrides::default()).unwrap();
    assert_eq!(v.scenario.duration.to_string(), "15s");
    assert_eq!(v.scenario.dependency.phases[10].at.to_string(), "5s");
    let rate = serde_json::to_value(&v.scenario.load.rate).unwrap();
    assert_eq!(rate[0]["rate"], "600/s");
    let faultd::config::PhaseRoute::Set(b) = &v.scenario.dependency.phases[12].routes["dependency"]
    else {
        panic!("second 12 sets the route");
    };
    let p50 = b
        .latency
        .as_ref()
        .unwrap()
        .model()
        .unwrap()
        .quantile(0.5)
        .as_secs_f64()
        * 1e3;
    let want = percentile((0..PER_SECOND).map(|i| upstream_ms(12, i)).collect(), 0.5) / 2.0;
    assert!((p50 - want).abs() / want <= 0.03, "{p50} vs {want}");
}

fn faultline(args: &[&str], cwd: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("faultline runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/import/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Imports a fixture with the CLI into `dir/out.yaml` (which the command validates) and loads it.
fn import_fixture(dir: &Path, args: &[&str]) -> (faultline::scenario::Validated, String) {
    let out = dir.join("out.yaml");
    let mut all: Vec<&str> = vec!["import"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", out.to_str().unwrap()]);
    let (code, _, stderr) = faultline(&all, dir);
    assert_eq!(code, 0, "{args:?}: {stderr}");
    assert!(stderr.contains("(validated)"), "{stderr}");
    let yaml = std::fs::read_to_string(&out).unwrap();
    (Scenario::load(&out, &Overrides::default()).unwrap(), yaml)
}

fn phase_starts(v: &faultline::scenario::Validated) -> Vec<(String, String)> {
    v.scenario
        .dependency
        .phases
        .iter()
        .filter(|p| !p.name.contains('.'))
        .map(|p| (p.name.clone(), p.at.to_string()))
        .collect()
}

/// The phases of a record with one degraded stretch from `degraded` to `recovered`.
fn brownout_phases(degraded: &str, recovered: &str) -> Vec<(String, String)> {
    vec![
        ("healthy".into(), "0s".into()),
        ("degraded-1".into(), degraded.into()),
        ("recovered".into(), recovered.into()),
    ]
}

fn behaviour<'a>(
    v: &'a faultline::scenario::Validated,
    phase: usize,
    route: &str,
) -> &'a faultd::Behaviour {
    match v.scenario.dependency.phases[phase].routes[route].set() {
        Some(b) => b,
        None => panic!("phase {phase} leaves {route} healthy"),
    }
}

#[test]
fn the_combined_format_without_upstreams_gives_the_load_the_phases_and_a_placeholder_dependency() {
    let dir = tmp("combined");
    let (v, yaml) = import_fixture(&dir, &[&fixture("nginx-combined.log"), "--format", "nginx"]);
    assert!(yaml.contains("holds no dependency information"), "{yaml}");
    assert!(v.scenario.dependency.routes.contains_key("dependency"));
    // Seconds 3 and 4 answered 60% 503s: the SUT's own errors make the phases.
    assert_eq!(phase_starts(&v), brownout_phases("3s", "5s"));
    let requests = serde_json::to_value(&v.scenario.load.requests).unwrap();
    assert_eq!(
        requests[0]["get"],
        "/api/items/{rand:100..129}?page={rand:1..5}"
    );
    assert!(
        yaml.contains("sut_share: server_error, above: 48%, during: degraded-1"),
        "{yaml}"
    );

    let (redacted, _) = import_fixture(
        &dir,
        &[
            &fixture("nginx-combined.log"),
            "--format",
            "nginx",
            "--redact",
        ],
    );
    let requests = serde_json::to_value(&redacted.scenario.load.requests).unwrap();
    assert_eq!(requests[0]["get"], "/api/items/{rand:100..129}");
}

#[test]
fn import_json_tells_what_was_read_and_holds_the_scenario_when_no_file_does() {
    let dir = tmp("json");
    let log = fixture("nginx-combined.log");
    let (code, stdout, stderr) = faultline(&["import", &log, "--format", "nginx", "--json"], &dir);
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(json["format"], "nginx");
    assert!(json["requests"].as_u64().unwrap() > 0, "{json:#}");
    assert_eq!(json["scenario"], serde_json::Value::Null);
    let phases: Vec<(&str, f64)> = json["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["from_s"].as_f64().unwrap()))
        .collect();
    assert_eq!(
        phases,
        [("healthy", 0.0), ("degraded-1", 3.0), ("recovered", 5.0)]
    );
    let yaml = json["yaml"].as_str().expect("the scenario in `yaml`");
    assert!(yaml.contains("holds no dependency information"), "{yaml}");

    let out = dir.join("json.yaml");
    let (code, stdout, stderr) = faultline(
        &[
            "import",
            &log,
            "--format",
            "nginx",
            "--json",
            "-o",
            out.to_str().unwrap(),
        ],
        &dir,
    );
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(json["scenario"], out.to_str().unwrap());
    assert!(json.get("yaml").is_none(), "{json:#}");
    assert!(Scenario::load(&out, &Overrides::default()).is_ok());
}

#[test]
fn envoy_and_haproxy_default_logs_give_a_route_per_upstream_with_its_timeouts() {
    let dir = tmp("envoy");
    let (v, _) = import_fixture(
        &dir,
        &[
            &fixture("envoy.log"),
            "--format",
            "envoy",
            "--phases",
            "buckets",
        ],
    );
    assert_eq!(phase_starts(&v), brownout_phases("2s", "4s"));
    // Second 2: one call in five timed out upstream (UT), played as a hang.
    let b = behaviour(&v, 2, "dependency");
    assert_eq!(b.hang.map(|h| h.0.to_string()), Some("20%".to_string()));

    let dir = tmp("haproxy");
    let (v, _) = import_fixture(
        &dir,
        &[
            &fixture("haproxy.log"),
            "--format",
            "haproxy",
            "--phases",
            "buckets",
        ],
    );
    assert_eq!(phase_starts(&v)[1], ("degraded-1".into(), "2s".into()));
    let b = behaviour(&v, 2, "reviews");
    assert_eq!(b.hang.map(|h| h.0.to_string()), Some("20%".to_string()));
    let p50 = b.latency.as_ref().unwrap().model().unwrap().quantile(0.5);
    assert!(
        (p50.as_secs_f64() - 0.9).abs() < 0.9 * 0.03,
        "the backend's Tr, 900 ms: {p50:?}"
    );
}

#[test]
fn a_har_file_gives_a_route_per_host_with_its_failed_connections() {
    let dir = tmp("har");
    let (v, _) = import_fixture(
        &dir,
        &[
            &fixture("pricing.har"),
            "--format",
            "har",
            "--phases",
            "buckets",
        ],
    );
    assert_eq!(phase_starts(&v), brownout_phases("2s", "4s"));
    let b = behaviour(&v, 2, "pricing-local");
    assert_eq!(b.reset.map(|r| r.0.to_string()), Some("20%".to_string()));
    let p50 = b.latency.as_ref().unwrap().model().unwrap().quantile(0.5);
    assert!((p50.as_secs_f64() - 0.6025).abs() < 0.6 * 0.03, "{p50:?}");
    let requests = serde_json::to_value(&v.scenario.load.requests).unwrap();
    assert_eq!(requests[0]["get"], "/price/{rand:1..30}");
}

const CUSTOM: &str = r"^ts=(?P<time>\S+) method=(?P<method>\S+) path=(?P<path>\S+) status=(?P<status>\d+) took=(?P<duration>\S+) dep=(?P<upstream>\S+) dep_took=(?P<upstream_duration>\S+)$";

#[test]
fn a_regex_with_named_groups_reads_a_custom_log() {
    let dir = tmp("regex");
    let format = format!("regex:{CUSTOM}");
    let (v, _) = import_fixture(
        &dir,
        &[
            &fixture("custom.log"),
            "--format",
            &format,
            "--phases",
            "buckets",
        ],
    );
    assert_eq!(phase_starts(&v), brownout_phases("3s", "5s"));
    let requests = serde_json::to_value(&v.scenario.load.requests).unwrap();
    assert_eq!(requests[0]["post"], "/checkout");
    let p50 = behaviour(&v, 4, "payments")
        .latency
        .as_ref()
        .unwrap()
        .model()
        .unwrap()
        .quantile(0.5);
    assert!((p50.as_secs_f64() - 0.3).abs() < 0.3 * 0.03, "{p50:?}");
}

fn custom_lines(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "ts={:.3} method=GET path=/x/{i} status=200 took=0.012 dep=db dep_took=0.010\n",
                T0 + i as f64 * 0.01
            )
        })
        .collect()
}

#[test]
fn a_few_bad_lines_are_skipped_and_named_but_more_than_one_percent_fail_with_exit_2() {
    let dir = tmp("bad");
    let format = format!("regex:{CUSTOM}");
    let few = dir.join("few.log");
    std::fs::write(
        &few,
        custom_lines(150) + "garbage in the middle\n" + &custom_lines(150),
    )
    .unwrap();
    let (code, stdout, stderr) = faultline(
        &["import", few.to_str().unwrap(), "--format", &format],
        &dir,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("skipped 1 of 301 lines"), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:151:", few.display())),
        "{stderr}"
    );
    assert!(
        stdout.contains("dependency:"),
        "the scenario goes to stdout"
    );

    let many = dir.join("many.log");
    std::fs::write(
        &many,
        custom_lines(50) + "bad one\n" + &custom_lines(10) + "bad two\n",
    )
    .unwrap();
    let (code, _, stderr) = faultline(
        &["import", many.to_str().unwrap(), "--format", &format],
        &dir,
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("{}:51: not a regex log line", many.display())),
        "{stderr}"
    );
    assert!(stderr.contains("2 of 62 lines are bad"), "{stderr}");

    let (code, _, stderr) = faultline(
        &["import", many.to_str().unwrap(), "--format", "nginx"],
        &dir,
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("no line of") && stderr.contains("nginx"),
        "{stderr}"
    );
}

#[test]
fn an_empty_file_a_missing_file_and_an_unknown_format_exit_2_with_a_reason() {
    let dir = tmp("empty");
    let empty = dir.join("empty.log");
    std::fs::write(&empty, "\n\n").unwrap();
    let (code, _, stderr) = faultline(
        &["import", empty.to_str().unwrap(), "--format", "nginx"],
        &dir,
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("empty.log is empty"), "{stderr}");
    let (code, _, stderr) = faultline(&["import", "nope.log", "--format", "nginx"], &dir);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot read nope.log"), "{stderr}");
    let (code, _, stderr) = faultline(
        &["import", empty.to_str().unwrap(), "--format", "apache"],
        &dir,
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown format `apache`"), "{stderr}");
    let (code, _, stderr) = faultline(
        &[
            "import",
            empty.to_str().unwrap(),
            "--format",
            "regex:(?P<path>x)",
        ],
        &dir,
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("(?P<time>"), "{stderr}");
}

/// The speed of the round trip: the 30 s record plays in 7.5 s, every latency divided by 4.
const SPEED: f64 = 4.0;

/// How late this machine wakes a sleeping thread while `f` runs: a thread sleeps 1 ms at a time and records each
/// overshoot. Returns `f`'s result, the median overshoot and the median over whole seconds of each second's
/// largest, in ms: what any delay served on this machine (faultd's included) can be late by, at its median and
/// near the top of a second's worth of calls. On a quiet machine both are a fraction of a millisecond; when the
/// host takes the CPU away (steal time) they grow, and a served latency with them.
fn with_lateness<T>(f: impl FnOnce() -> T) -> (T, f64, f64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut late: Vec<(u64, f64)> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let before = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                let over = before.elapsed().saturating_sub(Duration::from_millis(1));
                late.push((start.elapsed().as_secs(), over.as_secs_f64() * 1e3));
            }
            late
        })
    };
    let out = f();
    stop.store(true, Ordering::Relaxed);
    let late = probe.join().expect("the lateness probe ends");
    let median = percentile(late.iter().map(|(_, l)| *l).collect(), 0.5);
    let mut worst_per_second: std::collections::BTreeMap<u64, f64> = Default::default();
    for (s, l) in late {
        let w = worst_per_second.entry(s).or_default();
        *w = w.max(l);
    }
    let worst = percentile(worst_per_second.into_values().collect(), 0.5);
    (out, median, worst)
}

#[test]
fn a_replayed_brownout_serves_the_logs_latency_per_phase_and_offers_its_arrivals() {
    let dir = tmp("roundtrip");
    let log = dir.join("access.log");
    std::fs::write(&log, brownout_log()).unwrap();
    let imported = import(std::slice::from_ref(&log), &nginx_options(SPEED, 1.0)).unwrap();
    let scenario = dir.join("brownout.yaml");
    std::fs::write(&scenario, &imported.yaml).unwrap();
    let report = dir.join("report");
    let ((code, stdout, stderr), late_median, late_worst) = with_lateness(|| {
        faultline(
            &[
                "run",
                scenario.to_str().unwrap(),
                "--report-dir",
                report.to_str().unwrap(),
            ],
            &dir,
        )
    });
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("result.json")).unwrap())
            .unwrap();
    assert_eq!(result["totals"]["conserved"], true);

    // The dependency, per phase found in the log: faultd's p50 and p99 (the median over the phase's buckets, each
    // a phase of its own) against the log's over the phase, divided by the speed. Tolerance: 5% or 2 ms for the
    // median; 5% or 5 ms for p99, since a sleep on a loaded 2-core machine overshoots by a few ms now and then;
    // above, each plus how late this machine woke a sleeping thread during the run (its median for p50, its
    // typical worst per second for p99, which is near the top of a second's 100 calls): a delay cannot be served
    // more exactly than the host schedules it.
    eprintln!("sleep lateness during the run: median {late_median:.2} ms, worst per second (median over seconds) {late_worst:.2} ms");
    let phases = result["phases"].as_array().unwrap();
    for (name, seconds) in [
        ("healthy", 0..10),
        ("degraded-1", 10..20),
        ("recovered", 20..30),
    ] {
        let prefix = format!("{name}.");
        let served: Vec<&Value> = phases
            .iter()
            .filter(|p| p["name"] == name || p["name"].as_str().unwrap().starts_with(&prefix))
            .map(|p| &p["dependency_latency"]["dependency"])
            .collect();
        assert_eq!(served.len(), 10, "{name}: one phase per second of the log");
        let logged: Vec<f64> = seconds
            .flat_map(|s| (0..PER_SECOND).map(move |i| upstream_ms(s, i) / SPEED))
            .collect();
        for (q, key, slack, late) in [
            (0.5, "p50_ms", 2.0, late_median),
            (0.99, "p99_ms", 5.0, late_worst),
        ] {
            let want = percentile(logged.clone(), q);
            let got = percentile(
                served.iter().map(|v| v[key].as_f64().unwrap()).collect(),
                0.5,
            );
            // Lateness only ever adds: it widens the bound above, not below.
            let tolerance = (want * 0.05).max(slack);
            assert!(
                got >= want - tolerance && got <= want + tolerance + late,
                "{name} {key}: faultd served {got:.2} ms, the log says {want:.2} ms (sleep lateness: median \
                 {late_median:.2} ms, worst per second {late_worst:.2} ms)"
            );
        }
    }

    // The load: 100 arrivals per second of the log, played 4x faster. Counted by intended send time in windows of
    // two logged seconds (0.5 s, five 100 ms buckets), each within 1% of the log's 200.
    let bucket = result["series"]["bucket_s"].as_f64().unwrap();
    assert!((bucket - 0.1).abs() < 1e-9, "{bucket}");
    let offered: Vec<f64> = result["series"]["offered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap_or(0.0))
        .collect();
    for w in 0..SECONDS / 2 {
        let n: f64 = offered.iter().skip(w * 5).take(5).sum();
        assert!(
            (n - 200.0).abs() <= 2.0,
            "window {w}: {n} arrivals offered, the log has 200"
        );
    }
    assert_eq!(offered.iter().sum::<f64>(), (SECONDS * PER_SECOND) as f64);
}

#[test]
fn replay_load_writes_every_request_beside_the_scenario_in_arrival_order() {
    let dir = tmp("timetable");
    let log = dir.join("access.log");
    std::fs::write(&log, brownout_log()).unwrap();
    let out = dir.join("brownout.yaml");
    let format = format!("--log-format={LOG_FORMAT}");
    let (code, _, stderr) = faultline(
        &[
            "import",
            log.to_str().unwrap(),
            "--format",
            "nginx",
            &format,
            "--replay-load",
            "--speed",
            "2",
            "-o",
            out.to_str().unwrap(),
        ],
        &dir,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("3000 requests"), "{stderr}");
    let v = Scenario::load(&out, &Overrides::default()).unwrap();
    let replay = v.scenario.load.replay.as_ref().unwrap();
    assert_eq!(replay.from, Some(T0));
    assert_eq!(replay.speed, 2.0);
    assert!(v.scenario.load.rate.is_none() && v.scenario.load.requests.is_empty());
    let text = std::fs::read_to_string(dir.join("brownout.timetable")).unwrap();
    let lines: Vec<(f64, &str)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (t, rest) = l.split_once(' ').unwrap();
            (t.parse().unwrap(), rest)
        })
        .collect();
    assert_eq!(lines.len(), SECONDS * PER_SECOND);
    assert!(
        lines.windows(2).all(|w| w[0].0 <= w[1].0),
        "in arrival order"
    );
    // The log is written by end time; the timetable has each request at its arrival: second s, request i.
    for (k, (t, rest)) in lines.iter().enumerate() {
        let want =
            T0 + (k / PER_SECOND) as f64 + (k % PER_SECOND) as f64 / PER_SECOND as f64 + 0.005;
        assert!((t - want).abs() < 1.5e-3, "line {k}: {t} vs {want}");
        assert_eq!(*rest, format!("GET /product/{}", k % 1000 + 1));
    }

    let (code, _, stderr) = faultline(
        &[
            "import",
            log.to_str().unwrap(),
            "--format",
            "nginx",
            "--replay-load",
        ],
        &dir,
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("give -o FILE"), "{stderr}");
}

#[test]
fn a_record_whose_clock_jumps_by_hours_exits_2_naming_the_jump() {
    let dir = tmp("jump");
    let format = format!("regex:{CUSTOM}");
    let before = custom_lines(100);
    let after: String = custom_lines(100)
        .lines()
        .map(|l| {
            let (ts, rest) = l.trim_start_matches("ts=").split_once(' ').unwrap();
            format!("ts={:.3} {rest}\n", ts.parse::<f64>().unwrap() + 7200.0)
        })
        .collect();
    let log = dir.join("jump.log");
    std::fs::write(&log, before + &after).unwrap();
    let (code, _, stderr) = faultline(
        &["import", log.to_str().unwrap(), "--format", &format],
        &dir,
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("jump from") && stderr.contains("clock jump"),
        "{stderr}"
    );
}

#[test]
fn the_real_records_of_the_library_import_into_their_brownout() {
    // scenarios/traces/brownout.*: nginx's access log, an OTLP/JSON export of the opentelemetry-sdk and a HAR of
    // one 12 s run through a brownout from 4 s to 8 s (tests/import_records.rs made them). The record starts up
    // to a second before the run, so the brownout falls in bucket 4 and its last calls in bucket 8. Each imports
    // into its three phases, each one behaviour, with active expectations that the stand-in (faultd itself) meets.
    let traces = format!("{}/scenarios/traces", env!("CARGO_MANIFEST_DIR"));
    let nginx_format = format!("--log-format={LOG_FORMAT}");
    for args in [
        vec!["brownout.nginx.log", "--format", "nginx", &nginx_format],
        vec!["brownout.otlp.jsonl", "--format", "otlp-json"],
        vec!["brownout.har", "--format", "har"],
    ] {
        let dir = tmp(args[0]);
        let record = format!("{traces}/{}", args[0]);
        let mut all = vec![record.as_str()];
        all.extend_from_slice(&args[1..]);
        all.push("--replay-load");
        let (v, yaml) = import_fixture(&dir, &all);
        assert_eq!(phase_starts(&v), brownout_phases("4s", "9s"), "{}", args[0]);
        assert_eq!(v.scenario.dependency.phases.len(), 3, "{yaml}");
        assert_eq!(
            v.scenario.sut.url.as_deref(),
            Some("{faultd.url}"),
            "{yaml}"
        );
        // Each phase bounds the 5xx share and the p99 (over 100 requests in each).
        assert_eq!(v.expectations.len(), 6, "{yaml}");
        let route = v.scenario.dependency.routes.keys().next().unwrap();
        let p50 = behaviour(&v, 1, route)
            .latency
            .as_ref()
            .unwrap()
            .model()
            .unwrap()
            .quantile(0.5)
            .as_secs_f64();
        assert!((0.150..0.175).contains(&p50), "{}: {p50}", args[0]);
        let timetable = std::fs::read_to_string(dir.join("out.timetable")).unwrap();
        assert_eq!(
            timetable.lines().filter(|l| !l.starts_with('#')).count(),
            600
        );
    }
    // Seed 001's reviews degradation, seen by nginx: its phases too, each with what is sure to be reproduced.
    let dir = tmp("hotel-reviews");
    let record = format!("{traces}/hotel-reviews.nginx.log");
    let (v, yaml) = import_fixture(&dir, &[&record, "--format", "nginx", &nginx_format]);
    let phases = v.scenario.dependency.phases.len();
    assert!((2..=6).contains(&phases), "{phases} phases: {yaml}");
    assert!(!v.expectations.is_empty(), "{yaml}");
}

#[test]
fn a_record_of_another_log_format_exits_2_naming_the_flag_that_reads_it() {
    // The repository's nginx sample is written by a log_format of its own, not nginx's default `combined`.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (code, _, stderr) = faultline(
        &[
            "import",
            "scenarios/traces/brownout.nginx.log",
            "--format",
            "nginx",
        ],
        root,
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("brownout.nginx.log:1"), "{stderr}");
    assert!(
        stderr.contains("hint: --format nginx reads nginx's default `combined` lines"),
        "{stderr}"
    );
    assert!(stderr.contains("--log-format"), "{stderr}");
    let dir = tmp("log-format");
    let out = dir.join("brownout.yaml");
    let (code, _, stderr) = faultline(
        &[
            "import",
            "scenarios/traces/brownout.nginx.log",
            "--format",
            "nginx",
            "--log-format",
            LOG_FORMAT,
            "-o",
            out.to_str().unwrap(),
        ],
        root,
    );
    assert_eq!(code, 0, "{stderr}");
    let yaml = std::fs::read_to_string(&out).unwrap();
    // The route is named for a reader, not for the connection's port; the description names the file alone.
    assert!(yaml.contains("\n    dependency: { path: /**"), "{yaml}");
    assert!(yaml.contains("  Replay of brownout.nginx.log:"), "{yaml}");

    // As written, it runs: the load goes straight to faultd, which plays the record's three phases, and every
    // active expectation (each phase's 5xx share and p99, within a draw's sampling) holds.
    let report = dir.join("report");
    let (code, stdout, stderr) = faultline(
        &[
            "run",
            out.to_str().unwrap(),
            "--report-dir",
            report.to_str().unwrap(),
        ],
        root,
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}\n{yaml}");
    let result = crate::hardening::result_json(&report);
    let verdicts = result["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 6, "{stdout}");
    assert!(verdicts.iter().all(|v| v["passed"] == true), "{stdout}");
}

#[test]
fn a_record_on_standard_input_imports_to_standard_output() {
    let import = |args: &[&str], input: &[u8]| {
        let args: Vec<&str> = std::iter::once("import")
            .chain(args.iter().copied())
            .collect();
        let out =
            crate::hardening::with_stdin(Path::new(env!("CARGO_BIN_EXE_faultline")), &args, input);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let log = brownout_log();
    let (code, stdout, stderr) = import(
        &[
            "-",
            "--format",
            "nginx",
            "--log-format",
            LOG_FORMAT,
            "-o",
            "-",
        ],
        log.as_bytes(),
    );
    assert_eq!(code, Some(0), "{stderr}");
    Scenario::parse(&stdout, "stdin.yaml", &Overrides::default())
        .unwrap_or_else(|e| panic!("{e}\n{stdout}"));
    assert!(
        stderr.contains("read 3000 requests from 3000 lines"),
        "{stderr}"
    );
    let (code, _, stderr) = import(&["-", "--format", "nginx", "--replay-load", "-o", "-"], b"");
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("give -o FILE (not standard output)"),
        "{stderr}"
    );
    let (code, _, stderr) = import(&["-", "-", "--format", "nginx"], b"");
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("standard input (`-`) can be read once"),
        "{stderr}"
    );
}

#[test]
fn a_status_that_is_not_http_is_a_bad_line() {
    let dir = tmp("status");
    let log = dir.join("status.log");
    let lines = custom_lines(200) + &custom_lines(1).replace("status=200", "status=2100");
    std::fs::write(&log, lines).unwrap();
    let format = format!("regex:{CUSTOM}");
    let (code, _, stderr) = faultline(
        &["import", log.to_str().unwrap(), "--format", &format],
        &dir,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("2100 is not an HTTP status"), "{stderr}");
}

#[test]
fn a_record_too_long_for_its_bucket_exits_2_asking_for_a_larger_bucket() {
    // 30 s in 1 ms buckets, a phase each: 30,000 phases, more nodes than a scenario file may hold.
    let dir = tmp("large");
    let log = dir.join("long.log");
    std::fs::write(&log, custom_lines(3000)).unwrap();
    let format = format!("regex:{CUSTOM}");
    let (code, _, stderr) = faultline(
        &[
            "import",
            log.to_str().unwrap(),
            "--format",
            &format,
            "--bucket",
            "1ms",
            "--phases",
            "buckets",
        ],
        &dir,
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("larger --bucket"), "{stderr}");
}

#[test]
fn a_record_of_more_buckets_than_faultd_holds_phases_is_refused_and_imports_in_larger_buckets() {
    // One request 45 minutes before the others: in 100 ms buckets the record spans 27,031 buckets, a phase each,
    // where faultd holds 10,000; in 1 s buckets it spans 2,704.
    let mut log = String::new();
    for i in 0..30u64 {
        let stamp = if i == 10 {
            "10/Oct/2026:13:10:02".to_string()
        } else {
            format!("10/Oct/2026:13:55:{:02}", i / 5)
        };
        log.push_str(&format!(
            "10.0.0.{} - - [{stamp} +0000] \"GET /api/items/{i} HTTP/1.1\" 200 512 \"-\" \"curl/8.5.0\"\n",
            i % 5 + 1
        ));
    }
    let options = |bucket| ImportOptions {
        format: Format::Nginx,
        bucket,
        phases: PhaseMode::Buckets,
        ..ImportOptions::default()
    };
    let Err(err) = faultline::import::import_text("early.log", log.as_bytes(), &options(0.1))
    else {
        panic!("27,031 phases accepted");
    };
    assert!(err.to_string().contains("27031 buckets of 0.1 s"), "{err}");
    assert!(
        err.to_string()
            .contains("a phase per bucket, over faultd's limit of 10000"),
        "{err}"
    );
    assert!(err.to_string().contains("larger --bucket"), "{err}");
    let imported =
        faultline::import::import_text("early.log", log.as_bytes(), &options(1.0)).unwrap();
    let scenario = Scenario::parse(&imported.yaml, "early.yaml", &Overrides::default())
        .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
    assert_eq!(scenario.scenario.dependency.phases.len(), 2704);
}

#[test]
fn the_reading_half_counts_what_the_whole_import_reads() {
    let mut log = brownout_log();
    log.push_str("not a line of this format\n");
    let options = nginx_options(1.0, 1.0);
    let read = faultline::import::read_text("brownout.log", log.as_bytes(), &options).unwrap();
    let whole = faultline::import::import_text("brownout.log", log.as_bytes(), &options).unwrap();
    assert_eq!(read.lines, SECONDS * PER_SECOND + 1);
    assert_eq!(read.bad, 1);
    assert_eq!(
        (read.lines, read.records, read.bad),
        (whole.lines, whole.records, whole.bad)
    );
    let refused = faultline::import::read_text(
        "brownout.log",
        log.as_bytes(),
        &ImportOptions {
            bucket: 0.0,
            ..options
        },
    );
    assert!(
        matches!(refused, Err(faultline::import::ImportError::Option(_))),
        "{refused:?}"
    );
}
