//! The timeline of a record, bucket by bucket: arrivals at the SUT, the SUT's statuses and durations, and for
//! each dependency its calls' latency histogram and outcomes. Records are added one at a time as the files stream
//! by, in any order (nginx writes a line when a request ends, so lines are not in arrival order); memory grows with
//! the number of buckets, dependencies and templates, never with the number of lines.
//!
//! Latency is kept in fixed bins 2% wide (from 10 us to an hour), so a bucket's percentiles are known to within 2%
//! and the histogram faultd plays back is the record's own distribution, not a curve fitted to two percentiles.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use super::templates::Templates;
use super::{CallOutcome, DependencyCall, Record};

/// The upper edges of the latency bins in microseconds: bin 0 is `[0, 10us)`, bin i is
/// `[BIN_EDGES_US[i-1], BIN_EDGES_US[i])`, each 2% wider than the last (at least 1 us), up to an hour.
pub static BIN_EDGES_US: LazyLock<Vec<u64>> = LazyLock::new(|| {
    let mut edges = vec![10u64];
    let mut x = 10.0f64;
    while *edges.last().expect("starts with one edge") < 3_600_000_000 {
        x *= 1.02;
        let next = (x.round() as u64).max(edges.last().expect("not empty") + 1);
        edges.push(next);
    }
    edges
});

/// The bin of a delay in seconds.
pub fn bin_of(seconds: f64) -> usize {
    let us = (seconds * 1e6).max(0.0);
    BIN_EDGES_US
        .partition_point(|e| (*e as f64) <= us)
        .min(BIN_EDGES_US.len() - 1)
}

/// The lower edge of bin `i`, microseconds.
pub fn lower_edge_us(i: usize) -> u64 {
    i.checked_sub(1).map_or(0, |j| BIN_EDGES_US[j])
}

/// A latency histogram on the fixed bins: bin -> count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    pub bins: BTreeMap<usize, u64>,
}

impl Histogram {
    pub fn record(&mut self, seconds: f64) {
        *self.bins.entry(bin_of(seconds)).or_default() += 1;
    }

    pub fn count(&self) -> u64 {
        self.bins.values().sum()
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (b, c) in &other.bins {
            *self.bins.entry(*b).or_default() += c;
        }
    }

    /// Records `count` delays of `seconds` at once (a histogram of another kind, added value by value).
    pub fn record_n(&mut self, seconds: f64, count: u64) {
        if count > 0 {
            *self.bins.entry(bin_of(seconds)).or_default() += count;
        }
    }

    /// The mean delay, seconds, each bin taken at its middle.
    pub fn mean(&self) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let sum: f64 = self
            .bins
            .iter()
            .map(|(b, c)| (lower_edge_us(*b) + BIN_EDGES_US[*b]) as f64 / 2e6 * *c as f64)
            .sum();
        Some(sum / total as f64)
    }

    /// How many delays are over `seconds`, the bin that holds it taken as spread evenly (as faultd draws it).
    pub fn count_above(&self, seconds: f64) -> f64 {
        let us = seconds * 1e6;
        self.bins
            .iter()
            .map(|(b, c)| {
                let (lo, hi) = (lower_edge_us(*b) as f64, BIN_EDGES_US[*b] as f64);
                let over = ((hi - us) / (hi - lo)).clamp(0.0, 1.0);
                over * *c as f64
            })
            .sum()
    }

    /// The delay at quantile `q` (0..=1), seconds, interpolated inside its bin as faultd draws it.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let target = q.clamp(0.0, 1.0) * total as f64;
        let mut seen = 0.0;
        for (b, c) in &self.bins {
            let next = seen + *c as f64;
            if next >= target {
                let lo = lower_edge_us(*b) as f64;
                let hi = BIN_EDGES_US[*b] as f64;
                let f = if *c == 0 {
                    0.0
                } else {
                    (target - seen) / *c as f64
                };
                return Some((lo + (hi - lo) * f) / 1e6);
            }
            seen = next;
        }
        self.bins
            .keys()
            .last()
            .map(|b| BIN_EDGES_US[*b] as f64 / 1e6)
    }
}

/// One dependency in one bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DepBucket {
    /// The latency of calls that got an answer (timeouts and resets have no answer to delay).
    pub latency: Histogram,
    /// Calls by outcome.
    pub outcomes: BTreeMap<CallOutcome, u64>,
}

impl DepBucket {
    pub fn calls(&self) -> u64 {
        self.outcomes.values().sum()
    }

    /// The share of calls that failed: a status of 500 or more, a timeout or a reset.
    pub fn failed_share(&self) -> f64 {
        let calls = self.calls();
        if calls == 0 {
            return 0.0;
        }
        let failed: u64 = self
            .outcomes
            .iter()
            .filter(|(o, _)| !matches!(o, CallOutcome::Status(s) if *s < 500))
            .map(|(_, c)| c)
            .sum();
        failed as f64 / calls as f64
    }
}

