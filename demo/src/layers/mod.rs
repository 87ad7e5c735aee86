//! The resilience layers around each dependency call, as tower layers (linkerd2-proxy's shape): each does one
//! thing, is tested alone against a mock service, and the stack is composed in one place ([`stack`]).
//!
//! Outermost first: fallback -> breaker -> retry (with budget) -> hedge -> bulkhead -> timeout -> client (HTTP,
//! gRPC, or Redis or PostgreSQL through a connection pool; over several endpoints of one dependency, the `balance` layer in
//! front of one HTTP client per endpoint). The breaker wraps the retries (seed 004: "circuit breaker wraps retry
//! logic, not vice versa"), so one user call is one breaker outcome however many attempts it took; every attempt
//! takes a bulkhead slot and has its own timeout, because every attempt holds a connection (or a stream) to the
//! dependency. A hedge is an attempt too: the hedge layer sits under the retries, so each retry may be hedged and
//! each hedge takes its own slot and timeout.
//!
//! Not for HTTP routing or page assembly (that is `service`), and not for the breaker's decisions (that is
//! `breaker`, pure logic): the breaker layer only asks and reports.

pub mod balance;
pub mod breaker;
pub mod bulkhead;
pub mod client;
pub mod fallback;
pub mod grpc;
pub mod hedge;
pub mod postgres;
pub mod redis;
pub mod resolve;
pub mod retry;
pub mod timeout;

use std::convert::Infallible;
use std::time::Duration;

use axum::http::{HeaderValue, Method, StatusCode};
use bytes::Bytes;
use tower::util::BoxCloneSyncService;

/// One call to make to the dependency.
#[derive(Debug, Clone)]
pub struct DepRequest {
    /// HTTP method.
    pub method: Method,
    /// Path and query on the dependency, e.g. `/price/42`.
    pub path: String,
    /// The body.
    pub body: Bytes,
    /// The item the answer is about (the stale cache's key); empty for calls without an item.
    pub key: String,
    /// Sent as `Idempotency-Key` on every attempt, so a retried write can be de-duplicated by the dependency
    /// (seed 000: at-least-once delivery produces duplicates).
    pub idempotency_key: Option<String>,
    /// The caller's trace context and deadline, passed on to the dependency.
    pub context: crate::context::CallContext,
}

/// What the dependency answered (2xx to 4xx: a 5xx is a [`CallError::Status`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body.
    pub body: Bytes,
    /// The Content-Type, if any.
    pub content_type: Option<HeaderValue>,
}

/// Why a call produced no usable reply.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The attempt took longer than the operation's timeout.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The connection failed (refused, reset, closed without a response, malformed answer).
    #[error("transport error: {0}")]
    Transport(String),
    /// The TLS handshake of a new connection failed (an expired or untrusted certificate, a fatal alert): no
    /// request was sent.
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
    /// The dependency answered 5xx.
    #[error("dependency answered {0}")]
    Status(StatusCode),
    /// The call was not carried out and may be sent again after a pause: Redis answered that it is still loading
    /// its dataset (`-LOADING`), or no connection could be opened, so the command never left.
    #[error("not carried out: {0}")]
    NotApplied(String),
    /// The dependency refused the call with an error reply that a retry soon would meet again (Redis's `-OOM`
    /// when full, `-READONLY` on a replica, `-WRONGTYPE`): nothing was done.
    #[error("refused: {0}")]
    Refused(String),
    /// The dependency answered a gRPC call with a status other than OK and the caller's codes.
    #[error("dependency answered gRPC {0}")]
    Grpc(faultline_units::GrpcCode),
    /// The database ended the call with an error of its own (its SQLSTATE and message), after the client ran
    /// again what the database asked to be run again (see `postgres`): another attempt would repeat it.
    #[error("database error {0}")]
    Database(String),
    /// The bulkhead had no free slot; the dependency was not called.
    #[error("bulkhead full")]
    BulkheadFull,
    /// The breaker refused the call (open, or half-open with every probe slot taken).
    #[error("breaker {}", .0.label())]
    Rejected(crate::breaker::BreakerState),
}

impl CallError {
    /// Whether another attempt may help: timeouts, transport errors (a failed handshake among them), 5xx,
    /// failing gRPC statuses and calls not carried out. Not a full bulkhead (more calls would only add to the
    /// load), not a breaker refusal, not a refusal that would be met again, and not a database's error (its
    /// client already ran again what the database asked to run again).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            CallError::Timeout(_)
                | CallError::Transport(_)
                | CallError::Handshake(_)
                | CallError::Status(_)
                | CallError::Grpc(_)
                | CallError::NotApplied(_)
        )
    }

    /// The `reason` label of `circuit_breaker_fallback_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            CallError::Timeout(_) => "timeout",
            CallError::Transport(_) => "transport_error",
            CallError::Handshake(_) => "handshake_failed",
            CallError::Status(_) => "server_error",
            CallError::Grpc(code) if *code == faultline_units::GrpcCode::DEADLINE_EXCEEDED => {
                "timeout"
            }
            CallError::Grpc(_) | CallError::Database(_) => "server_error",
            CallError::NotApplied(_) => "not_applied",
            CallError::Refused(_) => "refused",
            CallError::BulkheadFull => "bulkhead_full",
            CallError::Rejected(_) => "breaker_open",
        }
    }
}

