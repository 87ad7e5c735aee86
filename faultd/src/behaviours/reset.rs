//! Reset: close the connection without a response, with a TCP RST (SO_LINGER 0) so the caller sees
//! "connection reset by peer" rather than a clean close.
//!
//! For: the fault that clients report as an I/O error, not an HTTP status. Not for: a clean close with no
//! bytes (that is `empty`).

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CallAction, Fault};

/// Resets the connection of `share` of the calls after their delay, written `reset: 5%`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Reset(pub Share);

impl Fault for Reset {
    const TAKES_A_SHARE: bool = true;

    fn share(&self) -> Share {
        self.0
    }

    fn action(&self) -> CallAction<'_> {
        CallAction::Reset
    }
}
