//! The sending: one HTTP/1.1 exchange at a time over a keep-alive connection, read to the end of the body.
//!
//! The hot path is a small HTTP/1.1 client of our own over tokio's `TcpStream`, not hyper-util's legacy client
//! (used before) nor reqwest. In a perf profile of the saturation benchmark with the legacy client, loadgen's
//! own user-space code was 30% of the samples (the rest is the kernel's TCP work, the same for every client):
//! the client's send path, its pool (a hashed key per request), a channel hop to a per-connection task, and a
//! `Uri` and `HeaderMap` built per request. With this client it is 15%, and loadgen needs about the CPU per
//! request that wrk needs (bench/loadgen.md). A connection is owned by exactly one sending lane (see
//! `dispatch`), the request is bytes rendered once (see `mix`), and the response head is parsed in place with
//! `httparse` (what hyper itself uses), looking only at what the outcome needs: the status, the fallback
//! header, and how the body is delimited (content-length, chunked, or until close). Bodies are read and
//! discarded. No pipelining. An `https://` target gets the same client over a TLS stream (see `tls`): the
//! handshake runs when a lane opens its connection, so a request that waits for one has it in its latency.
//!
//! Not for timing, timeouts or outcomes: the dispatcher does those, so that the same logic runs against the mock
//! transport of the deterministic tests.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use bytes::{Buf, Bytes, BytesMut};
use hyper::header::HeaderName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::target::Target;
use crate::tls::{Stream, TlsClient, TlsCounters};

/// A request that could not complete: the connection failed or broke. Timeouts are the dispatcher's.
#[derive(Debug)]
pub(crate) struct TransportError(pub(crate) String);

/// The message of a connection the server closed while it sat idle: nothing of the response arrived, so the
/// request can go again on a fresh connection (hyper's client does the same).
const STALE: &str = "the idle connection was closed by the server before the response";

impl TransportError {
    /// True if the request never reached a live connection and may be retried once on a new one.
    pub(crate) fn is_stale(&self) -> bool {
        self.0 == STALE
    }
}

impl From<io::Error> for TransportError {
    fn from(e: io::Error) -> Self {
        TransportError(e.to_string())
    }
}

/// A request as it goes on the wire: the whole HTTP/1.1 message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Wire {
    /// Request line, headers and body.
    pub(crate) bytes: Bytes,
    /// A HEAD request: its response has a head and no body, whatever its content-length says.
    pub(crate) head: bool,
}

/// What the outcome needs from a complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The status code.
    pub(crate) status: u16,
    /// The response carried the configured fallback header.
    pub(crate) marked: bool,
}

/// Something that opens connections and performs one HTTP exchange on one of them at a time.
pub(crate) trait Transport: Send + Sync + 'static {
    /// One connection, owned by one sending loop at a time.
    type Conn: Send + 'static;

    /// Opens a connection to the target.
    fn connect(&self) -> impl Future<Output = Result<Self::Conn, TransportError>> + Send;

    /// The handshake counters of a TLS transport, for the recording.
    fn tls_counters(&self) -> Option<std::sync::Arc<TlsCounters>> {
        None
    }

    /// Sends `request` on `conn` and reads the whole response. After an error the connection must be dropped.
    /// `Ok((answer, false))` means the server asked to close: the connection must not be reused either.
    fn exchange<'a>(
        &'a self,
        conn: &'a mut Self::Conn,
        request: &'a Wire,
    ) -> impl Future<Output = Result<(Answer, bool), TransportError>> + Send + 'a;
}

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
}

/// A live keep-alive connection and its read buffer (which survives between exchanges to avoid reallocating).
pub(crate) struct HttpConn {
    stream: Stream,
    buffer: BytesMut,
}

/// The longest response head accepted; longer ones are a broken exchange.
const MAX_HEAD: usize = 64 * 1024;
/// Headers parsed per response; more is a broken exchange.
const MAX_HEADERS: usize = 96;

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
        }
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
                    return Ok(HttpConn {
                        stream,
                        buffer: BytesMut::with_capacity(8 * 1024),
                    });
                }
                Err(e) => last = e.into(),
            }
        }
        Err(last)
    }

    fn tls_counters(&self) -> Option<std::sync::Arc<TlsCounters>> {
        self.tls.as_ref().map(|t| t.counters.clone())
    }

    async fn exchange(
        &self,
        conn: &mut HttpConn,
        request: &Wire,
    ) -> Result<(Answer, bool), TransportError> {
        if let Err(e) = conn.stream.write_all(&request.bytes).await {
            return Err(match e.kind() {
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                    TransportError(STALE.into())
                }
                _ => e.into(),
            });
        }
        read_response(conn, request.head, self.fallback_header.as_ref()).await
    }
}

/// How the body of a response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// The parsed head: the answer, the framing, whether the connection stays open, and the head's length.
struct Head {
    answer: Answer,
    framing: Framing,
    keep_alive: bool,
    len: usize,
}

