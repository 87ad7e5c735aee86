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

/// Forwards a call that matched no route to the configuration's `unmatched.proxy`, untouched by any fault.
async fn forward_unmatched(
    shared: &Shared,
    upstream: &crate::behaviours::proxy::Proxy,
    request: Request<Incoming>,
) -> Response<DataBody> {
    match Box::pin(upstream.forward(&shared.proxy, request)).await {
        Ok(answer) => answer.map(|b| b.map_err(|e| Box::new(e) as BodyError).boxed_unsync()),
        Err((StatusCode::LOOP_DETECTED, upstream)) => {
            shared.recorder.loop_detected();
            crate::loops::loop_detected(&upstream).map(|b| full(Bytes::from(b)))
        }
        Err((status, message)) => plain(status, message),
    }
}

/// A call that is never answered: its guard, held by the stream's future until the caller gives up.
struct Held(CallGuard);

/// Holds `guard` until the future is dropped (the caller resets the stream or closes the connection).
async fn hold<T>(guard: CallGuard) -> T {
    let _held = guard;
    std::future::pending().await
}

/// Handles one call: an HTTP/1.1 request, or an HTTP/2 stream (`h2` holds its connection's stream counts).
async fn call(
    shared: Arc<Shared>,
    takeover: Arc<TakeoverRequest>,
    h2: Option<Arc<Streams>>,
    request: Request<Incoming>,
) -> Result<Response<DataBody>, Held> {
    let now = Instant::now();
    let stream_number = h2.as_ref().map(|s| s.opened());
    let found = {
        let live = shared.live();
        let plan = live.plan.clone();
        match plan.table.find(request.method(), request.uri().path()) {
            Some(route) => Ok((live.resolve(route, now), route, plan)),
            // The read guard ends with this block: an unmatched call may be forwarded, and awaits.
            None => Err(plan),
        }
    };
    let (plan, route, resolved) = match found {
        Ok((resolved, route, plan)) => (plan, route, resolved),
        Err(plan) => {
            shared
                .recorder
                .unmatched(request.method().as_str(), request.uri().path());
            if let Some(upstream) = plan.config.unmatched.as_ref().and_then(|u| u.proxy()) {
                return Ok(forward_unmatched(&shared, upstream, request).await);
            }
            let body = format!(
                "faultd: no route matches {} {}\n",
                request.method(),
                request.uri().path()
            );
            return Ok(plain(StatusCode::NOT_FOUND, body));
        }
    };
    let plan_route = &plan.routes[route];
    let grpc = GrpcCall::of(&request);
    let mut guard =
        shared
            .recorder
            .arrive_at(plan_route.recorder.clone(), resolved.phase.clone(), now);
    let n = plan_route
        .calls
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let draws = CallDraws::new(plan.seed, plan_route.key, n);
    let decision = decide(
        resolved.from.as_deref(),
        &resolved.to,
        resolved.weight,
        draws,
    );
    // Only a proxied call needs the request's head past this point. The head shares hyper's 8 KiB read buffer,
    // and hyper reserves a fresh one to watch for the caller's close while the call is pending, so keeping the head
    // through a long delay would hold both buffers. The body stays with the call, as it would untouched.
    // A call answered at once keeps the head's header map, emptied, for its answer's headers: hyper hands an
    // answer's map on to parse the connection's next request into, so on a keep-alive connection one map goes
    // round from call to call instead of a new one being cloned for each answer and grown for each request.
    let (request, mut body, mut spare_headers) = if resolved.to.behaviour.proxy.is_some() {
        (Some(request), None, None)
    } else {
        let (head, body) = request.into_parts();
        let spare = decision.delay.is_zero().then(|| {
            let mut headers = head.headers;
            headers.clear();
            headers
        });
        (None, Some(body), spare)
    };

    if let (Some(streams), Some(n), Some(goaway)) =
        (&h2, stream_number, resolved.to.behaviour.goaway)
    {
        if n >= goaway.after && streams.take_goaway() {
            match goaway.mode {
                GoAwayMode::Graceful => streams.graceful.notify_one(),
                GoAwayMode::Abrupt => {
                    // The connection drops hyper and every stream's future with it, this one's guard included.
                    guard.set_outcome(Outcome::Reset);
                    takeover.request(Takeover::GoAway(goaway.code));
                    return std::future::pending().await;
                }
            }
        }
    }

    if decision.action == CallAction::Hang {
        guard.set_outcome(Outcome::Hang);
        if h2.is_some() {
            // Never answer, holding only this stream: the connection carries other calls. hyper drops the stream's
            // future (and the guard, recording the hang) when the caller resets the stream or closes the connection.
            return Err(Held(guard));
        }
        // Never answer. The guard moves to the connection, which drops hyper (and this future) and holds the bare
        // socket until the caller closes it; the guard is dropped then, recording the hang.
        takeover.request(Takeover::Hang(guard));
        return std::future::pending().await;
    }
    let grpc_response = resolved.to.behaviour.grpc_response.as_ref();
    let echoed = match (&grpc, decision.action, body.take()) {
        (Some(_), CallAction::Healthy, Some(b)) if grpc_response.is_some_and(|r| r.echo()) => {
            // Boxed, as the proxy's forward below: the call's future is moved into hyper's slot on every call,
            // so it stays the size of the healthy path's state rather than that of its rarest await.
            Some(Box::pin(grpc::first_message(b)).await)
        }
        (_, _, b) => {
            body = b;
            None
        }
    };
    // A message a gRPC server could not read is refused at once, with the status such a server gives it.
    let echoed = match echoed {
        Some(Err(bad)) => {
            guard.set_grpc_status(bad.code);
            let trailers = grpc::trailers(bad.code, Some(&bad.message), &Default::default());
            let response = grpc::answer(&Default::default(), None, trailers);
            return Ok(guarded(response.map(BodyExt::boxed_unsync), guard));
        }
        Some(Ok(message)) => Some(message),
        None => None,
    };
    let mut deadline = guard.arrival() + decision.delay;
    // A gRPC caller's deadline ends the call as a gRPC server would: DEADLINE_EXCEEDED when it passes.
    let grpc_deadline = grpc
        .and_then(|g| g.timeout)
        .map(|t| guard.arrival() + t)
        .filter(|d| *d < deadline);
    if let Some(d) = grpc_deadline {
        deadline = d;
    }
    // A call with no delay is due at its arrival: answered at once, without reading the clock again.
    if deadline > guard.arrival() {
        match &shared.deadlines {
            Some(deadlines) => deadlines.wait_until(deadline).await,
            None => tokio::time::sleep_until(deadline).await,
        }
    }
    drop(body);
    // The answer is due now, unless it takes time of its own: faultd's lateness is what the call outlasts it by.
    let paced = resolved.to.behaviour.proxy.is_some()
        || resolved.to.behaviour.slow_body.is_some()
        || grpc_response.is_some_and(|r| !r.stream().1.is_zero());
    if !paced {
        guard.set_due(deadline);
    }
    if grpc_deadline.is_some() {
        guard.set_grpc_status(GrpcCode::DEADLINE_EXCEEDED);
        let trailers = grpc::trailers(
            GrpcCode::DEADLINE_EXCEEDED,
            Some("deadline exceeded"),
            &Default::default(),
        );
        let response = grpc::answer(&Default::default(), None, trailers);
        return Ok(guarded(response.map(BodyExt::boxed_unsync), guard));
    }

    let raw = match decision.action {
        CallAction::Reset => Some((Takeover::Reset, Outcome::Reset)),
        CallAction::Empty => Some((Takeover::Empty, Outcome::Empty)),
        CallAction::Malformed => Some((Takeover::Malformed, Outcome::Malformed)),
        // HTTP/1.1 has no stream to reset apart from its connection.
        CallAction::RstStream(_) if h2.is_none() => Some((Takeover::Reset, Outcome::Reset)),
        _ => None,
    };
    if let Some((action, outcome)) = raw {
        guard.set_outcome(outcome);
        takeover.request(action);
        return std::future::pending().await;
    }

    let behaviour = &resolved.to;
    let response = match decision.action {
        CallAction::RstStream(code) => {
            guard.set_outcome(Outcome::Reset);
            let mut response = plain(StatusCode::OK, "");
            response.extensions_mut().insert(ResetStream(code));
            response
        }
        CallAction::GrpcError(e) => {
            let metadata = header_map(&e.metadata).unwrap_or_default();
            match grpc {
                Some(_) => {
                    guard.set_grpc_status(e.code);
                    let trailers = grpc::trailers(e.code, e.message.as_deref(), &metadata);
                    // A stream that breaks partway: the healthy answer's first messages, then the status.
                    let (initial, message, interval) = match grpc_response {
                        Some(r) => (r.metadata(), r.message(), r.stream().1),
                        None => (HeaderMap::new(), Bytes::new(), Duration::ZERO),
                    };
                    let response = grpc::answer_stream(
                        &initial,
                        grpc::frame(&message),
                        e.after_messages,
                        interval,
                        trailers,
                    );
                    guarded(response.map(BodyExt::boxed_unsync), guard)
                }
                None => {
                    let mut response = plain(
                        grpc::http_status_of(e.code),
                        e.message.clone().unwrap_or_default(),
                    );
                    response.headers_mut().extend(metadata);
                    guarded(response, guard)
                }
            }
        }
        CallAction::Error(e) => {
            let mut response =
                Response::new(Full::new(Bytes::from(e.body.clone().unwrap_or_default())));
            *response.status_mut() =
                StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            if let Ok(headers) = header_map(&e.headers) {
                response.headers_mut().extend(headers);
            }
            guarded(
                response.map(|b| b.map_err(|never| match never {}).boxed_unsync()),
                guard,
            )
        }
        CallAction::FailFirst(status) => {
            let mut response = plain(
                StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                "",
            );
            *response.body_mut() = full(Bytes::from_static(b"faultd: fail_first\n"));
            guarded(response, guard)
        }
        _ if grpc.is_some() && behaviour.behaviour.proxy.is_none() => {
            guard.set_grpc_status(GrpcCode::OK);
            let message = echoed
                .or_else(|| grpc_response.map(|r| r.message()))
                .unwrap_or_default();
            let (metadata, trailing) = grpc_response
                .map(|r| (r.metadata(), r.trailers()))
                .unwrap_or_default();
            let trailers = grpc::trailers(GrpcCode::OK, None, &trailing);
            let (count, interval) = grpc_response.map_or((1, Duration::ZERO), |r| r.stream());
            let response =
                grpc::answer_stream(&metadata, grpc::frame(&message), count, interval, trailers);
            guarded(response.map(BodyExt::boxed_unsync), guard)
        }
        _ => match (&behaviour.behaviour.proxy, request) {
            (Some(upstream), Some(request)) => {
                match Box::pin(upstream.forward(&shared.proxy, request)).await {
                    Ok(upstream_response) => guarded(
                        upstream_response
                            .map(|b| b.map_err(|e| Box::new(e) as BodyError).boxed_unsync()),
                        guard,
                    ),
                    Err((StatusCode::LOOP_DETECTED, upstream)) => {
                        shared.recorder.loop_detected();
                        let answer = crate::loops::loop_detected(&upstream);
                        guarded(answer.map(|b| full(Bytes::from(b))), guard)
                    }
                    Err((status, message)) => guarded(plain(status, message), guard),
                }
            }
            _ => {
                let healthy = &behaviour.healthy;
                let headers = match spare_headers.take() {
                    Some(mut headers) => {
                        for (name, value) in &healthy.headers {
                            headers.append(name.clone(), value.clone());
                        }
                        headers
                    }
                    None => healthy.headers.clone(),
                };
                let mut head = Response::new(());
                *head.status_mut() = healthy.status;
                *head.headers_mut() = headers;
                // A whole body is guarded as it is, not boxed first: one allocation per answer instead of two.
                match behaviour.behaviour.slow_body {
                    Some(slow) => guarded(
                        head.map(|()| TrickleBody::new(healthy.body.clone(), slow.rate).boxed()),
                        guard,
                    ),
                    None => guarded(head.map(|()| whole(healthy.body.clone())), guard),
                }
            }
        },
    };
    Ok(response)
}

