//! The data plane: the listener the service under test calls, and what it does with each call.
//!
//! For: accepting connections (through socket2, with a backlog far above tokio's 1,024 so bursts of connects
//! are not dropped), matching each call to a route, recording it, deciding its fate with the seeded draws, and
//! carrying the decision out: waiting precisely, answering, trickling, proxying, or taking the socket back from
//! hyper to hang on it cheaply, reset it, close it empty or write garbage. Not for: deciding (see `behaviours`)
//! or timing phases (see `schedule`).

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Request, Response, StatusCode};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::time::Instant;

use crate::behaviours::{
    decide, header_map, CallAction, ProxyClient, TrickleBody, MALFORMED_BYTES,
};
use crate::deadlines::Deadlines;
use crate::draw::CallDraws;
use crate::recorder::{CallGuard, Outcome, Recorder};
use crate::schedule::Live;

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
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        match accepted {
            Ok((tcp, _)) => {
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
        let mut written = 0;
        while written < SHED_RESPONSE.len() {
            if tcp.writable().await.is_err() {
                return;
            }
            match tcp.try_write(&SHED_RESPONSE[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(_) => return,
            }
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

async fn connection(tcp: TcpStream, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let _open = shared.recorder.connection_opened();
    let _ = tcp.set_nodelay(true);
    let tcp = Arc::new(tcp);
    // Boxed, so that hyper's connection lives in its own allocation that is freed when a call takes the socket
    // back; inline, it would size this task for as long as the socket is held.
    let io = SharedStream(tcp.clone());
    let action = match shared.tls.clone() {
        None => Box::pin(serve_http(io, shared, &mut shutdown)).await,
        // TLS: the handshake (with its faults) first, then HTTP over the stream it hands back. The takeovers below
        // still act on the bare socket, under TLS: a reset or a close without close_notify, garbage that is not
        // even a TLS record.
        Some(tls) => {
            // Boxed like `serve_http`, so the handshake's state does not size this task for as long as a hung
            // call holds it.
            let handshake = Box::pin(tls.accept(io, &tcp, &shared));
            let stream = tokio::select! {
                s = handshake => s,
                _ = shutdown.changed() => None,
            };
            match stream {
                Some(stream) => Box::pin(serve_http(stream, shared, &mut shutdown)).await,
                None => None,
            }
        }
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
            let mut written = 0;
            while written < MALFORMED_BYTES.len() {
                if tcp.writable().await.is_err() {
                    break;
                }
                match tcp.try_write(&MALFORMED_BYTES[written..]) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(_) => break,
                }
            }
            let _ = socket.shutdown(std::net::Shutdown::Write);
        }
        None => {}
    }
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
    let service = {
        let takeover = takeover.clone();
        service_fn(move |request| call(shared.clone(), takeover.clone(), request))
    };
    let conn = http1::Builder::new().serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = &mut conn => None,
        _ = takeover.notify.notified() => takeover.action.lock().ok().and_then(|mut a| a.take()),
        _ = shutdown.changed() => None,
    }
}

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

/// Handles one call.
async fn call(
    shared: Arc<Shared>,
    takeover: Arc<TakeoverRequest>,
    request: Request<Incoming>,
) -> Result<Response<DataBody>, Infallible> {
    let now = Instant::now();
    let (plan, route, resolved) = {
        let live = shared.live();
        let plan = live.plan.clone();
        match plan.table.find(request.method(), request.uri().path()) {
            None => {
                drop(live);
                shared.recorder.unmatched();
                let body = format!(
                    "faultd: no route matches {} {}\n",
                    request.method(),
                    request.uri().path()
                );
                return Ok(plain(StatusCode::NOT_FOUND, body));
            }
            Some(route) => {
                let resolved = live.resolve(route, now);
                (plan, route, resolved)
            }
        }
    };
    let plan_route = &plan.routes[route];
    let mut guard = shared
        .recorder
        .arrive(plan_route.recorder.clone(), resolved.phase.clone());
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
    let (request, _body) = if resolved.to.behaviour.proxy.is_some() {
        (Some(request), None)
    } else {
        (None, Some(request.into_body()))
    };

    if decision.action == CallAction::Hang {
        guard.set_outcome(Outcome::Hang);
        // Never answer. The guard moves to the connection, which drops hyper (and this future) and holds the bare
        // socket until the caller closes it; the guard is dropped then, recording the hang.
        takeover.request(Takeover::Hang(guard));
        return std::future::pending().await;
    }
    let deadline = guard.arrival() + decision.delay;
    match &shared.deadlines {
        Some(deadlines) => deadlines.wait_until(deadline).await,
        None => tokio::time::sleep_until(deadline).await,
    }

    let raw = match decision.action {
        CallAction::Reset => Some((Takeover::Reset, Outcome::Reset)),
        CallAction::Empty => Some((Takeover::Empty, Outcome::Empty)),
        CallAction::Malformed => Some((Takeover::Malformed, Outcome::Malformed)),
        _ => None,
    };
    if let Some((action, outcome)) = raw {
        guard.set_outcome(outcome);
        takeover.request(action);
        return std::future::pending().await;
    }

    let behaviour = &resolved.to;
    let response = match decision.action {
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
        _ => match (&behaviour.behaviour.proxy, request) {
            (Some(upstream), Some(request)) => match upstream.forward(&shared.proxy, request).await
            {
                Ok(upstream_response) => guarded(
                    upstream_response
                        .map(|b| b.map_err(|e| Box::new(e) as BodyError).boxed_unsync()),
                    guard,
                ),
                Err((status, message)) => guarded(plain(status, message), guard),
            },
            _ => {
                let healthy = &behaviour.healthy;
                let body = match behaviour.behaviour.slow_body {
                    Some(slow) => TrickleBody::new(healthy.body.clone(), slow.rate).boxed(),
                    None => full(healthy.body.clone()),
                };
                let mut response = Response::new(body);
                *response.status_mut() = healthy.status;
                *response.headers_mut() = healthy.headers.clone();
                guarded(response, guard)
            }
        },
    };
    Ok(response)
}

fn full(bytes: Bytes) -> DataBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn plain(status: StatusCode, body: impl Into<Bytes>) -> Response<DataBody> {
    let mut response = Response::new(full(body.into()));
    *response.status_mut() = status;
    response
}

/// Moves the call's guard into the response body, so the call counts as in flight until its last byte is handed
/// to the socket, and as completed only if that happens.
fn guarded(response: Response<DataBody>, guard: CallGuard) -> Response<DataBody> {
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

struct GuardedBody {
    inner: DataBody,
    guard: Option<CallGuard>,
    status: u16,
}

impl GuardedBody {
    fn complete(&mut self) {
        if let Some(mut guard) = self.guard.take() {
            guard.set_outcome(Outcome::Completed(self.status));
        }
    }
}

impl Body for GuardedBody {
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

impl Drop for GuardedBody {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.complete();
        }
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
            match self.0.try_read_buf(buf) {
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
