//! The live recorder: counts and histograms updated as requests are issued and end, shared by the dispatcher
//! and every request task, and turned into a [`Recording`] at the end.
//!
//! One mutex guards it: a request touches it twice (dispatch and end), which at tens of thousands of requests
//! per second is far below what an uncontended lock costs. Only two interval histograms are live at a time per
//! second of history (the open bucket, plus a short ring for the "p99 of the last second" of the progress line);
//! closed buckets keep their histogram as compressed bytes.
//!
//! Memory does not grow with the length of a run except by the time series, and only if it is kept. Buckets stay
//! live (still accepting events) until every clock that feeds them has moved a second past them; then they are
//! final and go where [`Series`] says: into the recording, down a channel, or nowhere. An event stamped for a
//! bucket that is already final (a thread preempted for over a second between taking its timestamp and the
//! lock) is counted in the oldest live bucket instead, so totals stay exact.
//!
//! Not for deciding outcomes (that is `outcome`) nor for timing requests (the dispatcher passes the instants).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use faultline_units::Dur;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::outcome::{ClassCounts, Outcome};
use crate::recording::{
    encode_histogram, new_histogram, Bucket, BucketLatency, Conservation, Model, PhaseRecording,
    Recording, RequestTrace,
};
use crate::Series;

mod phase;
use phase::{PhaseState, Phases};

/// A snapshot of a running load, cheap enough to take every second for a live line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Time since the origin.
    pub elapsed: Dur,
    /// Arrivals issued so far (sent + dropped).
    pub intended: u64,
    /// Arrivals dispatched to the client.
    pub sent: u64,
    /// Requests with an outcome other than dropped.
    pub completed: u64,
    /// Requests dispatched and not yet ended.
    pub in_flight: u64,
    /// Arrivals refused at the in-flight cap.
    pub dropped: u64,
    /// Outcomes so far, by class.
    pub by_class: ClassCounts,
    /// p99 of the corrected latency of requests completed in the last second (`None` if none completed).
    pub p99_last_second: Option<Dur>,
    /// The TLS handshakes so far, for an `https://` target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::tls::TlsCounts>,
}

#[derive(Default)]
struct BucketState {
    bucket: Bucket,
    /// The in-flight level after the bucket's last event, carried into buckets without events.
    level_end: Option<u64>,
}

struct State {
    bucket: Duration,
    duration: Duration,
    phases: Phases,
    /// The live buckets, contiguous from index `first_live`.
    buckets: VecDeque<BucketState>,
    /// The index of `buckets[0]`: every bucket before it is final and has gone to `series`.
    first_live: usize,
    /// Where final buckets go.
    series: Series,
    /// Final buckets, when `series` keeps them.
    kept: Vec<Bucket>,
    /// The in-flight level at the end of the last final bucket, carried into the next ones.
    carry: u64,
    /// The latest bucket of an intended time seen (the dispatcher's clock) and of an actual time (the clock of
    /// sends and completions). A bucket is final once both are more than a second past it.
    intended_frontier: usize,
    now_frontier: usize,
    /// The bucket completions currently go to, with its interval histogram.
    open: Option<(usize, Histogram<u64>)>,
    /// Recently closed buckets' histograms, for the progress line's p99 of the last second.
    recent: VecDeque<(usize, Histogram<u64>)>,
    totals: ClassCounts,
    intended: u64,
    sent: u64,
    in_flight: u64,
    /// Connect errors by reason.
    connect_errors: BTreeMap<String, u64>,
    /// The requests of a correlated run, as they ended.
    traces: Vec<RequestTrace>,
}

impl Recording {
    /// The recording of a run in which nothing was sent: every phase and bucket empty. What a distributed run
    /// keeps when no agent handed over a recording.
    pub fn empty(phases: &[(String, Duration)], bucket: Duration, duration: Duration) -> Recording {
        Recorder::new(phases, bucket, duration, Series::Discard).recording(Model::Open, true)
    }
}

