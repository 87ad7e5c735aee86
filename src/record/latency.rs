//! The SUT's corrected latency per bucket, kept small for runs of hours: each bucket's HDR histogram stays in
//! the V2+DEFLATE bytes loadgen sent it in (a few hundred bytes, where a decoded one holds its whole counts array,
//! often over 100 kB), and is decoded only when a verdict reads its range. Every block of [`BLOCK`] buckets also
//! keeps their sum, encoded the same way, so that a percentile over a long span (a phase of an hour) adds one
//! histogram per block and decodes single buckets only at its two ends. Adding histograms bin by bin is exact,
//! so a percentile read here is the one the decoded buckets give.
//!
//! Not for the latency loadgen reports per phase and class (`RunRecord::sut_class_latency`).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;

/// Buckets per block: 10 s at the default 100 ms step.
pub const BLOCK: usize = 100;

/// Per bucket, the SUT's corrected latency (from the intended send time).
#[derive(Debug, Clone, Default)]
pub struct LatencySeries {
    /// Per bucket, its V2+DEFLATE bytes; `None` when nothing completed in it.
    buckets: Vec<Option<Box<[u8]>>>,
    /// Per whole block of buckets, the sum of its histograms, encoded; `None` when all of them are empty.
    blocks: Vec<Option<Box<[u8]>>>,
    /// How many histograms were decoded since the series was made: the work the readers did.
    decoded: Decodes,
}

/// A count of decodes that a shared reader can bump.
#[derive(Debug, Default)]
struct Decodes(AtomicU64);

