//! gRPC errors: a share of gRPC calls answered with a status, its message and trailing metadata (such as a
//! retry pushback), in the trailers as gRPC servers send them.
//!
//! For: the `grpc_errors` list of a behaviour, each entry with its share. A plain HTTP call taken by one gets
//! the HTTP status gRPC gateways map the code to (UNAVAILABLE -> 503, RESOURCE_EXHAUSTED -> 429, ...).
//! Not for: HTTP statuses on gRPC calls (`errors` does that, and gRPC clients map them themselves).

use std::collections::BTreeMap;

use faultline_units::{GrpcCode, Share};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_headers, CallAction, Fault, Invalid};

/// Answers `share` of the calls with gRPC status `code`, e.g.
/// `{share: 30%, code: UNAVAILABLE, message: overloaded, metadata: {grpc-retry-pushback-ms: "500"}}`, or a stream
/// that breaks after 3 messages: `{share: 10%, code: UNAVAILABLE, after_messages: 3}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcError {
    /// The share of calls answered with this status, e.g. `30%`.
    pub share: Share,
    /// The status: a name (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL, INVALID_ARGUMENT, ...)
    /// or a number.
    pub code: GrpcCode,
    /// The status message (`grpc-message`); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Trailing metadata sent with the status, e.g. `{grpc-retry-pushback-ms: "500"}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// For a streaming method: the status comes after this many of the healthy answer's messages (sent at its
    /// `stream.interval`), as a stream that breaks partway; 0 (the default) answers with the status alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub after_messages: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Fault for GrpcError {
    const TAKES_A_SHARE: bool = true;

    fn share(&self) -> Share {
        self.share
    }

    fn action(&self) -> CallAction<'_> {
        CallAction::GrpcError(self)
    }

    /// Refuses OK (the healthy answer is `grpc_response`) and metadata that would overwrite the status.
    fn validate(&self) -> Result<(), Invalid> {
        if self.code == GrpcCode::OK {
            return Err(Invalid::new(
                "code",
                "OK is not an error; the healthy answer is `grpc_response`",
            ));
        }
        check_headers(&self.metadata).map_err(|e| e.at("metadata"))?;
        for name in self.metadata.keys() {
            if name.eq_ignore_ascii_case("grpc-status") || name.eq_ignore_ascii_case("grpc-message")
            {
                return Err(Invalid::new(
                    format!("metadata.{name}"),
                    "is set from `code` and `message`",
                ));
            }
        }
        Ok(())
    }
}
