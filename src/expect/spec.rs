//! The `expect:` entries as a scenario writes them, and their resolution into [`Expectation`]s: exactly one subject
//! and one check per entry, every name checked against the scenario, every bound parsed into its type.
//!
//! Not for judging: an entry resolves into an [`Expectation`], which evaluates itself on a recording. Adding an
//! expectation means a field here, a line in `resolve`, and the check in its family's file.

use faultline_units::{Dur, GrpcCode, Rate, Share};
use serde::{Deserialize, Serialize};

use super::breaker::BreakerCheck;
use super::dependency::{Counted, DependencyCheck};
use super::sut::{Percentile, ShareOf, SutCheck};
use super::{Check, Expectation};

/// One entry of the scenario's `expect:` list, as written. Exactly one subject (`breaker`, `dependency`,
/// `sut_latency`, `sut_share`) and one check go together; `resolve` says which combinations make sense.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpectationSpec {
    /// A short identifier, used in reports and by `proof.fails`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Subject: a breaker named under `breakers:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<String>,
    /// Subject: a dependency route named under `dependency.routes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<String>,
    /// Subject: a percentile of the SUT's latency (from the intended send time): p50, p90, p99, p99.9, p99.99, max.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sut_latency: Option<String>,
    /// Subject: the share of SUT requests ending in one outcome class (ok, fallback, client_error, server_error,
    /// timeout, connect_error, dropped) or `error` (client, server, timeout and connect errors together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sut_share: Option<String>,

    /// The breaker opens within this long after the phase named by `after` begins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opens_within: Option<Dur>,
    /// The breaker closes within this long after the phase named by `after` begins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closes_within: Option<Dur>,
    /// The phase whose start `opens_within` / `closes_within` count from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The breaker never leaves closed during the phase named by `during` (or the whole run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stays_closed: Option<bool>,
    /// At most this many transitions during the phase (or the run): no flapping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transitions_at_most: Option<u32>,
    /// At most this many calls reach the dependency in each half-open window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes_per_half_open_at_most: Option<u32>,
    /// The route the breaker guards, for probe counting (default: the breaker's own `route`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,

    /// Calls in flight at the dependency stay below this (the pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight_below: Option<u64>,
    /// Calls in flight at the dependency stay at or under this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight_at_most: Option<u64>,
    /// TCP routes: connections open at the dependency stay below this (the client's pool, counted by faultd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_below: Option<u64>,
    /// TCP routes: connections open at the dependency stay at or under this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_at_most: Option<u64>,
    /// HTTP/2 routes: streams in flight at the dependency stay below this (a stream is a call to faultd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_streams_in_flight_below: Option<u64>,
    /// HTTP/2 routes: streams in flight at the dependency stay at or under this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_streams_in_flight_at_most: Option<u64>,
    /// gRPC routes: the status (`UNAVAILABLE`, `INVALID_ARGUMENT`, a number) whose calls `calls_at_least` or
    /// `calls_at_most` counts, as faultd recorded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<GrpcCode>,
    /// With `grpc_status`: at least this many calls ended with that status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_at_least: Option<u64>,
    /// With `grpc_status`: at most this many calls ended with that status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_at_most: Option<u64>,
    /// The dependency's call rate while the breaker named by `while_open` is open stays below this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_while_open_below: Option<Rate>,
    /// Calls at the dependency per request sent to the SUT stay at or under this (retry amplification).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amplification_at_most: Option<f64>,
    /// TLS handshake attempts at the dependency's listener per request sent to the SUT stay at or under this (a
    /// client reconnecting after every failed handshake); the dependency must speak TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshakes_per_request_at_most: Option<f64>,

    /// Upper bound for `sut_latency` (a duration) or `sut_share` (a share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<String>,
    /// Lower bound for `sut_share` (a share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<String>,
    /// For `sut_latency`, `sut_share` and `handshakes_per_request_at_most`: the bound must hold over every sliding window of this length inside the
    /// phase (or the run), not only over the whole of it, so that one bad stretch inside a good hour fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<Dur>,

    /// Only this phase counts (default: the whole run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub during: Option<String>,
    /// Only the time while this breaker is open counts (`true` means the scenario's only breaker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub while_open: Option<WhileOpen>,
    /// Stop the run as soon as this expectation has failed, where it can be decided while the run goes on: calls in
    /// flight over the bound, a breaker not opened (or closed) by its deadline, a breaker that left closed or
    /// changed state too often, a latency, share or amplification bound over a phase that has ended. The report is
    /// still written, marked `stopped_on_failure`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abort_on_fail: bool,
}

/// `while_open: true` or `while_open: pricing`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum WhileOpen {
    Only(bool),
    Breaker(String),
}

