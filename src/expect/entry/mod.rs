//! An `expect:` entry read as the one check it holds: [`Entry`] has one variant per check, each with exactly the
//! fields that check reads, its bounds parsed. A written entry becomes an `Entry` or an error that names the field:
//! two checks in one entry, a field its check ignores, a missing bound. Only then are its names (phases,
//! breakers, routes) resolved against the scenario (`resolver`), variant by variant, into a [`Check`].
//!
//! Not for the format as written (`spec`) nor for judging (each family's file). Adding an expectation means a field
//! in `spec`, its line in [`CHECKS`], a variant here, and the check in its family's file.

use faultline_units::{Dur, GrpcCode, Rate, Share};

use super::dependency::{Counted, DependencyCheck};
use super::dns::DnsEntry;
use super::instances::InstanceEntry;
use super::metric::{self, MetricCheck, MetricEntry};
use super::postgres::PostgresEntry;
use super::redis::RedisCheck;
use super::requests::{RequestsCheck, RequestsEntry};
use super::spec::{ExpectationSpec, Names, WhileOpen};
use super::sut::{self, Percentile, ShareOf};
use super::{Check, Expectation};
use crate::record::OutcomeClass;
use resolver::Resolver;

mod resolver;

/// Each check, by the field that names it, with the other fields it reads besides `id` and `abort_on_fail`. An
/// entry holds exactly one of them; a field its check does not read is an error rather than silently ignored.
pub const CHECKS: &[(&str, &[&str])] = &[
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
    (
        "ejected_within",
        &["dependency", "instance", "after", "share_below", "over"],
    ),
    (
        "returned_within",
        &["dependency", "instance", "after", "share_above", "over"],
    ),
    (
        "healthy_in_flight_below",
        &["dependency", "instance", "during"],
    ),
    (
        "sut_latency",
        &["below", "during", "while_open", "over", "class"],
    ),
    ("sut_share", &["above", "below", "during", "over"]),
    ("sut_goodput_at_least", &["during", "over"]),
    ("unmatched_calls_at_most", &[]),
    ("max_below", &["sut_metric", "during", "metrics"]),
    ("rate_below", &["sut_metric", "during", "metrics"]),
    ("at_end", &["sut_metric", "during", "metrics"]),
    ("retries_per_request_at_most", &["dependency", "during"]),
    ("retry_spacing_at_least", &["dependency", "during"]),
    ("retry_jitter_at_least", &["dependency", "during"]),
    ("calls_after_give_up_at_most", &["dependency", "during"]),
    ("wasted_work_below", &["dependency", "during"]),
    ("deadline_propagated", &["dependency", "during"]),
    ("hedges_per_request_at_most", &["dependency", "during"]),
    ("hedges_cancelled_within", &["dependency", "during"]),
    ("queries_per_second_at_most", &["dns", "during"]),
    ("moved_within", &["dns", "after", "route"]),
    (
        "command",
        &[
            "dependency",
            "errors_at_most",
            "error_share_below",
            "calls_at_least",
            "p99_below",
            "during",
        ],
    ),
    (
        "entry",
        &[
            "dependency",
            "taken_at_least",
            "taken_at_most",
            "matched_at_least",
        ],
    ),
    (
        "statement",
        &[
            "dependency",
            "errors_at_most",
            "sqlstate",
            "calls_at_least",
            "p99_below",
            "per_request_at_most",
            "during",
        ],
    ),
];

