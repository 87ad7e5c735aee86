//! How long a listener waits on a connection that carries no call: a request head that is slow to arrive (a
//! slowloris), a keep-alive connection idle between calls, a caller that vanished without closing.
//!
//! For: the two limits ([`Timeouts`]); the HTTP/1.1 head timer ([`http1`]), which tells a connection idle between
//! calls (the idle timeout) from one whose next head has begun and stalls (the header timeout), where hyper's own
//! `header_read_timeout` runs one clock for both; and the accept loop of faultd's own APIs ([`serve_api`]). Not
//! for: calls faultd holds on purpose. A hang, a delay or a slow body is never cut: hyper runs the head timer only
//! while it waits for a head, and a hung HTTP/1.1 call has left hyper for the bare socket. Nor for TCP routes, whose
//! idle connections are a database pool's normal state.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::rt::{Sleep, Timer};
use hyper::server::conn::http1 as hyper_http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How long a connection may carry no call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From the first byte of a request head (or of a TLS hello) to its end; a connection slower than this is
    /// closed. Also bounds the TLS handshake.
    pub header: Duration,
    /// How long a connection may wait for its next request without a byte of it, and how long an HTTP/2
    /// connection may have no stream waiting for its answer, before it is closed (HTTP/2: a graceful GOAWAY).
    pub idle: Duration,
}

impl Default for Timeouts {
    /// 10 s for a head, 60 s idle: far above what a live caller needs, short enough that connections a caller
    /// forgot (or a slowloris) do not pile up.
    fn default() -> Timeouts {
        Timeouts {
            header: Duration::from_secs(10),
            idle: Duration::from_secs(60),
        }
    }
}

/// Counts the reads of a connection that brought bytes, so its head timer sees when a head has begun.
#[derive(Debug, Default)]
struct Reads(AtomicU64);

impl Reads {
    fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A stream whose reads are counted for [`HeadTimer`].
pub struct Counted<I> {
    io: I,
    reads: Arc<Reads>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Counted<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.reads.0.fetch_add(1, Ordering::Relaxed);
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Counted<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The timer of one HTTP/1.1 connection. hyper asks it for one sleep each time the connection waits for a request
/// head (and for nothing else on a server connection), and drops that sleep once the head is in. The sleep
/// ignores hyper's deadline: it lasts the idle timeout while no byte of the head has come, and the header timeout
/// from the first byte.
#[derive(Clone)]
struct HeadTimer {
    reads: Arc<Reads>,
    timeouts: Timeouts,
}

impl Timer for HeadTimer {
    fn sleep(&self, _: Duration) -> Pin<Box<dyn Sleep>> {
        Box::pin(HeadSleep {
            reads: self.reads.clone(),
            seen: self.reads.count(),
            timeouts: self.timeouts,
            begun: false,
            sleep: None,
        })
    }

    fn sleep_until(&self, _: std::time::Instant) -> Pin<Box<dyn Sleep>> {
        self.sleep(Duration::ZERO)
    }
}

/// The wait for one request head; see [`HeadTimer`].
struct HeadSleep {
    reads: Arc<Reads>,
    /// The reads counted when the wait began: a later count means the head has begun.
    seen: u64,
    timeouts: Timeouts,
    begun: bool,
    /// Made at the first poll, which only happens when the head is not already in: a caller that sends its
    /// heads whole costs no timer registration.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Sleep for HeadSleep {}

impl Future for HeadSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let begun = this.reads.count() != this.seen;
        let now = tokio::time::Instant::now();
        let header_by = now + this.timeouts.header;
        let newly_begun = begun && !this.begun;
        this.begun = begun;
        let sleep = this.sleep.get_or_insert_with(|| {
            let by = if begun {
                header_by
            } else {
                now + this.timeouts.idle
            };
            Box::pin(tokio::time::sleep_until(by))
        });
        if newly_begun && header_by < sleep.deadline() {
            sleep.as_mut().reset(header_by);
        }
        sleep.as_mut().poll(cx)
    }
}

/// An HTTP/1.1 server connection builder with `timeouts`, and `io` wrapped for it: serve the connection with
/// both.
pub fn http1<I>(timeouts: Timeouts, io: I) -> (hyper_http1::Builder, TokioIo<Counted<I>>)
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let reads = Arc::new(Reads::default());
    let mut builder = hyper_http1::Builder::new();
    builder
        .timer(HeadTimer {
            reads: reads.clone(),
            timeouts,
        })
        // hyper's deadline is ignored by `HeadTimer`, but the timeout must be set for hyper to ask for one.
        .header_read_timeout(timeouts.header);
    (builder, TokioIo::new(Counted { io, reads }))
}

/// Serves `router` over HTTP/1.1 on `listener` with `timeouts` until `shutdown` turns true; then stops accepting
/// and drops the open connections. For the control and Toxiproxy APIs, whose calls are short: an axum server has
/// no header timeout of its own.
pub async fn serve_api(
    listener: TcpListener,
    router: axum::Router,
    timeouts: Timeouts,
    mut shutdown: watch::Receiver<bool>,
) {
    while let Some(tcp) = crate::sockets::next_connection(&listener, &mut shutdown).await {
        let _ = tcp.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let (builder, io) = http1(timeouts, tcp);
            tokio::select! {
                _ = builder.serve_connection(io, service) => {}
                _ = shutdown.changed() => {}
            }
        });
    }
}
