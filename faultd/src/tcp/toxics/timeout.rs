//! timeout: stop forwarding this direction, and close the connection `timeout` ms later (never, if 0). The
//! bytes wait rather than vanish: removing the toxic lets them through, as in Toxiproxy. For: a dependency that
//! stops answering mid-connection, the case client timeouts exist for. Not for: refusing connections (disable
//! the proxy: `enabled: false`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_duration, Attributes, Effect, Ending, Hold};
use crate::behaviours::Invalid;

/// `{"timeout": ms}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeout {
    /// Close this long after the toxic took the connection, ms; 0 never closes.
    #[serde(default)]
    pub timeout: i64,
}

impl Effect for Timeout {
    fn hold(&self) -> Option<Hold> {
        Some(Hold {
            blocks: true,
            ends: (self.timeout > 0)
                .then(|| (Duration::from_millis(self.timeout as u64), Ending::Close)),
        })
    }
}

impl Attributes for Timeout {
    const TYPE: &'static str = "timeout";
    fn validate(&self) -> Result<(), Invalid> {
        check_duration("timeout", self.timeout, Duration::from_millis(1)).map(|_| ())
    }
}
