//! What the demo says about itself: Prometheus metrics (seed 002's names), one log line per breaker transition,
//! the transition journal the runner reads in-process, and the optional webhook.
//!
//! Not for deciding anything: the layers report here; nothing here feeds back into a call.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::admission::AdmissionMetrics;
use crate::breaker::{BreakerState, StateChange};
use crate::operation::Operation;

/// The labels naming one observed breaker: the `(operation, instance)` pair it guards.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BreakerLabels {
    /// The dependency service (pricing, reviews, payments, report, accounts).
    pub dependency: String,
    /// The operation key (pricing, ..., account-read, account-write).
    pub operation: String,
    /// The instance, "0".."N-1".
    pub instance: String,
}

impl BreakerLabels {
    /// The labels of `op` on instance `instance`.
    pub fn new(op: Operation, instance: usize) -> Self {
        BreakerLabels {
            dependency: op.dependency().into(),
            operation: op.key().into(),
            instance: instance.to_string(),
        }
    }
}

/// Labels of `circuit_breaker_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The dependency service (pricing, reviews, payments, report, accounts).
    pub dependency: String,
    /// The operation key (pricing, ..., account-read, account-write).
    pub operation: String,
    /// The instance, "0".."N-1".
    pub instance: String,
    /// The breaker's state when the call asked: closed, open, half_open.
    pub state: String,
    /// success, slow, client_error, failure, rejected, bulkhead_full.
    pub outcome: String,
}

/// Labels of `circuit_breaker_fallback_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FallbackLabels {
    /// breaker_open, bulkhead_full, timeout, transport_error, server_error.
    pub reason: String,
}

/// Labels of `circuit_breaker_transitions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    /// The state left.
    pub from: String,
    /// The state entered.
    pub to: String,
}

/// Labels of `demo_fallback_served_total`: which fallback an operation served.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServedLabels {
    /// The operation key (pricing, ..., account-read, account-write).
    pub operation: String,
    /// The instance, "0".."N-1".
    pub instance: String,
    /// stale, default, unavailable.
    pub kind: String,
}

/// Labels of `demo_dependency_attempts_total` and `demo_retries_denied_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// The operation key (pricing, ..., account-read, account-write).
    pub operation: String,
    /// The instance, "0".."N-1".
    pub instance: String,
    /// first or retry.
    pub attempt: String,
}

/// Every metric the demo exports, in one registry.
pub struct Metrics {
    registry: Registry,
    /// circuit_breaker_state{dependency,operation,instance}: 0 closed, 1 open, 2 half-open.
    pub state: Family<BreakerLabels, Gauge>,
    /// circuit_breaker_requests_total{dependency,operation,instance,state,outcome}.
    pub requests: Family<RequestLabels, Counter>,
    /// circuit_breaker_fallback_total{reason}.
    pub fallback: Family<FallbackLabels, Counter>,
    /// circuit_breaker_transitions_total{from,to}.
    pub transitions: Family<TransitionLabels, Counter>,
    /// demo_fallback_served_total{operation,instance,kind}.
    pub served: Family<ServedLabels, Counter>,
    /// demo_dependency_attempts_total{operation,instance,attempt}: calls that reached the HTTP client.
    pub attempts: Family<AttemptLabels, Counter>,
    /// demo_retries_denied_total{operation,instance,attempt}: retries the budget refused.
    pub retries_denied: Family<AttemptLabels, Counter>,
    /// demo_dependency_in_flight{dependency,operation,instance}: bulkhead slots taken.
    pub in_flight: Family<BreakerLabels, Gauge>,
    /// demo_requests_in_flight, demo_requests_queued, demo_requests_shed_total: admission at the front door.
    pub admission: AdmissionMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every family registered (and no series until something happens).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let state = Family::<BreakerLabels, Gauge>::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let fallback = Family::<FallbackLabels, Counter>::default();
        let transitions = Family::<TransitionLabels, Counter>::default();
        let served = Family::<ServedLabels, Counter>::default();
        let attempts = Family::<AttemptLabels, Counter>::default();
        let retries_denied = Family::<AttemptLabels, Counter>::default();
        let in_flight = Family::<BreakerLabels, Gauge>::default();
        registry.register(
            "circuit_breaker_state",
            "Breaker state: 0 closed, 1 open, 2 half-open",
            state.clone(),
        );
        registry.register(
            "circuit_breaker_requests",
            "Calls through the breaker by state and outcome",
            requests.clone(),
        );
        registry.register(
            "circuit_breaker_fallback",
            "Fallbacks served, by reason",
            fallback.clone(),
        );
        registry.register(
            "circuit_breaker_transitions",
            "Breaker state transitions",
            transitions.clone(),
        );
        registry.register(
            "demo_fallback_served",
            "Fallbacks served, by operation and kind",
            served.clone(),
        );
        registry.register(
            "demo_dependency_attempts",
            "Attempts sent to the dependency",
            attempts.clone(),
        );
        registry.register(
            "demo_retries_denied",
            "Retries refused by the retry budget",
            retries_denied.clone(),
        );
        registry.register(
            "demo_dependency_in_flight",
            "Bulkhead slots taken",
            in_flight.clone(),
        );
        let admission = AdmissionMetrics::default();
        registry.register(
            "demo_requests_in_flight",
            "Requests admitted and being served",
            admission.in_flight.clone(),
        );
        registry.register(
            "demo_requests_queued",
            "Requests waiting for admission (only with the unbounded_queue mistake)",
            admission.queued.clone(),
        );
        registry.register(
            "demo_admission_limit",
            "Requests admitted at once, for the whole process (adapts with admission.target_latency)",
            admission.limit.clone(),
        );
        registry.register(
            "demo_requests_shed",
            "Requests refused at the front door with 503 and Retry-After",
            admission.shed.clone(),
        );
        Metrics {
            admission,
            registry,
            state,
            requests,
            fallback,
            transitions,
            served,
            attempts,
            retries_denied,
            in_flight,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// One breaker transition as the runner, the log and the webhook see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// The breaker's name: its operation key (the runner's `breakers:` names).
    pub breaker: String,
    /// The dependency service (pricing, reviews, payments, report, accounts).
    pub dependency: String,
    /// The operation key (pricing, ..., account-read, account-write).
    pub operation: String,
    /// "0".."N-1": the instance whose breaker for this operation changed.
    pub instance: String,
    /// The state left.
    pub from: BreakerState,
    /// The state entered.
    pub to: BreakerState,
    /// Wall-clock time of the transition, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
}

/// Where transitions go: the state gauge, the transitions counter, the log, the in-memory journal and the webhook.
pub struct Journal {
    metrics: Arc<Metrics>,
    transitions: Mutex<Vec<Transition>>,
    webhook: Option<mpsc::Sender<Transition>>,
}

/// Transitions queued for the webhook at most; beyond that they are dropped (and logged), so a dead webhook
/// never slows a call. A breaker makes a few transitions a minute; this is hours of them.
const WEBHOOK_QUEUE: usize = 10_000;

impl Journal {
    /// A journal reporting to `metrics`, and to `webhook` (a sender from [`spawn_webhook`]) if given.
    pub fn new(metrics: Arc<Metrics>, webhook: Option<mpsc::Sender<Transition>>) -> Self {
        Journal {
            metrics,
            transitions: Mutex::new(Vec::new()),
            webhook,
        }
    }

