//! Outlier detection written by others, in front of faultd's instances: Debian's HAProxy and nginx each balancing
//! over three instances of one route while instance 2 answers 503 to every call and then recovers. HAProxy with
//! `observe layer7`, `error-limit`, `on-error mark-down` and health checks; nginx with passive `max_fails` /
//! `fail_timeout` per upstream server. The runner's instance expectations, judged on faultd's recording, must agree
//! with what each says itself: HAProxy's stats socket (instance 2 DOWN while sick, UP at the end), nginx's access
//! log (`$upstream_addr`: instance 2 took almost none of the attempts while sick, its third again at the end).
//!
//! Needs `apt-get install -y haproxy nginx` (the tests fail, never skip, without them).

use crate::peers;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::time::Duration;

use faultline::expect::{ExpectationSpec, Names, Verdict};
use faultline::record::RunRecord;
use peers::Peer;
use tokio::time::Instant;

/// Three instances; instance 2 fails every call from 2 s to 6 s.
const DEPENDENCY: &str = "
routes:
  pricing: { path: /price/*, instances: 3, latency: { fixed: 2ms } }
phases:
  - { name: healthy,   at: 0s }
  - { name: sick,      at: 2s, routes: { pricing: { instance: 2, errors: [ { share: 100%, status: 503 } ] } } }
  - { name: recovered, at: 6s, routes: { pricing: healthy } }
";

/// How long the calls go on: the recovered phase's 4 s give HAProxy's health checks (every 200 ms, 2 to rise)
/// time to bring the instance back.
const RUN: Duration = Duration::from_secs(10);

/// HAProxy over the instances: round robin, 3 layer-7 errors in a row on live traffic mark a server down, health
/// checks every 200 ms bring it back after 2 successes; the stats socket in its scratch folder.
fn haproxy(servers: &[std::net::SocketAddr]) -> Peer {
    let lines: String = servers
        .iter()
        .enumerate()
        .map(|(i, a)| format!("  server instance{} {a} check\n", i + 1))
        .collect();
    Peer::start(
        "haproxy",
        "haproxy",
        |dir, port| {
            let socket = dir.path("haproxy.sock");
            let config = dir.write(
                "haproxy.cfg",
                &format!(
                    "global\n  maxconn 1000\n  stats socket {} level admin\n\
                     defaults\n  mode http\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
                     frontend service\n  bind 127.0.0.1:{port}\n  monitor-uri /haproxy-health\n  default_backend pricing\n\
                     backend pricing\n  balance roundrobin\n  option httpchk GET /price/check\n\
                     default-server inter 200ms fall 2 rise 2 observe layer7 error-limit 3 on-error mark-down\n{lines}",
                    socket.display()
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

/// Each server's status as HAProxy's stats socket says it (`show stat`, CSV: `pxname,svname,...,status,...`).
fn statuses(peer: &Peer) -> Vec<(String, String)> {
    let mut socket = std::os::unix::net::UnixStream::connect(peer.dir.path("haproxy.sock"))
        .expect("HAProxy's stats socket");
    socket.write_all(b"show stat\n").unwrap();
    let mut csv = String::new();
    socket.read_to_string(&mut csv).unwrap();
    let header: Vec<&str> = csv
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("# ")
        .split(',')
        .collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (sv, status) = (column("svname"), column("status"));
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f.len() > status && f[sv].starts_with("instance"))
        .map(|f| (f[sv].to_string(), f[status].to_string()))
        .collect()
}

fn status_of(peer: &Peer, server: &str) -> String {
    statuses(peer)
        .into_iter()
        .find(|(s, _)| s == server)
        .map(|(_, status)| status)
        .unwrap_or_default()
}

/// One GET through HAProxy with `Connection: close`; the status, or 0 when there was no answer.
async fn get(port: u16, n: u32) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return 0;
    };
    let request = format!("GET /price/{n} HTTP/1.1\r\nHost: pricing\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).await.is_err() {
        return 0;
    }
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The runner's verdicts on faultd's recording so far: instance 2 ejected within 2 s of `sick` (under 5% of the
/// calls), and back within `returned_within` of `recovered` (over 25%).
fn judged(
    f: &faultd::Faultd,
    config: &faultd::Config,
    origin: Instant,
    returned_within: &str,
) -> (Verdict, Verdict) {
    let mut record = RunRecord::empty(config.bucket());
    faultline::observe::advance(
        &mut record,
        origin.elapsed(),
        &config.phase_names(),
        &f.recording(),
    );
    let ejected = verdict(
        r#"{ "dependency": "pricing", "instance": 2, "ejected_within": "2s", "after": "sick", "share_below": "5%" }"#,
        &record,
    );
    let returned = verdict(
        &format!(
            r#"{{ "dependency": "pricing", "instance": 2, "returned_within": "{returned_within}", "after": "recovered", "share_above": "25%" }}"#
        ),
        &record,
    );
    (ejected, returned)
}

/// The runner's verdict on one expectation, judged on faultd's recording as a run reads it.
fn verdict(spec: &str, record: &RunRecord) -> Verdict {
    let spec: ExpectationSpec = serde_json::from_str(spec).unwrap();
    let phases = ["healthy", "sick", "recovered"].map(String::from);
    let routes = ["pricing".to_string()];
    let none = |_: &str| None;
    spec.resolve(&Names {
        phases: &phases,
        breakers: &[],
        routes: &routes,
        breaker_routes: &none,
        tls: false,
        metrics: &[],
        instances: &|_| 3,
        dns_names: &[],
    })
    .unwrap()
    .evaluate(record)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_marks_down_the_instance_the_runner_sees_ejected_and_back_up_the_one_it_sees_return(
) {
    let config = faultd::Config::from_yaml(DEPENDENCY, "outlier.yaml").unwrap();
    let f = faultd::start(config.clone(), faultd::Options::default())
        .await
        .unwrap();
    let proxy = tokio::task::block_in_place(|| haproxy(f.instance_addrs("pricing")));
    let origin = Instant::now();
    f.start_schedule(origin);
    // 100 calls a second through HAProxy; HAProxy's view of instance 2 read once mid-sickness and once at the end.
    let (mut mid_sick, mut n) = (None, 0u32);
    let mut statuses_seen = Vec::new();
    while origin.elapsed() < RUN {
        n += 1;
        statuses_seen.push(get(proxy.port, n).await);
        if mid_sick.is_none() && origin.elapsed() >= Duration::from_millis(4_500) {
            mid_sick = Some(tokio::task::block_in_place(|| {
                status_of(&proxy, "instance2")
            }));
        }
        tokio::time::sleep_until(origin + Duration::from_millis(10) * n).await;
    }
    let at_end = tokio::task::block_in_place(|| status_of(&proxy, "instance2"));
    let (ejected, returned) = judged(&f, &config, origin, "3s");
    let log = proxy.log();
    f.shutdown().await;

    let failed = statuses_seen.iter().filter(|s| **s == 503).count();
    assert!(
        mid_sick.as_deref().is_some_and(|s| s.starts_with("DOWN")),
        "HAProxy's status of instance 2 during sick: {mid_sick:?}\n{log}"
    );
    assert!(ejected.passed, "{}\n{log}", ejected.sentence);
    assert!(
        at_end.starts_with("UP"),
        "HAProxy's status of instance 2 at the end: {at_end}\n{log}"
    );
    assert!(returned.passed, "{}\n{log}", returned.sentence);
    // HAProxy let a few errors through before marking it down (3 in a row, and the health checks'), not a third
    // of 400 calls.
    assert!(
        (3..40).contains(&failed),
        "{failed} calls answered 503\n{log}"
    );
}

/// nginx over the instances: round robin, an upstream server with 3 failed attempts (errors, timeouts, 503s) within
/// 3 s is left out for 3 s, and a failed attempt goes on to the next server; the access log names every attempt's
/// upstream address with the time the request ended.
fn nginx(servers: &[std::net::SocketAddr]) -> Peer {
    let lines: String = servers
        .iter()
        .map(|a| format!("    server {a} max_fails=3 fail_timeout=3s;\n"))
        .collect();
    Peer::start(
        "nginx",
        "nginx",
        |dir, port| {
            let d = dir.0.display();
            let http = format!(
                r#"  log_format attempts '$msec $status "$upstream_addr" "$upstream_status"';
  access_log {d}/access.log attempts;
  upstream pricing {{
{lines}  }}
  server {{
    listen 127.0.0.1:{port};
    location = /health {{ access_log off; return 200 "ok\n"; }}
    location / {{ proxy_pass http://pricing; proxy_next_upstream error timeout http_503; }}
  }}
"#
            );
            peers::nginx_args(dir, 1024, &http)
        },
        "/health",
    )
}

/// From nginx's access log: the share of the upstream attempts of requests that ended in `[from, to)` after
/// `origin_unix` (seconds) that went to `server`.
fn nginx_share(log: &str, origin_unix: f64, from: f64, to: f64, server: &str) -> f64 {
    let (mut mine, mut all) = (0usize, 0usize);
    for line in log.lines() {
        let Some((msec, rest)) = line.split_once(' ') else {
            continue;
        };
        let at = msec.parse::<f64>().unwrap_or(0.0) - origin_unix;
        if !(from..to).contains(&at) {
            continue;
        }
        let addrs = rest.split('"').nth(1).unwrap_or_default();
        for addr in addrs.split(", ").filter(|a| !a.is_empty()) {
            all += 1;
            mine += usize::from(addr == server);
        }
    }
    mine as f64 / all.max(1) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_leaves_out_the_instance_the_runner_sees_ejected_and_takes_it_back_when_it_returns() {
    let config = faultd::Config::from_yaml(DEPENDENCY, "outlier.yaml").unwrap();
    let f = faultd::start(config.clone(), faultd::Options::default())
        .await
        .unwrap();
    let instances = f.instance_addrs("pricing").to_vec();
    let proxy = tokio::task::block_in_place(|| nginx(&instances));
    let origin = Instant::now();
    let origin_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    f.start_schedule(origin);
    // 13 s: left out for 3 s at each failed trial (about 2 s, 5 s, maybe 8 s), instance 2 is tried and kept again
    // some seconds after its recovery at 6 s; the check allows 6 s.
    let run = Duration::from_secs(13);
    let mut n = 0u32;
    while origin.elapsed() < run {
        n += 1;
        get(proxy.port, n).await;
        tokio::time::sleep_until(origin + Duration::from_millis(10) * n).await;
    }
    let (ejected, returned) = judged(&f, &config, origin, "6s");
    f.shutdown().await;
    let log = std::fs::read_to_string(proxy.dir.path("access.log")).unwrap_or_default();
    let second = instances[1].to_string();
    let sick = nginx_share(&log, origin_unix, 3.0, 6.0, &second);
    let back = nginx_share(&log, origin_unix, 11.0, 13.0, &second);
    let errors = std::fs::read_to_string(proxy.dir.path("error.log")).unwrap_or_default();
    assert!(
        sick < 0.05,
        "nginx sent instance 2 {sick:.3} of its attempts in 3-6 s\n{errors}"
    );
    assert!(ejected.passed, "{}\n{errors}", ejected.sentence);
    assert!(
        back > 0.25,
        "nginx sent instance 2 {back:.3} of its attempts in 9-11 s\n{errors}"
    );
    assert!(returned.passed, "{}\n{errors}", returned.sentence);
}
