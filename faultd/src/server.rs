//! The data plane: the listener the service under test calls, and what it does with each call.
//!
//! For: accepting connections, telling HTTP/2 (by its preface) from HTTP/1.1 per connection and serving both with
//! the same call handler (a call is a request, or a stream) (through socket2, with a backlog far above tokio's 1,024 so bursts of connects
//! are not dropped), matching each call to a route, recording it, deciding its fate with the seeded draws, and
//! carrying the decision out: waiting precisely, answering, trickling, proxying, or taking the socket back from
//! hyper to hang on it cheaply, reset it, close it empty or write garbage. On HTTP/2 a hang holds its stream (the
//! connection carries other calls), and the stream faults (RST_STREAM, GOAWAY, gRPC statuses and deadlines) are
//! carried out here too. Not for: deciding (see `behaviours`), timing phases (see `schedule`) or gRPC framing
//! (see `grpc`).

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderMap, Request, Response, StatusCode};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::time::Instant;

use crate::behaviours::{
    decide, header_map, CallAction, GoAwayMode, ProxyClient, TrickleBody, MALFORMED_BYTES,
};
use crate::deadlines::Deadlines;
use crate::draw::CallDraws;
use crate::grpc::{self, GrpcCall};
use crate::http2::{self, H2Code, Streams};
use crate::recorder::{CallGuard, Outcome, Recorder};
use crate::schedule::Live;
use crate::timeouts::{self, Timeouts};
use faultline_units::GrpcCode;

pub use crate::behaviours::{BodyError, DataBody};

mod answers;
mod call;

use answers::*;
use call::{call, hold, Held};

/// What the data plane shares between connections and with the control API.
pub struct Shared {
    /// Plan, clock and overrides; read on every call, written by control calls (which only swap small values,
    /// so a control call never holds the lock for long).
    pub live: RwLock<Live>,
    /// The recorder.
    pub recorder: Arc<Recorder>,
    /// The client of proxied calls.
    pub proxy: ProxyClient,
    /// The waker of delayed calls ([`crate::deadlines`]); `None` without a timerfd or with precise delays off
    /// (paused-time tests, where only tokio's timer follows the paused clock), and delays then use tokio's timer.
    pub deadlines: Option<Deadlines>,
    /// TLS termination, when the configuration asks for it: every connection's handshake runs first.
    pub tls: Option<Arc<crate::tls::Terminator>>,
    /// How long a connection may carry no call (a slow head, an idle keep-alive connection).
    pub timeouts: Timeouts,
    /// The TCP routes, whose listeners (with faultd's others) no upstream may name.
    pub tcp: Arc<crate::tcp::TcpRoutes>,
    /// Where the control API may read the files a configuration names.
    pub files: crate::files::Files,
}

impl Shared {
    /// A read of the live state that survives a panicked writer (the state is plain values, never half-written).
    pub fn live(&self) -> std::sync::RwLockReadGuard<'_, Live> {
        self.live.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A write of the live state.
    pub fn live_mut(&self) -> std::sync::RwLockWriteGuard<'_, Live> {
        self.live.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// Binds a TCP listener with `backlog` pending connects (tokio's own `bind` uses 1,024).
pub fn bind(addr: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    TcpListener::from_std(socket.into())
}

/// Accepts connections until `shutdown` turns true. With `max_connections`, a connection accepted while that many
/// are open is shed: answered `503 Service Unavailable` with `connection: close` and counted (the recorder's
/// `shed`), so an overloaded faultd says so at once instead of leaving callers waiting in the kernel's backlog.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    max_connections: Option<usize>,
    mut shutdown: watch::Receiver<bool>,
) {
    let limit = max_connections.map(|n| Arc::new(Semaphore::new(n.max(1))));
    while let Some(tcp) = next_connection(&listener, &mut shutdown).await {
        let permit = match &limit {
            Some(s) => match s.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    shared.recorder.connection_shed();
                    tokio::spawn(shed(tcp, shutdown.clone()));
                    continue;
                }
            },
            None => None,
        };
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            connection(tcp, shared, shutdown).await;
            drop(permit);
        });
    }
}

