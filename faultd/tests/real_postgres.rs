//! A real PostgreSQL behind a TCP route of the configuration (started by `servers::postgres`), proxied by faultd,
//! with the stock `psql` as the client. Queries pass while the route is healthy, a latency toxic adds its delay to
//! the query round trip `psql` times itself, `reset_peer` and `down` break connections the way `psql` reports
//! such breaks, and faultd's recording counts every connection.
//!
//! Needs the Debian package `postgresql` (server binaries under /usr/lib/postgresql/15/bin, `psql` on the
//! PATH); fails, not skips, without it.

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::servers::postgres::{psql, start_postgres};

/// The query time `psql` prints after `\timing on` (`Time: 301.234 ms`).
fn timed_query(port: u16, query: &str) -> (String, Duration) {
    let out = psql(port, &["\\timing on", query]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ms: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Time: "))
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("psql printed no time: {stdout}"));
    let answer = stdout
        .lines()
        .find(|l| !l.starts_with("Time: ") && !l.starts_with("Timing is"))
        .unwrap_or_default()
        .to_string();
    (answer, Duration::from_secs_f64(ms / 1000.0))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("the client task ends")
}

/// Waits (at most 10 s) until the route holds no connection open.
async fn wait_closed(faultd: &faultd::Faultd) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while faultd.tcp().open_connections("db").expect("the route") > 0 {
        assert!(Instant::now() < deadline, "a connection stayed open 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_postgres_through_a_tcp_route_is_slowed_reset_and_cut_as_psql_reports_it() {
    let pg = start_postgres();
    let config = faultd::Config::from_yaml(
        &format!(
            "seed: 7\nroutes:\n  db: {{ tcp: {{ listen: 127.0.0.1:0, upstream: 127.0.0.1:{} }} }}\n",
            pg.port
        ),
        "real_postgres.yaml",
    )
    .expect("the configuration is valid");
    let faultd = faultd::start(config, faultd::Options::default())
        .await
        .expect("faultd starts");
    faultd.start_schedule(tokio::time::Instant::now());
    let port = faultd.tcp_addr("db").expect("the TCP route listens").port();

    // Healthy: a write and a read pass, and the query is quick.
    let healthy = blocking(move || {
        psql(
            port,
            &[
                "create table kv (k text primary key, v text)",
                "insert into kv values ('k', 'v')",
            ],
        )
    })
    .await;
    assert!(healthy.status.success(), "{}", stderr(&healthy));
    let (answer, quick) =
        blocking(move || timed_query(port, "select v from kv where k = 'k'")).await;
    assert_eq!(answer, "v");
    assert!(
        quick < Duration::from_millis(300),
        "healthy query took {quick:?}"
    );

    // Latency: every chunk the server sends back waits 300 ms, so the query's own round trip does too.
    faultd
        .tcp()
        .add_toxic(
            "db",
            serde_json::from_value(
                json!({"name": "slow", "type": "latency", "stream": "downstream",
                "attributes": {"latency": 300}}),
            )
            .expect("a toxic"),
        )
        .expect("the toxic is added");
    let (answer, slow) =
        blocking(move || timed_query(port, "select v from kv where k = 'k'")).await;
    assert_eq!(answer, "v", "the toxic delays, it does not corrupt");
    assert!(
        slow >= Duration::from_millis(300),
        "a query under the 300 ms toxic took {slow:?} as psql timed it"
    );
    faultd
        .tcp()
        .remove_toxic("db", "slow")
        .expect("the toxic goes");
    // The delayed goodbye is still in flight after psql exits: a toxic added now would take that connection too.
    wait_closed(&faultd).await;

    // reset_peer: the connection is reset before the server's greeting comes back.
    faultd
        .tcp()
        .add_toxic(
            "db",
            serde_json::from_value(json!({"name": "rst", "type": "reset_peer",
                "attributes": {"timeout": 0}}))
            .expect("a toxic"),
        )
        .expect("the toxic is added");
    let reset = blocking(move || psql(port, &["select 1"])).await;
    assert!(!reset.status.success());
    let said = stderr(&reset);
    assert!(
        said.contains("server closed the connection unexpectedly")
            || said.contains("Connection reset by peer"),
        "psql under reset_peer said: {said}"
    );
    faultd
        .tcp()
        .remove_toxic("db", "rst")
        .expect("the toxic goes");

    // down: an open session is cut mid-query, and new connections are refused.
    let long = tokio::task::spawn_blocking(move || psql(port, &["select pg_sleep(5)"]));
    let deadline = Instant::now() + Duration::from_secs(10);
    while faultd.tcp().open_connections("db").expect("the route") == 0 {
        assert!(Instant::now() < deadline, "the long query never connected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The query is running at the server (asked directly, not through the route) before the route goes down.
    let server_port = pg.port;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let running = blocking(move || {
            psql(
                server_port,
                &["select count(*) from pg_stat_activity where state = 'active' and query like 'select pg_sleep%'"],
            )
        })
        .await;
        if running.stdout == b"1\n" {
            break;
        }
        assert!(Instant::now() < deadline, "the long query never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let down = faultd::tcp::ProxyUpdate {
        enabled: Some(false),
        ..Default::default()
    };
    faultd
        .tcp()
        .update("db", down)
        .expect("the route goes down");
    let cut = long.await.expect("the client task ends");
    assert!(!cut.status.success());
    assert!(
        stderr(&cut).contains("server closed the connection unexpectedly")
            || stderr(&cut).contains("connection to server was lost"),
        "psql cut by down said: {}",
        stderr(&cut)
    );
    let refused = blocking(move || psql(port, &["select 1"])).await;
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("Connection refused"),
        "psql against a route that is down said: {}",
        stderr(&refused)
    );
    let up = faultd::tcp::ProxyUpdate {
        enabled: Some(true),
        ..Default::default()
    };
    faultd.tcp().update("db", up).expect("the route comes back");
    let back = blocking(move || psql(port, &["select count(*) from kv"])).await;
    assert_eq!(back.stdout, b"1\n", "{}", stderr(&back));

    // Every psql session was one connection; the refused one never reached the route.
    let recording = &faultd.tcp_recording()["db"];
    assert_eq!(recording.totals.attempts, 6, "{recording:?}");
    assert_eq!(recording.totals.resets, 1, "{recording:?}");
    assert_eq!(
        recording.totals.toxics.get("latency"),
        Some(&1),
        "{recording:?}"
    );
    assert!(recording.max_open >= 1);
    assert!(recording.totals.bytes_upstream > 0 && recording.totals.bytes_downstream > 0);
    faultd.shutdown().await;
    drop(pg);
}
