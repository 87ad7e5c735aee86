//! Connections that carry no call are closed: a request head that stalls after its first bytes (a slowloris)
//! after the header timeout, a keep-alive connection idle between calls after the idle timeout, on the data plane
//! (HTTP/1.1, HTTP/2, TLS) and on the control and Toxiproxy APIs; while the calls faultd holds on purpose (a hang,
//! a delay) are never cut.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::wait_for;
use faultd::timeouts::Timeouts;
use faultd::{Config, Options};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const ROUTES: &str = "routes:\n  hang: { path: /hang/*, hang: 100% }\n  slow: { path: /slow/*, latency: { fixed: 900ms } }\n  pricing: { path: /price/* }\n";

async fn start(yaml: &str, header: Duration, idle: Duration) -> faultd::Faultd {
    let config = Config::from_yaml(yaml, "timeouts.yaml").unwrap();
    let options = Options {
        control: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        toxiproxy_api: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        timeouts: Timeouts { header, idle },
        ..Options::default()
    };
    let f = faultd::start(config, options).await.unwrap();
    f.start_schedule(Instant::now());
    f
}

/// Reads and discards until faultd closes the connection (EOF or reset); fails the test after 20 s. Returns how
/// long that took from `since`.
async fn closed_by_faultd(stream: &mut TcpStream, since: Instant) -> Duration {
    let mut sink = [0u8; 1024];
    let deadline = since + Duration::from_secs(20);
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return since.elapsed(),
            Ok(Ok(_)) => continue,
            Err(_) => panic!("faultd did not close the connection within 20 s"),
        }
    }
}

/// Whether faultd has closed or reset `stream` (an EOF or an error is waiting), without blocking.
fn is_closed(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.try_read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Sends the start of a request head and nothing more, as a slowloris does.
async fn slowloris(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /price/1 HTTP/1.1\r\nHost: faultd\r\nX-Slow: ")
        .await
        .unwrap();
    s
}

/// Reads one HTTP/1.1 answer with a `content-length` off a keep-alive connection; returns its status.
async fn read_answer(stream: &mut TcpStream) -> u16 {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().unwrap())
                    .unwrap_or(0);
                if raw.len() >= end + 4 + length {
                    return head[9..12].parse().unwrap();
                }
            }
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before the answer");
            raw.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("no answer within 20 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_head_is_closed_after_the_header_timeout_while_held_and_delayed_calls_go_on() {
    let header = Duration::from_millis(300);
    let f = start(ROUTES, header, Duration::from_secs(60)).await;
    let mut hung = TcpStream::connect(f.data_addr()).await.unwrap();
    hung.write_all(b"GET /hang/1 HTTP/1.1\r\nHost: faultd\r\n\r\n")
        .await
        .unwrap();
    wait_for("the hung call in flight", || f.in_flight() == 1).await;
    let mut delayed = TcpStream::connect(f.data_addr()).await.unwrap();
    delayed
        .write_all(b"GET /slow/1 HTTP/1.1\r\nHost: faultd\r\n\r\n")
        .await
        .unwrap();

    let began = Instant::now();
    let mut slow = slowloris(f.data_addr()).await;
    let took = closed_by_faultd(&mut slow, began).await;
    assert!(
        took >= header,
        "closed after {took:?}, before the header timeout"
    );

    // A delay three times the header timeout is answered, and the hang is still held.
    assert_eq!(read_answer(&mut delayed).await, 200);
    assert_eq!(f.in_flight(), 1);
    assert!(!is_closed(&hung), "the hung call's connection was closed");
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout_not_the_header_timeout() {
    let idle = Duration::from_millis(1500);
    let f = start(ROUTES, Duration::from_millis(200), idle).await;
    let mut keep_alive = TcpStream::connect(f.data_addr()).await.unwrap();
    keep_alive
        .write_all(b"GET /price/1 HTTP/1.1\r\nHost: faultd\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_answer(&mut keep_alive).await, 200);
    let answered = Instant::now();
    let took = closed_by_faultd(&mut keep_alive, answered).await;
    // faultd's clock starts a little before the answer is read here: a margin below the idle timeout, but far
    // above the header timeout.
    assert!(
        took >= idle - Duration::from_millis(300),
        "an idle connection was closed after {took:?}"
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_on_the_control_and_toxiproxy_apis_is_closed_after_the_header_timeout() {
    let header = Duration::from_millis(300);
    let f = start(ROUTES, header, Duration::from_secs(60)).await;
    for addr in [f.control_addr().unwrap(), f.toxiproxy_addr().unwrap()] {
        let began = Instant::now();
        let mut slow = slowloris(addr).await;
        let took = closed_by_faultd(&mut slow, began).await;
        assert!(took >= header, "{addr}: closed after {took:?}");
    }
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_hello_that_stalls_is_closed_after_the_header_timeout() {
    let header = Duration::from_millis(300);
    let yaml = format!("{ROUTES}tls: {{}}\n");
    let f = start(&yaml, header, Duration::from_secs(60)).await;
    let began = Instant::now();
    let mut stalled = TcpStream::connect(f.data_addr()).await.unwrap();
    // The first bytes of a handshake record, then nothing.
    stalled.write_all(&[0x16, 0x03, 0x01, 0x00]).await.unwrap();
    let took = closed_by_faultd(&mut stalled, began).await;
    // Far above 300 ms for a noisy machine, far below the 10 s a handshake had before it followed the setting.
    assert!(
        took >= header && took < Duration::from_secs(5),
        "closed after {took:?}"
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_closed_while_one_holding_a_hung_stream_is_not() {
    let idle = Duration::from_millis(1000);
    let f = start(ROUTES, Duration::from_millis(300), idle).await;
    let connect = |addr| async move {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        (client, tokio::spawn(conn))
    };
    let (holding, holding_conn) = connect(f.data_addr()).await;
    let request = common::http2::get(f.data_addr(), "/hang/1");
    let hung = tokio::spawn(async move { common::http2::exchange(&holding, request, b"").await });
    wait_for("the hung stream in flight", || f.in_flight() == 1).await;

    let (idle_client, idle_conn) = connect(f.data_addr()).await;
    let answer = common::http2::exchange(
        &idle_client,
        common::http2::get(f.data_addr(), "/price/1"),
        b"",
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 200);
    let answered = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), idle_conn)
        .await
        .expect("the idle HTTP/2 connection was not closed within 20 s")
        .unwrap()
        .ok();
    let took = answered.elapsed();
    assert!(
        took >= idle - Duration::from_millis(300),
        "closed after {took:?}"
    );

    // Closed a whole idle timeout after the hung stream began: the stream and its connection are still held.
    assert_eq!(f.in_flight(), 1);
    assert!(!holding_conn.is_finished());
    assert!(!hung.is_finished());
    f.shutdown().await;
}
