//! Admission control at the front door: at most `max_in_flight` requests per instance are served at once, and the
//! next one is refused at once with 503 and `Retry-After` (seed 001: "Load shedding at the destination: the
//! destination protects itself, instead of depending on the callers"). A refusal costs microseconds, so above its
//! capacity the service keeps serving what it can at the latency it can, instead of queueing everyone until every
//! answer comes too late.
//!
//! The `unbounded_queue` mistake makes the excess wait for a slot instead, in a queue with no bound: past capacity
//! the queue grows for as long as the overload lasts, every request waits behind it, and once the wait passes the
//! callers' timeout nothing useful is served at all. `/health` and `/metrics` are never refused nor queued.
//!
//! Not for the dependency's side (the bulkhead bounds the calls to each operation) nor a rate limiter: it bounds
//! concurrency, which a slow dependency raises without any more requests arriving.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use faultline_units::Dur;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

/// The `admission:` section of the demo's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdmissionConfig {
    /// Requests served at once, per instance (the process admits `instances` times this); the next one is refused
    /// with 503. Size it by Little's law: the rate the service can serve times the latency it serves it in, with
    /// headroom. The default only keeps memory bounded.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// The `Retry-After` of a refusal (rounded up to whole seconds).
    #[serde(default = "default_retry_after")]
    pub retry_after: Dur,
}

/// The most requests one instance serves at once when the scenario does not say.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1_000;

/// The largest limit accepted: far above anything one process serves.
pub const MAX_MAX_IN_FLIGHT: usize = 1_000_000;

fn default_max_in_flight() -> usize {
    DEFAULT_MAX_IN_FLIGHT
}

fn default_retry_after() -> Dur {
    Dur(Duration::from_secs(1))
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            retry_after: default_retry_after(),
        }
    }
}

/// The series admission reports on (`demo_requests_in_flight`, `demo_requests_queued`, `demo_requests_shed_total`).
#[derive(Debug, Clone, Default)]
pub struct AdmissionMetrics {
    /// Requests admitted and not yet answered.
    pub in_flight: Gauge,
    /// Requests waiting for a slot (only with the `unbounded_queue` mistake).
    pub queued: Gauge,
    /// Requests refused with 503.
    pub shed: Counter,
}

/// The front door's slots, shared by every connection.
#[derive(Debug, Clone)]
pub struct Admission {
    slots: Arc<Semaphore>,
    retry_after: Duration,
    /// The `unbounded_queue` mistake: wait for a slot instead of being refused.
    queue: bool,
    metrics: AdmissionMetrics,
}

impl Admission {
    /// Slots for `instances` instances of `config.max_in_flight` each.
    pub fn new(
        config: &AdmissionConfig,
        instances: usize,
        queue: bool,
        metrics: AdmissionMetrics,
    ) -> Self {
        let slots = config
            .max_in_flight
            .saturating_mul(instances)
            .min(Semaphore::MAX_PERMITS);
        Admission {
            slots: Arc::new(Semaphore::new(slots)),
            retry_after: config.retry_after.get(),
            queue,
            metrics,
        }
    }

    /// The refusal: 503, `Retry-After` in whole seconds (rounded up, at least 1), and why.
    fn refusal(&self) -> Response {
        let after = self.retry_after;
        let secs = (after.as_secs() + u64::from(after.subsec_nanos() > 0)).max(1);
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [(RETRY_AFTER, HeaderValue::from(secs))],
            "overloaded: every admission slot is taken, retry later\n",
        )
            .into_response()
    }
}

/// Lowers a gauge when dropped, also when the request is abandoned while it waits or runs.
struct Raised(Gauge);

