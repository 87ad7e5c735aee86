//! A team's own service as a new user brings it (docs/your-service.md): the Express app of
//! tests/services/node_express, whose pricing breaker is opossum's and whose metrics are prom-client's (npm), is
//! started before the run, pointed at the port the scenario fixes for faultd (`dependency.listen`), and judged
//! through its own gauge. Our demo proves our expectations; a library written by others proves our observations.
//!
//! Needs Node 18 or later and `npm ci --prefix tests/services/node_express` (the test command installs it); a
//! missing `node` or `node_modules` fails the test with what to install.

use crate::hardening;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use hardening::{http, result_json, wait_until, FaultdProcess, Running, Scratch};

pub(crate) fn service_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/node_express")
}

pub(crate) fn free_port() -> u16 {
    faultline_units::port::handed_out().expect("a free loopback port")
}

/// The Express service on `port`, calling pricing at `pricing_url` + `pricing_path`, answering /health.
pub(crate) fn start_service(
    port: u16,
    pricing_url: &str,
    pricing_path: &str,
    scratch: &Scratch,
) -> Running {
    let dir = service_dir();
    assert!(
        dir.join("node_modules/opossum").is_dir(),
        "the service's packages are missing: npm ci --prefix tests/services/node_express (Node 18 or later)"
    );
    let log = std::fs::File::create(scratch.path("service.log")).unwrap();
    let child = Command::new("node")
        .arg(dir.join("server.js"))
        .env("PORT", port.to_string())
        .env("PRICING_URL", pricing_url)
        .env("PRICING_PATH", pricing_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start node ({e}): install Node.js 18 or later with npm")
        });
    let service = Running(child);
    let health = format!("http://127.0.0.1:{port}/health");
    wait_until(
        Duration::from_secs(20),
        "the service answers /health",
        || http("GET", &health, None, Duration::from_secs(1)).is_some_and(|(s, _)| s == 200),
    );
    service
}

/// `faultline run` of the service's scenario with faultd on `faultd_port` and the SUT on `sut_port`.
fn run(faultd_port: u16, sut_port: u16, report: &Path) -> Output {
    run_file(
        &service_dir().join("scenario.yaml"),
        faultd_port,
        sut_port,
        report,
    )
}

