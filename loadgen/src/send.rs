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
//! An answer due shortly before the dispatcher's next wake-up is held in the kernel until then and read with the
//! kernel's receive time (see [`HOLD_WITHIN`]): the exchange then reports when it ended ([`Transport::received`]).
//!
//! Not for timing, timeouts or outcomes: the dispatcher does those, so that the same logic runs against the mock
//! transport of the deterministic tests.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use hyper::header::HeaderName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::dispatch::Ticks;
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

    /// The dispatcher's wake-ups, if this transport can leave answers in the kernel until the next one.
    fn ticks(&self) -> Option<Arc<Ticks>> {
        None
    }

    /// When the kernel received the last byte of the answer the last exchange on `conn` read, if the transport
    /// knows it (an answer left in the kernel until the dispatcher's wake-up); otherwise the exchange ended when
    /// it returned.
    fn received(_conn: &Self::Conn) -> Option<Instant> {
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
    /// The dispatcher's wake-ups (see [`HOLD_WITHIN`]).
    ticks: Arc<Ticks>,
    /// How near the next wake-up must be for an answer to be held: [`HOLD_WITHIN`].
    hold_within: Duration,
}

/// A live keep-alive connection and its read buffer (which survives between exchanges to avoid reallocating).
pub(crate) struct HttpConn {
    stream: Stream,
    buffer: BytesMut,
    /// When the kernel received the answer the last exchange read whole in one read after a hold.
    received: Option<Instant>,
    /// The kernel stamps the bytes it receives on this connection (SO_TIMESTAMPNS).
    stamped: bool,
    /// The receive low-water mark is raised: epoll does not report an answer's arrival.
    holding: bool,
    /// Exchanges left before holding is tried again, after a held answer was not there at the wake-up: a slow
    /// service's answers would only cost the hold's system calls.
    skip: u8,
}

/// How many exchanges a connection reads as they arrive after a hold found no answer at the wake-up.
const SKIP_AFTER_MISS: u8 = 8;

/// An answer due to arrive at most this long before the dispatcher's next wake-up waits in the kernel until then,
/// unreported: the thread wakes up once for both, instead of once for the answer ~50 us after the request and
/// again for the next arrival. The answer's end is the kernel's receive time of its last byte, so latency is as
/// exact as before; what changes is that the lane is free a little later. On this machine a wake-up from idle
/// costs 20-40 us of CPU (bench/loadgen.md, part d), about what the rest of a request costs. HTTP/1.1 in
/// cleartext only: under TLS the bytes received are records that rustls must see before a response can be read.
const HOLD_WITHIN: Duration = Duration::from_millis(1);