/// The next connection of `listener`, or `None` once `shutdown` turns true.
pub(crate) async fn next_connection(
    listener: &TcpListener,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<TcpStream> {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return None,
        };
        match accepted {
            Ok((tcp, _)) => return Some(tcp),
            // Out of file descriptors or a connect that died in the queue: keep serving the others.
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

/// The answer to a connection over the limit.
const SHED_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 41\r\nretry-after: 1\r\nconnection: close\r\n\r\nfaultd: over its connection limit (shed)\n";

/// How long a shed connection may take to send its request head, and then to close after the answer: bounded so
/// that shedding itself cannot pile up sockets.
const SHED_WAIT: Duration = Duration::from_millis(500);

/// Answers a connection over the limit with 503 and closes it. The request head is read first (bounded by
/// [`SHED_WAIT`] and 8 KiB): closing a socket with unread bytes sends an RST, which can destroy the 503 before the
/// caller reads it.
async fn shed(tcp: TcpStream, mut shutdown: watch::Receiver<bool>) {
    let work = async {
        let mut head = Vec::with_capacity(1024);
        let _ = tokio::time::timeout(SHED_WAIT, async {
            let mut buf = [0u8; 1024];
            while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                if tcp.readable().await.is_err() {
                    return;
                }
                match tcp.try_read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(_) => return,
                }
            }
        })
        .await;
        if !write_raw(&tcp, SHED_RESPONSE).await {
            return;
        }
        let _ = socket2::SockRef::from(&tcp).shutdown(std::net::Shutdown::Write);
        let _ = tokio::time::timeout(SHED_WAIT, until_caller_closes(&tcp)).await;
    };
    tokio::select! {
        _ = work => {}
        _ = shutdown.changed() => {}
    }
}

/// What a call asks its connection to do once hyper has let go of the socket.
enum Takeover {
    Reset,
    Empty,
    Malformed,
    /// Hold the call on the bare socket until the caller closes it. The call's guard moves here, so the call stays
    /// in flight while hyper's per-connection state (an 8 KiB read buffer, an 8 KiB write buffer, the request and
    /// the call's future) is freed: a hung call costs a few hundred bytes instead of ~20 KB, which is what lets
    /// faultd hold tens of thousands of them (bench/faultd.md, benchmark c).
    Hang(CallGuard),
    /// An abrupt GOAWAY with this code, then a close: the HTTP/2 connection's streams in flight are lost.
    GoAway(H2Code),
    /// The same, with the GOAWAY already written inside TLS: only the close is left.
    GoAwayWritten,
}

#[derive(Default)]
struct TakeoverRequest {
    action: Mutex<Option<Takeover>>,
    notify: Notify,
}

impl TakeoverRequest {
    fn request(&self, action: Takeover) {
        if let Ok(mut a) = self.action.lock() {
            *a = Some(action);
        }
        self.notify.notify_one();
    }
}

