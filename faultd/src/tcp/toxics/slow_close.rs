//! slow_close: when the sender of this direction has finished, hold the close `delay` ms before passing it on.
//! For: a dependency that lingers on close, so a pool that waits for the FIN is seen to wait. Not for: stopping
//! data (see `timeout`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_duration, Attributes, Effect};
use crate::behaviours::Invalid;

/// `{"delay": ms}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowClose {
    /// How long to hold the close, ms.
    #[serde(default)]
    pub delay: i64,
}

impl Effect for SlowClose {
    fn close_delay(&self) -> Duration {
        Duration::from_millis(self.delay.max(0) as u64)
    }
}

impl Attributes for SlowClose {
    const TYPE: &'static str = "slow_close";
    fn validate(&self) -> Result<(), Invalid> {
        check_duration("delay", self.delay, Duration::from_millis(1)).map(|_| ())
    }
}
