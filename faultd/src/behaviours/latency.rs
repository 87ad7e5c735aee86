//! Latency: how long faultd waits before it answers a call.
//!
//! For: the delay distributions a scenario can ask for (fixed, uniform, normal, log-normal, a percentile spec
//! such as `{p50: 40ms, p99: 80ms}`, or a recorded histogram) and the quantile function that turns one uniform draw into a delay.
//! Not for: waiting (the data plane sleeps, see `crate::http`) or choosing which fault a call gets.
//!
//! Every distribution is sampled by inversion (`quantile(u)`) rather than with a sampler per family, for two
//! reasons: one uniform draw per call keeps seeded runs reproducible whatever the distribution, and a ramp from one
//! distribution to another is the linear blend of the two quantiles at the same `u`, which moves every percentile
//! linearly (a ramp from `fixed: 50ms` to `fixed: 2s` is exactly the linear ramp of the delay).

use std::time::Duration;

use faultline_units::Dur;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Fault, Invalid};

/// The delay before a call is answered. Exactly one form must be given:
/// `{fixed: 100ms}`, `{uniform: [10ms, 50ms]}`, `{normal: {mean: 50ms, stddev: 10ms}}`,
/// `{lognormal: {median: 40ms, sigma: 0.3}}`, a percentile spec `{p50: 40ms, p99: 80ms}` (p90 and p999 optional),
/// or a recorded histogram `{histogram: [[2ms, 0], [5ms, 80], [40ms, 20]]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    /// Every call waits exactly this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<Dur>,
    /// Uniformly distributed between the two bounds `[min, max]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uniform: Option<[Dur; 2]>,
    /// Normally distributed; draws below zero are served at zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normal: Option<Normal>,
    /// Log-normally distributed: `median` is e^mu, `sigma` the standard deviation of the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lognormal: Option<LogNormal>,
    /// Percentile spec: the median delay. Needs `p99` too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<Dur>,
    /// Percentile spec: the 90th percentile (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90: Option<Dur>,
    /// Percentile spec: the 99th percentile. Needs `p50` too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<Dur>,
    /// Percentile spec: the 99.9th percentile (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p999: Option<Dur>,
    /// A recorded distribution: `[edge, count]` pairs with rising edges, each counting the calls whose delay fell
    /// between the previous edge and this one (the first pair's calls took exactly its edge; write `[min, 0]` to
    /// start the distribution at `min`). Delays are drawn from it with linear interpolation inside each bin, so
    /// every percentile of the record is played back to within its bin's width. What `faultline import` writes
    /// for a dependency's latency in one bucket of a record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<Vec<(Dur, u64)>>,
}

/// The most bins a histogram may hold: enough for 2% bins from 1 us to an hour, small enough to stay a config.
pub const MAX_HISTOGRAM_BINS: usize = 2000;

/// Parameters of a normal delay distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Normal {
    /// The mean delay.
    pub mean: Dur,
    /// The standard deviation of the delay.
    pub stddev: Dur,
}

/// Parameters of a log-normal delay distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogNormal {
    /// The median delay (e^mu).
    pub median: Dur,
    /// The standard deviation of ln(delay); dimensionless, so unchanged by `--time-scale`.
    pub sigma: f64,
}

impl Latency {
    /// A fixed delay; handy in tests and for the control API.
    pub fn fixed(d: Duration) -> Latency {
        Latency {
            fixed: Some(Dur(d)),
            ..Latency::default()
        }
    }
}

impl Fault for Latency {
    fn validate(&self) -> Result<(), Invalid> {
        self.model().map(|_| ())
    }

    /// Multiplies every duration by `factor`; `sigma` is a ratio and stays.
    fn scale_time(&mut self, factor: f64) {
        let scale = |d: &mut Option<Dur>| {
            if let Some(v) = d {
                *v = v.scaled(factor);
            }
        };
        scale(&mut self.fixed);
        if let Some([a, b]) = &mut self.uniform {
            *a = a.scaled(factor);
            *b = b.scaled(factor);
        }
        if let Some(n) = &mut self.normal {
            n.mean = n.mean.scaled(factor);
            n.stddev = n.stddev.scaled(factor);
        }
        if let Some(l) = &mut self.lognormal {
            l.median = l.median.scaled(factor);
        }
        scale(&mut self.p50);
        scale(&mut self.p90);
        scale(&mut self.p99);
        scale(&mut self.p999);
        if let Some(bins) = &mut self.histogram {
            for (edge, _) in bins {
                *edge = edge.scaled(factor);
            }
        }
    }
}

