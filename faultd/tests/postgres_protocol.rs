//! A TCP route with `protocol: postgres` in front of a real PostgreSQL (started by `servers::postgres`): psql
//! (the simple query protocol) and psycopg 3 (the extended protocol, prepared statements, and libpq's PQexec)
//! get the SQLSTATEs, exception classes and transaction states of real failures, untouched queries give what the
//! server gives, and bytes that are not PostgreSQL never stop faultd.
//!
//! Needs the Debian package `postgresql` and psycopg 3 (`psycopg[binary]`, pinned in tests/requirements.txt) in
//! the Python that `FAULTLINE_PYTHON` names (default `python3`); fails, not skips, without them.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::servers::postgres::{psql, psql_command, start_postgres};

const ENTRIES: &str = r#"
    postgres:
      - { name: serialization, match: { statement: "^UPDATE accounts" }, error: { sqlstate: "40001", message: "could not serialize access due to concurrent update" } }
      - { name: deadlock, match: { statement: "^UPDATE deadlock" }, error: { sqlstate: "40P01", message: "deadlock detected" } }
      - { name: second, match: { statement: "^SELECT 'every'" }, every: 2, error: { sqlstate: "57014", message: "canceling statement due to user request" } }
      - { name: slow, match: { statement: "^SELECT 'slow'" }, delay: 300ms }
      - { name: cut, match: { statement: "^SELECT 'cut'" }, terminate: true }
      - { name: nothing, match: { statement: "^NEVER" }, share: 50%, terminate: true }
"#;

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("the client task ends")
}

fn python() -> String {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = std::process::Command::new(&python)
        .args(["-c", "import psycopg"])
        .output();
    assert!(
        matches!(&probe, Ok(o) if o.status.success()),
        "{python} cannot import psycopg: install tests/requirements.txt into a venv (`pip install -r \
         tests/requirements.txt`) and set FAULTLINE_PYTHON to its python"
    );
    python
}

