//! What a run recorded, as the runner and the CLI read it: histograms per phase and outcome class, the time
//! series per bucket, totals and the conservation check. Serialisable to JSON with histograms as base64
//! V2+DEFLATE (HdrHistogram's own compressed encoding, readable by its Java, Go and Python ports).
//!
//! Not for recording live (that is `recorder`, which also makes [`Recording::empty`]) nor for printing (that is
//! `summary` and `hgrm`).

use std::collections::BTreeMap;
use std::time::Duration;

use faultline_units::Dur;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::outcome::{ClassCounts, Outcome};

pub use faultline_hdr::{new_histogram, DecodeError, SIGNIFICANT_DIGITS};

/// An HDR histogram of nanoseconds, serialised as a base64 V2+DEFLATE string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyHistogram(
    #[serde(with = "faultline_hdr::as_base64::histogram")] pub Histogram<u64>,
);

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram(new_histogram())
    }
}

/// The V2+DEFLATE bytes of a histogram (empty on the impossible failure of encoding into memory).
pub fn encode_histogram(h: &Histogram<u64>) -> Vec<u8> {
    faultline_hdr::encode(h).unwrap_or_default()
}

/// A histogram from V2 or V2+DEFLATE bytes.
pub fn decode_histogram(bytes: &[u8]) -> Result<Histogram<u64>, DecodeError> {
    faultline_hdr::decode(bytes)
}

/// Which of the recorded times a histogram holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// From the intended send time to the end of the response: what a user arriving on schedule waited. When the
    /// generator itself was late to send (a late wake-up, a starved runtime, a host stall), from when it was ready:
    /// the wait for a connection the service was still using counts, the generator's own lateness does not.
    Corrected,
    /// From the actual send (a connection in hand) to the end of the response: the service time alone.
    Uncorrected,
    /// Actual send minus intended send: how far the request's send fell behind, for any reason.
    SendLag,
    /// How late the generator itself was in getting the request ready to send: left out of `Corrected`.
    Late,
}

/// The histograms of one outcome class in one phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassHistograms {
    /// Latency from the intended send time (coordinated-omission free), the generator's own lateness left out.
    pub corrected: LatencyHistogram,
    /// Service time from the actual send.
    pub uncorrected: LatencyHistogram,
    /// Actual minus intended send time.
    pub send_lag: LatencyHistogram,
    /// The generator's own lateness (absent from recordings made before it was kept: empty).
    #[serde(default)]
    pub late: LatencyHistogram,
}

impl ClassHistograms {
    /// The histogram of one measure.
    pub fn get(&self, measure: Measure) -> &Histogram<u64> {
        match measure {
            Measure::Corrected => &self.corrected.0,
            Measure::Uncorrected => &self.uncorrected.0,
            Measure::SendLag => &self.send_lag.0,
            Measure::Late => &self.late.0,
        }
    }
}

/// Everything recorded for the requests whose intended time fell in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseRecording {
    /// The phase's name as the runner gave it.
    pub name: String,
    /// When the phase starts, from the origin.
    pub start: Dur,
    /// Requests per class (dropped included).
    pub counts: ClassCounts,
    /// Histograms per class; `dropped` has none (nothing was sent), classes never seen are absent.
    pub classes: BTreeMap<Outcome, ClassHistograms>,
}

/// A bucket's latency percentiles (corrected latency of the requests completed in it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BucketLatency {
    /// Median.
    pub p50: Dur,
    /// 90th percentile.
    pub p90: Dur,
    /// 99th percentile.
    pub p99: Dur,
    /// The slowest.
    pub max: Dur,
}

impl BucketLatency {
    /// The percentiles of an interval histogram; `None` when it is empty.
    pub fn of(h: &Histogram<u64>) -> Option<BucketLatency> {
        if h.is_empty() {
            return None;
        }
        let at = |q| Dur(Duration::from_nanos(h.value_at_quantile(q)));
        Some(BucketLatency {
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: Dur(Duration::from_nanos(h.max())),
        })
    }
}

/// One step of the time series. Index i covers `[i*bucket, (i+1)*bucket)` from the origin: `intended`, `sent` and
/// `dropped` by intended time, `completed` and the latencies by completion time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// The bucket's start, from the origin.
    pub start: Dur,
    /// Arrivals the schedule issued (sent + dropped).
    pub intended: u64,
    /// Arrivals dispatched to the client.
    pub sent: u64,
    /// Arrivals refused at the in-flight cap.
    pub dropped: u64,
    /// Requests that ended in the bucket, by class (`dropped` is always 0 here; see `dropped`).
    pub completed: ClassCounts,
    /// The most requests in flight at any moment of the bucket.
    pub in_flight: u64,
    /// Percentiles of the corrected latency of the requests completed in the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<BucketLatency>,
    /// The bucket's corrected-latency histogram as V2+DEFLATE bytes (base64 in JSON), for an interval log.
    #[serde(
        default,
        with = "faultline_hdr::as_base64::encoded_option",
        skip_serializing_if = "Option::is_none"
    )]
    pub interval_histogram: Option<Vec<u8>>,
}

