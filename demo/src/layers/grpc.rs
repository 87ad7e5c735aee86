//! The innermost service over gRPC: one unary call to the dependency on a shared HTTP/2 connection, with h2's
//! client, its `grpc-status` read from the trailers and turned into the words the layers above already speak.
//!
//! What a status becomes, so that the breaker judges gRPC as it judges HTTP (seed 000's 4xx rule, in gRPC's
//! words): OK is a 200 [`Reply`]; the caller's codes (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//! PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE) are a [`Reply`] with the 4xx a gateway
//! maps them to, which the breaker does not count (unless the `count_4xx` mistake is on, which then counts every
//! non-OK status); every other code (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL, ...) is a
//! [`CallError::Grpc`], a failure. A reset stream or a lost connection is a [`CallError::Transport`].
//!
//! The connection is a channel's: one HTTP/2 connection shared by every operation and instance, opened on the
//! first call and replaced when it ends (a GOAWAY, a reset, the dependency going away). A call that could not
//! open its stream because the connection had just gone away is sent once more on a new one (gRPC's transparent
//! retry: the dependency never saw it); a call whose stream was open is lost with its connection. Not a limit:
//! the bulkhead bounds the calls in flight; a stream past the dependency's SETTINGS_MAX_CONCURRENT_STREAMS waits
//! inside h2 for a free one, and the timeout layer bounds that wait.
//!
//! Each call carries `grpc-timeout` set to the attempt's deadline (the operation's timeout, or the caller's
//! remaining budget when that is shorter), so a dependency that honours deadlines ends the call with
//! DEADLINE_EXCEEDED when the demo stops waiting for it; none with the `no_deadline_propagation` mistake. It
//! carries the caller's trace id in a `traceparent` of its own, as every call does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::header::{CONTENT_TYPE, TE};
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use bytes::{BufMut, Bytes, BytesMut};
use faultline_units::GrpcCode;
use tokio::net::TcpStream;
use tokio::sync::{watch, Mutex};
use tower::Service;

use super::{CallError, DepRequest, Reply};
use crate::operation::Operation;

/// The gRPC method each operation calls: one service per dependency, so a scenario can fault a whole service
/// (`/demo.Accounts/*`) or one method.
pub fn method(op: Operation) -> &'static str {
    match op {
        Operation::Pricing => "/demo.Pricing/GetPrice",
        Operation::Reviews => "/demo.Reviews/ListReviews",
        Operation::Payments => "/demo.Payments/Charge",
        Operation::Report => "/demo.Reports/GetReport",
        Operation::AccountRead => "/demo.Accounts/GetAccount",
        Operation::AccountWrite => "/demo.Accounts/UpdateAccount",
        // Never called over gRPC: the cart uses Redis and an order is a PostgreSQL transaction whatever the
        // protocol; named for completeness.
        Operation::Cart => "/demo.Carts/GetCart",
        Operation::CartWrite => "/demo.Carts/AddItem",
        Operation::Order => "/demo.Orders/PlaceOrder",
    }
}

