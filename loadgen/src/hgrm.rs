//! HdrHistogram's percentile distribution text (the `.hgrm` format of `outputPercentileDistribution`): a writer
//! that prints exactly what the Java library prints, and a parser, so reports can be plotted with HdrHistogram's
//! own plotter and compared with wrk2 and other tools' output.
//!
//! The hdrhistogram crate has no such writer. This module is not for the binary V2 encoding (see `recording`).

use std::fmt::Write as _;

use hdrhistogram::Histogram;

/// The output unit ratio for milliseconds when values are recorded in nanoseconds.
pub const MILLISECONDS: f64 = 1e6;
/// The output unit ratio for microseconds when values are recorded in nanoseconds.
pub const MICROSECONDS: f64 = 1e3;
/// Percentile ticks per half distance to 100%, as HdrHistogram prints by default.
pub const DEFAULT_TICKS_PER_HALF_DISTANCE: u32 = 5;

/// Why an `.hgrm` text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line} of the percentile distribution: {why}")]
pub struct HgrmError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong with it.
    pub why: String,
}

/// One row of a percentile distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PercentileRow {
    /// The value, in output units.
    pub value: f64,
    /// The percentile level as a fraction in `0.0..=1.0` (HdrHistogram prints it as a fraction too).
    pub quantile: f64,
    /// How many recorded values are at or below `value`.
    pub total_count: u64,
}

/// A parsed `.hgrm` text: the rows and the footer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PercentileDistribution {
    /// The rows, in increasing percentile.
    pub rows: Vec<PercentileRow>,
    /// `#[Mean = ...]`, in output units.
    pub mean: f64,
    /// `StdDeviation = ...`, in output units.
    pub std_deviation: f64,
    /// `#[Max = ...]`, in output units.
    pub max: f64,
    /// `Total count = ...`.
    pub total_count: u64,
    /// `#[Buckets = ...]` of the histogram that was printed.
    pub buckets: u32,
    /// `SubBuckets = ...` of the histogram that was printed.
    pub sub_buckets: u32,
}

impl PercentileDistribution {
    /// The value of the first row at or above `quantile`, as a reader of the text would look it up.
    pub fn value_at_quantile(&self, quantile: f64) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.quantile >= quantile)
            .or(self.rows.last())
            .map(|r| r.value)
    }
}

/// HdrHistogram's sub-bucket count for a precision: the power of two that holds 2 × 10^digits.
fn sub_bucket_count(significant_digits: u8) -> u64 {
    (2 * 10u64.pow(u32::from(significant_digits)))
        .next_power_of_two()
        .max(2)
}

/// Writes `histogram` as HdrHistogram's percentile distribution, values divided by `unit_ratio` (1e6 prints
/// nanoseconds as milliseconds), with `ticks_per_half_distance` rows per halving of the distance to 100%.
pub fn write(histogram: &Histogram<u64>, unit_ratio: f64, ticks_per_half_distance: u32) -> String {
    let digits = usize::from(histogram.sigfig());
    let mut out = String::new();
    let _ = write!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    if !histogram.is_empty() {
        for v in histogram.iter_quantiles(ticks_per_half_distance.max(1)) {
            total += v.count_since_last_iteration();
            let value = v.value_iterated_to() as f64 / unit_ratio;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                let _ = writeln!(
                    out,
                    "{value:>12.digits$} {q:>2.12} {total:>10} {:>14.2}",
                    1.0 / (1.0 - q)
                );
            } else {
                let _ = writeln!(out, "{value:>12.digits$} {q:>2.12} {total:>10}");
            }
        }
    }
    let mean = if histogram.is_empty() {
        0.0
    } else {
        histogram.mean() / unit_ratio
    };
    let stdev = if histogram.is_empty() {
        0.0
    } else {
        histogram.stdev() / unit_ratio
    };
    let max = histogram.max() as f64 / unit_ratio;
    let _ = writeln!(
        out,
        "#[Mean    = {mean:>12.digits$}, StdDeviation   = {stdev:>12.digits$}]"
    );
    let _ = writeln!(
        out,
        "#[Max     = {max:>12.digits$}, Total count    = {:>12}]",
        histogram.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        histogram.buckets(),
        sub_bucket_count(histogram.sigfig())
    );
    out
}

