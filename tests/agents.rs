//! `faultline run --agents N`: the load spread over agent processes, each sending every N-th arrival of the
//! timetable from one shared t = 0, their buckets streamed back and added up. Proven against Debian's nginx, which
//! counts in its own access log what it received: four agents at 2,000 requests per second each for 20 s deliver
//! exactly the timetable's 160,000 requests (a rate this 2-core machine sustains beside the two other tests that run
//! at once; at 5,000 each it delivered 12,000 of the 20,000 a second there, so their throughput is measured under
//! bench/, not asserted here); an agent killed mid-run ends the run with exit 3, named, with the
//! others' data kept; agents started elsewhere (`loadgen agent`) register on `--agents-listen`; and a library
//! scenario is proven with two agents as with one process.

use crate::hardening;
use crate::peers;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use hardening::{result_json, signal, wait_until, Running, Scratch};
use peers::{free_port, Peer};
use serde_json::Value;

/// nginx answering every request itself, one worker, with its access log and a long keep-alive (so that the
/// count is of requests, not of reconnections).
fn nginx() -> Peer {
    Peer::start(
        "nginx",
        "nginx",
        |dir: &Scratch, port: u16| {
            let d = dir.0.display();
            let http = format!(
                r#"  access_log {d}/access.log;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location = /health {{ access_log off; return 200 "ok\n"; }}
    location / {{ return 200 "ok\n"; }}
  }}
"#
            );
            peers::nginx_args(dir, 4096, &http)
        },
        "/health",
    )
}