impl Latency {
    /// Checks that exactly one form is given and that its parameters make a distribution, and returns it.
    pub fn model(&self) -> Result<LatencyModel, Invalid> {
        let percentile_spec =
            self.p50.is_some() || self.p90.is_some() || self.p99.is_some() || self.p999.is_some();
        let forms = [
            self.fixed.is_some(),
            self.uniform.is_some(),
            self.normal.is_some(),
            self.lognormal.is_some(),
            percentile_spec,
            self.histogram.is_some(),
        ];
        match forms.iter().filter(|f| **f).count() {
            0 => {
                return Err(Invalid::new(
                    "",
                    "give one of fixed, uniform, normal, lognormal, histogram, or a percentile spec {p50, p99}",
                ))
            }
            1 => {}
            _ => {
                return Err(Invalid::new(
                    "",
                    "give only one of fixed, uniform, normal, lognormal, histogram, or a percentile spec {p50, p99}",
                ))
            }
        }
        if let Some(bins) = &self.histogram {
            return histogram_model(bins);
        }
        if let Some(d) = self.fixed {
            return Ok(LatencyModel::Fixed(d.as_secs_f64()));
        }
        if let Some([min, max]) = self.uniform {
            if min > max {
                return Err(Invalid::new(
                    "uniform",
                    format!("min {min} is above max {max}"),
                ));
            }
            return Ok(LatencyModel::Uniform {
                min: min.as_secs_f64(),
                max: max.as_secs_f64(),
            });
        }
        if let Some(n) = self.normal {
            return Ok(LatencyModel::Normal {
                mean: n.mean.as_secs_f64(),
                stddev: n.stddev.as_secs_f64(),
            });
        }
        if let Some(l) = self.lognormal {
            if !(l.sigma.is_finite() && l.sigma >= 0.0 && l.sigma <= 10.0) {
                return Err(Invalid::new(
                    "lognormal.sigma",
                    format!("{} is not between 0 and 10", l.sigma),
                ));
            }
            if l.median.get().is_zero() {
                return Err(Invalid::new("lognormal.median", "must be above zero"));
            }
            return Ok(LatencyModel::Percentiles(vec![
                (0.0, l.median.as_secs_f64().ln()),
                (1.0, l.median.as_secs_f64().ln() + l.sigma),
            ]));
        }
        let p50 = self
            .p50
            .ok_or_else(|| Invalid::new("p50", "a percentile spec needs p50"))?;
        let p99 = self
            .p99
            .ok_or_else(|| Invalid::new("p99", "a percentile spec needs p99"))?;
        if p50.get().is_zero() {
            return Err(Invalid::new("p50", "must be above zero"));
        }
        let mut points = vec![("p50", 0.5, p50)];
        if let Some(p90) = self.p90 {
            points.push(("p90", 0.9, p90));
        }
        points.push(("p99", 0.99, p99));
        if let Some(p999) = self.p999 {
            points.push(("p999", 0.999, p999));
        }
        for pair in points.windows(2) {
            if pair[1].2 < pair[0].2 {
                return Err(Invalid::new(
                    pair[1].0,
                    format!(
                        "{} is below {} ({}); percentiles must not decrease",
                        pair[1].2, pair[0].0, pair[0].2
                    ),
                ));
            }
        }
        Ok(LatencyModel::Percentiles(
            points
                .into_iter()
                .map(|(_, p, d)| (standard_normal_quantile(p), d.as_secs_f64().ln()))
                .collect(),
        ))
    }
}

/// A validated delay distribution in seconds, sampled by inversion.
#[derive(Debug, Clone, PartialEq)]
pub enum LatencyModel {
    /// Always this many seconds.
    Fixed(f64),
    /// Uniform on [min, max] seconds.
    Uniform { min: f64, max: f64 },
    /// Normal, truncated at zero.
    Normal { mean: f64, stddev: f64 },
    /// ln(delay) as a piecewise-linear function of the standard normal quantile z, through the given
    /// `(z, ln seconds)` points, extended beyond the ends with the nearest segment's slope. Two points make a
    /// log-normal; more points bend the tail to hit every requested percentile exactly.
    Percentiles(Vec<(f64, f64)>),
    /// A recorded histogram as its cumulative distribution: `(share of calls at or below, seconds)` points with
    /// both coordinates rising, the last share 1; delays between two points are interpolated linearly.
    Empirical(Vec<(f64, f64)>),
}

