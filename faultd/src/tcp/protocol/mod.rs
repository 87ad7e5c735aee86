//! The wires a TCP route may understand beyond bytes, and the one place the proxy hands a connection to one.
//!
//! For: [`TcpProtocol`] (what a route's `tcp: { protocol }` names), [`Wire`] (what a route speaking one holds
//! while it runs) and [`serve`], which runs a connection of such a route once its upstream is connected. Not
//! for: the byte proxy and its toxics (`super::proxy`), or any protocol's details (one folder each).

pub mod postgres;

use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::watch;

use super::record::TcpRecorder;
use super::toxics::Ending;

pub use crate::config::TcpProtocol;

/// What a route speaking a protocol holds while it runs.
#[derive(Debug, Clone, Default)]
pub enum Wire {
    /// Bytes only: the toxics' proxy.
    #[default]
    Bytes,
    /// PostgreSQL: its settings, entries and recorder.
    Postgres(Arc<postgres::PostgresRoute>),
}

/// One connection of a route, as a protocol sees it.
pub struct Conn<'a> {
    /// The route's name (its draws' key).
    pub route: &'a str,
    /// The seed of the draws.
    pub seed: u64,
    /// The route's connection recorder (bytes each way).
    pub recorder: &'a TcpRecorder,
    /// The connection's number on the route (its draws' key).
    pub n: u64,
    /// The connection's end signal: set it to end the connection, watch it to stop when the route ends it.
    pub end: &'a watch::Sender<Ending>,
}

impl Conn<'_> {
    /// Ends the connection `how`, unless it has ended already.
    pub fn finish(&self, how: Ending) {
        self.end.send_if_modified(|e| {
            if *e == Ending::Open {
                *e = how;
                true
            } else {
                false
            }
        });
    }
}

/// Runs a connection of a route that speaks `wire`, its upstream connected; `None` for a bytes route (the
/// caller's proxy runs it) with the sockets given back.
pub async fn serve(
    wire: &Wire,
    conn: Conn<'_>,
    client: TcpStream,
    upstream: TcpStream,
) -> Result<Ending, (TcpStream, TcpStream)> {
    match wire {
        Wire::Bytes => Err((client, upstream)),
        Wire::Postgres(route) => Ok(postgres::serve(route, conn, client, upstream).await),
    }
}