/// One entry's check as written, its bounds parsed and its names not yet checked against the scenario: by family,
/// as [`Check`] is, with the subject beside the family's variant.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry<'a> {
    /// A breaker named under `breakers:`, and what it must do.
    Breaker(&'a str, BreakerEntry<'a>),
    /// A dependency route named under `dependency.routes`, and what its traffic must stay within.
    Dependency(&'a str, DependencyEntry<'a>),
    Sut(SutEntry<'a>),
    /// A series of the SUT's own metrics, and its bound.
    Metric(MetricEntry<'a>),
    /// Calls on no route of the dependency, at most this many.
    Unmatched(u64),
    /// A dependency route, and what the calls each SUT request caused there must hold (`requests`).
    Requests(&'a str, RequestsEntry<'a>),
    /// The instances of a dependency route (`instances: N`).
    Instances(InstanceEntry<'a>),
    /// The statements of one entry of a postgres route.
    Postgres(PostgresEntry<'a>),
    /// A command of a Redis route, or an entry of a route (`super::redis`).
    Redis(&'a str, RedisEntry<'a>),
    /// A name the dependency's resolver answers (`super::dns`).
    Dns(DnsEntry<'a>),
}

/// A `command` or `entry` check as written.
#[derive(Debug, Clone, PartialEq)]
pub enum RedisEntry<'a> {
    Command {
        command: &'a str,
        bound: super::redis::CommandBound,
        during: Option<&'a str>,
    },
    Entry {
        entry: &'a str,
        bound: super::redis::EntryBound,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum BreakerEntry<'a> {
    OpensWithin {
        within: Dur,
        after: &'a str,
        route: Option<&'a str>,
    },
    ClosesWithin {
        within: Dur,
        after: &'a str,
        route: Option<&'a str>,
    },
    StaysClosed {
        during: Option<&'a str>,
    },
    TransitionsAtMost {
        at_most: u32,
        route: Option<&'a str>,
        during: Option<&'a str>,
    },
    ProbesPerHalfOpenAtMost {
        at_most: u32,
        route: Option<&'a str>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum DependencyEntry<'a> {
    /// Any of the six in-flight bounds: calls, connections (TCP) or streams (HTTP/2), below or at most.
    MaxInFlight {
        bound: u64,
        inclusive: bool,
        counted: Counted,
        during: Option<&'a str>,
    },
    GrpcStatus {
        code: GrpcCode,
        bound: u64,
        at_least: bool,
        during: Option<&'a str>,
    },
    RateWhileOpen {
        below: Rate,
        breaker: Option<&'a str>,
        while_open: Option<&'a WhileOpen>,
    },
    Amplification {
        at_most: f64,
        during: Option<&'a str>,
    },
    HandshakeAmplification {
        at_most: f64,
        during: Option<&'a str>,
        over: Option<Dur>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum SutEntry<'a> {
    Latency {
        percentile: Percentile,
        below: Dur,
        during: Option<&'a str>,
        while_open: Option<&'a WhileOpen>,
        over: Option<Dur>,
        class: Option<OutcomeClass>,
    },
    Goodput {
        at_least: Rate,
        during: Option<&'a str>,
        over: Option<Dur>,
    },
    Share {
        of: ShareOf,
        bound: Share,
        above: bool,
        during: Option<&'a str>,
        over: Option<Dur>,
    },
}

impl ExpectationSpec {
    /// Reads the entry as its one check, resolves its names and parses its bounds. The error says which field.
    pub fn resolve(&self, names: &Names<'_>) -> Result<Expectation, String> {
        let check = Entry::read(self)?.resolve(names)?;
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
}

impl<'a> Entry<'a> {
    /// The one check a written entry holds, or what is wrong with its shape: two checks, no subject or two, a
    /// field its check ignores, a bound missing or malformed.
    pub fn read(spec: &'a ExpectationSpec) -> Result<Entry<'a>, String> {
        let written = spec.written();
        let checks: Vec<&(&str, &[&str])> = CHECKS
            .iter()
            .filter(|(c, _)| written.iter().any(|w| w == c))
            .collect();
        // Two subjects that are their own checks (`sut_latency`, `sut_share`, ...) are said as two subjects below.
        let subjects_only = checks.iter().all(|(c, _)| {
            matches!(
                *c,
                "sut_latency" | "sut_share" | "sut_goodput_at_least" | "unmatched_calls_at_most"
            )
        });
        if checks.len() > 1 && !subjects_only {
            let named: Vec<String> = checks.iter().map(|(c, _)| format!("`{c}`")).collect();
            return Err(format!(
                "an expectation holds one check, and this one has {}: write one entry for each",
                named.join(" and ")
            ));
        }
        let subjects = [
            spec.breaker.is_some() && spec.dependency.is_none(),
            spec.dependency.is_some(),
            spec.sut_latency.is_some(),
            spec.sut_share.is_some(),
            spec.unmatched_calls_at_most.is_some(),
            spec.sut_goodput_at_least.is_some(),
            spec.sut_metric.is_some(),
            spec.dns.is_some(),
        ];
        if subjects.iter().filter(|s| **s).count() != 1 {
            return Err("an expectation needs exactly one subject: `breaker`, `dependency`, `dns`, `sut_latency`, `sut_share`, `sut_goodput_at_least`, `sut_metric` or `unmatched_calls_at_most`".into());
        }
        check_window(spec)?;
        if let [(name, reads)] = checks.as_slice() {
            if let Some(field) = written.iter().find(|w| {
                !matches!(w.as_str(), "id" | "abort_on_fail")
                    && w != name
                    && !reads.contains(&w.as_str())
            }) {
                return Err(stray(field, name, reads));
            }
        }
        if let Some(p) = &spec.sut_latency {
            return sut_latency(spec, p).map(Entry::Sut);
        }
        if let Some(s) = &spec.sut_share {
            return sut_share(spec, s).map(Entry::Sut);
        }
        if let Some(at_most) = spec.unmatched_calls_at_most {
            return Ok(Entry::Unmatched(at_most));
        }
        if let Some(at_least) = spec.sut_goodput_at_least {
            let (during, over) = (spec.during.as_deref(), spec.over);
            return Ok(Entry::Sut(SutEntry::Goodput {
                at_least,
                during,
                over,
            }));
        }
        if let Some(selector) = &spec.sut_metric {
            return metric::entry(spec, selector).map(Entry::Metric);
        }
        if let Some(entry) = DnsEntry::read(spec) {
            return entry.map(Entry::Dns);
        }
        if let Some(entry) = PostgresEntry::read(spec) {
            return entry.map(Entry::Postgres);
        }
        if let (Some(route), Some(r)) = (&spec.dependency, RequestsEntry::read(spec)) {
            return r.map(|r| Entry::Requests(route, r));
        }
        if let Some(entry) = InstanceEntry::read(spec) {
            return entry.map(Entry::Instances);
        }
        if let (Some(route), Some(command)) = (&spec.dependency, &spec.command) {
            let bound = super::redis::command_bound(spec)?;
            let during = spec.during.as_deref();
            return Ok(Entry::Redis(
                route,
                RedisEntry::Command {
                    command,
                    bound,
                    during,
                },
            ));
        }
        if let (Some(route), Some(entry)) = (&spec.dependency, &spec.entry) {
            let bound = super::redis::entry_bound(spec)?;
            return Ok(Entry::Redis(route, RedisEntry::Entry { entry, bound }));
        }
        if let Some(route) = &spec.dependency {
            return dependency(spec).map(|d| Entry::Dependency(route, d));
        }
        let breaker = spec.breaker.as_deref().unwrap_or_default();
        breaker_entry(spec).map(|b| Entry::Breaker(breaker, b))
    }

    /// The check, its names resolved against the scenario: phases, breakers and routes must exist.
    pub fn resolve(self, names: &Names<'_>) -> Result<Check, String> {
        let r = Resolver { names };
        match self {
            Entry::Breaker(breaker, b) => r.breaker_check(breaker, b).map(Check::Breaker),
            Entry::Dependency(route, d) => r.dependency_check(route, d).map(Check::Dependency),
            Entry::Sut(s) => r.sut_check(s).map(Check::Sut),
            Entry::Metric(m) => {
                let during = r.during(m.during)?;
                MetricCheck::resolve(m, during, r.names.metrics).map(Check::Metric)
            }
            Entry::Unmatched(at_most) => {
                Ok(Check::Dependency(DependencyCheck::Unmatched { at_most }))
            }
            Entry::Requests(route, e) => Ok(Check::Requests(RequestsCheck {
                route: r.route("dependency", route)?,
                bound: e.bound,
                during: r.during(e.during)?,
            })),
            Entry::Dns(d) => d
                .resolve(&|f, n| r.dns_name(f, n), &|f, n| r.route(f, n), &|f, n| {
                    r.phase(f, n)
                })
                .map(Check::Dns),
            Entry::Postgres(p) => p
                .resolve(&|f, n| r.route(f, n), &|f, n| r.phase(f, n))
                .map(Check::Postgres),
            Entry::Instances(i) => {
                let check = i.resolve(&|f, n| r.route(f, n), &|f, n| r.phase(f, n))?;
                let (route, instance) = check.instance();
                let served_by = (r.names.instances)(route);
                if served_by == 0 {
                    return Err(format!("`dependency: {route}` has no instances: give the route `instances: N` to judge one of them"));
                }
                if let Some(k) = instance.filter(|k| *k == 0 || *k > served_by) {
                    return Err(format!(
                        "`instance: {k}`: route {route} has {served_by} instances, numbered from 1"
                    ));
                }
                Ok(Check::Instances(check))
            }
            Entry::Redis(route, e) => {
                let route = r.route("dependency", route)?;
                Ok(Check::Redis(match e {
                    RedisEntry::Command {
                        command,
                        bound,
                        during,
                    } => RedisCheck::Command {
                        route,
                        command: command.to_ascii_uppercase(),
                        bound,
                        during: r.during(during)?,
                    },
                    RedisEntry::Entry { entry, bound } => RedisCheck::Entry {
                        route,
                        entry: entry.to_string(),
                        bound,
                    },
                }))
            }
        }
    }
}

fn breaker_entry(spec: &ExpectationSpec) -> Result<BreakerEntry<'_>, String> {
    let after = || {
        spec.after
            .as_deref()
            .ok_or_else(|| "this check needs `after: <phase>`".to_string())
    };
    let (route, during) = (spec.route.as_deref(), spec.during.as_deref());
    if let Some(within) = spec.opens_within {
        return Ok(BreakerEntry::OpensWithin {
            within,
            after: after()?,
            route,
        });
    }
    if let Some(within) = spec.closes_within {
        return Ok(BreakerEntry::ClosesWithin {
            within,
            after: after()?,
            route,
        });
    }
    if spec.stays_closed == Some(true) {
        return Ok(BreakerEntry::StaysClosed { during });
    }
    if let Some(at_most) = spec.transitions_at_most {
        return Ok(BreakerEntry::TransitionsAtMost {
            at_most,
            route,
            during,
        });
    }
    if let Some(at_most) = spec.probes_per_half_open_at_most {
        return Ok(BreakerEntry::ProbesPerHalfOpenAtMost { at_most, route });
    }
    Err("a `breaker` expectation needs one of `opens_within`, `closes_within`, `stays_closed: true`, `transitions_at_most`, `probes_per_half_open_at_most`".into())
}

fn dependency(spec: &ExpectationSpec) -> Result<DependencyEntry<'_>, String> {
    let during = spec.during.as_deref();
    // On a TCP route a call is a connection, on HTTP/2 a stream: the in-flight bound is the same check in other
    // words.
    let bounds = [
        (spec.max_in_flight_below, false, Counted::Calls),
        (spec.max_in_flight_at_most, true, Counted::Calls),
        (spec.max_connections_below, false, Counted::Connections),
        (spec.max_connections_at_most, true, Counted::Connections),
        (spec.max_streams_in_flight_below, false, Counted::Streams),
        (spec.max_streams_in_flight_at_most, true, Counted::Streams),
    ];
    if let Some((bound, inclusive, counted)) = bounds
        .into_iter()
        .find_map(|(b, i, c)| b.map(|b| (b, i, c)))
    {
        return Ok(DependencyEntry::MaxInFlight {
            bound,
            inclusive,
            counted,
            during,
        });
    }
    if let Some(code) = spec.grpc_status {
        let (bound, at_least) = match (spec.calls_at_least, spec.calls_at_most) {
            (Some(n), None) => (n, true),
            (None, Some(n)) => (n, false),
            _ => {
                return Err(
                    "`grpc_status` needs exactly one of `calls_at_least` or `calls_at_most`".into(),
                )
            }
        };
        return Ok(DependencyEntry::GrpcStatus {
            code,
            bound,
            at_least,
            during,
        });
    }
    if spec.calls_at_least.is_some() || spec.calls_at_most.is_some() {
        return Err(
            "`calls_at_least` and `calls_at_most` count the calls of one `grpc_status`".into(),
        );
    }
    if let Some(below) = spec.rate_while_open_below {
        return Ok(DependencyEntry::RateWhileOpen {
            below,
            breaker: spec.breaker.as_deref(),
            while_open: spec.while_open.as_ref(),
        });
    }
    if let Some(at_most) = spec.amplification_at_most {
        return Ok(DependencyEntry::Amplification {
            at_most: non_negative("amplification_at_most", at_most)?,
            during,
        });
    }
    if let Some(at_most) = spec.handshakes_per_request_at_most {
        return Ok(DependencyEntry::HandshakeAmplification {
            at_most: non_negative("handshakes_per_request_at_most", at_most)?,
            during,
            over: spec.over,
        });
    }
    Err("a `dependency` expectation needs one of `max_in_flight_below`, `max_in_flight_at_most`, `max_connections_below`, `max_connections_at_most`, `max_streams_in_flight_below`, `max_streams_in_flight_at_most`, `grpc_status`, `rate_while_open_below`, `amplification_at_most`, `handshakes_per_request_at_most`".into())
}

/// `over` (a sliding window) is for the checks that judge a window, longer than zero, and not with `while_open`.
fn check_window(spec: &ExpectationSpec) -> Result<(), String> {
    if spec.over.is_some()
        && spec.sut_latency.is_none()
        && spec.sut_share.is_none()
        && spec.sut_goodput_at_least.is_none()
        && spec.handshakes_per_request_at_most.is_none()
        && spec.ejected_within.is_none()
        && spec.returned_within.is_none()
    {
        return Err(
            "`over` (a sliding window) applies to `sut_latency`, `sut_share`, `sut_goodput_at_least`, `handshakes_per_request_at_most`, `ejected_within` and `returned_within` only".into(),
        );
    }
    match spec.over {
        Some(w) if w.get().is_zero() => {
            Err("`over` must be a window longer than zero, e.g. `over: 10s`".into())
        }
        Some(_) if spec.while_open.is_some() => Err("`over` and `while_open` do not combine: a sliding window runs over a whole phase; judge the open spans without `over`".into()),
        _ => Ok(()),
    }
}

/// What a field that check `name` does not read is told.
fn stray(field: &str, name: &str, reads: &[&str]) -> String {
    let why = match (field, name) {
        ("during", "opens_within" | "closes_within") => {
            format!(" (`{name}` counts from the start of the phase named by `after`)")
        }
        ("after", _) => {
            " (`after` belongs to `opens_within` and `closes_within`; the phase a check judges is \
                         `during`)"
                .to_string()
        }
        _ => String::new(),
    };
    if reads.is_empty() {
        return format!(
            "`{field}` does not apply to `{name}`, which takes no other field: remove it"
        );
    }
    let reads: Vec<String> = reads.iter().map(|r| format!("`{r}`")).collect();
    format!(
        "`{field}` does not apply to `{name}`, which reads {}{why}: remove it",
        reads.join(", ")
    )
}

fn non_negative(field: &str, value: f64) -> Result<f64, String> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(format!("`{field}` must be a non-negative number"))
    }
}

fn sut_latency<'a>(spec: &'a ExpectationSpec, p: &str) -> Result<SutEntry<'a>, String> {
    let percentile = Percentile::parse(p).ok_or_else(|| {
        format!("`sut_latency` is {p:?}; expected p50, p90, p99, p99.9, p99.99 or max")
    })?;
    let below = spec
        .below
        .as_deref()
        .ok_or("`sut_latency` needs `below: <duration>`")?;
    let class = match spec.class.as_deref() {
        None => None,
        Some(c) => Some(sut::latency_class(
            c,
            spec.over.is_some() || spec.while_open.is_some(),
        )?),
    };
    Ok(SutEntry::Latency {
        percentile,
        below: below.parse().map_err(|e| format!("`below`: {e}"))?,
        during: spec.during.as_deref(),
        while_open: spec.while_open.as_ref(),
        over: spec.over,
        class,
    })
}

fn sut_share<'a>(spec: &'a ExpectationSpec, s: &str) -> Result<SutEntry<'a>, String> {
    let of = ShareOf::parse(s).ok_or_else(|| format!("`sut_share` is {s:?}; expected one of ok, fallback, client_error, server_error, timeout, connect_error, dropped, error"))?;
    let (text, above) = match (&spec.above, &spec.below) {
        (Some(a), None) => (a, true),
        (None, Some(b)) => (b, false),
        _ => return Err("`sut_share` needs exactly one of `above` or `below`".into()),
    };
    Ok(SutEntry::Share {
        of,
        bound: text
            .parse()
            .map_err(|e| format!("`{}`: {e}", if above { "above" } else { "below" }))?,
        above,
        during: spec.during.as_deref(),
        over: spec.over,
    })
}