fn parse_head(
    buf: &[u8],
    head_request: bool,
    fallback: Option<&HeaderName>,
) -> Result<Option<Head>, TransportError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(TransportError(format!("malformed response: {e}"))),
    };
    let status = response.code.unwrap_or(0);
    let mut keep_alive = response.version == Some(1);
    let mut length = None;
    let mut chunked = false;
    let mut marked = false;
    for h in response.headers.iter() {
        if fallback.is_some_and(|f| h.name.eq_ignore_ascii_case(f.as_str())) {
            marked = true;
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| TransportError("bad content-length".into()))?;
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h
                .value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        }
    }
    let framing = if head_request || (100..200).contains(&status) || status == 204 || status == 304
    {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        keep_alive = false;
        Framing::UntilClose
    };
    Ok(Some(Head {
        answer: Answer { status, marked },
        framing,
        keep_alive,
        len,
    }))
}

/// Reads more bytes into the buffer; a clean end of stream is an error here (the response is incomplete).
async fn fill(conn: &mut HttpConn) -> Result<(), TransportError> {
    if conn.buffer.capacity() - conn.buffer.len() < 1024 {
        conn.buffer.reserve(8 * 1024);
    }
    let n = conn.stream.read_buf(&mut conn.buffer).await?;
    if n == 0 {
        return Err(TransportError(
            "the connection closed before the response was complete".into(),
        ));
    }
    Ok(())
}

async fn read_response(
    conn: &mut HttpConn,
    head_request: bool,
    fallback: Option<&HeaderName>,
) -> Result<(Answer, bool), TransportError> {
    // Bytes left over from a previous exchange mean the server answered more than asked: not a keep-alive we
    // can trust.
    if !conn.buffer.is_empty() {
        return Err(TransportError(
            "unexpected bytes before the response".into(),
        ));
    }
    let head = loop {
        if !conn.buffer.is_empty() {
            if let Some(head) = parse_head(&conn.buffer, head_request, fallback)? {
                // Interim responses (100 Continue, 103 Early Hints) precede the real one.
                if (100..200).contains(&head.answer.status) && head.answer.status != 101 {
                    conn.buffer.advance(head.len);
                    continue;
                }
                break head;
            }
            if conn.buffer.len() > MAX_HEAD {
                return Err(TransportError("response head too large".into()));
            }
        }
        if conn.buffer.is_empty() {
            // Nothing of the response yet: a reset or end of stream here is a stale keep-alive connection.
            match conn.stream.read_buf(&mut conn.buffer).await {
                Ok(0) => return Err(TransportError(STALE.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(TransportError(STALE.into()))
                }
                Err(e) => return Err(e.into()),
            }
        } else {
            fill(conn).await?;
        }
    };
    conn.buffer.advance(head.len);
    match head.framing {
        Framing::None => {}
        Framing::Length(mut left) => loop {
            let have = (conn.buffer.len() as u64).min(left);
            conn.buffer.advance(have as usize);
            left -= have;
            if left == 0 {
                break;
            }
            fill(conn).await?;
        },
        Framing::Chunked => read_chunked(conn).await?,
        Framing::UntilClose => loop {
            conn.buffer.clear();
            if conn.stream.read_buf(&mut conn.buffer).await? == 0 {
                break;
            }
        },
    }
    let reusable = head.keep_alive && conn.buffer.is_empty();
    if conn.buffer.capacity() > 64 * 1024 {
        // One huge response must not pin its buffer for the life of the connection.
        conn.buffer = BytesMut::with_capacity(8 * 1024);
    }
    Ok((head.answer, reusable))
}

/// The length of the line at the start of the buffer, without its CRLF, reading until the CRLF is in.
async fn line_length(conn: &mut HttpConn, what: &str) -> Result<usize, TransportError> {
    loop {
        if let Some(i) = conn.buffer.windows(2).position(|w| w == b"\r\n") {
            return Ok(i);
        }
        if conn.buffer.len() > MAX_HEAD {
            return Err(TransportError(format!("{what} too long")));
        }
        fill(conn).await?;
    }
}

/// Reads a chunked body to its end, trailers included, discarding the data.
async fn read_chunked(conn: &mut HttpConn) -> Result<(), TransportError> {
    loop {
        // The chunk-size line: hex digits, optional extensions, CRLF.
        let line_end = line_length(conn, "chunk size line").await?;
        let line = &conn.buffer[..line_end];
        let digits = line.split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(digits)
            .ok()
            .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
            .ok_or_else(|| TransportError("bad chunk size".into()))?;
        conn.buffer.advance(line_end + 2);
        if size == 0 {
            // Trailers, then an empty line.
            loop {
                let end = line_length(conn, "trailers").await?;
                conn.buffer.advance(end + 2);
                if end == 0 {
                    return Ok(());
                }
            }
        }
        // The data and its CRLF.
        let mut left = size + 2;
        loop {
            let have = (conn.buffer.len() as u64).min(left);
            conn.buffer.advance(have as usize);
            left -= have;
            if left == 0 {
                break;
            }
            fill(conn).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