/// The requests for `path` in nginx's access log.
fn served(nginx: &Peer, path: &str) -> u64 {
    let needle = format!("\"GET {path} HTTP/1.1\" 200");
    std::fs::read_to_string(nginx.dir.path("access.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&needle))
        .count() as u64
}

/// A scenario driving nginx at `rate` for `duration` (an idle embedded faultd beside it: nginx calls nothing).
fn scenario(dir: &Scratch, nginx_port: u16, rate: &str, secs: u64, arrivals: &str) -> PathBuf {
    let (duration, half) = (format!("{secs}s"), format!("{}ms", secs * 500));
    dir.write(
        "agents.yaml",
        &format!(
            r#"name: agents
duration: {duration}
seed: 5
dependency:
  routes:
    idle: {{ path: /never, latency: {{ fixed: 1ms }} }}
  phases:
    - {{ name: first, at: 0s }}
    - {{ name: second, at: {half} }}
sut:
  url: http://127.0.0.1:{nginx_port}
load:
  rate: {rate}
  arrivals: {arrivals}
  timeout: 5s
  connections: 64
  requests: [ {{ get: /load }} ]
expect:
  - {{ id: answered, sut_share: ok, above: 99%, during: first }}
"#
        ),
    )
}

fn faultline(args: &[&str], report: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(args)
        .arg("--report-dir")
        .arg(report)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `command` started in the background, its stderr kept for the assertion messages, killed if the test fails.
fn background(command: &mut Command) -> Running {
    Running(
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn agents(result: &Value) -> &Vec<Value> {
    result["distributed"]["agents"]
        .as_array()
        .expect("result.json has distributed.agents")
}

#[test]
fn four_agents_at_2000_per_second_each_deliver_exactly_the_timetable_to_nginx() {
    let nginx = nginx();
    let dir = Scratch::new("agents-four");
    let file = scenario(&dir, nginx.port, "8000/s", 20, "uniform");
    let report = dir.path("report");
    let out = faultline(&["run", file.to_str().unwrap(), "--agents", "4"], &report);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let r = result_json(&report);

    // nginx's own count: every arrival of the 20 s timetable at 8,000/s, not one more or less.
    let at_nginx = served(&nginx, "/load");
    assert_eq!(
        at_nginx, 160_000,
        "requests nginx served; the run's totals: {}, connect errors: {}",
        r["totals"], r["totals"]["connect_errors"]
    );
    assert_eq!(r["totals"]["intended"], 160_000);
    assert_eq!(r["totals"]["outcomes"]["ok"], 160_000);
    assert_eq!(r["totals"]["conserved"], true);
    assert!(
        r["run_errors"].as_array().unwrap().is_empty(),
        "{}",
        r["run_errors"]
    );

    // Each agent sent its quarter, and its clock was found within a millisecond of the runner's.
    let a = agents(&r);
    assert_eq!(a.len(), 4);
    for (i, agent) in a.iter().enumerate() {
        assert_eq!(agent["index"], i as u64);
        assert_eq!(agent["intended"], 40_000, "agent {i}");
        assert_eq!(agent["outcomes"], 40_000, "agent {i}");
        assert!(agent.get("lost").is_none(), "agent {i}: {agent}");
        let offset = agent["clock_offset_ms"].as_f64().unwrap();
        let uncertainty = agent["clock_uncertainty_ms"].as_f64().unwrap();
        assert!(offset.abs() < 1.0, "agent {i}: offset {offset} ms");
        assert!(uncertainty < 1.0, "agent {i}: uncertainty {uncertainty} ms");
        assert!(
            agent["late_ms"].as_f64().unwrap() == 0.0,
            "agent {i} armed late: {agent}"
        );
    }
    // The merged series covers every arrival once, bucket by bucket.
    let offered: u64 = r["series"]["offered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(offered, 160_000);
    assert!(r["distributed"]["buckets_merged"].as_u64().unwrap() >= 200);
}

/// The agent processes of the run `runner` started, by index: (pid, index).
fn agent_processes(runner: i32) -> Vec<(i32, u32)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid != Some(runner) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.get(1).map(String::as_str) == Some("agent") {
            if let Some(i) = args.iter().position(|a| a == "--index") {
                found.push((pid, args[i + 1].parse().unwrap()));
            }
        }
    }
    found
}

#[test]
fn an_agent_killed_mid_run_ends_the_run_with_exit_3_naming_it_and_the_others_data_is_kept() {
    let nginx = nginx();
    let dir = Scratch::new("agents-kill");
    let file = scenario(&dir, nginx.port, "600/s", 10, "poisson");
    let report = dir.path("report");
    let mut run = background(
        Command::new(env!("CARGO_BIN_EXE_faultline"))
            .args([
                "run",
                file.to_str().unwrap(),
                "--agents",
                "3",
                "--report-dir",
            ])
            .arg(&report),
    );
    let mut agents_seen = Vec::new();
    wait_until(Duration::from_secs(20), "three agent processes", || {
        agents_seen = agent_processes(run.pid());
        agents_seen.len() == 3
    });
    // Well into the load (t = 0 is 2 s after registration): nginx has served requests.
    wait_until(
        Duration::from_secs(20),
        "nginx to serve 1,000 requests",
        || served(&nginx, "/load") >= 1000,
    );
    let (victim, index) = agents_seen.iter().copied().find(|(_, i)| *i == 1).unwrap();
    signal(victim, libc::SIGKILL);
    let code = run.wait_for_exit(Duration::from_secs(30));
    let stderr = run.stderr();
    assert_eq!(code, Some(3), "{stderr}");

    let r = result_json(&report);
    assert_eq!(r["ending"]["kind"], "agent_lost", "{}", r["ending"]);
    let agent = r["ending"]["agent"].as_str().unwrap();
    assert!(agent.starts_with(&format!("agent {index} (")), "{agent}");
    assert!(agent.contains(&format!("pid {victim}")), "{agent}");
    let why = r["ending"]["why"].as_str().unwrap();
    assert!(
        why.contains("signal: 9") || why.contains("SIGKILL"),
        "{why}"
    );
    let summary = std::fs::read_to_string(report.join("summary.txt")).unwrap();
    assert!(summary.contains("AN AGENT WAS LOST"), "{summary}");

    // The others handed over their recordings: kept, conserved, and their requests all reached nginx.
    let a = agents(&r);
    assert!(a[1]["lost"].as_str().is_some(), "{}", a[1]);
    for i in [0, 2] {
        assert!(a[i].get("lost").is_none(), "{}", a[i]);
        assert!(a[i]["intended"].as_u64().unwrap() > 100, "{}", a[i]);
        assert_eq!(a[i]["intended"], a[i]["outcomes"], "{}", a[i]);
    }
    let kept = a[0]["intended"].as_u64().unwrap() + a[2]["intended"].as_u64().unwrap();
    assert_eq!(r["totals"]["intended"].as_u64().unwrap(), kept);
    assert!(served(&nginx, "/load") >= kept);
    // And no agent process is left.
    wait_until(Duration::from_secs(5), "the agents to end", || {
        agent_processes(run.pid()).is_empty()
    });
}

#[test]
fn agents_started_elsewhere_register_on_agents_listen_with_their_own_index() {
    let nginx = nginx();
    let dir = Scratch::new("agents-listen");
    let file = scenario(&dir, nginx.port, "400/s", 3, "uniform");
    let report = dir.path("report");
    let port = free_port();
    let runner = format!("127.0.0.1:{port}");
    let mut run = background(
        Command::new(env!("CARGO_BIN_EXE_faultline"))
            .args(["run", file.to_str().unwrap(), "--agents", "2"])
            .args(["--agents-listen", &runner, "--report-dir"])
            .arg(&report),
    );
    // One agent is given its index as a Kubernetes Indexed Job gives it, the other by flag; both dial before the
    // runner may be listening and keep trying.
    let loadgen = hardening::bin("loadgen");
    let mut one = background(
        Command::new(&loadgen)
            .args(["agent", "--runner", &runner])
            .env("JOB_COMPLETION_INDEX", "1"),
    );
    let mut zero = background(
        Command::new(&loadgen)
            .env("FAULTLINE_RUNNER", &runner)
            .args(["agent", "--index", "0"]),
    );
    let code = run.wait_for_exit(Duration::from_secs(40));
    assert_eq!(code, Some(0), "{}", run.stderr());
    assert_eq!(
        one.wait_for_exit(Duration::from_secs(5)),
        Some(0),
        "{}",
        one.stderr()
    );
    assert_eq!(
        zero.wait_for_exit(Duration::from_secs(5)),
        Some(0),
        "{}",
        zero.stderr()
    );

    let r = result_json(&report);
    let a = agents(&r);
    assert!(
        a[0]["host"]
            .as_str()
            .unwrap()
            .ends_with(&format!("pid {}", zero.pid())),
        "{}",
        a[0]
    );
    assert!(
        a[1]["host"]
            .as_str()
            .unwrap()
            .ends_with(&format!("pid {}", one.pid())),
        "{}",
        a[1]
    );
    assert_eq!(a[0]["intended"], 600);
    assert_eq!(a[1]["intended"], 600);
    assert_eq!(served(&nginx, "/load"), 1200);
}

#[test]
fn too_few_agents_end_the_run_with_exit_3_saying_how_many_registered() {
    let nginx = nginx();
    let dir = Scratch::new("agents-few");
    let file = scenario(&dir, nginx.port, "100/s", 2, "uniform");
    let runner = format!("127.0.0.1:{}", free_port());
    let mut run = background(
        Command::new(env!("CARGO_BIN_EXE_faultline"))
            .args(["run", file.to_str().unwrap(), "--agents", "2"])
            .args([
                "--agents-listen",
                &runner,
                "--agents-wait",
                "3s",
                "--report-dir",
            ])
            .arg(dir.path("report")),
    );
    let _lonely = background(Command::new(hardening::bin("loadgen")).args([
        "agent",
        "--runner",
        &runner,
        "--connect-for",
        "10s",
    ]));
    assert_eq!(run.wait_for_exit(Duration::from_secs(30)), Some(3));
    let stderr = run.stderr();
    assert!(
        stderr.contains("only 1 of 2 agents registered within 3 s"),
        "{stderr}"
    );
    assert_eq!(served(&nginx, "/load"), 0, "no load without every agent");
}

#[test]
fn wrong_agent_options_are_usage_errors() {
    let dir = Scratch::new("agents-usage");
    let file = scenario(&dir, 9, "10/s", 1, "uniform");
    let report = dir.path("report");
    let cases: [(&[&str], &str); 3] = [
        (&["--agents", "0"], "--agents"),
        (&["--agents-listen", "127.0.0.1:7070"], "--agents"),
        (
            &["--agents", "2", "--agents-listen", "0.0.0.0:7070"],
            "--agents-allow-remote",
        ),
    ];
    for (extra, says) in cases {
        let mut args = vec!["run", file.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = faultline(&args, &report);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{extra:?}: {}",
            text(&out)
        );
    }
}

/// The expectation ids that failed in a run.
fn failing_ids(report: &Path) -> BTreeSet<String> {
    result_json(report)["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["outcome"] != "pass")
        .map(|v| v["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_library_scenario_is_proven_with_two_agents_as_with_one_process() {
    // retry-storm's verdicts rest on counts (calls at the dependency per SUT request), so noise cannot move them;
    // the library test proves it with one process at the same time scale.
    let dir = Scratch::new("agents-prove");
    let report = dir.path("prove");
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "prove",
            "scenarios/retry-storm.yaml",
            "--time-scale",
            "0.5",
            "--agents",
            "2",
        ])
        .arg("--report-dir")
        .arg(&report)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("PROVEN"),
        "{}",
        text(&out)
    );
    let recommended = report.join("retry-storm").join("recommended");
    let mistake = report.join("retry-storm").join("mistake");
    assert!(failing_ids(&recommended).is_empty());
    let failed = failing_ids(&mistake);
    assert!(failed.contains("amplification"), "{failed:?}");
    for run in [&recommended, &mistake] {
        let r = result_json(run);
        assert_eq!(agents(&r).len(), 2, "{}", run.display());
        assert_eq!(r["totals"]["conserved"], true);
    }
}
