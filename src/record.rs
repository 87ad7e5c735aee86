//! What a run recorded, lined up on one clock: the phases as they happened, the SUT's traffic as loadgen saw it,
//! the dependency's traffic as faultd saw it, and per breaker the finest timeline with every other one beside it.
//!
//! This is the only input of expectation evaluation and of the reports, so that both can be tested on synthetic
//! recordings. It is not where recording happens: faultd and loadgen record; `observe` turns their recordings into
//! this shape, once after the run and second by second during it for the live verdicts.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::breaker::inference::{self, InferenceError, InferenceParams, Traffic};
use crate::breaker::metrics::MetricSeries;
use crate::breaker::BreakerTimeline;

mod latency;
pub use latency::LatencySeries;

/// The outcome classes of a request to the SUT: loadgen's own classes, one per request.
pub use loadgen::Outcome as OutcomeClass;

/// Counts per outcome class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByClass(pub [u64; 7]);

impl ByClass {
    pub fn get(&self, class: OutcomeClass) -> u64 {
        self.0[class as usize]
    }

    pub fn add(&mut self, class: OutcomeClass, n: u64) {
        self.0[class as usize] += n;
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    pub fn merge(&mut self, other: &ByClass) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }
}

/// A phase of the scenario's timeline as it ran: `[start, end)` from the run's origin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseSpan {
    pub name: String,
    pub start: Duration,
    pub end: Duration,
}

/// One bucket of the SUT's traffic, as the load generator saw it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SutBucket {
    /// Requests whose intended send time falls in this bucket (sent or dropped).
    pub offered: u64,
    /// Requests that completed in this bucket, by class (dropped ones by their intended time).
    pub completed: ByClass,
    /// Most requests in flight at once during the bucket.
    pub in_flight: u64,
    pub p50: Option<Duration>,
    pub p90: Option<Duration>,
    pub p99: Option<Duration>,
    pub max: Option<Duration>,
}

/// One call at a dependency route, as faultd timed it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimedCall {
    /// When it arrived, from the run's start.
    pub at: Duration,
    /// When faultd answered it or its caller left; `None` when unknown.
    pub answered: Option<Duration>,
}

/// One bucket of one dependency route, as faultd saw it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DependencyBucket {
    pub arrivals: u64,
    /// The most calls in flight at once in the bucket: exact from one faultd; from several replicas, the sum of
    /// their own maxima, an upper bound (`RunRecord::in_flight_is_upper_bound`).
    pub in_flight_max: u64,
    /// When `in_flight_max` is such an upper bound: the most calls one replica held at once in the bucket, which
    /// the true maximum is at least. `None` when `in_flight_max` is exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_max_at_least: Option<u64>,
    /// When the bucket's first few arrivals came, from the bucket's start (faultd times a handful per bucket so
    /// that sparse calls such as half-open probes can be placed within a bucket).
    #[serde(default)]
    pub first_arrivals: Vec<Duration>,
    /// How long faultd held each of those calls before it answered or its caller left (`None`: unknown, or still in
    /// flight when the run ended): the moment the caller could first know how the call went.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_held: Vec<Option<Duration>>,
    /// gRPC calls that ended in the bucket, by the name of their status (`OK`, `UNAVAILABLE`, ...); empty for a
    /// route no gRPC call reached.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grpc_status: BTreeMap<String, u64>,
}

/// One bucket of the TLS handshakes at the dependency's data listener, as faultd saw them: every connection that
/// sent a hello counts once, when its handshake ended, whatever the outcome. A failed handshake never becomes a call
/// at a route, so this is where a client that reconnects after every failure shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandshakeBucket {
    /// Handshakes that ended in the bucket, by faultd's outcome name (`ok`, `resumed`, `expired`, `alert`, ...).
    pub outcomes: BTreeMap<String, u64>,
    /// Handshakes the `delay` fault held.
    pub delayed: u64,
}

impl HandshakeBucket {
    /// Every handshake attempt of the bucket, completed or not.
    pub fn attempts(&self) -> u64 {
        self.outcomes.values().sum()
    }
}

/// The TLS handshakes of the SUT's load, as loadgen's client counted them over the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadHandshakes {
    /// Handshakes completed in full.
    pub full: u64,
    /// Handshakes that resumed an earlier session.
    pub resumed: u64,
    /// Handshakes that failed (each a `connect_error`).
    pub failed: u64,
}

