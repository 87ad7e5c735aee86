//! Fail first: the first N calls of a phase fail with a status, the rest follow the behaviour's other rules.
//!
//! For: count rules ("the first 20 calls after the restart fail"), which shares cannot express. The count starts
//! again each time a phase sets this behaviour. Not for: a steady error share (that is `errors`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_status, CallAction, Fault, Invalid};

/// The first `calls` calls of the phase are answered with `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailFirst {
    /// How many calls fail; a count, so `--time-scale` leaves it alone.
    pub calls: u64,
    /// The status they fail with, e.g. 503.
    pub status: u16,
}

impl Fault for FailFirst {
    fn first_calls(&self) -> Option<(u64, CallAction<'_>)> {
        Some((self.calls, CallAction::FailFirst(self.status)))
    }

    /// Checks the status.
    fn validate(&self) -> Result<(), Invalid> {
        check_status(self.status).map_err(|e| e.at("status"))
    }
}
