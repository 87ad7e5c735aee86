//! Timeout layer: bounds one attempt at the dependency, so a slow dependency turns into a failure the breaker can
//! count instead of a wait that holds a pool slot (seed 000: "a call with no timeout never produces a failure").
//!
//! Not for the whole user request (retries each get their own timeout) and not for connect tuning. With the
//! `no_timeout` mistake the layer passes calls through unbounded.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::{Layer, Service, ServiceExt};

use super::{CallError, DepRequest, Reply};

/// Builds [`Timeout`] services; `None` is the `no_timeout` mistake.
#[derive(Debug, Clone, Copy)]
pub struct TimeoutLayer {
    limit: Option<Duration>,
}

impl TimeoutLayer {
    /// A layer that fails attempts after `limit`, or never (`None`).
    pub fn new(limit: Option<Duration>) -> Self {
        TimeoutLayer { limit }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;
    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout {
            inner,
            limit: self.limit,
        }
    }
}

/// Fails an attempt with [`CallError::Timeout`] when it takes longer than the limit.
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
    limit: Option<Duration>,
}

impl<S> Service<DepRequest> for Timeout<S>
where
    S: Service<DepRequest, Response = Reply, Error = CallError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Reply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, CallError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: DepRequest) -> Self::Future {
        let inner = self.inner.clone();
        let limit = self.limit;
        Box::pin(async move {
            let attempt = inner.oneshot(req);
            match limit {
                None => attempt.await,
                Some(limit) => tokio::time::timeout(limit, attempt)
                    .await
                    .unwrap_or(Err(CallError::Timeout(limit))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::mock::{ok, Dependency};
    use axum::http::Method;
    use bytes::Bytes;

    fn req() -> DepRequest {
        DepRequest {
            method: Method::GET,
            path: "/price/1".into(),
            body: Bytes::new(),
            key: "1".into(),
            idempotency_key: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_slower_than_the_limit_fails_with_a_timeout_at_the_limit() {
        let dep = Dependency::new(|_| (Duration::from_secs(2), ok("late")));
        let svc = TimeoutLayer::new(Some(Duration::from_millis(250))).layer(dep);
        let start = tokio::time::Instant::now();
        let result = svc.oneshot(req()).await;
        assert_eq!(result, Err(CallError::Timeout(Duration::from_millis(250))));
        assert_eq!(start.elapsed(), Duration::from_millis(250));
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_within_the_limit_passes_through() {
        let dep = Dependency::new(|_| (Duration::from_millis(249), ok("on time")));
        let svc = TimeoutLayer::new(Some(Duration::from_millis(250))).layer(dep);
        assert_eq!(
            svc.oneshot(req()).await.unwrap().body,
            Bytes::from_static(b"on time")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_timeout_waits_as_long_as_the_dependency_takes() {
        let dep = Dependency::new(|_| (Duration::from_secs(30), ok("thirty seconds later")));
        let svc = TimeoutLayer::new(None).layer(dep);
        let start = tokio::time::Instant::now();
        assert!(svc.oneshot(req()).await.is_ok());
        assert_eq!(start.elapsed(), Duration::from_secs(30));
    }
}