/// The check that no request was lost: every request the schedule issued is in exactly one class or still in
/// flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conservation {
    /// True when `sent == sum_of_classes + in_flight`.
    pub holds: bool,
    /// Requests the schedule issued, counted at dispatch (those dropped at the cap included).
    pub sent: u64,
    /// The sum of the outcome classes, counted at completion.
    pub sum_of_classes: u64,
    /// Requests still in flight when the recording was taken.
    pub in_flight: u64,
}

/// Whether the load followed a schedule (open model) or a fixed number of users (closed model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Model {
    /// Arrivals on a timetable; latency measured from the intended time.
    Open,
    /// `users` loops that each wait for their answer; intended time = actual send, so queueing is invisible.
    Closed {
        /// How many loops ran.
        users: u32,
    },
}

/// Everything a run recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    /// Open or closed model.
    pub model: Model,
    /// The width of each time-series bucket.
    pub bucket: Dur,
    /// The run's planned duration.
    pub duration: Dur,
    /// True when `stop` ended the schedule before its end.
    pub stopped_early: bool,
    /// Per phase, in phase order.
    pub phases: Vec<PhaseRecording>,
    /// The time series, one bucket per `bucket` from the origin to the end of the run; empty unless the run
    /// kept it (`RunOptions::series`).
    pub buckets: Vec<Bucket>,
    /// Requests per class over the whole run.
    pub totals: ClassCounts,
    /// The `connect_error` class by reason: a refused connect, a failed TLS handshake (`tls: certificate
    /// expired`, `tls: alert InternalError`, ...), a connection that broke mid-exchange.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub connect_errors: BTreeMap<String, u64>,
    /// The TLS handshakes of an `https://` run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::tls::TlsCounts>,
    /// The first answer of each outcome class per request template, as the report shows them (HTTP/2 and gRPC
    /// runs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<crate::samples::AnswerSample>,
    /// Each request sent with a trace id, when the run correlates (`RunOptions::correlate`), in the order they
    /// ended; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<RequestTrace>,
    /// Arrivals the schedule issued (sent + dropped).
    pub intended: u64,
    /// Arrivals dispatched to the client (not dropped).
    pub sent: u64,
    /// Requests without an outcome when the recording was taken.
    pub still_in_flight: u64,
    /// sent = sum of classes + in flight, checked.
    pub conservation: Conservation,
}

/// One request of a correlated run: its trace id and its times from the origin, for the runner to join with the
/// dependency calls that carried the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestTrace {
    /// The trace id it carried.
    #[serde(with = "faultline_units::trace::hex_id")]
    pub trace: u128,
    /// When it was due, from the origin.
    pub intended: Dur,
    /// When it went out on a connection; `None` if it timed out waiting for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<Dur>,
    /// When it ended: its answer, or the client timeout.
    pub ended: Dur,
    /// Its outcome class.
    pub class: Outcome,
}

impl Recording {
    /// One measure merged over the phases named in `phase` (all phases for `None`) and the classes `include`
    /// accepts. For example the corrected latency of everything that got an answer:
    /// `recording.histogram(Measure::Corrected, None, |o| o != Outcome::Dropped)`.
    pub fn histogram(
        &self,
        measure: Measure,
        phase: Option<&str>,
        include: impl Fn(Outcome) -> bool,
    ) -> Histogram<u64> {
        let mut merged = new_histogram();
        for p in self
            .phases
            .iter()
            .filter(|p| phase.is_none_or(|name| p.name == name))
        {
            for (_, h) in p.classes.iter().filter(|(o, _)| include(**o)) {
                // Both sides auto-resize, so adding cannot fail on range; a failure would only lose this class.
                let _ = merged.add(h.get(measure));
            }
        }
        merged
    }

    /// Completions per second over `[from, to)` by completion time, from the buckets (bucket resolution).
    pub fn completion_rate(&self, from: Duration, to: Duration) -> f64 {
        let width = self.bucket.get();
        let count: u64 = self
            .buckets
            .iter()
            .filter(|b| b.start.get() >= from && b.start.get() + width <= to)
            .map(|b| b.completed.completed())
            .sum();
        count as f64
            / (to.saturating_sub(from))
                .as_secs_f64()
                .max(f64::MIN_POSITIVE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_survive_the_json_round_trip_as_base64_deflate() {
        let mut h = new_histogram();
        for v in [1_000u64, 2_000_000, 3_000_000_000] {
            h.record(v).unwrap();
        }
        let json = serde_json::to_string(&LatencyHistogram(h.clone())).unwrap();
        assert!(
            json.starts_with("\"HISTFAA"),
            "V2+DEFLATE's base64 cookie: {json}"
        );
        let back: LatencyHistogram = serde_json::from_str(&json).unwrap();
        assert_eq!(back.0.len(), 3);
        assert_eq!(back.0.max(), h.max());
        assert_eq!(back.0.value_at_quantile(0.5), h.value_at_quantile(0.5));
    }
}
