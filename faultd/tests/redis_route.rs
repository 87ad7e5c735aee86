//! A TCP route with `protocol: redis` in front of a real `redis-server` (loopback, a free port, no persistence):
//! redis-cli and redis-py see faultd's errors as a sick server's, the commands faultd answers never reach the
//! server, pipelines and MULTI/EXEC keep their order, untouched replies keep their bytes, and faultd's recording
//! counts per command and per entry. Bad input (bytes that are not RESP, a frame cut short) never stops faultd.
//!
//! Needs the Debian package `redis-server` (which brings `redis-cli`) and redis-py (tests/requirements.txt);
//! fails, not skips, without them.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::real_redis::{cli, start_redis};

const ENTRIES: &str = r#"
      - { name: oom, match: { command: SET, key: "cart:*" }, error: "-OOM command not allowed when used memory > 'maxmemory'." }
      - { name: loading, match: { command: GET, key: "loading:*" }, error: "LOADING Redis is loading the dataset in memory" }
      - { name: readonly, match: { command: DEL, key: "ro:*" }, error: "-READONLY You can't write against a read only replica." }
      - { name: slow, match: { command: GET, key: "slow:*" }, delay: 300ms }
      - { name: every-second-incr, match: { command: INCR, key: "n:*" }, every: 2, error: "-ERR injected" }
      - { name: hang, match: { command: GET, key: "hang:*" }, hang: true }
      - { name: close, match: { command: GET, key: "close:*" }, close: true }
"#;

async fn start_faultd(upstream: u16, on_garbage: &str) -> faultd::Faultd {
    let yaml = format!(
        "seed: 7\nroutes:\n  cache:\n    tcp: {{ upstream: 127.0.0.1:{upstream}, protocol: redis, on_garbage: {on_garbage} }}\n    redis:{ENTRIES}\
         phases:\n  - {{ name: healthy, at: 0s }}\n"
    );
    let config =
        faultd::Config::from_yaml(&yaml, "redis_route.yaml").expect("the configuration is valid");
    let options = faultd::Options {
        control: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ..faultd::Options::default()
    };
    let faultd = faultd::start(config, options).await.expect("faultd starts");
    faultd.start_schedule(tokio::time::Instant::now());
    faultd
}

fn redis_recording(faultd: &faultd::Faultd) -> faultd::tcp::protocol::redis::RedisRecording {
    faultd.tcp_recording()["cache"]
        .redis
        .clone()
        .expect("a redis route records its commands")
}

