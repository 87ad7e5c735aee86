//! RST_STREAM: a share of HTTP/2 calls whose stream is reset with an error code, the other streams of the
//! connection untouched.
//!
//! For: the stream-level failure of HTTP/2 and gRPC (REFUSED_STREAM, which a client may retry; CANCEL;
//! ENHANCE_YOUR_CALM; ...). On HTTP/1.1, where a call has no stream of its own, the connection is reset instead.
//! Not for: the whole connection (that is `reset` or `goaway`).

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CallAction, Fault};
use super::H2Code;

/// Resets `share` of the streams with `code`, written `rst_stream: {share: 5%, code: REFUSED_STREAM}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RstStream {
    /// The share of calls reset, e.g. `5%`.
    pub share: Share,
    /// The HTTP/2 error code, by name (REFUSED_STREAM, CANCEL, INTERNAL_ERROR, ENHANCE_YOUR_CALM, ...) or number;
    /// INTERNAL_ERROR when absent.
    #[serde(default = "internal_error")]
    pub code: H2Code,
}

fn internal_error() -> H2Code {
    H2Code::INTERNAL_ERROR
}

impl Fault for RstStream {
    const TAKES_A_SHARE: bool = true;

    fn share(&self) -> Share {
        self.share
    }

    fn action(&self) -> CallAction<'_> {
        CallAction::RstStream(self.code)
    }
}
