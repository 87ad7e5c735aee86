//! Each toxic's effect on real traffic: a client, a faultd TCP route and an echo upstream, all on 127.0.0.1.

use crate::tcp;

use std::time::Duration;

use serde_json::json;
use tcp::{connect, faultd, firehose, read_until_end, round_trip, route, toxic, Echo, ReadEnd};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

#[tokio::test]
async fn a_route_forwards_bytes_both_ways_and_records_the_connection() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    let mut s = connect(addr).await.unwrap();
    round_trip(&mut s, b"SELECT 1;").await;
    round_trip(&mut s, &vec![7u8; 200_000]).await;
    let rec = &f.tcp_recording()["db"];
    assert_eq!(rec.totals.attempts, 1);
    assert_eq!(rec.open, 1);
    assert_eq!(rec.totals.bytes_upstream, 200_009);
    assert_eq!(rec.totals.bytes_downstream, 200_009);
    drop(s);
    tcp::wait_open(&f, "db", 0).await;
    f.shutdown().await;
}

#[tokio::test]
async fn latency_of_300ms_makes_a_round_trip_take_at_least_300ms() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    let mut s = connect(addr).await.unwrap();
    assert!(round_trip(&mut s, b"ping").await < Duration::from_millis(250));
    toxic(
        &f,
        "db",
        json!({"type": "latency", "attributes": {"latency": 300}}),
    );
    // The toxic acts on the connection that was already open, as pooled connections are hit in real incidents.
    let took = round_trip(&mut s, b"ping").await;
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    f.tcp().remove_toxic("db", "latency_downstream").unwrap();
    assert!(round_trip(&mut s, b"ping").await < Duration::from_millis(250));
    assert_eq!(f.tcp_recording()["db"].totals.toxics["latency"], 1);
    f.shutdown().await;
}

#[tokio::test]
async fn latency_is_per_chunk_so_chunks_in_flight_are_not_delayed_twice() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    toxic(
        &f,
        "db",
        json!({"type": "latency", "stream": "upstream", "attributes": {"latency": 200}}),
    );
    let mut s = connect(addr).await.unwrap();
    let start = Instant::now();
    for _ in 0..5 {
        s.write_all(b"x").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut got = [0u8; 5];
    s.read_exact(&mut got).await.unwrap();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(280) && took < Duration::from_millis(700),
        "{took:?}"
    );
    f.shutdown().await;
}

#[tokio::test]
async fn down_refuses_connects_and_closes_open_connections_until_enabled_again() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    let mut open = connect(addr).await.unwrap();
    round_trip(&mut open, b"hi").await;
    let update = faultd::tcp::ProxyUpdate {
        enabled: Some(false),
        ..Default::default()
    };
    assert!(!f.tcp().update("db", update).unwrap().enabled);
    let err = connect(addr).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    assert!(matches!(
        read_until_end(&mut open, Duration::from_secs(2)).await,
        ReadEnd::Eof(_) | ReadEnd::Reset(_)
    ));
    let update = faultd::tcp::ProxyUpdate {
        enabled: Some(true),
        ..Default::default()
    };
    let view = f.tcp().update("db", update).unwrap();
    assert_eq!(
        view.listen,
        addr.to_string(),
        "the route comes back on the same port"
    );
    let mut again = connect(addr).await.unwrap();
    round_trip(&mut again, b"back").await;
    f.shutdown().await;
}

#[tokio::test]
async fn reset_peer_resets_the_client_connection() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    toxic(
        &f,
        "db",
        json!({"type": "reset_peer", "attributes": {"timeout": 100}}),
    );
    let mut s = connect(addr).await.unwrap();
    let start = Instant::now();
    let end = read_until_end(&mut s, Duration::from_secs(3)).await;
    assert_eq!(end, ReadEnd::Reset(vec![]));
    assert!(
        start.elapsed() >= Duration::from_millis(90),
        "{:?}",
        start.elapsed()
    );
    tcp::wait_open(&f, "db", 0).await;
    assert_eq!(f.tcp_recording()["db"].totals.resets, 1);
    f.shutdown().await;
}

#[tokio::test]
async fn reset_peer_with_no_timeout_resets_before_any_byte_comes_back() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    toxic(
        &f,
        "db",
        json!({"type": "reset_peer", "attributes": {"timeout": 0}}),
    );
    let mut s = connect(addr).await.unwrap();
    let _ = s.write_all(b"PING").await;
    assert_eq!(
        read_until_end(&mut s, Duration::from_secs(3)).await,
        ReadEnd::Reset(vec![])
    );
    f.shutdown().await;
}