/// Everything an expectation may look at.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// The width of every bucket series below.
    pub bucket: Duration,
    /// How long the run lasted (shorter than the scenario if it was aborted).
    pub duration: Duration,
    pub phases: Vec<PhaseSpan>,
    pub sut: Vec<SutBucket>,
    /// Corrected SUT latency per bucket (from the intended send time), for percentiles over any set of buckets;
    /// kept encoded, decoded as read (`LatencySeries`).
    pub sut_latency: LatencySeries,
    /// Per dependency route.
    pub dependency: BTreeMap<String, Vec<DependencyBucket>>,
    /// Per dependency route served by instances (`instances: N`), one series per instance in order (the first is
    /// instance 1); each instance's calls are its route's too. Routes of one listener are absent.
    pub instances: BTreeMap<String, Vec<Vec<DependencyBucket>>>,
    /// How many faultd replicas served the dependency (1: one faultd, whose maxima in flight are exact).
    pub dependency_replicas: u32,
    /// Per breaker, the finest timeline of its sources: what verdicts time transitions with.
    pub breakers: BTreeMap<String, BreakerTimeline>,
    /// Per breaker, every timeline there is: each of its sources and the one inferred from traffic. Verdicts that
    /// count (transitions, probes) weigh them all; reports list where they disagree.
    pub evidence: BTreeMap<String, Vec<BreakerTimeline>>,
    /// The dependency's TLS handshakes per bucket; `None` when its data plane does not speak TLS.
    pub handshakes: Option<Vec<HandshakeBucket>>,
    /// The handshakes of loadgen's client; `None` when the SUT was reached over cleartext.
    pub load_tls: Option<LoadHandshakes>,
    /// What the dependency's resolver answered per name and bucket; `None` without `dependency.dns`.
    pub dns: Option<faultd::dns::DnsRecording>,
    /// The SUT's `connect_error` class by reason (a refused connect, `tls: certificate expired`, ...), over the run.
    pub connect_errors: BTreeMap<String, u64>,
    /// Calls that reached the dependency on no route, over the run so far (answered 404, or forwarded to
    /// `dependency.unmatched.proxy`), and their methods and paths with the most calls.
    pub unmatched: u64,
    pub unmatched_paths: Vec<faultd::UnmatchedPath>,
    /// The SUT's metrics the expectations read, by the selector as written.
    pub sut_metrics: BTreeMap<String, MetricSeries>,
    /// Per phase (as loadgen recorded it, by intended send time), the corrected latency of each outcome class; only
    /// in the record of a finished run.
    pub sut_class_latency: BTreeMap<String, BTreeMap<OutcomeClass, Histogram<u64>>>,
    /// Each SUT request with the dependency calls it caused, when the run followed its requests (`correlate:`, or
    /// an expectation of the requests family).
    pub requests: Option<std::sync::Arc<crate::correlate::Join>>,
    /// Per dependency route, its entries' counts by entry name (HTTP `matched` entries, Redis `redis` entries), over
    /// the run so far.
    pub entries: BTreeMap<String, BTreeMap<String, faultd::MatchCounts>>,
    /// Per Redis route (`protocol: redis`), faultd's per-command recording.
    pub redis: BTreeMap<String, faultd::tcp::protocol::redis::RedisRecording>,
    /// Per dependency route speaking `protocol: postgres`: its statements per entry and phase, as faultd
    /// recorded them.
    pub postgres: BTreeMap<String, faultd::tcp::protocol::postgres::PostgresRecording>,
}

impl RunRecord {
    /// Infers the timeline of the breaker guarding `route` from traffic alone: the requests the SUT was sent, the
    /// calls that reached `route`, and the first phase as the healthy reference (`breaker::inference`).
    pub fn inferred_timeline(&self, route: &str) -> Result<BreakerTimeline, InferenceError> {
        let series = self
            .dependency
            .get(route)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let sent: Vec<u64> = self
            .sut
            .iter()
            .map(|b| {
                b.offered
                    .saturating_sub(b.completed.get(OutcomeClass::Dropped))
            })
            .collect();
        let arrivals: Vec<u64> = series.iter().map(|b| b.arrivals).collect();
        let held: Vec<u64> = series.iter().map(|b| b.in_flight_max).collect();
        let reference_end = self.phases.first().map(|p| p.end).unwrap_or(self.duration);
        let reference = self.buckets_in(Duration::ZERO, reference_end);
        inference::infer(
            Traffic {
                bucket: self.bucket,
                sut_sent: &sent,
                dependency_arrivals: &arrivals,
                dependency_in_flight: &held,
                reference,
            },
            InferenceParams::default(),
        )
    }

