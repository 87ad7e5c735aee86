//! A correlating faultd (`correlate:`) records each call one by one with what its caller propagated: the trace
//! id and parent span of `traceparent` (or a bare id in another header), the deadline (`grpc-timeout`, or the
//! deadline header in milliseconds), its arrival and end on the run's clock, and how it ended, on HTTP/1.1,
//! HTTP/2 and gRPC alike. Real time; every delay is short.

use crate::common;

use common::http2::{connect, exchange, get, grpc, start};

use std::time::Duration;

use tokio::time::Instant;

const TRACE: u128 = 0x4bf92f3577b34da6a3ce929d0e0e4736;
const SPAN: u64 = 0x00f067aa0ba902b7;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_is_recorded_with_its_trace_id_parent_deadline_and_end_on_every_wire() {
    let f = start(
        "correlate: { deadline_header: x-request-timeout }\nroutes:\n  pricing: { path: /price/*, latency: { fixed: 300ms } }\n  fast: { path: /fast, response: { body_size: 10B } }\n  product: { path: /shop.Catalog/GetProduct, grpc_response: { message: 0a00 } }\n",
    )
    .await;
    f.start_schedule(Instant::now());
    let addr = f.data_addr();
    let parent = faultline_units::trace::traceparent(TRACE, SPAN);
    // HTTP/1.1 with a deadline header; answered.
    let reply = common::call(
        addr,
        "GET",
        "/fast",
        &[("traceparent", &parent), ("x-request-timeout", "250")],
        b"",
    )
    .await;
    assert_eq!(reply.status(), Some(200));
    // HTTP/1.1 whose caller leaves after 50 ms of a 300 ms delay: abandoned when it left.
    let slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut slow = slow;
        let request = format!("GET /price/1 HTTP/1.1\r\nHost: x\r\ntraceparent: {parent}\r\n\r\n");
        slow.write_all(request.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // HTTP/2 with no trace id: recorded, keyed by nothing.
    let client = connect(addr).await;
    exchange(&client, get(addr, "/fast"), b"").await.unwrap();
    // gRPC with grpc-timeout and a trace id.
    let mut call = grpc(addr, "/shop.Catalog/GetProduct", Some("150m"));
    call.headers_mut()
        .insert("traceparent", parent.parse().unwrap());
    let a = exchange(&client, call, &common::http2::framed(b""))
        .await
        .unwrap();
    assert_eq!(a.grpc_status(), Some("0"));

    common::wait_for("four traced calls", || f.traced_calls().len() == 4).await;
    let calls = f.traced_calls();
    let on = |route: &str| {
        calls
            .iter()
            .filter(|c| c.route == route)
            .collect::<Vec<_>>()
    };
    let fast = on("fast");
    assert_eq!(fast.len(), 2);
    let keyed = fast.iter().find(|c| c.trace.is_some()).unwrap();
    assert_eq!((keyed.trace, keyed.parent), (Some(TRACE), Some(SPAN)));
    assert_eq!(
        keyed.deadline.map(|d| d.get()),
        Some(Duration::from_millis(250))
    );
    assert_eq!(
        (keyed.end, keyed.status),
        (faultd::recorder::CallEnd::Answered, Some(200))
    );
    let bare = fast.iter().find(|c| c.trace.is_none()).unwrap();
    assert_eq!((bare.parent, bare.deadline), (None, None));

    let left = on("pricing");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].end, faultd::recorder::CallEnd::Abandoned);
    let held = left[0].ended.get() - left[0].arrival.get();
    assert!(
        held >= Duration::from_millis(40) && held < Duration::from_millis(290),
        "ended when its caller left, not at its answer: held {held:?}"
    );

    let product = on("product");
    assert_eq!(product[0].trace, Some(TRACE));
    assert_eq!(product[0].grpc_status, Some(0));
    assert_eq!(
        product[0].deadline.map(|d| d.get()),
        Some(Duration::from_millis(150))
    );
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_header_keys_calls_by_its_hex_value_and_without_correlate_nothing_is_kept() {
    let f = start("correlate: { header: x-request-id }\nroutes:\n  fast: { path: /fast }\n").await;
    f.start_schedule(Instant::now());
    let reply = common::call(
        f.data_addr(),
        "GET",
        "/fast",
        &[("x-request-id", "00000000000000000000000000000abc")],
        b"",
    )
    .await;
    assert_eq!(reply.status(), Some(200));
    common::wait_for("a traced call", || f.traced_calls().len() == 1).await;
    assert_eq!(f.traced_calls()[0].trace, Some(0xabc));
    assert_eq!(f.traced_calls()[0].parent, None);
    f.shutdown().await;

    let plain = start("routes:\n  fast: { path: /fast }\n").await;
    plain.start_schedule(Instant::now());
    let reply = common::get(plain.data_addr(), "/fast").await;
    assert_eq!(reply.status(), Some(200));
    common::wait_for("the call recorded", || {
        plain.recording().routes["fast"].totals.completed.c2xx == 1
    })
    .await;
    assert!(plain.traced_calls().is_empty());
    plain.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_name_that_is_not_one_is_refused_at_its_field() {
    let config = faultd::Config::from_yaml(
        "correlate: { header: 'bad header' }\nroutes:\n  fast: { path: /fast }\n",
        "test.yaml",
    )
    .unwrap();
    let e = faultd::start(config, faultd::Options::default())
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("correlate.header"), "{e}");
}
