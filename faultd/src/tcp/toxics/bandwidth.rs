//! bandwidth: deliver at most `rate` KB/s (1 KB = 1,000 bytes, as Toxiproxy counts). For: a saturated link or a
//! large result set crawling back. Not for: a fixed delay per chunk (see `latency`).

use serde::{Deserialize, Serialize};

use super::{check_count, Attributes, ChunkPlan, ChunkRng, Effect};
use crate::behaviours::Invalid;

/// `{"rate": KB/s}`; 0 leaves the flow unlimited, as in Toxiproxy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bandwidth {
    /// The rate, KB/s.
    #[serde(default)]
    pub rate: i64,
}

impl Effect for Bandwidth {
    fn shape(&self, plan: &mut ChunkPlan, _rng: &mut ChunkRng) {
        if self.rate > 0 {
            let bps = self.rate as f64 * 1000.0;
            plan.bytes_per_second = Some(plan.bytes_per_second.map_or(bps, |b| b.min(bps)));
        }
    }
}

impl Attributes for Bandwidth {
    const TYPE: &'static str = "bandwidth";
    fn validate(&self) -> Result<(), Invalid> {
        check_count("rate", self.rate)?;
        Ok(())
    }
}
