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
//! With `target_latency` the limit adapts, as TCP's congestion window does (additive increase, multiplicative
//! decrease): a request slower than the target cuts it by a tenth (at most once per target, so one slow wave is
//! one cut), and while requests answer faster it grows by about one per round of `limit` requests, never past
//! `max_in_flight` nor below one per instance. A service whose capacity shrinks (its dependency slowed) then sheds
//! earlier instead of serving everyone late.
//!
//! Not for the dependency's side (the bulkhead bounds the calls to each operation) nor a rate limiter: it bounds
//! concurrency, which a slow dependency raises without any more requests arriving.

use std::sync::{Arc, Mutex};
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
use tokio::time::Instant;

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
    /// When set, the limit adapts below `max_in_flight`: cut by 10% when a request takes longer than this, raised
    /// while requests answer faster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_latency: Option<Dur>,
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
            target_latency: None,
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
    /// The limit in force, for the whole process (`demo_admission_limit`).
    pub limit: Gauge,
}

/// The adaptive limit: additive increase while requests answer within the target, multiplicative decrease when
/// one does not.
#[derive(Debug)]
struct Adaptive {
    target: Duration,
    floor: f64,
    max: f64,
    /// The limit, and when it was last cut.
    state: Mutex<(f64, Option<Instant>)>,
}

/// What a slow request keeps of the limit.
const CUT: f64 = 0.9;

impl Adaptive {
    fn limit(&self) -> usize {
        self.state
            .lock()
            .map(|s| s.0 as usize)
            .unwrap_or(self.max as usize)
    }

    /// Adapts the limit to one request's time; returns the new limit.
    fn observe(&self, took: Duration, now: Instant) -> usize {
        let Ok(mut state) = self.state.lock() else {
            return self.max as usize;
        };
        let (limit, last_cut) = &mut *state;
        if took > self.target {
            if last_cut.is_none_or(|at| now.duration_since(at) >= self.target) {
                *limit = (*limit * CUT).max(self.floor);
                *last_cut = Some(now);
            }
        } else {
            *limit = (*limit + 1.0 / *limit).min(self.max);
        }
        *limit as usize
    }
}

/// The front door's slots, shared by every connection.
#[derive(Debug, Clone)]
pub struct Admission {
    slots: Arc<Semaphore>,
    adaptive: Option<Arc<Adaptive>>,
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
        metrics.limit.set(slots as i64);
        let adaptive = config.target_latency.map(|target| {
            Arc::new(Adaptive {
                target: target.get(),
                floor: instances.max(1) as f64,
                max: slots as f64,
                state: Mutex::new((slots as f64, None)),
            })
        });
        Admission {
            slots: Arc::new(Semaphore::new(slots)),
            adaptive,
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
    let serving = Raised::new(&admission.metrics.in_flight);
    let Some(adaptive) = admission.adaptive.clone() else {
        let response = next.run(request).await;
        drop((permit, serving));
        return response;
    };
    if !admission.queue && admission.metrics.in_flight.get() > adaptive.limit() as i64 {
        drop((permit, serving));
        admission.metrics.shed.inc();
        return admission.refusal();
    }
    let started = Instant::now();
    let response = next.run(request).await;
    let now = Instant::now();
    let limit = adaptive.observe(now.duration_since(started), now);
    admission.metrics.limit.set(limit as i64);
    drop((permit, serving));
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
            target_latency: None,
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

    #[test]
    fn the_adaptive_limit_is_cut_by_slow_requests_once_per_target_and_grows_back_while_they_are_fast(
    ) {
        let t0 = Instant::now();
        let a = Adaptive {
            target: Duration::from_millis(100),
            floor: 2.0,
            max: 20.0,
            state: Mutex::new((20.0, None)),
        };
        let slow = Duration::from_millis(300);
        assert_eq!(a.observe(slow, t0), 18);
        // The rest of the same slow wave does not cut again.
        assert_eq!(a.observe(slow, t0 + Duration::from_millis(50)), 18);
        let mut at = t0;
        for _ in 0..40 {
            at += Duration::from_millis(100);
            a.observe(slow, at);
        }
        assert_eq!(a.limit(), 2, "never below one per instance");
        // Each fast answer adds 1/limit, about one per round of `limit` requests: from 2 to 4 in 7 answers.
        for _ in 0..7 {
            a.observe(Duration::from_millis(10), at);
        }
        assert_eq!(a.limit(), 4);
        for _ in 0..1000 {
            a.observe(Duration::from_millis(10), at);
        }
        assert_eq!(a.limit(), 20, "never past max_in_flight");
    }

    #[tokio::test(start_paused = true)]
    async fn slow_answers_lower_the_adaptive_limit_so_a_burst_under_the_maximum_is_shed() {
        let metrics = AdmissionMetrics::default();
        let config = AdmissionConfig {
            max_in_flight: 10,
            retry_after: Dur(Duration::from_secs(1)),
            target_latency: Some(Dur(Duration::from_millis(20))),
        };
        let admission = Admission::new(&config, 1, false, metrics.clone());
        let router = Router::new()
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    "done"
                }),
            )
            .layer(axum::middleware::from_fn_with_state(admission, admit));
        let burst = |n: usize| {
            let handles: Vec<_> = (0..n)
                .map(|_| tokio::spawn(router.clone().oneshot(get_req("/slow"))))
                .collect();
            async move {
                let mut refused = 0;
                for h in handles {
                    if h.await.unwrap().unwrap().status() == StatusCode::SERVICE_UNAVAILABLE {
                        refused += 1;
                    }
                }
                refused
            }
        };
        // Each wave of 50 ms answers is slower than the 20 ms target: one cut of 10% per wave.
        assert_eq!(burst(10).await, 0);
        assert_eq!(metrics.limit.get(), 9);
        for _ in 0..4 {
            burst(5).await;
        }
        assert_eq!(metrics.limit.get(), 5, "10 x 0.9^5 = 5.9");
        let shed_before = metrics.shed.get();
        assert_eq!(
            burst(8).await,
            3,
            "a burst of 8 under a maximum of 10 meets a limit of 5"
        );
        assert_eq!(metrics.shed.get(), shed_before + 3);
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
