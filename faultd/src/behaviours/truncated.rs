//! Truncated response: the healthy answer's head, announcing its whole body, then half of the body and the end: of
//! the connection on HTTP/1.1, of the stream on HTTP/2 (short of its content-length, which the client refuses as
//! malformed). What a proxy or a server that dies mid-write sends.
//!
//! For: checking that a client treats a body shorter than announced as a failure (and counts it in its breaker)
//! instead of handing half a payload on as if whole. Not for: a body that comes slowly (`slow_body`) or bytes that
//! are not HTTP at all (`malformed`).

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CallAction, Fault};

/// Cuts the healthy answer of `share` of the calls halfway through its body, written `truncated: 5%`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Truncated(pub Share);

impl Fault for Truncated {
    const TAKES_A_SHARE: bool = true;

    fn share(&self) -> Share {
        self.0
    }

    fn action(&self) -> CallAction<'_> {
        CallAction::Truncated
    }
}
