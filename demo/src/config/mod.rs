//! The demo's configuration: the scenario's `sut: { demo: ... }` section, deserialised straight into
//! [`DemoConfig`], plus its validation and time scaling. The table of operations and the partial overrides a
//! scenario writes for each are in files of their own, as is the list of mistakes.
//!
//! Not for running anything: the layers read the validated values through [`crate::breaker::Policy`] and the
//! service builder. Not for the settings types themselves (`settings`) nor their recommended values
//! (`operation`). Every field has a default, so `demo: {}` is the recommended configuration of seed 000, and a
//! partly written operation (`pricing: { timeout: 100ms }`) keeps the recommended value of every field it omits.

mod dns;
mod mistake;
mod operations;
mod overrides;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use dns::ResolveConfig;
pub use mistake::Mistake;
pub use operations::Operations;
pub use overrides::{BreakerOverrides, OperationOverrides, RetryOverrides};

use crate::admission::{AdmissionConfig, MAX_MAX_IN_FLIGHT};
use crate::operation::Operation;
use crate::settings::{Fallback, HedgeAfter, HedgeConfig};
use crate::DemoError;
use faultline_units::Dur;

/// The whole demo configuration (the `sut: { demo: ... }` section of a scenario, or `--config demo.yaml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DemoConfig {
    /// Independent copies of the service in one process; requests are spread round-robin. Each copy has its own
    /// breakers, pools and caches, which reproduces seed 000's per-instance volume floor.
    #[serde(default = "one_instance")]
    pub instances: usize,
    /// Seed 000's fix for that floor: one breaker state per operation shared by all instances (counters held
    /// somewhere shared). Pools and caches stay per instance.
    #[serde(default)]
    pub shared_counters: bool,
    /// The operations the demo calls; only the listed ones are called. Omitted: all six, recommended.
    #[serde(default)]
    pub operations: Operations,
    /// Classic mistakes to reproduce, one switch each (see [`Mistake`]).
    #[serde(default)]
    pub mistakes: BTreeSet<Mistake>,
    /// How the demo calls its dependency: `http` (HTTP/1.1, the default) or `grpc` (unary gRPC calls on one
    /// shared HTTP/2 connection, each operation one method: see `layers::grpc`).
    #[serde(default, skip_serializing_if = "Protocol::is_http")]
    pub protocol: Protocol,
    /// The Redis server (`host:port`) the Redis operations (`cart`) call, e.g. a faultd TCP route in a scenario:
    /// `redis: "{faultd.routes.db.addr}"`. Needed when such an operation is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<String>,
    /// The PostgreSQL server the PostgreSQL operations (`order`) call: `host:port` (user and database
    /// `postgres`), or `postgresql://user@host:port/database`; in a scenario usually a TCP route:
    /// `postgres: "{faultd.routes.db.addr}"`. Needed when such an operation is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<String>,
    /// Admission control at the front door: requests served at once per instance, the excess refused with 503 and
    /// `Retry-After` (see `admission`).
    #[serde(default)]
    pub admission: AdmissionConfig,
    /// Resolve the HTTP dependency's host through this DNS server, with a cache that honours the TTL and serves
    /// the last answer for `stale_for` when resolution fails (see `layers::resolve`), e.g.
    /// `dns: { resolver: "{faultd.dns}", name: pricing.internal }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<ResolveConfig>,
}

/// The protocol of the calls to the dependency; the layers around them are the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// HTTP/1.1 with a pool of connections: the operation's method and path.
    #[default]
    Http,
    /// gRPC over HTTP/2 with prior knowledge: the operation's gRPC method, `grpc-timeout` from its timeout.
    Grpc,
}

impl Protocol {
    fn is_http(&self) -> bool {
        *self == Protocol::Http
    }
}

fn one_instance() -> usize {
    1
}

impl Default for DemoConfig {
    /// The recommended configuration: one instance, per-instance counters, all six operations with the seeds'
    /// recommended values, no mistakes.
    fn default() -> Self {
        DemoConfig {
            instances: 1,
            shared_counters: false,
            operations: Operations::default(),
            mistakes: BTreeSet::new(),
            protocol: Protocol::Http,
            redis: None,
            postgres: None,
            admission: AdmissionConfig::default(),
            dns: None,
        }
    }
}

