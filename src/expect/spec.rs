//! The `expect:` entries as a scenario writes them: one flat mapping per entry (`{ breaker: pricing, opens_within:
//! 5s, after: brownout }`), its JSON schema, and `--time-scale` applied to its bounds.
//!
//! Not for what an entry means: `entry` reads it as the one check it holds and resolves its names into an
//! [`Expectation`](super::Expectation), which evaluates itself on a recording.

use faultline_units::{Dur, GrpcCode, Rate, Share};
use serde::{Deserialize, Serialize};

/// One entry of the scenario's `expect:` list, as written. Exactly one subject (`breaker`, `dependency`,
/// `sut_latency`, `sut_share`) and one check go together; `entry` says which combinations make sense.
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
    /// Subject and check at once: the SUT's goodput (requests answered `ok` or `fallback`, per second of the phase)
    /// is at least this rate, over the phase or every `over` window of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sut_goodput_at_least: Option<Rate>,
    /// Subject: a series of the SUT's own Prometheus metrics, `name` or `name{label="value",...}` (the matching
    /// series summed), scraped from `metrics` or from the page the breakers are scraped from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sut_metric: Option<String>,
    /// Subject: a name the dependency's resolver answers (`dependency.dns.names`), e.g. `pricing.internal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<String>,
    /// With `dependency` (a route with `protocol: postgres`): the statements of one of its entries (its `name`,
    /// or `other` for the statements no entry matched), as faultd recorded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    /// `statement` with `errors_at_most`: only errors of this SQLSTATE count (`40001`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqlstate: Option<String>,

    /// The breaker opens within this long after the phase named by `after` begins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opens_within: Option<Dur>,
    /// The breaker closes within this long after the phase named by `after` begins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closes_within: Option<Dur>,
    /// The phase whose start `opens_within` / `closes_within` / `moved_within` count from.
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
    /// With `dns`: in every 1 s window of the phase named by `during` (or the run), the resolver was asked for the
    /// name at most this many times per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries_per_second_at_most: Option<f64>,
    /// With `dns`: the first call at `route` (the listener the record moved to) comes within this long after the
    /// phase named by `after` begins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_within: Option<Dur>,
    /// The route the breaker guards, for probe counting (default: the breaker's own `route`); with `moved_within`,
    /// the route whose listener the moved record points at.
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
    /// Redis routes (`protocol: redis`): the command (`GET`, `SET`) whose counts `errors_at_most`,
    /// `error_share_below`, `calls_at_least` or `p99_below` bounds, as faultd recorded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// With `command`: at most this many error replies (faultd's and the server's). With `statement`: at most
    /// this many of its statements answered with an error (faultd's or the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors_at_most: Option<u64>,
    /// With `command`: error replies under this share of its calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_share_below: Option<Share>,
    /// With `command`: the 99th percentile of its latency at faultd under this. With `statement`: the 99th
    /// percentile of its latency (sent to the end of its reply) under this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_below: Option<Dur>,
    /// A named entry of the route (HTTP `matched`, Redis `redis`) whose counts `taken_at_least`, `taken_at_most`
    /// or `matched_at_least` bounds, over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// With `entry`: it took at least this many calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_at_least: Option<u64>,
    /// With `entry`: it took at most this many calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_at_most: Option<u64>,
    /// With `entry`: at least this many calls met its conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched_at_least: Option<u64>,
    /// With `grpc_status`: at least this many calls ended with that status; with `command`: at least this many
    /// calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_at_least: Option<u64>,
    /// With `statement`: its statements per request sent to the SUT over the span stay at or under this (a
    /// transaction run again, or a call retried, is one more statement for the same request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_request_at_most: Option<f64>,
    /// With `grpc_status`: at most this many calls ended with that status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_at_most: Option<u64>,
    /// The dependency's call rate while the breaker named by `while_open` is open stays below this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_while_open_below: Option<Rate>,
    /// Calls at the dependency per request sent to the SUT stay at or under this (retry amplification).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amplification_at_most: Option<f64>,
    /// Subject and check at once: calls that reached the dependency on a path no route matches (answered 404, or
    /// forwarded to `dependency.unmatched.proxy`) number at most this many over the run; `0` says the routes cover
    /// every call the SUT makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmatched_calls_at_most: Option<u64>,
    /// TLS handshake attempts at the dependency's listener per request sent to the SUT stay at or under this (a
    /// client reconnecting after every failed handshake); the dependency must speak TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshakes_per_request_at_most: Option<f64>,

    /// `sut_metric`: every scraped value stays below this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_below: Option<f64>,
    /// `sut_metric` (a counter): its rate between any two consecutive scrapes stays below this (a reset counts
    /// from zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_below: Option<Rate>,
    /// `sut_metric`: the last value scraped in the run (or the phase) equals, or stays below or above, a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_end: Option<AtEnd>,
    /// `sut_metric`: the SUT's Prometheus page, a path on the SUT's URL or a whole URL (default: the page the
    /// breakers are scraped from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// `sut_latency`: only requests of this outcome class count (ok, fallback, client_error, server_error, timeout,
    /// connect_error), e.g. the shed answers' p99; judged over a phase or the run, per phase as loadgen recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Per SUT request (correlated by trace id): the calls one request caused at the route, minus one, stay at or
    /// under this for every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries_per_request_at_most: Option<u32>,
    /// Per SUT request: every retry starts at least this long after the previous call of the same request ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_spacing_at_least: Option<Dur>,
    /// Per SUT request: the spread of the retries' spacing (1.4826 x the median absolute deviation over the
    /// median, among retries of the same number) is at least this share, so that clients do not retry in lockstep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_jitter_at_least: Option<Share>,
    /// Per SUT request: calls that started after the SUT's caller had given up (its timeout passed, or it was
    /// answered already) number at most this many over the span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_after_give_up_at_most: Option<u64>,
    /// Per SUT request: of the time the dependency spent on the requests' calls, the share spent after the caller
    /// had gone stays below this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasted_work_below: Option<Share>,
    /// Per SUT request (`true`): every call carried a deadline at most the caller's remaining budget at its
    /// arrival (plus 10 ms for transit and a loaded host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_propagated: Option<bool>,
    /// Per SUT request: the most calls of one request in flight at once, minus one, stay at or under this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedges_per_request_at_most: Option<u32>,
    /// Per SUT request: every losing call of a request ends (is abandoned) within this long of the winner's
    /// answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedges_cancelled_within: Option<Dur>,
    /// With `dependency`: the instance (numbered from 1) of a route served by several (`instances: N`) that
    /// `ejected_within` and `returned_within` judge, or that `healthy_in_flight_below` leaves out (the sick one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<u32>,
    /// The instance's share of the instances' calls falls below `share_below` over some window (`over`, 1s by
    /// default) that ends within this long after the phase named by `after` begins: it was ejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ejected_within: Option<Dur>,
    /// The instance's share rises above `share_above` over some window that ends within this long after the phase
    /// named by `after` begins: it came back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returned_within: Option<Dur>,
    /// With `ejected_within`: the share of the calls below which the instance counts as ejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_below: Option<Share>,
    /// With `returned_within`: the share of the calls above which the instance counts as back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_above: Option<Share>,
    /// Calls in flight at each instance of the route (but `instance`, if given) stay below this in the phase named
    /// by `during` (or the run): the healthy instances absorb a sick one's share within their capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_in_flight_below: Option<u64>,

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

