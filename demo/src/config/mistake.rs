//! The seeds' classic mistakes, one switch each ([`Mistake`]), as written in YAML and on the command line.
//!
//! Not for what a switch does: each layer reads the switches that touch it (the breaker's through its policy).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// Seed 000 / 001: past its capacity the service queues every request for a free slot, in a queue with no
    /// bound, instead of refusing the excess at once (admission control): the queue grows as long as the overload
    /// lasts, and once the wait passes the callers' timeout nothing useful is served.
    UnboundedQueue,
    /// Seed 000's retry storm: a failed call is retried at once, so a request's calls come milliseconds apart
    /// and hit the dependency while it is still failing.
    NoBackoff,
    /// Seed 000: retries wait exactly the backoff, with no randomness, so every caller who failed together
    /// retries together, in lockstep.
    NoJitter,
    /// Seed 000 / 001: the caller's deadline is neither honoured nor sent on; each call keeps its own timeout
    /// (and retries) after the caller has left, so the dependency serves answers nobody waits for.
    NoDeadlinePropagation,
    /// Seed 000's extra load at the worst moment, from hedges: a hedged call's losers are not cancelled, they run
    /// to their end, doubling the load on a slow dependency.
    UncancelledHedges,
    /// Seed 002 / 001: calls are balanced over an operation's `endpoints` with no outlier ejection, so one sick
    /// instance of three fails a third of the calls and opens the breaker over the whole dependency for everyone.
    NoOutlierEjection,
    /// The dependency's name is resolved on every call and a failed resolution fails the call, with no cache
    /// honouring the TTL and no stale answer: every call is a query, and a resolver outage is the service's outage
    /// (with `dns:`).
    NoDnsCache,
    /// PostgreSQL's rule for SERIALIZABLE transactions broken: a transaction the database aborts with 40001
    /// (serialization failure) or 40P01 (deadlock) is not run again, so the caller gets an error for an order the
    /// next attempt would have placed.
    NoTransactionRetry,
    /// Seed 000's duplicates from at-least-once delivery, on a store that cannot recognise them: a write to Redis
    /// (the cart) is retried on any failure, a timed-out reply included, so a write Redis applied but whose answer
    /// came late is applied again.
    NonIdempotentRetry,
}

impl Mistake {
    /// Every switch, in documentation order.
    pub const ALL: [Mistake; 19] = [
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
        Mistake::UnboundedQueue,
        Mistake::NoBackoff,
        Mistake::NoJitter,
        Mistake::NoDeadlinePropagation,
        Mistake::UncancelledHedges,
        Mistake::NoOutlierEjection,
        Mistake::NoDnsCache,
        Mistake::NoTransactionRetry,
        Mistake::NonIdempotentRetry,
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
            Mistake::UnboundedQueue => "unbounded_queue",
            Mistake::NoBackoff => "no_backoff",
            Mistake::NoJitter => "no_jitter",
            Mistake::NoDeadlinePropagation => "no_deadline_propagation",
            Mistake::UncancelledHedges => "uncancelled_hedges",
            Mistake::NoOutlierEjection => "no_outlier_ejection",
            Mistake::NoDnsCache => "no_dns_cache",
            Mistake::NoTransactionRetry => "no_transaction_retry",
            Mistake::NonIdempotentRetry => "non_idempotent_retry",
        }
    }
}