/// Checks a histogram's bins and turns them into its cumulative distribution.
fn histogram_model(bins: &[(Dur, u64)]) -> Result<LatencyModel, Invalid> {
    if bins.is_empty() {
        return Err(Invalid::new("histogram", "needs at least one [edge, count] bin"));
    }
    if bins.len() > MAX_HISTOGRAM_BINS {
        return Err(Invalid::new(
            "histogram",
            format!("has {} bins; at most {MAX_HISTOGRAM_BINS}", bins.len()),
        ));
    }
    for (i, pair) in bins.windows(2).enumerate() {
        if pair[1].0 <= pair[0].0 {
            return Err(Invalid::new(
                format!("histogram[{}]", i + 1),
                format!(
                    "edge {} is not above the previous edge {}; edges must rise",
                    pair[1].0, pair[0].0
                ),
            ));
        }
    }
    let total: u64 = bins.iter().map(|(_, c)| *c).fold(0u64, u64::saturating_add);
    if total == 0 {
        return Err(Invalid::new("histogram", "counts no call; give at least one count above 0"));
    }
    let mut seen = 0u64;
    Ok(LatencyModel::Empirical(
        bins.iter()
            .map(|(edge, count)| {
                seen = seen.saturating_add(*count);
                (seen as f64 / total as f64, edge.as_secs_f64())
            })
            .collect(),
    ))
}

/// The delay at quantile `u` of a cumulative distribution: the first point's delay below its share, linear
/// between points above it.
fn empirical(points: &[(f64, f64)], u: f64) -> f64 {
    let i = points.partition_point(|(share, _)| *share < u);
    match (i.checked_sub(1).map(|j| points[j]), points.get(i).copied()) {
        (Some((c0, s0)), Some((c1, s1))) if c1 > c0 => s0 + (s1 - s0) * (u - c0) / (c1 - c0),
        (_, Some((_, s))) | (Some((_, s)), None) => s,
        (None, None) => 0.0,
    }
}

impl LatencyModel {
    /// The delay at quantile `u` in (0, 1). Never negative.
    pub fn quantile(&self, u: f64) -> Duration {
        let seconds = match self {
            LatencyModel::Fixed(s) => *s,
            LatencyModel::Uniform { min, max } => min + (max - min) * u,
            LatencyModel::Normal { mean, stddev } => mean + stddev * standard_normal_quantile(u),
            LatencyModel::Percentiles(points) => {
                piecewise(points, standard_normal_quantile(u)).exp()
            }
            LatencyModel::Empirical(points) => empirical(points, u),
        };
        // A year caps the far tail of wide log-normals so a Duration can always hold the value.
        Duration::from_secs_f64(seconds.clamp(0.0, 3.15e7))
    }
}

fn piecewise(points: &[(f64, f64)], z: f64) -> f64 {
    match points {
        [] => 0.0,
        [(_, y)] => *y,
        _ => {
            // The segment that covers z, or the first/last one extended beyond the ends.
            let i = points
                .windows(2)
                .position(|w| z <= w[1].0)
                .unwrap_or(points.len() - 2);
            let ((z0, y0), (z1, y1)) = (points[i], points[i + 1]);
            let slope = if z1 > z0 { (y1 - y0) / (z1 - z0) } else { 0.0 };
            y0 + slope * (z - z0)
        }
    }
}

