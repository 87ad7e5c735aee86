//! What each decision does to a call: one function per [`CallAction`], each ending the call its own way (an
//! answer, a status in the trailers, a reset of the stream, or the socket taken back from hyper), plus the gRPC
//! answers a call gets before its decision applies (a message that cannot be read, a caller's deadline passed).
//!
//! Not for: the order of a call's steps (`call`) or the bodies themselves (`body`).
//!
//! [`CallAction`]: crate::behaviours::CallAction

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use bytes::Bytes;
use faultline_units::GrpcCode;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};

use super::body::{full, guarded, guarded_as, plain, whole, Cut};
use super::grpc::{self, BadMessage, GrpcCall};
use super::shared::Shared;
use super::takeover::{Held, ResetStream, Takeover, TakeoverRequest};
use crate::behaviours::proxy::Proxy;
use crate::behaviours::{
    header_map, BodyError, CompiledBehaviour, DataBody, ErrorResponse, GrpcError, GrpcResponse,
    H2Code, TrickleBody,
};
use crate::recorder::{CallGuard, Outcome};

/// `Hang`: never answer. On HTTP/2 the stream alone is held (the connection carries other calls): hyper drops
/// the stream's future (and the guard, recording the hang) when the caller resets the stream or closes the
/// connection. On HTTP/1.1 the guard moves to the connection, which drops hyper (and this future) and holds the
/// bare socket until the caller closes it; the guard is dropped then, recording the hang.
pub(super) async fn hang<T>(
    mut guard: CallGuard,
    h2: bool,
    takeover: &TakeoverRequest,
) -> Result<T, Held> {
    guard.set_outcome(Outcome::Hang);
    if h2 {
        return Err(Held(guard));
    }
    takeover.request(Takeover::Hang(guard));
    std::future::pending().await
}

/// `Reset`, `Empty` and `Malformed` (and `RstStream` on HTTP/1.1): the connection drops hyper and acts on the
/// bare socket; this call's future, and its guard with the outcome set here, go with hyper.
pub(super) async fn take_socket<T>(
    action: Takeover,
    outcome: Outcome,
    mut guard: CallGuard,
    takeover: &TakeoverRequest,
) -> T {
    guard.set_outcome(outcome);
    takeover.request(action);
    let _guard = guard;
    std::future::pending().await
}

/// `RstStream` on HTTP/2: the service around the call resets the stream with `code` instead of answering.
pub(super) fn rst_stream(code: H2Code, mut guard: CallGuard) -> Response<DataBody> {
    guard.set_outcome(Outcome::Reset);
    let mut response = plain(StatusCode::OK, "");
    response.extensions_mut().insert(ResetStream(code));
    response
}

