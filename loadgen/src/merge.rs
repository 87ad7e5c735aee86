//! Adding up the recordings of shares of one timetable (the agents of a distributed run, see [`crate::Share`])
//! into the recording of the whole.
//!
//! Everything adds exactly: counts class by class, and HDR histograms bucket by bucket, which is why a merged
//! percentile is the percentile of every request together, never an average of the agents' percentiles. The one
//! figure that cannot be added is the most requests in flight within a time bucket: the agents' peaks need not
//! coincide, so their sum is an upper bound of the whole's peak, and the merged bucket says so.
//!
//! Not for receiving the parts (the runner does) nor for splitting the timetable (that is [`crate::Share`]).

use std::collections::BTreeMap;

use faultline_units::Dur;
use hdrhistogram::Histogram;

use crate::recorder::Progress;
use crate::recording::{
    decode_histogram, encode_histogram, Bucket, BucketLatency, ClassHistograms, Conservation,
    PhaseRecording, Recording,
};
use crate::tls::TlsCounts;

/// Why recordings could not be merged: they are not shares of the same run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// There was nothing to merge.
    #[error("no recording to merge")]
    Empty,
    /// Two parts disagree on something every share of one run has in common.
    #[error("part {part} is not a share of the same run: its {what} differs")]
    Mismatch {
        /// The index of the part that differs from the first.
        part: usize,
        /// Which property differs (bucket width, duration, model, phases).
        what: &'static str,
    },
    /// A bucket's interval histogram could not be read.
    #[error("bucket {bucket} of part {part}: {why}")]
    Histogram {
        /// The part.
        part: usize,
        /// The bucket's index.
        bucket: usize,
        /// What the decoder said.
        why: String,
    },
}

/// Adds `from` into `into`, growing it as needed (both come from [`new_histogram`], which auto-resizes).
fn add_histogram(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    if into.add(from).is_err() {
        // Only an out-of-range value fails, which auto-resizing prevents; add value by value as a fallback.
        for v in from.iter_recorded() {
            into.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
    }
}

fn add_tls(a: TlsCounts, b: TlsCounts) -> TlsCounts {
    TlsCounts {
        handshakes: a.handshakes + b.handshakes,
        resumed: a.resumed + b.resumed,
        failed: a.failed + b.failed,
    }
}

impl Bucket {
    /// The bucket of the whole from the same bucket of every share: counts added, the interval histograms added
    /// and the percentiles read from the sum. `in_flight` becomes the sum of the shares' peaks, an upper bound of
    /// the whole's peak. `parts` must all cover the same interval; the first part's start is kept.
    pub fn merge<'a>(parts: impl IntoIterator<Item = &'a Bucket>) -> Result<Bucket, MergeError> {
        let mut merged = Bucket::default();
        let mut histogram: Option<Histogram<u64>> = None;
        for (part, b) in parts.into_iter().enumerate() {
            if part == 0 {
                merged.start = b.start;
            }
            merged.intended += b.intended;
            merged.sent += b.sent;
            merged.dropped += b.dropped;
            merged.completed += b.completed;
            merged.in_flight += b.in_flight;
            if let Some(bytes) = &b.interval_histogram {
                let h = decode_histogram(bytes).map_err(|e| MergeError::Histogram {
                    part,
                    bucket: usize::MAX,
                    why: e.to_string(),
                })?;
                match &mut histogram {
                    Some(sum) => add_histogram(sum, &h),
                    None => histogram = Some(h),
                }
            }
        }
        if let Some(h) = histogram {
            merged.latency = BucketLatency::of(&h);
            merged.interval_histogram = Some(encode_histogram(&h));
        }
        Ok(merged)
    }
}

fn add_class_histograms(into: &mut ClassHistograms, from: &ClassHistograms) {
    add_histogram(&mut into.corrected.0, &from.corrected.0);
    add_histogram(&mut into.uncorrected.0, &from.uncorrected.0);
    add_histogram(&mut into.send_lag.0, &from.send_lag.0);
    add_histogram(&mut into.late.0, &from.late.0);
}