#[tokio::test]
async fn limit_data_closes_the_connection_after_n_bytes() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    toxic(
        &f,
        "db",
        json!({"type": "limit_data", "attributes": {"bytes": 10}}),
    );
    let mut s = connect(addr).await.unwrap();
    s.write_all(&[1u8; 100]).await.unwrap();
    assert_eq!(
        read_until_end(&mut s, Duration::from_secs(3)).await,
        ReadEnd::Eof(vec![1u8; 10])
    );
    f.shutdown().await;
}

#[tokio::test]
async fn bandwidth_bounds_throughput() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    toxic(
        &f,
        "db",
        json!({"type": "bandwidth", "attributes": {"rate": 100}}),
    );
    let mut s = connect(addr).await.unwrap();
    // 50 KB at 100 KB/s: half a second at least.
    let took = round_trip(&mut s, &vec![3u8; 50_000]).await;
    assert!(took >= Duration::from_millis(450), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    f.shutdown().await;
}

#[tokio::test]
async fn timeout_stalls_the_stream_then_closes_it() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    toxic(
        &f,
        "db",
        json!({"type": "timeout", "attributes": {"timeout": 400}}),
    );
    let mut s = connect(addr).await.unwrap();
    let start = Instant::now();
    s.write_all(b"anyone?").await.unwrap();
    let end = read_until_end(&mut s, Duration::from_secs(3)).await;
    assert!(
        matches!(end, ReadEnd::Eof(ref b) | ReadEnd::Reset(ref b) if b.is_empty()),
        "{end:?}"
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(380) && took < Duration::from_secs(2),
        "{took:?}"
    );
    f.shutdown().await;
}

#[tokio::test]
async fn timeout_of_zero_holds_bytes_until_the_toxic_is_removed() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    toxic(
        &f,
        "db",
        json!({"type": "timeout", "attributes": {"timeout": 0}}),
    );
    let mut s = connect(addr).await.unwrap();
    s.write_all(b"held").await.unwrap();
    assert_eq!(
        read_until_end(&mut s, Duration::from_millis(300)).await,
        ReadEnd::Open(vec![])
    );
    f.tcp().remove_toxic("db", "timeout_downstream").unwrap();
    let mut got = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(3), s.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got, b"held");
    f.shutdown().await;
}

#[tokio::test]
async fn slicer_splits_writes_into_small_delayed_slices() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    toxic(
        &f,
        "db",
        json!({"type": "slicer", "attributes": {"average_size": 10, "size_variation": 0, "delay": 30000}}),
    );
    let mut s = connect(addr).await.unwrap();
    let start = Instant::now();
    s.write_all(&[5u8; 100]).await.unwrap();
    let mut reads = Vec::new();
    let mut total = 0;
    let mut buf = [0u8; 1000];
    while total < 100 {
        let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        reads.push(n);
        total += n;
    }
    assert!(reads.len() >= 5, "{reads:?}");
    assert!(reads.iter().all(|&n| n <= 10), "{reads:?}");
    // Nine pauses of 30 ms between ten slices.
    assert!(
        start.elapsed() >= Duration::from_millis(260),
        "{:?}",
        start.elapsed()
    );
    f.shutdown().await;
}

#[tokio::test]
async fn slow_close_holds_the_close() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    toxic(
        &f,
        "db",
        json!({"type": "slow_close", "attributes": {"delay": 300}}),
    );
    let mut s = connect(addr).await.unwrap();
    round_trip(&mut s, b"bye").await;
    let start = Instant::now();
    s.shutdown().await.unwrap();
    assert_eq!(
        read_until_end(&mut s, Duration::from_secs(3)).await,
        ReadEnd::Eof(vec![])
    );
    assert!(
        start.elapsed() >= Duration::from_millis(290),
        "{:?}",
        start.elapsed()
    );
    f.shutdown().await;
}

#[tokio::test]
async fn stall_accepts_and_never_connects_upstream() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    toxic(&f, "db", json!({"type": "stall"}));
    let mut s = connect(addr).await.unwrap();
    s.write_all(b"hello?").await.unwrap();
    assert_eq!(
        read_until_end(&mut s, Duration::from_millis(400)).await,
        ReadEnd::Open(vec![])
    );
    assert_eq!(echo.accepted(), 0);
    assert_eq!(f.tcp().open_connections("db").unwrap(), 1);
    f.shutdown().await;
}

