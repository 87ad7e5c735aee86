//! Hedge layer: when a call has not answered after a delay, sends another (up to `max` extra), takes the first
//! answer and cancels the rest (their futures are dropped, so the connection or stream is reset and the dependency
//! sees the call abandoned). The tail of a latency distribution is cut at the price of a few extra calls.
//!
//! The delay is fixed or `p95`: the running 95th percentile of the operation's last [`WINDOW`] answered calls.
//! With fewer than [`MIN_SAMPLES`] answers the operation's p95 is not known yet and it is not hedged (a hedge sent
//! at the operation's timeout would never be sent: the first call has ended by then). No hedge is sent after the
//! caller's deadline, and every hedge takes one retry from the operation's retry budget (shared with the retry
//! layer), so a sick dependency is not asked for twice its load; with `unbudgeted_retries`, hedges ignore the
//! budget as retries do.
//!
//! A failed call does not win while another is still in flight: the first success (or the caller's own error, a
//! 4xx) does; when every call sent has failed, the last failure is the answer, and the retry layer above decides.
//! Not for retrying: a hedge is sent while the first call is still running, a retry after it failed. The
//! `uncancelled_hedges` mistake spawns each call, so the losers run to their end with nobody waiting.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceExt};

use super::retry::{withdraw, SharedBudget};
use super::{CallError, DepRequest, Reply};
use crate::settings::{HedgeAfter, HedgeConfig};

/// The answered calls the running p95 is taken over: recent enough to follow a brownout within a second at the
/// rates scenarios use, large enough that its 95th percentile is not one outlier.
pub const WINDOW: usize = 100;

/// Answers needed before the running p95 is trusted: below 20, the 95th percentile is the slowest call seen.
pub const MIN_SAMPLES: usize = 20;

/// The last [`WINDOW`] latencies of one operation's answered calls.
#[derive(Debug, Default)]
pub struct LatencyWindow {
    recent: VecDeque<Duration>,
}

impl LatencyWindow {
    /// Adds one answered call's latency, forgetting the oldest beyond [`WINDOW`].
    pub fn record(&mut self, latency: Duration) {
        if self.recent.len() == WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(latency);
    }

    /// The 95th percentile (nearest rank) once [`MIN_SAMPLES`] calls have answered.
    pub fn p95(&self) -> Option<Duration> {
        if self.recent.len() < MIN_SAMPLES {
            return None;
        }
        let mut sorted: Vec<Duration> = self.recent.iter().copied().collect();
        sorted.sort_unstable();
        let rank = (sorted.len() * 95).div_ceil(100);
        sorted.get(rank.saturating_sub(1)).copied()
    }
}

/// One operation's hedging: its settings, latency window, the shared budget and the hedge counter.
#[derive(Debug)]
pub struct HedgePolicy {
    config: HedgeConfig,
    timeout: Option<Duration>,
    window: Mutex<LatencyWindow>,
    budget: Option<SharedBudget>,
    uncancelled: bool,
    sent: Counter,
}

impl HedgePolicy {
    /// Hedges as `config` says for an operation whose attempts time out after `timeout` (`None`: never);
    /// `budget` is the retry budget hedges draw on (`None`: unbudgeted); `sent` counts the hedges sent.
    pub fn new(
        config: HedgeConfig,
        timeout: Option<Duration>,
        budget: Option<SharedBudget>,
        sent: Counter,
    ) -> Self {
        HedgePolicy {
            config,
            timeout,
            window: Mutex::default(),
            budget,
            uncancelled: false,
            sent,
        }
    }

    /// With the `uncancelled_hedges` mistake: losing calls run to their end.
    pub fn uncancelled(mut self, on: bool) -> Self {
        self.uncancelled = on;
        self
    }

    /// How long to wait for an answer before the next hedge; `None` while the p95 is unknown, or when the delay
    /// reaches the attempt's timeout (the call has ended by then).
    fn delay(&self) -> Option<Duration> {
        let delay = match self.config.after {
            HedgeAfter::Fixed(d) => d.get(),
            HedgeAfter::P95 => self.window.lock().ok()?.p95()?,
        };
        match self.timeout {
            Some(t) if delay >= t => None,
            _ => Some(delay),
        }
    }

    fn record(&self, latency: Duration) {
        if let Ok(mut w) = self.window.lock() {
            w.record(latency);
        }
    }

    fn may_hedge(&self) -> bool {
        self.budget.as_ref().is_none_or(withdraw)
    }
}

/// Builds services that hedge each call as the policy says, or pass it straight through without one.
#[derive(Debug, Clone, Default)]
pub struct HedgeLayer {
    policy: Option<Arc<HedgePolicy>>,
}

