//! The human summary of a recording: a wrk2-like latency table with the corrected and uncorrected columns side by
//! side, send lag, outcome counts, achieved rate and the conservation check. Returns text; printing is the
//! binary's business.
//!
//! Not for machine output (the `Recording` serialises to JSON) nor for the `.hgrm` text (`hgrm`).

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::outcome::Outcome;
use crate::recording::{Measure, Model, Recording};

/// The percentiles wrk2 prints in its latency distribution.
pub const TABLE_PERCENTILES: [f64; 8] = [50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 99.999, 100.0];

/// A duration in the unit that keeps three significant digits readable: `850.00us`, `12.34ms`, `2.50s`.
pub fn human(nanos: u64) -> String {
    let ns = nanos as f64;
    if ns < 1e3 {
        format!("{nanos}ns")
    } else if ns < 1e6 {
        format!("{:.2}us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2}ms", ns / 1e6)
    } else {
        format!("{:.2}s", ns / 1e9)
    }
}

fn at(h: &Histogram<u64>, percentile: f64) -> String {
    if h.is_empty() {
        "-".to_string()
    } else {
        human(h.value_at_quantile(percentile / 100.0))
    }
}

/// The whole summary: latency table (everything that got an answer or a timeout, i.e. every class but
/// dropped), send lag, outcomes per class, achieved rate and conservation.
pub fn render(recording: &Recording, target: &str) -> String {
    let answered = |o: Outcome| o != Outcome::Dropped;
    let corrected = recording.histogram(Measure::Corrected, None, answered);
    let uncorrected = recording.histogram(Measure::Uncorrected, None, answered);
    let lag = recording.histogram(Measure::SendLag, None, answered);
    let late = recording.histogram(Measure::Late, None, answered);
    let duration = recording.duration.get();
    let mut out = String::new();
    let model = match recording.model {
        Model::Open => "open model: arrivals on a timetable, latency from the intended send time".to_string(),
        Model::Closed { users } => format!(
            "CLOSED model, {users} users: each waits for its answer, so queueing is invisible and the two columns agree"
        ),
    };
    let _ = writeln!(out, "{} test @ {target}", human_duration(duration));
    let _ = writeln!(out, "  {model}");
    if recording.stopped_early {
        let _ = writeln!(out, "  stopped early");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "  Latency Distribution (HdrHistogram)");
    let _ = writeln!(
        out,
        "  {:>9}  {:>12}  {:>12}",
        "", "corrected", "uncorrected"
    );
    let _ = writeln!(
        out,
        "  {:>9}  {:>12}  {:>12}",
        "", "(intended)", "(actual send)"
    );
    for p in TABLE_PERCENTILES {
        let label = format!("{p:.3}%");
        let _ = writeln!(
            out,
            "  {label:>9}  {:>12}  {:>12}",
            at(&corrected, p),
            at(&uncorrected, p)
        );
    }
    let _ = writeln!(
        out,
        "  {:>9}  {:>12}  {:>12}",
        "mean",
        human(corrected.mean() as u64),
        human(uncorrected.mean() as u64)
    );
    let _ = writeln!(out);
    let spread = |h: &Histogram<u64>| {
        format!(
            "p50 {}, p99 {}, max {}",
            at(h, 50.0),
            at(h, 99.0),
            at(h, 100.0)
        )
    };
    let _ = writeln!(out, "  Send lag (actual - intended): {}", spread(&lag));
    let _ = writeln!(
        out,
        "  Generator's own lateness (left out of corrected): {}",
        spread(&late)
    );
    let t = &recording.totals;
    let _ = writeln!(
        out,
        "  {} intended, {} sent, {} dropped at the in-flight cap, {} still in flight",
        recording.intended, recording.sent, t.dropped, recording.still_in_flight
    );
    let classes: Vec<String> = Outcome::ALL
        .iter()
        .map(|&o| format!("{} {}", o.name(), t.get(o)))
        .collect();
    let _ = writeln!(out, "  Outcomes: {}", classes.join(", "));
    if !recording.connect_errors.is_empty() {
        let reasons: Vec<String> = recording
            .connect_errors
            .iter()
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect();
        let _ = writeln!(out, "  Connect errors: {}", reasons.join(", "));
    }
    if let Some(tls) = &recording.tls {
        let _ = writeln!(
            out,
            "  TLS handshakes: {} full, {} resumed, {} failed",
            tls.handshakes, tls.resumed, tls.failed
        );
    }
    let seconds = duration.as_secs_f64().max(f64::MIN_POSITIVE);
    let _ = writeln!(
        out,
        "  Requests/sec: {:.2} sent, {:.2} completed",
        recording.sent as f64 / seconds,
        t.completed() as f64 / seconds
    );
    let c = &recording.conservation;
    let _ = writeln!(
        out,
        "  Conservation: {} (issued {} = {} in classes + {} in flight)",
        if c.holds { "holds" } else { "VIOLATED" },
        c.sent,
        c.sum_of_classes,
        c.in_flight
    );
    out
}

fn human_duration(d: Duration) -> String {
    faultline_units::Dur(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_with_three_significant_digits_in_a_readable_unit() {
        assert_eq!(human(850), "850ns");
        assert_eq!(human(850_000), "850.00us");
        assert_eq!(human(12_345_678), "12.35ms");
        assert_eq!(human(2_500_000_000), "2.50s");
    }
}
