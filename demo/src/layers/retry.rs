//! Retry layer: retries timeouts, transport errors and 5xx with exponential backoff and jitter, under a retry
//! budget (seed 000: "two retries per call triple the offered load ... retries need a budget").
//!
//! Not for 4xx (the request is wrong, repeating it will not help), a full bulkhead or a breaker refusal, and not
//! for deduplication: a retried write carries the same `Idempotency-Key`, and the dependency must honour it.
//! No retry is sent once the caller's deadline has passed, or would pass during the backoff: it would be work for
//! nobody (with the `no_deadline_propagation` mistake the demo does not know the deadline, and retries anyway).
//! The budget is shared with the hedge layer: a hedge is an extra call like a retry, and takes one from it.
//!
//! A write its dependency cannot de-duplicate (a Redis command: no idempotency key reaches the server) is retried
//! only after a [`CallError::NotApplied`], the one failure that proves it was not carried out; after a timeout or
//! a lost connection it may have been, and a retry would apply it twice. The `non_idempotent_retry` mistake retries
//! such a write like any other.
//!
//! The `unbudgeted_retries` mistake retries every retryable failure up to `max`, whatever the budget says. The
//! `no_backoff` mistake retries at once; `no_jitter` waits exactly the backoff, so callers who failed together
//! retry together (seed 000's lockstep). The `instant_reconnect` mistake retries a failed TLS handshake at once, [`INSTANT_RECONNECTS`] times, before the
//! policy is even asked: no backoff, no budget, whatever `max` says.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use rand::Rng;
use tower::{Layer, Service, ServiceExt};

use super::{CallError, DepRequest, Reply};
use crate::settings::RetryConfig;

/// Retries allowed beyond the budget's share, so a quiet operation can still retry once in a while
/// (Finagle's budgets have the same floor). The budget holds at most this many unspent retries.
pub const RETRY_RESERVE: f64 = 10.0;

/// A retry budget: every first attempt deposits `share` of a retry, every retry withdraws one. Over any stretch
/// of traffic, retries <= RETRY_RESERVE + share x first attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryBudget {
    share: f64,
    balance: f64,
}

impl RetryBudget {
    /// A budget letting retries be `share` (0.0..=1.0) of first attempts, starting with the full reserve.
    pub fn new(share: f64) -> Self {
        RetryBudget {
            share,
            balance: RETRY_RESERVE,
        }
    }

    /// Called for every first attempt.
    pub fn deposit(&mut self) {
        self.balance = (self.balance + self.share).min(RETRY_RESERVE);
    }

    /// Takes one retry from the budget, if there is one.
    pub fn try_withdraw(&mut self) -> bool {
        if self.balance >= 1.0 {
            self.balance -= 1.0;
            true
        } else {
            false
        }
    }
}

/// How many times the `instant_reconnect` mistake tries a failed handshake again within one attempt: a client
/// that reconnects "until it works", bounded only so that a test run stays a test run.
pub const INSTANT_RECONNECTS: u32 = 5;

/// The delay before retry number `retry` (1-based): `base` doubled each retry, scaled by `jitter` in [0.5, 1.0]
/// so that callers who failed together do not retry together.
pub fn backoff(base: Duration, retry: u32, jitter: f64) -> Duration {
    let exponential = base.saturating_mul(1u32 << (retry.saturating_sub(1)).min(16));
    exponential.mul_f64(jitter.clamp(0.5, 1.0))
}

/// One operation's retry budget, shared by its retry and hedge layers.
pub type SharedBudget = Arc<Mutex<RetryBudget>>;

/// Takes one extra call (a retry or a hedge) from `budget`, if it has one.
pub fn withdraw(budget: &SharedBudget) -> bool {
    budget.lock().map(|mut b| b.try_withdraw()).unwrap_or(false)
}

/// The retry mistakes that change when a retry is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Spacing {
    /// Exponential backoff with jitter in [50%, 100%] of it (recommended).
    #[default]
    Jittered,
    /// Exactly the backoff: the `no_jitter` mistake.
    Lockstep,
    /// At once: the `no_backoff` mistake.
    Immediate,
}

impl Spacing {
    /// The wait before retry number `retry`.
    pub fn delay(self, base: Duration, retry: u32) -> Duration {
        match self {
            Spacing::Jittered => backoff(base, retry, rand::rng().random_range(0.5..=1.0)),
            Spacing::Lockstep => backoff(base, retry, 1.0),
            Spacing::Immediate => Duration::ZERO,
        }
    }
}

