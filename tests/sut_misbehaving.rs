//! A service under test that misbehaves, end to end through `faultline run` with a command SUT: one that never
//! becomes ready, one that dies in the middle of the run, one that answers bytes that are not HTTP, and one that
//! never answers. faultline must say what happened (exit 3 and the SUT's last output lines where the SUT broke),
//! keep what it recorded, count bad answers in the right outcome class, end on time, and leave no process behind.
//!
//! The SUTs are shell scripts around the faultd binary, which serves /health and a /work route whose behaviour
//! (malformed, hang) makes it a misbehaving service.

use crate::hardening;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hardening::*;

/// A scenario with a command SUT; `script` is a shell script (it may use {sut.port} and {dir}).
fn scenario(
    scratch: &Scratch,
    duration: &str,
    timeout: &str,
    ready_timeout: &str,
    script: &str,
) -> PathBuf {
    let script = script.replace("{dir}", &scratch.0.display().to_string());
    scratch.write(
        "scenario.yaml",
        &format!(
            r#"name: misbehaving
duration: {duration}
seed: 5
dependency:
  routes:
    pricing: {{ path: /price/*, latency: {{ fixed: 5ms }} }}
  phases:
    - {{ name: healthy, at: 0s }}
sut:
  command: [ /bin/sh, -c, "{script}" ]
  url: http://127.0.0.1:{{sut.port}}
  ready: /health
  ready_timeout: {ready_timeout}
load:
  rate: 100/s
  timeout: {timeout}
  requests: [ {{ get: "/work/1" }} ]
"#
        ),
    )
}

/// A faultd config for the SUT: /health answers, /work does `work`.
fn sut_config(scratch: &Scratch, work: &str) {
    scratch.write(
        "sut.yaml",
        &format!("routes:\n  health: {{ path: /health }}\n  work: {{ path: /work/*, {work} }}\n"),
    );
}

fn faultd_cmd() -> String {
    format!(
        "{} --config {{dir}}/sut.yaml --listen 127.0.0.1:{{sut.port}}",
        bin("faultd").display()
    )
}

#[test]
fn a_sut_that_never_becomes_ready_fails_with_exit_3_naming_the_url_and_its_last_lines() {
    let scratch = Scratch::new("never-ready");
    let path = scenario(
        &scratch,
        "2s",
        "1s",
        "1s",
        "echo $$ > {dir}/sut.pid; echo loading the catalogue; echo waiting for a lock that never comes; exec sleep 60",
    );
    let report = scratch.path("report");
    let started = Instant::now();
    let out = run_to_end(&path, &report);
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("not ready at http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(stderr.contains("/health within 1s"), "{stderr}");
    assert!(
        stderr.contains("waiting for a lock that never comes"),
        "{stderr}"
    );
    // The readiness deadline is 1 s; the SUT is stopped with SIGTERM (sleep obeys it). Startup and the stop add a
    // few hundred ms; 10 s would mean the deadline was not enforced.
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    let pid = read_pid(&scratch.path("sut.pid"), Duration::from_secs(1));
    assert!(
        live_group_members(pid).is_empty(),
        "the SUT was left running"
    );
}

#[test]
fn a_sut_that_dies_mid_run_ends_it_with_exit_3_its_last_lines_and_the_buckets_recorded_until_then()
{
    let scratch = Scratch::new("dies");
    sut_config(&scratch, "latency: { fixed: 5ms }");
    // faultd serves, and 1.5 s after the start a watchdog prints its last words and kills it.
    let script = format!(
        "echo $$ > {{dir}}/sut.pid; (sleep 1.5; echo 'fatal: the connection pool is exhausted'; kill -KILL $$) & exec {}",
        faultd_cmd()
    );
    let path = scenario(&scratch, "6s", "1s", "10s", &script);
    let report = scratch.path("report");
    let out = run_to_end(&path, &report);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let result = result_json(&report);
    assert_eq!(result["ending"]["kind"], "sut_died", "{}", result["ending"]);
    let last = result["ending"]["last_lines"].as_str().unwrap();
    assert!(
        last.contains("fatal: the connection pool is exhausted"),
        "{last}"
    );
    for file in ["summary.txt", "junit.xml"] {
        let text = std::fs::read_to_string(report.join(file)).unwrap();
        assert!(
            text.contains("fatal: the connection pool is exhausted"),
            "{file} lacks the SUT's last lines:\n{text}"
        );
    }
    // What was recorded until the death is kept: 100/s for ~1.5 s of the planned 6 s, bucket by bucket.
    let offered = result["series"]["offered"].as_array().unwrap();
    let buckets_with_load = offered
        .iter()
        .filter(|n| n.as_u64().unwrap_or(0) > 0)
        .count();
    assert!(
        (5..50).contains(&buckets_with_load),
        "{buckets_with_load} buckets with load (100 ms each) for a SUT that lived ~1.5 s of 6 s"
    );
    let ok = result["totals"]["outcomes"]["ok"].as_u64().unwrap_or(0);
    assert!(
        ok > 50,
        "the answers before the death are kept: {}",
        result["totals"]
    );
    assert_eq!(result["totals"]["conserved"], true, "{}", result["totals"]);
    let pid = read_pid(&scratch.path("sut.pid"), Duration::from_secs(1));
    assert!(
        live_group_members(pid).is_empty(),
        "the SUT's group was left running"
    );
}

/// Runs a SUT whose /work route misbehaves; returns (result.json, wall time from the SUT's readiness to exit, exit code).
fn run_against(
    name: &str,
    work: &str,
    duration_s: f64,
    timeout_s: f64,
) -> (serde_json::Value, Duration, Option<i32>) {
    let scratch = Scratch::new(name);
    sut_config(&scratch, work);
    let script = format!("echo $$ > {{dir}}/sut.pid; exec {}", faultd_cmd());
    let path = scenario(
        &scratch,
        &format!("{}ms", (duration_s * 1000.0) as u64),
        &format!("{}ms", (timeout_s * 1000.0) as u64),
        "10s",
        &script,
    );
    let report = scratch.path("report");
    let mut run = start_run(&path, &report, &scratch);
    let pid = read_pid(&scratch.path("sut.pid"), Duration::from_secs(20));
    let started = Instant::now();
    let code = run.wait_for_exit(Duration::from_secs(60));
    let elapsed = started.elapsed();
    assert!(
        live_group_members(pid).is_empty(),
        "the SUT was left running"
    );
    (result_json(&report), elapsed, code)
}

#[test]
fn a_sut_answering_garbage_is_counted_as_connect_error_and_the_run_ends_on_time() {
    let (result, elapsed, code) = run_against("garbage", "malformed: 100%", 1.5, 1.0);
    assert_eq!(
        code,
        Some(0),
        "no expectation, a sound run: {}",
        result["run_errors"]
    );
    assert_eq!(result["ending"]["kind"], "completed");
    let sent = result["totals"]["sent"].as_u64().unwrap();
    assert_eq!(sent, 150, "100/s for 1.5 s");
    assert_eq!(
        result["totals"]["outcomes"]["connect_error"]
            .as_u64()
            .unwrap_or(0),
        sent,
        "{}",
        result["totals"]
    );
    assert_eq!(result["totals"]["conserved"], true);
    // On time: the load's 1.5 s, plus the startup of the SUT (measured from its pid file, a few ms to readiness),
    // plus at most one client timeout (1 s) for the last requests; 3 s of slack for a loaded 2-core machine.
    assert!(
        elapsed < Duration::from_millis(1500 + 1000 + 3000),
        "took {elapsed:?}"
    );
}

#[test]
fn a_sut_that_never_answers_is_counted_as_timeout_and_the_run_ends_one_timeout_after_the_load() {
    let (result, elapsed, code) = run_against("hangs", "hang: 100%", 1.5, 1.0);
    assert_eq!(code, Some(0), "{}", result["run_errors"]);
    assert_eq!(result["ending"]["kind"], "completed");
    let sent = result["totals"]["sent"].as_u64().unwrap();
    assert_eq!(sent, 150);
    assert_eq!(
        result["totals"]["outcomes"]["timeout"]
            .as_u64()
            .unwrap_or(0),
        sent,
        "{}",
        result["totals"]
    );
    assert_eq!(result["totals"]["conserved"], true);
    // Every request waits its full 1 s timeout, the last one from 1.5 s: the run needs 2.5 s, and must not wait for
    // the hung calls beyond that (3 s of slack as above).
    assert!(
        elapsed >= Duration::from_millis(2400),
        "took {elapsed:?}: the timeouts were not waited for"
    );
    assert!(
        elapsed < Duration::from_millis(1500 + 1000 + 3000),
        "took {elapsed:?}"
    );
}
