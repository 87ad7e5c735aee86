//! The breaker's effective parameters ([`Policy`]: the configured settings with the mistake switches that touch
//! the breaker applied) and how they judge one call's [`Outcome`]: whether it failed and whether it was slow.
//!
//! Not for counting outcomes or changing state: the state machine in `breaker` does that with what this says.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::config::Mistake;
use crate::settings::BreakerConfig;

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
