//! The circuit breaker's state machine: pure logic driven by an explicit `now`, with no I/O, no clock of its own
//! and no locking, so every transition is tested deterministically under paused tokio time.
//!
//! Not for calling anything, publishing metrics or sharing state between tasks: the breaker *layer*
//! (`layers::breaker`) owns a `Mutex<Breaker>`, asks it for a permit before each call, reports the outcome after,
//! and publishes the state changes this module returns.
//!
//! Semantics (Resilience4j's vocabulary):
//! - Closed: calls pass; their outcomes go into a time-based sliding window of `window`. Once the window holds at
//!   least `min_calls` calls, the breaker opens when failures / calls >= `failure_rate` or slow / calls >=
//!   `slow_call_rate`. Failures are 5xx, timeouts and transport errors; 4xx are successful calls (the dependency
//!   answered). A call is slow when it took longer than `slow_call_duration`, whatever its result.
//! - Open: every call is rejected without touching the network. After `open_for`, the next call moves the
//!   breaker to half-open (lazily, like Resilience4j without the automatic transition).
//! - Half-open: at most `half_open_calls` probes in flight at once; the rest are rejected. A failed or slow probe
//!   re-opens it for another `open_for`; `close_after` successful probes close it with an empty window. With
//!   `recovery_rate` (hysteresis), it instead waits for `close_after` probe outcomes and closes only if their
//!   failure rate is below `recovery_rate`, re-opening as soon as that can no longer happen.
//! - Every transition starts a new epoch; outcomes of calls admitted in an earlier epoch (a slow call that ends
//!   after the breaker opened, a probe that ends after it closed) are ignored, so the window of a state only holds
//!   calls admitted in it.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::config::Mistake;
use crate::settings::BreakerConfig;

/// The three states, with the label values used in metrics and transition events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Calls pass; outcomes are counted.
    Closed,
    /// Calls are refused without touching the network.
    Open,
    /// A few probe calls pass to test recovery.
    HalfOpen,
}

impl BreakerState {
    /// `closed`, `open` or `half_open`: the label value in metrics, logs and webhook events.
    pub fn label(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    /// The value of the `circuit_breaker_state` gauge: 0 closed, 1 open, 2 half-open (seed 002's convention).
    pub fn gauge(self) -> i64 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::Open => 1,
            BreakerState::HalfOpen => 2,
        }
    }
}

/// The breaker's effective parameters: the configuration with the mistake switches that touch the breaker applied.
/// Durations are plain `Duration`s and shares fractions, converted once here.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Failure rate threshold.
    pub failure_rate: f64,
    /// Sliding window length.
    pub window: Duration,
    /// Minimum number of calls before the rates count.
    pub min_calls: u32,
    /// Wait duration in open state.
    pub open_for: Duration,
    /// Probes in flight at once in half-open.
    pub half_open_calls: u32,
    /// Successful probes needed to close.
    pub close_after: u32,
    /// Slow call duration threshold.
    pub slow_call_duration: Duration,
    /// Slow call rate threshold.
    pub slow_call_rate: f64,
    /// Hysteresis: the probe failure rate to stay under to close.
    pub recovery_rate: Option<f64>,
    /// Mistake `count_4xx`: client errors are failures.
    pub count_4xx: bool,
    /// Mistake `bare_count`: trip on `min_calls` failures (or slow calls) in the window, with no rate.
    pub bare_count: bool,
    /// Mistake `no_min_calls`: the rates are evaluated from the first call.
    pub no_min_calls: bool,
    /// Mistake `unlimited_half_open`: half-open admits every call.
    pub unlimited_half_open: bool,
    /// Mistake `slowness_ignored`: slow calls are never counted.
    pub slowness_ignored: bool,
    /// Mistake `close_on_first_success`: the first successful probe closes.
    pub close_on_first_success: bool,
}

impl Policy {
    /// The policy for a breaker configured with `config` under the given mistakes.
    pub fn new(config: &BreakerConfig, mistakes: &BTreeSet<Mistake>) -> Self {
        Policy {
            failure_rate: config.failure_rate.fraction(),
            window: config.window.get(),
            min_calls: config.min_calls,
            open_for: config.open_for.get(),
            half_open_calls: config.half_open_calls,
            close_after: config.close_after,
            slow_call_duration: config.slow_call_duration.get(),
            slow_call_rate: config.slow_call_rate.fraction(),
            recovery_rate: config.recovery_rate.map(|s| s.fraction()),
            count_4xx: mistakes.contains(&Mistake::Count4xx),
            bare_count: mistakes.contains(&Mistake::BareCount),
            no_min_calls: mistakes.contains(&Mistake::NoMinCalls),
            unlimited_half_open: mistakes.contains(&Mistake::UnlimitedHalfOpen),
            slowness_ignored: mistakes.contains(&Mistake::SlownessIgnored),
            close_on_first_success: mistakes.contains(&Mistake::CloseOnFirstSuccess),
        }
    }