/// The request message, protobuf-encoded without a `.proto`: `string id = 1; bytes body = 2;` (absent fields
/// left out, as protobuf writes defaults), framed with gRPC's 5-byte prefix (not compressed, big-endian length).
pub fn request_frame(id: &str, body: &[u8]) -> Bytes {
    let mut message = BytesMut::new();
    for (tag, field) in [(0x0a_u8, id.as_bytes()), (0x12, body)] {
        if !field.is_empty() {
            message.put_u8(tag);
            put_varint(&mut message, field.len() as u64);
            message.put_slice(field);
        }
    }
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.put_u8(0);
    frame.put_u32(message.len() as u32);
    frame.put_slice(&message);
    frame.freeze()
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// The first message of a response body (what follows the 5-byte prefix); `None` if the body is not a whole
/// gRPC frame or is compressed (the demo asks for no compression).
pub fn response_message(body: &[u8]) -> Option<Bytes> {
    let (&flag, rest) = body.split_first()?;
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    if flag != 0 {
        return None;
    }
    rest.get(4..4 + len).map(Bytes::copy_from_slice)
}

/// `grpc-timeout` for `d`: whole milliseconds (rounded up, at least 1), or seconds when the number would not
/// fit the header's eight digits.
pub fn grpc_timeout(d: Duration) -> HeaderValue {
    let ms = d.as_nanos().div_ceil(1_000_000).max(1);
    if ms < 100_000_000 {
        HeaderValue::from_str(&format!("{ms}m")).unwrap_or(HeaderValue::from_static("1m"))
    } else {
        HeaderValue::from_static("99999999S")
    }
}

/// What a finished call's status is to the layers above (see the module's first lines).
pub fn classify(code: GrpcCode, message: Bytes) -> Result<Reply, CallError> {
    if code == GrpcCode::OK {
        return Ok(Reply {
            status: StatusCode::OK,
            body: message,
            content_type: Some(HeaderValue::from_static("application/x-protobuf")),
        });
    }
    let status = match code {
        GrpcCode::INVALID_ARGUMENT | GrpcCode::FAILED_PRECONDITION | GrpcCode::OUT_OF_RANGE => {
            StatusCode::BAD_REQUEST
        }
        GrpcCode::NOT_FOUND => StatusCode::NOT_FOUND,
        GrpcCode::ALREADY_EXISTS => StatusCode::CONFLICT,
        GrpcCode::PERMISSION_DENIED => StatusCode::FORBIDDEN,
        GrpcCode::UNAUTHENTICATED => StatusCode::UNAUTHORIZED,
        other => return Err(CallError::Grpc(other)),
    };
    Ok(Reply {
        status,
        body: message,
        content_type: Some(HeaderValue::from_static("text/plain; charset=utf-8")),
    })
}

/// One live HTTP/2 connection and a flag its driver task raises when it ends.
#[derive(Clone)]
struct Live {
    send: h2::client::SendRequest<Bytes>,
    ended: watch::Receiver<bool>,
}

impl Live {
    fn is_ended(&self) -> bool {
        *self.ended.borrow()
    }
}

/// The shared connection to the dependency: opened on demand, replaced once it has ended.
#[derive(Clone)]
pub struct GrpcChannel {
    authority: String,
    live: Arc<Mutex<Option<Live>>>,
}

impl GrpcChannel {
    /// A channel to `authority` (`127.0.0.1:9000`); nothing is opened until the first call.
    pub fn new(authority: &str) -> Self {
        GrpcChannel {
            authority: authority.to_string(),
            live: Arc::default(),
        }
    }

    /// The live connection, opening one if there is none or the last has ended (or is `stale`, the one a call
    /// just failed to open a stream on). Calls that arrive while one is being opened wait for it and share it.
    async fn connection(&self, stale: Option<&Live>) -> Result<Live, CallError> {
        let mut slot = self.live.lock().await;
        if let Some(live) = slot.as_ref() {
            let is_stale = stale.is_some_and(|s| s.ended.same_channel(&live.ended));
            if !live.is_ended() && !is_stale {
                return Ok(live.clone());
            }
        }
        *slot = None;
        let tcp = TcpStream::connect(self.authority.as_str())
            .await
            .map_err(|e| CallError::Transport(format!("connect to {}: {e}", self.authority)))?;
        let _ = tcp.set_nodelay(true);
        let (send, connection) = h2::client::handshake(tcp)
            .await
            .map_err(|e| CallError::Transport(format!("HTTP/2 handshake: {e}")))?;
        let (ended_tx, ended) = watch::channel(false);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(target: "demo", error = %e, "gRPC connection ended");
            }
            let _ = ended_tx.send(true);
        });
        let live = Live { send, ended };
        *slot = Some(live.clone());
        Ok(live)
    }

    /// Opens a stream for `request`, on a new connection if the current one refuses new streams (gone away).
    async fn open(
        &self,
        request: Request<()>,
    ) -> Result<(h2::client::ResponseFuture, h2::SendStream<Bytes>), CallError> {
        let mut stale = None;
        for _ in 0..2 {
            let live = self.connection(stale.as_ref()).await?;
            let ready = live.send.clone().ready().await;
            let opened = ready.and_then(|mut send| send.send_request(request.clone(), false));
            match opened {
                Ok(stream) => return Ok(stream),
                Err(e) => {
                    tracing::debug!(target: "demo", error = %e, "no stream on the gRPC connection; reconnecting");
                    stale = Some(live);
                }
            }
        }
        Err(CallError::Transport(
            "the dependency refused new streams on two connections in a row".into(),
        ))
    }
}

