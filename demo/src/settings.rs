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
    /// The dependency's endpoints (base URLs) this operation balances over, round robin; the dependency's one URL
    /// when empty. HTTP operations only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<String>,
    /// Outlier ejection over `endpoints`.
    #[serde(default)]
    pub outlier: OutlierConfig,
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

/// Outlier ejection over a dependency's endpoints, in Envoy's vocabulary (`outlier_detection`): an endpoint is
/// taken out of rotation after `consecutive_failures` failures in a row, or when at least `failure_rate` of its
/// calls in an `interval` failed (once it had `min_calls`), for `base_ejection` times the number of times it was
/// ejected (at most `max_ejection`); at most `max_ejected` of the endpoints are out at once, and one always serves.
/// A failure is a 5xx, a transport or handshake failure, or an attempt that timed out; a 4xx is not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutlierConfig {
    /// Failures in a row that eject an endpoint (Envoy's `consecutive_5xx`); 0: never on a count.
    pub consecutive_failures: u32,
    /// The share of an interval's calls whose failure ejects an endpoint; none: never on a rate.
    #[serde(default)]
    pub failure_rate: Option<Share>,
    /// Calls an endpoint must have had in the interval before its failure rate counts.
    pub min_calls: u32,
    /// The interval over which failure rates are counted (Envoy's `interval`).
    pub interval: Dur,
    /// How long a first ejection lasts; the n-th lasts n times this (Envoy's `base_ejection_time`).
    pub base_ejection: Dur,
    /// The longest an ejection lasts (Envoy's `max_ejection_time`).
    pub max_ejection: Dur,
    /// At most this share of the endpoints out of rotation at once (Envoy's `max_ejection_percent`).
    pub max_ejected: Share,
}

impl Default for OutlierConfig {
    /// Envoy's defaults but a shorter first ejection (5 s instead of 30 s): 5 failures in a row, or half the
    /// calls of a 10 s interval once it had 10; ejections grow 5 s at a time up to 60 s; at most half the
    /// endpoints out.
    fn default() -> Self {
        OutlierConfig {
            consecutive_failures: 5,
            failure_rate: Some(Share::from_fraction(0.5)),
            min_calls: 10,
            interval: Dur::from_millis(10_000),
            base_ejection: Dur::from_millis(5_000),
            max_ejection: Dur::from_millis(60_000),
            max_ejected: Share::from_fraction(0.5),
        }
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