impl HedgeLayer {
    /// A layer hedging as `policy` says, or not at all.
    pub fn new(policy: Option<HedgePolicy>) -> Self {
        HedgeLayer {
            policy: policy.map(Arc::new),
        }
    }
}

impl<S> Layer<S> for HedgeLayer
where
    S: Service<DepRequest, Response = Reply, Error = CallError> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    type Service = BoxCloneSyncService<DepRequest, Reply, CallError>;
    fn layer(&self, inner: S) -> Self::Service {
        let policy = self.policy.clone();
        BoxCloneSyncService::new(tower::service_fn(move |req: DepRequest| {
            let (inner, policy) = (inner.clone(), policy.clone());
            async move {
                match policy {
                    Some(policy) => race(inner, req, policy).await,
                    None => inner.oneshot(req).await,
                }
            }
        }))
    }
}

type CallFuture = Pin<Box<dyn Future<Output = (Result<Reply, CallError>, Instant)> + Send>>;

/// Whether an answer ends the race: a success or the caller's own error, not a failure another call may beat.
fn wins(result: &Result<Reply, CallError>) -> bool {
    !matches!(result, Err(e) if e.is_retryable())
}

/// One call and its hedges, until one wins or all have failed.
async fn race<S>(inner: S, req: DepRequest, policy: Arc<HedgePolicy>) -> Result<Reply, CallError>
where
    S: Service<DepRequest, Response = Reply, Error = CallError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let mut calls = FuturesUnordered::new();
    let mut last_sent = launch(&inner, &req, policy.uncancelled, &mut calls);
    let mut hedges = 0;
    loop {
        let next_hedge = (hedges < policy.config.max)
            .then(|| policy.delay())
            .flatten()
            .map(|d| last_sent + d);
        let timer = async {
            match next_hedge {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some((result, started)) = calls.next() => {
                policy.record(started.elapsed());
                if wins(&result) || calls.is_empty() {
                    // Returning drops `calls`, and with it every call still in flight.
                    return result;
                }
            }
            () = timer => {
                hedges += 1;
                if req.context.given_up_by(Instant::now()) || !policy.may_hedge() {
                    hedges = policy.config.max;
                    continue;
                }
                policy.sent.inc();
                last_sent = launch(&inner, &req, policy.uncancelled, &mut calls);
            }
        }
    }
}

