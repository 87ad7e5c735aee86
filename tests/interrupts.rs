//! Interrupting a real run: SIGINT and SIGTERM sent to `faultline run` while the SUT is starting, in the middle of
//! the load, just before the load ends, and while the last requests are still in flight. Every time: exit 130, the
//! report is written and marked aborted (`ending.kind == "aborted"` with the signal's name), no process of the
//! SUT's group is left (including a worker that ignores SIGTERM), and the dependency is back to healthy (an
//! embedded faultd ends with the process; an external one is asked over its control API).
//!
//! The SUT is a shell script that records its pid, starts a worker that ignores SIGTERM and SIGINT, and then runs
//! the faultd binary as an HTTP service (a `/health` route and a `/work/*` route with a fixed latency).
//!
//! Timing: every wait is a poll with a generous limit; the signal points are placed by what the test observes
//! (the pid file, the SUT answering /health), never by a fixed sleep from the start.

use crate::hardening;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hardening::*;

/// The load's duration. Short, but long enough that "mid-load" and "just before the end" are distinct points.
const DURATION_MS: u64 = 2000;

/// What the SUT does before it starts serving: a delay, so that a signal can land while it is starting.
struct Sut {
    start_delay: &'static str,
    work_latency: &'static str,
}

/// Writes the SUT's faultd config, the scenario, and returns (scenario path, report dir).
fn scenario(scratch: &Scratch, sut: &Sut, external: Option<&FaultdProcess>) -> (PathBuf, PathBuf) {
    scratch.write(
        "sut.yaml",
        &format!(
            "routes:\n  health: {{ path: /health }}\n  work: {{ path: /work/*, latency: {{ fixed: {} }} }}\n",
            sut.work_latency
        ),
    );
    let dir = scratch.0.display();
    let faultd = bin("faultd");
    let script = format!(
        "echo $$ > {dir}/sut.pid; (trap '' TERM INT; exec sleep 60) & echo $! > {dir}/worker.pid; \
         sleep {delay}; exec {faultd} --config {dir}/sut.yaml --listen 127.0.0.1:{{sut.port}}",
        delay = sut.start_delay,
        faultd = faultd.display(),
    );
    let external = match external {
        Some(f) => format!(
            "faultd: {{ control: \"{}\", url: \"{}\" }}\n",
            f.control, f.data
        ),
        None => String::new(),
    };
    let text = format!(
        r#"name: interrupted
duration: {DURATION_MS}ms
seed: 3
dependency:
  routes:
    pricing: {{ path: /price/*, latency: {{ fixed: 5ms }} }}
  phases:
    - {{ name: healthy, at: 0s }}
    - {{ name: brownout, at: 300ms, routes: {{ pricing: {{ latency: {{ fixed: 3s }} }} }} }}
{external}sut:
  command: [ /bin/sh, -c, "{script}" ]
  url: http://127.0.0.1:{{sut.port}}
  ready: /health
  ready_timeout: 20s
load:
  rate: 100/s
  timeout: 3s
  requests: [ {{ get: "/work/1" }} ]
"#
    );
    let path = scratch.write("scenario.yaml", &text);
    (path, scratch.path("report"))
}

/// Where in the run the signal is sent.
#[derive(Clone, Copy, Debug)]
enum Point {
    /// The SUT's process exists but does not answer yet.
    SutStarting,
    /// Half-way through the load.
    MidLoad,
    /// 100 ms before the load's planned end.
    JustBeforeTheEnd,
    /// After the timetable ended, while the last (slow) requests are still in flight.
    FinalWait,
}

struct Outcome {
    code: Option<i32>,
    result: serde_json::Value,
    stderr: String,
}

fn interrupt(name: &str, point: Point, sig: i32, external: bool) -> Outcome {
    let scratch = Scratch::new(name);
    let dependency = external.then(|| {
        let cfg = scratch.write(
            "dependency.yaml",
            "routes:\n  pricing: { path: /price/*, latency: { fixed: 5ms } }\n",
        );
        FaultdProcess::start(&cfg, &["--no-start"])
    });
    let sut = match point {
        Point::SutStarting => Sut {
            start_delay: "3",
            work_latency: "5ms",
        },
        // Requests that take 1 s leave a window of ~1 s after the timetable ends with calls still in flight.
        Point::FinalWait => Sut {
            start_delay: "0",
            work_latency: "1s",
        },
        _ => Sut {
            start_delay: "0",
            work_latency: "5ms",
        },
    };
    let (path, report) = scenario(&scratch, &sut, dependency.as_ref());
    let mut run = start_run(&path, &report, &scratch);
    let sut_pid = read_pid(&scratch.path("sut.pid"), Duration::from_secs(20));
    let worker_pid = read_pid(&scratch.path("worker.pid"), Duration::from_secs(20));
    if !matches!(point, Point::SutStarting) {
        // The load starts ~20 ms after faultline sees /health answer; the test sees it within ~10 ms of that.
        let port = sut_port(sut_pid);
        wait_until(Duration::from_secs(20), "the SUT to answer /health", || {
            http(
                "GET",
                &format!("http://127.0.0.1:{port}/health"),
                None,
                Duration::from_millis(500),
            )
            .is_some_and(|(s, _)| s == 200)
        });
    }
    let ready_at = Instant::now();
    let after_ready = match point {
        Point::SutStarting => Duration::ZERO,
        Point::MidLoad => Duration::from_millis(DURATION_MS / 2),
        Point::JustBeforeTheEnd => Duration::from_millis(DURATION_MS - 100),
        // The timetable ends at ~2,020 ms; its last requests come back at ~3,020 ms.
        Point::FinalWait => Duration::from_millis(DURATION_MS + 400),
    };
    std::thread::sleep(after_ready.saturating_sub(ready_at.elapsed()));
    assert!(
        run.0.try_wait().unwrap().is_none(),
        "faultline ended before the signal"
    );
    signal(run.pid(), sig);
    let code = run.wait_for_exit(Duration::from_secs(20));
    let stderr = std::fs::read_to_string(scratch.path("faultline.stderr")).unwrap_or_default();

    // Nothing of the SUT is left: its shell, the faultd it exec'd, and the worker that ignores SIGTERM.
    let left = live_group_members(sut_pid);
    assert!(
        left.is_empty(),
        "{point:?}: processes left in the SUT's group: {left:?}\n{stderr}"
    );
    assert!(
        !alive(worker_pid),
        "{point:?}: the worker {worker_pid} survived\n{stderr}"
    );

    if let Some(dependency) = &dependency {
        let (status, body) = http(
            "GET",
            &format!("{}/schedule", dependency.control),
            None,
            Duration::from_secs(2),
        )
        .expect("the external faultd answers");
        assert_eq!(status, 200);
        let schedule: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(schedule["state"], "healthy-reset", "{point:?}: {schedule}");
        assert_eq!(
            schedule["phase"],
            faultd::HEALTHY_RESET,
            "{point:?}: {schedule}"
        );
    }
    let result = result_json(&report);
    Outcome {
        code,
        result,
        stderr,
    }
}

/// The pid file holds the shell's pid, which `exec` turns into faultd: its command line has the port.
fn sut_port(sut_pid: i32) -> u16 {
    let mut port = 0;
    wait_until(Duration::from_secs(20), "the SUT's port", || {
        let cmdline = std::fs::read(format!("/proc/{sut_pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).to_string())
            .collect();
        port = args
            .iter()
            .position(|a| a == "--listen")
            .and_then(|i| args.get(i + 1))
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        port > 0
    });
    port
}

fn assert_aborted(o: &Outcome, signal_name: &str) {
    assert_eq!(o.code, Some(130), "exit code; stderr:\n{}", o.stderr);
    assert_eq!(
        o.result["ending"]["kind"], "aborted",
        "{}",
        o.result["ending"]
    );
    assert_eq!(o.result["ending"]["signal"], signal_name);
    assert_eq!(o.result["exit_code"], 130);
    assert_eq!(o.result["passed"], false);
    assert_eq!(
        o.result["totals"]["conserved"], true,
        "an aborted run still accounts for every request: {}",
        o.result["totals"]
    );
}

fn sent(o: &Outcome) -> u64 {
    o.result["totals"]["sent"].as_u64().unwrap()
}

#[test]
fn sigint_while_the_sut_is_starting_stops_it_and_writes_an_empty_aborted_report() {
    let o = interrupt("int-starting", Point::SutStarting, libc::SIGINT, false);
    assert_aborted(&o, "SIGINT");
    assert_eq!(sent(&o), 0, "no load before the SUT was ready");
}

#[test]
fn sigterm_while_the_sut_is_starting_stops_it_and_writes_an_empty_aborted_report() {
    let o = interrupt("term-starting", Point::SutStarting, libc::SIGTERM, false);
    assert_aborted(&o, "SIGTERM");
    assert_eq!(sent(&o), 0);
}

#[test]
fn sigint_mid_load_keeps_what_was_recorded_and_resets_the_external_faultd() {
    let o = interrupt("int-mid", Point::MidLoad, libc::SIGINT, true);
    assert_aborted(&o, "SIGINT");
    // 100/s for ~1 s before the signal: some were sent, and far fewer than the full 200.
    let n = sent(&o);
    assert!(n > 0 && n < 200, "sent {n}");
}

#[test]
fn sigterm_mid_load_keeps_what_was_recorded() {
    let o = interrupt("term-mid", Point::MidLoad, libc::SIGTERM, false);
    assert_aborted(&o, "SIGTERM");
    let n = sent(&o);
    assert!(n > 0 && n < 200, "sent {n}");
}

#[test]
fn sigint_just_before_the_end_still_ends_aborted_and_resets_the_external_faultd() {
    let o = interrupt("int-late", Point::JustBeforeTheEnd, libc::SIGINT, true);
    assert_aborted(&o, "SIGINT");
    assert!(sent(&o) > 100, "sent {}", sent(&o));
}

#[test]
fn sigterm_just_before_the_end_still_ends_aborted() {
    let o = interrupt("term-late", Point::JustBeforeTheEnd, libc::SIGTERM, false);
    assert_aborted(&o, "SIGTERM");
    assert!(sent(&o) > 100, "sent {}", sent(&o));
}

#[test]
fn sigint_while_the_last_requests_are_in_flight_keeps_the_whole_recording() {
    let o = interrupt("int-final", Point::FinalWait, libc::SIGINT, false);
    assert_aborted(&o, "SIGINT");
    // The timetable had ended: every one of its 200 arrivals was sent and is in the report.
    assert_eq!(sent(&o), 200, "{}", o.result["totals"]);
}

#[test]
fn sigterm_while_the_last_requests_are_in_flight_keeps_the_whole_recording_and_resets_the_external_faultd(
) {
    let o = interrupt("term-final", Point::FinalWait, libc::SIGTERM, true);
    assert_aborted(&o, "SIGTERM");
    assert_eq!(sent(&o), 200, "{}", o.result["totals"]);
}