/// TLS: the handshake (with its faults) first, then HTTP/2 or HTTP/1.1 as ALPN chose over the stream it hands
/// back. The takeovers the caller acts on still act on the bare socket, under TLS: a reset or a close without
/// close_notify, garbage that is not even a TLS record; only an abrupt GOAWAY is written here, inside TLS, where
/// the caller's HTTP/2 can read it.
async fn serve_tls(
    tls: Arc<crate::tls::Terminator>,
    tcp: Arc<TcpStream>,
    shared: Arc<Shared>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Takeover> {
    // Boxed like `serve_http`, so the handshake's state does not size this future for as long as a hung call
    // holds it.
    let handshake = Box::pin(tls.accept(SharedStream(tcp.clone()), &tcp, &shared));
    let accepted = tokio::select! {
        s = handshake => s,
        _ = shutdown.changed() => None,
    };
    match accepted {
        Some((stream, true)) => {
            shared.recorder.connection_is_http2();
            let stream = Arc::new(Mutex::new(stream));
            let action = Box::pin(serve_h2(LockedStream(stream.clone()), shared, shutdown)).await;
            match (action, Arc::into_inner(stream)) {
                (Some(Takeover::GoAway(code)), Some(stream)) => {
                    if let Ok(mut stream) = stream.into_inner() {
                        let frame = http2::goaway_frame(code);
                        let _ = tokio::time::timeout(SHED_WAIT, async {
                            stream.write_all(&frame).await?;
                            stream.flush().await
                        })
                        .await;
                    }
                    Some(Takeover::GoAwayWritten)
                }
                (action, _) => action,
            }
        }
        Some((stream, false)) => Box::pin(serve_http(stream, shared, shutdown)).await,
        None => None,
    }
}

async fn connection(tcp: TcpStream, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let _open = shared.recorder.connection_opened();
    let _ = tcp.set_nodelay(true);
    let tcp = Arc::new(tcp);
    // Boxed, so that hyper's connection lives in its own allocation that is freed when a call takes the socket
    // back; inline, it would size this task for as long as the socket is held.
    let action = match shared.tls.clone() {
        // Cleartext: HTTP/2 by its preface (prior knowledge), HTTP/1.1 otherwise.
        None => {
            // A connection that sends nothing at all is idle, not slow: it gets the idle timeout.
            let sniff =
                tokio::time::timeout(shared.timeouts.idle, http2::starts_with_preface(&tcp));
            let h2 = tokio::select! {
                h2 = sniff => match h2 {
                    Ok(h2) => h2,
                    Err(_) => return,
                },
                _ = shutdown.changed() => return,
            };
            let io = SharedStream(tcp.clone());
            if h2 {
                shared.recorder.connection_is_http2();
                Box::pin(serve_h2(io, shared, &mut shutdown)).await
            } else {
                Box::pin(serve_http(io, shared, &mut shutdown)).await
            }
        }
        // TLS: its own boxed future, so that the TLS stream and the handshake do not size the task of every
        // connection, cleartext ones included, for as long as a hung call holds it.
        Some(tls) => Box::pin(serve_tls(tls, tcp.clone(), shared, &mut shutdown)).await,
    };
    // hyper's connection (and the call's future) are dropped by now, so the socket is ours alone below.
    let socket = socket2::SockRef::from(&*tcp);
    match action {
        Some(Takeover::Hang(guard)) => {
            tokio::select! {
                _ = until_caller_closes(&tcp) => {}
                _ = shutdown.changed() => {}
            }
            drop(guard);
        }
        Some(Takeover::Reset) => {
            // SO_LINGER 0 turns the close into an RST.
            let _ = socket.set_linger(Some(Duration::ZERO));
        }
        Some(Takeover::Empty) => {
            let _ = socket.shutdown(std::net::Shutdown::Write);
        }
        Some(Takeover::Malformed) => {
            write_raw(&tcp, MALFORMED_BYTES).await;
            let _ = socket.shutdown(std::net::Shutdown::Write);
        }
        Some(takeover @ (Takeover::GoAway(_) | Takeover::GoAwayWritten)) => {
            if let Takeover::GoAway(code) = takeover {
                write_raw(&tcp, &http2::goaway_frame(code)).await;
            }
            let _ = socket.shutdown(std::net::Shutdown::Write);
            // Closing with unread bytes would send an RST that can destroy the GOAWAY before the caller reads it.
            tokio::select! {
                _ = tokio::time::timeout(SHED_WAIT, until_caller_closes(&tcp)) => {}
                _ = shutdown.changed() => {}
            }
        }
        None => {}
    }
}

/// Writes `bytes` on the bare socket; false if it failed (and gave up).
pub(crate) async fn write_raw(tcp: &TcpStream, bytes: &[u8]) -> bool {
    let mut written = 0;
    while written < bytes.len() {
        if tcp.writable().await.is_err() {
            return false;
        }
        match tcp.try_write(&bytes[written..]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return false,
        }
    }
    true
}

/// Serves HTTP/1.1 on the connection until it ends, faultd shuts down, or a call asks for the socket back.
async fn serve_http<I>(
    io: I,
    shared: Arc<Shared>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Takeover>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let takeover = Arc::new(TakeoverRequest::default());
    let (mut builder, io) = timeouts::http1(shared.timeouts, io);
    let service = {
        let takeover = takeover.clone();
        service_fn(move |request| {
            let call = call(shared.clone(), takeover.clone(), None, request);
            async move {
                match call.await {
                    Ok(response) => Ok::<_, Infallible>(response),
                    Err(Held(guard)) => hold(guard).await,
                }
            }
        })
    };
    // Each answer's head and body go out in one buffer through `write`, where hyper's default gathers them in a
    // two-part `writev`: the kernel's gathered write costs more per answer than copying the body (bench/faultd.md).
    let conn = builder.writev(false).serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        _ = &mut conn => None,
        _ = takeover.notify.notified() => takeover.action.lock().ok().and_then(|mut a| a.take()),
        _ = shutdown.changed() => None,
    }
}

