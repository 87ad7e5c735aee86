//! Breaker layer: asks the breaker for a permit before each call, refuses the call without touching the network
//! when it is open, and reports the outcome after. The decisions are in `crate::breaker` (pure logic); this
//! layer adds the clock, the lock, the requests metric and the publishing of transitions.
//!
//! Not for sharing policy: which (operation, instance) pairs one breaker guards is decided when the service is
//! built (per operation and instance by default; `shared_counters` and the `shared_breaker` mistake widen it).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use super::{CallError, DepRequest, Reply};
use crate::breaker::{Breaker, BreakerState, Outcome, Permit, Policy, Rejected, Verdict};
use crate::observe::{BreakerLabels, Journal, RequestLabels};

/// One breaker and the breakers it is observed as: every (operation, instance) pair it guards gets the state
/// gauge, a log line and a webhook event for each of its transitions.
pub struct BreakerCell {
    machine: Mutex<Breaker>,
    guarded: Vec<BreakerLabels>,
    journal: Arc<Journal>,
    slow_call_duration: Duration,
}

impl BreakerCell {
    /// A closed breaker following `policy`, observed as every pair in `guarded`.
    pub fn new(policy: Policy, guarded: Vec<BreakerLabels>, journal: Arc<Journal>) -> Self {
        journal.register(&guarded);
        let slow_call_duration = if policy.slowness_ignored {
            Duration::MAX
        } else {
            policy.slow_call_duration
        };
        BreakerCell {
            machine: Mutex::new(Breaker::new(policy)),
            guarded,
            journal,
            slow_call_duration,
        }
    }

    /// The breaker's current state.
    pub fn state(&self) -> BreakerState {
        self.machine
            .lock()
            .map(|m| m.state())
            .unwrap_or(BreakerState::Closed)
    }

    /// The pairs this breaker is observed as.
    pub fn guarded(&self) -> &[BreakerLabels] {
        &self.guarded
    }

    // Transitions are published while the lock is held, so their order in the log and the journal is the order
    // in which they happened. They are rare; the publishing is a few counter updates and one log line.
    fn try_acquire(&self, now: Instant) -> Result<Permit, Rejected> {
        let Ok(mut m) = self.machine.lock() else {
            return Err(Rejected {
                state: BreakerState::Open,
            });
        };
        let (admission, change) = m.try_acquire(now);
        if let Some(change) = change {
            self.journal.publish(&self.guarded, change);
        }
        admission
    }

    fn record(&self, now: Instant, permit: Permit, outcome: Outcome) {
        if let Ok(mut m) = self.machine.lock() {
            if let Some(change) = m.record(now, permit, outcome) {
                self.journal.publish(&self.guarded, change);
            }
        }
    }

    fn release(&self, permit: Permit) {
        if let Ok(mut m) = self.machine.lock() {
            m.release(permit);
        }
    }
}

/// Gives a permit back if its call is dropped before it ends (the caller went away), so a half-open probe slot
/// cannot leak.
struct PermitGuard {
    cell: Arc<BreakerCell>,
    permit: Option<Permit>,
}

impl Drop for PermitGuard {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.cell.release(permit);
        }
    }
}

/// Builds [`CircuitBreaker`] services for one (operation, instance) pair.
#[derive(Clone)]
pub struct BreakerLayer {
    cell: Arc<BreakerCell>,
    labels: BreakerLabels,
}

impl BreakerLayer {
    /// Calls labelled `labels` go through `cell`.
    pub fn new(cell: Arc<BreakerCell>, labels: BreakerLabels) -> Self {
        BreakerLayer { cell, labels }
    }
}

impl<S> Layer<S> for BreakerLayer {
    type Service = CircuitBreaker<S>;
    fn layer(&self, inner: S) -> CircuitBreaker<S> {
        CircuitBreaker {
            inner,
            cell: self.cell.clone(),
            labels: self.labels.clone(),
        }
    }
}

/// Refuses calls while the breaker is open; reports every admitted call's outcome.
#[derive(Clone)]
pub struct CircuitBreaker<S> {
    inner: S,
    cell: Arc<BreakerCell>,
    labels: BreakerLabels,
}

impl<S> CircuitBreaker<S> {
    fn count(&self, state: BreakerState, outcome: &str) {
        let l = &self.labels;
        self.cell
            .journal
            .metrics()
            .requests
            .get_or_create(&RequestLabels {
                dependency: l.dependency.clone(),
                operation: l.operation.clone(),
                instance: l.instance.clone(),
                state: state.label().into(),
                outcome: outcome.into(),
            })
            .inc();
    }
}