    /// Whether a call with this outcome is a failure and whether it is slow, under this policy.
    pub fn classify(&self, outcome: Outcome) -> (bool, bool) {
        let failed = match outcome.verdict {
            Verdict::Success => false,
            Verdict::ClientError => self.count_4xx,
            Verdict::Failure => true,
        };
        let slow = !self.slowness_ignored && outcome.elapsed > self.slow_call_duration;
        (failed, slow)
    }
}

/// What the dependency did, before the policy decides whether it counts as a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// 2xx or 3xx.
    Success,
    /// 4xx: the caller's fault, not the dependency's (a failure only under `count_4xx`).
    ClientError,
    /// 5xx, a timeout, a refused or reset connection.
    Failure,
}

/// The outcome of one admitted call: what happened and how long it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// What the dependency did.
    pub verdict: Verdict,
    /// How long the call took, from admission to its end.
    pub elapsed: Duration,
}

impl Outcome {
    /// A successful call that took `elapsed`.
    pub fn success(elapsed: Duration) -> Self {
        Outcome {
            verdict: Verdict::Success,
            elapsed,
        }
    }
    /// A failed call (5xx, timeout, transport error) that took `elapsed`.
    pub fn failure(elapsed: Duration) -> Self {
        Outcome {
            verdict: Verdict::Failure,
            elapsed,
        }
    }
    /// A 4xx answer that took `elapsed`.
    pub fn client_error(elapsed: Duration) -> Self {
        Outcome {
            verdict: Verdict::ClientError,
            elapsed,
        }
    }
}

/// Permission to make one call; hand it back with [`Breaker::record`] or [`Breaker::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a permit must be recorded or released, or a half-open probe slot leaks"]
pub struct Permit {
    epoch: u64,
    probe: bool,
    /// The state the call was admitted in (closed or half-open).
    pub state: BreakerState,
}

/// A refusal: the breaker is open, or half-open with every probe slot taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    /// The breaker state this refers to.
    pub state: BreakerState,
}

/// A change of state at `at`, for the layer to publish (metric, log line, webhook).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateChange {
    /// The state left.
    pub from: BreakerState,
    /// The state entered.
    pub to: BreakerState,
    /// When it happened (the `now` of the call that caused it).
    pub at: Instant,
}

/// What the window holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowCounts {
    /// Calls in the window.
    pub calls: u32,
    /// Failed calls in the window.
    pub failures: u32,
    /// Slow calls in the window.
    pub slow: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Closed,
    Open {
        until: Instant,
    },
    HalfOpen {
        in_flight: u32,
        successes: u32,
        failures: u32,
        completed: u32,
    },
}

/// Calls of the last `window`, exact (one entry per call): at 500 calls/s over 10 s that is 5,000 entries of 24
/// bytes, and exactness is what makes the tests able to say "the 20th call trips it".
#[derive(Debug, Clone, Default)]
struct Window {
    calls: VecDeque<(Instant, bool, bool)>,
    counts: WindowCounts,
}

impl Window {
    fn push(&mut self, at: Instant, failed: bool, slow: bool) {
        self.calls.push_back((at, failed, slow));
        self.counts.calls += 1;
        self.counts.failures += failed as u32;
        self.counts.slow += slow as u32;
    }

    /// Forgets calls that ended `window` or more before `now`.
    fn prune(&mut self, now: Instant, window: Duration) {
        while let Some(&(at, failed, slow)) = self.calls.front() {
            if now.saturating_duration_since(at) < window {
                break;
            }
            self.calls.pop_front();
            self.counts.calls -= 1;
            self.counts.failures -= failed as u32;
            self.counts.slow -= slow as u32;
        }
    }

    fn clear(&mut self) {
        self.calls.clear();
        self.counts = WindowCounts::default();
    }
}

/// One circuit breaker: a state, a sliding window and a policy.
#[derive(Debug, Clone)]
pub struct Breaker {
    policy: Policy,
    phase: Phase,
    epoch: u64,
    window: Window,
}

impl Breaker {
    /// A closed breaker with an empty window.
    pub fn new(policy: Policy) -> Self {
        Breaker {
            policy,
            phase: Phase::Closed,
            epoch: 0,
            window: Window::default(),
        }
    }