/// Serves HTTP/2 on the connection until it ends, faultd shuts down, or a call asks for the socket back (a
/// connection-level fault: reset, empty, malformed, abrupt GOAWAY). Each stream is a call of the same handler as
/// HTTP/1.1's; a call asks for a graceful GOAWAY through the connection's [`Streams`].
async fn serve_h2<I>(
    io: I,
    shared: Arc<Shared>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Takeover>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let takeover = Arc::new(TakeoverRequest::default());
    let streams = Arc::new(Streams::default());
    let Timeouts { header, idle } = shared.timeouts;
    let max_streams = shared
        .live()
        .plan
        .config
        .http2
        .and_then(|h| h.max_concurrent_streams);
    let service = {
        let (takeover, streams) = (takeover.clone(), streams.clone());
        service_fn(move |request| {
            // Boxed, so a stream's task keeps only this wrapper once the call has decided: a held (hung) stream
            // costs its guard, not the call's largest state.
            let call = Box::pin(call(
                shared.clone(),
                takeover.clone(),
                Some(streams.clone()),
                request,
            ));
            let waiting = streams.waiting();
            async move {
                let _waiting = waiting;
                let response = match call.await {
                    Ok(response) => response,
                    Err(Held(guard)) => hold(guard).await,
                };
                // hyper resets the stream with the h2 reason its service fails with.
                match response.extensions().get::<ResetStream>() {
                    Some(ResetStream(code)) => Err(h2::Error::from(code.reason())),
                    None => Ok(response),
                }
            }
        })
    };
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    if let Some(max) = max_streams {
        builder.max_concurrent_streams(max);
    }
    // Pings find a caller that vanished without closing, even one whose stream faultd holds hung.
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(idle)
        .keep_alive_timeout(header);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let idle_check = tokio::time::sleep(idle);
    tokio::pin!(idle_check);
    loop {
        tokio::select! {
            _ = &mut conn => return None,
            _ = streams.graceful.notified() => conn.as_mut().graceful_shutdown(),
            // A graceful GOAWAY: streams still sending their bodies finish; new calls go to a new connection.
            _ = &mut idle_check => match streams.idle_for() {
                Some(quiet) if quiet >= idle => {
                    conn.as_mut().graceful_shutdown();
                    idle_check.as_mut().reset(Instant::now() + Duration::from_secs(86_400 * 365));
                }
                Some(quiet) => idle_check.as_mut().reset(Instant::now() + (idle - quiet)),
                None => idle_check.as_mut().reset(Instant::now() + idle),
            },
            _ = takeover.notify.notified() => {
                return takeover.action.lock().ok().and_then(|mut a| a.take());
            }
            _ = shutdown.changed() => return None,
        }
    }
}

/// Marks a response as "reset this stream instead" for the HTTP/2 service around [`call`].
#[derive(Debug, Clone, Copy)]
struct ResetStream(H2Code);

/// Waits until the caller closes the connection (or it fails), discarding whatever else arrives: a hung call is
/// never answered, and HTTP/1.1 answers in order, so nothing sent after it could be answered either. A caller that
/// half-closes ends the hang, as it did under hyper (which does not support half-closed callers by default). Unlike
/// hyper, this also sees the close of a caller that sent more bytes after the hung request: hyper stops watching
/// for EOF once its read buffer holds unparsed bytes, which left such a call in flight until shutdown.
async fn until_caller_closes(tcp: &TcpStream) {
    loop {
        if tcp.readable().await.is_err() {
            return;
        }
        let mut sink = [0u8; 256];
        match tcp.try_read(&mut sink) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return,
        }
    }
}