async fn start_faultd(upstream: u16, tcp_extra: &str) -> (faultd::Faultd, u16) {
    let yaml = format!(
        "seed: 7\nroutes:\n  db:\n    tcp: {{ listen: 127.0.0.1:0, upstream: 127.0.0.1:{upstream}, protocol: postgres{tcp_extra} }}{ENTRIES}"
    );
    let config =
        faultd::Config::from_yaml(&yaml, "postgres.yaml").expect("the configuration is valid");
    let options = faultd::Options {
        control: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ..faultd::Options::default()
    };
    let faultd = faultd::start(config, options).await.expect("faultd starts");
    faultd.start_schedule(tokio::time::Instant::now());
    let port = faultd.tcp_addr("db").expect("the TCP route listens").port();
    (faultd, port)
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_and_psycopg_get_the_sqlstates_and_transaction_states_of_real_failures() {
    let python = python();
    let pg = start_postgres();
    let direct = pg.port;
    let setup = blocking(move || {
        psql(
            direct,
            &[
                "create table accounts (id int primary key, balance int)",
                "insert into accounts values (1, 100)",
            ],
        )
    })
    .await;
    assert!(setup.status.success(), "{}", stderr(&setup));
    let (faultd, port) = start_faultd(direct, "").await;

    // psql, the simple query protocol: the error as the server would print it, then 25P02 from the server itself.
    let session = blocking(move || {
        psql(
            port,
            &[
                "\\set VERBOSITY verbose",
                "begin",
                "insert into accounts values (9, 9)",
                "UPDATE accounts SET balance = 0 WHERE id = 1",
                "select 1",
                "rollback",
                "select balance from accounts where id = 1",
            ],
        )
    })
    .await;
    let said = stderr(&session);
    assert!(
        said.contains("ERROR:  40001: could not serialize access due to concurrent update"),
        "psql said: {said}"
    );
    assert!(
        said.contains("ERROR:  25P02: current transaction is aborted"),
        "psql said: {said}"
    );
    assert!(
        String::from_utf8_lossy(&session.stdout).ends_with("100\n"),
        "{:?}",
        session.stdout
    );
    let count =
        blocking(move || psql(direct, &["select count(*) from accounts where id = 9"])).await;
    assert_eq!(
        count.stdout, b"0\n",
        "the insert before the fault was rolled back"
    );
    // psql refuses to go on without TLS when asked for it: faultd answered N.
    let required = blocking(move || {
        psql_command(port, &["select 1"])
            .env("PGSSLMODE", "require")
            .output()
            .expect("psql runs")
    })
    .await;
    assert!(
        stderr(&required).contains("server does not support SSL"),
        "{}",
        stderr(&required)
    );

    // psycopg 3: the extended protocol, prepared statements, PQexec.
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/postgres_clients/test_psycopg.py");
    let out = blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .env("PROXY_PORT", port.to_string())
            .env("DIRECT_PORT", direct.to_string())
            .output()
            .expect("python runs")
    })
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "psycopg checks failed:\n{stdout}\n{}",
        stderr(&out)
    );
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        6,
        "{stdout}"
    );

    // The recording: per entry, what it took and which errors came back (faultd's and the server's).
    let deadline = Instant::now() + Duration::from_secs(10);
    while faultd.tcp().open_connections("db").expect("the route") > 0 {
        assert!(Instant::now() < deadline, "a connection stayed open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let recording = faultd.tcp_recording()["db"]
        .postgres
        .clone()
        .expect("a postgres recording");
    let phase = |entry: &str| recording.statements[entry].phases["healthy"].clone();
    let serialization = phase("serialization");
    // psql 1, psycopg: 1 + 2 prepared + 1 PQexec, 2 in transactions.
    assert_eq!(serialization.taken, 7, "{recording:?}");
    assert_eq!(serialization.errors.get("40001"), Some(&7));
    assert_eq!(phase("deadlock").errors.get("40P01"), Some(&1));
    let second = phase("second");
    assert_eq!(
        (second.calls, second.taken, second.errors.get("57014")),
        (2, 1, Some(&1))
    );
    assert!(
        phase("slow").latency.min() >= 300_000_000,
        "the delay is in the latency"
    );
    assert_eq!(phase("cut").cut, 1);
    let other = phase("other");
    assert_eq!(
        other.errors.get("25P02"),
        Some(&2),
        "the server's own errors are recorded too"
    );
    assert!(
        !recording.statements.contains_key("nothing"),
        "an entry that matched nothing has no row"
    );
    // psql asks for TLS by default (sslmode=prefer) and with PGSSLMODE=require; psycopg here does not.
    assert_eq!(recording.encryption_refused, 2);
    assert_eq!(
        recording
            .statements
            .values()
            .map(|s| s.in_flight)
            .sum::<u64>(),
        0
    );
    let control = faultd.control_addr().expect("the control API listens");
    let metrics = crate::common::call(control, "GET", "/metrics", &[], b"").await;
    let metrics = String::from_utf8_lossy(metrics.body()).to_string();
    let line = "faultd_postgres_errors_total{tcp_route=\"db\",entry=\"serialization\",sqlstate=\"40001\"} 7";
    assert!(metrics.contains(line), "{metrics}");
    let json = crate::common::call(control, "GET", "/recording", &[], b"").await;
    let json: serde_json::Value = serde_json::from_slice(json.body()).expect("JSON");
    let taken = &json["tcp_routes"]["db"]["postgres"]["statements"]["serialization"]["phases"]
        ["healthy"]["taken"];
    assert_eq!(taken, 7, "/recording carries the postgres recording");
    faultd.shutdown().await;
    drop(pg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_pass_hands_the_connection_over_untouched() {
    let pg = start_postgres();
    let direct = pg.port;
    let (faultd, port) = start_faultd(direct, ", ssl: pass").await;
    // The server answers N itself; faultd reads no further, so no entry acts on the statement.
    let out = blocking(move || {
        psql_command(
            port,
            &[
                "create table accounts (id int)",
                "UPDATE accounts SET id = 1",
            ],
        )
        .env("PGSSLMODE", "prefer")
        .output()
        .expect("psql runs")
    })
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let recording = faultd.tcp_recording()["db"]
        .postgres
        .clone()
        .expect("a postgres recording");
    assert!(recording.statements.is_empty(), "{recording:?}");
    assert_eq!(recording.encryption_refused, 0);
    faultd.shutdown().await;
    drop(pg);
}

/// An upstream that echoes what it gets, for bytes that are not PostgreSQL.
async fn echo() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    port
}

/// Sends `bytes`, closes the sending side, and reads what comes back within 5 s.
async fn exchange(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("faultd accepts");
    let _ = s.write_all(bytes).await;
    let _ = s.shutdown().await;
    let mut back = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut back)).await;
    back
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_passes_through_or_closes_as_the_route_says_and_never_stops_faultd() {
    let upstream = echo().await;
    let (pass, pass_port) = start_faultd(upstream, "").await;
    let http = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_eq!(
        exchange(pass_port, http).await,
        http,
        "on_garbage: pass moves the bytes untouched"
    );
    let (close, close_port) = start_faultd(upstream, ", on_garbage: close").await;
    assert_eq!(
        exchange(close_port, http).await,
        b"",
        "on_garbage: close closes"
    );

    // A startup message then bytes of every kind: truncated frames, huge lengths, unknown types.
    let mut startup = 196_608u32.to_be_bytes().to_vec();
    startup.extend_from_slice(b"user\0x\0\0");
    let mut hello = ((startup.len() + 4) as u32).to_be_bytes().to_vec();
    hello.extend_from_slice(&startup);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..200 {
        let mut bytes = hello.clone();
        let tails: [&[u8]; 5] = [
            b"Q\0\0\0",
            b"Q\x7f\xff\xff\xffselect",
            b"\x00\x00\x00\x04",
            b"P\0\0\0\x08\0\0\0",
            b"Q\0\0\0\x0dselect 1\0",
        ];
        bytes.extend_from_slice(tails[i % tails.len()]);
        for _ in 0..(i % 64) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            bytes.push(seed as u8);
        }
        let port = if i % 2 == 0 { pass_port } else { close_port };
        let _ = exchange(port, &bytes).await;
    }
    // Both still serve, and counted the garbage.
    assert_eq!(exchange(pass_port, http).await, http);
    for f in [&pass, &close] {
        assert!(
            f.tcp_recording()["db"]
                .postgres
                .as_ref()
                .expect("postgres")
                .garbage
                >= 2
        );
    }
    pass.shutdown().await;
    close.shutdown().await;
}