fn python() -> String {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| {
        let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
        if venv.exists() {
            venv.display().to_string()
        } else {
            "python3".into()
        }
    });
    let probe = Command::new(&python).args(["-c", "import redis"]).output();
    assert!(
        matches!(&probe, Ok(o) if o.status.success()),
        "{python} cannot import redis-py: install it with `pip install -r tests/requirements.txt` (scripts/test \
         sets up .venv), or set FAULTLINE_PYTHON to a Python that has it"
    );
    python
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_gets_a_sick_servers_exceptions_in_order_and_untouched_bytes_elsewhere() {
    let redis = start_redis();
    let faultd = start_faultd(redis.port, "pass").await;
    let port = faultd.tcp_addr("cache").expect("the route listens").port();
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/redis_clients/redis_py_faults.py");
    let python = python();
    let direct = redis.port;
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .args([port.to_string(), direct.to_string()])
            .output()
            .expect("python runs")
    })
    .await
    .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("ok: done"),
        "redis-py's checks failed:\n{text}"
    );

    let rec = redis_recording(&faultd);
    let entries = |name: &str| rec.entries.get(name).map(|c| (c.matched, c.taken));
    // cart:1, then cart:2 in the pipeline.
    assert_eq!(entries("oom"), Some((2, 2)), "{rec:#?}");
    // Three INCRs in the pipeline, every second taken.
    assert_eq!(entries("every-second-incr"), Some((3, 1)));
    assert_eq!(entries("loading"), Some((2, 2)));
    assert_eq!(entries("readonly"), Some((1, 1)));
    assert_eq!(entries("slow"), Some((1, 1)));
    let set = &rec.commands["SET"].totals;
    assert_eq!(set.errors.get("OOM"), Some(&2), "{set:?}");
    let get = &rec.commands["GET"];
    assert_eq!(get.totals.errors.get("LOADING"), Some(&2));
    assert!(
        get.totals.latency.max() >= 300_000_000,
        "the delayed GET's latency is recorded"
    );
    let incr = &rec.commands["INCR"].totals;
    // faultd's `-ERR injected`, and the server's own for INCR of "hello" in the raw script: both count.
    assert_eq!(incr.errors.get("ERR"), Some(&2));
    assert!(incr.calls >= 5, "{incr:?}");
    assert!(rec.commands.contains_key("EXEC") && rec.commands.contains_key("MULTI"));
    assert_eq!(
        rec.commands["HGETALL"].totals.calls, 2,
        "raw script and RESP3"
    );
    // The hung client left; nothing is left in flight once every connection closed.
    let settled = wait_for(|| {
        let rec = redis_recording(&faultd);
        rec.commands.values().all(|c| c.in_flight == 0)
    })
    .await;
    assert!(
        settled,
        "commands left in flight: {:#?}",
        redis_recording(&faultd)
    );
    assert_eq!(rec.garbage, 0);
    faultd.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_sees_the_oom_error_and_the_server_never_gets_the_set() {
    let redis = start_redis();
    let faultd = start_faultd(redis.port, "pass").await;
    let port = faultd.tcp_addr("cache").expect("the route listens").port();
    let direct = redis.port;
    let (oom, plain, on_server, missing) = tokio::task::spawn_blocking(move || {
        (
            cli(port, &["SET", "cart:9", "x"]).0,
            cli(port, &["SET", "other", "y"]).0,
            cli(direct, &["GET", "other"]).0,
            cli(direct, &["EXISTS", "cart:9"]).0,
        )
    })
    .await
    .unwrap();
    assert!(
        oom.contains("OOM command not allowed"),
        "redis-cli printed {oom:?}"
    );
    assert_eq!((plain.as_str(), on_server.as_str()), ("OK", "y"));
    assert_eq!(missing, "0", "the SET faultd answered was written");
    let rec = redis_recording(&faultd);
    assert_eq!(rec.commands["SET"].totals.calls, 2);
    assert_eq!(rec.commands["SET"].totals.errors.get("OOM"), Some(&1));
    let control = faultd.control_addr().expect("the control API listens");
    let metrics = crate::common::call(control, "GET", "/metrics", &[], b"").await;
    let text = String::from_utf8_lossy(metrics.body());
    for line in [
        r#"faultd_redis_commands_total{tcp_route="cache",command="SET"} 2"#,
        r#"faultd_redis_errors_total{tcp_route="cache",command="SET",error="OOM"} 1"#,
        r#"faultd_redis_entry_matched_total{tcp_route="cache",entry="oom"} 1"#,
        r#"faultd_redis_entry_taken_total{tcp_route="cache",entry="oom"} 1"#,
        r#"faultd_redis_in_flight{tcp_route="cache",command="SET"} 0"#,
    ] {
        assert!(text.contains(line), "{line} missing from /metrics:\n{text}");
    }
    let recording = crate::common::call(control, "GET", "/recording", &[], b"").await;
    let json: serde_json::Value = serde_json::from_slice(recording.body()).expect("JSON");
    let set = &json["tcp_routes"]["cache"]["redis"]["commands"]["SET"]["totals"];
    assert_eq!(
        (set["calls"].as_u64(), set["errors"]["OOM"].as_u64()),
        (Some(2), Some(1)),
        "{json}"
    );
    // The runner reads a TCP route as a route of calls; a Redis route's entries come with it.
    let calls = faultd::tcp::record::with_tcp_routes(faultd.recording(), faultd.tcp_recording());
    assert_eq!(calls.routes["cache"].matched["oom"].taken, 1);
    faultd.shutdown().await;
}

/// Sends `bytes` on a new connection, half-closes it and reads until faultd closes it.
async fn send_and_read(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connects");
    s.write_all(bytes).await.expect("writes");
    let _ = s.shutdown().await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
    answer
}

async fn wait_for(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_truncated_frames_pass_or_close_and_faultd_goes_on_serving() {
    let redis = start_redis();
    for on_garbage in ["pass", "close"] {
        let faultd = start_faultd(redis.port, on_garbage).await;
        let port = faultd.tcp_addr("cache").expect("the route listens").port();
        // A command, then a line that is no command Redis knows, then bytes no RESP reader accepts.
        let mut garbage = b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$x\r\n".to_vec();
        garbage.extend_from_slice(&[0xff, 0x00, 0x13, b'\r', b'\n']);
        let answer = send_and_read(port, &garbage).await;
        assert!(answer.starts_with(b"+PONG\r\n"), "{on_garbage}: {answer:?}");
        if on_garbage == "pass" {
            assert!(
                answer.len() > 7,
                "pass forwards the rest, and the server answers it: {answer:?}"
            );
        }
        // A frame cut short: the client leaves halfway through a bulk string.
        let cut = send_and_read(port, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nabc").await;
        assert!(cut.is_empty(), "{cut:?}");
        let garbage_seen = wait_for(|| redis_recording(&faultd).garbage == 1).await;
        assert!(
            garbage_seen,
            "{on_garbage}: {:#?}",
            redis_recording(&faultd)
        );
        // faultd still serves the route.
        let ok = send_and_read(port, b"PING\r\n").await;
        assert_eq!(ok, b"+PONG\r\n");
        faultd.shutdown().await;
    }
}
