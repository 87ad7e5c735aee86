//! HTTP/2 and gRPC on faultd's data port, seen by a plain h2 client over loopback: the same port serves both
//! versions, a stream counts as a call, and each stream-level fault (gRPC statuses, deadlines, RST_STREAM,
//! GOAWAY, the stream limit) reaches the client as configured. Real time; every delay is short.

use crate::common;

use common::http2::{connect, exchange, framed, get, grpc, start};

use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_and_http1_share_the_port_and_streams_count_as_calls() {
    let f = start("routes:\n  pricing: { path: /price/*, response: { body_size: 100B } }\n").await;
    let client = connect(f.data_addr()).await;
    for i in 0..3 {
        let a = exchange(&client, get(f.data_addr(), &format!("/price/{i}")), b"")
            .await
            .unwrap();
        assert_eq!((a.status, a.body.len()), (200, 100));
    }
    assert_eq!(
        common::get(f.data_addr(), "/price/9").await.status(),
        Some(200)
    );
    let r = f.recording();
    let pricing = &r.routes["pricing"].totals;
    assert_eq!((pricing.arrivals, pricing.completed.c2xx), (4, 4));
    assert!(pricing.grpc_status.is_empty());
    let connections: u64 = r.connections.iter().map(|c| c.opened).sum();
    let http2: u64 = r.connections.iter().map(|c| c.http2_opened).sum();
    assert_eq!((connections, http2), (2, 1));
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_get_the_configured_message_or_their_own_with_status_ok() {
    let f = start(
        "routes:\n  product: { path: /shop.Catalog/GetProduct, grpc_response: { message: 0a03616263, metadata: { x-served-by: faultd }, trailers: { x-cache: miss } } }\n  echo: { path: /shop.Echo/*, grpc_response: { echo: true } }\n",
    )
    .await;
    let addr = f.data_addr();
    let client = connect(addr).await;
    let a = exchange(
        &client,
        grpc(addr, "/shop.Catalog/GetProduct", None),
        &framed(b"\x08\x01"),
    )
    .await
    .unwrap();
    assert_eq!(a.status, 200);
    assert_eq!(a.headers["content-type"], "application/grpc");
    assert_eq!(a.headers["x-served-by"], "faultd");
    assert_eq!(a.body, framed(b"\x0a\x03abc"));
    assert_eq!(a.grpc_status(), Some("0"));
    assert_eq!(a.trailer("x-cache"), Some("miss"));
    let a = exchange(
        &client,
        grpc(addr, "/shop.Echo/Say", None),
        &framed(b"hello"),
    )
    .await
    .unwrap();
    assert_eq!((&a.body, a.grpc_status()), (&framed(b"hello"), Some("0")));
    let r = f.recording();
    assert_eq!(r.routes["product"].totals.grpc_status["OK"], 1);
    assert_eq!(r.routes["echo"].totals.grpc_status["OK"], 1);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_method_gets_its_messages_at_the_interval_and_a_broken_stream_its_status_after_n(
) {
    let f = start(
        "routes:\n  watch: { path: /shop.Prices/Watch, grpc_response: { message: 0801, stream: { messages: 5, interval: 40ms } } }\n  broken: { path: /shop.Prices/Broken, grpc_response: { message: 0802, stream: { messages: 5, interval: 40ms } }, grpc_errors: [ { share: 100%, code: UNAVAILABLE, message: 'stream lost', after_messages: 2 } ] }\n",
    )
    .await;
    let addr = f.data_addr();
    let client = connect(addr).await;
    let started = Instant::now();
    let a = exchange(
        &client,
        grpc(addr, "/shop.Prices/Watch", None),
        &framed(b""),
    )
    .await
    .unwrap();
    let took = started.elapsed();
    assert_eq!(a.body, framed(b"\x08\x01").repeat(5));
    assert_eq!(a.grpc_status(), Some("0"));
    // Four pauses of 40 ms between five messages; a loaded machine only adds.
    assert!(
        took >= Duration::from_millis(160),
        "five messages in {took:?}"
    );

    let a = exchange(
        &client,
        grpc(addr, "/shop.Prices/Broken", None),
        &framed(b""),
    )
    .await
    .unwrap();
    assert_eq!(a.body, framed(b"\x08\x02").repeat(2));
    assert_eq!(a.grpc_status(), Some("14"));
    assert_eq!(a.trailer("grpc-message"), Some("stream lost"));
    let r = f.recording();
    assert_eq!(r.routes["watch"].totals.grpc_status["OK"], 1);
    assert_eq!(r.routes["broken"].totals.grpc_status["UNAVAILABLE"], 1);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_errors_carry_their_status_message_and_metadata_and_are_counted_by_status() {
    let f = start(
        "routes:\n  product: { path: /shop.Catalog/*, grpc_errors: [ { share: 100%, code: RESOURCE_EXHAUSTED, message: 'quota: 100% used', metadata: { grpc-retry-pushback-ms: '500' } } ] }\n",
    )
    .await;
    let addr = f.data_addr();
    let client = connect(addr).await;
    for _ in 0..2 {
        let a = exchange(
            &client,
            grpc(addr, "/shop.Catalog/GetProduct", None),
            &framed(b""),
        )
        .await
        .unwrap();
        assert_eq!(a.status, 200);
        assert!(a.body.is_empty());
        assert_eq!(a.grpc_status(), Some("8"));
        assert_eq!(a.trailer("grpc-message"), Some("quota: 100%25 used"));
        assert_eq!(a.trailer("grpc-retry-pushback-ms"), Some("500"));
    }
    // A plain HTTP call on the same route gets the gateway mapping of the code.
    let a = exchange(&client, get(addr, "/shop.Catalog/GetProduct"), b"")
        .await
        .unwrap();
    assert_eq!(a.status, 429);
    let totals = &f.recording().routes["product"].totals;
    assert_eq!(totals.grpc_status["RESOURCE_EXHAUSTED"], 2);
    assert_eq!((totals.completed.c2xx, totals.completed.c4xx), (2, 1));
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_deadline_shorter_than_the_delay_ends_the_call_deadline_exceeded_at_the_deadline() {
    let f = start("routes:\n  slow: { path: /shop.Catalog/*, latency: { fixed: 2s } }\n").await;
    let addr = f.data_addr();
    let client = connect(addr).await;
    let started = Instant::now();
    let a = exchange(
        &client,
        grpc(addr, "/shop.Catalog/GetProduct", Some("150m")),
        &framed(b""),
    )
    .await
    .unwrap();
    let took = started.elapsed();
    assert_eq!(a.grpc_status(), Some("4"));
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    assert_eq!(
        f.recording().routes["slow"].totals.grpc_status["DEADLINE_EXCEEDED"],
        1
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rst_stream_resets_only_the_stream_with_its_code() {
    let f = start(
        "routes:\n  refused: { path: /shop.Catalog/*, rst_stream: { share: 100%, code: REFUSED_STREAM } }\n  ok: { path: /ok }\n",
    )
    .await;
    let addr = f.data_addr();
    let client = connect(addr).await;
    let e = exchange(
        &client,
        grpc(addr, "/shop.Catalog/GetProduct", None),
        &framed(b""),
    )
    .await
    .unwrap_err();
    assert_eq!(e.reason(), Some(h2::Reason::REFUSED_STREAM), "{e}");
    // The connection lives on.
    assert_eq!(
        exchange(&client, get(addr, "/ok"), b"")
            .await
            .unwrap()
            .status,
        200
    );
    assert_eq!(f.recording().routes["refused"].totals.resets, 1);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_stream_holds_only_itself_and_leaves_when_the_caller_resets_it() {
    let f = start("routes:\n  held: { path: /held, hang: 100% }\n  ok: { path: /ok }\n").await;
    let addr = f.data_addr();
    let client = connect(addr).await;
    let held = tokio::spawn({
        let client = client.clone();
        async move { exchange(&client, get(addr, "/held"), b"").await }
    });
    common::wait_for("the hung call", || f.in_flight() == 1).await;
    assert_eq!(
        exchange(&client, get(addr, "/ok"), b"")
            .await
            .unwrap()
            .status,
        200
    );
    // Dropping the stream's future sends RST_STREAM(CANCEL).
    held.abort();
    common::wait_for("the hang to be recorded", || {
        f.recording().routes["held"].totals.hangs == 1
    })
    .await;
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_goaway_lets_the_nth_stream_finish_and_takes_no_more() {
    let f = start("routes:\n  r: { path: /r, goaway: { after: 2 } }\n").await;
    let addr = f.data_addr();
    let client = connect(addr).await;
    for _ in 0..2 {
        assert_eq!(
            exchange(&client, get(addr, "/r"), b"")
                .await
                .unwrap()
                .status,
            200
        );
    }
    // The GOAWAY has been sent: the next stream on this connection is refused, never served.
    common::wait_for("the connection to close", || {
        f.recording()
            .connections
            .iter()
            .map(|c| c.closed)
            .sum::<u64>()
            == 1
    })
    .await;
    assert!(exchange(&client, get(addr, "/r"), b"").await.is_err());
    // A new connection is served.
    let fresh = connect(addr).await;
    assert_eq!(
        exchange(&fresh, get(addr, "/r"), b"").await.unwrap().status,
        200
    );
    assert_eq!(f.recording().routes["r"].totals.arrivals, 3);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abrupt_goaway_loses_the_streams_in_flight() {
    let f = start(
        "routes:\n  slow: { path: /slow, latency: { fixed: 5s } }\n  r: { path: /r, goaway: { after: 2, mode: abrupt, code: ENHANCE_YOUR_CALM } }\n",
    )
    .await;
    let addr = f.data_addr();
    let client = connect(addr).await;
    let slow = tokio::spawn({
        let client = client.clone();
        async move { exchange(&client, get(addr, "/slow"), b"").await }
    });
    common::wait_for("the slow call", || f.in_flight() == 1).await;
    let started = Instant::now();
    let e = exchange(&client, get(addr, "/r"), b"").await.unwrap_err();
    assert!(e.is_go_away() || e.is_io(), "{e:?}");
    let lost = slow.await.unwrap().unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the slow call was not lost"
    );
    // The GOAWAY names every stream as possibly processed, so the client fails them when the connection closes
    // rather than retrying them elsewhere.
    assert!(
        lost.is_io() || lost.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM),
        "{lost:?}"
    );
    common::wait_for("both calls to leave", || f.in_flight() == 0).await;
    let r = f.recording();
    assert_eq!(r.routes["r"].totals.resets, 1);
    assert_eq!(r.routes["slow"].totals.abandoned, 1);
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_limit_is_announced_in_the_settings() {
    let f = start("http2: { max_concurrent_streams: 3 }\nroutes:\n  ok: { path: /ok }\n").await;
    let addr = f.data_addr();
    let client = connect(addr).await;
    assert_eq!(
        exchange(&client, get(addr, "/ok"), b"")
            .await
            .unwrap()
            .status,
        200
    );
    assert_eq!(client.current_max_send_streams(), 3);
    f.shutdown().await;
}
