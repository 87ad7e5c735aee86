//! The streams hyper serves while the connection task keeps a handle to the same socket, so that a call can ask
//! for the socket back mid-request (a reset, a close without an answer, garbage, a hang held on the bare socket)
//! and an abrupt GOAWAY can be written inside TLS once hyper has let go.
//!
//! Not for: deciding when to take the socket back (`takeover`, `listener`).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A stream (TLS's) that hyper's HTTP/2 reads and writes while the connection task keeps a handle to it, so an
/// abrupt GOAWAY can be written inside TLS once hyper has let go. hyper polls it from its connection's task
/// alone, so the lock is never contended.
pub(super) struct LockedStream<S>(pub(super) Arc<Mutex<S>>);

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
pub(super) struct SharedStream(pub(super) Arc<TcpStream>);

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
