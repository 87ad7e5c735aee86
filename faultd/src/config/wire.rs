//! What a TCP route's connections carry (`tcp: { protocol }`) and, for PostgreSQL, what faultd answers to an
//! encryption request and does with bytes that are not the protocol. Not for: carrying any of it out
//! (`crate::tcp::protocol`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a TCP route's connections carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TcpProtocol {
    /// Bytes, faulted by toxics.
    #[default]
    Bytes,
    /// Redis's RESP.
    Redis,
    /// PostgreSQL's v3 protocol, faulted per statement by `postgres` entries.
    Postgres,
}

/// What faultd answers to a client's SSLRequest (and GSSENCRequest).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Ssl {
    /// `N`: the client goes on in plain text (or gives up, with `sslmode=require`), and faultd reads its
    /// statements.
    #[default]
    Refuse,
    /// The request goes to the server untouched and faultd stops reading: the connection passes byte for byte
    /// (encrypted, if the server agrees), with no statement faults.
    Pass,
}

/// What faultd does when a connection's bytes stop being PostgreSQL v3 (an unknown message type, a length out
/// of bounds, a startup packet it does not know).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnGarbage {
    /// Pass the rest of the connection through untouched, in both directions.
    #[default]
    Pass,
    /// Close the connection.
    Close,
}
