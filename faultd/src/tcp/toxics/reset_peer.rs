//! reset_peer: reset the client's connection `timeout` ms after the toxic took it (at once if 0): SO_LINGER 0,
//! then close, so the client reads ECONNRESET. For: "connection reset by peer" from a dependency that crashed or
//! a middlebox that gave up. Not for: an orderly close (see `limit_data`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_duration, Attributes, Effect, Ending, Hold};
use crate::behaviours::Invalid;

/// `{"timeout": ms}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetPeer {
    /// Reset this long after the toxic took the connection, ms.
    #[serde(default)]
    pub timeout: i64,
}

impl Effect for ResetPeer {
    fn hold(&self) -> Option<Hold> {
        Some(Hold {
            blocks: false,
            ends: Some((
                Duration::from_millis(self.timeout.max(0) as u64),
                Ending::Reset,
            )),
        })
    }
}

impl Attributes for ResetPeer {
    const TYPE: &'static str = "reset_peer";
    fn validate(&self) -> Result<(), Invalid> {
        check_duration("timeout", self.timeout, Duration::from_millis(1)).map(|_| ())
    }
}
