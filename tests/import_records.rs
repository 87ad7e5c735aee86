//! `faultline import` on records that tools written by others kept of a real run: nginx's own access log (Debian
//! `nginx` as the SUT in front of the embedded faultd), and the OTLP/JSON trace export (opentelemetry-sdk with its
//! OTLP JSON file exporter) and HAR file of a small Python service in front of it (tests/records/
//! traced_service.py). Each test runs the same 12 s scenario with a brownout (the dependency from ~10 ms to
//! ~160 ms with 10% 503s between 4 s and 8 s), imports the record with `--replay-load`, replays it against the same
//! kind of SUT and a fresh faultd, and checks the replay against the record:
//! - arrivals: the requests the replay offered in each second are the record's, within 1% (or one request, for
//!   one that falls on a bucket's edge);
//! - the dependency: faultd's served p50 and p99 over each detected phase (its buckets' histograms added up)
//!   within 5% or 2 ms (`FLOOR_MS`) of the record's over the phase, widened by the sampling of a draw: faultd draws
//!   each call's latency from its bucket's recorded histogram, so its p99 over n calls lies between the record's
//!   values of ranks 0.99 n -+ 3 sqrt(0.0099 n), each anywhere in its 2% bin of the importer's histogram (see
//!   `sampling_band`). The brownout's latencies are uniform over 150-170 ms, so that band is narrow where it
//!   matters. A call the host held up is not a longer draw: on a shared 2-core machine faultd can be kept from
//!   answering for several ms (CI saw a healthy p99, the second-slowest of 183 calls, 5.4 ms over the band with
//!   the two tests run one at a time). faultd keeps its own lateness per call (`late` in dependency.json: how long
//!   after its draw was due each call left), and a call's served latency is its draw plus that lateness; so with
//!   k calls over `FLOOR_MS` late the served value of rank r is at most the draw of rank r + k plus `FLOOR_MS`,
//!   and the band's upper rank moves up by k;
//! - the phases: the detected `degraded-1` and `recovered` begin within one bucket (1 s) of the original's, or
//!   further from the brownout by the seconds next to it in which the record itself holds a call slower than twice
//!   the healthy p99 (a host stall: the importer's rule calls a second with two such calls degraded, rightly, and
//!   one such call not; the allowance takes any second with one, and a lone second between two such, which the
//!   importer's rule joins to them). A stall that moves `recovered` later is a level of its own, `degraded-2`,
//!   beginning within a bucket of the brownout's end (CI saw one: seconds 8-10 of a record, a stalled call at 10);
//! - the verdicts: the original scenario's expectations, with its phase names replaced by the detected ones, give
//!   the same verdicts on the replay (the SUTs have no breaker: these are the SUT's error share and latency).
//!
//! Each tool that is missing fails its test with what to install. With `FAULTLINE_KEEP_RECORDS=DIR` the original
//! records are copied to DIR (scenarios/traces/brownout.* are such copies).

mod hardening;
mod peers;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use faultline::scenario::{Overrides, Scenario, Validated};
use hardening::{result_json, Scratch};
use serde_json::Value;

/// Held by each test for its whole length: the served latencies are compared within a few ms, so the two tests'
/// SUTs, runners and faultds do not share the machine's two cores with each other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// How far faultd's served latency may stray from the record's besides the sampling of a draw (the lower bound
/// of a quantile's slack, 5% above it), and how late a call faultd answered must be to count as held up by the host.
const FLOOR_MS: f64 = 2.0;

/// The original run's shape: brownout from 4 s to 8 s of 12 s.
const BROWNOUT: f64 = 4.0;
const RECOVERED: f64 = 8.0;

