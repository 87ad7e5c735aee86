//! HTTP/1.1's own client, the hot path: one exchange at a time over a keep-alive connection, read to the end of
//! the body.
//!
//! A small HTTP/1.1 client of our own over tokio's `TcpStream`, not hyper-util's legacy client (used before) nor
//! reqwest. In a perf profile of the saturation benchmark with the legacy client, loadgen's own user-space code
//! was 30% of the samples (the rest is the kernel's TCP work, the same for every client): the client's send path,
//! its pool (a hashed key per request), a channel hop to a per-connection task, and a `Uri` and `HeaderMap` built
//! per request. With this client it is 15%, and loadgen needs about the CPU per request that wrk needs
//! (bench/loadgen.md). A connection is owned by exactly one sending lane (see `lanes`), the request is bytes
//! rendered once (see `compile`), and the response head is parsed in place (see `response`). No pipelining. An
//! `https://` target gets the same client over a TLS stream (see `tls`): the handshake runs when a lane opens its
//! connection, so a request that waits for one has it in its latency.
//!
//! An answer due shortly before the dispatcher's next wake-up is held in the kernel until then and read with the
//! kernel's receive time (see [`HOLD_WITHIN`]): the exchange then reports when it ended ([`Transport::received`]).
//!
//! Not for timing, timeouts or outcomes: the lanes do those, so that the same logic runs against the mock
//! transport of the deterministic tests.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::header::HeaderName;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::compile::Wire;
use super::conn::HttpConn;
use super::response::read_response;
use super::transport::{Transport, TransportError, STALE};
use crate::outcome::Answer;
use crate::request::ticks::Ticks;
use crate::target::Target;
use crate::tls::{Stream, TlsClient};

/// The real transport: plain TCP with Nagle off (small requests must leave at once, or the send time lies by
/// up to 40 ms).
pub(crate) struct HttpTransport {
    /// `host:port` as given: an IP literal resolves without a lookup, `localhost` through the system resolver.
    authority: String,
    /// The response header that marks a fallback, if any.
    fallback_header: Option<HeaderName>,
    /// TLS for an `https://` target.
    tls: Option<TlsClient>,
    /// The port when the URL has none.
    default_port: u16,
    /// The dispatcher's wake-ups (see [`HOLD_WITHIN`]).
    ticks: Arc<Ticks>,
    /// How near the next wake-up must be for an answer to be held: [`HOLD_WITHIN`].
    hold_within: Duration,
}

/// An answer due to arrive at most this long before the dispatcher's next wake-up waits in the kernel until then,
/// unreported: the thread wakes up once for both, instead of once for the answer ~50 us after the request and
/// again for the next arrival. The answer's end is the kernel's receive time of its last byte, so latency is as
/// exact as before; what changes is that the lane is free a little later. On this machine a wake-up from idle
/// costs 20-40 us of CPU (bench/loadgen.md, part d), about what the rest of a request costs. HTTP/1.1 in
/// cleartext only: under TLS the bytes received are records that rustls must see before a response can be read.
const HOLD_WITHIN: Duration = Duration::from_millis(1);

impl HttpTransport {
    pub(crate) fn new(
        target: &Target,
        fallback_header: Option<HeaderName>,
        tls: Option<TlsClient>,
    ) -> HttpTransport {
        HttpTransport {
            authority: target.authority.as_str().to_string(),
            fallback_header,
            default_port: if target.is_tls() { 443 } else { 80 },
            tls,
            ticks: Arc::new(Ticks::new(Instant::now())),
            hold_within: HOLD_WITHIN,
        }
    }

    /// Holds answers due up to `coalesce` before the next wake-up, when that is wider than [`HOLD_WITHIN`]: the
    /// dispatcher's wake-ups are then at least that far apart.
    pub(crate) fn holding_within(mut self, coalesce: Duration) -> HttpTransport {
        self.hold_within = HOLD_WITHIN.max(coalesce);
        self
    }

    async fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        // `[::1]:80` parses as a socket address directly; names go through the resolver.
        if let Ok(addr) = self.authority.parse::<SocketAddr>() {
            return Ok(vec![addr]);
        }
        let with_port = if self.authority.rsplit_once(':').is_some_and(|(h, p)| {
            !h.ends_with(':') && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())
        }) {
            self.authority.clone()
        } else {
            format!("{}:{}", self.authority, self.default_port)
        };
        Ok(tokio::net::lookup_host(with_port).await?.collect())
    }
}

impl Transport for HttpTransport {
    type Conn = HttpConn;