#[tokio::test]
async fn connect_delay_holds_the_upstream_connect() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", echo.addr);
    toxic(
        &f,
        "db",
        json!({"type": "connect_delay", "attributes": {"delay": 300}}),
    );
    let start = Instant::now();
    let mut s = connect(addr).await.unwrap();
    round_trip(&mut s, b"late").await;
    assert!(
        start.elapsed() >= Duration::from_millis(290),
        "{:?}",
        start.elapsed()
    );
    // An open connection is not delayed again.
    assert!(round_trip(&mut s, b"now").await < Duration::from_millis(250));
    f.shutdown().await;
}

#[tokio::test]
async fn an_upstream_that_refuses_closes_the_client_and_other_routes_keep_forwarding() {
    let echo = Echo::start().await;
    let f = faultd(7).await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let bad = route(&f, "gone", dead);
    let good = route(&f, "db", echo.addr);
    let mut s = connect(bad).await.unwrap();
    assert!(matches!(
        read_until_end(&mut s, Duration::from_secs(3)).await,
        ReadEnd::Eof(_) | ReadEnd::Reset(_)
    ));
    tcp::wait_open(&f, "gone", 0).await;
    assert_eq!(f.tcp_recording()["gone"].totals.upstream_errors, 1);
    let mut ok = connect(good).await.unwrap();
    round_trip(&mut ok, b"fine").await;
    f.shutdown().await;
}

/// Which of `n` sequential connections a 50% latency toxic took, under `seed`.
async fn taken_pattern(seed: u64, n: usize) -> Vec<bool> {
    let echo = Echo::start().await;
    let f = faultd(seed).await;
    let addr = route(&f, "db", echo.addr);
    toxic(
        &f,
        "db",
        json!({"type": "latency", "toxicity": 0.5, "attributes": {"latency": 120}}),
    );
    let mut pattern = Vec::new();
    for _ in 0..n {
        let mut s = connect(addr).await.unwrap();
        pattern.push(round_trip(&mut s, b"?").await >= Duration::from_millis(110));
    }
    f.shutdown().await;
    pattern
}

#[tokio::test]
async fn toxicity_takes_the_same_connections_under_the_same_seed() {
    let first = taken_pattern(11, 12).await;
    let again = taken_pattern(11, 12).await;
    assert_eq!(first, again);
    let taken = first.iter().filter(|t| **t).count();
    assert!(taken > 0 && taken < 12, "{first:?}");
}

/// Reads until EOF or reset, counting bytes: (whether it was a reset, bytes read). Panics after `wait`.
async fn drain(s: &mut tokio::net::TcpStream, wait: Duration) -> (bool, u64) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut bytes = 0u64;
    let deadline = Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => panic!("still streaming {wait:?} later ({bytes} bytes read)"),
            Ok(Ok(0)) => return (false, bytes),
            Ok(Ok(n)) => bytes += n as u64,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return (true, bytes),
            Ok(Err(e)) => panic!("read failed: {e}"),
        }
    }
}

/// Reads 1 MiB, so that the direction is busy moving data when the test changes something.
async fn read_some(s: &mut tokio::net::TcpStream) {
    let mut buf = vec![0u8; 1 << 20];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf))
        .await
        .expect("the firehose streams")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_goes_idle_sees_a_new_toxic_and_the_route_going_down() {
    let upstream = firehose().await;
    let f = faultd(7).await;
    let addr = route(&f, "db", upstream);

    // A toxic added while bytes flow without pause acts on the open connection.
    let mut busy = connect(addr).await.unwrap();
    read_some(&mut busy).await;
    toxic(
        &f,
        "db",
        json!({"type": "reset_peer", "attributes": {"timeout": 0}}),
    );
    let (reset, _) = drain(&mut busy, Duration::from_secs(5)).await;
    assert!(reset, "a reset_peer added mid-stream resets the connection");
    f.tcp().remove_toxic("db", "reset_peer_downstream").unwrap();

    // The route going down closes a connection that is moving bytes.
    let mut busy = connect(addr).await.unwrap();
    read_some(&mut busy).await;
    let update = faultd::tcp::ProxyUpdate {
        enabled: Some(false),
        ..Default::default()
    };
    f.tcp().update("db", update).unwrap();
    drain(&mut busy, Duration::from_secs(5)).await;
    tcp::wait_open(&f, "db", 0).await;
    f.shutdown().await;
}
