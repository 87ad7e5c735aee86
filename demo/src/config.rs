//! The demo's configuration: the scenario's `sut: { demo: ... }` section, deserialised straight into
//! [`DemoConfig`], plus its validation and time scaling.
//!
//! Not for running anything: the layers read the validated values through [`crate::breaker::Policy`] and the
//! service builder. Every field has a default, so `demo: {}` is the recommended configuration of seed 000, and a
//! partly written operation (`pricing: { timeout: 100ms }`) keeps the recommended value of every field it omits.

use std::collections::BTreeSet;

use faultline_units::{Dur, Share};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::operation::Operation;
use crate::settings::{Fallback, OperationConfig};
use crate::DemoError;

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
        }
    }
}

/// The configured operations. A missing key means the operation is not called (its part of a page is left out,
/// its endpoint answers 404); a present key, even empty, means the recommended settings with the given overrides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Operations {
    #[serde(
        default,
        deserialize_with = "pricing",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `pricing`: GET /price/{id} (seed 000).
    pub pricing: Option<OperationConfig>,
    #[serde(
        default,
        deserialize_with = "reviews",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `reviews`: GET /reviews/{id} (seed 001).
    pub reviews: Option<OperationConfig>,
    #[serde(
        default,
        deserialize_with = "payments",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `payments`: POST /payments/charge (seed 004).
    pub payments: Option<OperationConfig>,
    #[serde(
        default,
        deserialize_with = "report",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `report`: GET /report (seed 000 low-traffic endpoint).
    pub report: Option<OperationConfig>,
    #[serde(
        rename = "account-read",
        default,
        deserialize_with = "account_read",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `account-read`: GET /accounts/{id} (seed 004 read breaker).
    pub account_read: Option<OperationConfig>,
    #[serde(
        rename = "account-write",
        default,
        deserialize_with = "account_write",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `account-write`: POST /accounts/{id} (seed 004 write breaker).
    pub account_write: Option<OperationConfig>,
    #[serde(
        default,
        deserialize_with = "cart",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<OperationOverrides>")]
    /// `cart`: `GET cart:{id}` on Redis (needs `redis:`); not among the defaults.
    pub cart: Option<OperationConfig>,
}

impl Default for Operations {
    /// The six HTTP operations with their recommended settings (the Redis one needs an address, so it is
    /// configured only when named).
    fn default() -> Self {
        let mut all = Operations::none();
        for op in Operation::ALL.into_iter().filter(|op| !op.is_redis()) {
            *all.get_mut(op) = Some(op.recommended());
        }
        all
    }
}

impl Operations {
    /// No operation configured; add some with [`Operations::get_mut`].
    pub fn none() -> Self {
        Operations {
            pricing: None,
            reviews: None,
            payments: None,
            report: None,
            account_read: None,
            account_write: None,
            cart: None,
        }
    }

    /// The configuration of `op`, if it is called.
    pub fn get(&self, op: Operation) -> Option<&OperationConfig> {
        match op {
            Operation::Pricing => self.pricing.as_ref(),
            Operation::Reviews => self.reviews.as_ref(),
            Operation::Payments => self.payments.as_ref(),
            Operation::Report => self.report.as_ref(),
            Operation::AccountRead => self.account_read.as_ref(),
            Operation::AccountWrite => self.account_write.as_ref(),
            Operation::Cart => self.cart.as_ref(),
        }
    }

    /// The slot of `op`, to configure or remove it.
    pub fn get_mut(&mut self, op: Operation) -> &mut Option<OperationConfig> {
        match op {
            Operation::Pricing => &mut self.pricing,
            Operation::Reviews => &mut self.reviews,
            Operation::Payments => &mut self.payments,
            Operation::Report => &mut self.report,
            Operation::AccountRead => &mut self.account_read,
            Operation::AccountWrite => &mut self.account_write,
            Operation::Cart => &mut self.cart,
        }
    }

    /// The configured operations in [`Operation::ALL`] order.
    pub fn configured(&self) -> impl Iterator<Item = (Operation, &OperationConfig)> {
        Operation::ALL
            .into_iter()
            .filter_map(|op| self.get(op).map(|c| (op, c)))
    }
}