    async fn connect(&self) -> Result<HttpConn, TransportError> {
        let mut last = TransportError("the host resolved to no address".into());
        for addr in self.resolve().await? {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    let stream = match &self.tls {
                        None => Stream::Plain(stream),
                        Some(tls) => tls.handshake(stream).await.map_err(TransportError)?,
                    };
                    return Ok(HttpConn::new(stream));
                }
                Err(e) => last = e.into(),
            }
        }
        Err(last)
    }

    fn ticks(&self) -> Option<Arc<Ticks>> {
        Some(self.ticks.clone())
    }

    fn received(conn: &HttpConn) -> Option<Instant> {
        conn.received
    }

    async fn exchange(
        &self,
        conn: &mut HttpConn,
        request: &Wire,
    ) -> Result<(Answer, bool), TransportError> {
        // Bytes left over from a previous exchange mean the server answered more than asked: not a keep-alive we
        // can trust.
        if !conn.buffer.is_empty() {
            return Err(TransportError(
                "unexpected bytes before the response".into(),
            ));
        }
        conn.received = None;
        // Created before the decision, so a wake-up between the two is not missed.
        let tick = self.ticks.notified();
        let hold = if conn.skip > 0 {
            conn.skip -= 1;
            false
        } else {
            self.ticks
                .next_within(Instant::now(), self.hold_within)
                .is_some()
                && conn.hold()
        };
        if !hold {
            conn.release();
        }
        if let Err(e) = conn.stream.write_all(&request.bytes).await {
            return Err(match e.kind() {
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                    TransportError(STALE.into())
                }
                _ => e.into(),
            });
        }
        if hold {
            tick.await;
            conn.read_held()?;
        }
        read_response(conn, request.head, self.fallback_header.as_ref()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::http1::conn::SKIP_AFTER_MISS;
    use crate::request::http1::held;
    use bytes::{Bytes, BytesMut};
    use tokio::io::AsyncReadExt;

    /// Serves each accepted connection the canned `responses` in turn, one per request head read.
    async fn canned(responses: Vec<&'static [u8]>) -> (Target, tokio::task::JoinHandle<usize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target =
            Target::parse(&format!("http://{}", listener.local_addr().unwrap()), &[]).unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut served = 0;
            let mut buf = vec![0u8; 4096];
            for r in responses {
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return served;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                s.write_all(r).await.unwrap();
                served += 1;
            }
            served
        });
        (target, server)
    }

    fn get() -> Wire {
        Wire {
            bytes: Bytes::from_static(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"),
            head: false,
        }
    }

    #[tokio::test]
    async fn length_chunked_and_interim_responses_are_read_to_their_end_on_one_connection() {
        let (target, server) = canned(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Busy\r\nx-fallback: stale\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nabcd\r\n0\r\nt: 1\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        ])
        .await;
        let t = HttpTransport::new(&target, Some(HeaderName::from_static("x-fallback")), None);
        let mut conn = t.connect().await.unwrap();
        let mut answers = Vec::new();
        for _ in 0..4 {
            answers.push(t.exchange(&mut conn, &get()).await.unwrap());
        }
        let ok = |status, marked, reuse| (Answer { status, marked }, reuse);
        assert_eq!(
            answers,
            vec![
                ok(200, false, true),
                ok(503, true, true),
                ok(204, false, true),
                ok(404, false, false)
            ]
        );
        drop(conn);
        assert_eq!(server.await.unwrap(), 4);
    }

    /// A server that answers each request head it reads with `parts` of one response, written `gap` apart, and
    /// tells when it began and finished writing the first part.
    async fn split_server(
        parts: Vec<&'static [u8]>,
        gap: Duration,
        requests: usize,
    ) -> (
        Target,
        tokio::sync::mpsc::UnboundedReceiver<(Instant, Instant)>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target =
            Target::parse(&format!("http://{}", listener.local_addr().unwrap()), &[]).unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            s.set_nodelay(true).unwrap();
            let mut buf = vec![0u8; 4096];
            for _ in 0..requests {
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(gap).await;
                    }
                    let before = Instant::now();
                    s.write_all(part).await.unwrap();
                    if i == 0 {
                        let _ = tx.send((before, Instant::now()));
                    }
                }
            }
        });
        (target, rx)
    }

    /// A transport whose exchanges hold their answers for any wake-up planned in the next 10 s: the 1 ms window
    /// of a real run would race a test thread that a busy machine deschedules between the plan and the exchange.
    fn holding_transport(target: &Target) -> HttpTransport {
        let mut t = HttpTransport::new(target, None, None);
        t.hold_within = Duration::from_secs(10);
        t
    }

    /// Turns the kernel's receive timestamps on for the test and keeps them on while the returned pair lives.
    /// The first socket of the system that asks for them switches them on in deferred kernel work, so an answer
    /// received just after may carry none: this waits until a byte sent over loopback comes back stamped.
    async fn kernel_stamps_on() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        held::set(&client, libc::SO_TIMESTAMPNS, 1).unwrap();
        let mut buf = BytesMut::with_capacity(64);
        for _ in 0..1000 {
            server.write_all(b"x").await.unwrap();
            client.readable().await.unwrap();
            if let Ok((_, Some(_))) = held::recv_stamped(&client, &mut buf) {
                return (client, server);
            }
            buf.clear();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the kernel stamped none of 1,000 bytes received over loopback (SO_TIMESTAMPNS)");
    }

    /// Plans a wake-up well inside the hold window and makes it after `late`.
    fn late_wake_up(ticks: &Arc<Ticks>, late: Duration) -> tokio::task::JoinHandle<()> {
        ticks.plan(Instant::now() + Duration::from_secs(5));
        let ticks = ticks.clone();
        tokio::spawn(async move {
            tokio::time::sleep(late).await;
            ticks.wake();
        })
    }

    #[tokio::test]
    async fn an_answer_held_for_the_dispatchers_wake_up_ends_when_the_kernel_received_it() {
        let _stamps = kernel_stamps_on().await;
        let (target, mut wrote) = split_server(
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"],
            Duration::ZERO,
            2,
        )
        .await;
        let t = holding_transport(&target);
        let ticks = t.ticks().unwrap();
        let mut conn = t.connect().await.unwrap();

        // The dispatcher plans a wake-up within the hold window and makes it 50 ms later.
        let waker = late_wake_up(&ticks, Duration::from_millis(50));
        let answer = t.exchange(&mut conn, &get()).await.unwrap();
        let woke = Instant::now();
        waker.await.unwrap();
        assert_eq!(
            answer,
            (
                Answer {
                    status: 200,
                    marked: false
                },
                true
            )
        );
        let (before, after) = wrote.recv().await.unwrap();
        let received = HttpTransport::received(&conn).expect("the answer was held and stamped");
        // The kernel stamped the answer while the server's write delivered it over loopback (1 ms for the two
        // clocks' readings), not when the exchange read it after the wake-up.
        assert!(
            received + Duration::from_millis(1) >= before
                && received <= after + Duration::from_millis(1),
            "received {:?} after the server began writing, {:?} before it finished",
            received.saturating_duration_since(before),
            after.saturating_duration_since(received)
        );
        assert!(
            woke >= received + Duration::from_millis(25),
            "it was held until the wake-up"
        );

        // No wake-up planned: the answer is read as it arrives, and ends at the read.
        ticks.end();
        t.exchange(&mut conn, &get()).await.unwrap();
        assert_eq!(HttpTransport::received(&conn), None);
        assert!(!conn.holding, "the hold is released");
    }

    #[tokio::test]
    async fn a_held_answer_that_arrives_in_parts_is_read_on_as_it_arrives() {
        let (target, _wrote) = split_server(
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nab", b"cdef"],
            Duration::from_millis(30),
            1,
        )
        .await;
        let t = holding_transport(&target);
        let ticks = t.ticks().unwrap();
        let mut conn = t.connect().await.unwrap();
        let waker = late_wake_up(&ticks, Duration::from_millis(5));
        let start = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(5), t.exchange(&mut conn, &get()))
            .await
            .expect("the rest of the answer wakes the exchange once the hold is released")
            .unwrap();
        waker.await.unwrap();
        assert_eq!(
            answer,
            (
                Answer {
                    status: 200,
                    marked: false
                },
                true
            )
        );
        assert!(
            start.elapsed() >= Duration::from_millis(30),
            "the body's second part was waited for"
        );
        assert_eq!(
            HttpTransport::received(&conn),
            None,
            "ended at the read of its last part"
        );
        assert!(conn.buffer.is_empty());
    }

    #[tokio::test]
    async fn an_answer_not_there_at_the_wake_up_is_waited_for_and_the_connection_stops_holding_for_a_while(
    ) {
        let (target, _wrote) = split_server(
            vec![b"", b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"],
            Duration::from_millis(30),
            2,
        )
        .await;
        let t = holding_transport(&target);
        let ticks = t.ticks().unwrap();
        let mut conn = t.connect().await.unwrap();
        let waker = late_wake_up(&ticks, Duration::from_millis(5));
        let answer = tokio::time::timeout(Duration::from_secs(5), t.exchange(&mut conn, &get()))
            .await
            .expect("the late answer wakes the exchange once the hold is released")
            .unwrap();
        waker.await.unwrap();
        assert_eq!(answer.0.status, 200);
        assert_eq!(HttpTransport::received(&conn), None, "ended at its read");
        assert_eq!(conn.skip, SKIP_AFTER_MISS);
        // The next exchange is not held, though a wake-up is near.
        ticks.plan(Instant::now() + Duration::from_secs(5));
        t.exchange(&mut conn, &get()).await.unwrap();
        assert!(!conn.holding);
        assert_eq!(conn.skip, SKIP_AFTER_MISS - 1);
    }

    #[tokio::test]
    async fn a_response_cut_short_is_an_error_not_an_answer() {
        let (target, _server) =
            canned(vec![b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"]).await;
        let t = HttpTransport::new(&target, None, None);
        let mut conn = t.connect().await.unwrap();
        let first = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            t.exchange(&mut conn, &get()),
        )
        .await
        .unwrap();
        assert!(first.is_err(), "{first:?}");
    }
}
