//! Hang: accept the call and never answer until the caller gives up.
//!
//! For: the failure that fills a caller's pool: every hung call holds one of its connections until its own
//! timeout fires. faultd records the call as a hang when the caller closes the connection.
//! Not for: slow answers (that is `latency`), or refusing connections.

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CallAction, Fault};

/// Holds `share` of the calls open forever, written `hang: 20%`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Hang(pub Share);

impl Fault for Hang {
    const TAKES_A_SHARE: bool = true;

    fn share(&self) -> Share {
        self.0
    }

    fn action(&self) -> CallAction<'_> {
        CallAction::Hang
    }
}
