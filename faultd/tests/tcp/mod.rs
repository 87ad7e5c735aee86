//! Helpers for the TCP route tests: an echo upstream that counts its connections, a faultd with TCP routes,
//! and a client that times round trips. Everything on 127.0.0.1, every wait bounded.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// An upstream that echoes every byte back; it closes when its client has finished sending.
pub struct Echo {
    pub addr: SocketAddr,
    pub accepted: Arc<AtomicU64>,
}

impl Echo {
    pub async fn start() -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if s.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        Echo { addr, accepted }
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A faultd (seed 7 unless told) with its Toxiproxy API and control API on free loopback ports.
pub async fn faultd(seed: u64) -> faultd::Faultd {
    let config = faultd::Config::from_yaml(
        &format!("seed: {seed}\nroutes:\n  any: {{ path: /* }}\n"),
        "tcp-test.yaml",
    )
    .unwrap();
    faultd::start(
        config,
        faultd::Options {
            control: Some(([127, 0, 0, 1], 0).into()),
            toxiproxy_api: Some(([127, 0, 0, 1], 0).into()),
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

/// Creates route `name` in front of `upstream` and returns the address clients connect to.
pub fn route(f: &faultd::Faultd, name: &str, upstream: SocketAddr) -> SocketAddr {
    let view = f
        .tcp()
        .create(faultd::tcp::ProxySpec::new(
            name,
            "127.0.0.1:0",
            &upstream.to_string(),
        ))
        .unwrap();
    view.listen.parse().unwrap()
}

/// Adds a toxic from its Toxiproxy JSON.
pub fn toxic(f: &faultd::Faultd, route: &str, json: serde_json::Value) {
    f.tcp()
        .add_toxic(route, serde_json::from_value(json).unwrap())
        .unwrap();
}

/// Connects, bounded at 5 s.
pub async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
        .await
        .unwrap_or_else(|_| Err(std::io::Error::other("connect timed out")))
}

/// Sends `payload` and reads until as many bytes came back; the time it took.
pub async fn round_trip(s: &mut TcpStream, payload: &[u8]) -> Duration {
    let start = Instant::now();
    s.write_all(payload).await.unwrap();
    let mut got = vec![0u8; payload.len()];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut got))
        .await
        .expect("no echo within 10 s")
        .unwrap();
    assert_eq!(got, payload);
    start.elapsed()
}

/// How a read ended.
#[derive(Debug, PartialEq)]
pub enum ReadEnd {
    /// A FIN after these bytes.
    Eof(Vec<u8>),
    /// A reset after these bytes.
    Reset(Vec<u8>),
    /// Still open after the wait, with these bytes.
    Open(Vec<u8>),
}

/// Reads until EOF, reset or `wait` passes.
pub async fn read_until_end(s: &mut TcpStream, wait: Duration) -> ReadEnd {
    let mut got = Vec::new();
    let deadline = Instant::now() + wait;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return ReadEnd::Open(got),
            Ok(Ok(0)) => return ReadEnd::Eof(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return ReadEnd::Reset(got)
            }
            Ok(Err(e)) => panic!("read failed: {e}"),
        }
    }
}

/// Waits (at most 5 s) until route `name` holds `n` connections open.
pub async fn wait_open(f: &faultd::Faultd, name: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while f.tcp().open_connections(name).unwrap() != n {
        assert!(
            Instant::now() < deadline,
            "route {name} never got to {n} open connections"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An upstream that writes without pause to whoever connects, until the connection breaks.
pub async fn firehose() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let chunk = vec![b'x'; 16 * 1024];
                while s.write_all(&chunk).await.is_ok() {}
            });
        }
    });
    addr
}