/// One classic mistake from the seeds, reproducible with one switch.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Mistake {
    /// Seed 000 / 001 / 004: calls have no timeout, so a hung dependency holds a pool slot forever and never
    /// produces a failure.
    NoTimeout,
    /// Seed 000: 4xx responses count as failures, so bad user input trips the breaker. Over gRPC: every non-OK
    /// status counts, the caller's codes (INVALID_ARGUMENT, NOT_FOUND, ...) included.
    #[serde(rename = "count_4xx")]
    #[value(name = "count_4xx")]
    Count4xx,
    /// Seed 000: trips on N failures in the window (N = min_calls) whatever the volume, instead of a rate.
    BareCount,
    /// Seed 001: no minimum number of calls; the rate is evaluated from the first call.
    NoMinCalls,
    /// Seed 000 / 001: half-open lets all traffic through at once (the stampede on a recovering dependency).
    UnlimitedHalfOpen,
    /// Seed 001: slow calls are not counted, so a dependency answering slowly but successfully never trips it.
    SlownessIgnored,
    /// Seed 004 mistake 2 / seed 003: one breaker for all operations, so one sick operation blocks healthy ones.
    SharedBreaker,
    /// Seed 000: retries ignore the budget, tripling the load on a failing dependency.
    UnbudgetedRetries,
    /// Seed 004's half-open gotcha: the first successful probe closes the breaker.
    CloseOnFirstSuccess,
    /// Seed 000's retry storm on the TLS handshake: a failed handshake is retried at once, up to 5 times per
    /// attempt, with no backoff and no budget, so an expired certificate is met with a handful of new handshakes for
    /// every call.
    InstantReconnect,
}

impl Mistake {
    /// Every switch, in documentation order.
    pub const ALL: [Mistake; 10] = [
        Mistake::NoTimeout,
        Mistake::Count4xx,
        Mistake::BareCount,
        Mistake::NoMinCalls,
        Mistake::UnlimitedHalfOpen,
        Mistake::SlownessIgnored,
        Mistake::SharedBreaker,
        Mistake::UnbudgetedRetries,
        Mistake::CloseOnFirstSuccess,
        Mistake::InstantReconnect,
    ];

    /// The switch's name as written in YAML and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mistake::NoTimeout => "no_timeout",
            Mistake::Count4xx => "count_4xx",
            Mistake::BareCount => "bare_count",
            Mistake::NoMinCalls => "no_min_calls",
            Mistake::UnlimitedHalfOpen => "unlimited_half_open",
            Mistake::SlownessIgnored => "slowness_ignored",
            Mistake::SharedBreaker => "shared_breaker",
            Mistake::UnbudgetedRetries => "unbudgeted_retries",
            Mistake::CloseOnFirstSuccess => "close_on_first_success",
            Mistake::InstantReconnect => "instant_reconnect",
        }
    }
}

// -------------------------------------------------------------------------------------------------------------
// Partial operations: what a scenario may write; merged onto the operation's recommended settings.

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
        if let Some(r) = self.retries {
            c.retries.max = r.max.unwrap_or(c.retries.max);
            c.retries.backoff = r.backoff.unwrap_or(c.retries.backoff);
            c.retries.budget = r.budget.unwrap_or(c.retries.budget);
        }
        c
    }
}

/// Reads one operation's overrides (a present but empty key, `pricing:`, means "recommended").
fn operation<'de, D: Deserializer<'de>>(
    d: D,
    op: Operation,
) -> Result<Option<OperationConfig>, D::Error> {
    let overrides = Option::<OperationOverrides>::deserialize(d)?;
    Ok(Some(overrides.unwrap_or_default().apply_to(op)))
}

macro_rules! operation_reader {
    ($name:ident, $op:expr) => {
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<OperationConfig>, D::Error> {
            operation(d, $op)
        }
    };
}
operation_reader!(pricing, Operation::Pricing);
operation_reader!(reviews, Operation::Reviews);
operation_reader!(payments, Operation::Payments);
operation_reader!(report, Operation::Report);
operation_reader!(account_read, Operation::AccountRead);
operation_reader!(account_write, Operation::AccountWrite);
operation_reader!(cart, Operation::Cart);

// -------------------------------------------------------------------------------------------------------------
// Validation and time scaling.

