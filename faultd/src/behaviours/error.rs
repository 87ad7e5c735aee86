//! Error responses: a share of calls answered with a status, an optional body and headers (e.g. `Retry-After`).
//!
//! For: the "errors" list of a behaviour. Several kinds may share a route, each with its own share.
//! Not for: count-based failures ("the first N calls fail"), which are `fail_first`.

use std::collections::BTreeMap;

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_headers, check_status, CallAction, Fault, Invalid};

/// Answers `share` of the calls with `status`, `body` and `headers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorResponse {
    /// The share of calls answered with this error, e.g. `30%`.
    pub share: Share,
    /// The HTTP status, e.g. 503.
    pub status: u16,
    /// The response body; empty when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Response headers, e.g. `{retry-after: "5"}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

impl Fault for ErrorResponse {
    const TAKES_A_SHARE: bool = true;

    fn share(&self) -> Share {
        self.share
    }

    fn action(&self) -> CallAction<'_> {
        CallAction::Error(self)
    }

    /// Checks the status and the header names and values.
    fn validate(&self) -> Result<(), Invalid> {
        check_status(self.status).map_err(|e| e.at("status"))?;
        check_headers(&self.headers).map_err(|e| e.at("headers"))
    }
}
