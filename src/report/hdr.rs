//! The HdrHistogram files of a run: one `.hgrm` percentile distribution per phase (SUT latency corrected and
//! uncorrected, the latency faultd served per route) for HdrHistogram's plotter, and `sut.hlog`, the V2 interval
//! log of the SUT's corrected latency (one interval per bucket, tagged by phase) for `HistogramLogProcessor`.
//!
//! Everything here reads the saved recordings only, so `faultline report` rebuilds the same files. Not for the
//! percentile text format itself (that is `loadgen::hgrm`) nor for the binary V2 encoding (`faultline-hdr`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use loadgen::hgrm;

use super::ReportError;

/// The `HistogramLogProcessor` format version our interval log follows (the Java `HistogramLogWriter`'s).
pub const LOG_FORMAT_VERSION: &str = "1.3";

/// Values are recorded in nanoseconds; the text files print milliseconds, as HdrHistogram's tools expect with
/// their default output ratio of 1e6.
pub const NANOS_PER_MS: f64 = 1e6;

/// One measure (corrected: from the intended send time; uncorrected: service time) of the SUT's answered
/// requests in one phase, merged over the outcome classes; dropped requests were never sent and have none.
pub fn sut_histogram(
    load: &loadgen::Recording,
    phase: &str,
    measure: loadgen::Measure,
) -> Histogram<u64> {
    load.histogram(measure, Some(phase), |o| o != loadgen::Outcome::Dropped)
}

/// A name made safe for a file name or an interval-log tag: anything but letters, digits, `-`, `_` and `.`
/// becomes `_`, because phase and route names come from the scenario and tags may not hold commas or spaces.
pub fn safe_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "_".into()
    } else {
        s
    }
}

/// Writes every `.hgrm` file and `sut.hlog` into `dir` and returns the paths written.
///
/// `started` is the run's origin (t = 0 of every bucket), used for the log's StartTime and BaseTime.
pub fn write_files(
    dir: &Path,
    load: &loadgen::Recording,
    dependency: &faultd::Recording,
    started: SystemTime,
) -> Result<Vec<PathBuf>, ReportError> {
    let mut written = Vec::new();
    let mut put = |name: String, text: String| -> Result<(), ReportError> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|source| ReportError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
        Ok(())
    };
    for phase in &load.phases {
        let stem = safe_name(&phase.name);
        for (measure, kind) in [
            (loadgen::Measure::Corrected, "corrected"),
            (loadgen::Measure::Uncorrected, "uncorrected"),
        ] {
            let h = sut_histogram(load, &phase.name, measure);
            put(
                format!("sut-{stem}.{kind}.hgrm"),
                hgrm::write(&h, NANOS_PER_MS, hgrm::DEFAULT_TICKS_PER_HALF_DISTANCE),
            )?;
        }
    }
    // One file per route and phase, an empty distribution where faultd served nothing in the phase (every call
    // abandoned, say), so that the set of files does not depend on what happened.
    let empty = loadgen::recording::new_histogram();
    for (route, recording) in &dependency.routes {
        let mut phases: Vec<&str> = load.phases.iter().map(|p| p.name.as_str()).collect();
        phases.extend(
            recording
                .latency
                .keys()
                .map(String::as_str)
                .filter(|k| !load.phases.iter().any(|p| p.name == *k)),
        );
        for phase in phases {
            let h = recording.latency.get(phase).unwrap_or(&empty);
            let name = format!("dependency-{}-{}.hgrm", safe_name(route), safe_name(phase));
            put(
                name,
                hgrm::write(h, NANOS_PER_MS, hgrm::DEFAULT_TICKS_PER_HALF_DISTANCE),
            )?;
        }
    }
    put("sut.hlog".into(), interval_log(load, started))?;
    Ok(written)
}

/// The phase a bucket belongs to: the last phase that started at or before the bucket's start.
fn phase_of(load: &loadgen::Recording, start: Duration) -> Option<&str> {
    load.phases
        .iter()
        .rev()
        .find(|p| p.start.get() <= start)
        .or(load.phases.first())
        .map(|p| p.name.as_str())
}

fn epoch_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The SUT's corrected latency as an HdrHistogram interval log, in the layout of Java's `HistogramLogWriter`:
/// `#[StartTime: ...]`, `#[BaseTime: ...]` (both the run's origin, so interval timestamps are seconds from
/// t = 0), the format version header, the column legend, then one line per bucket that completed requests,
/// `Tag=<phase>,<start s>,<length s>,<max ms>,<base64 V2+DEFLATE>`. The histograms hold nanoseconds; the max
/// column is in milliseconds because `HistogramLogProcessor` divides by its default ratio of 1e6.
pub fn interval_log(load: &loadgen::Recording, started: SystemTime) -> String {
    let origin = epoch_secs(started);
    let stamp = humantime::format_rfc3339_millis(started);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "#[Latency of the SUT from the intended send time, in nanoseconds; written by faultline]"
    );
    let _ = writeln!(
        out,
        "#[StartTime: {origin:.3} (seconds since epoch), {stamp}]"
    );
    let _ = writeln!(out, "#[BaseTime: {origin:.3} (seconds since epoch)]");
    let _ = writeln!(out, "#[Histogram log format version {LOG_FORMAT_VERSION}]");
    out.push_str("\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n");
    let length = load.bucket.get().as_secs_f64();
    for bucket in &load.buckets {
        let Some(bytes) = bucket.interval_histogram.as_deref() else {
            continue;
        };
        // The max column is read by tools that filter intervals without decoding them; a bucket whose bytes do
        // not decode is left out rather than written with a made-up max.
        let Ok(h) = loadgen::recording::decode_histogram(bytes) else {
            continue;
        };
        if h.is_empty() {
            continue;
        }
        let start = bucket.start.get();
        if let Some(phase) = phase_of(load, start) {
            let _ = write!(out, "Tag={},", safe_name(phase));
        }
        let _ = writeln!(
            out,
            "{:.3},{:.3},{:.3},{}",
            start.as_secs_f64(),
            length,
            h.max() as f64 / NANOS_PER_MS,
            // Standard base64 with padding of V2+DEFLATE, as HdrHistogram's log readers expect.
            faultline_hdr::encode_base64(&h).unwrap_or_default()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_characters_in_names_become_underscores() {
        assert_eq!(safe_name("brown out, part 2/3"), "brown_out__part_2_3");
        assert_eq!(safe_name("healthy"), "healthy");
        assert_eq!(safe_name(""), "_");
    }
}
