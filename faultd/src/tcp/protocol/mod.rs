//! The wire a TCP route understands: plain bytes (the default), or a protocol whose calls faultd frames so that
//! faults can hit single calls.
//!
//! For: the `protocol` of a route's `tcp:` section (its enum lives in `crate::config::wire`, re-exported here)
//! and the one dispatch from the proxy's connection to the
//! protocol's own relay. Each protocol lives in a folder of its own beside this file (its reader, its entries,
//! its recording); this file only names them. Not for: byte toxics (`super::toxics`), which act on plain routes.

use std::sync::Arc;

use super::toxics::{Ending, Stream};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

pub mod postgres;
pub mod redis;

pub use crate::config::{OnGarbage, Ssl, TcpProtocol};

/// What a protocol's relay needs of the connection it serves: its end signal and the byte counts of its route.
pub(crate) trait Connection: Send + Sync {
    /// Ends the connection `how`, unless it is ending already.
    fn finish(&self, how: Ending);
    /// The connection's end signal (`Open` while it is not ending).
    fn ending(&self) -> tokio::sync::watch::Receiver<Ending>;
    /// Counts `n` bytes forwarded on `stream` in the route's recorder.
    fn bytes(&self, stream: Stream, n: usize);
    /// The connection as a protocol that runs whole sockets (PostgreSQL) sees it.
    fn conn(&self) -> Conn<'_>;
}

/// One connection of a route, as a protocol that runs whole sockets sees it.
pub(crate) struct Conn<'a> {
    /// The route's name (its draws' key).
    pub route: &'a str,
    /// The seed of the draws.
    pub seed: u64,
    /// The connection itself: its end signal and its route's byte counts.
    pub link: &'a dyn Connection,
}

impl Conn<'_> {
    /// Ends the connection `how`, unless it has ended already.
    pub fn finish(&self, how: Ending) {
        self.link.finish(how);
    }
}

/// A protocol route's state, shared by its connections.
#[derive(Debug, Clone)]
pub enum Wire {
    /// A Redis route.
    Redis(Arc<redis::RedisRoute>),
    /// A PostgreSQL route.
    Postgres(Arc<postgres::PostgresRoute>),
}

impl Wire {
    /// The state a route of `protocol` keeps; `None` for plain bytes.
    pub fn new(
        protocol: TcpProtocol,
        route: &str,
        seed: u64,
        on_garbage: OnGarbage,
        ssl: Ssl,
    ) -> Option<Wire> {
        match protocol {
            TcpProtocol::Bytes => None,
            TcpProtocol::Redis => Some(Wire::Redis(Arc::new(redis::RedisRoute::new(
                route, seed, on_garbage,
            )))),
            TcpProtocol::Postgres => Some(Wire::Postgres(Arc::new(postgres::PostgresRoute::new(
                ssl, on_garbage,
            )))),
        }
    }

    /// What it does with bytes it cannot frame.
    pub fn on_garbage(&self) -> OnGarbage {
        match self {
            Wire::Redis(r) => r.on_garbage,
            Wire::Postgres(p) => p.on_garbage,
        }
    }

    /// The route's TCP recording with the protocol's own beside it.
    pub fn record(&self, mut recording: super::TcpRouteRecording) -> super::TcpRouteRecording {
        match self {
            Wire::Redis(r) => recording.redis = Some(r.recorder.snapshot()),
            Wire::Postgres(p) => recording.postgres = Some(p.recorder.snapshot()),
        }
        recording
    }

    /// The protocol it speaks.
    pub fn protocol(&self) -> TcpProtocol {
        match self {
            Wire::Redis(_) => TcpProtocol::Redis,
            Wire::Postgres(_) => TcpProtocol::Postgres,
        }
    }

    /// What it answers to encryption requests (PostgreSQL's; `refuse` for the others, which have none).
    pub fn ssl(&self) -> Ssl {
        match self {
            Wire::Postgres(p) => p.ssl,
            Wire::Redis(_) => Ssl::Refuse,
        }
    }

    /// Relays one connection in the protocol's way; gives the client's halves back (PostgreSQL, which runs the
    /// whole sockets, closes them itself).
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
            Wire::Postgres(route) => {
                let client = client.0.reunite(client.1);
                let upstream = upstream.0.reunite(upstream.1);
                match (client, upstream) {
                    (Ok(client), Ok(upstream)) => {
                        postgres::serve(route, ctx.conn(), client, upstream).await;
                    }
                    // Halves of one socket always reunite; were they not, the connection ends.
                    _ => ctx.finish(Ending::Close),
                }
                None
            }
        }
    }
}
