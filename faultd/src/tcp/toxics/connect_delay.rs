//! connect_delay (a faultd addition to Toxiproxy's list): hold the upstream connect `delay` ms, so the first
//! bytes of a new connection come late while open connections are untouched. For: a dependency slow to accept
//! (a full backlog, a TLS-terminating middlebox), which hurts pools that open connections on demand. Not for:
//! slowing every chunk (see `latency`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_duration, Attributes, Connect, Effect};
use crate::behaviours::Invalid;

/// `{"delay": ms}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectDelay {
    /// How long to hold the connect, ms.
    #[serde(default)]
    pub delay: i64,
}

impl Effect for ConnectDelay {
    fn before_connect(&self) -> Connect {
        Connect::After(Duration::from_millis(self.delay.max(0) as u64))
    }
}

impl Attributes for ConnectDelay {
    const TYPE: &'static str = "connect_delay";
    fn validate(&self) -> Result<(), Invalid> {
        check_duration("delay", self.delay, Duration::from_millis(1)).map(|_| ())
    }
}
