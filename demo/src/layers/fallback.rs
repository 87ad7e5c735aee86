//! Fallback layer: turns a failed or refused call into the answer the endpoint decided on beforehand (seed 003:
//! "decided BEFORE tripping, not improvised during the incident"): the last good value marked `X-Fallback:
//! stale`, an empty answer marked `X-Fallback: default`, or 503 with `Retry-After`.
//!
//! Not for 4xx: a client error is the dependency's real answer and passes through. Not for writes' success:
//! validation only lets writes use `unavailable`, so a payment is never faked.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::http::{HeaderValue, StatusCode};
use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use tower::{Layer, Service, ServiceExt};

use super::{Answer, CallError, DepRequest, FallbackKind, Reply};
use crate::observe::{FallbackLabels, Metrics, ServedLabels};
use crate::operation::Operation;
use crate::settings::Fallback;

/// Items a stale cache holds at most; past that, new items are not cached (old ones keep being served). Scenarios
/// use ids in the thousands; this bounds memory if one does not.
pub const STALE_CACHE_ITEMS: usize = 100_000;

/// The last good answer per item, for the `stale` fallback.
#[derive(Debug, Default)]
pub struct StaleCache {
    items: Mutex<HashMap<String, (Bytes, Option<HeaderValue>)>>,
}

impl StaleCache {
    fn put(&self, key: &str, body: &Bytes, content_type: &Option<HeaderValue>) {
        if let Ok(mut items) = self.items.lock() {
            if items.len() < STALE_CACHE_ITEMS || items.contains_key(key) {
                items.insert(key.to_string(), (body.clone(), content_type.clone()));
            }
        }
    }

    fn get(&self, key: &str) -> Option<(Bytes, Option<HeaderValue>)> {
        self.items.lock().ok()?.get(key).cloned()
    }
}

/// Builds [`WithFallback`] services for one operation on one instance.
#[derive(Clone)]
pub struct FallbackLayer {
    op: Operation,
    policy: Fallback,
    cache: Arc<StaleCache>,
    metrics: Arc<Metrics>,
    instance: String,
}

impl FallbackLayer {
    /// The fallback `policy` of `op` on `instance`, with its own stale cache.
    pub fn new(op: Operation, policy: Fallback, metrics: Arc<Metrics>, instance: usize) -> Self {
        FallbackLayer {
            op,
            policy,
            cache: Arc::default(),
            metrics,
            instance: instance.to_string(),
        }
    }
}

impl<S> Layer<S> for FallbackLayer {
    type Service = WithFallback<S>;
    fn layer(&self, inner: S) -> WithFallback<S> {
        WithFallback {
            inner,
            layer: self.clone(),
        }
    }
}

/// Answers with the dependency's reply, or with the fallback when the call failed.
#[derive(Clone)]
pub struct WithFallback<S> {
    inner: S,
    layer: FallbackLayer,
}

impl FallbackLayer {
    fn fallback(&self, key: &str, error: &CallError) -> Answer {
        self.metrics
            .fallback
            .get_or_create(&FallbackLabels {
                reason: error.reason().into(),
            })
            .inc();
        let answer = match &self.policy {
            Fallback::Stale => match self.cache.get(key) {
                Some((body, content_type)) => Answer {
                    status: StatusCode::OK,
                    body,
                    content_type,
                    fallback: Some(FallbackKind::Stale),
                    retry_after: None,
                },
                None => self.default_answer(),
            },
            Fallback::Default => self.default_answer(),
            Fallback::Unavailable { retry_after } => Answer {
                status: StatusCode::SERVICE_UNAVAILABLE,
                body: Bytes::from(format!("{} unavailable: {error}", self.op.dependency())),
                content_type: Some(HeaderValue::from_static("text/plain")),
                fallback: Some(FallbackKind::Unavailable),
                retry_after: Some(retry_after.get()),
            },
        };
        if let Some(kind) = answer.fallback {
            self.served(kind).inc();
        }
        answer
    }

    fn default_answer(&self) -> Answer {
        Answer {
            status: StatusCode::OK,
            body: Bytes::from_static(self.op.default_body()),
            content_type: Some(HeaderValue::from_static("application/json")),
            fallback: Some(FallbackKind::Default),
            retry_after: None,
        }
    }

