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
    encode_histogram, new_histogram, Bucket, BucketLatency, ClassHistograms, Conservation, Model,
    PhaseRecording, Recording,
};
use crate::Series;

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

struct PhaseState {
    name: String,
    start: Duration,
    counts: ClassCounts,
    /// Indexed by `Outcome::index`; `Dropped` never has histograms.
    classes: [Option<Box<ClassHistograms>>; 6],
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
    phases: Vec<PhaseState>,
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
            .map(|(name, start)| PhaseState {
                name,
                start,
                counts: ClassCounts::default(),
                classes: Default::default(),
            })
            .collect();
        Recorder {
            samples: crate::samples::Samples::default(),
            state: Mutex::new(State {
                bucket: bucket.max(Duration::from_millis(1)),
                duration,
                phases,
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
        s.phases[phase].counts.add(Outcome::Dropped);
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
    pub(crate) fn completed(
        &self,
        outcome: Outcome,
        intended: Duration,
        ready: Duration,
        actual: Option<Duration>,
        done: Duration,
    ) {
        let start = ready.max(intended);
        let corrected = nanos(done.saturating_sub(start));
        let mut s = self.lock();
        s.totals.add(outcome);
        let phase = s.phase_index(intended);
        let p = &mut s.phases[phase];
        p.counts.add(outcome);
        if outcome != Outcome::Dropped {
            let h = p.classes[outcome.index()].get_or_insert_with(Default::default);
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
            .iter()
            .map(|p| PhaseRecording {
                name: p.name.clone(),
                start: Dur(p.start),
                counts: p.counts,
                classes: Outcome::ALL
                    .iter()
                    .filter_map(|&o| p.classes.get(o.index())?.as_deref().map(|h| (o, h.clone())))
                    .collect::<BTreeMap<_, _>>(),
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
mod tests {
    use super::*;
    use crate::recording::{decode_histogram, Measure};

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn requests_land_in_the_phase_of_their_intended_time_and_buckets_split_intended_from_completion(
    ) {
        let phases = vec![
            ("healthy".to_string(), ms(0)),
            ("brownout".to_string(), ms(1000)),
        ];
        let r = Recorder::new(&phases, ms(100), ms(2000), Series::Keep);
        r.sent(ms(950), ms(951));
        r.sent(ms(1010), ms(1012));
        r.dropped(ms(1020));
        r.completed(Outcome::Ok, ms(950), ms(950), Some(ms(951)), ms(1250));
        r.completed(
            Outcome::Fallback,
            ms(1010),
            ms(1010),
            Some(ms(1012)),
            ms(1270),
        );
        let rec = r.recording(Model::Open, false);

        assert_eq!(rec.phases[0].counts.ok, 1);
        assert_eq!(rec.phases[1].counts.fallback, 1);
        assert_eq!(rec.phases[1].counts.dropped, 1);
        assert!(!rec.phases[1].classes.contains_key(&Outcome::Dropped));
        let h = &rec.phases[0].classes[&Outcome::Ok];
        assert_eq!(
            h.corrected.0.max(),
            h.corrected.0.highest_equivalent(300_000_000)
        );
        assert_eq!(
            h.uncorrected.0.max(),
            h.uncorrected.0.highest_equivalent(299_000_000)
        );
        assert_eq!(
            h.send_lag.0.max(),
            h.send_lag.0.highest_equivalent(1_000_000)
        );

        assert_eq!(rec.buckets.len(), 20);
        assert_eq!((rec.buckets[9].intended, rec.buckets[9].sent), (1, 1));
        assert_eq!(
            (
                rec.buckets[10].intended,
                rec.buckets[10].sent,
                rec.buckets[10].dropped
            ),
            (2, 1, 1)
        );
        assert_eq!(rec.buckets[12].completed.ok, 1);
        assert_eq!(rec.buckets[12].completed.fallback, 1);
        assert_eq!(rec.buckets[12].in_flight, 2);
        assert_eq!(
            rec.buckets[11].in_flight, 2,
            "a bucket without events carries the level"
        );
        assert_eq!(rec.buckets[13].in_flight, 0);
        let interval =
            decode_histogram(rec.buckets[12].interval_histogram.as_ref().unwrap()).unwrap();
        assert_eq!(interval.len(), 2);
        let lat = rec.buckets[12].latency.unwrap();
        assert!(
            lat.p50.get() >= ms(259) && lat.max.get() <= ms(301),
            "{lat:?}"
        );
        assert!(rec.conservation.holds);
        assert_eq!(
            (rec.conservation.sent, rec.conservation.sum_of_classes),
            (3, 3)
        );
        assert_eq!(
            rec.histogram(Measure::Corrected, Some("brownout"), |_| true)
                .len(),
            1
        );
    }

    #[test]
    fn conservation_counts_requests_still_in_flight() {
        let r = Recorder::new(&[], ms(100), ms(1000), Series::Keep);
        for i in 0..5 {
            r.sent(ms(i), ms(i));
        }
        r.completed(Outcome::Timeout, ms(0), ms(0), None, ms(500));
        assert_eq!(r.in_flight(), 4);
        let rec = r.recording(Model::Open, true);
        assert_eq!(
            rec.conservation,
            Conservation {
                holds: true,
                sent: 5,
                sum_of_classes: 1,
                in_flight: 4
            }
        );
        assert_eq!(rec.still_in_flight, 4);
        let timeouts = &rec.phases[0].classes[&Outcome::Timeout];
        assert_eq!(timeouts.corrected.0.len(), 1);
        assert_eq!(
            timeouts.uncorrected.0.len(),
            0,
            "never sent, so no service time"
        );
    }

    #[test]
    fn latency_counts_from_when_the_generator_was_ready_and_its_lateness_is_kept_apart() {
        let r = Recorder::new(&[], ms(100), ms(2000), Series::Keep);
        // Due at 100 ms, ready at 140 ms (the generator late by 40 ms), sent at 145 ms, answered at 150 ms.
        r.sent(ms(100), ms(140));
        r.completed(Outcome::Ok, ms(100), ms(140), Some(ms(145)), ms(150));
        // Due at 300 ms and ready on time: every millisecond until the answer at 320 ms counts.
        r.sent(ms(300), ms(300));
        r.completed(Outcome::Ok, ms(300), ms(300), Some(ms(310)), ms(320));
        let rec = r.recording(Model::Open, false);
        let at = |m, phase_ms: u64| {
            let h = rec.histogram(m, None, |_| true);
            h.count_between(0, h.highest_equivalent(phase_ms * 1_000_000))
        };
        // Corrected: 10 ms and 20 ms, never the 50 ms from the first one's intended time.
        let corrected = rec.histogram(Measure::Corrected, None, |_| true);
        assert_eq!(corrected.max(), corrected.highest_equivalent(20_000_000));
        assert_eq!(at(Measure::Corrected, 10), 1);
        let late = rec.histogram(Measure::Late, None, |_| true);
        assert_eq!(late.max(), late.highest_equivalent(40_000_000));
        assert_eq!(at(Measure::Late, 0), 1, "the second was on time");
        // The send lag still shows every delay before the send, the generator's included.
        let lag = rec.histogram(Measure::SendLag, None, |_| true);
        assert_eq!(lag.max(), lag.highest_equivalent(45_000_000));
        // The time series holds the same corrected latencies.
        let bucket = rec.buckets[1].latency.unwrap();
        assert_eq!(
            bucket.max.get(),
            Duration::from_nanos(corrected.highest_equivalent(10_000_000))
        );
    }

    #[test]
    fn progress_reports_the_p99_of_the_last_second_only() {
        let r = Recorder::new(&[], ms(100), ms(10_000), Series::Keep);
        for i in 0..10u64 {
            r.sent(ms(i * 100), ms(i * 100));
            r.completed(
                Outcome::Ok,
                ms(i * 100),
                ms(i * 100),
                Some(ms(i * 100)),
                ms(i * 100 + 50),
            );
        }
        // A slow one long ago, then only fast ones for more than a second.
        r.sent(ms(1000), ms(1000));
        r.completed(Outcome::Ok, ms(0), ms(0), Some(ms(1000)), ms(1020));
        for i in 0..20u64 {
            let t = ms(2000 + i * 100);
            r.sent(t, t);
            r.completed(Outcome::Ok, t, t, Some(t), t + ms(10));
        }
        let p = r.progress(ms(4000));
        assert_eq!(p.completed, 31);
        assert_eq!(p.in_flight, 0);
        let p99 = p.p99_last_second.unwrap().get();
        assert!(p99 >= ms(9) && p99 <= ms(11), "{p99:?}");
    }

    /// Ten minutes at 20 requests per 100 ms bucket, each answered 30 ms later, with one stall of 2 s where
    /// nothing completes.
    fn ten_minutes(r: &Recorder, mut after_each_bucket: impl FnMut(&Recorder, u64)) {
        for b in 0..6000u64 {
            if (3000..3020).contains(&b) {
                after_each_bucket(r, b);
                continue;
            }
            for k in 0..20u64 {
                let t = ms(b * 100 + k * 5);
                r.sent(t, t);
                r.completed(Outcome::Ok, t, t, Some(t), t + ms(30));
            }
            after_each_bucket(r, b);
        }
    }

    #[test]
    fn a_streamed_series_keeps_memory_to_a_few_live_buckets_and_sends_every_bucket_once_in_order() {
        let (tx, rx) = std::sync::mpsc::channel();
        let r = Recorder::new(&[], ms(100), ms(600_000), Series::Stream(tx));
        let mut most_live = 0;
        ten_minutes(&r, |r, _| most_live = most_live.max(r.lock().buckets.len()));
        // A second of slack (10 buckets) plus the bucket of each clock.
        assert!(most_live <= 13, "{most_live} live buckets");
        assert!(
            rx.try_iter().count() > 5900,
            "final buckets leave during the run"
        );

        let rec = r.recording(Model::Open, false);
        assert!(rec.buckets.is_empty(), "a streamed series is not also kept");
        assert!(rec.conservation.holds);
        // The sender went with the recording: the receiver sees the end after the last bucket.
        let rest: Vec<Bucket> = rx.iter().collect();
        assert!(
            rest.len() < 20,
            "{} buckets were left for the end",
            rest.len()
        );
    }

    #[test]
    fn streamed_and_kept_series_are_the_same_buckets() {
        let kept = Recorder::new(&[], ms(100), ms(600_000), Series::Keep);
        ten_minutes(&kept, |_, _| {});
        let kept = kept.recording(Model::Open, false).buckets;

        let (tx, rx) = std::sync::mpsc::channel();
        let streamed = Recorder::new(&[], ms(100), ms(600_000), Series::Stream(tx));
        ten_minutes(&streamed, |_, _| {});
        streamed.recording(Model::Open, false);
        let streamed: Vec<Bucket> = rx.iter().collect();

        assert_eq!(
            kept.len(),
            6001,
            "the last answers come back 25 ms after the end"
        );
        for (i, b) in kept.iter().enumerate() {
            assert_eq!(b.start.get(), ms(i as u64 * 100));
        }
        assert_eq!(kept, streamed);
        assert_eq!(kept.iter().map(|b| b.sent).sum::<u64>(), 5980 * 20);
        assert_eq!(kept[3005].completed.ok, 0, "the stall");
        assert!(kept[3005].latency.is_none());
        assert_eq!(kept[10].completed.ok, 20);
        assert_eq!(kept[10].in_flight, 1);
    }

    #[test]
    fn a_discarded_series_records_everything_else() {
        let r = Recorder::new(&[], ms(100), ms(600_000), Series::Discard);
        let mut most_live = 0;
        ten_minutes(&r, |r, _| most_live = most_live.max(r.lock().buckets.len()));
        assert!(most_live <= 13, "{most_live} live buckets");
        let rec = r.recording(Model::Open, false);
        assert!(rec.buckets.is_empty());
        assert_eq!(rec.totals.ok, 5980 * 20);
        assert_eq!(
            rec.histogram(Measure::Corrected, None, |_| true).len(),
            5980 * 20
        );
    }

    #[test]
    fn an_event_stamped_for_a_final_bucket_counts_in_the_oldest_live_one() {
        let r = Recorder::new(&[], ms(100), ms(10_000), Series::Keep);
        for i in 0..50u64 {
            r.sent(ms(i * 100), ms(i * 100));
            r.completed(
                Outcome::Ok,
                ms(i * 100),
                ms(i * 100),
                Some(ms(i * 100)),
                ms(i * 100 + 10),
            );
        }
        let first_live = r.lock().first_live;
        assert!(first_live >= 30, "buckets up to {first_live} are final");
        // A dispatch stamped 4 s ago, from a thread that lost the CPU between its clock and the lock.
        r.sent(ms(1000), ms(1000));
        r.completed(Outcome::Ok, ms(1000), ms(1000), Some(ms(1000)), ms(1005));
        let rec = r.recording(Model::Open, false);
        assert!(rec.conservation.holds);
        assert_eq!(rec.buckets.iter().map(|b| b.sent).sum::<u64>(), 51);
        assert_eq!(rec.buckets[10].sent, 1, "a final bucket is not changed");
        assert_eq!(rec.buckets[first_live].sent, 2);
        assert_eq!(rec.buckets.len(), 100);
    }
}