impl<S> Service<DepRequest> for CircuitBreaker<S>
where
    S: Service<DepRequest, Response = Reply, Error = CallError> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    type Response = Reply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, CallError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: DepRequest) -> Self::Future {
        let this = self.clone();
        let start = Instant::now();
        // Asked now, so "open" answers without a single poll of the dependency.
        let admission = self.cell.try_acquire(start);
        Box::pin(async move {
            let permit = match admission {
                Ok(permit) => permit,
                Err(rejected) => {
                    this.count(rejected.state, "rejected");
                    return Err(CallError::Rejected(rejected.state));
                }
            };
            let mut guard = PermitGuard {
                cell: this.cell.clone(),
                permit: Some(permit),
            };
            let result = this.inner.clone().oneshot(req).await;
            let end = Instant::now();
            let elapsed = end - start;
            let verdict = match &result {
                Ok(reply) if reply.status.is_client_error() => Some(Verdict::ClientError),
                Ok(_) => Some(Verdict::Success),
                Err(CallError::BulkheadFull | CallError::Rejected(_)) => None,
                Err(_) => Some(Verdict::Failure),
            };
            let label = match (verdict, &result) {
                (Some(Verdict::Success), _) if elapsed > this.cell.slow_call_duration => "slow",
                (Some(Verdict::Success), _) => "success",
                (Some(Verdict::ClientError), _) => "client_error",
                (Some(Verdict::Failure), _) => "failure",
                (None, Err(CallError::BulkheadFull)) => "bulkhead_full",
                (None, _) => "rejected",
            };
            if let (Some(verdict), Some(permit)) = (verdict, guard.permit.take()) {
                this.cell.record(end, permit, Outcome { verdict, elapsed });
            }
            // A refused inner call (full bulkhead) is no news about the dependency: the guard releases the permit.
            drop(guard);
            this.count(permit.state, label);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mistake;
    use crate::layers::mock::{get_price, ok, status, Dependency};
    use crate::observe::Metrics;
    use crate::operation::Operation;
    use std::collections::BTreeSet;

    fn req() -> DepRequest {
        get_price()
    }

    fn cell(journal: &Arc<Journal>) -> Arc<BreakerCell> {
        let policy = Policy::new(
            &Operation::Pricing.recommended().breaker,
            &BTreeSet::<Mistake>::new(),
        );
        Arc::new(BreakerCell::new(
            policy,
            vec![BreakerLabels::new(Operation::Pricing, 0)],
            journal.clone(),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn open_refuses_without_calling_and_the_state_is_published() {
        let journal = Arc::new(Journal::new(Arc::new(Metrics::new()), None));
        let cell = cell(&journal);
        let dep = Dependency::new(|_| (Duration::from_millis(5), status(503)));
        let svc = BreakerLayer::new(cell.clone(), BreakerLabels::new(Operation::Pricing, 0))
            .layer(dep.clone());
        for _ in 0..20 {
            assert_eq!(
                svc.clone().oneshot(req()).await,
                Err(CallError::Status(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE
                ))
            );
        }
        assert_eq!(cell.state(), BreakerState::Open);
        for _ in 0..100 {
            assert_eq!(
                svc.clone().oneshot(req()).await,
                Err(CallError::Rejected(BreakerState::Open))
            );
        }
        assert_eq!(dep.calls(), 20);
        let t = journal.transitions();
        assert_eq!(t.len(), 1);
        assert_eq!(
            (
                t[0].from,
                t[0].to,
                t[0].operation.as_str(),
                t[0].instance.as_str()
            ),
            (BreakerState::Closed, BreakerState::Open, "pricing", "0")
        );
        let text = journal.metrics().encode();
        assert!(
            text.contains(
                r#"circuit_breaker_state{dependency="pricing",operation="pricing",instance="0"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"circuit_breaker_transitions_total{from="closed",to="open"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"state="open",outcome="rejected"} 100"#),
            "{text}"
        );
        assert!(
            text.contains(r#"state="closed",outcome="failure"} 20"#),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_bulkhead_is_not_counted_as_a_failure() {
        let journal = Arc::new(Journal::new(Arc::new(Metrics::new()), None));
        let cell = cell(&journal);
        let dep = Dependency::new(|_| (Duration::ZERO, Err(CallError::BulkheadFull)));
        let svc =
            BreakerLayer::new(cell.clone(), BreakerLabels::new(Operation::Pricing, 0)).layer(dep);
        for _ in 0..100 {
            assert_eq!(
                svc.clone().oneshot(req()).await,
                Err(CallError::BulkheadFull)
            );
        }
        assert_eq!(cell.state(), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_abandoned_by_its_caller_frees_the_half_open_slot() {
        let journal = Arc::new(Journal::new(Arc::new(Metrics::new()), None));
        let cell = cell(&journal);
        let failing = Dependency::new(|_| (Duration::from_millis(1), status(500)));
        let svc = BreakerLayer::new(cell.clone(), BreakerLabels::new(Operation::Pricing, 0))
            .layer(failing);
        for _ in 0..20 {
            let _ = svc.clone().oneshot(req()).await;
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
        let hanging = Dependency::new(|_| (Duration::from_secs(3600), ok("never")));
        let svc = BreakerLayer::new(cell.clone(), BreakerLabels::new(Operation::Pricing, 0))
            .layer(hanging);
        let probe = tokio::spawn(svc.clone().oneshot(req()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(
            svc.clone().oneshot(req()).await,
            Err(CallError::Rejected(BreakerState::HalfOpen))
        );
        probe.abort();
        let _ = probe.await;
        let next = tokio::spawn(svc.clone().oneshot(req()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(!next.is_finished(), "the next probe was admitted");
        next.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn slow_successes_are_labelled_slow() {
        let journal = Arc::new(Journal::new(Arc::new(Metrics::new()), None));
        let cell = cell(&journal);
        let dep = Dependency::new(|_| (Duration::from_millis(1_500), ok("slow")));
        let svc = BreakerLayer::new(cell, BreakerLabels::new(Operation::Pricing, 0)).layer(dep);
        assert!(svc.oneshot(req()).await.is_ok());
        assert!(journal
            .metrics()
            .encode()
            .contains(r#"state="closed",outcome="slow"} 1"#));
    }
}