/// What a scenario declares, for resolving names in expectations.
pub struct Names<'a> {
    pub phases: &'a [String],
    pub breakers: &'a [String],
    pub routes: &'a [String],
    /// The dependency route each breaker guards, where known.
    pub breaker_routes: &'a dyn Fn(&str) -> Option<String>,
    /// Whether the dependency's data plane speaks TLS (so its handshakes are recorded).
    pub tls: bool,
}

impl ExpectationSpec {
    /// Checks the combination of fields and every name, and parses the bounds. The error says which field.
    pub fn resolve(&self, names: &Names<'_>) -> Result<Expectation, String> {
        let written = self.written();
        let checks: Vec<&(&str, &[&str])> = CHECKS
            .iter()
            .filter(|(c, _)| written.iter().any(|w| w == c))
            .collect();
        // Two subjects that are their own checks (`sut_latency`, `sut_share`) are said as two subjects below.
        let subjects_only = checks
            .iter()
            .all(|(c, _)| matches!(*c, "sut_latency" | "sut_share"));
        if checks.len() > 1 && !subjects_only {
            let named: Vec<String> = checks.iter().map(|(c, _)| format!("`{c}`")).collect();
            return Err(format!(
                "an expectation holds one check, and this one has {}: write one entry for each",
                named.join(" and ")
            ));
        }
        let check = self.resolve_check(names)?;
        if let [(name, reads)] = checks.as_slice() {
            let stray = written.iter().find(|w| {
                !matches!(w.as_str(), "id" | "abort_on_fail")
                    && w != name
                    && !reads.contains(&w.as_str())
            });
            if let Some(field) = stray {
                let why = match (field.as_str(), *name) {
                    ("during", "opens_within" | "closes_within") => format!(
                        " (`{name}` counts from the start of the phase named by `after`)"
                    ),
                    ("after", _) => {
                        " (`after` belongs to `opens_within` and `closes_within`; the phase a check judges is \
                         `during`)"
                            .to_string()
                    }
                    _ => String::new(),
                };
                let reads: Vec<String> = reads.iter().map(|r| format!("`{r}`")).collect();
                return Err(format!(
                    "`{field}` does not apply to `{name}`, which reads {}{why}: remove it",
                    reads.join(", ")
                ));
            }
        }
        if self.abort_on_fail && !check.decidable_live() {
            return Err(format!(
                "`abort_on_fail` cannot apply to this check: {} is judged on the whole recording after the run",
                check.name()
            ));
        }
        Ok(Expectation {
            id: self.id.clone(),
            abort_on_fail: self.abort_on_fail,
            check,
        })
    }

