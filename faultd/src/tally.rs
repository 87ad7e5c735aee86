//! The live counts of one matched entry: how many calls it matched and how many of those it took.
//!
//! For: the one value both sides share, the entry that counts its calls on the hot path (`crate::behaviours`,
//! two relaxed increments) and the recorder that reports them per route (`crate::recorder`), so neither reaches
//! into the other. Not for: the recording's form of the counts (`recorder::MatchCounts`) or deciding anything.

use std::sync::atomic::{AtomicU64, Ordering};

/// Calls a matched entry matched, and of those the calls it took.
#[derive(Debug, Default)]
pub struct EntryTally {
    matched: AtomicU64,
    taken: AtomicU64,
}

impl EntryTally {
    /// Counts a call that met the entry's conditions; `taken` when the entry's trigger took it.
    pub fn count(&self, taken: bool) {
        self.matched.fetch_add(1, Ordering::Relaxed);
        if taken {
            self.taken.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The calls matched and taken so far.
    pub fn read(&self) -> (u64, u64) {
        (
            self.matched.load(Ordering::Relaxed),
            self.taken.load(Ordering::Relaxed),
        )
    }
}