/// Sends one call and adds it to the race; returns when it was sent.
fn launch<S>(
    inner: &S,
    req: &DepRequest,
    uncancelled: bool,
    calls: &mut FuturesUnordered<CallFuture>,
) -> Instant
where
    S: Service<DepRequest, Response = Reply, Error = CallError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let started = Instant::now();
    let call = inner.clone().oneshot(req.clone());
    let call: CallFuture = if uncancelled {
        // Spawned, the call outlives the race: dropping the handle detaches it, and it runs to its end.
        let handle = tokio::spawn(call);
        Box::pin(async move {
            let result = handle
                .await
                .unwrap_or_else(|e| Err(CallError::Transport(e.to_string())));
            (result, started)
        })
    } else {
        Box::pin(async move { (call.await, started) })
    };
    calls.push(call);
    started
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::mock::{get_price, ok, status, Dependency};
    use crate::layers::retry::RetryBudget;
    use bytes::Bytes;
    use faultline_units::Dur;
    use std::sync::atomic::Ordering;

    fn req() -> DepRequest {
        get_price()
    }

    fn policy(after: HedgeAfter, max: u32, budget: Option<SharedBudget>) -> HedgePolicy {
        HedgePolicy::new(
            HedgeConfig { after, max },
            Some(Duration::from_millis(250)),
            budget,
            Counter::default(),
        )
    }

    fn fixed(ms: u64) -> HedgeAfter {
        HedgeAfter::Fixed(Dur::from_millis(ms))
    }

    /// The first call takes 200 ms, every later one 30 ms.
    fn slow_first() -> Dependency {
        Dependency::new(|n| {
            let ms = if n == 0 { 200 } else { 30 };
            (
                Duration::from_millis(ms),
                ok(if n == 0 { "first" } else { "hedge" }),
            )
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedge_sent_after_the_delay_wins_and_the_slow_call_is_cancelled_at_once() {
        let dep = slow_first();
        let svc = HedgeLayer::new(Some(policy(fixed(50), 1, None))).layer(dep.clone());
        let start = Instant::now();
        let reply = svc.oneshot(req()).await.unwrap();
        assert_eq!(reply.body, Bytes::from_static(b"hedge"));
        assert_eq!(start.elapsed(), Duration::from_millis(50 + 30));
        assert_eq!((dep.calls(), dep.max_in_flight()), (2, 2));
        assert_eq!(
            dep.in_flight.load(Ordering::SeqCst),
            0,
            "the losing call was dropped with the winner's answer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_answers_before_the_delay_is_never_hedged() {
        let dep = Dependency::new(|_| (Duration::from_millis(40), ok("fast")));
        let svc = HedgeLayer::new(Some(policy(fixed(50), 2, None))).layer(dep.clone());
        svc.oneshot(req()).await.unwrap();
        assert_eq!(dep.calls(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn uncancelled_hedges_leave_the_loser_running_to_its_end() {
        let dep = slow_first();
        let policy = policy(fixed(50), 1, None).uncancelled(true);
        let svc = HedgeLayer::new(Some(policy)).layer(dep.clone());
        let start = Instant::now();
        svc.oneshot(req()).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(80));
        assert_eq!(
            dep.in_flight.load(Ordering::SeqCst),
            1,
            "the loser still runs"
        );
        tokio::time::sleep_until(start + Duration::from_millis(199)).await;
        assert_eq!(dep.in_flight.load(Ordering::SeqCst), 1, "until 200 ms");
        tokio::time::sleep_until(start + Duration::from_millis(201)).await;
        assert_eq!(
            dep.in_flight.load(Ordering::SeqCst),
            0,
            "where it ends, its own end"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_max_hedges_are_sent_and_a_failure_waits_for_the_others() {
        let dep = Dependency::new(|n| match n {
            0 => (Duration::from_millis(60), status(503)),
            _ => (Duration::from_millis(500), ok("slow")),
        });
        let svc = HedgeLayer::new(Some(policy(fixed(20), 2, None))).layer(dep.clone());
        let start = Instant::now();
        let reply = svc.oneshot(req()).await.unwrap();
        assert_eq!(reply.body, Bytes::from_static(b"slow"));
        assert_eq!(dep.calls(), 3, "the call and two hedges, no more");
        assert_eq!(start.elapsed(), Duration::from_millis(20 + 500));
    }

    #[tokio::test(start_paused = true)]
    async fn hedges_draw_on_the_retry_budget_and_stop_when_it_is_spent() {
        let budget: SharedBudget = Arc::new(Mutex::new(RetryBudget::new(0.0)));
        let svc = HedgeLayer::new(Some(policy(fixed(50), 1, Some(budget))));
        let dep = slow_first();
        let reserve = crate::layers::retry::RETRY_RESERVE as usize;
        for _ in 0..reserve + 5 {
            let dep = Dependency {
                calls: Arc::default(),
                ..dep.clone()
            };
            svc.layer(dep).oneshot(req()).await.unwrap();
        }
        // Each request's first call is its own counter's call 0 (200 ms): the reserve's hedges are sent, then none.
        let svc = svc.layer(dep.clone());
        svc.oneshot(req()).await.unwrap();
        assert_eq!(dep.calls(), 1, "the budget is spent: no hedge");
    }

    #[tokio::test(start_paused = true)]
    async fn p95_hedging_waits_for_enough_answers_then_hedges_at_the_running_p95() {
        let dep = Dependency::new(|n| {
            let ms = if n < MIN_SAMPLES { 10 } else { 200 };
            (Duration::from_millis(ms), ok("answer"))
        });
        let svc = HedgeLayer::new(Some(policy(HedgeAfter::P95, 1, None))).layer(dep.clone());
        for _ in 0..MIN_SAMPLES {
            svc.clone().oneshot(req()).await.unwrap();
        }
        assert_eq!(dep.calls(), MIN_SAMPLES, "no hedge before the p95 is known");
        let start = Instant::now();
        svc.oneshot(req()).await.unwrap();
        assert_eq!(dep.calls(), MIN_SAMPLES + 2, "hedged at the 10 ms p95");
        assert_eq!(start.elapsed(), Duration::from_millis(200));
    }

    #[test]
    fn the_window_keeps_the_last_hundred_latencies_and_its_p95_is_the_nearest_rank() {
        let mut w = LatencyWindow::default();
        for ms in 1..=19 {
            w.record(Duration::from_millis(ms));
        }
        assert_eq!(w.p95(), None);
        w.record(Duration::from_millis(20));
        assert_eq!(w.p95(), Some(Duration::from_millis(19)));
        for ms in 1_000..1_100 {
            w.record(Duration::from_millis(ms));
        }
        assert_eq!(w.p95(), Some(Duration::from_millis(1_094)));
    }
}
