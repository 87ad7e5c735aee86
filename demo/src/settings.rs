//! The settings of one dependency operation: its timeout, bulkhead, fallback, circuit breaker and retries, as
//! plain values a scenario writes and the layers read.
//!
//! Not for parsing, merging or validating them (`config` does that, from a scenario's partial overrides), nor for
//! the numbers themselves: each operation's recommended settings, with the seed they come from, are in
//! `operation`. Both use these types; keeping them apart from both lets neither reach into the other.

use faultline_units::{Dur, Share};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Everything about one dependency operation: its timeout, bulkhead, fallback, breaker and retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OperationConfig {
    /// Per-attempt timeout: seed 000 says ~3x the healthy p99 (80 ms p99 -> 250 ms).
    pub timeout: Dur,
    /// Bulkhead: at most this many calls of this operation in flight per instance; the excess is rejected at
    /// once (and served the fallback).
    pub pool: usize,
    /// What the caller gets when the call fails or is rejected.
    pub fallback: Fallback,
    /// The circuit breaker's parameters.
    pub breaker: BreakerConfig,
    /// Retries (max 0: none), wrapped by the breaker (seed 004).
    pub retries: RetryConfig,
    /// Hedged calls; off unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge: Option<HedgeConfig>,
}

/// Hedging: when a call has not answered after `after`, another is sent (up to `max` extra); the first answer
/// wins and the others are cancelled. Each hedge takes one retry from the operation's retry budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HedgeConfig {
    /// How long to wait for an answer before the next hedge: `p95` (the running 95th percentile of the
    /// operation's recent call latencies) or a duration (`100ms`).
    #[schemars(with = "String")]
    pub after: HedgeAfter,
    /// Extra calls at most per attempt.
    pub max: u32,
}

/// When a hedge is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HedgeAfter {
    /// The running p95 of the operation's recent call latencies.
    P95,
    /// A fixed delay.
    Fixed(Dur),
}

impl std::str::FromStr for HedgeAfter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "p95" => Ok(HedgeAfter::P95),
            other => other
                .parse::<Dur>()
                .map(HedgeAfter::Fixed)
                .map_err(|e| format!("expected p95 or a duration (100ms): {e}")),
        }
    }
}

impl std::fmt::Display for HedgeAfter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HedgeAfter::P95 => f.write_str("p95"),
            HedgeAfter::Fixed(d) => write!(f, "{d}"),
        }
    }
}

impl Serialize for HedgeAfter {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HedgeAfter {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The circuit breaker's parameters, in Resilience4j's vocabulary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// Failure rate threshold: opens when at least this share of the calls in the window failed.
    pub failure_rate: Share,
    /// Sliding window (time-based): calls older than this are forgotten.
    pub window: Dur,
    /// Minimum number of calls: the rates are evaluated only once the window holds this many calls.
    pub min_calls: u32,
    /// Wait duration in open state before half-open.
    pub open_for: Dur,
    /// Permitted calls in half-open state: probes in flight at once; the rest are rejected.
    pub half_open_calls: u32,
    /// Successful probes needed to close (seed 004: several, not one).
    pub close_after: u32,
    /// Slow call duration threshold: a call that takes longer is slow, even if it succeeded.
    pub slow_call_duration: Dur,
    /// Slow call rate threshold: opens when at least this share of the calls in the window were slow.
    pub slow_call_rate: Share,
    /// Hysteresis (seed 003: trip at 50%, recover below 20%). When set, one failed probe no longer re-opens a
    /// half-open breaker at once: it waits for `close_after` probe outcomes and closes only if their failure rate
    /// is below this share (re-opening as soon as that can no longer happen). Must not exceed `failure_rate`.
    #[serde(default)]
    pub recovery_rate: Option<Share>,
}

/// Retries with exponential backoff and jitter, under a retry budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// Retries after the first attempt (0: no retries).
    pub max: u32,
    /// Backoff before the first retry; doubles each retry, with jitter in [50%, 100%] of it.
    pub backoff: Dur,
    /// Retry budget: retries may be at most this share of first attempts (plus a small reserve), so a failing
    /// dependency is not asked for 3x its load (seed 000).
    pub budget: Share,
}

/// What a failed or rejected call answers instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Fallback {
    /// The last good answer for the same item, marked `X-Fallback: stale`; `default` when none is cached.
    Stale,
    /// An empty answer of the right shape, marked `X-Fallback: default`.
    Default,
    /// 503 with `Retry-After`, so callers do not retry into the open window. The only choice for writes.
    Unavailable {
        /// The value of the Retry-After header (rounded up to whole seconds).
        retry_after: Dur,
    },
}
