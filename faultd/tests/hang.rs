//! The end-to-end test the issue asks for: 200 concurrent clients against a hang route, and faultd reports a
//! maximum of exactly 200 calls in flight; when the clients give up, every call leaves and counts as a hang.

use crate::common;

use std::time::Duration;

use common::wait_for;
use faultd::{Config, Options};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const CLIENTS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_on_a_hang_route_are_exactly_two_hundred_in_flight() {
    let f = hang_route().await;
    let addr = f.data_addr();
    let clients = futures_util::future::join_all((0..CLIENTS).map(|i| async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET /price/{i} HTTP/1.1\r\nHost: faultd\r\n\r\n").as_bytes())
            .await
            .unwrap();
        s
    }))
    .await;
    wait_for("200 calls in flight", || f.in_flight() == CLIENTS as u64).await;
    // Hold for three of the recorder's 100 ms buckets, so that at least one whole bucket begins after all 200
    // arrived and ends before the reading: nothing more arrives, nothing leaves.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = f.recording();
    let route = &r.routes["pricing"];
    assert_eq!(route.max_in_flight, CLIENTS as u64);
    assert_eq!(route.in_flight, CLIENTS as u64);
    assert_eq!(route.totals.arrivals, CLIENTS as u64);
    assert_eq!(
        route.buckets.iter().map(|b| b.in_flight_max).max(),
        Some(CLIENTS as u64)
    );
    // The last full bucket held all 200 the whole time.
    let last_full = &route.buckets[route.buckets.len() - 2];
    assert_eq!(last_full.in_flight_max, CLIENTS as u64);
    assert!(
        (last_full.in_flight_mean - CLIENTS as f64).abs() < 1e-6,
        "{last_full:?}"
    );
    assert_eq!(
        r.connections.iter().map(|c| c.max_open).max(),
        Some(CLIENTS as u64)
    );

    // The clients give up: every call leaves, as a hang.
    drop(clients);
    wait_for("every hung call to leave", || f.in_flight() == 0).await;
    let r = f.recording();
    assert_eq!(r.routes["pricing"].totals.hangs, CLIENTS as u64);
    assert_eq!(r.routes["pricing"].max_in_flight, CLIENTS as u64);
    f.shutdown().await;
}

async fn hang_route() -> faultd::Faultd {
    let config = Config::from_yaml(
        "routes:\n  pricing: { path: /price/*, hang: 100% }\n",
        "hang.yaml",
    )
    .unwrap();
    let f = faultd::start(config, Options::default()).await.unwrap();
    f.start_schedule(tokio::time::Instant::now());
    f
}

/// Opens a connection with one request to the hang route and waits until faultd holds it.
async fn one_hung_call(f: &faultd::Faultd) -> TcpStream {
    let mut s = TcpStream::connect(f.data_addr()).await.unwrap();
    s.write_all(b"GET /price/1 HTTP/1.1\r\nHost: faultd\r\n\r\n")
        .await
        .unwrap();
    wait_for("the call in flight", || f.in_flight() == 1).await;
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_call_stays_held_while_its_caller_keeps_sending_and_leaves_when_it_closes() {
    use tokio::io::AsyncReadExt;
    let f = hang_route().await;
    let mut s = one_hung_call(&f).await;
    // A pipelined second request and some stray bytes: HTTP/1.1 answers in order, so neither is answered and the
    // first call stays held.
    s.write_all(b"GET /price/2 HTTP/1.1\r\nHost: faultd\r\n\r\nstray bytes")
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_millis(300), s.read(&mut byte)).await;
    assert!(read.is_err(), "the caller got {read:?} from a hung call");
    assert_eq!(f.in_flight(), 1);

    drop(s);
    wait_for("the hung call to leave", || f.in_flight() == 0).await;
    let r = f.recording();
    assert_eq!(r.routes["pricing"].totals.arrivals, 1);
    assert_eq!(r.routes["pricing"].totals.hangs, 1);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_the_connections_of_hung_calls() {
    use tokio::io::AsyncReadExt;
    let f = hang_route().await;
    let mut s = one_hung_call(&f).await;
    f.shutdown().await;
    // The caller sees its connection end (EOF or reset), with no answer.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest))
        .await
        .expect("the connection of a hung call outlived shutdown");
    assert!(rest.is_empty(), "a hung call was answered: {rest:?}");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}