/// The SUT in one bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SutBucket {
    pub arrivals: u64,
    /// Answers by status.
    pub statuses: BTreeMap<u16, u64>,
    pub latency: Histogram,
}

/// A record added up bucket by bucket.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The bucket, seconds.
    pub bucket: f64,
    /// Buckets by absolute index (Unix seconds / bucket): index -> the SUT's figures.
    sut: BTreeMap<i64, SutBucket>,
    /// Dependencies by name, then buckets.
    deps: BTreeMap<String, BTreeMap<i64, DepBucket>>,
    /// The request templates.
    pub templates: Templates,
    records: usize,
}

impl Timeline {
    pub fn new(bucket: f64, redact: bool) -> Timeline {
        Timeline {
            bucket,
            sut: BTreeMap::new(),
            deps: BTreeMap::new(),
            templates: Templates::new(redact),
            records: 0,
        }
    }

    fn index(&self, t: f64) -> i64 {
        (t / self.bucket).floor() as i64
    }

    pub fn add(&mut self, r: &Record) {
        self.records += 1;
        let i = self.index(r.arrival);
        let s = self.sut.entry(i).or_default();
        s.arrivals += 1;
        if let Some(status) = r.status {
            *s.statuses.entry(status).or_default() += 1;
        }
        if let Some(d) = r.duration {
            s.latency.record(d);
        }
        self.templates.add(&r.method, &r.target);
        for call in &r.calls {
            self.call(call);
        }
    }

    /// Adds a call to a dependency on its own, at its start (a trace's CLIENT span, whose request comes apart).
    pub fn call(&mut self, call: &DependencyCall) {
        let i = self.index(call.at);
        let b = self
            .deps
            .entry(call.peer.clone())
            .or_default()
            .entry(i)
            .or_default();
        *b.outcomes.entry(call.outcome).or_default() += 1;
        if let (CallOutcome::Status(_), Some(d)) = (call.outcome, call.duration) {
            b.latency.record(d);
        }
    }

    /// The first stretch longer than `longest` seconds without any arrival, as its bounds in Unix seconds.
    pub fn clock_jump(&self, longest: f64) -> Option<(f64, f64)> {
        let keys: Vec<i64> = self.sut.keys().copied().collect();
        keys.windows(2)
            .find(|w| (w[1] - w[0] - 1) as f64 * self.bucket > longest)
            .map(|w| ((w[0] + 1) as f64 * self.bucket, w[1] as f64 * self.bucket))
    }

    /// Records added.
    pub fn records(&self) -> usize {
        self.records
    }

    /// The first bucket's absolute index: bucket 0 of the scenario.
    fn first(&self) -> i64 {
        let sut = self.sut.keys().next().copied();
        let dep = self
            .deps
            .values()
            .filter_map(|b| b.keys().next().copied())
            .min();
        sut.into_iter().chain(dep).min().unwrap_or(0)
    }

    /// Buckets from the first to the last holding anything.
    pub fn buckets(&self) -> usize {
        let last = self
            .sut
            .keys()
            .next_back()
            .copied()
            .into_iter()
            .chain(
                self.deps
                    .values()
                    .filter_map(|b| b.keys().next_back().copied()),
            )
            .max()
            .unwrap_or(0);
        (last - self.first() + 1).max(0) as usize
    }

    /// The record's time 0, Unix seconds: the start of its first bucket.
    pub fn origin(&self) -> f64 {
        self.first() as f64 * self.bucket
    }

    /// The SUT in bucket `k` (from 0).
    pub fn sut(&self, k: usize) -> SutBucket {
        self.sut
            .get(&(self.first() + k as i64))
            .cloned()
            .unwrap_or_default()
    }

    /// The dependencies' names, in order.
    pub fn dependencies(&self) -> Vec<String> {
        self.deps.keys().cloned().collect()
    }

    /// Dependency `name` in bucket `k`.
    pub fn dep(&self, name: &str, k: usize) -> DepBucket {
        self.deps
            .get(name)
            .and_then(|b| b.get(&(self.first() + k as i64)))
            .cloned()
            .unwrap_or_default()
    }

    /// Every dependency added together in bucket `k`: what change points are found on.
    pub fn all_deps(&self, k: usize) -> DepBucket {
        let mut all = DepBucket::default();
        for name in self.deps.keys() {
            let b = self.dep(name, k);
            all.latency.merge(&b.latency);
            for (o, c) in b.outcomes {
                *all.outcomes.entry(o).or_default() += c;
            }
        }
        all
    }
}

