//! The data plane's listener: the connections the service under test opens, and what becomes of each socket.
//!
//! For: accepting connections (bound through `crate::sockets` with a backlog far above tokio's 1,024, so bursts
//! of connects are not dropped), shedding those over `max_connections`, the TLS handshake first when the data
//! plane speaks TLS, telling HTTP/2 (by its preface or ALPN) from HTTP/1.1 per connection and serving both with
//! the same call handler (a call is a request, or a stream), and carrying out what a call asks of its connection
//! once hyper has let go of the socket: holding a hung call cheaply, a reset, a close without an answer, garbage,
//! an abrupt GOAWAY. Not for: a call itself (`call`), deciding (`crate::behaviours`) or gRPC framing (`grpc`).

use std::convert::Infallible;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;

use super::call::call;
use super::http2::{self, Streams};
use super::io::{LockedStream, SharedStream};
use super::shared::{InstanceOf, Shared};
use super::takeover::{hold, Held, ResetStream, Takeover, TakeoverRequest};
use super::timeouts::{self, Timeouts};
use crate::behaviours::{ConnectionCounts, MALFORMED_BYTES};
use crate::sockets::{next_connection, write_raw};
use crate::tls::{HandshakeContext, Terminator};

/// Accepts connections until `shutdown` turns true. With `max_connections`, a connection accepted while that many
/// are open is shed: answered `503 Service Unavailable` with `connection: close` and counted (the recorder's
/// `shed`), so an overloaded faultd says so at once instead of leaving callers waiting in the kernel's backlog.
///
/// A listener of one route's instance (`instance`) serves that route alone, as that instance.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    instance: Option<Arc<InstanceOf>>,
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
        let (shared, instance) = (shared.clone(), instance.clone());
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            connection(tcp, shared, instance, shutdown).await;
            drop(permit);
        });
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

/// TLS: the handshake (with its faults) first, then HTTP/2 or HTTP/1.1 as ALPN chose over the stream it hands
/// back. The takeovers the caller acts on still act on the bare socket, under TLS: a reset or a close without
/// close_notify, garbage that is not even a TLS record; only an abrupt GOAWAY is written here, inside TLS, where
/// the caller's HTTP/2 can read it.
async fn serve_tls(
    tls: Arc<Terminator>,
    tcp: Arc<TcpStream>,
    shared: Arc<Shared>,
    instance: Option<Arc<InstanceOf>>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Takeover> {
    // Boxed like `serve_http`, so the handshake's state does not size this future for as long as a hung call
    // holds it.
    let draw = || {
        let live = shared.live();
        live.plan
            .tls
            .draw(live.position(Instant::now()), live.plan.seed)
    };
    let time_ns = |at| shared.recorder.time_ns(at);
    let context = HandshakeContext {
        header_timeout: shared.timeouts.header,
        deadlines: shared.deadlines.as_ref(),
        draw: &draw,
        time_ns: &time_ns,
    };
    let handshake = Box::pin(tls.accept(SharedStream(tcp.clone()), &tcp, &context));
    let accepted = tokio::select! {
        s = handshake => s,
        _ = shutdown.changed() => None,
    };
    match accepted {
        Some((stream, true)) => {
            shared.recorder.connection_is_http2();
            let stream = Arc::new(Mutex::new(stream));
            let action = Box::pin(serve_h2(
                LockedStream(stream.clone()),
                shared,
                instance,
                shutdown,
            ))
            .await;
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
        Some((stream, false)) => Box::pin(serve_http(stream, shared, instance, shutdown)).await,
        None => None,
    }
}

async fn connection(
    tcp: TcpStream,
    shared: Arc<Shared>,
    instance: Option<Arc<InstanceOf>>,
    mut shutdown: watch::Receiver<bool>,
) {
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
                Box::pin(serve_h2(io, shared, instance, &mut shutdown)).await
            } else {
                Box::pin(serve_http(io, shared, instance, &mut shutdown)).await
            }
        }
        // TLS: its own boxed future, so that the TLS stream and the handshake do not size the task of every
        // connection, cleartext ones included, for as long as a hung call holds it.
        Some(tls) => Box::pin(serve_tls(tls, tcp.clone(), shared, instance, &mut shutdown)).await,
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

/// Serves HTTP/1.1 on the connection until it ends, faultd shuts down, or a call asks for the socket back.
async fn serve_http<I>(
    io: I,
    shared: Arc<Shared>,
    instance: Option<Arc<InstanceOf>>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Takeover>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let takeover = Arc::new(TakeoverRequest::default());
    let counts = Arc::new(ConnectionCounts::default());
    let (mut builder, io) = timeouts::http1(shared.timeouts, io);
    let service = {
        let takeover = takeover.clone();
        service_fn(move |request| {
            let call = call(
                shared.clone(),
                instance.clone(),
                takeover.clone(),
                None,
                counts.clone(),
                request,
            );
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
    instance: Option<Arc<InstanceOf>>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Takeover>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let takeover = Arc::new(TakeoverRequest::default());
    let streams = Arc::new(Streams::default());
    let counts = Arc::new(ConnectionCounts::default());
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
                instance.clone(),
                takeover.clone(),
                Some(streams.clone()),
                counts.clone(),
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