    /// A record of nothing yet, with buckets `bucket` wide.
    pub fn empty(bucket: Duration) -> RunRecord {
        RunRecord {
            bucket,
            duration: Duration::ZERO,
            phases: Vec::new(),
            sut: Vec::new(),
            sut_latency: LatencySeries::default(),
            dependency: BTreeMap::new(),
            instances: BTreeMap::new(),
            dependency_replicas: 1,
            breakers: BTreeMap::new(),
            evidence: BTreeMap::new(),
            handshakes: None,
            load_tls: None,
            dns: None,
            connect_errors: BTreeMap::new(),
            unmatched: 0,
            unmatched_paths: Vec::new(),
            sut_metrics: BTreeMap::new(),
            sut_class_latency: BTreeMap::new(),
            requests: None,
            entries: BTreeMap::new(),
            redis: BTreeMap::new(),
            postgres: BTreeMap::new(),
        }
    }

    /// Whether the dependency's maxima in flight are upper bounds: sums of several replicas' own maxima, whose
    /// peaks need not have coincided.
    pub fn in_flight_is_upper_bound(&self) -> bool {
        self.dependency_replicas > 1
    }

    /// TLS handshake attempts at the dependency over the given buckets (0 without TLS).
    pub fn handshakes_in(&self, buckets: Range<usize>) -> u64 {
        self.handshakes
            .as_deref()
            .map(|series| {
                buckets
                    .filter_map(|i| series.get(i))
                    .map(HandshakeBucket::attempts)
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Requests sent to the SUT (offered and not dropped) over the given buckets, by intended send time.
    pub fn sent_in(&self, buckets: Range<usize>) -> u64 {
        buckets
            .filter_map(|i| self.sut.get(i))
            .map(|b| {
                b.offered
                    .saturating_sub(b.completed.get(OutcomeClass::Dropped))
            })
            .sum()
    }

    /// The span of a phase. A phase followed by sub-phases named `name.1`, `name.2`, ... (a replayed trace) spans
    /// them all.
    pub fn phase(&self, name: &str) -> Option<PhaseSpan> {
        let i = self.phases.iter().position(|p| p.name == name)?;
        let prefix = format!("{name}.");
        let mut span = self.phases[i].clone();
        for next in &self.phases[i + 1..] {
            if !next.name.starts_with(&prefix) {
                break;
            }
            span.end = next.end;
        }
        Some(span)
    }

    /// The buckets whose start lies in `[start, end)`.
    pub fn buckets_in(&self, start: Duration, end: Duration) -> Range<usize> {
        let step = self.bucket.as_nanos().max(1);
        let first = start.as_nanos().div_ceil(step) as usize;
        let last = end.as_nanos().div_ceil(step) as usize;
        first..last.max(first)
    }

    /// The start time of bucket `i`.
    pub fn bucket_start(&self, i: usize) -> Duration {
        self.bucket * i as u32
    }

    /// The whole run as a span, for expectations without `during`.
    pub fn whole_run(&self) -> PhaseSpan {
        PhaseSpan {
            name: "the run".into(),
            start: Duration::ZERO,
            end: self.duration,
        }
    }

    /// Calls that reached `route` in `[from, to)`. Whole buckets count in full; in a bucket cut by either end, the
    /// individually timed arrivals count where they fall, and the untimed rest (which came after the last timed
    /// one) counts in full if the window reaches past that moment, so the figure can only err upwards.
    pub fn arrivals_between(&self, route: &str, from: Duration, to: Duration) -> u64 {
        let Some(series) = self.dependency.get(route) else {
            return 0;
        };
        let step = self.bucket.as_nanos().max(1);
        let first = (from.as_nanos() / step) as usize;
        let last = to.as_nanos().div_ceil(step) as usize;
        let mut n = 0;
        for (i, b) in series.iter().enumerate().take(last).skip(first) {
            let start = self.bucket_start(i);
            let end = start + self.bucket;
            if from <= start && end <= to {
                n += b.arrivals;
            } else {
                let timed = b
                    .first_arrivals
                    .iter()
                    .filter(|off| (from..to).contains(&(start + **off)))
                    .count() as u64;
                // The timed arrivals are the bucket's first ones, so the others came at or after the last timed
                // one: they count only if the window reaches past it.
                let untimed = b.arrivals.saturating_sub(b.first_arrivals.len() as u64);
                let untimed_from =
                    start + b.first_arrivals.iter().copied().max().unwrap_or_default();
                if untimed > 0 && to > untimed_from && from < end {
                    n += untimed;
                }
                n += timed;
            }
        }
        n
    }

    /// Every call that reached `route` in `[from, to)`, in order of arrival, each with the moment faultd answered it
    /// (or its caller left; `None` while still in flight at the end), when faultd timed them all; `None` when a
    /// bucket the window cuts holds arrivals it did not time, or a recording does not hold the answers' times.
    pub fn timed_calls(&self, route: &str, from: Duration, to: Duration) -> Option<Vec<TimedCall>> {
        let series = self.dependency.get(route)?;
        let step = self.bucket.as_nanos().max(1);
        let first = (from.as_nanos() / step) as usize;
        let last = to.as_nanos().div_ceil(step) as usize;
        let mut calls = Vec::new();
        for (i, b) in series.iter().enumerate().take(last).skip(first) {
            let start = self.bucket_start(i);
            if b.arrivals > b.first_arrivals.len() as u64 {
                // The untimed ones came after the last timed one: harmless only if that is past the window.
                let untimed_from =
                    start + b.first_arrivals.iter().copied().max().unwrap_or_default();
                if untimed_from < to {
                    return None;
                }
            }
            // A recording without the answers' times (an older faultd) cannot place them.
            if b.first_held.len() < b.first_arrivals.len() {
                return None;
            }
            for (k, off) in b.first_arrivals.iter().enumerate() {
                let at = start + *off;
                if (from..to).contains(&at) {
                    let answered = b.first_held.get(k).copied().flatten().map(|h| at + h);
                    calls.push(TimedCall { at, answered });
                }
            }
        }
        calls.sort_by_key(|c| c.at);
        Some(calls)
    }

    /// Requests the SUT was sent per second over the buckets a second either side of `span` touches; 0 when
    /// none: the offered rate around a moment too short to measure it in.
    pub fn offered_rate_near(&self, span: &Range<Duration>) -> f64 {
        let margin = Duration::from_secs(1);
        let buckets = self.buckets_in(span.start.saturating_sub(margin), span.end + margin);
        let secs = self.bucket.as_secs_f64() * buckets.len() as f64;
        if secs > 0.0 {
            self.sent_in(buckets) as f64 / secs
        } else {
            0.0
        }
    }

    /// Requests the SUT was sent in `[from, to)`, a bucket cut by either end counted in proportion.
    pub fn sent_between(&self, from: Duration, to: Duration) -> f64 {
        let step = self.bucket.as_secs_f64();
        if step <= 0.0 || to <= from {
            return 0.0;
        }
        let (a, b) = (from.as_secs_f64(), to.as_secs_f64());
        let first = (a / step).floor() as usize;
        let last = (b / step).ceil() as usize;
        (first..last)
            .map(|i| {
                let (s, e) = (i as f64 * step, (i + 1) as f64 * step);
                let overlap = (e.min(b) - s.max(a)).max(0.0) / step;
                self.sent_in(i..i + 1) as f64 * overlap
            })
            .sum()
    }

    /// SUT latency percentile over the given buckets; `None` when nothing completed there. Runs of consecutive
    /// buckets are read as ranges (`LatencySeries::merged`), so a long span costs one histogram per block.
    pub fn sut_percentile(
        &self,
        buckets: impl Iterator<Item = usize>,
        quantile: f64,
    ) -> Option<Duration> {
        let mut merged: Option<Histogram<u64>> = None;
        let mut add = |range: Range<usize>| {
            if let Some(h) = self.sut_latency.merged(range) {
                match merged.as_mut() {
                    Some(m) => {
                        let _ = m.add(&h);
                    }
                    None => merged = Some(h),
                }
            }
        };
        let mut run: Option<Range<usize>> = None;
        for i in buckets {
            match run.as_mut() {
                Some(r) if r.end == i => r.end += 1,
                _ => {
                    if let Some(r) = run.replace(i..i + 1) {
                        add(r);
                    }
                }
            }
        }
        if let Some(r) = run {
            add(r);
        }
        let m = merged?;
        let v = if quantile >= 1.0 {
            m.max()
        } else {
            m.value_at_quantile(quantile)
        };
        Some(Duration::from_nanos(v))
    }

    /// The bytes the record holds on the heap, roughly: its per-bucket series and the latency bytes, the part that
    /// grows with the run's length.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let dependency: usize = self
            .dependency
            .values()
            .chain(self.instances.values().flatten())
            .map(|series| {
                series.capacity() * size_of::<DependencyBucket>()
                    + series
                        .iter()
                        .map(|b| {
                            b.first_arrivals.capacity() * size_of::<Duration>()
                                + b.first_held.capacity() * size_of::<Option<Duration>>()
                        })
                        .sum::<usize>()
            })
            .sum();
        let handshakes = self
            .handshakes
            .as_ref()
            .map_or(0, |h| h.capacity() * size_of::<HandshakeBucket>());
        self.sut.capacity() * size_of::<SutBucket>()
            + self.sut_latency.heap_bytes()
            + dependency
            + handshakes
    }
}
