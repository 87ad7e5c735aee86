//! Malformed response: bytes that are not HTTP, then a close.
//!
//! For: checking that a client treats a protocol error as a failure (and counts it in its breaker) instead of
//! crashing or hanging. Not for: valid HTTP with a bad body (use an error with a body for that).

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CallAction, Fault};

/// What a malformed call receives before the connection closes: no valid status line, a NUL byte.
pub const MALFORMED_BYTES: &[u8] =
    b"HTTP/1.1 2OO N0T-HTTP\r\n\x00\x01 this is not a response\r\n\r\n";

/// Answers `share` of the calls with bytes that are not HTTP, written `malformed: 5%`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Malformed(pub Share);

impl Fault for Malformed {
    const TAKES_A_SHARE: bool = true;

    fn share(&self) -> Share {
        self.0
    }

    fn action(&self) -> CallAction<'_> {
        CallAction::Malformed
    }
}