/// The most instances one process runs: each has its own pools and breakers, and 1,000 already covers seed 000's
/// 60-instance example many times over.
pub const MAX_INSTANCES: usize = 1_000;

/// The most hedges one attempt may send: each is a whole extra call on the dependency.
pub const MAX_HEDGES: u32 = 4;

impl DemoConfig {
    /// Parses a YAML document (the demo section on its own) and validates it. `file` names the source in
    /// errors, which carry the line and column of a parse error.
    pub fn from_yaml(text: &str, file: &str) -> Result<DemoConfig, DemoError> {
        let config: DemoConfig = serde_saphyr::from_str(text).map_err(|e| DemoError::Parse {
            file: file.to_string(),
            message: e.to_string(),
        })?;
        config.validate().map_err(|e| match e {
            DemoError::Invalid { field, message } => DemoError::Parse {
                file: file.to_string(),
                message: format!("{field}: {message}"),
            },
            other => other,
        })?;
        Ok(config)
    }

    /// Checks what the types cannot: positive durations and counts, hysteresis below the trip rate, writes never
    /// faking success, at least one operation. The error names the field (`operations.pricing.breaker.window`).
    pub fn validate(&self) -> Result<(), DemoError> {
        let invalid = |field: String, message: String| Err(DemoError::Invalid { field, message });
        if self.instances == 0 || self.instances > MAX_INSTANCES {
            return invalid(
                "instances".into(),
                format!(
                    "must be between 1 and {MAX_INSTANCES}, got {}",
                    self.instances
                ),
            );
        }
        let max = self.admission.max_in_flight;
        if max == 0 || max > MAX_MAX_IN_FLIGHT {
            return invalid(
                "admission.max_in_flight".into(),
                format!("must be between 1 and {MAX_MAX_IN_FLIGHT}, got {max}"),
            );
        }
        if self
            .admission
            .target_latency
            .is_some_and(|t| t.get().is_zero())
        {
            return invalid("admission.target_latency".into(), "must be above 0s".into());
        }
        if let Some(d) = &self.dns {
            if d.timeout.get().is_zero() {
                return invalid("dns.timeout".into(), "must be above 0s".into());
            }
            if self.protocol == Protocol::Grpc {
                return invalid(
                    "dns".into(),
                    "the dependency's name is resolved for HTTP calls only".into(),
                );
            }
        }
        if self.operations.configured().next().is_none() {
            return invalid(
                "operations".into(),
                "configure at least one operation (or omit `operations`)".into(),
            );
        }
        for (op, c) in self.operations.configured() {
            let at = |f: &str| format!("operations.{}.{f}", op.key());
            if op.is_redis() && self.redis.is_none() {
                return invalid(
                    format!("operations.{}", op.key()),
                    "a Redis operation needs the server's address: `redis: 127.0.0.1:6379` (in a scenario, a TCP route: `redis: \"{faultd.routes.db.addr}\"`)".into(),
                );
            }
            if op.is_postgres() && self.postgres.is_none() {
                return invalid(
                    format!("operations.{}", op.key()),
                    "a PostgreSQL operation needs the server's address: `postgres: 127.0.0.1:5432` (in a scenario, a TCP route: `postgres: \"{faultd.routes.db.addr}\"`)".into(),
                );
            }
            if c.timeout.get().is_zero() {
                return invalid(at("timeout"), "must be above 0s".into());
            }
            if !c.endpoints.is_empty()
                && (op.is_redis() || op.is_postgres() || self.protocol == Protocol::Grpc)
            {
                return invalid(
                    at("endpoints"),
                    "endpoints are balanced over HTTP only (not Redis, PostgreSQL or gRPC)".into(),
                );
            }
            let o = &c.outlier;
            if o.interval.get().is_zero() || o.base_ejection.get().is_zero() {
                return invalid(
                    at("outlier"),
                    "interval and base_ejection must be above 0s".into(),
                );
            }
            if o.max_ejection < o.base_ejection {
                return invalid(
                    at("outlier.max_ejection"),
                    format!("must be at least base_ejection ({})", o.base_ejection),
                );
            }
            if c.pool == 0 || c.pool > 100_000 {
                return invalid(
                    at("pool"),
                    format!("must be between 1 and 100000, got {}", c.pool),
                );
            }
            if op.is_write() && !matches!(c.fallback, Fallback::Unavailable { .. }) {
                return invalid(
                    at("fallback"),
                    format!("{} is a write and must never fake success: use {{ unavailable: {{ retry_after: 5s }} }}", op.key()),
                );
            }
            check_breaker(&c.breaker, &at)?;
            if c.retries.max > 10 {
                return invalid(
                    at("retries.max"),
                    format!("must be at most 10, got {}", c.retries.max),
                );
            }
            if c.retries.max > 0 && c.retries.backoff.get().is_zero() {
                return invalid(
                    at("retries.backoff"),
                    "must be above 0s when retries.max > 0".into(),
                );
            }
            if let Some(h) = &c.hedge {
                if h.max == 0 || h.max > MAX_HEDGES {
                    return invalid(
                        at("hedge.max"),
                        format!("must be between 1 and {MAX_HEDGES}, got {}", h.max),
                    );
                }
                if h.after == HedgeAfter::Fixed(Dur::ZERO) {
                    return invalid(at("hedge.after"), "must be above 0s (or p95)".into());
                }
            }
        }
        Ok(())
    }

