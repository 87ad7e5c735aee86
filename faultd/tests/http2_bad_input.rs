//! Bad input on faultd's HTTP/2 and gRPC port: malformed frames, bodies a gRPC server cannot read, floods of
//! HEADERS and CONTINUATION frames, a peer that never reads. Each ends that stream or that connection with the
//! protocol's own error, never a panic, and a well-behaved connection with a call in flight beside it is served as
//! if nothing happened. Real time over loopback; every count and delay is small.

use crate::common;

use std::time::{Duration, Instant};

use common::http2::*;

/// A well-behaved call on its own connection, started before the bad input and answered after it: the route
/// `slow` takes 300 ms.
fn bystander(addr: std::net::SocketAddr) -> tokio::task::JoinHandle<u16> {
    tokio::spawn(async move {
        let client = connect(addr).await;
        exchange(&client, get(addr, "/slow"), b"")
            .await
            .expect("the bystander's call failed")
            .status
    })
}

const ROUTES: &str = "routes:\n  slow: { path: /slow, latency: { fixed: 300ms } }\n  ok: { path: /ok }\n  held: { path: /held, hang: 100% }\n  big: { path: /big, response: { body_size: 1MB } }\n  echo: { path: /shop.Echo/*, grpc_response: { echo: true } }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_frame_ends_its_connection_with_the_protocols_error_and_no_other() {
    let f = start(ROUTES).await;
    let addr = f.data_addr();
    let before = bystander(addr);
    common::wait_for("the bystander's call", || f.in_flight() == 1).await;

    // A SETTINGS frame whose length is not a multiple of 6.
    let mut raw = Raw::connect(addr).await;
    raw.send(&raw_frame(SETTINGS, 0, 0, &[0; 5])).await.unwrap();
    let goaway = raw.until_goaway().await.expect("no GOAWAY");
    // RFC 9113 names FRAME_SIZE_ERROR; h2 answers PROTOCOL_ERROR. Either is a connection error of this peer's.
    assert!(
        [0x1, 0x6].contains(&goaway.code()),
        "FRAME_SIZE_ERROR or PROTOCOL_ERROR expected: {goaway:?}"
    );

    // DATA on stream 0, which only connection-level frames may use.
    let mut raw = Raw::connect(addr).await;
    raw.send(&raw_frame(DATA, 0, 0, b"data")).await.unwrap();
    let goaway = raw.until_goaway().await.expect("no GOAWAY");
    assert_eq!(goaway.code(), 0x1, "PROTOCOL_ERROR expected: {goaway:?}");

    // A frame of a type nobody defined is ignored, as RFC 9113 says: the PING after it is answered.
    let mut raw = Raw::connect(addr).await;
    raw.send(&raw_frame(0xfa, 0xff, 0, b"whatever"))
        .await
        .unwrap();
    raw.send(&raw_frame(PING, 0, 0, b"12345678")).await.unwrap();
    loop {
        let frame = raw
            .next()
            .await
            .expect("closed instead of answering the PING");
        if frame.kind == PING {
            assert_eq!((frame.flags, &frame.payload[..]), (ACK, &b"12345678"[..]));
            break;
        }
    }

    // Bytes that are no frame at all after the preface.
    let mut raw = Raw::connect(addr).await;
    let _ = raw.send(&[0xff; 64]).await;
    let goaway = raw.until_goaway().await;
    assert!(
        goaway.as_ref().is_none_or(|g| g.code() != 0),
        "garbage was taken for frames: {goaway:?}"
    );

    assert_eq!(before.await.unwrap(), 200);
    let client = connect(addr).await;
    assert_eq!(
        exchange(&client, get(addr, "/ok"), b"")
            .await
            .unwrap()
            .status,
        200
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_body_that_a_server_cannot_read_fails_only_its_own_call() {
    let f = start(ROUTES).await;
    let addr = f.data_addr();
    let client = connect(addr).await;
    let call = |body: Vec<u8>| {
        let client = client.clone();
        async move {
            exchange(&client, grpc(addr, "/shop.Echo/Say", None), &body)
                .await
                .unwrap()
        }
    };

    let a = call(b"hello, not length-prefixed".to_vec()).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.grpc_status(), Some("13"), "INTERNAL expected: {a:?}");
    assert!(a
        .trailer("grpc-message")
        .unwrap()
        .contains("not length-prefixed"));

    // A message declared at 5 MiB is refused from its prefix, before its bytes are sent.
    let mut oversized = vec![0];
    oversized.extend_from_slice(&(5u32 << 20).to_be_bytes());
    oversized.extend_from_slice(&[7; 1024]);
    let a = call(oversized).await;
    assert_eq!(
        a.grpc_status(),
        Some("8"),
        "RESOURCE_EXHAUSTED expected: {a:?}"
    );
    assert_eq!(
        a.trailer("grpc-message"),
        Some("received message larger than max (5242880 vs. 4194304)")
    );

    let mut compressed = framed(b"zz");
    compressed[0] = 1;
    assert_eq!(call(compressed).await.grpc_status(), Some("12"));

    let mut cut = framed(b"abcdef");
    cut.truncate(8);
    assert_eq!(call(cut).await.grpc_status(), Some("13"));

    // The same connection still serves a well-formed call.
    let a = call(framed(b"hello")).await;
    assert_eq!((&a.body, a.grpc_status()), (&framed(b"hello"), Some("0")));

    let statuses = &f.recording().routes["echo"].totals.grpc_status;
    assert_eq!(
        (
            statuses["INTERNAL"],
            statuses["RESOURCE_EXHAUSTED"],
            statuses["UNIMPLEMENTED"],
            statuses["OK"]
        ),
        (2, 1, 1, 1)
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headers_flood_beyond_the_stream_limit_is_refused_and_holds_no_more_than_the_limit() {
    let f = start(&format!(
        "http2: {{ max_concurrent_streams: 50 }}\n{ROUTES}"
    ))
    .await;
    let addr = f.data_addr();
    let before = bystander(addr);
    common::wait_for("the bystander's call", || f.in_flight() == 1).await;

    // 500 requests on a route that never answers, written in one burst without waiting for SETTINGS.
    let mut raw = Raw::connect(addr).await;
    let mut burst = Vec::new();
    for i in 0..500u32 {
        burst.extend(raw_frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            2 * i + 1,
            &get_block("/held"),
        ));
    }
    raw.send(&burst).await.unwrap();

    let mut refused = 0;
    let mut goaway = None;
    while refused < 450 {
        match raw.next().await {
            Some(frame) if frame.kind == RST_STREAM => {
                assert_eq!(frame.code(), 0x7, "REFUSED_STREAM expected: {frame:?}");
                refused += 1;
            }
            Some(frame) if frame.kind == GOAWAY => {
                goaway = Some(frame);
                break;
            }
            Some(_) => {}
            None => break,
        }
    }
    // Every stream beyond the limit was refused, or the flood ended the connection with a GOAWAY that blames it.
    assert!(
        refused == 450 || goaway.as_ref().is_some_and(|g| g.code() != 0),
        "{refused} refused, then {goaway:?}"
    );
    let held = f.recording().routes["held"].totals.arrivals;
    assert!(
        held <= 50,
        "faultd took {held} streams past its limit of 50"
    );

    assert_eq!(before.await.unwrap(), 200);
    drop(raw);
    common::wait_for("the held streams to leave", || f.in_flight() == 0).await;
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_flood_ends_its_connection_before_it_costs_memory() {
    let f = start(ROUTES).await;
    let addr = f.data_addr();
    let before = bystander(addr);
    common::wait_for("the bystander's call", || f.in_flight() == 1).await;

    // A header block that never ends: 4,096 CONTINUATION frames (64 MB), each holding one 16 kB header field.
    let mut raw = Raw::connect(addr).await;
    raw.send(&raw_frame(HEADERS, 0, 1, &get_block("/ok")))
        .await
        .unwrap();
    // A literal field never indexed, new name `x-flood` (7 bytes), a value of 16,000 bytes: 127 + 15,873 in
    // HPACK's integer form is 0x7f, then 0x81 0x7c.
    let mut field = vec![0x10, 0x07];
    field.extend_from_slice(b"x-flood");
    field.extend_from_slice(&[0x7f, 0x81, 0x7c]);
    field.resize(field.len() + 16_000, b'a');
    let continuation = raw_frame(CONTINUATION, 0, 1, &field);
    let started = Instant::now();
    let mut sent = 0usize;
    for _ in 0..4096 {
        match tokio::time::timeout(Duration::from_secs(10), raw.send(&continuation)).await {
            Ok(Ok(())) => sent += continuation.len(),
            Ok(Err(_)) => break,
            Err(_) => {
                panic!("faultd stopped reading after {sent} bytes but kept the connection open")
            }
        }
    }
    let goaway = raw.until_goaway().await;
    assert!(
        goaway.as_ref().is_none_or(|g| g.code() != 0),
        "the flood was taken as a request: {goaway:?}"
    );
    assert!(
        sent < 4096 * continuation.len(),
        "faultd read all {sent} bytes of an endless header block"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(f.recording().routes["ok"].totals.arrivals, 0);

    assert_eq!(before.await.unwrap(), 200);
    f.shutdown().await;
}

/// Connections faultd holds open now, from its recording.
fn open_connections(f: &faultd::Faultd) -> u64 {
    let buckets = f.recording().connections;
    let opened: u64 = buckets.iter().map(|b| b.opened).sum();
    let closed: u64 = buckets.iter().map(|b| b.closed).sum();
    opened - closed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_reads_stalls_only_its_own_streams() {
    let f = start(ROUTES).await;
    let addr = f.data_addr();

    // 100 requests for a 1 MB body, and not one byte read or one WINDOW_UPDATE sent. faultd answers each (its
    // calls end when their bodies are handed to the connection); the bytes wait on flow control.
    let mut raw = Raw::connect(addr).await;
    let mut burst = Vec::new();
    for i in 0..100u32 {
        burst.extend(raw_frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            2 * i + 1,
            &get_block("/big"),
        ));
    }
    raw.send(&burst).await.unwrap();
    common::wait_for("the 100 streams", || {
        f.recording().routes["big"].totals.arrivals == 100
    })
    .await;
    assert_eq!(open_connections(&f), 1);

    // Other connections are served while those streams wait on flow control.
    let client = connect(addr).await;
    let started = Instant::now();
    for _ in 0..20 {
        let a = exchange(&client, get(addr, "/big"), b"").await.unwrap();
        assert_eq!((a.status, a.body.len()), (200, 1_000_000));
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "20 MB took {:?} beside the stalled peer",
        started.elapsed()
    );
    assert_eq!(f.recording().routes["big"].totals.arrivals, 120);

    // When the peer goes, so does its connection with the 100 MB it never read.
    drop(raw);
    drop(client);
    common::wait_for("the stalled connection to close", || {
        open_connections(&f) == 0
    })
    .await;
    f.shutdown().await;
}