    /// The fields the entry sets, by name.
    fn written(&self) -> Vec<String> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(fields)) => fields.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Multiplies every duration bound by `factor` and divides every rate bound by it (`--time-scale`); counts and
    /// shares are unchanged.
    pub fn scale_time(&mut self, factor: f64) {
        for d in [
            &mut self.opens_within,
            &mut self.closes_within,
            &mut self.over,
        ]
        .into_iter()
        .flatten()
        {
            *d = d.scaled(factor);
        }
        if let Some(r) = self.rate_while_open_below.as_mut() {
            *r = Rate::per_second(r.per_sec() / factor);
        }
        if self.sut_latency.is_some() {
            if let Some(b) = self.below.as_mut() {
                if let Ok(d) = b.parse::<Dur>() {
                    *b = d.scaled(factor).to_string();
                }
            }
        }
    }

    fn resolve_check(&self, names: &Names<'_>) -> Result<Check, String> {
        let phase = |field: &str, p: &Option<String>| -> Result<Option<String>, String> {
            match p {
                None => Ok(None),
                Some(p) if names.phases.contains(p) => Ok(Some(p.clone())),
                Some(p) => Err(format!(
                    "`{field}` names phase `{p}`, which the scenario does not have (phases: {})",
                    list(names.phases)
                )),
            }
        };
        let breaker = |b: &str| -> Result<String, String> {
            if names.breakers.iter().any(|n| n == b) {
                Ok(b.to_string())
            } else {
                Err(format!(
                    "`breaker` names `{b}`, which is not under `breakers:` (breakers: {})",
                    list(names.breakers)
                ))
            }
        };
        let route = |field: &str, r: &str| -> Result<String, String> {
            if names.routes.iter().any(|n| n == r) {
                Ok(r.to_string())
            } else {
                Err(format!("`{field}` names route `{r}`, which is not under `dependency.routes` (routes: {})", list(names.routes)))
            }
        };
        let while_open = |w: &Option<WhileOpen>| -> Result<Option<String>, String> {
            match w {
                None | Some(WhileOpen::Only(false)) => Ok(None),
                Some(WhileOpen::Only(true)) => match names.breakers {
                    [only] => Ok(Some(only.clone())),
                    _ => Err("`while_open: true` needs exactly one breaker in the scenario; name the breaker instead".into()),
                },
                Some(WhileOpen::Breaker(b)) => breaker(b).map(Some),
            }
        };
        let subjects = [
            self.breaker.is_some() && self.dependency.is_none(),
            self.dependency.is_some(),
            self.sut_latency.is_some(),
            self.sut_share.is_some(),
        ];
        if subjects.iter().filter(|s| **s).count() != 1 {
            return Err("an expectation needs exactly one subject: `breaker`, `dependency`, `sut_latency` or `sut_share`".into());
        }
        if self.over.is_some()
            && self.sut_latency.is_none()
            && self.sut_share.is_none()
            && self.handshakes_per_request_at_most.is_none()
        {
            return Err(
                "`over` (a sliding window) applies to `sut_latency`, `sut_share` and `handshakes_per_request_at_most` only".into(),
            );
        }
        let over = match self.over {
            Some(w) if w.get().is_zero() => {
                return Err("`over` must be a window longer than zero, e.g. `over: 10s`".into())
            }
            Some(_) if self.while_open.is_some() => {
                return Err("`over` and `while_open` do not combine: a sliding window runs over a whole phase; judge the open spans without `over`".into())
            }
            other => other,
        };
        let during = phase("during", &self.during)?;

        if let Some(p) = &self.sut_latency {
            let percentile = Percentile::parse(p).ok_or_else(|| {
                format!("`sut_latency` is {p:?}; expected p50, p90, p99, p99.9, p99.99 or max")
            })?;
            let below = self
                .below
                .as_deref()
                .ok_or("`sut_latency` needs `below: <duration>`")?;
            let below: Dur = below.parse().map_err(|e| format!("`below`: {e}"))?;
            return Ok(Check::Sut(SutCheck::Latency {
                percentile,
                below,
                during,
                while_open: while_open(&self.while_open)?,
                over,
            }));
        }
        if let Some(s) = &self.sut_share {
            let of = ShareOf::parse(s).ok_or_else(|| format!("`sut_share` is {s:?}; expected one of ok, fallback, client_error, server_error, timeout, connect_error, dropped, error"))?;
            let (text, above) = match (&self.above, &self.below) {
                (Some(a), None) => (a, true),
                (None, Some(b)) => (b, false),
                _ => return Err("`sut_share` needs exactly one of `above` or `below`".into()),
            };
            let bound: Share = text
                .parse()
                .map_err(|e| format!("`{}`: {e}", if above { "above" } else { "below" }))?;
            return Ok(Check::Sut(SutCheck::Share {
                of,
                bound,
                above,
                during,
                over,
            }));
        }
        if let Some(r) = &self.dependency {
            let route = route("dependency", r)?;
            // On a TCP route a call is a connection, on HTTP/2 a stream: the in-flight bound is the same check in
            // other words.
            let bounds = [
                (self.max_in_flight_below, false, Counted::Calls),
                (self.max_in_flight_at_most, true, Counted::Calls),
                (self.max_connections_below, false, Counted::Connections),
                (self.max_connections_at_most, true, Counted::Connections),
                (self.max_streams_in_flight_below, false, Counted::Streams),
                (self.max_streams_in_flight_at_most, true, Counted::Streams),
            ];
            if let Some((bound, inclusive, counted)) = bounds
                .into_iter()
                .find_map(|(b, i, c)| b.map(|b| (b, i, c)))
            {
                return Ok(Check::Dependency(DependencyCheck::MaxInFlight {
                    route,
                    bound,
                    inclusive,
                    during,
                    counted,
                }));
            }
            if let Some(code) = self.grpc_status {
                let (bound, at_least) = match (self.calls_at_least, self.calls_at_most) {
                    (Some(n), None) => (n, true),
                    (None, Some(n)) => (n, false),
                    _ => return Err(
                        "`grpc_status` needs exactly one of `calls_at_least` or `calls_at_most`"
                            .into(),
                    ),
                };
                return Ok(Check::Dependency(DependencyCheck::GrpcStatus {
                    route,
                    code,
                    bound,
                    at_least,
                    during,
                }));
            }
            if self.calls_at_least.is_some() || self.calls_at_most.is_some() {
                return Err(
                    "`calls_at_least` and `calls_at_most` count the calls of one `grpc_status`"
                        .into(),
                );
            }
            if let Some(below) = self.rate_while_open_below {
                let b = match (&self.breaker, while_open(&self.while_open)?) {
                    (Some(b), _) => breaker(b)?,
                    (None, Some(b)) => b,
                    (None, None) => {
                        return Err("`rate_while_open_below` needs `while_open: <breaker>`".into())
                    }
                };
                return Ok(Check::Dependency(DependencyCheck::RateWhileOpen {
                    route,
                    breaker: b,
                    below,
                }));
            }
            if let Some(at_most) = self.amplification_at_most {
                if !(at_most.is_finite() && at_most >= 0.0) {
                    return Err("`amplification_at_most` must be a non-negative number".into());
                }
                return Ok(Check::Dependency(DependencyCheck::Amplification {
                    route,
                    at_most,
                    during,
                }));
            }
            if let Some(at_most) = self.handshakes_per_request_at_most {
                if !(at_most.is_finite() && at_most >= 0.0) {
                    return Err(
                        "`handshakes_per_request_at_most` must be a non-negative number".into(),
                    );
                }
                if !names.tls {
                    return Err("`handshakes_per_request_at_most` counts the TLS handshakes of the dependency, which does not speak TLS: add `tls: {}` under `dependency`".into());
                }
                return Ok(Check::Dependency(DependencyCheck::HandshakeAmplification {
                    route,
                    at_most,
                    during,
                    over,
                }));
            }
            return Err("a `dependency` expectation needs one of `max_in_flight_below`, `max_in_flight_at_most`, `max_connections_below`, `max_connections_at_most`, `max_streams_in_flight_below`, `max_streams_in_flight_at_most`, `grpc_status`, `rate_while_open_below`, `amplification_at_most`, `handshakes_per_request_at_most`".into());
        }
        let b = breaker(self.breaker.as_deref().unwrap_or_default())?;
        let after = || -> Result<String, String> {
            phase("after", &self.after)?
                .ok_or_else(|| "this check needs `after: <phase>`".to_string())
        };
        if let Some(within) = self.opens_within {
            let route = match &self.route {
                Some(r) => Some(route("route", r)?),
                None => (names.breaker_routes)(&b),
            };
            return Ok(Check::Breaker(BreakerCheck::OpensWithin {
                breaker: b,
                within,
                after: after()?,
                route,
            }));
        }
        if let Some(within) = self.closes_within {
            let route = match &self.route {
                Some(r) => Some(route("route", r)?),
                None => (names.breaker_routes)(&b),
            };
            return Ok(Check::Breaker(BreakerCheck::ClosesWithin {
                after: after()?,
                breaker: b,
                within,
                route,
            }));
        }
        if self.stays_closed == Some(true) {
            return Ok(Check::Breaker(BreakerCheck::StaysClosed {
                breaker: b,
                during,
            }));
        }
        if let Some(at_most) = self.transitions_at_most {
            let route = match &self.route {
                Some(r) => Some(route("route", r)?),
                None => (names.breaker_routes)(&b),
            };
            return Ok(Check::Breaker(BreakerCheck::TransitionsAtMost {
                route,
                breaker: b,
                at_most,
                during,
            }));
        }
        if let Some(at_most) = self.probes_per_half_open_at_most {
            let route = match &self.route {
                Some(r) => route("route", r)?,
                None => (names.breaker_routes)(&b).ok_or_else(|| format!("`probes_per_half_open_at_most` needs `route:` (the dependency route breaker `{b}` guards)"))?,
            };
            return Ok(Check::Breaker(BreakerCheck::ProbesPerHalfOpenAtMost {
                breaker: b,
                route,
                at_most,
            }));
        }
        Err("a `breaker` expectation needs one of `opens_within`, `closes_within`, `stays_closed: true`, `transitions_at_most`, `probes_per_half_open_at_most`".into())
    }
}