    fn served(&self, kind: FallbackKind) -> Counter {
        self.metrics
            .served
            .get_or_create(&ServedLabels {
                operation: self.op.key().into(),
                instance: self.instance.clone(),
                kind: kind.label().into(),
            })
            .clone()
    }
}

impl<S> Service<DepRequest> for WithFallback<S>
where
    S: Service<DepRequest, Response = Reply, Error = CallError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: DepRequest) -> Self::Future {
        let inner = self.inner.clone();
        let layer = self.layer.clone();
        Box::pin(async move {
            let key = req.key.clone();
            let answer = match inner.oneshot(req).await {
                Ok(reply) => {
                    if reply.status.is_success() && layer.policy == Fallback::Stale {
                        layer.cache.put(&key, &reply.body, &reply.content_type);
                    }
                    Answer {
                        status: reply.status,
                        body: reply.body,
                        content_type: reply.content_type,
                        fallback: None,
                        retry_after: None,
                    }
                }
                Err(error) => layer.fallback(&key, &error),
            };
            Ok(answer)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::BreakerState;
    use crate::layers::mock::{ok, status, Dependency};
    use axum::http::Method;
    use faultline_units::Dur;
    use std::time::Duration;

    fn req(id: &str) -> DepRequest {
        DepRequest {
            method: Method::GET,
            path: format!("/price/{id}"),
            body: Bytes::new(),
            key: id.into(),
            idempotency_key: None,
            context: Default::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stale_serves_the_last_good_value_of_the_same_item_and_default_for_unknown_items() {
        let dep = Dependency::new(|n| {
            (
                Duration::ZERO,
                if n == 0 {
                    ok("{\"price\":7}")
                } else {
                    Err(CallError::Rejected(BreakerState::Open))
                },
            )
        });
        let metrics = Arc::new(Metrics::new());
        let svc =
            FallbackLayer::new(Operation::Pricing, Fallback::Stale, metrics.clone(), 0).layer(dep);
        let fresh = svc.clone().oneshot(req("42")).await.unwrap();
        assert_eq!(
            (fresh.fallback, fresh.body.as_ref()),
            (None, b"{\"price\":7}".as_ref())
        );
        let stale = svc.clone().oneshot(req("42")).await.unwrap();
        assert_eq!(
            (stale.status, stale.fallback, stale.body.as_ref()),
            (
                StatusCode::OK,
                Some(FallbackKind::Stale),
                b"{\"price\":7}".as_ref()
            )
        );
        let unknown = svc.clone().oneshot(req("43")).await.unwrap();
        assert_eq!(
            (unknown.fallback, unknown.body.as_ref()),
            (
                Some(FallbackKind::Default),
                Operation::Pricing.default_body()
            )
        );
        let text = metrics.encode();
        assert!(
            text.contains(r#"circuit_breaker_fallback_total{reason="breaker_open"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"kind="stale"} 1"#) && text.contains(r#"kind="default"} 1"#),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn unavailable_answers_503_with_retry_after_and_never_a_success() {
        let dep = Dependency::new(|_| {
            (
                Duration::ZERO,
                Err(CallError::Timeout(Duration::from_secs(2))),
            )
        });
        let policy = Fallback::Unavailable {
            retry_after: Dur::from_millis(5_000),
        };
        let svc =
            FallbackLayer::new(Operation::Payments, policy, Arc::new(Metrics::new()), 0).layer(dep);
        let a = svc.oneshot(req("")).await.unwrap();
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(a.retry_after, Some(Duration::from_secs(5)));
        assert_eq!(a.fallback, Some(FallbackKind::Unavailable));
    }

    #[tokio::test(start_paused = true)]
    async fn client_errors_pass_through_without_a_fallback() {
        let dep = Dependency::new(|_| (Duration::ZERO, status(404)));
        let svc = FallbackLayer::new(
            Operation::Reviews,
            Fallback::Default,
            Arc::new(Metrics::new()),
            0,
        )
        .layer(dep);
        let a = svc.oneshot(req("9")).await.unwrap();
        assert_eq!((a.status, a.fallback), (StatusCode::NOT_FOUND, None));
    }
}
