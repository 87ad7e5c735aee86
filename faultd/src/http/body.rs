//! The bodies of the data plane's answers: whole and plain answers, and the body that holds a call's guard until
//! its last byte is sent, so a call counts as in flight until then and as completed only if it is.
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

/// A body that records its call when its last frame is handed on (see [`guarded`]).
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