impl Clone for Decodes {
    fn clone(&self) -> Decodes {
        Decodes(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

impl LatencySeries {
    /// How many buckets the series holds.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Appends a bucket from its V2 or V2+DEFLATE bytes (`None`: nothing completed).
    pub fn push_encoded(&mut self, bytes: Option<Vec<u8>>) {
        let bytes = bytes.filter(|b| !b.is_empty()).map(Vec::into_boxed_slice);
        self.buckets.push(bytes);
        self.close_block();
    }

    /// Appends a bucket's histogram.
    pub fn push(&mut self, h: Histogram<u64>) {
        let bytes = (!h.is_empty())
            .then(|| faultline_hdr::encode(&h).ok())
            .flatten();
        self.push_encoded(bytes);
    }

    /// Keeps the first `n` buckets.
    pub fn truncate(&mut self, n: usize) {
        self.buckets.truncate(n);
        self.blocks.truncate(n / BLOCK);
    }

    /// Pads with empty buckets, or cuts, to `n` buckets.
    pub fn resize(&mut self, n: usize) {
        if n <= self.buckets.len() {
            self.truncate(n);
        }
        while self.buckets.len() < n {
            self.push_encoded(None);
        }
    }

    /// Bucket `i`'s histogram, decoded (an empty one when nothing completed in it); `None` past the end.
    pub fn get(&self, i: usize) -> Option<Histogram<u64>> {
        let bytes = self.buckets.get(i)?;
        Some(self.decode(bytes.as_deref()))
    }

    /// Bucket `i`'s V2+DEFLATE bytes, as they came; `None` past the end or when nothing completed in it.
    pub fn encoded(&self, i: usize) -> Option<&[u8]> {
        self.buckets.get(i)?.as_deref()
    }

    /// The sum of the buckets in `range` (those past the end are left out); `None` when none of them holds a
    /// sample. Whole blocks inside the range are added as their sums.
    pub fn merged(&self, range: Range<usize>) -> Option<Histogram<u64>> {
        let range = range.start..range.end.min(self.buckets.len());
        let mut sum: Option<Histogram<u64>> = None;
        let mut add = |bytes: Option<&[u8]>| {
            if bytes.is_none() {
                return;
            }
            let h = self.decode(bytes);
            match sum.as_mut() {
                Some(s) => {
                    let _ = s.add(&h);
                }
                None => sum = Some(h),
            }
        };
        let mut i = range.start;
        while i < range.end {
            let block = i / BLOCK;
            if i.is_multiple_of(BLOCK) && i + BLOCK <= range.end && block < self.blocks.len() {
                add(self.blocks[block].as_deref());
                i += BLOCK;
            } else {
                add(self.buckets[i].as_deref());
                i += 1;
            }
        }
        sum.filter(|h| !h.is_empty())
    }

    /// How many histograms readers decoded so far.
    pub fn decoded(&self) -> u64 {
        self.decoded.0.load(Ordering::Relaxed)
    }

    /// The bytes the series holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        let slots = (self.buckets.capacity() + self.blocks.capacity())
            * std::mem::size_of::<Option<Box<[u8]>>>();
        let bytes: usize = self
            .buckets
            .iter()
            .chain(&self.blocks)
            .flatten()
            .map(|b| b.len())
            .sum();
        slots + bytes
    }

    fn decode(&self, bytes: Option<&[u8]>) -> Histogram<u64> {
        let Some(bytes) = bytes else {
            return faultline_hdr::new_histogram();
        };
        self.decoded.0.fetch_add(1, Ordering::Relaxed);
        faultline_hdr::decode(bytes).unwrap_or_else(|_| faultline_hdr::new_histogram())
    }

    /// Sums the last block once its last bucket has come.
    fn close_block(&mut self) {
        let n = self.buckets.len();
        if !n.is_multiple_of(BLOCK) || self.blocks.len() >= n / BLOCK {
            return;
        }
        let mut sum: Option<Histogram<u64>> = None;
        for bytes in self.buckets[n - BLOCK..].iter().flatten() {
            let Ok(h) = faultline_hdr::decode(bytes) else {
                continue;
            };
            match sum.as_mut() {
                Some(s) => {
                    let _ = s.add(&h);
                }
                None => sum = Some(h),
            }
        }
        let encoded = sum
            .filter(|h| !h.is_empty())
            .and_then(|h| faultline_hdr::encode(&h).ok())
            .map(Vec::into_boxed_slice);
        self.blocks.push(encoded);
    }
}

impl From<Vec<Histogram<u64>>> for LatencySeries {
    fn from(histograms: Vec<Histogram<u64>>) -> LatencySeries {
        let mut series = LatencySeries::default();
        for h in histograms {
            series.push(h);
        }
        series
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(ms: &[u64]) -> Histogram<u64> {
        let mut h = faultline_hdr::new_histogram();
        for v in ms {
            h.record(v * 1_000_000).unwrap();
        }
        h
    }

    #[test]
    fn a_merged_range_is_the_sum_of_its_buckets_whether_read_by_block_or_by_bucket() {
        let buckets: Vec<Histogram<u64>> = (0..350u64)
            .map(|i| bucket(&[1 + i % 7, 10 + i % 13, if i % 50 == 0 { 900 } else { 2 }]))
            .collect();
        let series = LatencySeries::from(buckets.clone());
        for range in [0..350, 3..347, 100..200, 99..201, 250..250, 340..400] {
            let mut expected: Option<Histogram<u64>> = None;
            for h in buckets.iter().take(range.end.min(350)).skip(range.start) {
                match expected.as_mut() {
                    Some(e) => e.add(h).unwrap(),
                    None => expected = Some(h.clone()),
                }
            }
            assert_eq!(series.merged(range.clone()), expected, "{range:?}");
        }
    }

    #[test]
    fn empty_buckets_cost_a_slot_and_read_as_empty_histograms() {
        let mut series = LatencySeries::default();
        series.push(bucket(&[5]));
        series.resize(4);
        assert_eq!(series.len(), 4);
        assert!(series.get(3).unwrap().is_empty());
        assert_eq!(series.get(4), None);
        assert_eq!(series.merged(1..4), None);
        assert_eq!(series.merged(0..4).unwrap().len(), 1);
        series.truncate(1);
        assert_eq!(series.len(), 1);
    }
}
