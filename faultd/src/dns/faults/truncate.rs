//! truncate: the share of queries over UDP answered with the TC bit set and no records, so the caller must ask
//! again over TCP; over TCP the same query gets the whole answer.
//!
//! For: a client or resolver that cannot fall back to TCP, or whose TCP path is slower or blocked. Not for:
//! answers too large for the caller's UDP size, which faultd truncates by itself as any server does.

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DnsAction, DnsFault};

/// Written `truncate: 100%`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Truncate(pub Share);

impl DnsFault for Truncate {
    fn share(&self) -> Share {
        self.0
    }

    fn action(&self) -> DnsAction {
        DnsAction::Truncate
    }
}