/// The whole record of one dependency added up over `[start, end)`.
fn over(t: &Timeline, dep: &str, start: usize, end: usize) -> DepBucket {
    let mut all = DepBucket::default();
    for k in start..end {
        let b = t.dep(dep, k);
        all.latency.merge(&b.latency);
        for (o, c) in b.outcomes {
            *all.outcomes.entry(o).or_default() += c;
        }
    }
    all
}

/// The service's whole record added up over `[start, end)`.
pub fn sut_over(t: &Timeline, start: usize, end: usize) -> SutBucket {
    let mut all = SutBucket::default();
    for k in start..end {
        let s = t.sut(k);
        all.arrivals += s.arrivals;
        all.latency.merge(&s.latency);
        for (st, c) in s.statuses {
            *all.statuses.entry(st).or_default() += c;
        }
    }
    all
}

/// What a route plays.
pub enum Source<'a> {
    /// A dependency's calls, by its name in the record.
    Dep(&'a str),
    /// The service's own answers: the record holds no dependency.
    Sut,
}

impl Source<'_> {
    /// What the route plays over buckets `[start, end)`.
    pub fn over(&self, t: &Timeline, start: usize, end: usize) -> DepBucket {
        match self {
            Source::Dep(dep) => over(t, dep, start, end),
            Source::Sut => {
                let s = sut_over(t, start, end);
                DepBucket {
                    latency: s.latency,
                    outcomes: s
                        .statuses
                        .into_iter()
                        .map(|(status, c)| (CallOutcome::Status(status), c))
                        .collect(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(arrival: f64, peer_ms: Option<(f64, CallOutcome)>) -> Record {
        Record {
            arrival,
            method: "GET".into(),
            target: "/p/1".into(),
            status: Some(200),
            duration: Some(0.01),
            calls: peer_ms
                .map(|(ms, outcome)| DependencyCall {
                    peer: "dep".into(),
                    at: arrival,
                    duration: Some(ms / 1e3),
                    outcome,
                })
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn bins_are_two_percent_wide_and_cover_an_hour() {
        let e = &*BIN_EDGES_US;
        assert_eq!(e[0], 10);
        assert!(*e.last().unwrap() >= 3_600_000_000);
        assert!(e.len() < faultd::behaviours::MAX_HISTOGRAM_BINS);
        for w in e.windows(2).filter(|w| w[0] >= 100) {
            let ratio = w[1] as f64 / w[0] as f64;
            assert!(ratio <= 1.03, "{w:?}");
        }
        assert_eq!(bin_of(0.0), 0);
        let b = bin_of(0.050);
        assert!(lower_edge_us(b) <= 50_000 && BIN_EDGES_US[b] > 50_000);
    }

    #[test]
    fn records_out_of_order_land_in_their_buckets_counted_from_the_earliest() {
        let mut t = Timeline::new(1.0, false);
        for a in [102.5, 100.2, 100.9, 101.0, 102.0] {
            t.add(&rec(a, None));
        }
        assert_eq!(t.buckets(), 3);
        assert_eq!(t.origin(), 100.0);
        let counts: Vec<u64> = (0..3).map(|k| t.sut(k).arrivals).collect();
        assert_eq!(counts, vec![2, 1, 2]);
    }

    #[test]
    fn a_stretch_of_more_than_the_longest_gap_without_arrivals_is_a_clock_jump() {
        let mut t = Timeline::new(1.0, false);
        for a in [100.5, 101.5, 5000.2, 5001.0] {
            t.add(&rec(a, None));
        }
        assert_eq!(t.clock_jump(3600.0), Some((102.0, 5000.0)));
        assert_eq!(t.clock_jump(10_000.0), None);
    }

    #[test]
    fn each_bucket_keeps_the_dependency_latency_histogram_and_outcomes() {
        let mut t = Timeline::new(1.0, false);
        for i in 0..100 {
            t.add(&rec(
                10.0 + i as f64 / 100.0,
                Some((10.0 + i as f64, CallOutcome::Status(200))),
            ));
        }
        t.add(&rec(10.5, Some((1000.0, CallOutcome::Timeout))));
        t.add(&rec(10.6, Some((5.0, CallOutcome::Status(503)))));
        let b = t.dep("dep", 0);
        assert_eq!(b.calls(), 102);
        assert_eq!(b.latency.count(), 101, "the timeout has no latency");
        assert!((b.failed_share() - 2.0 / 102.0).abs() < 1e-12);
        // 101 answers from 5 ms to 109 ms: the median is ~59 ms, within the 2% of a bin.
        let p50 = b.latency.quantile(0.5).unwrap();
        assert!((p50 - 0.059).abs() / 0.059 < 0.03, "{p50}");
    }
}
