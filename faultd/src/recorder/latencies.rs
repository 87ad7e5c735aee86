//! A route's served latency and faultd's lateness per phase, in memory that does not grow with the number of
//! phases.
//!
//! An HDR histogram grows to the slowest latency it holds: some 200 kB for calls of seconds, so a soak that cycles
//! through dozens of phases would hold megabytes per route that no one reads until the end. Only the phases
//! written to last stay decoded ([`LIVE`] of them: the current one and the one whose calls are still ending
//! across its boundary); the others keep their histograms as V2+DEFLATE bytes, which are exact, and are decoded
//! again if a late call of theirs ends.

use std::collections::BTreeMap;
use std::sync::Arc;

use hdrhistogram::Histogram;

use super::new_histogram;

/// How many phases keep their histograms decoded at once.
pub(super) const LIVE: usize = 2;

/// A phase's served latency and faultd's own lateness (which only calls with a due instant have).
pub(super) struct PhaseHistograms {
    pub(super) latency: Histogram<u64>,
    pub(super) late: Option<Histogram<u64>>,
}

enum Kept {
    Live(PhaseHistograms),
    Packed {
        latency: Vec<u8>,
        late: Option<Vec<u8>>,
    },
}

fn encode(h: &Histogram<u64>) -> Vec<u8> {
    // Encoding into memory fails only for a count past the format's range, which no run reaches.
    faultline_hdr::encode(h).unwrap_or_default()
}

fn decode(bytes: &[u8]) -> Histogram<u64> {
    // The bytes were encoded here from a valid histogram, so they decode.
    faultline_hdr::decode(bytes).unwrap_or_else(|_| new_histogram())
}

impl Kept {
    fn pack(&mut self) {
        if let Kept::Live(h) = self {
            *self = Kept::Packed {
                latency: encode(&h.latency),
                late: h.late.as_ref().map(encode),
            };
        }
    }

    fn unpack(&mut self) -> &mut PhaseHistograms {
        if let Kept::Packed { latency, late } = self {
            *self = Kept::Live(PhaseHistograms {
                latency: decode(latency),
                late: late.as_deref().map(decode),
            });
        }
        match self {
            Kept::Live(h) => h,
            Kept::Packed { .. } => unreachable!("unpacked just above"),
        }
    }

    fn decoded(&self) -> (Histogram<u64>, Option<Histogram<u64>>) {
        match self {
            Kept::Live(h) => (h.latency.clone(), h.late.clone()),
            Kept::Packed { latency, late } => (decode(latency), late.as_deref().map(decode)),
        }
    }
}

/// Per phase name, with at most [`LIVE`] phases decoded: the ones written to last.
#[derive(Default)]
pub(super) struct PhaseLatencies {
    /// In the order the phases were first written to: a run has a few dozen at most.
    phases: Vec<(Arc<str>, Kept)>,
    /// The decoded phases' indices, the one written to last at the back.
    live: Vec<usize>,
}

/// The served-latency and lateness histograms per phase name.
pub(super) type Decoded = (
    BTreeMap<String, Histogram<u64>>,
    BTreeMap<String, Histogram<u64>>,
);

fn same(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

impl PhaseLatencies {
    /// `phase`'s histograms to record into. Every call but a phase's first few finds it written to last, by
    /// pointer; another is decoded (and the phase written to longest ago packed).
    pub(super) fn get_mut(&mut self, phase: &Arc<str>) -> &mut PhaseHistograms {
        let i = match self.live.last() {
            Some(&i) if same(&self.phases[i].0, phase) => i,
            _ => self.switch_to(phase),
        };
        self.phases[i].1.unpack()
    }

    /// Makes `phase` (created if new) the one written to last; its index.
    fn switch_to(&mut self, phase: &Arc<str>) -> usize {
        let i = match self.phases.iter().position(|(p, _)| same(p, phase)) {
            Some(i) => i,
            None => {
                let fresh = Kept::Live(PhaseHistograms {
                    latency: new_histogram(),
                    late: None,
                });
                self.phases.push((phase.clone(), fresh));
                self.phases.len() - 1
            }
        };
        self.live.retain(|&l| l != i);
        self.live.push(i);
        if self.live.len() > LIVE {
            let oldest = self.live.remove(0);
            self.phases[oldest].1.pack();
        }
        i
    }

    /// Every phase's histograms, decoded.
    pub(super) fn decoded(&self) -> Decoded {
        let (mut latency, mut late) = (BTreeMap::new(), BTreeMap::new());
        for (phase, kept) in &self.phases {
            let (l, d) = kept.decoded();
            latency.insert(phase.to_string(), l);
            if let Some(d) = d {
                late.insert(phase.to_string(), d);
            }
        }
        (latency, late)
    }

    /// How many phases are decoded.
    #[cfg(test)]
    pub(super) fn live(&self) -> usize {
        self.phases
            .iter()
            .filter(|(_, k)| matches!(k, Kept::Live(_)))
            .count()
    }
}
