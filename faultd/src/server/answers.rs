//! The data plane's answers and sockets: bodies that hold a call's guard until they are sent, whole and plain
//! answers, and the stream wrappers that let a connection be taken back from hyper (a reset, an abrupt GOAWAY).

use super::*;

pub(super) fn full(bytes: Bytes) -> DataBody {
    whole(bytes).boxed_unsync()
}

/// A body of `bytes` in one frame, with the data plane's error type.
pub(super) fn whole(
    bytes: Bytes,
) -> impl Body<Data = Bytes, Error = BodyError> + Send + Unpin + 'static {
    Full::new(bytes).map_err(|never| match never {})
}

pub(super) fn plain(status: StatusCode, body: impl Into<Bytes>) -> Response<DataBody> {
    let mut response = Response::new(full(body.into()));
    *response.status_mut() = status;
    response
}

/// Moves the call's guard into the response body, so the call counts as in flight until its last byte is handed
/// to the socket, and as completed only if that happens.
pub(super) fn guarded<B>(response: Response<B>, guard: CallGuard) -> Response<DataBody>
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

pub(super) struct GuardedBody<B: Body> {
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
