//! The points `report.html` draws a time series with: at most `MAX_POINTS` per chart whatever the run's length.
//! Past that, each point covers several buckets and is drawn as two, the lowest value it covers then the highest,
//! so a chart of eight hours still shows a single bucket's spike (and a single bucket's dip) at its place.
//!
//! Not for the files' own resolution (`report::rollup` decides that) nor for the figures of the tables, which are
//! read from result.json as it is.

/// The most display points a chart's series has (each drawn as two values once points cover several buckets).
pub const MAX_POINTS: usize = 1_500;

/// How `n` buckets of a series map to display points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Display {
    /// Buckets per point: 1 draws every bucket as it is.
    pub per_point: usize,
    /// Buckets in the series.
    pub n: usize,
}

impl Display {
    /// The mapping for `n` buckets: as few buckets per point as keep the points at most `MAX_POINTS`.
    pub fn new(n: usize) -> Display {
        Display {
            per_point: n.div_ceil(MAX_POINTS).max(1),
            n,
        }
    }

    /// True when points cover several buckets and are drawn as a minimum and a maximum each.
    pub fn thinned(&self) -> bool {
        self.per_point > 1
    }

    /// The x of every drawn value, seconds from the origin: each bucket's start, or per point its start (the
    /// minimum) and the middle of what it covers (the maximum).
    pub fn xs(&self, bucket_s: f64) -> Vec<f64> {
        let round = |v: f64| (v * 1e6).round() / 1e6;
        if !self.thinned() {
            return (0..self.n).map(|i| round(i as f64 * bucket_s)).collect();
        }
        let k = self.per_point;
        (0..self.n.div_ceil(k))
            .flat_map(|j| {
                let covered = k.min(self.n - j * k) as f64;
                let start = (j * k) as f64 * bucket_s;
                [round(start), round(start + covered * bucket_s / 2.0)]
            })
            .collect()
    }

    /// A series of values per bucket as drawn: as it is, or per point the lowest and the highest value it covers
    /// (`None` where it covers none).
    pub fn values<T: Copy + PartialOrd>(&self, v: &[Option<T>]) -> Vec<Option<T>> {
        if !self.thinned() {
            return v.to_vec();
        }
        v.chunks(self.per_point)
            .flat_map(|g| {
                let mut present = g.iter().flatten().copied();
                let first = present.next();
                let (lo, hi) = present.fold((first, first), |(lo, hi), x| {
                    (
                        lo.map(|l| if x < l { x } else { l }),
                        hi.map(|h| if x > h { x } else { h }),
                    )
                });
                [lo, hi]
            })
            .collect()
    }

    /// A series of counts per bucket as drawn (see `values`).
    pub fn counts(&self, v: &[u64]) -> Vec<Option<u64>> {
        let present: Vec<Option<u64>> = v.iter().copied().map(Some).collect();
        self.values(&present)
    }

    /// Timed samples `(t seconds, value)` placed on the drawn points: each in its bucket, or per point the lowest
    /// and the highest sample it covers; the last sample of a bucket wins when points are buckets.
    pub fn samples(&self, points: &[(f64, f64)], bucket_s: f64) -> Vec<Option<f64>> {
        let mut per_bucket = vec![None; self.n];
        let width = if bucket_s > 0.0 { bucket_s } else { 1.0 };
        if self.thinned() {
            // Several samples may fall in one bucket: keep them all for the point's minimum and maximum.
            let k = self.per_point;
            let mut out = vec![None::<(f64, f64)>; self.n.div_ceil(k)];
            for &(t, v) in points {
                let j = ((t / width + 1e-9).floor().max(0.0) as usize)
                    .min(self.n.saturating_sub(1))
                    / k;
                if let Some(slot) = out.get_mut(j) {
                    *slot = Some(slot.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
                }
            }
            return out
                .into_iter()
                .flat_map(|p| [p.map(|(lo, _)| lo), p.map(|(_, hi)| hi)])
                .collect();
        }
        for &(t, v) in points {
            let i = ((t / width + 1e-9).floor().max(0.0) as usize).min(self.n.saturating_sub(1));
            if let Some(slot) = per_bucket.get_mut(i) {
                *slot = Some(v);
            }
        }
        per_bucket
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_series_is_drawn_bucket_by_bucket() {
        let d = Display::new(3);
        assert!(!d.thinned());
        assert_eq!(d.xs(0.1), vec![0.0, 0.1, 0.2]);
        assert_eq!(d.counts(&[1, 5, 2]), vec![Some(1), Some(5), Some(2)]);
    }

    #[test]
    fn a_long_series_keeps_each_points_lowest_and_highest_value() {
        let n = MAX_POINTS * 4;
        let d = Display::new(n);
        assert_eq!(d.per_point, 4);
        let mut v = vec![10u64; n];
        v[4 * 7 + 2] = 900;
        v[4 * 9 + 1] = 0;
        let drawn = d.counts(&v);
        assert_eq!(drawn.len(), 2 * MAX_POINTS);
        assert_eq!(
            drawn[2 * 7 + 1],
            Some(900),
            "the spike is its point's maximum"
        );
        assert_eq!(drawn[2 * 7], Some(10));
        assert_eq!(drawn[2 * 9], Some(0), "the dip is its point's minimum");
        assert_eq!(d.xs(0.1).len(), drawn.len());
    }

    #[test]
    fn samples_land_on_the_point_that_covers_them() {
        let d = Display::new(MAX_POINTS * 2);
        let drawn = d.samples(&[(0.05, 3.0), (0.15, 8.0), (0.25, 1.0)], 0.1);
        assert_eq!(&drawn[..4], &[Some(3.0), Some(8.0), Some(1.0), Some(1.0)]);
    }
}
