//! limit_data: close the connection once `bytes` bytes have gone this way. For: a dependency that drops the
//! connection mid-answer, leaving the client with a truncated reply. Not for: a reset (see `reset_peer`).

use serde::{Deserialize, Serialize};

use super::{check_count, Attributes, ChunkPlan, ChunkRng, Effect};
use crate::behaviours::Invalid;

/// `{"bytes": n}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitData {
    /// How many bytes pass before the close.
    #[serde(default)]
    pub bytes: i64,
}

impl Effect for LimitData {
    fn shape(&self, plan: &mut ChunkPlan, _rng: &mut ChunkRng) {
        let n = self.bytes.max(0) as u64;
        plan.limit = Some(plan.limit.map_or(n, |l| l.min(n)));
    }
}

impl Attributes for LimitData {
    const TYPE: &'static str = "limit_data";
    fn validate(&self) -> Result<(), Invalid> {
        check_count("bytes", self.bytes).map(|_| ())
    }
}
