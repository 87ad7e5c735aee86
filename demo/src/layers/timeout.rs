//! Timeout layer: bounds one attempt at the dependency, so a slow dependency turns into a failure the breaker can
//! count instead of a wait that holds a pool slot (seed 000: "a call with no timeout never produces a failure").
//!
//! Each attempt also ends when the caller's deadline does (its `x-request-timeout`, see `context`): an answer
//! after the caller has gone is work for nobody, and an attempt that would start after it is not sent at all.
//! The attempt's own deadline, the earlier of the two, is what the client sends to the dependency.
//!
//! Not for the whole user request (retries each get their own timeout) and not for connect tuning. With the
//! `no_timeout` mistake the layer passes calls through unbounded, whatever the caller's deadline.

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

    fn call(&mut self, mut req: DepRequest) -> Self::Future {
        let inner = self.inner.clone();
        let Some(own) = self.limit else {
            return Box::pin(inner.oneshot(req));
        };
        let now = tokio::time::Instant::now();
        let limit = req.context.remaining(now).map_or(own, |left| left.min(own));
        req.context.attempt_deadline = Some(now + limit);
        Box::pin(async move {
            if limit.is_zero() {
                return Err(CallError::Timeout(limit));
            }
            tokio::time::timeout(limit, inner.oneshot(req))
                .await
                .unwrap_or(Err(CallError::Timeout(limit)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::mock::{get_price, ok, Dependency};
    use bytes::Bytes;

    fn req() -> DepRequest {
        get_price()
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

    fn with_deadline(ms: u64) -> DepRequest {
        let mut r = req();
        r.context.deadline = Some(tokio::time::Instant::now() + Duration::from_millis(ms));
        r.context.send_deadline = true;
        r
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_ends_with_the_callers_deadline_when_it_comes_first_and_carries_it() {
        let dep = Dependency::new(|_| (Duration::from_secs(2), ok("late")));
        let svc = TimeoutLayer::new(Some(Duration::from_millis(250))).layer(dep.clone());
        let start = tokio::time::Instant::now();
        let result = svc.oneshot(with_deadline(100)).await;
        assert_eq!(result, Err(CallError::Timeout(Duration::from_millis(100))));
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        let sent = dep.seen.lock().unwrap()[0].context;
        assert_eq!(
            sent.call_budget(start),
            Some(Duration::from_millis(100)),
            "the dependency is told the caller's remaining budget"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_own_timeout_is_sent_when_it_is_shorter_than_the_callers_budget() {
        let dep = Dependency::new(|_| (Duration::from_millis(1), ok("fast")));
        let svc = TimeoutLayer::new(Some(Duration::from_millis(250))).layer(dep.clone());
        let start = tokio::time::Instant::now();
        svc.oneshot(with_deadline(1_000)).await.unwrap();
        let sent = dep.seen.lock().unwrap()[0].context;
        assert_eq!(sent.call_budget(start), Some(Duration::from_millis(250)));
    }

    #[tokio::test(start_paused = true)]
    async fn no_attempt_starts_once_the_caller_has_given_up() {
        let dep = Dependency::new(|_| (Duration::from_millis(1), ok("nobody waits")));
        let svc = TimeoutLayer::new(Some(Duration::from_millis(250))).layer(dep.clone());
        let r = with_deadline(50);
        tokio::time::advance(Duration::from_millis(60)).await;
        assert_eq!(
            svc.oneshot(r).await,
            Err(CallError::Timeout(Duration::ZERO))
        );
        assert_eq!(dep.calls(), 0);
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
