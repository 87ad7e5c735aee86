//! The innermost layer when a dependency is several endpoints (`endpoints:`): round robin over them, with outlier
//! ejection in Envoy's shape (`outlier_detection`: consecutive_5xx, a failure rate per interval, a
//! base_ejection_time that grows with each ejection, max_ejection_percent). One sick instance of three is taken out
//! of rotation within a few calls, so the breaker over the whole dependency never sees a third of its calls fail.
//!
//! [`Outliers`] is the pure state machine, driven by an explicit `now`; [`Balancer`] is the tower service that
//! asks it which endpoint to call and tells it how the call went. Not for deciding retries (`retry`), for the
//! breaker over the whole dependency (`breaker`), nor for what counts as a failure beyond the call's own result.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Service, ServiceExt};

use super::{CallError, DepRequest, Reply};
use crate::settings::OutlierConfig;

/// One endpoint's standing.
#[derive(Debug, Clone, Default)]
struct Endpoint {
    consecutive_failures: u32,
    /// Calls and failures in the current interval, for the failure rate.
    calls: u32,
    failures: u32,
    /// How many times it was ejected: the n-th ejection lasts n base ejections.
    ejections: u32,
    ejected_until: Option<Instant>,
}

/// Round robin over endpoints with outlier ejection; pure, every decision taken at an explicit `now`.
#[derive(Debug, Clone)]
pub struct Outliers {
    config: Option<OutlierConfig>,
    endpoints: Vec<Endpoint>,
    next: usize,
    interval_started: Option<Instant>,
}

impl Outliers {
    /// `count` endpoints; with `config` `None` (the `no_outlier_ejection` mistake), plain round robin.
    pub fn new(count: usize, config: Option<OutlierConfig>) -> Outliers {
        Outliers {
            config,
            endpoints: vec![Endpoint::default(); count.max(1)],
            next: 0,
            interval_started: None,
        }
    }

    /// Whether endpoint `i` is out of rotation at `now`.
    pub fn is_ejected(&self, i: usize, now: Instant) -> bool {
        self.endpoints[i].ejected_until.is_some_and(|t| now < t)
    }

    /// The endpoints out of rotation at `now`.
    pub fn ejected(&self, now: Instant) -> usize {
        (0..self.endpoints.len())
            .filter(|i| self.is_ejected(*i, now))
            .count()
    }

    /// The endpoint the next call goes to: the next in turn that is not ejected (every endpoint in turn if all
    /// are, which the cap on ejections prevents).
    pub fn pick(&mut self, now: Instant) -> usize {
        let n = self.endpoints.len();
        for step in 0..n {
            let i = (self.next + step) % n;
            if !self.is_ejected(i, now) {
                self.next = i + 1;
                return i;
            }
        }
        let i = self.next % n;
        self.next = i + 1;
        i
    }

    /// Records how a call to endpoint `i` went; may eject it.
    pub fn record(&mut self, i: usize, failed: bool, now: Instant) {
        let Some(config) = self.config.clone() else {
            return;
        };
        let interval = config.interval.get();
        let started = *self.interval_started.get_or_insert(now);
        if now.saturating_duration_since(started) >= interval {
            self.interval_started = Some(now);
            for e in &mut self.endpoints {
                e.calls = 0;
                e.failures = 0;
            }
        }
        let e = &mut self.endpoints[i];
        e.calls += 1;
        if failed {
            e.failures += 1;
            e.consecutive_failures += 1;
        } else {
            e.consecutive_failures = 0;
        }
        let by_count = config.consecutive_failures > 0
            && e.consecutive_failures >= config.consecutive_failures;
        let by_rate = config.failure_rate.is_some_and(|rate| {
            e.calls >= config.min_calls.max(1)
                && f64::from(e.failures) / f64::from(e.calls) >= rate.fraction()
        });
        if (by_count || by_rate) && !self.is_ejected(i, now) && self.may_eject(&config, now) {
            let e = &mut self.endpoints[i];
            e.ejections += 1;
            let time = config
                .base_ejection
                .get()
                .saturating_mul(e.ejections)
                .min(config.max_ejection.get());
            e.ejected_until = Some(now + time);
            e.consecutive_failures = 0;
            e.calls = 0;
            e.failures = 0;
        }
    }

    /// Whether one more endpoint may be ejected under `max_ejected` (always leaving one in rotation).
    fn may_eject(&self, config: &OutlierConfig, now: Instant) -> bool {
        let n = self.endpoints.len();
        let cap = ((n as f64 * config.max_ejected.fraction()).floor() as usize).min(n - 1);
        self.ejected(now) < cap
    }

    /// How long endpoint `i` stays out from `now`, if it is out.
    pub fn ejected_for(&self, i: usize, now: Instant) -> Option<Duration> {
        self.endpoints[i]
            .ejected_until
            .filter(|t| now < *t)
            .map(|t| t - now)
    }
}

/// Calls one of several endpoints per call, in turn, skipping the ejected ones.
#[derive(Clone)]
pub struct Balancer<C> {
    endpoints: Vec<C>,
    outliers: Arc<Mutex<Outliers>>,
}

impl<C> Balancer<C> {
    /// Over `endpoints` (at least one), ejecting outliers by `config` (`None`: never).
    pub fn new(endpoints: Vec<C>, config: Option<OutlierConfig>) -> Balancer<C> {
        let outliers = Outliers::new(endpoints.len(), config);
        Balancer {
            endpoints,
            outliers: Arc::new(Mutex::new(outliers)),
        }
    }

    fn outliers(&self) -> std::sync::MutexGuard<'_, Outliers> {
        self.outliers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Reports a call's end to the outlier detector; a call dropped before it ended (its attempt timed out above
/// this layer) counts as a failure of its endpoint, as a local-origin timeout does in Envoy.
struct Outcome {
    outliers: Arc<Mutex<Outliers>>,
    endpoint: usize,
    failed: Option<bool>,
}

impl Drop for Outcome {
    fn drop(&mut self) {
        let failed = self.failed.unwrap_or(true);
        let mut outliers = self.outliers.lock().unwrap_or_else(|p| p.into_inner());
        outliers.record(self.endpoint, failed, Instant::now());
    }
}

impl<C> Service<DepRequest> for Balancer<C>
where
    C: Service<DepRequest, Response = Reply, Error = CallError> + Clone + Send + 'static,
    C::Future: Send + 'static,
{
    type Response = Reply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, CallError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: DepRequest) -> Self::Future {
        let endpoint = self.outliers().pick(Instant::now());
        let client = self.endpoints[endpoint].clone();
        let outcome = Outcome {
            outliers: self.outliers.clone(),
            endpoint,
            failed: None,
        };
        Box::pin(async move {
            // The whole guard moves into the call, so that it ends with the call, not with this function.
            let mut outcome = outcome;
            let result = client.oneshot(req).await;
            // A 4xx is the caller's fault, not the endpoint's: only 5xx, transport and handshake failures count.
            outcome.failed = Some(result.is_err());
            result
        })
    }
}

#[cfg(test)]
#[path = "balance_tests.rs"]
mod tests;
