//! Live verdicts: once a second the runner builds a record of what is complete so far (loadgen's finished buckets,
//! faultd's recording up to the same time, the breaker timelines as far as they go) and asks every expectation
//! not yet decided whether it is. A verdict once decided is final: it is the one the report keeps. The first
//! `abort_on_fail` expectation decided as failed stops the run.
//!
//! Not for how an expectation is decided (each one knows, in `expect`); only for asking at the right moments.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::expect::{secs, Expectation, Outcome, Verdict};
use crate::record::RunRecord;

/// What is decided so far, by expectation.
pub struct LiveVerdicts {
    decided: Vec<Option<Verdict>>,
    /// The SUT buckets the record held when it was last asked: what an expectation asked again need not re-read.
    judged: usize,
}

impl LiveVerdicts {
    pub fn new(expectations: &[Expectation]) -> LiveVerdicts {
        LiveVerdicts {
            decided: vec![None; expectations.len()],
            judged: 0,
        }
    }

    /// Whether the run should stop on a decision: some expectation asked for it.
    pub fn can_stop(expectations: &[Expectation]) -> bool {
        expectations.iter().any(|e| e.abort_on_fail)
    }

    /// Decides what `record` allows. Returns the verdicts decided just now, and the sentence of the first
    /// `abort_on_fail` failure among them, if any.
    pub fn update(
        &mut self,
        expectations: &[Expectation],
        record: &RunRecord,
    ) -> (Vec<Verdict>, Option<String>) {
        let mut new = Vec::new();
        let mut stop = None;
        for (e, slot) in expectations.iter().zip(self.decided.iter_mut()) {
            if slot.is_some() || !e.check.decidable_live() {
                continue;
            }
            if let Some(v) = e.decide_after(record, self.judged) {
                if e.abort_on_fail && v.failed() && stop.is_none() {
                    let label = v.id.clone().unwrap_or_else(|| v.name.clone());
                    stop = Some(format!("{label}: {}", v.sentence));
                }
                new.push(v.clone());
                *slot = Some(v);
            }
        }
        self.judged = record.sut.len();
        (new, stop)
    }

    /// Decided so far, by expectation.
    pub fn decided(&self) -> &[Option<Verdict>] {
        &self.decided
    }

    /// The verdicts of the whole run: each one decided during it as it was, the rest evaluated on `record`. When
    /// a decided failure stopped the run (`stopped_by`), the rest were cut short and are not judged at all.
    pub fn finish(
        self,
        expectations: &[Expectation],
        record: &RunRecord,
        stopped_by: Option<&str>,
    ) -> Vec<Verdict> {
        expectations
            .iter()
            .zip(self.decided)
            .map(|(e, d)| match (d, stopped_by) {
                (Some(v), _) => v,
                (None, None) => e.evaluate(record),
                (None, Some(by)) => Verdict {
                    id: e.id.clone(),
                    ..Verdict::with_outcome(
                        e.name(),
                        Outcome::Inconclusive,
                        format!(
                            "not judged: the run stopped at {} when {by}",
                            secs(record.duration)
                        ),
                        None,
                        None,
                    )
                },
            })
            .collect()
    }
}

/// loadgen's time series as it streams in: buckets arrive about a second after they end, in order.
pub struct Series {
    buckets: Arc<Mutex<Vec<loadgen::Bucket>>>,
    thread: Option<JoinHandle<()>>,
}

impl Series {
    /// The sender to give loadgen, and the collector.
    pub fn new() -> (loadgen::Series, Series) {
        let (tx, rx) = std::sync::mpsc::channel::<loadgen::Bucket>();
        let buckets: Arc<Mutex<Vec<loadgen::Bucket>>> = Arc::default();
        let sink = buckets.clone();
        // The receiver ends when loadgen drops its sender, which it does when the recording is taken.
        let thread = std::thread::Builder::new()
            .name("faultline-series".into())
            .spawn(move || {
                for b in rx {
                    if let Ok(mut v) = sink.lock() {
                        v.push(b);
                    }
                }
            })
            .ok();
        (loadgen::Series::Stream(tx), Series { buckets, thread })
    }

    /// The buckets that arrived since the last call, in order.
    pub fn take_new(&self) -> Vec<loadgen::Bucket> {
        self.buckets
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }

    /// The buckets not yet taken, once loadgen has handed over its recording (which ends the stream).
    pub fn finish(mut self) -> Vec<loadgen::Bucket> {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.buckets.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