/// The standard normal quantile (inverse CDF), Acklam's rational approximation (relative error below 1.2e-9),
/// which is far finer than the sampling error of any run.
pub fn standard_normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383_577_518_672_69e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let low = 0.02425;
    if p < low {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - low {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::draw::CallDraws;

    const DRAWS: u64 = 100_000;

    fn ms(v: u64) -> Dur {
        Dur::from_millis(v)
    }

    /// Draws 100k delays with the same generator the data plane uses.
    fn sample(model: &LatencyModel) -> Vec<Duration> {
        (0..DRAWS)
            .map(|n| model.quantile(CallDraws::new(7, 0, n).latency))
            .collect()
    }

    /// Asserts that the share of draws at or below `value` is `p` within five binomial standard errors: the
    /// sampling error of an empirical CDF, so the bound is physics, not tuning.
    fn assert_percentile(draws: &[Duration], p: f64, value: Duration) {
        let below = draws.iter().filter(|d| **d <= value).count() as f64 / draws.len() as f64;
        let tolerance = 5.0 * (p * (1.0 - p) / draws.len() as f64).sqrt();
        assert!(
            (below - p).abs() <= tolerance,
            "P(delay <= {value:?}) = {below}, expected {p} +- {tolerance}"
        );
    }

    #[test]
    fn fixed_latency_is_always_the_same() {
        let model = Latency::fixed(Duration::from_millis(100)).model().unwrap();
        assert!(sample(&model)
            .iter()
            .all(|d| *d == Duration::from_millis(100)));
    }

    #[test]
    fn uniform_latency_hits_its_percentiles_and_stays_in_bounds() {
        let model = Latency {
            uniform: Some([ms(10), ms(50)]),
            ..Latency::default()
        }
        .model()
        .unwrap();
        let draws = sample(&model);
        assert!(draws
            .iter()
            .all(|d| *d >= Duration::from_millis(10) && *d <= Duration::from_millis(50)));
        assert_percentile(&draws, 0.5, Duration::from_millis(30));
        assert_percentile(&draws, 0.9, Duration::from_millis(46));
        assert_percentile(&draws, 0.99, Duration::from_micros(49_600));
    }

    #[test]
    fn normal_latency_hits_its_percentiles() {
        let model = Latency {
            normal: Some(Normal {
                mean: ms(50),
                stddev: ms(10),
            }),
            ..Latency::default()
        }
        .model()
        .unwrap();
        let draws = sample(&model);
        for p in [0.5, 0.9, 0.99, 0.999] {
            let value = 0.050 + 0.010 * standard_normal_quantile(p);
            assert_percentile(&draws, p, Duration::from_secs_f64(value));
        }
    }

    #[test]
    fn normal_latency_is_never_negative() {
        let model = Latency {
            normal: Some(Normal {
                mean: ms(5),
                stddev: ms(10),
            }),
            ..Latency::default()
        }
        .model()
        .unwrap();
        let draws = sample(&model);
        let zeros = draws.iter().filter(|d| d.is_zero()).count() as f64 / DRAWS as f64;
        // P(N(5, 10) < 0) = P(Z < -0.5) = 0.3085: those draws are served at zero, none below.
        assert!((zeros - 0.3085).abs() < 0.01, "{zeros}");
    }

    #[test]
    fn lognormal_latency_hits_its_percentiles() {
        let model = Latency {
            lognormal: Some(LogNormal {
                median: ms(40),
                sigma: 0.5,
            }),
            ..Latency::default()
        }
        .model()
        .unwrap();
        let draws = sample(&model);
        for p in [0.5, 0.9, 0.99, 0.999] {
            let value = 0.040 * (0.5 * standard_normal_quantile(p)).exp();
            assert_percentile(&draws, p, Duration::from_secs_f64(value));
        }
    }

    #[test]
    fn percentile_spec_with_p50_and_p99_hits_both() {
        let model = Latency {
            p50: Some(ms(40)),
            p99: Some(ms(80)),
            ..Latency::default()
        }
        .model()
        .unwrap();
        let draws = sample(&model);
        assert_percentile(&draws, 0.5, Duration::from_millis(40));
        assert_percentile(&draws, 0.99, Duration::from_millis(80));
    }

    #[test]
    fn percentile_spec_with_all_four_points_hits_each() {
        let spec = Latency {
            p50: Some(ms(40)),
            p90: Some(ms(50)),
            p99: Some(ms(200)),
            p999: Some(ms(1000)),
            ..Latency::default()
        };
        let draws = sample(&spec.model().unwrap());
        assert_percentile(&draws, 0.5, Duration::from_millis(40));
        assert_percentile(&draws, 0.9, Duration::from_millis(50));
        assert_percentile(&draws, 0.99, Duration::from_millis(200));
        assert_percentile(&draws, 0.999, Duration::from_millis(1000));
    }

    #[test]
    fn percentile_spec_refuses_decreasing_percentiles_naming_the_field() {
        let err = Latency {
            p50: Some(ms(80)),
            p99: Some(ms(40)),
            ..Latency::default()
        }
        .model()
        .unwrap_err();
        assert_eq!(err.field, "p99");
        assert!(err.message.contains("must not decrease"), "{}", err.message);
    }

    #[test]
    fn latency_with_two_forms_or_none_is_refused() {
        let both = Latency {
            fixed: Some(ms(1)),
            p50: Some(ms(1)),
            p99: Some(ms(2)),
            ..Latency::default()
        };
        assert!(both.model().unwrap_err().message.contains("only one"));
        assert!(Latency::default()
            .model()
            .unwrap_err()
            .message
            .contains("give one of"));
        let inverted = Latency {
            uniform: Some([ms(50), ms(10)]),
            ..Latency::default()
        };
        assert_eq!(inverted.model().unwrap_err().field, "uniform");
    }

    #[test]
    fn scaling_time_scales_every_delay_but_not_sigma() {
        let mut l = Latency {
            lognormal: Some(LogNormal {
                median: ms(40),
                sigma: 0.5,
            }),
            ..Latency::default()
        };
        l.scale_time(0.1);
        assert_eq!(
            l.lognormal,
            Some(LogNormal {
                median: ms(4),
                sigma: 0.5
            })
        );
        let mut f = Latency::fixed(Duration::from_secs(2));
        f.scale_time(0.1);
        assert_eq!(f.fixed, Some(ms(200)));
    }

    #[test]
    fn histogram_latency_plays_back_its_bins() {
        // 10 calls at 2-4 ms, 80 at 4-10 ms, 10 at 10-100 ms: p10 = 4 ms, p90 = 10 ms, inside bins linearly.
        let model = Latency {
            histogram: Some(vec![(ms(2), 0), (ms(4), 10), (ms(10), 80), (ms(100), 10)]),
            ..Latency::default()
        }
        .model()
        .unwrap();
        let draws = sample(&model);
        assert!(draws
            .iter()
            .all(|d| *d >= Duration::from_millis(2) && *d <= Duration::from_millis(100)));
        assert_percentile(&draws, 0.1, Duration::from_millis(4));
        assert_percentile(&draws, 0.5, Duration::from_millis(7));
        assert_percentile(&draws, 0.9, Duration::from_millis(10));
        assert_percentile(&draws, 0.95, Duration::from_millis(55));
    }

    #[test]
    fn a_histogram_whose_first_bin_counts_calls_serves_them_at_its_edge() {
        let model = Latency {
            histogram: Some(vec![(ms(5), 50), (ms(15), 50)]),
            ..Latency::default()
        }
        .model()
        .unwrap();
        assert_eq!(model.quantile(0.2), Duration::from_millis(5));
        assert_eq!(model.quantile(0.75), Duration::from_millis(10));
    }

    #[test]
    fn a_bad_histogram_is_refused_naming_the_bin() {
        let falling = Latency {
            histogram: Some(vec![(ms(5), 1), (ms(5), 1)]),
            ..Latency::default()
        };
        let e = falling.model().unwrap_err();
        assert_eq!(e.field, "histogram[1]");
        assert!(e.message.contains("must rise"), "{}", e.message);
        let empty = Latency {
            histogram: Some(vec![(ms(5), 0)]),
            ..Latency::default()
        };
        assert!(empty.model().unwrap_err().message.contains("counts no call"));
        let mut scaled = Latency {
            histogram: Some(vec![(ms(10), 1), (ms(20), 1)]),
            ..Latency::default()
        };
        scaled.scale_time(0.5);
        assert_eq!(scaled.histogram, Some(vec![(ms(5), 1), (ms(10), 1)]));
    }

    #[test]
    fn normal_quantile_matches_known_values() {
        assert!(standard_normal_quantile(0.5).abs() < 1e-9);
        assert!((standard_normal_quantile(0.99) - 2.326_347_874).abs() < 1e-6);
        assert!((standard_normal_quantile(0.001) + 3.090_232_306).abs() < 1e-6);
    }
}
