//! faultd's resolver on the wire: the records and faults of each phase answered over UDP and TCP, the TC bit
//! sending a client to TCP, unknown names refused or forwarded, bad input answered or dropped, and every query
//! counted per name and bucket in `/recording` and `/metrics`.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::common::wait_for;

fn query_bytes(name: &str, qtype: RecordType, id: u16) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = id;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    m.to_vec().unwrap()
}

/// One query over UDP: the answer, or `None` when none came within `wait`.
pub(crate) async fn udp(addr: SocketAddr, bytes: &[u8], wait: Duration) -> Option<Message> {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(bytes, addr).await.unwrap();
    let mut buf = vec![0u8; 65_535];
    let n = tokio::time::timeout(wait, socket.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    Some(Message::from_vec(&buf[..n]).expect("faultd answers a readable message"))
}

async fn tcp(addr: SocketAddr, bytes: &[u8]) -> Message {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut out = (bytes.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(bytes);
    s.write_all(&out).await.unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await.unwrap();
    let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut answer).await.unwrap();
    Message::from_vec(&answer).unwrap()
}

fn addresses(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .map(|r| match &r.data {
            RData::A(a) => a.0.to_string(),
            RData::AAAA(a) => a.0.to_string(),
            other => format!("{other:?}"),
        })
        .collect()
}

async fn start(yaml: &str) -> faultd::Faultd {
    let config = faultd::Config::from_yaml(yaml, "dns.yaml").expect("the configuration is valid");
    faultd::start(config, faultd::Options::default())
        .await
        .expect("faultd starts")
}

const SCHEDULE: &str = "seed: 3\nroutes:\n  any: { path: /** }\n\
    phases:\n  - { name: healthy, at: 0s }\n  - { name: outage, at: 600ms }\n  - { name: moved, at: 1200ms }\n\
    dns:\n  names:\n    pricing.internal: { a: [127.0.0.1], aaaa: ['::1'], ttl: 30s }\n  phases:\n\
    \x20   outage: { pricing.internal: { servfail: 100% } }\n\
    \x20   moved: { pricing.internal: { a: [127.0.0.2, 127.0.0.3], ttl: 2s, delay: { fixed: 50ms } } }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_answers_its_records_then_fails_then_moves_as_the_phases_say() {
    let faultd = start(SCHEDULE).await;
    let addr = faultd.dns_addr().expect("the resolver listens");
    let origin = tokio::time::Instant::now();
    faultd.start_schedule(origin);
    let wait = Duration::from_secs(2);

    let a = udp(
        addr,
        &query_bytes("pricing.internal.", RecordType::A, 1),
        wait,
    )
    .await
    .unwrap();
    assert_eq!(
        (a.metadata.response_code, addresses(&a)),
        (ResponseCode::NoError, vec!["127.0.0.1".to_string()])
    );
    assert_eq!(a.answers[0].ttl, 30);
    let aaaa = tcp(addr, &query_bytes("PRICING.internal.", RecordType::AAAA, 2)).await;
    assert_eq!(addresses(&aaaa), vec!["::1".to_string()]);

    tokio::time::sleep_until(origin + Duration::from_millis(700)).await;
    let failed = udp(
        addr,
        &query_bytes("pricing.internal.", RecordType::A, 3),
        wait,
    )
    .await
    .unwrap();
    assert_eq!(failed.metadata.response_code, ResponseCode::ServFail);

    tokio::time::sleep_until(origin + Duration::from_millis(1300)).await;
    let sent = std::time::Instant::now();
    let moved = udp(
        addr,
        &query_bytes("pricing.internal.", RecordType::A, 4),
        wait,
    )
    .await
    .unwrap();
    assert!(
        sent.elapsed() >= Duration::from_millis(50),
        "the delay holds the answer"
    );
    assert_eq!(
        addresses(&moved),
        vec!["127.0.0.2".to_string(), "127.0.0.3".to_string()]
    );
    assert_eq!(moved.answers[0].ttl, 2);

    let recording = faultd.recording();
    let dns = recording
        .dns
        .expect("the recording has the resolver's counts");
    assert_eq!(dns.listen, addr.to_string());
    let totals = &dns.names["pricing.internal"].totals;
    assert_eq!((totals.queries["A"], totals.queries["AAAA"]), (3, 1));
    assert_eq!(
        (totals.answered("NOERROR"), totals.answered("SERVFAIL")),
        (3, 1)
    );
    assert_eq!(totals.delayed, 1);
    assert!(totals.delay_max_ms >= 50.0);
    faultd.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncation_sends_the_client_to_tcp_and_no_answer_leaves_it_waiting() {
    let faultd = start(
        "routes:\n  any: { path: /** }\n\
         dns:\n  names:\n    cut.internal: { a: [127.0.0.9], truncate: 100% }\n    \
         silent.internal: { a: [127.0.0.9], no_answer: 100% }\n    gone.internal: { nxdomain: 100% }\n",
    )
    .await;
    let addr = faultd.dns_addr().unwrap();
    let cut = udp(
        addr,
        &query_bytes("cut.internal.", RecordType::A, 7),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    assert!(cut.metadata.truncation && cut.answers.is_empty());
    let whole = tcp(addr, &query_bytes("cut.internal.", RecordType::A, 8)).await;
    assert_eq!(addresses(&whole), vec!["127.0.0.9".to_string()]);
    let none = udp(
        addr,
        &query_bytes("silent.internal.", RecordType::A, 9),
        Duration::from_millis(300),
    )
    .await;
    assert!(none.is_none(), "no_answer sends nothing: {none:?}");
    let gone = udp(
        addr,
        &query_bytes("gone.internal.", RecordType::A, 10),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    assert_eq!(gone.metadata.response_code, ResponseCode::NXDomain);
    let dns = faultd.recording().dns.unwrap();
    assert_eq!(dns.names["cut.internal"].totals.answered("truncated"), 1);
    assert_eq!(dns.names["silent.internal"].totals.answered("no_answer"), 1);
    faultd.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_names_are_refused_or_forwarded_to_the_upstream_the_section_names() {
    let upstream = start(
        "routes:\n  any: { path: /** }\ndns:\n  names:\n    real.example: { a: [127.0.0.42] }\n",
    )
    .await;
    let up = upstream.dns_addr().unwrap();
    let refusing = start(
        "routes:\n  any: { path: /** }\ndns:\n  names:\n    mine.internal: { a: [127.0.0.1] }\n",
    )
    .await;
    let refused = udp(
        refusing.dns_addr().unwrap(),
        &query_bytes("real.example.", RecordType::A, 11),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    assert_eq!(refused.metadata.response_code, ResponseCode::Refused);
    let forwarding = start(&format!(
        "routes:\n  any: {{ path: /** }}\ndns:\n  unknown: {{ forward: '{up}' }}\n  names:\n    mine.internal: {{ a: [127.0.0.1] }}\n"
    ))
    .await;
    let addr = forwarding.dns_addr().unwrap();
    let relayed = udp(
        addr,
        &query_bytes("real.example.", RecordType::A, 12),
        Duration::from_secs(3),
    )
    .await
    .unwrap();
    assert_eq!(
        (relayed.metadata.id, addresses(&relayed)),
        (12, vec!["127.0.0.42".to_string()])
    );
    let over_tcp = tcp(addr, &query_bytes("real.example.", RecordType::A, 13)).await;
    assert_eq!(addresses(&over_tcp), vec!["127.0.0.42".to_string()]);
    let other = forwarding.recording().dns.unwrap().other;
    assert_eq!(other.totals.answered("forwarded"), 2);
    for f in [upstream, refusing, forwarding] {
        f.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_answered_formerr_or_dropped_and_the_resolver_keeps_serving() {
    let faultd = start(
        "routes:\n  any: { path: /** }\ndns:\n  names:\n    pricing.internal: { a: [127.0.0.1] }\n",
    )
    .await;
    let addr = faultd.dns_addr().unwrap();
    let wait = Duration::from_millis(500);
    let mut cut = query_bytes("pricing.internal.", RecordType::A, 21);
    cut.truncate(cut.len() - 2);
    let formerr = udp(addr, &cut, wait)
        .await
        .expect("a cut query gets FORMERR");
    assert_eq!(
        (formerr.metadata.id, formerr.metadata.response_code),
        (21, ResponseCode::FormErr)
    );
    assert!(
        udp(addr, b"\x00\x01", wait).await.is_none(),
        "a runt datagram is dropped"
    );
    assert!(
        udp(addr, &vec![0xffu8; 60_000], wait).await.is_none(),
        "an oversized response-flagged datagram is dropped"
    );
    let garbage: Vec<u8> = (0..3000u32).map(|i| (i * 37 % 251) as u8 & 0x7f).collect();
    let _ = udp(addr, &garbage, wait).await;
    // A TCP message that claims more bytes than it sends, then closes.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0xff, 0xff, 1, 2, 3]).await.unwrap();
    drop(s);
    let ok = udp(
        addr,
        &query_bytes("pricing.internal.", RecordType::A, 22),
        Duration::from_secs(2),
    )
    .await
    .expect("the resolver still answers");
    assert_eq!(addresses(&ok), vec!["127.0.0.1".to_string()]);
    wait_for("the unreadable queries counted", || {
        let dns = faultd.recording().dns.unwrap();
        dns.other.totals.answered("FORMERR") >= 1 && dns.other.totals.answered("dropped") >= 2
    })
    .await;
    faultd.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_queries_and_answers_per_name() {
    let faultd = faultd::start(
        faultd::Config::from_yaml(
            "routes:\n  any: { path: /** }\ndns:\n  names:\n    pricing.internal: { a: [127.0.0.1] }\n",
            "m.yaml",
        )
        .unwrap(),
        faultd::Options {
            control: Some("127.0.0.1:0".parse().unwrap()),
            ..faultd::Options::default()
        },
    )
    .await
    .unwrap();
    let addr = faultd.dns_addr().unwrap();
    udp(
        addr,
        &query_bytes("pricing.internal.", RecordType::A, 31),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let control = faultd.control_addr().unwrap();
    let text = crate::common::get(control, "/metrics").await;
    let body = String::from_utf8_lossy(text.body()).to_string();
    assert!(
        body.contains("faultd_dns_queries_total{name=\"pricing.internal\",type=\"A\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("faultd_dns_answers_total{name=\"pricing.internal\",outcome=\"NOERROR\"} 1"),
        "{body}"
    );
    faultd.shutdown().await;
}