/// `at_end: { equals: 0 }`, `{ below: 5 }` or `{ above: 1 }`: the bound on a metric's last value.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AtEnd {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<f64>,
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
    /// The pages (paths or URLs) the breakers are scraped from, where `sut_metric` reads by default.
    pub metrics: &'a [String],
    /// How many instances a route is served by (`instances: N`; 0 for a route without them).
    pub instances: &'a dyn Fn(&str) -> u32,
    /// The names the dependency's resolver answers (`dependency.dns.names`), as written.
    pub dns_names: &'a [String],
}

impl ExpectationSpec {
    /// The fields the entry sets, by name.
    pub(super) fn written(&self) -> Vec<String> {
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
            &mut self.ejected_within,
            &mut self.returned_within,
            &mut self.over,
            &mut self.retry_spacing_at_least,
            &mut self.hedges_cancelled_within,
            &mut self.p99_below,
            &mut self.moved_within,
        ]
        .into_iter()
        .flatten()
        {
            *d = d.scaled(factor);
        }
        for r in [
            &mut self.rate_while_open_below,
            &mut self.sut_goodput_at_least,
            &mut self.rate_below,
        ]
        .into_iter()
        .flatten()
        {
            *r = Rate::per_second(r.per_sec() / factor);
        }
        if let Some(q) = self.queries_per_second_at_most.as_mut() {
            *q /= factor;
        }
        if self.sut_latency.is_some() {
            if let Some(b) = self.below.as_mut() {
                if let Ok(d) = b.parse::<Dur>() {
                    *b = d.scaled(factor).to_string();
                }
            }
        }
    }
}
