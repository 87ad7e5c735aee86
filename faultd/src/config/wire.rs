//! A TCP route's `tcp:` section: where it listens and forwards to, what its connections carry (`protocol`), what
//! a protocol route does with bytes that are not its protocol and, for PostgreSQL, what faultd answers to an
//! encryption request. Not for: carrying any of it out (`crate::tcp::protocol`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a TCP route's connections carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TcpProtocol {
    /// Bytes, forwarded through the route's toxics.
    #[default]
    Bytes,
    /// Redis (RESP2 and RESP3): commands and replies are framed and paired, and the route's `redis` entries act
    /// on single commands.
    Redis,
    /// PostgreSQL's v3 protocol, faulted per statement by `postgres` entries.
    Postgres,
}

impl TcpProtocol {
    /// Whether this is the default (plain bytes), left out when written.
    pub fn is_bytes(&self) -> bool {
        *self == TcpProtocol::Bytes
    }
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

impl Ssl {
    /// Whether this is the default (`refuse`), left out when written.
    pub fn is_refuse(&self) -> bool {
        *self == Ssl::Refuse
    }
}

/// What a protocol route does when a connection's bytes stop being its protocol (Redis: not RESP; PostgreSQL: an
/// unknown message type, a length out of bounds, a startup packet it does not know).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnGarbage {
    /// Pass the rest of the connection through untouched, in both directions (no more faults or counts on it).
    #[default]
    Pass,
    /// Close the connection.
    Close,
}

impl OnGarbage {
    /// Whether this is the default (`pass`), left out when written.
    pub fn is_pass(&self) -> bool {
        *self == OnGarbage::Pass
    }
}

/// Where a TCP route listens and where it forwards to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TcpEndpoint {
    /// `host:port` on loopback; port 0 picks a free one (the runner's `{faultd.routes.NAME.port}`). Default
    /// `127.0.0.1:0`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub listen: String,
    /// `host:port` of the real dependency; loopback unless its host is in faultd's `allow_hosts`.
    pub upstream: String,
    /// What the connections carry: `bytes` (the default: toxics act on bytes), `redis` (commands and replies are
    /// framed, and the route's `redis` entries act on single commands) or `postgres` (PostgreSQL's v3 protocol,
    /// faulted per statement by the route's `postgres` entries).
    #[serde(default, skip_serializing_if = "TcpProtocol::is_bytes")]
    pub protocol: TcpProtocol,
    /// `protocol: postgres` only: what faultd answers to an SSLRequest: `refuse` (the default: `N`, the client
    /// goes on in plain text) or `pass` (the request goes to the server and faultd reads no further).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl: Option<Ssl>,
    /// What a `redis` or `postgres` route does with bytes that are not its protocol: `pass` (the default)
    /// forwards the connection untouched from there on, `close` closes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_garbage: Option<OnGarbage>,
}