impl Recording {
    /// The recording of the whole from the recordings of its shares: every count and histogram added, the time
    /// series merged bucket by bucket ([`Bucket::merge`]), and conservation checked again on the sums (every
    /// arrival the shares issued is in exactly one class or still in flight). The parts must be shares of one run:
    /// the same model, bucket width, duration and phases.
    pub fn merge(parts: &[Recording]) -> Result<Recording, MergeError> {
        let first = parts.first().ok_or(MergeError::Empty)?;
        for (part, r) in parts.iter().enumerate().skip(1) {
            let what = if r.model != first.model {
                Some("model")
            } else if r.bucket != first.bucket {
                Some("bucket width")
            } else if r.duration != first.duration {
                Some("duration")
            } else if r.phases.len() != first.phases.len()
                || r.phases
                    .iter()
                    .zip(&first.phases)
                    .any(|(a, b)| a.name != b.name || a.start != b.start)
            {
                Some("phases")
            } else {
                None
            };
            if let Some(what) = what {
                return Err(MergeError::Mismatch { part, what });
            }
        }
        let phases = first
            .phases
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut merged = PhaseRecording {
                    name: p.name.clone(),
                    start: p.start,
                    counts: Default::default(),
                    classes: BTreeMap::new(),
                };
                for r in parts {
                    let q = &r.phases[i];
                    merged.counts += q.counts;
                    for (outcome, h) in &q.classes {
                        add_class_histograms(merged.classes.entry(*outcome).or_default(), h);
                    }
                }
                merged
            })
            .collect();
        let longest = parts.iter().map(|r| r.buckets.len()).max().unwrap_or(0);
        let empty = Bucket::default();
        let mut buckets = Vec::with_capacity(longest);
        for i in 0..longest {
            let mut b = Bucket::merge(parts.iter().map(|r| r.buckets.get(i).unwrap_or(&empty)))
                .map_err(|e| match e {
                    MergeError::Histogram { part, why, .. } => MergeError::Histogram {
                        part,
                        bucket: i,
                        why,
                    },
                    other => other,
                })?;
            b.start = Dur(first.bucket.get() * i as u32);
            buckets.push(b);
        }
        let mut totals = crate::ClassCounts::default();
        let mut connect_errors: BTreeMap<String, u64> = BTreeMap::new();
        let mut tls: Option<TlsCounts> = None;
        let (mut intended, mut sent, mut still_in_flight) = (0, 0, 0);
        for r in parts {
            totals += r.totals;
            for (reason, n) in &r.connect_errors {
                *connect_errors.entry(reason.clone()).or_insert(0) += n;
            }
            if let Some(t) = r.tls {
                tls = Some(add_tls(tls.unwrap_or_default(), t));
            }
            intended += r.intended;
            sent += r.sent;
            still_in_flight += r.still_in_flight;
        }
        let sum_of_classes = totals.total();
        // The earliest answer of each template and class over the parts.
        let mut answers: Vec<crate::AnswerSample> = Vec::new();
        let mut all: Vec<&crate::AnswerSample> = parts.iter().flat_map(|r| &r.answers).collect();
        all.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        for a in all {
            if !answers
                .iter()
                .any(|k| k.request == a.request && k.class == a.class)
            {
                answers.push(a.clone());
            }
        }
        answers.sort_by(|a, b| (&a.request, a.class).cmp(&(&b.request, b.class)));
        Ok(Recording {
            model: first.model,
            bucket: first.bucket,
            duration: first.duration,
            stopped_early: parts.iter().any(|r| r.stopped_early),
            phases,
            buckets,
            totals,
            connect_errors,
            tls,
            answers,
            requests: parts
                .iter()
                .flat_map(|r| r.requests.iter().copied())
                .collect(),
            intended,
            sent,
            still_in_flight,
            conservation: Conservation {
                holds: intended == sum_of_classes + still_in_flight
                    && parts.iter().all(|r| r.conservation.holds),
                sent: intended,
                sum_of_classes,
                in_flight: still_in_flight,
            },
        })
    }
}

impl Progress {
    /// The progress of the whole from its shares': counts added; `p99_last_second` is the largest of the
    /// shares' (a percentile cannot be added; the largest is what a live line should not hide).
    pub fn sum<'a>(parts: impl IntoIterator<Item = &'a Progress>) -> Progress {
        let mut total = Progress {
            elapsed: Dur::default(),
            intended: 0,
            sent: 0,
            completed: 0,
            in_flight: 0,
            dropped: 0,
            by_class: Default::default(),
            p99_last_second: None,
            tls: None,
        };
        for p in parts {
            total.elapsed = total.elapsed.max(p.elapsed);
            total.intended += p.intended;
            total.sent += p.sent;
            total.completed += p.completed;
            total.in_flight += p.in_flight;
            total.dropped += p.dropped;
            total.by_class += p.by_class;
            total.p99_last_second = total.p99_last_second.max(p.p99_last_second);
            if let Some(t) = p.tls {
                total.tls = Some(add_tls(total.tls.unwrap_or_default(), t));
            }
        }
        total
    }
}
