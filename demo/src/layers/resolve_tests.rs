//! The name cache under paused time (fresh, expired, stale on failure, stale expired, one query at a time), the
//! answers read from the wire, and one lookup against a small UDP server on loopback in real time.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hickory_proto::op::MessageType;
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::Record;

use super::*;
use faultline_units::Dur;

const OLD: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const NEW: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

fn config(server: SocketAddr) -> ResolveConfig {
    ResolveConfig {
        resolver: server.to_string(),
        name: None,
        stale_for: Dur::from_millis(60_000),
        timeout: Dur::from_millis(500),
    }
}

fn resolver(uncached: bool) -> NameResolver {
    NameResolver::new(
        &config("127.0.0.1:53".parse().unwrap()),
        "Pricing.Internal.",
        uncached,
    )
    .unwrap()
}

fn answer(ip: IpAddr, ttl_s: u64) -> Result<Answer, ResolveError> {
    Ok(Answer {
        addrs: vec![ip],
        ttl: Duration::from_secs(ttl_s),
    })
}

fn servfail() -> Result<Answer, ResolveError> {
    Err(ResolveError::Code {
        name: "pricing.internal".into(),
        code: "Server Failure".into(),
    })
}

fn after(start: Instant, secs: f64) -> Instant {
    start + Duration::from_secs_f64(secs)
}

#[tokio::test(start_paused = true)]
async fn a_fresh_answer_is_served_until_its_ttl_ends_then_asked_again() {
    let r = resolver(false);
    let t0 = Instant::now();
    assert_eq!(r.consult(t0), Cache::Ask(None), "nothing cached yet");
    r.learn(t0, &answer(OLD, 30));
    assert_eq!(r.consult(after(t0, 29.9)), Cache::Serve(OLD));
    assert_eq!(
        r.consult(after(t0, 30.0)),
        Cache::Ask(Some(OLD)),
        "expired: ask, with the old answer to fall back on"
    );
    r.learn(after(t0, 30.0), &answer(NEW, 5));
    assert_eq!(
        r.consult(after(t0, 34.0)),
        Cache::Serve(NEW),
        "the new record is followed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_refresh_serves_the_stale_answer_and_asks_again_at_most_once_a_second() {
    let r = resolver(false);
    let t0 = Instant::now();
    r.learn(t0, &answer(OLD, 5));
    r.learn(after(t0, 5.0), &servfail());
    assert_eq!(
        r.consult(after(t0, 5.5)),
        Cache::Serve(OLD),
        "stale, not yet time to ask"
    );
    assert_eq!(
        r.consult(after(t0, 6.0)),
        Cache::Ask(Some(OLD)),
        "a second later: ask again"
    );
    // A resolver that comes back ends the stale spell.
    r.learn(after(t0, 6.0), &answer(NEW, 5));
    assert_eq!(r.consult(after(t0, 6.1)), Cache::Serve(NEW));
}

#[tokio::test(start_paused = true)]
async fn a_stale_answer_is_served_no_longer_than_stale_for_after_its_ttl() {
    let r = resolver(false);
    let t0 = Instant::now();
    r.learn(t0, &answer(OLD, 5));
    // The resolver keeps failing: 60 s of stale answers after the TTL's end at 5 s.
    let mut t = 5.0;
    while t <= 65.0 {
        match r.consult(after(t0, t)) {
            Cache::Serve(ip) | Cache::Ask(Some(ip)) => assert_eq!(ip, OLD, "at {t} s"),
            Cache::Ask(None) => panic!("no stale answer at {t} s"),
        }
        r.learn(after(t0, t), &servfail());
        t += 1.0;
    }
    assert_eq!(
        r.consult(after(t0, 65.5)),
        Cache::Ask(None),
        "past stale_for"
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_cache_every_call_asks_and_a_failure_fails_the_call() {
    // Nothing listens on the server's port: every lookup asks, and fails (refused or timed out).
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let server = socket.local_addr().unwrap();
    drop(socket);
    let r = NameResolver::new(&config(server), "pricing.internal", true).unwrap();
    r.learn(Instant::now(), &answer(OLD, 30));
    assert!(r.lookup().await.is_err(), "the cached answer is not used");
}

/// A UDP server on loopback answering each query for `pricing.internal` with `answers[i]` (the last one
/// repeated): `Some((ip, ttl))` or `None` for SERVFAIL; counts the queries.
async fn server(answers: Vec<Option<(Ipv4Addr, u32)>>) -> (SocketAddr, Arc<AtomicUsize>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let Ok(q) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let i = seen.fetch_add(1, Ordering::SeqCst);
            let mut m = Message::query();
            m.metadata.id = q.metadata.id;
            m.metadata.message_type = MessageType::Response;
            m.queries = q.queries.clone();
            match answers[i.min(answers.len() - 1)] {
                Some((ip, ttl)) => {
                    let name = q.queries[0].name.clone();
                    m.answers
                        .push(Record::from_rdata(name, ttl, RData::A(A(ip))));
                }
                None => m.metadata.response_code = ResponseCode::ServFail,
            }
            let _ = socket.send_to(&m.to_vec().unwrap(), from).await;
        }
    });
    (addr, count)
}

