//! The bodies of the data plane's answers: whole and plain answers, the body that holds a call's guard until its
//! last byte is sent, so a call counts as in flight until then and as completed only if it is, and the body cut
//! halfway (`truncated`).
//!
//! Not for: what an answer holds (`actions`) or trickled bodies (`crate::behaviours::TrickleBody`).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{Response, StatusCode};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, SizeHint};

use crate::behaviours::{BodyError, DataBody};
use crate::recorder::{CallGuard, Outcome};

/// A body of `bytes`, boxed as every answer's body is.
pub(super) fn full(bytes: Bytes) -> DataBody {
    whole(bytes).boxed_unsync()
}

/// A body of `bytes` in one frame, with the data plane's error type.
pub(super) fn whole(
    bytes: Bytes,
) -> impl Body<Data = Bytes, Error = BodyError> + Send + Unpin + 'static {
    Full::new(bytes).map_err(|never| match never {})
}

/// An answer with `status` and a body of `body`.
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
    let ends_as = Outcome::Completed(response.status().as_u16());
    guarded_as(response, guard, ends_as)
}

/// As [`guarded`], recording the call as `ends_as` when its last frame is handed on.
pub(super) fn guarded_as<B>(
    response: Response<B>,
    guard: CallGuard,
    ends_as: Outcome,
) -> Response<DataBody>
where
    B: Body<Data = Bytes, Error = BodyError> + Send + Unpin + 'static,
{
    response.map(|inner| {
        GuardedBody {
            inner,
            guard: Some(guard),
            ends_as,
        }
        .boxed_unsync()
    })
}

/// A body that records its call when its last frame is handed on (see [`guarded`]).
pub(super) struct GuardedBody<B: Body> {
    inner: B,
    guard: Option<CallGuard>,
    ends_as: Outcome,
}

impl<B: Body> GuardedBody<B> {
    fn complete(&mut self) {
        if let Some(mut guard) = self.guard.take() {
            guard.set_outcome(self.ends_as);
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

/// A body that announces its whole length and ends halfway through it (`truncated`): hyper then closes the
/// HTTP/1.1 connection short of the announced length, and ends the HTTP/2 stream short of it, which a client must
/// take as a malformed answer. A body of unknown length ends halfway through its first frame; an empty one
/// announces one byte and sends none.
pub(super) struct Cut<B> {
    inner: B,
    /// The bytes to send, once known.
    keep: Option<u64>,
    sent: u64,
    /// Whether the connection has had a turn to write what was sent: on HTTP/1.1 hyper drops what it still holds
    /// when a body ends short, so the end waits one poll after the last bytes.
    flushed: bool,
}

impl<B: Body> Cut<B> {
    pub(super) fn new(inner: B) -> Cut<B> {
        let keep = inner.size_hint().exact().map(|n| n / 2);
        Cut {
            inner,
            keep,
            sent: 0,
            flushed: false,
        }
    }

    fn ended(&self) -> bool {
        self.keep.is_some_and(|k| self.sent >= k)
    }
}

impl<B: Body<Data = Bytes, Error = BodyError> + Unpin> Body for Cut<B> {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if self.ended() {
            if self.sent > 0 && !self.flushed {
                self.flushed = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(mut data) => {
                    let keep = *self.keep.get_or_insert(data.len() as u64 / 2);
                    data.truncate(keep.saturating_sub(self.sent) as usize);
                    self.sent += data.len() as u64;
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                // Trailers mark an answer complete: a cut one ends before them.
                Err(_) => Poll::Ready(None),
            },
            other => other,
        }
    }

    /// Never said ahead: an HTTP/2 stream whose last frame is marked as such short of its announced length is
    /// reset at once, its queued frames (the head included) dropped; the end comes as a frame of its own.
    fn is_end_stream(&self) -> bool {
        false
    }

    fn size_hint(&self) -> SizeHint {
        match self.inner.size_hint().exact() {
            Some(n) => SizeHint::with_exact(n.max(1)),
            None => self.inner.size_hint(),
        }
    }
}
