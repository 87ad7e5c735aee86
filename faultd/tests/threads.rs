//! `--threads`: the faultd binary on one thread (a single-threaded runtime) serves what it serves on many: HTTP/2
//! calls on one connection at once, gRPC answers, delays ended by its deadline waker, the recording and /metrics.
//! A count of zero is refused.

use crate::common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::http2::{connect, exchange, framed, get, grpc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn free_port() -> u16 {
    faultline_units::port::handed_out().expect("a free loopback port")
}

struct Faultd {
    child: Child,
    data: SocketAddr,
    control: SocketAddr,
}

impl Drop for Faultd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(config: &str, threads: &str) -> Faultd {
    let dir = std::env::temp_dir().join(format!("faultd-threads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("faultd.yaml");
    std::fs::write(&file, config).unwrap();
    let data = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let control = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let child = Command::new(env!("CARGO_BIN_EXE_faultd"))
        .args(["--config", file.to_str().unwrap(), "--threads", threads])
        .args([
            "--listen",
            &data.to_string(),
            "--control",
            &control.to_string(),
        ])
        .env_remove("TOKIO_WORKER_THREADS")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let faultd = Faultd {
        child,
        data,
        control,
    };
    let start = Instant::now();
    while std::net::TcpStream::connect(control).is_err()
        || std::net::TcpStream::connect(data).is_err()
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "faultd did not listen within 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    faultd
}

/// One HTTP/1.1 GET to faultd's control API; the body.
async fn control_get(addr: SocketAddr, path: &str) -> String {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: faultd\r\nconnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    tcp.read_to_string(&mut out).await.unwrap();
    out
}

const CONFIG: &str = "\
seed: 1
routes:
  catalog: { path: /shop.Catalog/*, grpc_response: { message: \"0a 03 61 62 63\" } }
  slow: { path: /slow, latency: { fixed: 100ms } }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_thread_answers_concurrent_streams_delays_and_its_recording() {
    let faultd = spawn(CONFIG, "1");
    let client = connect(faultd.data).await;
    // Twenty calls on one connection at once: the batch a single-threaded runtime answers together.
    let calls = (0..20).map(|_| {
        let client = client.clone();
        let addr = faultd.data;
        tokio::spawn(async move {
            exchange(
                &client,
                grpc(addr, "/shop.Catalog/Get", None),
                &framed(b"\x08\x01"),
            )
            .await
        })
    });
    for call in calls {
        let answer = call.await.unwrap().expect("a gRPC call failed");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.grpc_status(), Some("0"));
        assert_eq!(answer.body, framed(b"\x0a\x03abc"));
    }

    // A delay ends by faultd's deadline waker, which runs on the same single thread.
    let sent = Instant::now();
    let slow = exchange(&client, get(faultd.data, "/slow"), b"")
        .await
        .unwrap();
    let took = sent.elapsed();
    assert_eq!(slow.status, 200);
    assert!(
        took >= Duration::from_millis(100),
        "answered after {took:?}"
    );
    // Generous: a loaded machine may be slow to schedule the client, but no timer wheel rounds to seconds.
    assert!(took < Duration::from_secs(2), "answered after {took:?}");

    let metrics = control_get(faultd.control, "/metrics").await;
    assert!(
        metrics.contains("faultd_arrivals_total{route=\"catalog\"} 20"),
        "{metrics}"
    );
    assert!(
        metrics.contains("faultd_arrivals_total{route=\"slow\"} 1"),
        "{metrics}"
    );
}

#[test]
fn zero_threads_is_refused_with_exit_code_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_faultd"))
        .args(["--threads", "0", "--listen", "127.0.0.1:0"])
        .env_remove("TOKIO_WORKER_THREADS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("--threads"), "{text}");
}