/// The receive low-water mark while an answer is held: epoll reports the socket readable only once this much has
/// arrived. An answer larger than this wakes the thread as before, and is then read as before.
const HOLD_LOWAT: i32 = 64 * 1024;

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
                    return Ok(HttpConn {
                        stream,
                        buffer: BytesMut::with_capacity(8 * 1024),
                        received: None,
                        stamped: false,
                        holding: false,
                        skip: 0,
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

impl HttpConn {
    /// Makes the kernel hold this connection's next answer unreported (and stamp it); false if it cannot (TLS,
    /// or a socket option refused), and the answer is then read as it arrives.
    fn hold(&mut self) -> bool {
        let Stream::Plain(tcp) = &self.stream else {
            return false;
        };
        if !self.stamped {
            if held::set(tcp, libc::SO_TIMESTAMPNS, 1).is_err() {
                return false;
            }
            self.stamped = true;
        }
        if !self.holding {
            if held::set(tcp, libc::SO_RCVLOWAT, HOLD_LOWAT).is_err() {
                return false;
            }
            self.holding = true;
        }
        true
    }

    /// Lets epoll report this connection's bytes as they arrive again (the kernel reports at once what it holds).
    fn release(&mut self) {
        if let (true, Stream::Plain(tcp)) = (self.holding, &self.stream) {
            // On failure the mark stays up and the connection is dropped by the error that follows it.
            if held::set(tcp, libc::SO_RCVLOWAT, 1).is_ok() {
                self.holding = false;
            }
        }
    }

    /// After the dispatcher's wake-up: reads what the kernel holds of the answer, with its receive time. An
    /// answer not there yet, or not whole, is read on as usual (`fill` releases the hold first).
    fn read_held(&mut self) -> Result<(), TransportError> {
        let Stream::Plain(tcp) = &self.stream else {
            return Ok(());
        };
        if self.buffer.capacity() - self.buffer.len() < 1024 {
            self.buffer.reserve(8 * 1024);
        }
        match held::recv_stamped(tcp, &mut self.buffer) {
            // A clean end or a reset before any of the answer: a stale keep-alive connection, as in `read_response`.
            Ok((0, _)) => Err(TransportError(STALE.into())),
            // No stamp (the first socket of the system to ask for them switches the kernel's stamps on in
            // deferred work, so the first answers after may carry none): the answer ends at this read, late by
            // at most the hold, never early.
            Ok((_, stamp)) => {
                self.received = stamp.map(held::to_instant);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.skip = SKIP_AFTER_MISS;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                Err(TransportError(STALE.into()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Reads more of the answer as it arrives (releasing a hold first); the answer's end is then the read's time.
    async fn read_more(&mut self) -> io::Result<usize> {
        self.received = None;
        self.release();
        self.stream.read_buf(&mut self.buffer).await
    }
}

/// The socket calls of a held answer: a socket option, and a read with the kernel's receive time.
mod held {
    use std::io;
    use std::mem::MaybeUninit;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use bytes::{BufMut, BytesMut};
    use tokio::net::TcpStream;
    use tokio::time::Instant;

    /// Sets an integer option at the socket level.
    pub(super) fn set(tcp: &TcpStream, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
        // SAFETY: the descriptor is the stream's own, open for as long as `tcp` is borrowed; the value is a c_int
        // of the size given.
        let r = unsafe {
            libc::setsockopt(
                tcp.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// One read, without waiting, into the buffer's spare room, and the kernel's receive time of the last bytes
    /// read (SO_TIMESTAMPNS, the system clock).
    pub(super) fn recv_stamped(
        tcp: &TcpStream,
        buf: &mut BytesMut,
    ) -> io::Result<(usize, Option<SystemTime>)> {
        let spare = buf.chunk_mut();
        let mut iov = libc::iovec {
            iov_base: spare.as_mut_ptr().cast(),
            iov_len: spare.len(),
        };
        // Room for one SCM_TIMESTAMPNS message, aligned for its header.
        let mut control = [MaybeUninit::<u64>::uninit(); 8];
        // SAFETY: msghdr is plain data; the fields that matter are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: the iovec points at the buffer's spare capacity and the control buffer at `control`, both live
        // and writable for the call; the descriptor is the stream's own and non-blocking.
        let n = unsafe { libc::recvmsg(tcp.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        // SAFETY: recvmsg wrote `n` bytes into the spare capacity.
        unsafe { buf.advance_mut(n) };
        let mut stamp = None;
        // SAFETY: the CMSG macros walk the control messages recvmsg wrote within `msg_controllen`.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                    if ts.tv_sec >= 0 && ts.tv_nsec >= 0 {
                        stamp =
                            Some(UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Ok((n, stamp))
    }

    /// The monotonic instant of a system-clock time in the recent past (now, if the clock says it is ahead).
    pub(super) fn to_instant(at: SystemTime) -> Instant {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let age = wall.duration_since(at).unwrap_or_default();
        now.checked_sub(age).unwrap_or(now)
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
    let n = conn.read_more().await?;
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
            match conn.read_more().await {
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
            if conn.read_more().await? == 0 {
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