/// The retry settings and counters shared by every clone of one operation's retry service.
#[derive(Debug)]
pub struct RetryPolicy {
    max: u32,
    base: Duration,
    budget: SharedBudget,
    unbudgeted: bool,
    spacing: Spacing,
    instant_reconnect: bool,
    only_unapplied: bool,
    first: Counter,
    retried: Counter,
    denied: Counter,
}

impl RetryPolicy {
    /// From the operation's retry configuration; `unbudgeted` is the `unbudgeted_retries` mistake. The counters
    /// count first attempts, retries sent and retries the budget refused.
    pub fn new(
        config: &RetryConfig,
        unbudgeted: bool,
        first: Counter,
        retried: Counter,
        denied: Counter,
    ) -> Self {
        RetryPolicy {
            max: config.max,
            base: config.backoff.get(),
            budget: Arc::new(Mutex::new(RetryBudget::new(config.budget.fraction()))),
            unbudgeted,
            spacing: Spacing::Jittered,
            instant_reconnect: false,
            only_unapplied: false,
            first,
            retried,
            denied,
        }
    }

    /// With the `instant_reconnect` mistake: every failed handshake is tried again at once.
    pub fn reconnecting_at_once(mut self, on: bool) -> Self {
        self.instant_reconnect = on;
        self
    }

    /// For a write the dependency cannot de-duplicate: only failures that prove it was not carried out are
    /// retried.
    pub fn retrying_only_unapplied(mut self, on: bool) -> Self {
        self.only_unapplied = on;
        self
    }

    /// Whether `error` may be followed by another attempt.
    fn retries(&self, error: &CallError) -> bool {
        if self.only_unapplied {
            matches!(error, CallError::NotApplied(_))
        } else {
            error.is_retryable()
        }
    }

    /// With the `no_backoff` or `no_jitter` mistake: when retries are sent.
    pub fn spaced(mut self, spacing: Spacing) -> Self {
        self.spacing = spacing;
        self
    }

    /// The operation's budget, for the hedge layer to share; `None` with `unbudgeted_retries`, which ignores it.
    pub fn budget(&self) -> Option<SharedBudget> {
        (!self.unbudgeted).then(|| self.budget.clone())
    }

    fn deposit(&self) {
        if let Ok(mut b) = self.budget.lock() {
            b.deposit();
        }
    }

    fn may_retry(&self) -> bool {
        if self.unbudgeted {
            return true;
        }
        let allowed = withdraw(&self.budget);
        if !allowed {
            self.denied.inc();
        }
        allowed
    }
}

/// Builds [`Retry`] services sharing one policy (one budget per operation and instance).
#[derive(Debug, Clone)]
pub struct RetryLayer {
    policy: Arc<RetryPolicy>,
}

impl RetryLayer {
    /// A layer applying `policy`.
    pub fn new(policy: RetryPolicy) -> Self {
        RetryLayer {
            policy: Arc::new(policy),
        }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;
    fn layer(&self, inner: S) -> Retry<S> {
        Retry {
            inner,
            policy: self.policy.clone(),
        }
    }
}

/// Makes the call, and retries it while it fails retryably, `max` allows and the budget agrees.
#[derive(Debug, Clone)]
pub struct Retry<S> {
    inner: S,
    policy: Arc<RetryPolicy>,
}

impl<S> Service<DepRequest> for Retry<S>
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
        let policy = self.policy.clone();
        Box::pin(async move {
            policy.deposit();
            policy.first.inc();
            let mut result = attempt(inner.clone(), &req, &policy).await;
            for retry in 1..=policy.max {
                match &result {
                    Err(e) if policy.retries(e) => {}
                    _ => break,
                }
                let delay = policy.spacing.delay(policy.base, retry);
                if req.context.given_up_by(tokio::time::Instant::now() + delay) {
                    break;
                }
                if !policy.may_retry() {
                    break;
                }
                tokio::time::sleep(delay).await;
                policy.retried.inc();
                result = attempt(inner.clone(), &req, &policy).await;
            }
            result
        })
    }
}

