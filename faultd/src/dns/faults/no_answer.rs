//! no_answer: the share of queries for a name that get no answer at all, so the caller's resolver times out
//! (and retries, or tries its next server).
//!
//! For: the resolver that is down or unreachable, the slowest way resolution fails. Not for: an answer that comes
//! late (`delay`) or one that says no (`servfail`, `nxdomain`, `refused`).

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DnsAction, DnsFault};

/// Written `no_answer: 100%`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct NoAnswer(pub Share);

impl DnsFault for NoAnswer {
    fn share(&self) -> Share {
        self.0
    }

    fn action(&self) -> DnsAction {
        DnsAction::Drop
    }
}