/// The shared recorder of one run.
pub(crate) struct Recorder {
    /// The TLS transport's handshake counters, for an `https://` target.
    pub(crate) tls: std::sync::OnceLock<std::sync::Arc<crate::tls::TlsCounters>>,
    /// Answers kept for the report, the first of each class per template.
    pub(crate) samples: crate::samples::Samples,
    state: Mutex<State>,
    /// A lock-free mirror of the in-flight level, for the dispatcher's cap check and the settle wait.
    in_flight: AtomicU64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Records `value`, growing the histogram as needed. (`saturating_record` would clamp to the current range
/// instead of growing it, silently turning a 2 s latency into 2 ns.)
fn record(h: &mut Histogram<u64>, value: u64) {
    if h.record(value).is_err() {
        h.saturating_record(value);
    }
}

impl State {
    fn bucket_index(&self, at: Duration) -> usize {
        (nanos(at) / nanos(self.bucket).max(1)) as usize
    }

    fn empty_bucket(&self, index: usize) -> BucketState {
        BucketState {
            bucket: Bucket {
                start: Dur(self
                    .bucket
                    .saturating_mul(u32::try_from(index).unwrap_or(u32::MAX))),
                ..Default::default()
            },
            level_end: None,
        }
    }

    /// The live bucket `index`, created if needed; the oldest live one if `index` is already final.
    fn bucket_mut(&mut self, index: usize) -> &mut BucketState {
        let offset = index.saturating_sub(self.first_live);
        while self.buckets.len() <= offset {
            let next = self.empty_bucket(self.first_live + self.buckets.len());
            self.buckets.push_back(next);
        }
        &mut self.buckets[offset]
    }

    /// Moves the oldest live bucket (created empty if no event reached it) to the series.
    fn finalize_oldest(&mut self) {
        let state = match self.buckets.pop_front() {
            Some(state) => state,
            None => self.empty_bucket(self.first_live),
        };
        self.first_live += 1;
        let mut bucket = state.bucket;
        bucket.in_flight = bucket.in_flight.max(self.carry);
        self.carry = state.level_end.unwrap_or(self.carry);
        match &self.series {
            Series::Keep => self.kept.push(bucket),
            Series::Stream(sender) => {
                // A receiver that went away only loses the series, not the run.
                let _ = sender.send(bucket);
            }
            Series::Discard => {}
        }
    }

    /// Finalizes the buckets that no event can reach any more: a second behind both clocks, and behind the
    /// bucket whose interval histogram is still open.
    fn finalize_settled(&mut self) {
        let mut frontier = self.intended_frontier.min(self.now_frontier);
        if let Some((open, _)) = &self.open {
            frontier = frontier.min(*open);
        }
        let horizon = frontier.saturating_sub(self.buckets_per_second() + 1);
        while self.first_live < horizon {
            self.finalize_oldest();
        }
    }

    fn saw(&mut self, intended: Duration, now: Duration) {
        let (i, n) = (self.bucket_index(intended), self.bucket_index(now));
        if i > self.intended_frontier || n > self.now_frontier {
            self.intended_frontier = self.intended_frontier.max(i);
            self.now_frontier = self.now_frontier.max(n);
            self.finalize_settled();
        }
    }

    fn phase_index(&self, intended: Duration) -> usize {
        self.phases
            .all
            .iter()
            .rposition(|p| p.start <= intended)
            .unwrap_or(0)
    }

    fn buckets_per_second(&self) -> usize {
        (1_000_000_000 / nanos(self.bucket).max(1)).max(1) as usize
    }

    /// Moves the open interval histogram into its bucket (percentiles + bytes) and the recent ring.
    fn close_open_bucket(&mut self) {
        let Some((index, histogram)) = self.open.take() else {
            return;
        };
        if let Some(latency) = BucketLatency::of(&histogram) {
            let bytes = encode_histogram(&histogram);
            let b = &mut self.bucket_mut(index).bucket;
            b.latency = Some(latency);
            b.interval_histogram = Some(bytes);
        }
        let keep = self.buckets_per_second();
        while self.recent.front().is_some_and(|(i, _)| i + keep <= index) {
            self.recent.pop_front();
        }
        self.recent.push_back((index, histogram));
    }

    fn level_changed(&mut self, index: usize, peak: u64) {
        let level = self.in_flight;
        let b = self.bucket_mut(index);
        b.bucket.in_flight = b.bucket.in_flight.max(peak);
        b.level_end = Some(level);
    }
}

impl Recorder {
    /// A recorder for a run of `duration` with `phases` (name, start; empty means one phase called `run`) and
    /// buckets of `bucket`, whose final buckets go to `series`.
    pub(crate) fn new(
        phases: &[(String, Duration)],
        bucket: Duration,
        duration: Duration,
        series: Series,
    ) -> Recorder {
        let mut named: Vec<(String, Duration)> = phases.to_vec();
        if named.is_empty() {
            named.push(("run".to_string(), Duration::ZERO));
        }
        named.sort_by_key(|(_, start)| *start);
        let phases = named
            .into_iter()
            .map(|(name, start)| PhaseState::new(name, start))
            .collect();
        Recorder {
            samples: crate::samples::Samples::default(),
            state: Mutex::new(State {
                bucket: bucket.max(Duration::from_millis(1)),
                duration,
                phases: Phases::new(phases),
                buckets: VecDeque::new(),
                first_live: 0,
                series,
                kept: Vec::new(),
                carry: 0,
                intended_frontier: 0,
                now_frontier: 0,
                open: None,
                recent: VecDeque::new(),
                totals: ClassCounts::default(),
                intended: 0,
                sent: 0,
                in_flight: 0,
                connect_errors: BTreeMap::new(),
                traces: Vec::new(),
            }),
            in_flight: AtomicU64::new(0),
            tls: std::sync::OnceLock::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the counters half-updated in a way that matters more than
        // losing the whole recording, so a poisoned lock is used as is.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Requests dispatched and not yet ended.
    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// An arrival refused at the in-flight cap, counted at its intended time.
    pub(crate) fn dropped(&self, intended: Duration) {
        let mut s = self.lock();
        s.intended += 1;
        s.totals.add(Outcome::Dropped);
        let phase = s.phase_index(intended);
        s.phases.all[phase].counts.add(Outcome::Dropped);
        // Refused at its intended time, so that is also its actual time.
        s.saw(intended, intended);
        let index = s.bucket_index(intended);
        let b = &mut s.bucket_mut(index).bucket;
        b.intended += 1;
        b.dropped += 1;
    }

    /// An arrival dispatched to the client at `now` (both from the origin).
    pub(crate) fn sent(&self, intended: Duration, now: Duration) {
        let mut s = self.lock();
        s.intended += 1;
        s.sent += 1;
        s.in_flight += 1;
        self.in_flight.store(s.in_flight, Ordering::Release);
        s.saw(intended, now);
        let index = s.bucket_index(intended);
        let b = &mut s.bucket_mut(index).bucket;
        b.intended += 1;
        b.sent += 1;
        let now_index = s.bucket_index(now);
        let level = s.in_flight;
        s.level_changed(now_index, level);
    }

    /// Counts the reason of one `connect_error` (a refused connect, a failed handshake, a broken exchange).
    pub(crate) fn connect_error(&self, reason: String) {
        *self.lock().connect_errors.entry(reason).or_insert(0) += 1;
    }

    /// A dispatched request ended with `outcome` at `done`. `ready` is when the generator was ready to send it:
    /// its intended time, or later if the generator itself ran late; latency counts from the later of the two.
    /// `actual` is when it got a connection and went out; `None` if it timed out before that, in which case only
    /// the corrected latency exists.
    #[cfg(test)]
    pub(crate) fn completed(
        &self,
        outcome: Outcome,
        intended: Duration,
        ready: Duration,
        actual: Option<Duration>,
        done: Duration,
    ) {
        self.completed_traced(outcome, intended, ready, actual, done, None);
    }

    /// [`Recorder::completed`] for a request that carried trace id `trace` (`None` when the run does not
    /// correlate): kept with its times under the same lock.
    pub(crate) fn completed_traced(
        &self,
        outcome: Outcome,
        intended: Duration,
        ready: Duration,
        actual: Option<Duration>,
        done: Duration,
        trace: Option<u128>,
    ) {
        let start = ready.max(intended);
        let corrected = nanos(done.saturating_sub(start));
        let mut s = self.lock();
        if let Some(trace) = trace {
            s.traces.push(RequestTrace {
                trace,
                intended: Dur(intended),
                sent: actual.map(Dur),
                ended: Dur(done),
                class: outcome,
            });
        }
        s.totals.add(outcome);
        let phase = s.phase_index(intended);
        s.phases.all[phase].counts.add(outcome);
        if let Some(h) = s.phases.class_mut(phase, outcome) {
            record(&mut h.corrected.0, corrected);
            record(&mut h.late.0, nanos(start - intended));
            if let Some(actual) = actual {
                record(&mut h.uncorrected.0, nanos(done.saturating_sub(actual)));
                record(&mut h.send_lag.0, nanos(actual.saturating_sub(intended)));
            }
        }
        s.saw(intended, done);
        // Completions arrive in nearly, not exactly, time order across threads: one landing a hair behind the
        // open bucket goes into the open bucket rather than reopening a closed one.
        let mut index = s.bucket_index(done).max(s.first_live);
        match &s.open {
            Some((open, _)) if *open > index => index = *open,
            Some((open, _)) if *open < index => s.close_open_bucket(),
            _ => {}
        }
        if s.open.is_none() {
            // Reuse the oldest histogram of the ring once it has more than a second of history.
            let reuse = if s.recent.len() > s.buckets_per_second() {
                s.recent.pop_front()
            } else {
                None
            };
            let h = match reuse {
                Some((_, mut h)) => {
                    h.reset();
                    h
                }
                None => new_histogram(),
            };
            s.open = Some((index, h));
        }
        if let Some((_, h)) = &mut s.open {
            record(h, corrected);
        }
        s.bucket_mut(index).bucket.completed.add(outcome);
        let peak = s.in_flight;
        s.in_flight = s.in_flight.saturating_sub(1);
        self.in_flight.store(s.in_flight, Ordering::Release);
        s.level_changed(index, peak);
    }

    /// The progress at `elapsed` from the origin.
    pub(crate) fn progress(&self, elapsed: Duration) -> Progress {
        let s = self.lock();
        let now_index = s.bucket_index(elapsed);
        let window = s.buckets_per_second();
        let mut last_second = new_histogram();
        let recent = s.recent.iter().map(|(i, h)| (*i, h));
        for (i, h) in recent.chain(s.open.iter().map(|(i, h)| (*i, h))) {
            if i + window > now_index {
                let _ = last_second.add(h);
            }
        }
        Progress {
            elapsed: Dur(elapsed),
            intended: s.intended,
            sent: s.sent,
            completed: s.totals.completed(),
            in_flight: s.in_flight,
            dropped: s.totals.dropped,
            by_class: s.totals,
            p99_last_second: (!last_second.is_empty())
                .then(|| Dur(Duration::from_nanos(last_second.value_at_quantile(0.99)))),
            tls: self.tls.get().map(|t| t.snapshot()),
        }
    }

    /// The recording so far. Closes the open bucket and finalizes every bucket (sending the rest of a streamed
    /// series and then closing its channel), so take it once, at the end.
    pub(crate) fn recording(&self, model: Model, stopped_early: bool) -> Recording {
        let mut s = self.lock();
        s.close_open_bucket();
        let planned = (nanos(s.duration).div_ceil(nanos(s.bucket).max(1))) as usize;
        if planned > s.first_live {
            s.bucket_mut(planned - 1);
        }
        while !s.buckets.is_empty() {
            s.finalize_oldest();
        }
        let buckets = std::mem::take(&mut s.kept);
        s.series = Series::Discard;
        let phases = s
            .phases
            .all
            .iter()
            .map(|p| PhaseRecording {
                name: p.name.clone(),
                start: Dur(p.start),
                counts: p.counts,
                classes: p.histograms(),
            })
            .collect();
        let sum_of_classes = s.totals.total();
        Recording {
            model,
            bucket: Dur(s.bucket),
            duration: Dur(s.duration),
            stopped_early,
            phases,
            buckets,
            totals: s.totals,
            connect_errors: s.connect_errors.clone(),
            tls: self.tls.get().map(|t| t.snapshot()),
            answers: self.samples.taken(),
            requests: std::mem::take(&mut s.traces),
            intended: s.intended,
            sent: s.sent,
            still_in_flight: s.in_flight,
            conservation: Conservation {
                holds: s.intended == sum_of_classes + s.in_flight,
                sent: s.intended,
                sum_of_classes,
                in_flight: s.in_flight,
            },
        }
    }
}

#[cfg(test)]
mod tests;
