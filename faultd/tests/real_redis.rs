//! A real dependency behind a TCP route of the configuration: `redis-server` (no persistence, loopback, a free
//! port, a temporary folder) proxied by faultd, a latency toxic switched on by the schedule of phases, and the
//! stock `redis-cli` as the client. Round trips take at least the toxic once the phase begins, and faultd's
//! recording counts every connection.
//!
//! Needs the Debian package `redis-server` (which brings `redis-cli`); fails, not skips, without it.

use crate::servers;

use std::process::Command;
use std::time::{Duration, Instant};

use servers::{installed, start, Server};

pub(crate) fn start_redis() -> Server {
    assert!(
        installed("redis-server") && installed("redis-cli"),
        "install redis-server (apt-get install -y redis-server)"
    );
    start(
        "redis",
        Duration::from_secs(10),
        None,
        |port, dir| {
            let mut c = Command::new("redis-server");
            c.args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
                .args(["--port", &port.to_string(), "--dir"])
                .arg(dir);
            c
        },
        |port| cli(port, &["PING"]).0 == "PONG",
    )
}

/// One `redis-cli` command on its own connection: its answer and how long the whole round trip took.
pub(crate) fn cli(port: u16, args: &[&str]) -> (String, Duration) {
    let start = Instant::now();
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    (
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        start.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latency_toxic_in_a_phase_slows_real_redis_round_trips_and_connections_are_counted() {
    let redis = start_redis();
    let config = faultd::Config::from_yaml(
        &format!(
            "seed: 7\n\
             routes:\n  db: {{ tcp: {{ listen: 127.0.0.1:0, upstream: 127.0.0.1:{} }} }}\n\
             phases:\n\
             \x20 - {{ name: healthy, at: 0s }}\n\
             \x20 - {{ name: brownout, at: 1500ms, routes: {{ db: {{ toxics: [ {{ type: latency, stream: downstream, attributes: {{ latency: 400 }} }} ] }} }} }}\n\
             \x20 - {{ name: recovered, at: 4s, routes: {{ db: healthy }} }}\n",
            redis.port
        ),
        "real_redis.yaml",
    )
    .expect("the configuration is valid");
    let faultd = faultd::start(config, faultd::Options::default())
        .await
        .expect("faultd starts");
    let origin = tokio::time::Instant::now();
    faultd.start_schedule(origin);
    let port = faultd.tcp_addr("db").expect("the TCP route listens").port();

    let healthy = tokio::task::spawn_blocking(move || {
        let set = cli(port, &["SET", "k", "v"]);
        let get = cli(port, &["GET", "k"]);
        (set, get)
    })
    .await
    .unwrap();
    assert_eq!(healthy.0 .0, "OK");
    assert_eq!(healthy.1 .0, "v");
    assert!(
        healthy.1 .1 < Duration::from_millis(400),
        "healthy round trip took {:?}",
        healthy.1 .1
    );

    tokio::time::sleep_until(origin + Duration::from_millis(1700)).await;
    let slow = tokio::task::spawn_blocking(move || cli(port, &["GET", "k"]))
        .await
        .unwrap();
    assert_eq!(slow.0, "v", "the toxic delays, it does not corrupt");
    assert!(
        slow.1 >= Duration::from_millis(400),
        "a round trip during brownout took {:?}, under the 400 ms toxic",
        slow.1
    );

    tokio::time::sleep_until(origin + Duration::from_millis(4200)).await;
    let recovered = tokio::task::spawn_blocking(move || cli(port, &["GET", "k"]))
        .await
        .unwrap();
    assert!(
        recovered.1 < Duration::from_millis(400),
        "after `healthy` the round trip took {:?}",
        recovered.1
    );

    let recording = &faultd.tcp_recording()["db"];
    assert_eq!(recording.totals.attempts, 4, "{recording:?}");
    assert!(recording.max_open >= 1);
    assert!(recording.totals.bytes_downstream > 0);
    let calls = recording.as_calls();
    assert_eq!(calls.totals.arrivals, 4);
    assert_eq!(calls.max_in_flight, recording.max_open);
    faultd.shutdown().await;
}
