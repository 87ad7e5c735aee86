//! What HTTP/1.1's lanes ask of a connection: open one, run one exchange on it at a time ([`Transport`]); the
//! real client (`client`) and the deterministic tests' mock both answer it, so the same lanes run against both.
//!
//! Not for timing, timeouts or outcomes: the lanes do those.

use std::future::Future;
use std::io;
use std::sync::Arc;

use tokio::time::Instant;

use super::compile::Wire;
use crate::outcome::Answer;
use crate::request::ticks::Ticks;

/// A request that could not complete: the connection failed or broke. Timeouts are the lanes'.
#[derive(Debug)]
pub(crate) struct TransportError(pub(crate) String);

/// The message of a connection the server closed while it sat idle: nothing of the response arrived, so the
/// request can go again on a fresh connection (hyper's client does the same).
pub(super) const STALE: &str = "the idle connection was closed by the server before the response";

impl TransportError {
    /// True if the request never reached a live connection and may be retried once on a new one.
    pub(crate) fn is_stale(&self) -> bool {
        self.0 == STALE
    }
}

impl From<io::Error> for TransportError {
    fn from(e: io::Error) -> Self {
        TransportError(e.to_string())
    }
}

/// Something that opens connections and performs one HTTP exchange on one of them at a time.
pub(crate) trait Transport: Send + Sync + 'static {
    /// One connection, owned by one sending loop at a time.
    type Conn: Send + 'static;

    /// Opens a connection to the target.
    fn connect(&self) -> impl Future<Output = Result<Self::Conn, TransportError>> + Send;

    /// The dispatcher's wake-ups, if this transport can leave answers in the kernel until the next one.
    fn ticks(&self) -> Option<Arc<Ticks>> {
        None
    }

    /// When the kernel received the last byte of the answer the last exchange on `conn` read, if the transport
    /// knows it (an answer left in the kernel until the dispatcher's wake-up); otherwise the exchange ended when
    /// it returned.
    fn received(_conn: &Self::Conn) -> Option<Instant> {
        None
    }

    /// Sends `request` on `conn` and reads the whole response. After an error the connection must be dropped.
    /// `Ok((answer, false))` means the server asked to close: the connection must not be reused either.
    fn exchange<'a>(
        &'a self,
        conn: &'a mut Self::Conn,
        request: &'a Wire,
    ) -> impl Future<Output = Result<(Answer, bool), TransportError>> + Send + 'a;
}
