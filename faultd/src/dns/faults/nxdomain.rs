//! nxdomain: the share of queries for a name answered NXDOMAIN (the name does not exist), as after a bad deploy removed its record.
//!
//! For: a resolution that fails at once with an answer the caller can read. Not for: a resolver that does not
//! answer at all (`no_answer`).

use faultline_units::Share;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DnsAction, DnsFault, Rcode};

/// Written `nxdomain: 30%`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Nxdomain(pub Share);

impl DnsFault for Nxdomain {
    fn share(&self) -> Share {
        self.0
    }

    fn action(&self) -> DnsAction {
        DnsAction::Rcode(Rcode::NxDomain)
    }
}
