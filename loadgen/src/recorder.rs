//! The live recorder: counts and histograms updated as requests are issued and end, shared by the dispatcher
//! and every request task, and turned into a [`Recording`] at the end.
//!
//! One mutex guards it: a request touches it twice (dispatch and end), which at tens of thousands of requests
//! per second is far below what an uncontended lock costs. Only two interval histograms are live at a time per
//! second of history (the open bucket, plus a short ring for the "p99 of the last second" of the progress line);
//! closed buckets keep their histogram as compressed bytes.
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
    buckets: Vec<BucketState>,
    /// The bucket completions currently go to, with its interval histogram.
    open: Option<(usize, Histogram<u64>)>,
    /// Recently closed buckets' histograms, for the progress line's p99 of the last second.
    recent: VecDeque<(usize, Histogram<u64>)>,
    totals: ClassCounts,
    intended: u64,
    sent: u64,
    in_flight: u64,
}

/// The shared recorder of one run.
pub(crate) struct Recorder {
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

    fn bucket_mut(&mut self, index: usize) -> &mut BucketState {
        if self.buckets.len() <= index {
            let width = self.bucket;
            let from = self.buckets.len();
            self.buckets.extend((from..=index).map(|i| BucketState {
                bucket: Bucket {
                    start: Dur(width.saturating_mul(i as u32)),
                    ..Default::default()
                },
                level_end: None,
            }));
        }
        &mut self.buckets[index]
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
        if !histogram.is_empty() {
            let at = |q| Dur(Duration::from_nanos(histogram.value_at_quantile(q)));
            let latency = BucketLatency {
                p50: at(0.5),
                p90: at(0.9),
                p99: at(0.99),
                max: Dur(Duration::from_nanos(histogram.max())),
            };
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
    /// buckets of `bucket`.
    pub(crate) fn new(
        phases: &[(String, Duration)],
        bucket: Duration,
        duration: Duration,
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
            state: Mutex::new(State {
                bucket: bucket.max(Duration::from_millis(1)),
                duration,
                phases,
                buckets: Vec::new(),
                open: None,
                recent: VecDeque::new(),
                totals: ClassCounts::default(),
                intended: 0,
                sent: 0,
                in_flight: 0,
            }),
            in_flight: AtomicU64::new(0),
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
        let index = s.bucket_index(intended);
        let b = &mut s.bucket_mut(index).bucket;
        b.intended += 1;
        b.sent += 1;
        let now_index = s.bucket_index(now);
        let level = s.in_flight;
        s.level_changed(now_index, level);
    }

    /// A dispatched request ended with `outcome` at `done`. `actual` is when it got a connection and went out;
    /// `None` if it timed out before that, in which case only the corrected latency exists.
    pub(crate) fn completed(
        &self,
        outcome: Outcome,
        intended: Duration,
        actual: Option<Duration>,
        done: Duration,
    ) {
        let corrected = nanos(done.saturating_sub(intended));
        let mut s = self.lock();
        s.totals.add(outcome);
        let phase = s.phase_index(intended);
        let p = &mut s.phases[phase];
        p.counts.add(outcome);
        if outcome != Outcome::Dropped {
            let h = p.classes[outcome.index()].get_or_insert_with(Default::default);
            record(&mut h.corrected.0, corrected);
            if let Some(actual) = actual {
                record(&mut h.uncorrected.0, nanos(done.saturating_sub(actual)));
                record(&mut h.send_lag.0, nanos(actual.saturating_sub(intended)));
            }
        }
        // Completions arrive in nearly, not exactly, time order across threads: one landing a hair behind the
        // open bucket goes into the open bucket rather than reopening a closed one.
        let mut index = s.bucket_index(done);
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
        }
    }

    /// The recording so far. Closes the open bucket, so take it once, at the end.
    pub(crate) fn recording(&self, model: Model, stopped_early: bool) -> Recording {
        let mut s = self.lock();
        s.close_open_bucket();
        let planned = (nanos(s.duration).div_ceil(nanos(s.bucket).max(1))) as usize;
        if planned > 0 {
            s.bucket_mut(planned - 1);
        }
        let mut carry = 0;
        let buckets = s
            .buckets
            .iter()
            .map(|b| {
                let mut out = b.bucket.clone();
                out.in_flight = out.in_flight.max(carry);
                carry = b.level_end.unwrap_or(carry);
                out
            })
            .collect();
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
        let r = Recorder::new(&phases, ms(100), ms(2000));
        r.sent(ms(950), ms(951));
        r.sent(ms(1010), ms(1012));
        r.dropped(ms(1020));
        r.completed(Outcome::Ok, ms(950), Some(ms(951)), ms(1250));
        r.completed(Outcome::Fallback, ms(1010), Some(ms(1012)), ms(1270));
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
        let r = Recorder::new(&[], ms(100), ms(1000));
        for i in 0..5 {
            r.sent(ms(i), ms(i));
        }
        r.completed(Outcome::Timeout, ms(0), None, ms(500));
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
    fn progress_reports_the_p99_of_the_last_second_only() {
        let r = Recorder::new(&[], ms(100), ms(10_000));
        for i in 0..10u64 {
            r.sent(ms(i * 100), ms(i * 100));
            r.completed(
                Outcome::Ok,
                ms(i * 100),
                Some(ms(i * 100)),
                ms(i * 100 + 50),
            );
        }
        // A slow one long ago, then only fast ones for more than a second.
        r.sent(ms(1000), ms(1000));
        r.completed(Outcome::Ok, ms(0), Some(ms(1000)), ms(1020));
        for i in 0..20u64 {
            let t = ms(2000 + i * 100);
            r.sent(t, t);
            r.completed(Outcome::Ok, t, Some(t), t + ms(10));
        }
        let p = r.progress(ms(4000));
        assert_eq!(p.completed, 31);
        assert_eq!(p.in_flight, 0);
        let p99 = p.p99_last_second.unwrap().get();
        assert!(p99 >= ms(9) && p99 <= ms(11), "{p99:?}");
    }
}