/// Sends [`DepRequest`]s for one operation as unary gRPC calls on a [`GrpcChannel`].
#[derive(Clone)]
pub struct GrpcClient {
    channel: GrpcChannel,
    method: &'static str,
}

impl GrpcClient {
    /// Calls `op`'s method; each call's deadline is the one the timeout layer set for the attempt (none with the
    /// `no_timeout` mistake).
    pub fn new(channel: GrpcChannel, op: Operation) -> Self {
        GrpcClient {
            channel,
            method: method(op),
        }
    }

    fn request(&self, req: &DepRequest) -> Result<Request<()>, CallError> {
        let uri = format!("http://{}{}", self.channel.authority, self.method);
        let mut builder = Request::post(uri)
            .header(CONTENT_TYPE, "application/grpc")
            .header(TE, "trailers");
        if let Some(budget) = req.context.call_budget(tokio::time::Instant::now()) {
            builder = builder.header("grpc-timeout", grpc_timeout(budget));
        }
        if let Some(parent) = req.context.child_traceparent() {
            builder = builder.header(crate::context::TRACEPARENT, parent);
        }
        if let Some(key) = &req.idempotency_key {
            builder = builder.header("idempotency-key", key.as_str());
        }
        builder
            .body(())
            .map_err(|e| CallError::Transport(format!("cannot build the gRPC request: {e}")))
    }
}

impl Service<DepRequest> for GrpcClient {
    type Response = Reply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, CallError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: DepRequest) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let request = this.request(&req)?;
            let frame = request_frame(&req.key, &req.body);
            let (response, mut body_tx) = this.channel.open(request).await?;
            // The dependency may answer (or reset) before it reads the message; its answer is what counts.
            let _ = body_tx.send_data(frame, true);
            let lost = |e: h2::Error| CallError::Transport(format!("gRPC stream lost: {e}"));
            let response = response.await.map_err(lost)?;
            let (parts, mut body) = response.into_parts();
            if parts.status != StatusCode::OK {
                return Err(CallError::Grpc(GrpcCode::from_http_status(
                    parts.status.as_u16(),
                )));
            }
            let mut data = BytesMut::new();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.map_err(lost)?;
                let _ = body.flow_control().release_capacity(chunk.len());
                data.extend_from_slice(&chunk);
            }
            let trailers = body.trailers().await.map_err(lost)?.unwrap_or_default();
            let (code, text) = status_of(&trailers, &parts.headers);
            let message = if code == GrpcCode::OK {
                response_message(&data).unwrap_or_default()
            } else {
                text
            };
            classify(code, message)
        })
    }
}