impl Raised {
    fn new(g: &Gauge) -> Raised {
        g.inc();
        Raised(g.clone())
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The middleware: admits, queues (the mistake) or refuses each request.
pub async fn admit(State(admission): State<Admission>, request: Request, next: Next) -> Response {
    if matches!(request.uri().path(), "/health" | "/metrics") {
        return next.run(request).await;
    }
    let permit = match admission.slots.clone().try_acquire_owned() {
        Ok(permit) => permit,
        Err(_) if admission.queue => {
            let waiting = Raised::new(&admission.metrics.queued);
            let Ok(permit) = admission.slots.clone().acquire_owned().await else {
                return admission.refusal();
            };
            drop(waiting);
            permit
        }
        Err(_) => {
            admission.metrics.shed.inc();
            return admission.refusal();
        }
    };
    let _serving = Raised::new(&admission.metrics.in_flight);
    let response = next.run(request).await;
    drop(permit);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use tokio::sync::Notify;
    use tower::ServiceExt;

    /// A router whose `/slow` waits for `release`, behind admission of `max` slots.
    fn app(max: usize, queue: bool, release: Arc<Notify>) -> (Router, AdmissionMetrics) {
        let metrics = AdmissionMetrics::default();
        let config = AdmissionConfig {
            max_in_flight: max,
            retry_after: Dur(Duration::from_millis(1500)),
        };
        let admission = Admission::new(&config, 1, queue, metrics.clone());
        let router = Router::new()
            .route(
                "/slow",
                get(move || {
                    let release = release.clone();
                    async move {
                        release.notified().await;
                        "done"
                    }
                }),
            )
            .route("/health", get(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state(admission, admit));
        (router, metrics)
    }

    fn get_req(path: &str) -> Request {
        Request::builder().uri(path).body(Body::empty()).unwrap()
    }

    async fn until(what: impl Fn() -> bool) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while !what() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the condition held within 5 s");
    }

    /// Lets the running requests end one at a time, until `handles` have all ended; each must have been served.
    async fn release_all(
        release: &Notify,
        metrics: &AdmissionMetrics,
        handles: Vec<tokio::task::JoinHandle<Result<Response, std::convert::Infallible>>>,
    ) {
        for k in 1..=handles.len() {
            until(|| metrics.in_flight.get() >= 1).await;
            release.notify_one();
            until(|| handles.iter().filter(|h| h.is_finished()).count() == k).await;
        }
        for h in handles {
            assert_eq!(h.await.unwrap().unwrap().status(), StatusCode::OK);
        }
        assert_eq!((metrics.queued.get(), metrics.in_flight.get()), (0, 0));
    }

    #[tokio::test]
    async fn past_the_limit_a_request_is_refused_at_once_with_retry_after() {
        let release = Arc::new(Notify::new());
        let (router, metrics) = app(2, false, release.clone());
        let held: Vec<_> = (0..2)
            .map(|_| tokio::spawn(router.clone().oneshot(get_req("/slow"))))
            .collect();
        until(|| metrics.in_flight.get() == 2).await;
        let refused = router.clone().oneshot(get_req("/slow")).await.unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()[RETRY_AFTER], "2");
        assert_eq!(metrics.shed.get(), 1);
        // Health and metrics are never refused.
        let health = router.clone().oneshot(get_req("/health")).await.unwrap();
        assert_eq!(health.status(), StatusCode::OK);
        release_all(&release, &metrics, held).await;
        // The slots came back.
        let again = tokio::spawn(router.clone().oneshot(get_req("/slow")));
        release_all(&release, &metrics, vec![again]).await;
        assert_eq!(metrics.shed.get(), 1);
    }

    #[tokio::test]
    async fn with_an_unbounded_queue_the_excess_waits_for_a_slot_and_nothing_is_shed() {
        let release = Arc::new(Notify::new());
        let (router, metrics) = app(1, true, release.clone());
        let mut all = vec![tokio::spawn(router.clone().oneshot(get_req("/slow")))];
        until(|| metrics.in_flight.get() == 1).await;
        all.extend((0..3).map(|_| tokio::spawn(router.clone().oneshot(get_req("/slow")))));
        until(|| metrics.queued.get() == 3).await;
        assert_eq!((metrics.shed.get(), metrics.in_flight.get()), (0, 1));
        release_all(&release, &metrics, all).await;
        assert_eq!(metrics.shed.get(), 0);
    }
}
