//! servfail: the share of queries for a name answered SERVFAIL, as from an overloaded or broken upstream resolver.
//!
//! For: a resolution that fails at once with an answer the caller can read. Not for: a resolver that does not
//! answer at all (`no_answer`).

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DnsAction, DnsFault, Rcode};

/// Written `servfail: 30%`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Servfail(pub Share);

impl DnsFault for Servfail {
    fn share(&self) -> Share {
        self.0
    }

    fn action(&self) -> DnsAction {
        DnsAction::Rcode(Rcode::ServFail)
    }
}
