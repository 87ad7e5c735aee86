//! Bulkhead layer: at most `pool` calls of one operation in flight at once; the next one is rejected at once
//! rather than queued (seed 001: a separate pool of 80 for reviews, so one sick dependency cannot take the
//! connections everything else needs).
//!
//! Not a queue and not a rate limiter: a full bulkhead answers [`CallError::BulkheadFull`] immediately, and the
//! fallback layer serves the fallback.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceExt};

use super::{CallError, DepRequest, Reply};

/// Builds [`Bulkhead`] services sharing one pool of slots.
#[derive(Debug, Clone)]
pub struct BulkheadLayer {
    slots: Arc<Semaphore>,
    in_flight: Gauge,
}

impl BulkheadLayer {
    /// A bulkhead of `pool` slots; `in_flight` follows the slots taken (the `demo_dependency_in_flight` series).
    pub fn new(pool: usize, in_flight: Gauge) -> Self {
        BulkheadLayer {
            slots: Arc::new(Semaphore::new(pool)),
            in_flight,
        }
    }
}

impl<S> Layer<S> for BulkheadLayer {
    type Service = Bulkhead<S>;
    fn layer(&self, inner: S) -> Bulkhead<S> {
        Bulkhead {
            inner,
            slots: self.slots.clone(),
            in_flight: self.in_flight.clone(),
        }
    }
}

/// Takes a slot for the duration of each call, or rejects the call when none is free.
#[derive(Debug, Clone)]
pub struct Bulkhead<S> {
    inner: S,
    slots: Arc<Semaphore>,
    in_flight: Gauge,
}

struct Slot {
    _permit: tokio::sync::OwnedSemaphorePermit,
    in_flight: Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.in_flight.dec();
    }
}

impl<S> Service<DepRequest> for Bulkhead<S>
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
        // Taken here, not in the future, so the decision is made when the call is made.
        let slot = self.slots.clone().try_acquire_owned().ok().map(|permit| {
            self.in_flight.inc();
            Slot {
                _permit: permit,
                in_flight: self.in_flight.clone(),
            }
        });
        let inner = self.inner.clone();
        Box::pin(async move {
            let Some(slot) = slot else {
                return Err(CallError::BulkheadFull);
            };
            let result = inner.oneshot(req).await;
            drop(slot);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::mock::{ok, Dependency};
    use axum::http::Method;
    use bytes::Bytes;
    use std::time::Duration;

    fn req() -> DepRequest {
        DepRequest {
            method: Method::GET,
            path: "/reviews/1".into(),
            body: Bytes::new(),
            key: "1".into(),
            idempotency_key: None,
            context: Default::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rejects_at_once_beyond_the_pool_and_never_holds_more_than_the_pool() {
        let dep = Dependency::new(|_| (Duration::from_secs(2), ok("slow")));
        let gauge = Gauge::default();
        let svc = BulkheadLayer::new(80, gauge.clone()).layer(dep.clone());
        let calls: Vec<_> = (0..200)
            .map(|_| tokio::spawn(svc.clone().oneshot(req())))
            .collect();
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(gauge.get(), 80);
        let start = tokio::time::Instant::now();
        let mut rejected = 0;
        let mut served = 0;
        for c in calls {
            match c.await.unwrap() {
                Err(CallError::BulkheadFull) => rejected += 1,
                Ok(_) => served += 1,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!((served, rejected), (80, 120));
        assert_eq!(dep.max_in_flight(), 80);
        assert_eq!(dep.calls(), 80, "rejected calls never reach the dependency");
        assert!(start.elapsed() <= Duration::from_secs(2));
        assert_eq!(gauge.get(), 0, "every slot is given back");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_is_given_back_when_the_call_is_abandoned() {
        let dep = Dependency::new(|_| (Duration::from_secs(3600), ok("never")));
        let svc = BulkheadLayer::new(1, Gauge::default()).layer(dep);
        let first = tokio::spawn(svc.clone().oneshot(req()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(
            svc.clone().oneshot(req()).await,
            Err(CallError::BulkheadFull)
        );
        first.abort();
        let _ = first.await;
        let second = tokio::spawn(svc.clone().oneshot(req()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            !second.is_finished(),
            "the freed slot admitted the next call"
        );
        second.abort();
    }
}
