//! `faultline run --metrics-listen ADDR --push URL`: the live Prometheus endpoint answers while the run goes on
//! with every `faultline_*` series, and the values pushed when it ends are the totals and verdicts result.json
//! holds. An address that is taken and a Pushgateway that refuses change nothing but the report's note: same exit
//! code, no hang. Plain HTTP over std sockets, loopback only, every read bounded.

use crate::hardening;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SCENARIO: &str = include_str!("fixtures/ci-summary.yaml");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("faultline-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("scenario.yaml"), SCENARIO).unwrap();
    dir
}

/// `faultline run` of the scenario in `dir`, its report in `dir/report`; the caller adds the rest.
fn run_in(dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_faultline"));
    c.arg("run")
        .arg(dir.join("scenario.yaml"))
        .arg("--report-dir")
        .arg(dir.join("report"));
    c
}

fn free_port() -> u16 {
    faultline_units::port::handed_out().expect("a free loopback port")
}

/// GET /metrics at `port`: the body, if it answered 200 within a second.
fn scrape(port: u16) -> Option<String> {
    let mut s =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// A one-request Pushgateway: answers 200 and hands back the request line and body.
fn fake_pushgateway() -> (u16, mpsc::Receiver<(String, String)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
                    let _ = tx.send((
                        head.lines().next().unwrap_or_default().to_string(),
                        body.to_string(),
                    ));
                    return;
                }
            }
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    });
    (port, rx)
}