/// Which fallback an answer is, as written in the `X-Fallback` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FallbackKind {
    /// The last good answer.
    Stale,
    /// An empty answer of the right shape.
    Default,
    /// 503 with Retry-After.
    Unavailable,
}

impl FallbackKind {
    /// `stale`, `default` or `unavailable`.
    pub fn label(self) -> &'static str {
        match self {
            FallbackKind::Stale => "stale",
            FallbackKind::Default => "default",
            FallbackKind::Unavailable => "unavailable",
        }
    }
}

/// What the service uses to answer its caller: the dependency's reply, or a fallback.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body.
    pub body: Bytes,
    /// The Content-Type, if any.
    pub content_type: Option<HeaderValue>,
    /// Set when this is a fallback rather than the dependency's answer.
    pub fallback: Option<FallbackKind>,
    /// For 503 answers: how long the caller should wait (the `Retry-After` header).
    pub retry_after: Option<Duration>,
}

/// The composed stack of one operation on one instance.
pub type OperationStack = BoxCloneSyncService<DepRequest, Answer, Infallible>;

/// Composes the layers for one operation, outermost first.
pub fn stack<C>(
    client: C,
    timeout: timeout::TimeoutLayer,
    bulkhead: bulkhead::BulkheadLayer,
    retry: retry::RetryLayer,
    hedge: hedge::HedgeLayer,
    breaker: breaker::BreakerLayer,
    fallback: fallback::FallbackLayer,
) -> OperationStack
where
    C: tower::Service<DepRequest, Response = Reply, Error = CallError>
        + Clone
        + Send
        + Sync
        + 'static,
    C::Future: Send + 'static,
{
    let service = tower::ServiceBuilder::new()
        .layer(fallback)
        .layer(breaker)
        .layer(retry)
        .layer(hedge)
        .layer(bulkhead)
        .layer(timeout)
        .service(client);
    BoxCloneSyncService::new(service)
}

#[cfg(test)]
pub(crate) mod mock {
    //! A scripted dependency for the layer tests: answers each call after a delay with a chosen result, and
    //! counts calls and the most in flight at once.

    use super::*;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    /// One scripted answer.
    pub type Script = Arc<dyn Fn(usize) -> (Duration, Result<Reply, CallError>) + Send + Sync>;

    #[derive(Clone)]
    pub struct Dependency {
        pub script: Script,
        pub calls: Arc<AtomicUsize>,
        pub in_flight: Arc<AtomicUsize>,
        pub max_in_flight: Arc<AtomicUsize>,
        pub seen: Arc<Mutex<Vec<DepRequest>>>,
    }

    pub fn ok(body: &'static str) -> Result<Reply, CallError> {
        Ok(Reply {
            status: StatusCode::OK,
            body: Bytes::from_static(body.as_bytes()),
            content_type: None,
        })
    }

    /// `GET /price/1`, with no context from a caller.
    pub fn get_price() -> DepRequest {
        DepRequest {
            method: Method::GET,
            path: "/price/1".into(),
            body: Bytes::new(),
            key: "1".into(),
            idempotency_key: None,
            context: Default::default(),
        }
    }

    pub fn status(code: u16) -> Result<Reply, CallError> {
        let status = StatusCode::from_u16(code).unwrap();
        if status.is_server_error() {
            Err(CallError::Status(status))
        } else {
            Ok(Reply {
                status,
                body: Bytes::new(),
                content_type: None,
            })
        }
    }

    impl Dependency {
        pub fn new(
            f: impl Fn(usize) -> (Duration, Result<Reply, CallError>) + Send + Sync + 'static,
        ) -> Self {
            Dependency {
                script: Arc::new(f),
                calls: Arc::default(),
                in_flight: Arc::default(),
                max_in_flight: Arc::default(),
                seen: Arc::default(),
            }
        }

        pub fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }

        pub fn max_in_flight(&self) -> usize {
            self.max_in_flight.load(Ordering::SeqCst)
        }
    }

    struct Leave(Arc<AtomicUsize>);
    impl Drop for Leave {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl tower::Service<DepRequest> for Dependency {
        type Response = Reply;
        type Error = CallError;
        type Future = Pin<Box<dyn Future<Output = Result<Reply, CallError>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: DepRequest) -> Self::Future {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            self.seen.lock().unwrap().push(req);
            let leave = Leave(self.in_flight.clone());
            let (delay, result) = (self.script)(n);
            Box::pin(async move {
                let _leave = leave;
                tokio::time::sleep(delay).await;
                result
            })
        }
    }
}
