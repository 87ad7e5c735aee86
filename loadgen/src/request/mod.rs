//! The request pipeline, one for HTTP/1.1, HTTP/2 and gRPC: compile (templates into ready requests, once per
//! run), issue (the dispatcher hands each arrival of the timetable to a lane or a stream at its intended time, or
//! counts it dropped), classify (each answer into exactly one outcome class, see `outcome`).
//!
//! What the protocols share is here: the template pieces (`template`), the dispatcher and its wake-ups
//! (`dispatch`, `ticks`), and [`Run`], each exchange's side of the run. What differs is in a folder per protocol:
//! `http1` (loadgen's own client on `httparse`, one keep-alive connection per lane) and `http2` (hyper's `h2`,
//! one stream per call, gRPC). [`LoadSpec::validate`] is here too: checking the templates means compiling them.
//!
//! Not for the timetable (`schedule`, `replay`) nor for recording (`recorder`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::outcome::{Classifier, Outcome};
use crate::recorder::Recorder;
use crate::spec::LoadSpec;
use crate::target::Target;
use crate::LoadError;

pub(crate) mod dispatch;
pub(crate) mod http1;
pub(crate) mod http2;
pub(crate) mod template;
pub(crate) mod ticks;
pub(crate) mod trace;

/// Each exchange's side of the run, whatever its protocol: where it is recorded, how its answer is classified,
/// its timeout and the clock it counts from.
pub(crate) struct Run {
    pub(crate) recorder: Arc<Recorder>,
    pub(crate) classifier: Classifier,
    /// The client timeout, from when an arrival is handed over (or its intended time, if later).
    pub(crate) timeout: Duration,
    /// The run's origin, from which intended times count.
    pub(crate) origin: Instant,
    /// Where lanes and streams are spawned: the runtime `start` was called on.
    pub(crate) runtime: tokio::runtime::Handle,
    /// The trace id and deadline every request carries when the run correlates.
    pub(crate) tracing: Option<trace::Tracing>,
}

impl Run {
    /// Whether the cap on requests in flight is reached for the arrival due at `intended`, which is then counted
    /// dropped.
    pub(crate) fn over_cap(&self, intended: Duration, max_in_flight: u64) -> bool {
        let over = self.recorder.in_flight() >= max_in_flight;
        if over {
            self.recorder.dropped(intended);
        }
        over
    }

    /// Records the arrival due at `intended` as sent now, and returns now.
    pub(crate) fn sent(&self, intended: Duration) -> Instant {
        let now = Instant::now();
        self.recorder
            .sent(intended, now.saturating_duration_since(self.origin));
        now
    }

    /// Records the outcome of the arrival due at `intended`: when the generator was ready to send it, when it
    /// went (if it did), when it ended, and the trace id it carried in a correlated run.
    pub(crate) fn completed(
        &self,
        outcome: Outcome,
        intended: Duration,
        ready: Instant,
        actual: Option<Instant>,
        done: Instant,
        trace: Option<u128>,
    ) {
        let from_origin = |t: Instant| t.saturating_duration_since(self.origin);
        self.recorder.completed_traced(
            outcome,
            intended,
            from_origin(ready),
            actual.map(from_origin),
            from_origin(done),
            trace,
        );
    }
}

impl LoadSpec {
    /// Checks everything deserialisation cannot: rate segments in order with one kind each, ramps that end before
    /// the next segment, positive limits, a non-empty mix with valid paths, headers and generators (compiled for
    /// the protocol the mix asks for).
    pub fn validate(&self) -> Result<(), LoadError> {
        self.check()?;
        if self.replay.is_some() {
            // Its requests are the timetable's lines, checked with it.
            return Ok(());
        }
        // The target only fills the host header; any valid one checks the templates.
        let placeholder = Target::parse("http://127.0.0.1", &[])?;
        if self.is_http2() {
            return http2::Mix::compile(&self.requests, &placeholder).map(|_| ());
        }
        http1::Mix::compile(&self.requests, &placeholder).map(|_| ())
    }
}