    /// The metrics this journal writes to.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Sets the state gauge of every breaker in `guarded` to closed, so the series exist from the start.
    pub fn register(&self, guarded: &[BreakerLabels]) {
        for labels in guarded {
            self.metrics
                .state
                .get_or_create(labels)
                .set(BreakerState::Closed.gauge());
        }
    }

    /// Publishes one state change of the breaker that guards `guarded`: one transition per guarded pair (a shared
    /// breaker moves every operation or instance it guards at once, and each is observed as its own breaker).
    pub fn publish(&self, guarded: &[BreakerLabels], change: StateChange) {
        let at_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_millis() as u64;
        for labels in guarded {
            self.metrics
                .state
                .get_or_create(labels)
                .set(change.to.gauge());
            self.metrics
                .transitions
                .get_or_create(&TransitionLabels {
                    from: change.from.label().into(),
                    to: change.to.label().into(),
                })
                .inc();
            tracing::info!(
                target: "demo::breaker",
                operation = %labels.operation,
                dependency = %labels.dependency,
                instance = %labels.instance,
                from = change.from.label(),
                to = change.to.label(),
                at_unix_ms,
                "circuit breaker transition"
            );
            let t = Transition {
                breaker: labels.operation.clone(),
                dependency: labels.dependency.clone(),
                operation: labels.operation.clone(),
                instance: labels.instance.clone(),
                from: change.from,
                to: change.to,
                at_unix_ms,
            };
            if let Some(tx) = &self.webhook {
                if tx.try_send(t.clone()).is_err() {
                    tracing::warn!(target: "demo::breaker", "webhook queue full or closed: transition not posted");
                }
            }
            if let Ok(mut all) = self.transitions.lock() {
                all.push(t);
            }
        }
    }

    /// Every transition so far, in order.
    pub fn transitions(&self) -> Vec<Transition> {
        self.transitions
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default()
    }
}

/// Starts the task that POSTs each transition as JSON to `url`, one at a time, in order. The task ends when
/// every sender is dropped and the queue is drained.
pub fn spawn_webhook(
    url: String,
    client: reqwest::Client,
) -> (mpsc::Sender<Transition>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<Transition>(WEBHOOK_QUEUE);
    let task = tokio::spawn(async move {
        while let Some(t) = rx.recv().await {
            let body = serde_json::json!({
                "breaker": t.breaker,
                "dependency": t.dependency,
                "operation": t.operation,
                "instance": t.instance,
                "from": t.from,
                "to": t.to,
                "at_unix_ms": t.at_unix_ms,
            });
            let sent = client
                .post(&url)
                .json(&body)
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => {
                    tracing::warn!(target: "demo::webhook", status = r.status().as_u16(), "webhook refused a transition")
                }
                Err(e) => {
                    tracing::warn!(target: "demo::webhook", error = %e, "webhook unreachable")
                }
            }
        }
    });
    (tx, task)
}