fn full(bytes: Bytes) -> DataBody {
    whole(bytes).boxed_unsync()
}

/// A body of `bytes` in one frame, with the data plane's error type.
fn whole(bytes: Bytes) -> impl Body<Data = Bytes, Error = BodyError> + Send + Unpin + 'static {
    Full::new(bytes).map_err(|never| match never {})
}

fn plain(status: StatusCode, body: impl Into<Bytes>) -> Response<DataBody> {
    let mut response = Response::new(full(body.into()));
    *response.status_mut() = status;
    response
}

/// Moves the call's guard into the response body, so the call counts as in flight until its last byte is handed
/// to the socket, and as completed only if that happens.
fn guarded<B>(response: Response<B>, guard: CallGuard) -> Response<DataBody>
where
    B: Body<Data = Bytes, Error = BodyError> + Send + Unpin + 'static,
{
    let status = response.status().as_u16();
    response.map(|inner| {
        GuardedBody {
            inner,
            guard: Some(guard),
            status,
        }
        .boxed_unsync()
    })
}

struct GuardedBody<B: Body> {
    inner: B,
    guard: Option<CallGuard>,
    status: u16,
}

impl<B: Body> GuardedBody<B> {
    fn complete(&mut self) {
        if let Some(mut guard) = self.guard.take() {
            guard.set_outcome(Outcome::Completed(self.status));
        }
    }
}