/// `GrpcError`: the status in the trailers, after the healthy answer's first messages when the error breaks a
/// stream partway; a call that is not gRPC gets the HTTP status gRPC maps the code to.
pub(super) fn grpc_error(
    e: &GrpcError,
    grpc: Option<GrpcCall>,
    grpc_response: Option<&GrpcResponse>,
    mut guard: CallGuard,
) -> Response<DataBody> {
    let metadata = header_map(&e.metadata).unwrap_or_default();
    if grpc.is_none() {
        let mut response = plain(
            grpc::http_status_of(e.code),
            e.message.clone().unwrap_or_default(),
        );
        response.headers_mut().extend(metadata);
        return guarded(response, guard);
    }
    guard.set_grpc_status(e.code);
    let mut trailers = grpc::trailers(e.code, e.message.as_deref(), &metadata);
    if let Some(v) = e
        .status_details()
        .and_then(|d| HeaderValue::from_str(d).ok())
    {
        trailers.insert(HeaderName::from_static("grpc-status-details-bin"), v);
    }
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

/// `Error`: the configured status, headers and body.
pub(super) fn error(e: &ErrorResponse, guard: CallGuard) -> Response<DataBody> {
    let mut response = Response::new(Full::new(Bytes::from(e.body.clone().unwrap_or_default())));
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

/// `FailFirst`: one of the first calls of its phase, failed with `status`.
pub(super) fn fail_first(status: u16, guard: CallGuard) -> Response<DataBody> {
    let mut response = plain(
        StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
        "",
    );
    *response.body_mut() = full(Bytes::from_static(b"faultd: fail_first\n"));
    guarded(response, guard)
}

/// What a healthy call keeps of its request for its answer.
pub(super) struct Healthy {
    /// The call's gRPC head, when it is a gRPC call.
    pub(super) grpc: Option<GrpcCall>,
    /// The request's first message, when the gRPC answer echoes it.
    pub(super) echoed: Option<Bytes>,
    /// The whole request, when the call is proxied.
    pub(super) request: Option<Request<Incoming>>,
    /// The request's header map, emptied, to hold the answer's headers (see `call::split`).
    pub(super) spare_headers: Option<HeaderMap>,
    /// The answer is cut halfway through its body (`Truncated`).
    pub(super) cut: bool,
}

/// `Healthy`: the configured gRPC answer (an echo, a message, a stream of them), the upstream's answer in proxy
/// mode, or the healthy response, whole or trickled. `Truncated` is the same answer with `call.cut`.
pub(super) async fn healthy(
    shared: &Shared,
    behaviour: &CompiledBehaviour,
    call: Healthy,
    guard: CallGuard,
) -> Response<DataBody> {
    if call.grpc.is_some() && behaviour.behaviour.proxy.is_none() {
        return grpc_ok(
            behaviour.behaviour.grpc_response.as_ref(),
            call.echoed,
            guard,
            call.cut,
        );
    }
    if let (Some(upstream), Some(request)) = (&behaviour.behaviour.proxy, call.request) {
        return finish(forwarded(shared, upstream, request).await, guard, call.cut);
    }
    let healthy = &behaviour.healthy;
    let headers = match call.spare_headers {
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
        Some(slow) => finish(
            head.map(|()| TrickleBody::new(healthy.body.clone(), slow.rate).boxed()),
            guard,
            call.cut,
        ),
        None => finish(head.map(|()| whole(healthy.body.clone())), guard, call.cut),
    }
}

/// Hands the call's guard to the answer's body; a cut answer (`Truncated`) ends halfway through its body, and the
/// call is recorded as truncated when it has.
fn finish<B>(response: Response<B>, guard: CallGuard, cut: bool) -> Response<DataBody>
where
    B: Body<Data = Bytes, Error = BodyError> + Send + Unpin + 'static,
{
    if cut {
        return guarded_as(response.map(Cut::new), guard, Outcome::Truncated);
    }
    guarded(response, guard)
}

/// A healthy gRPC call: status OK after the echoed or configured message, streamed as configured.
fn grpc_ok(
    grpc_response: Option<&GrpcResponse>,
    echoed: Option<Bytes>,
    mut guard: CallGuard,
    cut: bool,
) -> Response<DataBody> {
    guard.set_grpc_status(GrpcCode::OK);
    let message = echoed
        .or_else(|| grpc_response.map(|r| r.message()))
        .unwrap_or_default();
    let (metadata, trailing) = grpc_response
        .map(|r| (r.metadata(), r.trailers()))
        .unwrap_or_default();
    let trailers = grpc::trailers(GrpcCode::OK, None, &trailing);
    let (count, interval) = grpc_response.map_or((1, Duration::ZERO), |r| r.stream());
    let response = grpc::answer_stream(&metadata, grpc::frame(&message), count, interval, trailers);
    finish(response.map(BodyExt::boxed_unsync), guard, cut)
}

/// A request message a gRPC server could not read: refused at once with the status such a server gives it.
pub(super) fn grpc_unreadable(bad: BadMessage, mut guard: CallGuard) -> Response<DataBody> {
    guard.set_grpc_status(bad.code);
    let trailers = grpc::trailers(bad.code, Some(&bad.message), &Default::default());
    let response = grpc::answer(&Default::default(), None, trailers);
    guarded(response.map(BodyExt::boxed_unsync), guard)
}

/// A gRPC caller's deadline passed before the answer was due: DEADLINE_EXCEEDED, as a gRPC server ends it.
pub(super) fn grpc_deadline_exceeded(mut guard: CallGuard) -> Response<DataBody> {
    guard.set_grpc_status(GrpcCode::DEADLINE_EXCEEDED);
    let trailers = grpc::trailers(
        GrpcCode::DEADLINE_EXCEEDED,
        Some("deadline exceeded"),
        &Default::default(),
    );
    let response = grpc::answer(&Default::default(), None, trailers);
    guarded(response.map(BodyExt::boxed_unsync), guard)
}

/// `request` forwarded to `upstream`: the upstream's answer, 502 with the reason, or 508 at a loop (counted). A
/// route's `proxy` and the configuration's `unmatched.proxy` both forward through here.
pub(super) async fn forwarded(
    shared: &Shared,
    upstream: &Proxy,
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
