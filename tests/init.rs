//! `faultline init` as a new user meets it: the scenario it writes for a service faultline did not build (a gRPC
//! service in Python whose breaker is pybreaker's, tests/services/python_grpc) validates as written and runs to a
//! verdict; flags that cannot make a scenario, and a file that exists, are refused with exit code 2.
//!
//! grpcio and pybreaker are not vendored. Without them the run fails, saying what to install; it never skips:
//! `python3 -m venv VENV && VENV/bin/pip install grpcio pybreaker`, then `FAULTLINE_PYTHON=VENV/bin/python`
//! (default `python3`).

use crate::hardening;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use hardening::*;

fn faultline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn said(out: &Output) -> String {
    format!(
        "exit {:?}\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_scenario_init_writes_for_a_python_grpc_service_validates_and_runs_to_a_verdict() {
    require_python_with_grpcio_and_pybreaker();
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".into());
    let service =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/services/python_grpc/prices.py");
    let command = shlex::try_join([python.as_str(), &service.display().to_string()]).unwrap();
    let scratch = Scratch::new("init-grpc");
    let file = scratch.path("prices.yaml");
    let file = file.to_str().unwrap();
    let out = faultline(&[
        "init",
        "--command",
        &command,
        "--dependency-env",
        "PRICING_URL",
        "--grpc",
        "shop.Prices/Get",
        "--message",
        "0a023432",
        "-o",
        file,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(said(&out).contains("faultline run"), "{}", said(&out));
    let out = faultline(&["validate", file]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));

    // Half the time, the same counts: the service's own 200 ms timeout and 1 s reset are far inside the bounds.
    let report = scratch.path("report");
    let out = faultline(&[
        "run",
        file,
        "--time-scale",
        "0.5",
        "--report-dir",
        report.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let result = result_json(&report);
    let verdicts = result["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 3, "{result}");
    for v in verdicts {
        assert_eq!(v["outcome"], "pass", "{}", v["sentence"]);
    }
    assert_eq!(result["unmatched"]["calls"], 0, "{}", result["unmatched"]);
    // The breaker was read from the traffic: it opened while the dependency failed, and closed after.
    let sentences: Vec<&str> = verdicts
        .iter()
        .filter_map(|v| v["sentence"].as_str())
        .collect();
    assert!(
        sentences
            .iter()
            .any(|s| s.contains("opened") && s.contains("inferred from traffic")),
        "{sentences:?}"
    );
}

#[test]
fn flags_that_make_no_scenario_and_an_existing_file_are_refused() {
    let out = faultline(&["init"]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("--command"), "{}", said(&out));
    let out = faultline(&["init", "--command", "./svc", "--grpc", "Get"]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("shop.Prices/Get"), "{}", said(&out));
    let out = faultline(&["init", "--command", "./svc", "--name", "a/b"]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("no slashes"), "{}", said(&out));

    let scratch = Scratch::new("init-exists");
    let file = scratch.write("mine.yaml", "# my own scenario\n");
    let file = file.to_str().unwrap();
    let out = faultline(&["init", "--url", "http://127.0.0.1:8080", "-o", file]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("--force"), "{}", said(&out));
    assert_eq!(
        std::fs::read_to_string(file).unwrap(),
        "# my own scenario\n"
    );
    let out = faultline(&[
        "init",
        "--url",
        "http://127.0.0.1:8080",
        "-o",
        file,
        "--force",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let written = std::fs::read_to_string(file).unwrap();
    assert!(written.contains("listen: \"127.0.0.1:9000\""), "{written}");
    // Printed without -o, or with `-o -`: the same scenario, and no file named `-`.
    let out = faultline(&["init", "--url", "http://127.0.0.1:8080"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), written);
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(["init", "--url", "http://127.0.0.1:8080", "-o", "-"])
        .current_dir(scratch.path("."))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), written);
    assert!(!scratch.path("-").exists());
}