/// The scenario the records are taken from; `SUT` is replaced by the SUT's block.
const ORIGINAL: &str = r#"name: NAME
description: the record's run
duration: 12s
seed: 1
dependency:
  routes:
    dep: { path: /**, latency: { uniform: [8ms, 12ms] } }
  phases:
    - { name: healthy, at: 0s }
    - { name: brownout, at: 4s, routes: { dep: { latency: { uniform: [150ms, 170ms] }, errors: [ { share: 10%, status: 503 } ] } } }
    - { name: recovered, at: 8s, routes: { dep: healthy } }
sut:
  SUT
load:
  rate: 50/s
  timeout: 5s
  requests: [ { get: "/item/{rand:1..500}?page={rand:1..3}" } ]
EXPECT"#;

/// The expectations of both runs, with `BROWNOUT` and `RECOVERED` standing for the phase names. faultd draws each
/// bucket's errors at the bucket's share, so the replay's count over the phase is binomial: ~200-250 calls at a
/// share of 7-10% (the detected phase may begin with a bucket that is mostly healthy) has a standard deviation of
/// ~4 calls, and 2% is three of them below the lowest share. A request on a phase's edge may meet the behaviour
/// before it (the SUT's own latency lies between the two clocks): at 50/s that is one request in ~200, so
/// `quiet` allows 2%.
const EXPECTATIONS: &str = r#"expect:
  - { id: errors, sut_share: server_error, above: 2%, during: BROWNOUT }
  - { id: fast, sut_latency: p99, below: 50ms, during: BROWNOUT }
  - { id: quiet, sut_share: server_error, below: 2%, during: RECOVERED }
"#;

fn expectations(brownout: &str, recovered: &str) -> String {
    EXPECTATIONS
        .replace("BROWNOUT", brownout)
        .replace("RECOVERED", recovered)
}

/// What a record holds, read here without faultline: each request's arrival and each dependency call's start and
/// latency (Unix seconds, milliseconds).
struct Truth {
    arrivals: Vec<f64>,
    calls: Vec<(f64, f64)>,
}

fn faultline(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("faultline runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a scenario file to its end (exit 0 or 1: the `fast` expectation fails by design) and returns result.json.
fn run(scenario: &Path, report: &Path) -> Value {
    let (code, stdout, stderr) = faultline(&[
        "run",
        scenario.to_str().unwrap(),
        "--report-dir",
        report.to_str().unwrap(),
    ]);
    assert!(
        code == 0 || code == 1,
        "faultline run {} exited {code}:\n{stdout}\n{stderr}",
        scenario.display()
    );
    result_json(report)
}

fn verdicts(result: &Value) -> Vec<(String, bool)> {
    result["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap().to_string(),
                v["passed"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Copies a record to `$FAULTLINE_KEEP_RECORDS/NAME` when that is set.
fn keep(record: &Path, name: &str) {
    if let Some(dir) = std::env::var_os("FAULTLINE_KEEP_RECORDS") {
        let to = Path::new(&dir).join(name);
        std::fs::copy(record, &to)
            .unwrap_or_else(|e| panic!("cannot copy to {}: {e}", to.display()));
    }
}

/// Where the `q` quantile of as many draws from the sorted `record` falls, with three standard deviations of
/// sampling either side: faultd plays each bucket's recorded distribution by drawing from it, so the count of its
/// draws below the record's value of rank r is binomial, and its quantile lies between the record's values of
/// ranks `n q -+ 3 sqrt(n q (1 - q))`. The upper rank moves up by the `stalled` calls faultd answered late (see
/// the module's comment); past the record's last rank there is no upper bound.
fn sampling_band(record: &[f64], q: f64, stalled: u64) -> (f64, f64) {
    let n = record.len() as f64;
    let spread = 3.0 * (n * q * (1.0 - q)).sqrt();
    let rank = |r: f64| match r.ceil() as usize {
        r if r > record.len() => f64::INFINITY,
        r => record[r.max(1) - 1],
    };
    // The importer keeps latency in bins 2% wide and faultd draws anywhere in a call's bin: the band runs from the
    // lower edge of the low rank's bin to the upper edge of the high rank's.
    use faultline::import::{bin_of, lower_edge_us, BIN_EDGES_US};
    let bin = |ms: f64| bin_of(ms / 1e3);
    let lower = |ms: f64| lower_edge_us(bin(ms)) as f64 / 1e3;
    let upper = |ms: f64| BIN_EDGES_US[bin(ms)] as f64 / 1e3;
    let high = rank(n * q + spread + stalled as f64);
    let upper = |ms: f64| if ms.is_finite() { upper(ms) } else { ms };
    (lower(rank(n * q - spread)), upper(high))
}

/// The percentile `q` of `v`, nearest rank.
fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The original run: the scenario with `sut`, run from `dir`; returns its start (Unix seconds) and verdicts.
fn original(dir: &Scratch, sut: &str) -> (f64, Vec<(String, bool)>) {
    let yaml = ORIGINAL
        .replace("NAME", "record")
        .replace("SUT", sut)
        .replace("EXPECT", &expectations("brownout", "recovered"));
    let scenario = dir.write("original.yaml", &yaml);
    let result = run(&scenario, &dir.path("original-report"));
    let started = faultline::import::parse_time(result["started_at"].as_str().unwrap()).unwrap();
    (started, verdicts(&result))
}

/// Imports `record` with `args`, puts `sut` in the imported scenario and the original expectations under the
/// detected phases' names, replays it, and checks the replay against the record (see the module's doc).
fn replay_and_check(
    dir: &Scratch,
    record: &Path,
    args: &[&str],
    sut: &str,
    truth: &Truth,
    started: f64,
    original_verdicts: &[(String, bool)],
) {
    let imported = dir.path("imported.yaml");
    let mut all = vec!["import", record.to_str().unwrap()];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--replay-load", "-o", imported.to_str().unwrap()]);
    let (code, _, stderr) = faultline(&all);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("(validated)"), "{stderr}");
    let yaml = std::fs::read_to_string(&imported).unwrap();
    let v = Scenario::load(&imported, &Overrides::default()).unwrap();
    let from = v
        .scenario
        .load
        .replay
        .as_ref()
        .expect("a replayed load")
        .from
        .unwrap();

    // The phases: healthy, degraded-1, recovered, beginning within a bucket of the original's. A host that
    // stalls the run makes a healthy second's calls slow in the record itself, and a bucket with two calls slower
    // than twice the healthy p99 is degraded by the importer's rule: the edge may move past such buckets, and only
    // those, away from the brownout. A stall after the brownout that moves `recovered` later is a degraded level of
    // its own (its latency is far from the brownout's): `degraded-2` then begins where the brownout ended.
    let phases = phase_spans(&v);
    let names: Vec<&str> = phases.iter().map(|p| p.0.as_str()).collect();
    let stalled = stalled_buckets(truth, started, from);
    let ended = started + RECOVERED - from;
    if stalled_run(&stalled, ended.ceil() as i64, 1) > 0.0 && names.contains(&"degraded-2") {
        assert_eq!(
            names,
            ["healthy", "degraded-1", "degraded-2", "recovered"],
            "{yaml}"
        );
        let at = phases.iter().find(|p| p.0 == "degraded-2").unwrap().1;
        assert!(
            (at - ended).abs() <= 1.0,
            "degraded-2 detected at {at} s of the record, the brownout ended at {ended:.3} s (record seconds with \
             a stalled healthy call: {stalled:?})"
        );
    } else {
        assert_eq!(names, ["healthy", "degraded-1", "recovered"], "{yaml}");
    }
    for (name, original_at) in [("degraded-1", BROWNOUT), ("recovered", RECOVERED)] {
        let detected = phases.iter().find(|p| p.0 == name).unwrap().1;
        let want = started + original_at - from;
        let (early, late) = if name == "recovered" {
            (1.0, 1.0 + stalled_run(&stalled, want.ceil() as i64, 1))
        } else {
            (
                1.0 + stalled_run(&stalled, want.floor() as i64 - 1, -1),
                1.0,
            )
        };
        assert!(
            detected >= want - early && detected <= want + late,
            "{name} detected at {detected} s of the record, the original began at {want:.3} s \
             (record seconds with a stalled healthy call: {stalled:?})"
        );
    }

    // The replay: the same SUT, the original expectations under the detected names (in place of those the import
    // wrote for faultd standing in for the SUT).
    let start = yaml.find("\nsut:\n").expect("a sut section") + 1;
    let end = yaml.find("\nload:\n").expect("a load section") + 1;
    let load = yaml[end..]
        .split("\n# What the replay must reproduce")
        .next()
        .unwrap_or_default();
    let replay_yaml = format!(
        "{}sut:\n  {sut}\n\n{load}\n{}",
        &yaml[..start],
        expectations("degraded-1", "recovered")
    );
    let scenario = dir.write("replay.yaml", &replay_yaml);
    let result = run(&scenario, &dir.path("replay-report"));
    assert_eq!(result["totals"]["conserved"], true);

    // Arrivals per second of the record.
    let bucket = result["series"]["bucket_s"].as_f64().unwrap();
    let per_second = (1.0 / bucket).round() as usize;
    let offered: Vec<f64> = result["series"]["offered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap_or(0.0))
        .collect();
    let seconds = v.scenario.duration.get().as_secs_f64().round() as usize;
    for s in 0..seconds {
        let logged = truth
            .arrivals
            .iter()
            .filter(|a| ((*a - from).floor() as i64) == s as i64)
            .count() as f64;
        let sent: f64 = offered.iter().skip(s * per_second).take(per_second).sum();
        assert!(
            (sent - logged).abs() <= (logged * 0.01).max(1.0),
            "second {s}: the replay offered {sent} requests, the record has {logged}"
        );
    }
    assert_eq!(
        offered.iter().sum::<f64>(),
        truth.arrivals.len() as f64,
        "every recorded request is replayed once"
    );

    // The dependency per detected phase: what faultd served over the phase (its buckets' histograms added up)
    // against the record's calls over the same stretch.
    let route = v.scenario.dependency.routes.keys().next().unwrap().clone();
    let dependency: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path("replay-report").join("dependency.json")).unwrap(),
    )
    .unwrap();
    let histograms = dependency["routes"][&route]["latency"].as_object().unwrap();
    for (name, start, end) in &phases {
        let mut logged: Vec<f64> = truth
            .calls
            .iter()
            .filter(|(at, _)| (from + start..from + end).contains(at))
            .map(|c| c.1)
            .collect();
        logged.sort_by(f64::total_cmp);
        let over_phase = |histograms: &serde_json::Map<String, Value>| {
            let prefix = format!("{name}.");
            let mut sum = faultline_hdr::new_histogram();
            for (phase, h) in histograms {
                if phase == name || phase.starts_with(&prefix) {
                    sum.add(faultline_hdr::decode_base64(h.as_str().unwrap()).unwrap())
                        .unwrap();
                }
            }
            sum
        };
        let served = over_phase(histograms);
        // The calls faultd itself answered more than FLOOR_MS after their draw was due (see the module's comment).
        let late = over_phase(dependency["routes"][&route]["late"].as_object().unwrap());
        assert_eq!(late.len(), served.len(), "every call's lateness is kept");
        let stalled = late.len() - late.count_between(0, (FLOOR_MS * 1e6) as u64);
        for q in [0.5, 0.99] {
            let got = served.value_at_quantile(q) as f64 / 1e6;
            let (lo, hi) = sampling_band(&logged, q, stalled);
            let slack = |x: f64| (x * 0.05).max(FLOOR_MS);
            assert!(
                (lo - slack(lo)..=hi + slack(hi)).contains(&got),
                "{name} p{}: faultd served {got:.2} ms over {} calls ({stalled} of them answered over \
                 {FLOOR_MS} ms late: faultd's lateness p99 {:.2} ms, max {:.2} ms), the record's {} calls give \
                 {:.2} ms (from {lo:.2} to {hi:.2} ms for a draw of as many)",
                q * 100.0,
                served.len(),
                late.value_at_quantile(0.99) as f64 / 1e6,
                late.max() as f64 / 1e6,
                logged.len(),
                percentile(logged.clone(), q)
            );
        }
    }

    // The verdicts.
    assert_eq!(verdicts(&result), original_verdicts);
}

/// The record's whole seconds (from `from`) outside the brownout that hold a dependency call slower than twice the
/// healthy p99 (the calls before the brownout). Calls begun in the half second before the brownout may have met it
/// and count as neither.
fn stalled_buckets(truth: &Truth, started: f64, from: f64) -> Vec<i64> {
    let brownout = started + BROWNOUT - 0.5..started + RECOVERED;
    let healthy: Vec<f64> = truth
        .calls
        .iter()
        .filter(|c| c.0 < brownout.start)
        .map(|c| c.1)
        .collect();
    if healthy.is_empty() {
        return Vec::new();
    }
    let p99 = percentile(healthy, 0.99);
    let mut seconds: Vec<i64> = truth
        .calls
        .iter()
        .filter(|c| c.1 > 2.0 * p99 && !brownout.contains(&c.0))
        .map(|c| (c.0 - from).floor() as i64)
        .collect();
    seconds.sort_unstable();
    seconds.dedup();
    seconds
}

/// How many seconds from `first`, stepping by `step`, the importer may count as degraded because of `stalled`
/// seconds: consecutive stalled ones, and a lone second between two degraded ones (the importer's rule makes it
/// one of them; the second before `first` is the degraded edge).
fn stalled_run(stalled: &[i64], first: i64, step: i64) -> f64 {
    let at = |k: i64| stalled.contains(&(first + k * step));
    let mut n = 0;
    while at(n) || at(n + 1) {
        n += if at(n) { 1 } else { 2 };
    }
    n as f64
}

/// The detected phases (names without a `.k` suffix) with their start and end, seconds of the record.
fn phase_spans(v: &Validated) -> Vec<(String, f64, f64)> {
    let duration = v.scenario.duration.get().as_secs_f64();
    let starts: Vec<(String, f64)> = v
        .scenario
        .dependency
        .phases
        .iter()
        .filter(|p| !p.name.contains('.'))
        .map(|p| (p.name.clone(), p.at.get().as_secs_f64()))
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(i, (n, s))| (n.clone(), *s, starts.get(i + 1).map_or(duration, |x| x.1)))
        .collect()
}

/// The `log_format` nginx writes for import: the end time, the request's and the upstream's times and status.
const NGINX_LOG: &str = r#"$remote_addr - [$time_local] $msec "$request" $status $request_time "$upstream_addr" "$upstream_response_time" "$upstream_status""#;

/// An nginx configuration for `dir` (its port and faultd's filled in by the SUT's command through `sed`).
fn nginx_conf(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
# Root starts the master and hands the worker to an unprivileged user; run as another user this is ignored.
user nobody nogroup;
events {{ worker_connections 1024; }}
http {{
  log_format timed '{NGINX_LOG}';
  access_log {d}/access.log timed;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  upstream dependency {{ server 127.0.0.1:@FAULTD_PORT@; keepalive 64; }}
  server {{
    listen 127.0.0.1:@SUT_PORT@;
    location = /health {{ access_log off; return 200 "ok\n"; }}
    location / {{
      proxy_pass http://dependency;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_read_timeout 5s;
    }}
  }}
}}
"#
    )
}

/// The `sut:` block that starts nginx in `dir` in front of the run's faultd.
fn nginx_sut(dir: &Path) -> String {
    let nginx = peers::installed("nginx", "nginx");
    std::fs::write(dir.join("nginx.conf.in"), nginx_conf(dir)).unwrap();
    let d = dir.display();
    let shell = format!(
        "sed -e s/@FAULTD_PORT@/{{faultd.port}}/ -e s/@SUT_PORT@/{{sut.port}}/ {d}/nginx.conf.in > {d}/nginx.conf && exec {} -p {d} -c {d}/nginx.conf -e {d}/early.log",
        nginx.display()
    );
    format!(
        "{{ command: [ sh, -c, {shell:?} ], url: \"http://127.0.0.1:{{sut.port}}\", ready: /health }}"
    )
}

fn nginx_truth(log: &str) -> Truth {
    let line = regex::Regex::new(
        r#"^\S+ - \[[^\]]+\] (?P<msec>[\d.]+) "[^"]*" \d+ (?P<rt>[\d.]+) "[^"]*" "(?P<urt>[^"]*)" "[^"]*"$"#,
    )
    .unwrap();
    let mut truth = Truth {
        arrivals: Vec::new(),
        calls: Vec::new(),
    };
    for l in log.lines() {
        let c = line
            .captures(l)
            .unwrap_or_else(|| panic!("not a line of the log_format: {l}"));
        let arrival = c["msec"].parse::<f64>().unwrap() - c["rt"].parse::<f64>().unwrap();
        truth.arrivals.push(arrival);
        if let Ok(up) = c["urt"].parse::<f64>() {
            truth.calls.push((arrival, up * 1e3));
        }
    }
    truth
}

#[test]
fn nginx_access_log_replays_its_arrivals_its_dependency_per_phase_and_its_verdicts() {
    let _alone = one_at_a_time();
    let first = Scratch::new("import-nginx-record");
    let (started, verdicts) = original(&first, &nginx_sut(&first.0));
    let log = first.path("access.log");
    keep(&log, "brownout.nginx.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let truth = nginx_truth(&text);
    assert!(
        truth.arrivals.len() >= 550,
        "{} requests logged",
        truth.arrivals.len()
    );

    let second = Scratch::new("import-nginx-replay");
    let format = format!("--log-format={NGINX_LOG}");
    replay_and_check(
        &second,
        &log,
        &["--format", "nginx", &format],
        &nginx_sut(&second.0),
        &truth,
        started,
        &verdicts,
    );
}

/// The Python that has the OpenTelemetry SDK and its OTLP JSON file exporter, or a failure saying how to get it.
fn python() -> String {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args([
            "-c",
            "import opentelemetry.sdk.trace, opentelemetry.exporter.otlp.json.file",
        ])
        .output();
    assert!(
        matches!(&probe, Ok(o) if o.status.success()),
        "{python} cannot import the OpenTelemetry SDK and its OTLP JSON file exporter ({}). scripts/test sets them up in .venv; or install them: \
         `python3 -m venv VENV && VENV/bin/pip install opentelemetry-sdk opentelemetry-exporter-otlp-json-file`, \
         then set FAULTLINE_PYTHON=VENV/bin/python",
        match &probe {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        }
    );
    python
}

/// The `sut:` block of the traced Python service, keeping its records in `dir`.
fn traced_sut(dir: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/records/traced_service.py");
    let d = dir.display();
    format!(
        "{{ command: [ {:?}, {:?}, \"{{sut.port}}\", \"{{faultd.url}}\", \"{d}/trace.jsonl\", \"{d}/calls.har\" ], url: \"http://127.0.0.1:{{sut.port}}\", ready: /health }}",
        python(),
        script.display().to_string()
    )
}

fn nanos(v: &Value) -> f64 {
    v.as_str().unwrap().parse::<u64>().unwrap() as f64 / 1e9
}

fn otlp_truth(path: &Path) -> Truth {
    let mut truth = Truth {
        arrivals: Vec::new(),
        calls: Vec::new(),
    };
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let doc: Value = serde_json::from_str(line).unwrap();
        for rs in doc["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for span in ss["spans"].as_array().unwrap() {
                    let (start, end) = (
                        nanos(&span["startTimeUnixNano"]),
                        nanos(&span["endTimeUnixNano"]),
                    );
                    match span["kind"].as_u64() {
                        Some(2) => truth.arrivals.push(start),
                        Some(3) => truth.calls.push((start, (end - start) * 1e3)),
                        _ => {}
                    }
                }
            }
        }
    }
    truth
}

fn har_truth(path: &Path) -> Truth {
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut truth = Truth {
        arrivals: Vec::new(),
        calls: Vec::new(),
    };
    for e in doc["log"]["entries"].as_array().unwrap() {
        let at = faultline::import::parse_time(e["startedDateTime"].as_str().unwrap()).unwrap();
        truth.arrivals.push(at);
        truth.calls.push((at, e["time"].as_f64().unwrap()));
    }
    truth
}

/// The original run of the traced service: its records (OTLP/JSON, HAR), its start and its verdicts.
fn traced_original(dir: &Scratch) -> (PathBuf, PathBuf, f64, Vec<(String, bool)>) {
    let (started, verdicts) = original(dir, &traced_sut(&dir.0));
    (
        dir.path("trace.jsonl"),
        dir.path("calls.har"),
        started,
        verdicts,
    )
}

#[test]
fn an_opentelemetry_sdk_trace_export_and_a_har_replay_their_arrivals_dependency_and_verdicts() {
    let _alone = one_at_a_time();
    let first = Scratch::new("import-traced-record");
    let (trace, har, started, verdicts) = traced_original(&first);
    keep(&trace, "brownout.otlp.jsonl");
    keep(&har, "brownout.har");

    let truth = otlp_truth(&trace);
    assert!(
        truth.arrivals.len() >= 550,
        "{} SERVER spans",
        truth.arrivals.len()
    );
    assert_eq!(
        truth.calls.len(),
        truth.arrivals.len(),
        "a CLIENT span per request"
    );
    let second = Scratch::new("import-traced-otlp-replay");
    replay_and_check(
        &second,
        &trace,
        &["--format", "otlp-json"],
        &traced_sut(&second.0),
        &truth,
        started,
        &verdicts,
    );

    let truth = har_truth(&har);
    assert!(
        truth.arrivals.len() >= 550,
        "{} HAR entries",
        truth.arrivals.len()
    );
    let third = Scratch::new("import-traced-har-replay");
    replay_and_check(
        &third,
        &har,
        &["--format", "har"],
        &traced_sut(&third.0),
        &truth,
        started,
        &verdicts,
    );
}