/// Reads a percentile distribution written by [`write`], HdrHistogram, wrk2 or any tool that prints the format.
pub fn parse(text: &str) -> Result<PercentileDistribution, HgrmError> {
    let mut d = PercentileDistribution::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let err = |why: String| HgrmError { line: i + 1, why };
        if line.is_empty() || line.starts_with("Value") {
            continue;
        }
        if let Some(footer) = line.strip_prefix("#[").and_then(|l| l.strip_suffix(']')) {
            for pair in footer.split(',') {
                let (key, value) = pair
                    .split_once('=')
                    .ok_or_else(|| err(format!("expected key = value in {pair:?}")))?;
                let value = value.trim();
                let number = || {
                    value
                        .parse::<f64>()
                        .map_err(|_| err(format!("{value:?} is not a number")))
                };
                let count = || {
                    value
                        .parse::<u64>()
                        .map_err(|_| err(format!("{value:?} is not a whole number")))
                };
                match key.trim() {
                    "Mean" => d.mean = number()?,
                    "StdDeviation" => d.std_deviation = number()?,
                    "Max" => d.max = number()?,
                    "Total count" => d.total_count = count()?,
                    "Buckets" => d.buckets = count()? as u32,
                    "SubBuckets" => d.sub_buckets = count()? as u32,
                    _ => {}
                }
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 3 {
            return Err(err(format!(
                "expected Value Percentile TotalCount, found {line:?}"
            )));
        }
        let number = |s: &str| {
            s.parse::<f64>()
                .map_err(|_| err(format!("{s:?} is not a number")))
        };
        d.rows.push(PercentileRow {
            value: number(fields[0])?,
            quantile: number(fields[1])?,
            total_count: fields[2]
                .parse()
                .map_err(|_| err(format!("{:?} is not a whole number", fields[2])))?,
        });
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use rand_distr::{Distribution, LogNormal};

    fn sample() -> Histogram<u64> {
        let mut h = crate::recording::new_histogram();
        let mut rng = StdRng::seed_from_u64(3);
        // Latencies around 20 ms with a long tail, in nanoseconds.
        let d = LogNormal::new((20e6f64).ln(), 0.8).unwrap();
        for _ in 0..100_000 {
            h.record(d.sample(&mut rng) as u64).unwrap();
        }
        h
    }

    #[test]
    fn written_percentiles_parse_back_to_the_histogram_values() {
        let h = sample();
        let text = write(&h, MILLISECONDS, DEFAULT_TICKS_PER_HALF_DISTANCE);
        let d = parse(&text).unwrap();
        assert!(d.rows.len() > 50, "{} rows", d.rows.len());
        // Three decimals of a millisecond: the printed value is within half a microsecond of the histogram's.
        let tolerance = 0.0005 + 1e-9;
        let n = h.len() as f64;
        for row in d.rows.iter().filter(|r| r.quantile < 1.0) {
            // The row's value is the histogram's value at its percentile, up to the one-count ambiguity of the
            // float product quantile × count that HdrHistogram's iterator documents.
            let low = h.highest_equivalent(h.value_at_quantile(row.quantile)) as f64 / 1e6;
            let high = h.highest_equivalent(h.value_at_quantile((row.quantile + 1.0 / n).min(1.0)))
                as f64
                / 1e6;
            assert!(
                row.value >= low - tolerance && row.value <= high + tolerance,
                "{row:?}: {low}..{high}"
            );
        }
        for q in [0.5, 0.9, 0.99, 0.999] {
            // Looking a percentile up in the text gives the next row at or above it: never below the truth.
            let truth = h.value_at_quantile(q) as f64 / 1e6;
            assert!(
                d.value_at_quantile(q).unwrap() >= truth - tolerance,
                "q={q}"
            );
        }
        let last = d.rows.last().unwrap();
        assert!((last.value - h.highest_equivalent(h.max()) as f64 / 1e6).abs() <= tolerance);
        for row in &d.rows {
            let counted = h
                .iter_recorded()
                .take_while(|v| v.value_iterated_to() as f64 / 1e6 <= row.value + tolerance);
            assert_eq!(
                counted.map(|v| v.count_since_last_iteration()).sum::<u64>(),
                row.total_count
            );
        }
        assert_eq!(d.rows.last().unwrap().quantile, 1.0);
        assert_eq!(d.total_count, 100_000);
        assert!((d.max - h.max() as f64 / 1e6).abs() <= tolerance);
        assert!((d.mean - h.mean() / 1e6).abs() <= tolerance);
        assert!((d.std_deviation - h.stdev() / 1e6).abs() <= tolerance);
        assert_eq!(d.sub_buckets, 2048);
        assert_eq!(d.buckets, u32::from(h.buckets()));
    }

    #[test]
    fn the_text_has_hdrhistograms_header_row_layout_and_footer() {
        let mut h = crate::recording::new_histogram();
        for v in 1..=10u64 {
            h.record(v * 1_000_000).unwrap();
        }
        let text = write(&h, MILLISECONDS, 5);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "       Value     Percentile TotalCount 1/(1-Percentile)"
        );
        assert_eq!(lines[1], "");
        assert_eq!(
            lines[2],
            "       1.000 0.000000000000          1           1.00"
        );
        assert_eq!(
            lines[lines.len() - 4],
            "      10.002 1.000000000000         10",
            "no 1/(1-p) on the 100% row"
        );
        assert_eq!(
            lines[lines.len() - 3],
            "#[Mean    =        5.500, StdDeviation   =        2.872]"
        );
        assert_eq!(
            lines[lines.len() - 2],
            "#[Max     =       10.002, Total count    =           10]"
        );
        assert_eq!(
            lines[lines.len() - 1],
            format!(
                "#[Buckets = {:>12}, SubBuckets     =         2048]",
                h.buckets()
            )
        );
    }

    #[test]
    fn malformed_rows_are_refused_with_their_line() {
        let e =
            parse("       Value     Percentile TotalCount 1/(1-Percentile)\n\n  1.0 0.5 x 2.0\n")
                .unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.to_string().contains("whole number"), "{e}");
        assert!(parse("1.0\n").is_err());
    }
}
