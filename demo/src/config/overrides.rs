//! Partial operations: what a scenario may write for one operation, every field optional, and how it is merged
//! onto the operation's recommended settings.
//!
//! Not for the complete settings (`settings`) nor for which operations are configured (`operations`).

use faultline_units::{Dur, Share};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::operation::Operation;
use crate::settings::{Fallback, HedgeConfig, OperationConfig};

/// An operation as written: every field optional, the rest taken from the operation's recommended settings.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OperationOverrides {
    /// Overrides the per-attempt timeout.
    pub timeout: Option<Dur>,
    /// Overrides the bulkhead size.
    pub pool: Option<usize>,
    /// Overrides the fallback.
    pub fallback: Option<Fallback>,
    /// Overrides some breaker parameters.
    pub breaker: Option<BreakerOverrides>,
    /// Overrides some retry parameters.
    pub retries: Option<RetryOverrides>,
    /// Hedges the operation's calls (off unless set).
    pub hedge: Option<HedgeConfig>,
    /// The dependency's endpoints to balance over, as base URLs: a list, or one string of them separated by
    /// commas (`"{faultd.routes.pricing.instances}"`).
    pub endpoints: Option<Endpoints>,
    /// Overrides some outlier ejection parameters.
    pub outlier: Option<OutlierOverrides>,
}

/// Endpoints as written: a list of base URLs, or one string of them separated by commas.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Endpoints {
    /// `"http://a:1,http://b:2"`.
    Joined(String),
    /// `[http://a:1, http://b:2]`.
    List(Vec<String>),
}

impl Endpoints {
    /// Each base URL, trimmed, empty ones left out.
    pub fn urls(self) -> Vec<String> {
        let all = match self {
            Endpoints::Joined(s) => vec![s],
            Endpoints::List(l) => l,
        };
        all.iter()
            .flat_map(|s| s.split(','))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    }
}

/// Outlier ejection as written: every field optional.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutlierOverrides {
    /// Failures in a row that eject an endpoint.
    pub consecutive_failures: Option<u32>,
    /// The failure rate over an interval that ejects an endpoint.
    pub failure_rate: Option<Share>,
    /// Calls in the interval before the rate counts.
    pub min_calls: Option<u32>,
    /// The interval of the failure rate.
    pub interval: Option<Dur>,
    /// The first ejection's length.
    pub base_ejection: Option<Dur>,
    /// The longest ejection.
    pub max_ejection: Option<Dur>,
    /// The most endpoints out at once, as a share.
    pub max_ejected: Option<Share>,
}

/// A breaker as written: every field optional.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BreakerOverrides {
    /// Failure rate threshold.
    pub failure_rate: Option<Share>,
    /// Sliding window length.
    pub window: Option<Dur>,
    /// Minimum number of calls before the rates count.
    pub min_calls: Option<u32>,
    /// Wait duration in open state.
    pub open_for: Option<Dur>,
    /// Probes in flight at once in half-open.
    pub half_open_calls: Option<u32>,
    /// Successful probes needed to close.
    pub close_after: Option<u32>,
    /// Slow call duration threshold.
    pub slow_call_duration: Option<Dur>,
    /// Slow call rate threshold.
    pub slow_call_rate: Option<Share>,
    /// Hysteresis: the probe failure rate to stay under to close.
    pub recovery_rate: Option<Share>,
}

/// Retries as written: every field optional.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryOverrides {
    /// Retries after the first attempt.
    pub max: Option<u32>,
    /// Backoff before the first retry.
    pub backoff: Option<Dur>,
    /// Retry budget share.
    pub budget: Option<Share>,
}

impl OperationOverrides {
    /// The recommended settings of `op` with these overrides applied.
    pub fn apply_to(self, op: Operation) -> OperationConfig {
        let mut c = op.recommended();
        if let Some(v) = self.timeout {
            c.timeout = v;
        }
        if let Some(v) = self.pool {
            c.pool = v;
        }
        if let Some(v) = self.fallback {
            c.fallback = v;
        }
        if let Some(b) = self.breaker {
            let t = &mut c.breaker;
            t.failure_rate = b.failure_rate.unwrap_or(t.failure_rate);
            t.window = b.window.unwrap_or(t.window);
            t.min_calls = b.min_calls.unwrap_or(t.min_calls);
            t.open_for = b.open_for.unwrap_or(t.open_for);
            t.half_open_calls = b.half_open_calls.unwrap_or(t.half_open_calls);
            t.close_after = b.close_after.unwrap_or(t.close_after);
            t.slow_call_duration = b.slow_call_duration.unwrap_or(t.slow_call_duration);
            t.slow_call_rate = b.slow_call_rate.unwrap_or(t.slow_call_rate);
            t.recovery_rate = b.recovery_rate.or(t.recovery_rate);
        }
        if let Some(e) = self.endpoints {
            c.endpoints = e.urls();
        }
        if let Some(o) = self.outlier {
            let t = &mut c.outlier;
            t.consecutive_failures = o.consecutive_failures.unwrap_or(t.consecutive_failures);
            t.failure_rate = o.failure_rate.or(t.failure_rate);
            t.min_calls = o.min_calls.unwrap_or(t.min_calls);
            t.interval = o.interval.unwrap_or(t.interval);
            t.base_ejection = o.base_ejection.unwrap_or(t.base_ejection);
            t.max_ejection = o.max_ejection.unwrap_or(t.max_ejection);
            t.max_ejected = o.max_ejected.unwrap_or(t.max_ejected);
        }
        if let Some(r) = self.retries {
            c.retries.max = r.max.unwrap_or(c.retries.max);
            c.retries.backoff = r.backoff.unwrap_or(c.retries.backoff);
            c.retries.budget = r.budget.unwrap_or(c.retries.budget);
        }
        if let Some(h) = self.hedge {
            c.hedge = Some(h);
        }
        c
    }
}
