//! stall (a faultd addition to Toxiproxy's list): accept the connection and never connect upstream, so the
//! client's connect succeeds and its first query waits forever. For: a dependency whose accept queue is alive
//! but whose workers are all stuck, the case a pool's checkout timeout exists for. Not for: refusing connects
//! (disable the proxy).

use serde::{Deserialize, Serialize};

use super::{Attributes, Connect, Effect};
use crate::behaviours::Invalid;

/// No attributes: `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stall {}

impl Effect for Stall {
    fn before_connect(&self) -> Connect {
        Connect::Never
    }
}

impl Attributes for Stall {
    const TYPE: &'static str = "stall";
    fn validate(&self) -> Result<(), Invalid> {
        Ok(())
    }
}