/// The most instances one process runs: each has its own pools and breakers, and 1,000 already covers seed 000's
/// 60-instance example many times over.
pub const MAX_INSTANCES: usize = 1_000;

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
            if c.timeout.get().is_zero() {
                return invalid(at("timeout"), "must be above 0s".into());
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
            let b = &c.breaker;
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
        }
        Ok(())
    }

    /// Multiplies every duration by `factor` and divides every rate by it; counts and shares are unchanged.
    /// (The demo has no rates: its budget is a share of calls, not a rate.)
    pub fn scale_time(&mut self, factor: f64) {
        for op in Operation::ALL {
            if let Some(c) = self.operations.get_mut(op) {
                c.timeout = c.timeout.scaled(factor);
                c.breaker.window = c.breaker.window.scaled(factor);
                c.breaker.open_for = c.breaker.open_for.scaled(factor);
                c.breaker.slow_call_duration = c.breaker.slow_call_duration.scaled(factor);
                c.retries.backoff = c.retries.backoff.scaled(factor);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::RetryConfig;

    fn ms(v: u64) -> Dur {
        Dur::from_millis(v)
    }

    #[test]
    fn the_mistakes_help_says_how_many_instant_reconnects_in_plain_words() {
        use clap::ValueEnum;
        let help = Mistake::InstantReconnect
            .to_possible_value()
            .and_then(|v| v.get_help().map(|h| h.to_string()))
            .unwrap_or_default();
        let times = crate::layers::retry::INSTANT_RECONNECTS;
        assert!(help.contains(&format!("up to {times} times")), "{help}");
        assert!(!help.contains('['), "no rustdoc link in --help: {help}");
    }

    #[test]
    fn an_empty_section_is_the_recommended_configuration_of_all_six_operations() {
        let c = DemoConfig::from_yaml("{}", "demo.yaml").unwrap();
        assert_eq!(c, DemoConfig::default());
        let pricing = c.operations.pricing.as_ref().unwrap();
        assert_eq!(pricing.timeout, ms(250));
        assert_eq!(pricing.pool, 200);
        assert_eq!(pricing.breaker.failure_rate, Share::from_fraction(0.5));
        assert_eq!(pricing.breaker.window, ms(10_000));
        assert_eq!(pricing.breaker.min_calls, 20);
        assert_eq!(pricing.breaker.open_for, ms(30_000));
        assert_eq!(pricing.breaker.half_open_calls, 1);
        assert_eq!(c.operations.configured().count(), 6);
    }

    #[test]
    fn only_listed_operations_are_configured_and_omitted_fields_keep_the_recommended_value() {
        let text = "
operations:
  pricing: { timeout: 100ms, breaker: { min_calls: 5 } }
  reviews:
mistakes: [ no_timeout, count_4xx ]
instances: 3
";
        let c = DemoConfig::from_yaml(text, "demo.yaml").unwrap();
        let pricing = c.operations.pricing.as_ref().unwrap();
        assert_eq!(pricing.timeout, ms(100));
        assert_eq!(pricing.breaker.min_calls, 5);
        assert_eq!(
            pricing.breaker.window,
            ms(10_000),
            "untouched breaker fields stay recommended"
        );
        assert_eq!(pricing.pool, 200);
        assert_eq!(c.operations.reviews, Some(Operation::Reviews.recommended()));
        assert!(c.operations.payments.is_none());
        assert_eq!(c.instances, 3);
        assert!(
            c.has(Mistake::NoTimeout) && c.has(Mistake::Count4xx) && !c.has(Mistake::BareCount)
        );
    }

    #[test]
    fn the_brief_example_parses_with_every_spelling() {
        let text = "
instances: 1
shared_counters: false
operations:
  pricing: { timeout: 250ms, pool: 200, fallback: stale,
             breaker: { failure_rate: 50%, window: 10s, min_calls: 20, open_for: 30s, half_open_calls: 1,
                        close_after: 1, slow_call_duration: 1s, slow_call_rate: 100%, recovery_rate: null } }
  reviews:  { timeout: 800ms, pool: 80, fallback: default }
  payments: { timeout: 2s, pool: 50, fallback: { unavailable: { retry_after: 5s } },
              retries: { max: 2, backoff: 50ms, budget: 10% } }
mistakes: [ no_timeout ]
";
        let c = DemoConfig::from_yaml(text, "demo.yaml").unwrap();
        let p = c.operations.payments.as_ref().unwrap();
        assert_eq!(
            p.fallback,
            Fallback::Unavailable {
                retry_after: ms(5_000)
            }
        );
        assert_eq!(
            p.retries,
            RetryConfig {
                max: 2,
                backoff: ms(50),
                budget: Share::from_fraction(0.1)
            }
        );
        assert_eq!(
            c.operations.reviews.as_ref().unwrap().fallback,
            Fallback::Default
        );
    }

    #[test]
    fn every_mistake_name_parses_from_yaml_and_matches_its_documented_name() {
        for m in Mistake::ALL {
            let c =
                DemoConfig::from_yaml(&format!("mistakes: [ {} ]", m.name()), "d.yaml").unwrap();
            assert!(c.has(m), "{}", m.name());
        }
    }

    #[test]
    fn unknown_fields_and_unknown_mistakes_are_refused_with_file_and_line() {
        let e = DemoConfig::from_yaml("operations:\n  pricing: { timout: 1s }\n", "demo.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("demo.yaml") && e.contains("timout"), "{e}");
        assert!(
            e.contains("line 2") || e.contains(":2:") || e.contains("2:"),
            "{e}"
        );
        let e = DemoConfig::from_yaml("mistakes: [ no_breaker ]\n", "demo.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no_breaker"), "{e}");
        let e = DemoConfig::from_yaml("operations: { pricing: { timeout: 250 } }\n", "demo.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs a unit"), "{e}");
    }

    #[test]
    fn validation_names_the_field_that_is_wrong() {
        let cases = [
            ("instances: 0", "instances"),
            (
                "operations: { pricing: { pool: 0 } }",
                "operations.pricing.pool",
            ),
            (
                "operations: { pricing: { timeout: 0s } }",
                "operations.pricing.timeout",
            ),
            (
                "operations: { pricing: { breaker: { window: 0s } } }",
                "operations.pricing.breaker.window",
            ),
            (
                "operations: { pricing: { breaker: { min_calls: 0 } } }",
                "operations.pricing.breaker.min_calls",
            ),
            (
                "operations: { pricing: { breaker: { close_after: 0 } } }",
                "operations.pricing.breaker.close_after",
            ),
            (
                "operations: { pricing: { breaker: { failure_rate: 50%, recovery_rate: 60% } } }",
                "operations.pricing.breaker.recovery_rate",
            ),
            (
                "operations: { payments: { fallback: stale } }",
                "operations.payments.fallback",
            ),
            (
                "operations: { account-write: { fallback: default } }",
                "operations.account-write.fallback",
            ),
            ("operations: {}", "operations"),
            ("operations: { cart: {} }", "operations.cart"),
        ];
        for (text, field) in cases {
            let e = DemoConfig::from_yaml(text, "demo.yaml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "{text}: {e}");
            assert!(e.contains("demo.yaml"), "{text}: {e}");
        }
    }

    #[test]
    fn scale_time_multiplies_every_duration_and_keeps_counts_and_shares() {
        let mut c = DemoConfig::default();
        c.scale_time(0.1);
        let p = c.operations.payments.as_ref().unwrap();
        assert_eq!(p.timeout, ms(200), "2s at 0.1 is 200ms");
        assert_eq!(p.breaker.window, ms(1_000));
        assert_eq!(p.breaker.open_for, ms(3_000));
        assert_eq!(p.breaker.slow_call_duration, ms(120));
        assert_eq!(p.retries.backoff, ms(5));
        assert_eq!(
            p.fallback,
            Fallback::Unavailable {
                retry_after: ms(500)
            }
        );
        assert_eq!(p.pool, 50);
        assert_eq!(p.breaker.min_calls, 10);
        assert_eq!(p.breaker.half_open_calls, 2);
        assert_eq!(p.retries.budget, Share::from_fraction(0.1));
        assert_eq!(c.operations.pricing.as_ref().unwrap().timeout, ms(25));
    }

    #[test]
    fn the_redis_operation_is_configured_only_when_named_and_with_an_address() {
        assert!(DemoConfig::default().operations.cart.is_none());
        let c = DemoConfig::from_yaml(
            "redis: 127.0.0.1:6379\noperations: { cart: { timeout: 50ms } }",
            "demo.yaml",
        )
        .unwrap();
        let cart = c.operations.cart.as_ref().unwrap();
        assert_eq!(cart.timeout, ms(50));
        assert_eq!(cart.pool, 20, "the rest is recommended");
        assert_eq!(c.operations.configured().count(), 1);
    }

    #[test]
    fn a_serialised_config_reads_back_the_same() {
        let mut c = DemoConfig::default();
        c.mistakes.insert(Mistake::BareCount);
        c.instances = 4;
        c.protocol = Protocol::Grpc;
        let text = serde_saphyr::to_string(&c).unwrap();
        assert_eq!(
            DemoConfig::from_yaml(&text, "round-trip.yaml").unwrap(),
            c,
            "{text}"
        );
    }

    #[test]
    fn the_json_schema_lists_every_operation_and_mistake() {
        let schema = serde_json::to_string(&schemars::schema_for!(DemoConfig)).unwrap();
        for op in Operation::ALL {
            assert!(schema.contains(op.key()), "{}", op.key());
        }
        for m in Mistake::ALL {
            assert!(schema.contains(m.name()), "{}", m.name());
        }
    }
}
