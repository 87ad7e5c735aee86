//! Empty response: close the connection cleanly (FIN) without sending a byte, what curl calls
//! "Empty reply from server".
//!
//! For: proxies and servers that die mid-request. Not for: an RST (that is `reset`).

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CallAction, Fault};

/// Closes the connection of `share` of the calls with no response, written `empty: 5%`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Empty(pub Share);

impl Fault for Empty {
    const TAKES_A_SHARE: bool = true;

    fn share(&self) -> Share {
        self.0
    }

    fn action(&self) -> CallAction<'_> {
        CallAction::Empty
    }
}
