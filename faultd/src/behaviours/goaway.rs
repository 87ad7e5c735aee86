//! GOAWAY: an HTTP/2 connection that stops taking streams after it has carried N of them, gracefully (the
//! streams in flight finish, later ones go to another connection) or abruptly (the connection closes at once and
//! the streams in flight are lost).
//!
//! For: connection draining and proxies that recycle connections, which a client must survive by reconnecting.
//! A count rule per connection, not a share of calls; the route of the N-th stream decides. HTTP/1.1 calls are
//! not affected. Not for: single streams (that is `rst_stream`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Fault, Invalid};
use super::H2Code;

/// Sends GOAWAY when a connection's `after`-th stream arrives, e.g. `goaway: {after: 100, mode: abrupt}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GoAway {
    /// The stream (counted from the connection's first) whose arrival triggers the GOAWAY; a count, so
    /// `--time-scale` leaves it alone.
    pub after: u64,
    /// `graceful` (the default): the N-th stream and those in flight finish, no new stream is taken. `abrupt`:
    /// the connection closes right away after a GOAWAY naming every stream as possibly processed, so the N-th
    /// stream and every other in flight fail.
    #[serde(default)]
    pub mode: GoAwayMode,
    /// The error code of an abrupt GOAWAY (NO_ERROR when absent); a graceful one always says NO_ERROR.
    #[serde(default = "no_error")]
    pub code: H2Code,
}

fn no_error() -> H2Code {
    H2Code::NO_ERROR
}

/// How a GOAWAY ends the connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoAwayMode {
    /// In-flight streams finish; the connection closes when they have.
    #[default]
    Graceful,
    /// The connection closes now; in-flight streams are lost.
    Abrupt,
}

impl Fault for GoAway {
    /// Refuses `after: 0` (there is no zeroth stream).
    fn validate(&self) -> Result<(), Invalid> {
        if self.after == 0 {
            return Err(Invalid::new("after", "count streams from 1"));
        }
        Ok(())
    }
}
