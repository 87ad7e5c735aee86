//! A phase's counts and outcome histograms while the run goes on, in memory that does not grow with the number of
//! phases.
//!
//! A class's histograms are four HDR histograms that grow to the slowest latency seen: some 800 kB for a class
//! with seconds-long timeouts, so a soak that cycles through dozens of phases would hold tens of megabytes that no
//! one reads until the end. Only the phases written to last stay decoded ([`LIVE`] of them: the current one and
//! the one whose requests are still ending across its boundary); every other phase keeps its histograms as
//! V2+DEFLATE bytes, which are exact, and is decoded again if a late request of it ends.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::outcome::{ClassCounts, Outcome};
use crate::recording::{decode_histogram, encode_histogram, ClassHistograms, LatencyHistogram};

/// How many phases keep their histograms decoded at once.
pub(super) const LIVE: usize = 2;

/// A class's four histograms as V2+DEFLATE bytes: corrected, uncorrected, send lag, late.
type PackedClass = [Vec<u8>; 4];

enum Classes {
    /// Indexed by `Outcome::index`; `Dropped` never has histograms.
    Live([Option<Box<ClassHistograms>>; 6]),
    Packed([Option<Box<PackedClass>>; 6]),
}

pub(super) struct PhaseState {
    pub(super) name: String,
    pub(super) start: Duration,
    pub(super) counts: ClassCounts,
    classes: Classes,
}

fn pack(h: &ClassHistograms) -> PackedClass {
    [&h.corrected, &h.uncorrected, &h.send_lag, &h.late].map(|h| encode_histogram(&h.0))
}

fn unpack(bytes: &PackedClass) -> ClassHistograms {
    // The bytes were encoded here from a valid histogram, so they decode; were that ever not so, an empty
    // histogram loses that class's latencies of the phase but not the run.
    let [corrected, uncorrected, send_lag, late] = bytes
        .each_ref()
        .map(|b| LatencyHistogram(decode_histogram(b).unwrap_or_else(|_| empty())));
    ClassHistograms {
        corrected,
        uncorrected,
        send_lag,
        late,
    }
}

fn empty() -> Histogram<u64> {
    crate::recording::new_histogram()
}

impl PhaseState {
    pub(super) fn new(name: String, start: Duration) -> PhaseState {
        PhaseState {
            name,
            start,
            counts: ClassCounts::default(),
            classes: Classes::Live(Default::default()),
        }
    }

    #[cfg(test)]
    pub(super) fn is_live(&self) -> bool {
        matches!(self.classes, Classes::Live(_))
    }

    /// The histograms of `outcome` (not `Dropped`) to record into; the phase must be live.
    pub(super) fn class_mut(&mut self, outcome: Outcome) -> Option<&mut ClassHistograms> {
        match &mut self.classes {
            Classes::Live(classes) => Some(
                classes
                    .get_mut(outcome.index())?
                    .get_or_insert_with(Default::default),
            ),
            Classes::Packed(_) => None,
        }
    }

    /// Keeps the histograms as bytes until the phase is written to again.
    pub(super) fn pack(&mut self) {
        if let Classes::Live(classes) = &self.classes {
            self.classes = Classes::Packed(
                classes
                    .each_ref()
                    .map(|c| c.as_deref().map(|h| Box::new(pack(h)))),
            );
        }
    }

    /// Decodes the histograms to record into them.
    pub(super) fn unpack(&mut self) {
        if let Classes::Packed(classes) = &self.classes {
            self.classes = Classes::Live(
                classes
                    .each_ref()
                    .map(|c| c.as_deref().map(|b| Box::new(unpack(b)))),
            );
        }
    }

    /// The histograms per class that were recorded, decoded.
    pub(super) fn histograms(&self) -> BTreeMap<Outcome, ClassHistograms> {
        Outcome::ALL
            .iter()
            .filter_map(|&o| {
                let h = match &self.classes {
                    Classes::Live(classes) => classes.get(o.index())?.as_deref()?.clone(),
                    Classes::Packed(classes) => unpack(classes.get(o.index())?.as_deref()?),
                };
                Some((o, h))
            })
            .collect()
    }
}

/// The phases, with at most [`LIVE`] of them decoded: the ones written to last.
pub(super) struct Phases {
    pub(super) all: Vec<PhaseState>,
    /// The decoded phases' indices, the one written to last at the back.
    live: Vec<usize>,
}

impl Phases {
    pub(super) fn new(all: Vec<PhaseState>) -> Phases {
        let mut phases = Phases {
            all,
            live: Vec::with_capacity(LIVE + 1),
        };
        for i in 0..phases.all.len() {
            if i < LIVE {
                phases.live.push(i);
            } else {
                phases.all[i].pack();
            }
        }
        phases
    }

    /// The histograms of `outcome` in phase `index`, decoding it (and packing the phase written to longest ago)
    /// if it is not live.
    pub(super) fn class_mut(
        &mut self,
        index: usize,
        outcome: Outcome,
    ) -> Option<&mut ClassHistograms> {
        if outcome == Outcome::Dropped || index >= self.all.len() {
            return None;
        }
        if self.live.last() != Some(&index) {
            self.live.retain(|&i| i != index);
            self.live.push(index);
            if self.live.len() > LIVE {
                let oldest = self.live.remove(0);
                self.all[oldest].pack();
            }
            self.all[index].unpack();
        }
        self.all[index].class_mut(outcome)
    }
}