/// Each check, by the field that names it, with the other fields it reads besides `id` and `abort_on_fail`. An
/// entry holds exactly one of them; a field its check does not read is an error rather than silently ignored.
const CHECKS: &[(&str, &[&str])] = &[
    ("opens_within", &["breaker", "after"]),
    ("closes_within", &["breaker", "after"]),
    ("stays_closed", &["breaker", "during"]),
    ("transitions_at_most", &["breaker", "route", "during"]),
    ("probes_per_half_open_at_most", &["breaker", "route"]),
    ("max_in_flight_below", &["dependency", "during"]),
    ("max_in_flight_at_most", &["dependency", "during"]),
    ("max_connections_below", &["dependency", "during"]),
    ("max_connections_at_most", &["dependency", "during"]),
    ("max_streams_in_flight_below", &["dependency", "during"]),
    ("max_streams_in_flight_at_most", &["dependency", "during"]),
    (
        "grpc_status",
        &["dependency", "calls_at_least", "calls_at_most", "during"],
    ),
    (
        "rate_while_open_below",
        &["dependency", "breaker", "while_open"],
    ),
    ("amplification_at_most", &["dependency", "during"]),
    (
        "handshakes_per_request_at_most",
        &["dependency", "during", "over"],
    ),
    ("sut_latency", &["below", "during", "while_open", "over"]),
    ("sut_share", &["above", "below", "during", "over"]),
];

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}
