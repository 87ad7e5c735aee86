//! latency: hold every chunk `latency ± jitter` ms after it was read, as Toxiproxy does per chunk (so a chunk
//! read while an earlier one waits is not delayed twice). For: a slow dependency seen on the wire. Not for: a slow
//! connect (see `connect_delay`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_duration, Attributes, ChunkPlan, ChunkRng, Effect};
use crate::behaviours::Invalid;

/// `{"latency": ms, "jitter": ms}`; each chunk waits `latency` plus a uniform draw in `[-jitter, +jitter]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    /// The added delay, ms.
    #[serde(default)]
    pub latency: i64,
    /// The spread around it, ms.
    #[serde(default)]
    pub jitter: i64,
}

impl Effect for Latency {
    fn shape(&self, plan: &mut ChunkPlan, rng: &mut ChunkRng) {
        let ms = self.latency + rng.symmetric(self.jitter.max(0) as u64);
        plan.delay += Duration::from_millis(ms.max(0) as u64);
    }
}

impl Attributes for Latency {
    const TYPE: &'static str = "latency";
    fn validate(&self) -> Result<(), Invalid> {
        check_duration("latency", self.latency, Duration::from_millis(1))?;
        check_duration("jitter", self.jitter, Duration::from_millis(1))?;
        Ok(())
    }
}