    /// The policy this breaker follows.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The current state (an open breaker whose `open_for` has passed stays open until the next call asks).
    pub fn state(&self) -> BreakerState {
        match self.phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// The closed window's counts as of `now`.
    pub fn window_counts(&mut self, now: Instant) -> WindowCounts {
        self.window.prune(now, self.policy.window);
        self.window.counts
    }

    /// Asks to make a call at `now`. May move an open breaker whose wait is over to half-open (returned as the
    /// state change, which happens before the admission decision).
    pub fn try_acquire(&mut self, now: Instant) -> (Result<Permit, Rejected>, Option<StateChange>) {
        let mut change = None;
        if let Phase::Open { until } = self.phase {
            if now < until {
                return (
                    Err(Rejected {
                        state: BreakerState::Open,
                    }),
                    None,
                );
            }
            change = Some(self.enter(
                Phase::HalfOpen {
                    in_flight: 0,
                    successes: 0,
                    failures: 0,
                    completed: 0,
                },
                now,
            ));
        }
        let admission = match &mut self.phase {
            Phase::Closed => Ok(Permit {
                epoch: self.epoch,
                probe: false,
                state: BreakerState::Closed,
            }),
            Phase::HalfOpen { in_flight, .. } => {
                if self.policy.unlimited_half_open || *in_flight < self.policy.half_open_calls {
                    *in_flight += 1;
                    Ok(Permit {
                        epoch: self.epoch,
                        probe: true,
                        state: BreakerState::HalfOpen,
                    })
                } else {
                    Err(Rejected {
                        state: BreakerState::HalfOpen,
                    })
                }
            }
            Phase::Open { .. } => Err(Rejected {
                state: BreakerState::Open,
            }),
        };
        (admission, change)
    }

    /// Reports the outcome of a call admitted with `permit`, at `now` (when it ended).
    pub fn record(
        &mut self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
    ) -> Option<StateChange> {
        if permit.epoch != self.epoch {
            return None;
        }
        let (failed, slow) = self.policy.classify(outcome);
        match self.phase {
            Phase::Closed => {
                self.window.push(now, failed, slow);
                self.window.prune(now, self.policy.window);
                self.should_trip().then(|| {
                    self.enter(
                        Phase::Open {
                            until: now + self.policy.open_for,
                        },
                        now,
                    )
                })
            }
            Phase::HalfOpen {
                in_flight,
                successes,
                failures,
                completed,
            } => {
                let bad = failed || slow;
                let in_flight = in_flight.saturating_sub(1);
                let successes = successes + u32::from(!bad);
                let failures = failures + u32::from(bad);
                let completed = completed + 1;
                let reopen = Phase::Open {
                    until: now + self.policy.open_for,
                };
                let next = match self.policy.recovery_rate {
                    Some(_) if self.policy.close_on_first_success => {
                        if bad {
                            reopen
                        } else {
                            Phase::Closed
                        }
                    }
                    None => {
                        let needed = if self.policy.close_on_first_success {
                            1
                        } else {
                            self.policy.close_after
                        };
                        if bad {
                            reopen
                        } else if successes >= needed {
                            Phase::Closed
                        } else {
                            Phase::HalfOpen {
                                in_flight,
                                successes,
                                failures,
                                completed,
                            }
                        }
                    }
                    Some(recovery) => {
                        let out_of = f64::from(self.policy.close_after);
                        if f64::from(failures) / out_of >= recovery {
                            reopen
                        } else if completed >= self.policy.close_after {
                            Phase::Closed
                        } else {
                            Phase::HalfOpen {
                                in_flight,
                                successes,
                                failures,
                                completed,
                            }
                        }
                    }
                };
                match next {
                    Phase::HalfOpen { .. } => {
                        self.phase = next;
                        None
                    }
                    _ => Some(self.enter(next, now)),
                }
            }
            Phase::Open { .. } => None,
        }
    }

    /// Hands back a permit whose call never produced an outcome (its caller went away, or an inner layer refused
    /// it before reaching the dependency). Frees the probe slot; counts nothing.
    pub fn release(&mut self, permit: Permit) {
        if permit.epoch != self.epoch || !permit.probe {
            return;
        }
        if let Phase::HalfOpen { in_flight, .. } = &mut self.phase {
            *in_flight = in_flight.saturating_sub(1);
        }
    }

    fn should_trip(&self) -> bool {
        let p = &self.policy;
        let c = self.window.counts;
        if p.bare_count {
            return c.failures >= p.min_calls || c.slow >= p.min_calls;
        }
        let floor = if p.no_min_calls { 1 } else { p.min_calls };
        if c.calls < floor || c.calls == 0 {
            return false;
        }
        let calls = f64::from(c.calls);
        f64::from(c.failures) / calls >= p.failure_rate
            || f64::from(c.slow) / calls >= p.slow_call_rate
    }

    fn enter(&mut self, next: Phase, now: Instant) -> StateChange {
        let from = self.state();
        self.phase = next;
        self.epoch += 1;
        self.window.clear();
        StateChange {
            from,
            to: self.state(),
            at: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_units::{Dur, Share};
    use BreakerState::{Closed, HalfOpen, Open};

    const MS: Duration = Duration::from_millis(1);
    const FAST: Duration = Duration::from_millis(10);

    // Seed 000's breaker as the demo runs it: 50% over 10 s, at least 20 calls, open 30 s, one probe, one
    // success closes; slow over 1 s counts at 100%.
    use crate::operation::seed_000_breaker as seed_000;

    fn breaker(config: &BreakerConfig, mistakes: &[Mistake]) -> Breaker {
        Breaker::new(Policy::new(config, &mistakes.iter().copied().collect()))
    }

    /// Makes one call at `now` that ends at once with `outcome`; returns the admission and the changes.
    fn call(b: &mut Breaker, now: Instant, outcome: Outcome) -> (bool, Vec<StateChange>) {
        let (admission, change) = b.try_acquire(now);
        let mut changes: Vec<StateChange> = change.into_iter().collect();
        match admission {
            Ok(permit) => {
                changes.extend(b.record(now, permit, outcome));
                (true, changes)
            }
            Err(_) => (false, changes),
        }
    }

    /// `n` calls spread `gap` apart from `start`; returns the instant after the last and every change.
    fn calls(
        b: &mut Breaker,
        start: Instant,
        gap: Duration,
        n: u32,
        outcome: Outcome,
    ) -> (Instant, Vec<StateChange>) {
        let mut now = start;
        let mut changes = Vec::new();
        for _ in 0..n {
            changes.extend(call(b, now, outcome).1);
            now += gap;
        }
        (now, changes)
    }

    fn trip(b: &mut Breaker, now: Instant) -> Instant {
        let (next, changes) = calls(b, now, MS, b.policy().min_calls, Outcome::failure(FAST));
        assert_eq!(b.state(), Open, "tripping helper: {changes:?}");
        next
    }

    #[tokio::test(start_paused = true)]
    async fn opens_within_window_when_half_the_calls_fail() {
        let mut b = breaker(&seed_000(), &[]);
        let t0 = Instant::now();
        let (now, changes) = calls(&mut b, t0, 100 * MS, 10, Outcome::success(FAST));
        assert!(changes.is_empty());
        let (_, changes) = calls(&mut b, now, 100 * MS, 9, Outcome::failure(FAST));
        assert!(changes.is_empty(), "19 calls are under the floor of 20");
        let (admitted, changes) = call(&mut b, t0 + 1_900 * MS, Outcome::failure(FAST));
        assert!(admitted);
        assert_eq!(
            changes,
            vec![StateChange {
                from: Closed,
                to: Open,
                at: t0 + 1_900 * MS
            }],
            "10 of 20 is 50%"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stays_closed_just_under_the_failure_rate() {
        let mut b = breaker(&seed_000(), &[]);
        let t0 = Instant::now();
        // 11 successes then 9 failures: 45% of 20.
        let (now, _) = calls(&mut b, t0, MS, 11, Outcome::success(FAST));
        let (now, changes) = calls(&mut b, now, MS, 9, Outcome::failure(FAST));
        assert!(changes.is_empty());
        assert_eq!(
            b.window_counts(now),
            WindowCounts {
                calls: 20,
                failures: 9,
                slow: 0
            }
        );
        assert_eq!(b.state(), Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn never_opens_below_the_minimum_number_of_calls_even_at_full_failure() {
        let mut b = breaker(&seed_000(), &[]);
        let t0 = Instant::now();
        // Seed 000: 0.1 rps per instance is one call per 10 s window; run 5 minutes of failures.
        let (_, changes) = calls(&mut b, t0, 10_000 * MS, 30, Outcome::failure(FAST));
        assert!(changes.is_empty());
        assert_eq!(b.state(), Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn forgets_calls_older_than_the_window() {
        let mut b = breaker(&seed_000(), &[]);
        let t0 = Instant::now();
        let (_, changes) = calls(&mut b, t0, MS, 19, Outcome::failure(FAST));
        assert!(changes.is_empty());
        // 10 s later the 19 failures have left the window: one more failure is 1 call, under the floor.
        let (_, changes) = call(&mut b, t0 + 10_018 * MS, Outcome::failure(FAST));
        assert!(changes.is_empty());
        assert_eq!(b.window_counts(t0 + 10_018 * MS).calls, 1);
        // Whereas inside the window the 20th failure trips it.
        let mut b = breaker(&seed_000(), &[]);
        calls(&mut b, t0, MS, 19, Outcome::failure(FAST));
        let (_, changes) = call(&mut b, t0 + 9_000 * MS, Outcome::failure(FAST));
        assert_eq!(changes.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_window_needs_the_calls_closer_together() {
        let mut config = seed_000();
        config.window = Dur::from_millis(1_000);
        let mut b = breaker(&config, &[]);
        let t0 = Instant::now();
        // 20 failures 100 ms apart span 1.9 s: never 20 in one second.
        let (_, changes) = calls(&mut b, t0, 100 * MS, 20, Outcome::failure(FAST));
        assert!(changes.is_empty());
        assert_eq!(b.window_counts(t0 + 1_900 * MS).calls, 10);
    }

    #[tokio::test(start_paused = true)]
    async fn open_rejects_every_call_until_open_for_has_passed() {
        let mut b = breaker(&seed_000(), &[]);
        let t0 = Instant::now();
        let opened = trip(&mut b, t0) - MS;
        for offset in [0, 1, 15_000, 29_999] {
            let (admission, change) = b.try_acquire(opened + offset * MS);
            assert_eq!(admission, Err(Rejected { state: Open }), "at +{offset} ms");
            assert!(change.is_none());
        }
        let (admission, change) = b.try_acquire(opened + 30_000 * MS);
        assert_eq!(admission.unwrap().state, HalfOpen);
        assert_eq!(
            change,
            Some(StateChange {
                from: Open,
                to: HalfOpen,
                at: opened + 30_000 * MS
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn open_for_sets_the_wait_before_half_open() {
        let mut config = seed_000();
        config.open_for = Dur::from_millis(5_000);
        let mut b = breaker(&config, &[]);
        let opened = trip(&mut b, Instant::now()) - MS;
        assert!(b.try_acquire(opened + 4_999 * MS).0.is_err());
        assert!(b.try_acquire(opened + 5_000 * MS).0.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn half_open_admits_only_the_permitted_probes_at_once() {
        let mut config = seed_000();
        config.half_open_calls = 3;
        config.close_after = 3;
        let mut b = breaker(&config, &[]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let now = opened + 30_000 * MS;
        let probes: Vec<Permit> = (0..3).map(|_| b.try_acquire(now).0.unwrap()).collect();
        for _ in 0..100 {
            assert_eq!(b.try_acquire(now).0, Err(Rejected { state: HalfOpen }));
        }
        // A finished probe frees its slot for the next one.
        assert_eq!(
            b.record(now + FAST, probes[0], Outcome::success(FAST)),
            None
        );
        assert!(b.try_acquire(now + FAST).0.is_ok());
        assert_eq!(
            b.try_acquire(now + FAST).0,
            Err(Rejected { state: HalfOpen })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn half_open_closes_after_the_required_successes_with_an_empty_window() {
        let mut config = seed_000();
        config.close_after = 3;
        let mut b = breaker(&config, &[]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let mut now = opened + 30_000 * MS;
        for i in 0..2 {
            let (admitted, changes) = call(&mut b, now, Outcome::success(FAST));
            assert!(admitted);
            assert!(
                changes.iter().all(|c| c.to == HalfOpen),
                "success {i} must not close: {changes:?}"
            );
            now += MS;
        }
        let (_, changes) = call(&mut b, now, Outcome::success(FAST));
        assert_eq!(
            changes,
            vec![StateChange {
                from: HalfOpen,
                to: Closed,
                at: now
            }]
        );
        assert_eq!(b.window_counts(now), WindowCounts::default());
    }

    #[tokio::test(start_paused = true)]
    async fn one_failed_probe_reopens_for_another_open_for() {
        let mut config = seed_000();
        config.close_after = 3;
        let mut b = breaker(&config, &[]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let now = opened + 30_000 * MS;
        call(&mut b, now, Outcome::success(FAST));
        let (_, changes) = call(&mut b, now + MS, Outcome::failure(FAST));
        assert_eq!(
            changes,
            vec![StateChange {
                from: HalfOpen,
                to: Open,
                at: now + MS
            }]
        );
        assert!(
            b.try_acquire(now + MS + 29_999 * MS).0.is_err(),
            "the timer restarted at the failed probe"
        );
        assert!(b.try_acquire(now + MS + 30_000 * MS).0.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_successful_probe_reopens() {
        let mut b = breaker(&seed_000(), &[]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let (_, changes) = call(&mut b, opened + 30_000 * MS, Outcome::success(1_500 * MS));
        assert_eq!(changes.last().unwrap().to, Open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_error_probe_counts_as_a_success() {
        let mut b = breaker(&seed_000(), &[]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let (_, changes) = call(&mut b, opened + 30_000 * MS, Outcome::client_error(FAST));
        assert_eq!(changes.last().unwrap().to, Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn client_errors_never_open_it() {
        let mut b = breaker(&seed_000(), &[]);
        let (_, changes) = calls(
            &mut b,
            Instant::now(),
            MS,
            1_000,
            Outcome::client_error(FAST),
        );
        assert!(changes.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn slow_successful_calls_open_it_at_the_slow_call_rate() {
        let mut config = seed_000();
        config.slow_call_rate = Share::from_fraction(0.3);
        config.slow_call_duration = Dur::from_millis(400);
        let mut b = breaker(&config, &[]);
        let t0 = Instant::now();
        // 14 fast + 5 slow (26%), then the 6th slow: 6 of 20 = 30%.
        let (now, _) = calls(&mut b, t0, MS, 14, Outcome::success(FAST));
        let (now, changes) = calls(&mut b, now, MS, 5, Outcome::success(500 * MS));
        assert!(changes.is_empty());
        let (_, changes) = call(&mut b, now, Outcome::success(500 * MS));
        assert_eq!(changes.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_exactly_at_the_slow_call_duration_is_not_slow() {
        let config = seed_000();
        let p = Policy::new(&config, &BTreeSet::new());
        assert_eq!(p.classify(Outcome::success(1_000 * MS)), (false, false));
        assert_eq!(p.classify(Outcome::success(1_001 * MS)), (false, true));
    }

    #[tokio::test(start_paused = true)]
    async fn stale_outcomes_from_before_a_transition_are_ignored() {
        let mut b = breaker(&seed_000(), &[]);
        let t0 = Instant::now();
        // 200 calls in flight when it trips (seed 000's pool): they end after it opened.
        let slow: Vec<Permit> = (0..200).map(|_| b.try_acquire(t0).0.unwrap()).collect();
        trip(&mut b, t0);
        let opened = t0 + 19 * MS;
        let half_open = opened + 30_000 * MS;
        let probe = b.try_acquire(half_open).0.unwrap();
        for p in slow {
            assert_eq!(
                b.record(half_open, p, Outcome::failure(2_000 * MS)),
                None,
                "an old call is not a probe"
            );
        }
        assert_eq!(b.state(), HalfOpen);
        assert_eq!(
            b.record(half_open + FAST, probe, Outcome::success(FAST))
                .unwrap()
                .to,
            Closed
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_probe_frees_its_slot_without_counting() {
        let mut b = breaker(&seed_000(), &[]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let now = opened + 30_000 * MS;
        let probe = b.try_acquire(now).0.unwrap();
        assert!(b.try_acquire(now).0.is_err());
        b.release(probe);
        assert_eq!(b.state(), HalfOpen);
        assert!(b.try_acquire(now).0.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn recovery_rate_closes_only_below_it_over_close_after_probes() {
        let mut config = seed_000();
        config.recovery_rate = Some(Share::from_fraction(0.2));
        config.close_after = 10;
        config.half_open_calls = 10;
        // One failure in ten probes is 10% < 20%: closes after the tenth.
        let mut b = breaker(&config, &[]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let mut now = opened + 30_000 * MS;
        let (_, changes) = call(&mut b, now, Outcome::failure(FAST));
        assert_eq!(
            changes.iter().map(|c| c.to).collect::<Vec<_>>(),
            vec![HalfOpen],
            "one failure does not reopen"
        );
        for _ in 0..8 {
            now += MS;
            assert!(call(&mut b, now, Outcome::success(FAST)).1.is_empty());
        }
        let (_, changes) = call(&mut b, now + MS, Outcome::success(FAST));
        assert_eq!(changes.last().unwrap().to, Closed);
        // Two failures in ten can no longer end below 20%: reopens at the second.
        let mut b = breaker(&config, &[]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let now = opened + 30_000 * MS;
        call(&mut b, now, Outcome::failure(FAST));
        call(&mut b, now + MS, Outcome::success(FAST));
        let (_, changes) = call(&mut b, now + 2 * MS, Outcome::failure(FAST));
        assert_eq!(
            changes,
            vec![StateChange {
                from: HalfOpen,
                to: Open,
                at: now + 2 * MS
            }]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_breaker_trips_again_on_a_fresh_window() {
        let mut b = breaker(&seed_000(), &[]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let now = opened + 30_000 * MS;
        call(&mut b, now, Outcome::success(FAST));
        assert_eq!(b.state(), Closed);
        let (_, changes) = calls(&mut b, now + MS, MS, 19, Outcome::failure(FAST));
        assert!(changes.is_empty(), "the window restarted empty at closing");
        let (_, changes) = call(&mut b, now + 20 * MS, Outcome::failure(FAST));
        assert_eq!(changes.last().unwrap().to, Open);
    }

    // ---------------------------------------------------------------------------------------------------------
    // Mistake switches: each changes its own behaviour, and nothing else.

    #[tokio::test(start_paused = true)]
    async fn count_4xx_opens_on_bad_user_input() {
        let mut b = breaker(&seed_000(), &[Mistake::Count4xx]);
        let (_, changes) = calls(&mut b, Instant::now(), MS, 20, Outcome::client_error(FAST));
        assert_eq!(changes.last().unwrap().to, Open);
    }

    #[tokio::test(start_paused = true)]
    async fn bare_count_opens_on_n_failures_hidden_in_high_volume() {
        // Seed 000: at 500 rps, 20 failures in 10 s is 0.4% of 5,000 calls.
        let mut b = breaker(&seed_000(), &[Mistake::BareCount]);
        let t0 = Instant::now();
        let mut now = t0;
        let mut changes = Vec::new();
        for i in 0..5_000u32 {
            let outcome = if i % 250 == 0 {
                Outcome::failure(FAST)
            } else {
                Outcome::success(FAST)
            };
            changes.extend(call(&mut b, now, outcome).1);
            now += 2 * MS;
        }
        assert_eq!(changes.len(), 1, "opens at the 20th failure: {changes:?}");
        assert_eq!(changes[0].at, t0 + 19 * 250 * 2 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn bare_count_never_opens_when_the_window_holds_fewer_calls_than_the_count() {
        // Seed 000: below 2 calls/s the window holds fewer than 20 calls, even at 100% failure.
        let mut b = breaker(&seed_000(), &[Mistake::BareCount]);
        let (_, changes) = calls(
            &mut b,
            Instant::now(),
            600 * MS,
            200,
            Outcome::failure(FAST),
        );
        assert!(changes.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn no_min_calls_opens_on_a_single_failure() {
        let mut b = breaker(&seed_000(), &[Mistake::NoMinCalls]);
        let (_, changes) = call(&mut b, Instant::now(), Outcome::failure(FAST));
        assert_eq!(
            changes.last().unwrap().to,
            Open,
            "one failure out of one is 100% (seed 000's 3am call)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_half_open_lets_every_call_through() {
        let mut b = breaker(&seed_000(), &[Mistake::UnlimitedHalfOpen]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let now = opened + 30_000 * MS;
        let admitted = (0..500).filter(|_| b.try_acquire(now).0.is_ok()).count();
        assert_eq!(admitted, 500);
    }

    #[tokio::test(start_paused = true)]
    async fn slowness_ignored_stays_closed_while_every_call_takes_two_seconds() {
        let mut b = breaker(&seed_000(), &[Mistake::SlownessIgnored]);
        let (now, changes) = calls(
            &mut b,
            Instant::now(),
            MS,
            100,
            Outcome::success(2_000 * MS),
        );
        assert!(changes.is_empty());
        assert_eq!(b.window_counts(now).slow, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn close_on_first_success_closes_on_one_probe_despite_close_after() {
        let mut config = seed_000();
        config.close_after = 3;
        let mut b = breaker(&config, &[Mistake::CloseOnFirstSuccess]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let (_, changes) = call(&mut b, opened + 30_000 * MS, Outcome::success(FAST));
        assert_eq!(changes.last().unwrap().to, Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn close_on_first_success_overrides_hysteresis_too() {
        let mut config = seed_000();
        config.close_after = 10;
        config.recovery_rate = Some(Share::from_fraction(0.2));
        let mut b = breaker(&config, &[Mistake::CloseOnFirstSuccess]);
        let opened = trip(&mut b, Instant::now()) - MS;
        let (_, changes) = call(&mut b, opened + 30_000 * MS, Outcome::success(FAST));
        assert_eq!(changes.last().unwrap().to, Closed);
    }

    /// A named sequence of calls, each replayed on a fresh breaker; the trace is every admission and change.
    struct Script {
        name: &'static str,
        /// The mistakes whose switch must change this script's trace; every other switch must leave it alone.
        exposes: &'static [Mistake],
        run: fn(&mut Breaker, Instant) -> Vec<String>,
    }

    fn trace(b: &mut Breaker, now: Instant, outcome: Outcome, log: &mut Vec<String>) {
        let (admitted, changes) = call(b, now, outcome);
        log.push(format!("{admitted}"));
        log.extend(changes.iter().map(|c| format!("{:?}->{:?}", c.from, c.to)));
    }

    /// 20 fast successes 1 ms apart: a window above the floor, so `no_min_calls` has nothing left to change.
    fn warm(b: &mut Breaker, t0: Instant, log: &mut Vec<String>) -> Instant {
        (0..20).for_each(|i| trace(b, t0 + i * MS, Outcome::success(FAST), log));
        t0 + 20 * MS
    }

    /// Warm, then failures 1 ms apart until it opens (20 failures: 50% of 40).
    fn warm_then_trip(b: &mut Breaker, t0: Instant, log: &mut Vec<String>) {
        let now = warm(b, t0, log);
        (0..20).for_each(|i| trace(b, now + i * MS, Outcome::failure(FAST), log));
    }

    fn scripts() -> Vec<Script> {
        vec![
            Script {
                name: "4xx storm",
                exposes: &[Mistake::Count4xx],
                run: |b, t0| {
                    let mut log = Vec::new();
                    (0..40).for_each(|i| {
                        trace(b, t0 + i * 10 * MS, Outcome::client_error(FAST), &mut log)
                    });
                    log
                },
            },
            Script {
                name: "high volume, 0.4% failures",
                exposes: &[Mistake::BareCount],
                run: |b, t0| {
                    let mut log = Vec::new();
                    for i in 0..5_000u32 {
                        let o = if i % 250 == 125 {
                            Outcome::failure(FAST)
                        } else {
                            Outcome::success(FAST)
                        };
                        trace(b, t0 + 2 * i * MS, o, &mut log);
                    }
                    log
                },
            },
            Script {
                name: "three calls, two failures",
                exposes: &[Mistake::NoMinCalls],
                run: |b, t0| {
                    let mut log = Vec::new();
                    trace(b, t0, Outcome::success(FAST), &mut log);
                    trace(b, t0 + MS, Outcome::failure(FAST), &mut log);
                    trace(b, t0 + 2 * MS, Outcome::failure(FAST), &mut log);
                    log
                },
            },
            Script {
                name: "half-open burst",
                exposes: &[Mistake::UnlimitedHalfOpen],
                run: |b, t0| {
                    let mut log = Vec::new();
                    warm_then_trip(b, t0, &mut log);
                    let at = t0 + 60_000 * MS;
                    for _ in 0..5 {
                        let (admission, change) = b.try_acquire(at);
                        log.push(format!(
                            "{:?} {:?}",
                            admission.map(|p| p.state),
                            change.map(|c| c.to)
                        ));
                    }
                    log
                },
            },
            Script {
                name: "two-second successes",
                exposes: &[Mistake::SlownessIgnored],
                run: |b, t0| {
                    let mut log = Vec::new();
                    let now = warm(b, t0, &mut log);
                    (0..40).for_each(|i| {
                        trace(b, now + i * MS, Outcome::success(2_000 * MS), &mut log)
                    });
                    log
                },
            },
            Script {
                name: "one good probe then a failure",
                exposes: &[Mistake::CloseOnFirstSuccess],
                run: |b, t0| {
                    let mut log = Vec::new();
                    warm_then_trip(b, t0, &mut log);
                    let at = t0 + 60_000 * MS;
                    trace(b, at, Outcome::success(FAST), &mut log);
                    trace(b, at + MS, Outcome::failure(FAST), &mut log);
                    log
                },
            },
            Script {
                name: "healthy traffic with rare 5xx",
                exposes: &[],
                run: |b, t0| {
                    let mut log = Vec::new();
                    for i in 0..4_000u32 {
                        let o = if i % 1_000 == 500 {
                            Outcome::failure(FAST)
                        } else {
                            Outcome::success(FAST)
                        };
                        trace(b, t0 + 5 * i * MS, o, &mut log);
                    }
                    log
                },
            },
            Script {
                name: "hard outage, failed probe, recovery",
                exposes: &[Mistake::CloseOnFirstSuccess],
                run: |b, t0| {
                    let mut log = Vec::new();
                    let now = warm(b, t0, &mut log);
                    (0..30).for_each(|i| {
                        trace(b, now + i * 10 * MS, Outcome::failure(FAST), &mut log)
                    });
                    let at = t0 + 40_000 * MS;
                    trace(b, at, Outcome::failure(FAST), &mut log);
                    let at = at + 30_000 * MS;
                    (0..30).for_each(|i| trace(b, at + i * MS, Outcome::success(FAST), &mut log));
                    log
                },
            },
        ]
    }

    #[tokio::test(start_paused = true)]
    async fn each_breaker_mistake_changes_exactly_the_behaviour_it_names() {
        let config = BreakerConfig {
            close_after: 2,
            half_open_calls: 2,
            slow_call_rate: Share::from_fraction(0.5),
            ..seed_000()
        };
        let breaker_mistakes = [
            Mistake::Count4xx,
            Mistake::BareCount,
            Mistake::NoMinCalls,
            Mistake::UnlimitedHalfOpen,
            Mistake::SlownessIgnored,
            Mistake::CloseOnFirstSuccess,
        ];
        let t0 = Instant::now();
        for m in breaker_mistakes {
            assert!(
                scripts().iter().any(|s| s.exposes.contains(&m)),
                "no script exposes `{}`",
                m.name()
            );
        }
        for script in scripts() {
            let baseline = (script.run)(&mut breaker(&config, &[]), t0);
            for m in breaker_mistakes {
                let with = (script.run)(&mut breaker(&config, &[m]), t0);
                if script.exposes.contains(&m) {
                    assert_ne!(
                        with,
                        baseline,
                        "`{}` must change script `{}`",
                        m.name(),
                        script.name
                    );
                } else {
                    assert_eq!(
                        with,
                        baseline,
                        "`{}` must not change script `{}`",
                        m.name(),
                        script.name
                    );
                }
            }
        }
        // The switches that live outside the state machine leave its policy exactly as it is.
        for m in [
            Mistake::NoTimeout,
            Mistake::SharedBreaker,
            Mistake::UnbudgetedRetries,
        ] {
            assert_eq!(
                Policy::new(&config, &[m].into_iter().collect()),
                Policy::new(&config, &BTreeSet::new()),
                "{}",
                m.name()
            );
        }
    }
}
