//! The wire a TCP route understands: plain bytes (the default), or a protocol whose calls faultd frames so that
//! faults can hit single calls.
//!
//! For: the `protocol` of a route's `tcp:` section and the one dispatch from the proxy's connection to the
//! protocol's own relay. Each protocol lives in a folder of its own beside this file (its reader, its entries,
//! its recording); this file only names them. Not for: byte toxics (`super::toxics`), which act on plain routes.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::toxics::{Ending, Stream};

pub mod redis;

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
}

impl TcpProtocol {
    /// Whether this is the default (plain bytes), left out when written.
    pub fn is_bytes(&self) -> bool {
        *self == TcpProtocol::Bytes
    }
}

/// What a protocol route does with bytes it cannot frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnGarbage {
    /// Forward the connection's bytes untouched from there on (no more faults or counts on it).
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

/// What a protocol's relay needs of the connection it serves: its end signal and the byte counts of its route.
pub(crate) trait Connection: Send + Sync {
    /// Ends the connection `how`, unless it is ending already.
    fn finish(&self, how: Ending);
    /// The connection's end signal (`Open` while it is not ending).
    fn ending(&self) -> tokio::sync::watch::Receiver<Ending>;
    /// Counts `n` bytes forwarded on `stream` in the route's recorder.
    fn bytes(&self, stream: Stream, n: usize);
}

/// A protocol route's state, shared by its connections.
#[derive(Debug, Clone)]
pub enum Wire {
    /// A Redis route.
    Redis(Arc<redis::RedisRoute>),
}

impl Wire {
    /// The state a route of `protocol` keeps; `None` for plain bytes.
    pub fn new(
        protocol: TcpProtocol,
        route: &str,
        seed: u64,
        on_garbage: OnGarbage,
    ) -> Option<Wire> {
        match protocol {
            TcpProtocol::Bytes => None,
            TcpProtocol::Redis => Some(Wire::Redis(Arc::new(redis::RedisRoute::new(
                route, seed, on_garbage,
            )))),
        }
    }

    /// What it does with bytes it cannot frame.
    pub fn on_garbage(&self) -> OnGarbage {
        match self {
            Wire::Redis(r) => r.on_garbage,
        }
    }

    /// The route's TCP recording with the protocol's own beside it.
    pub fn record(&self, mut recording: super::TcpRouteRecording) -> super::TcpRouteRecording {
        match self {
            Wire::Redis(r) => recording.redis = Some(r.recorder.snapshot()),
        }
        recording
    }

    /// The protocol it speaks.
    pub fn protocol(&self) -> TcpProtocol {
        match self {
            Wire::Redis(_) => TcpProtocol::Redis,
        }
    }

    /// Relays one connection in the protocol's way; gives the client's halves back.
    pub(crate) async fn relay(
        &self,
        ctx: Arc<dyn Connection>,
        client: (OwnedReadHalf, OwnedWriteHalf),
        upstream: (OwnedReadHalf, OwnedWriteHalf),
    ) -> Option<(OwnedReadHalf, OwnedWriteHalf)> {
        match self {
            Wire::Redis(route) => {
                redis::relay(
                    route.clone(),
                    ctx,
                    client.0,
                    client.1,
                    upstream.0,
                    upstream.1,
                )
                .await
            }
        }
    }
}