    /// Multiplies every duration by `factor` and divides every rate by it; counts and shares are unchanged.
    /// (The demo has no rates: its budget is a share of calls, not a rate.)
    pub fn scale_time(&mut self, factor: f64) {
        self.admission.retry_after = self.admission.retry_after.scaled(factor);
        if let Some(d) = self.dns.as_mut() {
            d.scale_time(factor);
        }
        if let Some(t) = self.admission.target_latency.as_mut() {
            *t = t.scaled(factor);
        }
        for op in Operation::ALL {
            if let Some(c) = self.operations.get_mut(op) {
                c.timeout = c.timeout.scaled(factor);
                c.breaker.window = c.breaker.window.scaled(factor);
                c.breaker.open_for = c.breaker.open_for.scaled(factor);
                c.breaker.slow_call_duration = c.breaker.slow_call_duration.scaled(factor);
                c.retries.backoff = c.retries.backoff.scaled(factor);
                if let Some(HedgeConfig {
                    after: HedgeAfter::Fixed(after),
                    ..
                }) = &mut c.hedge
                {
                    *after = after.scaled(factor);
                }
                let o = &mut c.outlier;
                o.interval = o.interval.scaled(factor);
                o.base_ejection = o.base_ejection.scaled(factor);
                o.max_ejection = o.max_ejection.scaled(factor);
                if let Fallback::Unavailable { retry_after } = &mut c.fallback {
                    *retry_after = retry_after.scaled(factor);
                }
            }
        }
    }

    /// Whether the mistake `m` is switched on.
    pub fn has(&self, m: Mistake) -> bool {
        self.mistakes.contains(&m)
    }
}

/// Checks a breaker's settings; `at` names a field of its operation.
fn check_breaker(b: &crate::BreakerConfig, at: &dyn Fn(&str) -> String) -> Result<(), DemoError> {
    let invalid = |field: String, message: String| Err(DemoError::Invalid { field, message });
    let positive = [
        ("breaker.window", b.window),
        ("breaker.open_for", b.open_for),
        ("breaker.slow_call_duration", b.slow_call_duration),
    ];
    for (name, d) in positive {
        if d.get().is_zero() {
            return invalid(at(name), "must be above 0s".into());
        }
    }
    let counts = [
        ("breaker.min_calls", b.min_calls),
        ("breaker.half_open_calls", b.half_open_calls),
        ("breaker.close_after", b.close_after),
    ];
    for (name, n) in counts {
        if n == 0 {
            return invalid(at(name), "must be at least 1".into());
        }
    }
    for (name, s) in [
        ("breaker.failure_rate", b.failure_rate),
        ("breaker.slow_call_rate", b.slow_call_rate),
    ] {
        if s.fraction() <= 0.0 {
            return invalid(at(name), "must be above 0%".into());
        }
    }
    if let Some(r) = b.recovery_rate {
        if r.fraction() <= 0.0 || r > b.failure_rate {
            return invalid(
                at("breaker.recovery_rate"),
                format!(
                    "must be above 0% and at most failure_rate ({}), got {r}",
                    b.failure_rate
                ),
            );
        }
    }
    Ok(())
}