#[tokio::test]
async fn a_lookup_reads_the_servers_answer_and_serves_it_stale_when_the_server_fails() {
    // TTL 0: every lookup asks. The second and later answers are SERVFAIL.
    let (addr, queries) = server(vec![Some((Ipv4Addr::new(127, 0, 0, 7), 0)), None]).await;
    let r = NameResolver::new(&config(addr), "pricing.internal", false).unwrap();
    assert_eq!(
        r.lookup().await,
        Ok(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 7)))
    );
    assert_eq!(
        r.lookup().await,
        Ok(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 7))),
        "stale"
    );
    assert_eq!(queries.load(Ordering::SeqCst), 2);
    // Within the second after the failure, callers are served without a query, many at once included.
    let r = Arc::new(r);
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let r = r.clone();
            tokio::spawn(async move { r.lookup().await })
        })
        .collect();
    for c in calls {
        assert!(c.await.unwrap().is_ok());
    }
    assert_eq!(queries.load(Ordering::SeqCst), 2);
    // Without a cache the same server fails the call.
    let u = NameResolver::new(&config(addr), "pricing.internal", true).unwrap();
    let e = u.lookup().await.unwrap_err();
    assert!(e.to_string().contains("the server answered"), "{e}");
    assert_eq!(queries.load(Ordering::SeqCst), 3);
}

#[test]
fn an_answer_to_another_query_is_skipped_and_an_empty_one_is_a_failure() {
    let query = Message::from_vec(&query_bytes("pricing.internal", 7).unwrap()).unwrap();
    let mut m = Message::query();
    m.metadata.id = 7;
    m.metadata.message_type = MessageType::Response;
    m.queries = query.queries.clone();
    let bytes = m.to_vec().unwrap();
    assert!(
        read_answer("pricing.internal", 8, &bytes).is_none(),
        "another id"
    );
    assert_eq!(
        read_answer("pricing.internal", 7, &bytes),
        Some(Err(ResolveError::NoAddress {
            name: "pricing.internal".into()
        }))
    );
    assert!(read_answer("pricing.internal", 7, b"\x00\x07 not dns").is_none());
    let name = query.queries[0].name.clone();
    m.answers.push(Record::from_rdata(
        name.clone(),
        30,
        RData::A(A(Ipv4Addr::new(127, 0, 0, 1))),
    ));
    m.answers.push(Record::from_rdata(
        name,
        5,
        RData::A(A(Ipv4Addr::new(127, 0, 0, 2))),
    ));
    let a = read_answer("pricing.internal", 7, &m.to_vec().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(
        (a.addrs.len(), a.ttl),
        (2, Duration::from_secs(5)),
        "the shortest TTL"
    );
}