/// The status and its message, from the trailers or (a status-only answer) the headers. An answer with no
/// status is an error of the server's, which gRPC clients read as INTERNAL.
fn status_of(trailers: &HeaderMap, headers: &HeaderMap) -> (GrpcCode, Bytes) {
    let from = if trailers.contains_key("grpc-status") {
        trailers
    } else {
        headers
    };
    let code = from
        .get("grpc-status")
        .map_or(GrpcCode::INTERNAL, |v| GrpcCode::from_wire(v.as_bytes()));
    let text = from
        .get("grpc-message")
        .map(|m| Bytes::copy_from_slice(m.as_bytes()))
        .unwrap_or_default();
    (code, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_message_is_the_id_and_body_as_protobuf_fields_in_a_grpc_frame() {
        let frame = request_frame("42", b"");
        assert_eq!(&frame[..], &[0, 0, 0, 0, 4, 0x0a, 2, b'4', b'2']);
        let frame = request_frame("", b"{}");
        assert_eq!(&frame[..], &[0, 0, 0, 0, 4, 0x12, 2, b'{', b'}']);
        let long = "x".repeat(300);
        let frame = request_frame(&long, b"");
        assert_eq!(&frame[5..8], &[0x0a, 0xac, 0x02], "300 as a varint");
        assert_eq!(frame.len(), 5 + 3 + 300);
    }

    #[test]
    fn a_response_message_is_read_from_its_frame_and_a_broken_frame_is_refused() {
        assert_eq!(
            response_message(&[0, 0, 0, 0, 2, 0x08, 0x01, 0xff]).as_deref(),
            Some(&[0x08, 0x01][..])
        );
        assert_eq!(response_message(&[0, 0, 0, 0, 5, 1]), None, "truncated");
        assert_eq!(response_message(&[1, 0, 0, 0, 0]), None, "compressed");
        assert_eq!(response_message(&[]), None);
    }

    #[test]
    fn deadlines_are_whole_milliseconds_rounded_up() {
        assert_eq!(grpc_timeout(Duration::from_millis(250)), "250m");
        assert_eq!(grpc_timeout(Duration::from_micros(1_500)), "2m");
        assert_eq!(grpc_timeout(Duration::ZERO), "1m");
        assert_eq!(grpc_timeout(Duration::from_secs(1_000_000)), "99999999S");
    }

    #[test]
    fn the_caller_codes_are_client_error_replies_and_the_rest_are_failures() {
        for code in GrpcCode::all() {
            let result = classify(code, Bytes::new());
            match result {
                Ok(reply) if code == GrpcCode::OK => assert_eq!(reply.status, StatusCode::OK),
                Ok(reply) => {
                    assert!(code.is_client_error(), "{code}");
                    assert!(reply.status.is_client_error(), "{code}");
                }
                Err(e) => {
                    assert!(!code.is_client_error() && code != GrpcCode::OK, "{code}");
                    assert_eq!(e, CallError::Grpc(code));
                }
            }
        }
        for code in [
            GrpcCode::UNAVAILABLE,
            GrpcCode::DEADLINE_EXCEEDED,
            GrpcCode::RESOURCE_EXHAUSTED,
        ] {
            assert!(classify(code, Bytes::new()).is_err(), "{code} is a failure");
        }
    }

    #[test]
    fn the_status_comes_from_the_trailers_or_a_status_only_answer() {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from_static("14"));
        t.insert("grpc-message", HeaderValue::from_static("overloaded"));
        assert_eq!(
            status_of(&t, &HeaderMap::new()),
            (GrpcCode::UNAVAILABLE, Bytes::from_static(b"overloaded"))
        );
        let mut h = HeaderMap::new();
        h.insert("grpc-status", HeaderValue::from_static("3"));
        assert_eq!(
            status_of(&HeaderMap::new(), &h).0,
            GrpcCode::INVALID_ARGUMENT
        );
        assert_eq!(
            status_of(&HeaderMap::new(), &HeaderMap::new()).0,
            GrpcCode::INTERNAL
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_carries_the_callers_trace_id_and_the_attempts_remaining_deadline() {
        let client = GrpcClient::new(GrpcChannel::new("127.0.0.1:9"), Operation::Pricing);
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let now = tokio::time::Instant::now();
        let mut req = DepRequest {
            method: axum::http::Method::GET,
            path: "/price/1".into(),
            body: Bytes::new(),
            key: "1".into(),
            idempotency_key: None,
            context: crate::context::CallContext {
                trace: crate::context::TraceParent::parse(parent),
                deadline: Some(now + Duration::from_millis(400)),
                attempt_deadline: Some(now + Duration::from_millis(120)),
                send_deadline: true,
            },
        };
        let sent = client.request(&req).unwrap();
        assert_eq!(sent.headers()["grpc-timeout"], "120m");
        let child = sent.headers()["traceparent"].to_str().unwrap();
        assert_eq!(&child[..36], &parent[..36], "same version and trace id");
        assert_ne!(&child[36..52], &parent[36..52], "a span id of its own");
        req.context.send_deadline = false;
        let sent = client.request(&req).unwrap();
        assert!(
            !sent.headers().contains_key("grpc-timeout"),
            "no deadline with no_deadline_propagation"
        );
    }
}