/// One attempt; with the `instant_reconnect` mistake, a failed handshake is followed at once by another, up to
/// [`INSTANT_RECONNECTS`] more, each counted as a retry.
async fn attempt<S>(inner: S, req: &DepRequest, policy: &RetryPolicy) -> Result<Reply, CallError>
where
    S: Service<DepRequest, Response = Reply, Error = CallError> + Clone,
{
    let mut result = inner.clone().oneshot(req.clone()).await;
    if policy.instant_reconnect {
        for _ in 0..INSTANT_RECONNECTS {
            if !matches!(result, Err(CallError::Handshake(_))) {
                break;
            }
            policy.retried.inc();
            result = inner.clone().oneshot(req.clone()).await;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::mock::{ok, status, Dependency};
    use axum::http::Method;
    use bytes::Bytes;
    use faultline_units::{Dur, Share};

    fn req() -> DepRequest {
        DepRequest {
            method: Method::POST,
            path: "/payments/charge".into(),
            body: Bytes::from_static(b"{}"),
            key: String::new(),
            idempotency_key: Some("k-1".into()),
            context: Default::default(),
        }
    }

    fn config(max: u32, budget: f64) -> RetryConfig {
        RetryConfig {
            max,
            backoff: Dur::from_millis(50),
            budget: Share::from_fraction(budget),
        }
    }

    fn layer(max: u32, budget: f64, unbudgeted: bool) -> (RetryLayer, Counter, Counter) {
        let (first, retried) = (Counter::default(), Counter::default());
        let policy = RetryPolicy::new(
            &config(max, budget),
            unbudgeted,
            first.clone(),
            retried.clone(),
            Counter::default(),
        );
        (RetryLayer::new(policy), first, retried)
    }

    #[test]
    fn backoff_doubles_each_retry_and_jitter_stays_within_half_to_full() {
        let base = Duration::from_millis(50);
        assert_eq!(backoff(base, 1, 1.0), Duration::from_millis(50));
        assert_eq!(backoff(base, 2, 1.0), Duration::from_millis(100));
        assert_eq!(backoff(base, 3, 1.0), Duration::from_millis(200));
        assert_eq!(backoff(base, 3, 0.5), Duration::from_millis(100));
        assert_eq!(
            backoff(base, 1, 0.1),
            Duration::from_millis(25),
            "jitter is clamped to [0.5, 1]"
        );
    }

    #[test]
    fn the_budget_allows_the_reserve_plus_its_share_of_first_attempts() {
        let mut b = RetryBudget::new(0.1);
        let mut allowed = 0;
        for _ in 0..1_000 {
            b.deposit();
            if b.try_withdraw() {
                allowed += 1;
            }
        }
        // Reserve of 10, then one retry per 10 first attempts: 10 + 99 (the first deposit refills a full reserve).
        assert!((100..=110).contains(&allowed), "{allowed}");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_5xx_until_success_with_the_same_idempotency_key() {
        let dep = Dependency::new(|n| {
            (
                Duration::from_millis(10),
                if n < 2 { status(503) } else { ok("charged") },
            )
        });
        let (layer, first, retried) = layer(2, 0.1, false);
        let svc = layer.layer(dep.clone());
        let start = tokio::time::Instant::now();
        assert_eq!(
            svc.oneshot(req()).await.unwrap().body,
            Bytes::from_static(b"charged")
        );
        assert_eq!(dep.calls(), 3);
        assert_eq!((first.get(), retried.get()), (1, 2));
        let keys: Vec<_> = dep
            .seen
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.idempotency_key.clone())
            .collect();
        assert!(keys.iter().all(|k| k.as_deref() == Some("k-1")));
        // 3 x 10 ms of calls, plus backoffs of 25..50 ms and 50..100 ms.
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(30 + 25 + 50)
                && elapsed <= Duration::from_millis(30 + 50 + 100),
            "{elapsed:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn client_errors_and_refusals_are_not_retried() {
        for (result, name) in [
            (status(404), "404"),
            (Err(CallError::BulkheadFull), "bulkhead"),
        ] {
            let dep = Dependency::new(move |_| (Duration::ZERO, result.clone()));
            let (layer, _, _) = layer(2, 1.0, false);
            let _ = layer.layer(dep.clone()).oneshot(req()).await;
            assert_eq!(dep.calls(), 1, "{name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_spent_budget_stops_retries_so_a_dead_dependency_sees_about_one_call_per_request() {
        let dep = Dependency::new(|_| (Duration::from_millis(1), status(503)));
        let (layer, _, _) = layer(2, 0.1, false);
        for _ in 0..1_000 {
            let _ = layer.layer(dep.clone()).oneshot(req()).await;
        }
        // At most reserve + 10% of 1,000 retries: 1,000 + 110 calls, against 3,000 without a budget.
        assert!(dep.calls() <= 1_110, "{}", dep.calls());
        assert!(dep.calls() >= 1_090, "{}", dep.calls());
    }

    #[tokio::test(start_paused = true)]
    async fn unbudgeted_retries_triple_the_load_on_a_dead_dependency() {
        let dep = Dependency::new(|_| (Duration::from_millis(1), status(503)));
        let (layer, _, _) = layer(2, 0.1, true);
        for _ in 0..1_000 {
            let _ = layer.layer(dep.clone()).oneshot(req()).await;
        }
        assert_eq!(dep.calls(), 3_000);
    }

    #[tokio::test(start_paused = true)]
    async fn max_zero_makes_exactly_one_attempt() {
        let dep = Dependency::new(|_| (Duration::ZERO, status(500)));
        let (layer, _, _) = layer(0, 1.0, true);
        assert_eq!(
            layer.layer(dep.clone()).oneshot(req()).await,
            Err(CallError::Status(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR
            ))
        );
        assert_eq!(dep.calls(), 1);
    }

    /// Two retries with a budget that allows them; only failures that prove nothing was done are retried when
    /// `only_unapplied`.
    fn unrepeatable(only_unapplied: bool) -> RetryLayer {
        RetryLayer::new(
            RetryPolicy::new(
                &config(2, 1.0),
                false,
                Counter::default(),
                Counter::default(),
                Counter::default(),
            )
            .retrying_only_unapplied(only_unapplied),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn an_unrepeatable_write_is_retried_after_loading_but_never_after_a_timeout_or_a_refusal()
    {
        let loading = || Err(CallError::NotApplied("LOADING".into()));
        let dep =
            Dependency::new(move |n| (Duration::ZERO, if n < 2 { loading() } else { ok("1") }));
        let answer = unrepeatable(true).layer(dep.clone()).oneshot(req()).await;
        assert_eq!(answer.unwrap().body, Bytes::from_static(b"1"));
        assert_eq!(
            dep.calls(),
            3,
            "-LOADING: the command never ran, so it is sent again"
        );
        for failure in [
            CallError::Timeout(Duration::from_millis(100)),
            CallError::Transport("connection reset".into()),
            CallError::Refused("OOM command not allowed".into()),
        ] {
            let result = Err(failure.clone());
            let dep = Dependency::new(move |_| (Duration::ZERO, result.clone()));
            let answer = unrepeatable(true).layer(dep.clone()).oneshot(req()).await;
            assert_eq!(answer, Err(failure.clone()));
            assert_eq!(dep.calls(), 1, "{failure}: sent once");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn non_idempotent_retry_sends_a_timed_out_write_again() {
        let dep = Dependency::new(|_| {
            (
                Duration::ZERO,
                Err(CallError::Timeout(Duration::from_millis(100))),
            )
        });
        let _ = unrepeatable(false).layer(dep.clone()).oneshot(req()).await;
        assert_eq!(dep.calls(), 3, "the write went out three times");
    }

    /// No retries, no budget, and the `instant_reconnect` mistake.
    fn reconnecting() -> RetryLayer {
        RetryLayer::new(
            RetryPolicy::new(
                &config(0, 0.0),
                false,
                Counter::default(),
                Counter::default(),
                Counter::default(),
            )
            .reconnecting_at_once(true),
        )
    }

    fn handshake_failed() -> Result<Reply, CallError> {
        Err(CallError::Handshake(
            "invalid peer certificate: Expired".into(),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn instant_reconnect_retries_a_failed_handshake_at_once_whatever_the_budget_and_max() {
        let dep = Dependency::new(|_| (Duration::from_millis(1), handshake_failed()));
        let (first, retried) = (Counter::default(), Counter::default());
        let policy = RetryPolicy::new(
            &config(0, 0.0),
            false,
            first.clone(),
            retried.clone(),
            Counter::default(),
        )
        .reconnecting_at_once(true);
        let svc = RetryLayer::new(policy).layer(dep.clone());
        let start = tokio::time::Instant::now();
        let result = svc.oneshot(req()).await;
        assert!(matches!(result, Err(CallError::Handshake(_))), "{result:?}");
        assert_eq!(dep.calls(), 1 + INSTANT_RECONNECTS as usize);
        assert_eq!(
            (first.get(), retried.get()),
            (1, u64::from(INSTANT_RECONNECTS))
        );
        // No backoff: only the calls' own millisecond each.
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(1 + u64::from(INSTANT_RECONNECTS))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn instant_reconnect_stops_at_the_first_handshake_that_works_and_leaves_other_failures_alone(
    ) {
        let dep = Dependency::new(|n| {
            (
                Duration::ZERO,
                if n < 2 {
                    handshake_failed()
                } else {
                    ok("price")
                },
            )
        });
        let reply = reconnecting()
            .layer(dep.clone())
            .oneshot(req())
            .await
            .unwrap();
        assert_eq!(reply.body, Bytes::from_static(b"price"));
        assert_eq!(dep.calls(), 3);
        let dep = Dependency::new(|_| (Duration::ZERO, status(503)));
        let _ = reconnecting().layer(dep.clone()).oneshot(req()).await;
        assert_eq!(dep.calls(), 1, "a 503 is not a handshake");
    }

    #[tokio::test(start_paused = true)]
    async fn without_the_mistake_a_failed_handshake_is_retried_like_any_transport_error() {
        let dep = Dependency::new(|_| (Duration::ZERO, handshake_failed()));
        let (layer, _, retried) = layer(2, 1.0, false);
        let _ = layer.layer(dep.clone()).oneshot(req()).await;
        assert_eq!(dep.calls(), 3);
        assert_eq!(retried.get(), 2);
    }

    fn spaced(spacing: Spacing) -> RetryLayer {
        RetryLayer::new(
            RetryPolicy::new(
                &config(2, 1.0),
                false,
                Counter::default(),
                Counter::default(),
                Counter::default(),
            )
            .spaced(spacing),
        )
    }

    /// How long one request takes against a dependency failing every call in 10 ms, with two retries.
    async fn failing_request(layer: &RetryLayer, req: DepRequest) -> (Duration, usize) {
        let dep = Dependency::new(|_| (Duration::from_millis(10), status(503)));
        let start = tokio::time::Instant::now();
        let _ = layer.layer(dep.clone()).oneshot(req).await;
        (start.elapsed(), dep.calls())
    }

    #[tokio::test(start_paused = true)]
    async fn no_backoff_retries_the_moment_a_call_fails() {
        let (elapsed, calls) = failing_request(&spaced(Spacing::Immediate), req()).await;
        assert_eq!(calls, 3);
        assert_eq!(
            elapsed,
            Duration::from_millis(30),
            "three 10 ms calls back to back"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_jitter_retries_exactly_at_the_backoff_so_every_request_keeps_the_same_step() {
        for _ in 0..20 {
            let (elapsed, calls) = failing_request(&spaced(Spacing::Lockstep), req()).await;
            assert_eq!(calls, 3);
            assert_eq!(elapsed, Duration::from_millis(30 + 50 + 100));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn jittered_retries_spread_between_half_and_all_of_the_backoff() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..20 {
            let (elapsed, _) = failing_request(&spaced(Spacing::Jittered), req()).await;
            assert!(
                elapsed >= Duration::from_millis(30 + 25 + 50)
                    && elapsed <= Duration::from_millis(30 + 50 + 100),
                "{elapsed:?}"
            );
            seen.insert(elapsed);
        }
        assert!(
            seen.len() > 10,
            "20 requests, {} distinct timings",
            seen.len()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_retry_is_sent_that_would_start_after_the_caller_gave_up() {
        let with_deadline = |ms: u64| {
            let mut r = req();
            r.context.deadline = Some(tokio::time::Instant::now() + Duration::from_millis(ms));
            r
        };
        // 10 ms call + a 50 ms backoff ends at 60 ms, within 100 ms; the second retry would start at 170 ms.
        let (_, calls) = failing_request(&spaced(Spacing::Lockstep), with_deadline(100)).await;
        assert_eq!(calls, 2);
        // 10 ms call + at least 25 ms of backoff passes a 30 ms deadline: no retry at all.
        let (elapsed, calls) = failing_request(&spaced(Spacing::Jittered), with_deadline(30)).await;
        assert_eq!((calls, elapsed), (1, Duration::from_millis(10)));
    }
}