impl<B: Body<Data = Bytes, Error = BodyError> + Unpin> Body for GuardedBody<B> {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.complete(),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.complete(),
            // A failed upstream body: the call is left as abandoned.
            Poll::Ready(Some(Err(_))) => drop(self.guard.take()),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: Body> Drop for GuardedBody<B> {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.complete();
        }
    }
}

/// A stream (TLS's) that hyper's HTTP/2 reads and writes while the connection task keeps a handle to it, so an
/// abrupt GOAWAY can be written inside TLS once hyper has let go. hyper polls it from its connection's task
/// alone, so the lock is never contended.
struct LockedStream<S>(Arc<Mutex<S>>);

impl<S> LockedStream<S> {
    fn with<T>(&self, f: impl FnOnce(Pin<&mut S>) -> Poll<io::Result<T>>) -> Poll<io::Result<T>>
    where
        S: Unpin,
    {
        match self.0.lock() {
            Ok(mut stream) => f(Pin::new(&mut *stream)),
            Err(_) => Poll::Ready(Err(io::Error::other("the stream's lock is poisoned"))),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for LockedStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_read(cx, buf))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for LockedStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.with(|s| s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|s| s.poll_shutdown(cx))
    }
}

/// A TCP stream that hyper reads and writes while the connection task keeps a handle to the same socket, so a
/// call can ask for the socket back (reset, empty, malformed) mid-request.
struct SharedStream(Arc<TcpStream>);

impl AsyncRead for SharedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            std::task::ready!(self.0.poll_read_ready(cx))?;
            // Into the uninitialised space as it is: zeroing it first (`initialize_unfilled`) would make every
            // page of hyper's 8 KiB read buffer resident, though a request usually fills a few hundred bytes.
            // A read that left room in the buffer emptied the socket: it is reported to tokio as "would block",
            // so tokio forgets this readiness (as its own `poll_read` does) and the next read waits for the next
            // edge, instead of asking the kernel once more only to hear EAGAIN: a system call per request.
            let room = buf.remaining();
            let mut drained = false;
            let read = self.0.try_io(tokio::io::Interest::READABLE, || {
                let n = self.0.try_read_buf(buf)?;
                if n > 0 && n < room {
                    drained = true;
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            });
            match read {
                _ if drained => return Poll::Ready(Ok(())),
                Ok(_) => return Poll::Ready(Ok(())),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for SharedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            std::task::ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            std::task::ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write_vectored(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(socket2::SockRef::from(&*self.0).shutdown(std::net::Shutdown::Write))
    }
}