/// The value of the sample named exactly `series` (name and labels as printed).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn the_endpoint_serves_every_series_while_the_run_goes_on_and_the_push_carries_the_final_totals() {
    let dir = scratch("metrics");
    let port = free_port();
    let (push_port, pushed) = fake_pushgateway();
    let mut child = run_in(&dir)
        .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
        .args(["--push", &format!("http://127.0.0.1:{push_port}")])
        .args(["--metrics-linger", "5s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut scrapes = Vec::new();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run did not end"
        );
        if let Some(body) = scrape(port) {
            scrapes.push(body);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        scrapes.len() >= 5,
        "only {} scrapes answered",
        scrapes.len()
    );

    // A scrape from the second half of the run has every family.
    let mid = &scrapes[scrapes.len() * 2 / 3];
    for series in [
        "faultline_elapsed_seconds",
        "faultline_offered_requests_total",
        "faultline_sent_requests_total",
        "faultline_requests_total{class=\"ok\"}",
        "faultline_requests_total{class=\"timeout\"}",
        "faultline_requests_total{class=\"dropped\"}",
        "faultline_sut_in_flight_requests",
        "faultline_sut_latency_seconds{quantile=\"0.99\"}",
        "faultline_sut_latency_histogram_seconds_count",
        "faultline_sut_latency_histogram_seconds_bucket{le=\"+Inf\"}",
        "faultline_sut_latency_histogram_seconds_bucket{le=\"0.001\"}",
        "faultline_dependency_in_flight_calls{route=\"pricing\"}",
        "faultline_dependency_pool_limit_calls{route=\"pricing\"}",
        "faultline_phase{phase=\"healthy\"}",
        "faultline_phase{phase=\"later\"}",
    ] {
        assert!(value(mid, series).is_some(), "no {series} in\n{mid}");
    }
    assert_eq!(
        value(
            mid,
            "faultline_dependency_pool_limit_calls{route=\"pricing\"}"
        ),
        Some(49.0)
    );
    assert!(
        mid.contains("# TYPE faultline_sut_latency_histogram_seconds histogram"),
        "{mid}"
    );
    assert!(
        mid.contains("faultline_expectation_status{expectation=\"pool\","),
        "{mid}"
    );
    // Counters only grow from scrape to scrape.
    let offered: Vec<f64> = scrapes
        .iter()
        .filter_map(|s| value(s, "faultline_offered_requests_total"))
        .collect();
    assert!(offered.windows(2).all(|w| w[0] <= w[1]), "{offered:?}");
    assert!(*offered.last().unwrap() > 0.0);
    // Exactly one phase is current at a time.
    let current = |s: &str| {
        value(s, "faultline_phase{phase=\"healthy\"}").unwrap()
            + value(s, "faultline_phase{phase=\"later\"}").unwrap()
    };
    assert_eq!(current(mid), 1.0);

    // The push at the end: the totals and verdicts of result.json.
    let (request_line, body) = pushed
        .recv_timeout(Duration::from_secs(5))
        .expect("nothing pushed");
    assert_eq!(
        request_line,
        "PUT /metrics/job/faultline/scenario/ci-summary HTTP/1.1"
    );
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report/result.json")).unwrap())
            .unwrap();
    let totals = &result["totals"];
    assert_eq!(
        value(&body, "faultline_offered_requests_total"),
        totals["intended"].as_f64(),
        "{body}"
    );
    assert_eq!(
        value(&body, "faultline_sent_requests_total"),
        totals["sent"].as_f64(),
        "{body}"
    );
    for (class, n) in totals["outcomes"].as_object().unwrap() {
        assert_eq!(
            value(
                &body,
                &format!("faultline_requests_total{{class=\"{class}\"}}")
            ),
            n.as_f64(),
            "{class} in\n{body}"
        );
    }
    assert!(totals["outcomes"]["ok"].as_f64().unwrap() > 0.0);
    // The endpoint lingered until a scrape read the final values: the last scrape is the push's body.
    let final_scrape = scrapes.last().unwrap();
    for series in [
        "faultline_offered_requests_total",
        "faultline_requests_total{class=\"ok\"}",
    ] {
        assert_eq!(
            value(final_scrape, series),
            value(&body, series),
            "{series}"
        );
    }
    let status_of = |body: &str, id: &str| {
        body.lines()
            .find(|l| {
                l.starts_with(&format!(
                    "faultline_expectation_status{{expectation=\"{id}\","
                ))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    for text in [&body, final_scrape] {
        assert_eq!(status_of(text, "pool"), Some(1.0), "{text}");
        assert_eq!(status_of(text, "too-fast"), Some(2.0), "{text}");
        assert_eq!(status_of(text, "probes"), Some(3.0), "{text}");
    }
    // The classic text format: counters typed by their sample's name, no OpenMetrics end marker.
    assert!(
        body.contains("# TYPE faultline_requests_total counter"),
        "{body}"
    );
    assert!(!body.contains("# EOF"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_taken_address_and_a_refusing_pushgateway_leave_the_run_and_its_exit_code_alone() {
    let dir = scratch("metrics-refused");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let refusing = free_port();
    let started = Instant::now();
    let out = run_in(&dir)
        .args(["--metrics-listen", &format!("127.0.0.1:{taken_port}")])
        .args(["--push", &format!("http://127.0.0.1:{refusing}")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    let summary = std::fs::read_to_string(dir.join("report/summary.txt")).unwrap();
    for text in [&summary, &stdout.to_string()] {
        assert!(
            text.contains(&format!(
                "not exported: metrics not served: cannot listen on 127.0.0.1:{taken_port}"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("not exported: metrics not pushed to http://127.0.0.1:{refusing}/metrics/job/faultline/scenario/ci-summary")),
            "{text}"
        );
    }
    drop(taken);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_address_that_is_not_loopback_is_refused_unless_allowed() {
    let dir = scratch("metrics-remote");
    let out = run_in(&dir)
        .args(["--metrics-listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("not exported: metrics not served: 0.0.0.0:0 is not a loopback address"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// result.json's `not_exported` sentences.
fn not_exported(dir: &std::path::Path) -> Vec<String> {
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report/result.json")).unwrap())
            .unwrap();
    result["not_exported"]
        .as_array()
        .map(|a| a.iter().map(|p| p.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn result_json_lists_what_could_not_be_exported_and_says_nothing_when_all_went_out() {
    let dir = scratch("metrics-result");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let refusing = free_port();
    let out = run_in(&dir)
        .args(["--metrics-listen", &format!("127.0.0.1:{taken_port}")])
        .args(["--push", &format!("http://127.0.0.1:{refusing}")])
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let problems = not_exported(&dir);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with(&format!(
            "metrics not served: cannot listen on 127.0.0.1:{taken_port}"
        )),
        "{problems:?}"
    );
    assert!(
        problems[1].starts_with(&format!(
            "metrics not pushed to http://127.0.0.1:{refusing}/"
        )) && problems[1].contains("Connection refused"),
        "{problems:?}"
    );
    // --json prints result.json: the same list.
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["not_exported"].as_array().unwrap().len(), 2);
    drop(taken);

    // A run whose exports all worked has no such field.
    let (push_port, pushed) = fake_pushgateway();
    let out = run_in(&dir)
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args(["--push", &format!("http://127.0.0.1:{push_port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    pushed
        .recv_timeout(Duration::from_secs(5))
        .expect("nothing pushed");
    assert!(not_exported(&dir).is_empty());
    let summary = std::fs::read_to_string(dir.join("report/summary.txt")).unwrap();
    assert!(!summary.contains("not exported"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_pushgateway_that_never_answers_and_a_linger_nobody_scrapes_end_within_their_bounds() {
    let dir = scratch("metrics-silent");
    // Connections complete in the kernel's backlog and nothing ever answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let started = Instant::now();
    let out = run_in(&dir)
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args(["--metrics-linger", "2s"])
        .args(["--push", &format!("http://127.0.0.1:{silent_port}")])
        .output()
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    // The run (3 s), the push's 5 s bound and the 2 s linger, then it ends: a noisy machine gets 10 s more.
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(20),
        "took {took:?}"
    );
    let problems = not_exported(&dir);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].ends_with("no answer within 5s"), "{problems:?}");
    assert!(
        stdout.contains("not exported: metrics not pushed to"),
        "{stdout}"
    );
    drop(silent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_ends_a_linger_at_once_and_leaves_the_report_and_exit_code_alone() {
    let dir = scratch("metrics-linger-interrupted");
    let mut child = hardening::Running(
        run_in(&dir)
            .args(["--metrics-listen", "127.0.0.1:0"])
            .args(["--metrics-linger", "60s"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    // The report is written, then the endpoint lingers and says so. (A scrape would end the linger: it reads
    // the final values.)
    let stderr = child.0.stderr.take().unwrap();
    let (said, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            let _ = said.send(line);
        }
    });
    let lingering = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(30).saturating_sub(started.elapsed()))
            .expect("the run said it lingers within 30 s");
        if line.starts_with("metrics: the final values wait at http://") {
            break line;
        }
    };
    assert!(
        lingering.ends_with("at most 1m (--metrics-linger; Ctrl-C ends the wait)"),
        "{lingering}"
    );
    assert!(dir.join("report/summary.txt").exists());
    assert!(child.0.try_wait().unwrap().is_none(), "it did not linger");
    let interrupted = Instant::now();
    hardening::signal(child.pid(), libc::SIGINT);
    assert_eq!(child.wait_for_exit(Duration::from_secs(5)), Some(1));
    assert!(interrupted.elapsed() < Duration::from_secs(5));
    assert!(started.elapsed() < Duration::from_secs(60));
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report/result.json")).unwrap())
            .unwrap();
    assert_eq!(
        result["ending"]["kind"], "completed",
        "{}",
        result["ending"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