/// `faultline run` of `scenario`, whose `${FAULTD_PORT}` and `${SUT_PORT}` are the ports given.
pub(crate) fn run_file(scenario: &Path, faultd_port: u16, sut_port: u16, report: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_faultline"))
        .arg("run")
        .arg(scenario)
        .arg("--report-dir")
        .arg(report)
        .env("FAULTD_PORT", faultd_port.to_string())
        .env("SUT_PORT", sut_port.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// What a run that must exit 0 printed, its result.json, and the calls that arrived at `pricing`.
fn passed(out: &Output, report: &Path) -> (String, serde_json::Value, u64) {
    let printed = text_of(out);
    assert_eq!(out.status.code(), Some(0), "{printed}");
    let result = result_json(report);
    let arrivals = result["dependency"]["pricing"]["arrivals"]
        .as_u64()
        .unwrap_or_else(|| panic!("no pricing arrivals in result.json: {result}"));
    (printed, result, arrivals)
}

pub(crate) fn text_of(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn an_express_service_with_an_opossum_breaker_started_before_the_run_is_judged_through_a_fixed_dependency_port(
) {
    let scratch = Scratch::new("own-service-node");
    let (faultd_port, sut_port) = (free_port(), free_port());
    let _service = start_service(
        sut_port,
        &format!("http://127.0.0.1:{faultd_port}"),
        "/price/",
        &scratch,
    );
    let report = scratch.path("report");
    let out = run(faultd_port, sut_port, &report);
    let (printed, result, arrivals) = passed(&out, &report);
    assert!(
        arrivals > 100,
        "the service's calls reached faultd on the fixed port: {arrivals}"
    );
    assert_eq!(result["unmatched"]["calls"], 0, "{printed}");
    let transitions = result["breakers"]["pricing"]["observed"]["transitions"]
        .as_array()
        .unwrap();
    let seen = |to: &str| {
        transitions
            .iter()
            .any(|t| t["to"] == to && t["source"] == "metrics")
    };
    assert!(
        seen("open") && seen("closed"),
        "opossum's gauge showed it open and closed again: {transitions:?}"
    );
    for verdict in result["verdicts"].as_array().unwrap() {
        assert_eq!(verdict["outcome"], "pass", "{}", verdict["sentence"]);
    }
}

#[test]
fn a_service_that_calls_the_wrong_path_gets_a_warning_naming_the_paths_that_matched_no_route() {
    let scratch = Scratch::new("own-service-node-wrong-path");
    let (faultd_port, sut_port) = (free_port(), free_port());
    let _service = start_service(
        sut_port,
        &format!("http://127.0.0.1:{faultd_port}"),
        "/prices/",
        &scratch,
    );
    let report = scratch.path("report");
    let out = run(faultd_port, sut_port, &report);
    let printed = text_of(&out);
    // Every call is answered 404 and the breaker never opens: the run fails, and says why.
    assert_eq!(out.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains("matched no route") && printed.contains("GET /prices/"),
        "the warning names the unmatched paths: {printed}"
    );
    let summary = std::fs::read_to_string(report.join("summary.txt")).unwrap();
    assert!(summary.contains("matched no route"), "{summary}");
    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    assert!(
        html.contains("Calls that matched no route") && html.contains("/prices/"),
        "report.html shows the unmatched paths"
    );
    let result = result_json(&report);
    let unmatched = &result["unmatched"];
    assert!(unmatched["calls"].as_u64().unwrap() > 100, "{unmatched}");
    let top = unmatched["paths"].as_array().unwrap();
    assert!(
        top.iter()
            .all(|p| p["method"] == "GET" && p["path"].as_str().unwrap().starts_with("/prices/")),
        "{unmatched}"
    );
    assert!(top.len() <= 20, "{unmatched}");
    assert_eq!(result["dependency"]["pricing"]["arrivals"], 0);
    // The scenario's `unmatched_calls_at_most: 0` fails and names where the calls went.
    let covered = result["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "covered")
        .expect("a verdict for `covered`");
    assert_eq!(covered["outcome"], "fail", "{covered}");
    let sentence = covered["sentence"].as_str().unwrap();
    assert!(
        sentence.contains("reached the dependency on no route (GET /prices/")
            && sentence.ends_with("expected at most 0: FAIL"),
        "{sentence}"
    );
}

#[test]
fn a_faultd_started_without_a_configuration_answers_404_until_a_runner_drives_it() {
    let scratch = Scratch::new("own-service-node-bare-faultd");
    // No --config: the data plane serves nothing yet, and counts what it was asked for.
    let faultd = FaultdProcess::start_with(&[]);
    let (status, _) = http(
        "GET",
        &format!("{}/price/1", faultd.data),
        None,
        Duration::from_secs(2),
    )
    .expect("faultd answers before it is configured");
    assert_eq!(status, 404);
    let (_, recording) = http(
        "GET",
        &format!("{}/recording", faultd.control),
        None,
        Duration::from_secs(2),
    )
    .unwrap();
    let recording: serde_json::Value = serde_json::from_str(&recording).unwrap();
    assert_eq!(recording["unmatched"], 1, "{recording}");

    let sut_port = free_port();
    let _service = start_service(sut_port, &faultd.data, "/price/", &scratch);
    // The service's scenario, with the faultd started above in place of the embedded one.
    let text = std::fs::read_to_string(service_dir().join("scenario.yaml")).unwrap();
    let listen = "  listen: 127.0.0.1:${FAULTD_PORT:-9000}\n";
    assert!(text.contains(listen));
    let text = text.replace(listen, "").replacen(
        "dependency:\n",
        &format!(
            "faultd: {{ control: {}, url: {} }}\ndependency:\n",
            faultd.control, faultd.data
        ),
        1,
    );
    let scenario = scratch.write("scenario.yaml", &text);
    let report = scratch.path("report");
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .arg("run")
        .arg(&scenario)
        .arg("--report-dir")
        .arg(&report)
        .env("SUT_PORT", sut_port.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, _, arrivals) = passed(&out, &report);
    assert!(arrivals > 100, "the runner configured faultd: {arrivals}");
}
