//! What a call asks of its connection when its fault is carried out below HTTP: a reset, a close without an
//! answer, garbage, a hang on the bare socket, an abrupt GOAWAY, or (on HTTP/2) a reset of its stream alone.
//!
//! Also the other way a call outlives its answer: a hung HTTP/2 stream, [`Held`] by the stream's future. Not for:
//! acting on a takeover; the connection task does (`listener`) once hyper has let go of the socket.

use std::sync::Mutex;

use tokio::sync::Notify;

use crate::behaviours::H2Code;
use crate::recorder::CallGuard;

/// What a call asks its connection to do once hyper has let go of the socket.
pub(super) enum Takeover {
    /// Close with an RST (SO_LINGER 0).
    Reset,
    /// Close without a byte of answer.
    Empty,
    /// Write bytes that are no HTTP answer, then close.
    Malformed,
    /// Hold the call on the bare socket until the caller closes it. The call's guard moves here, so the call stays
    /// in flight while hyper's per-connection state (an 8 KiB read buffer, an 8 KiB write buffer, the request and
    /// the call's future) is freed: a hung call costs a few hundred bytes instead of ~20 KB, which is what lets
    /// faultd hold tens of thousands of them (bench/faultd.md, benchmark c).
    Hang(CallGuard),
    /// An abrupt GOAWAY with this code, then a close: the HTTP/2 connection's streams in flight are lost.
    GoAway(H2Code),
    /// The same, with the GOAWAY already written inside TLS: only the close is left.
    GoAwayWritten,
}

/// Where a call leaves its [`Takeover`] for the connection task, which waits on `notify`.
#[derive(Default)]
pub(super) struct TakeoverRequest {
    pub(super) action: Mutex<Option<Takeover>>,
    pub(super) notify: Notify,
}

impl TakeoverRequest {
    /// Asks the connection to drop hyper and act on the bare socket.
    pub(super) fn request(&self, action: Takeover) {
        if let Ok(mut a) = self.action.lock() {
            *a = Some(action);
        }
        self.notify.notify_one();
    }
}

/// Marks a response as "reset this stream instead" for the HTTP/2 service around a call.
#[derive(Debug, Clone, Copy)]
pub(super) struct ResetStream(pub(super) H2Code);

/// A call that is never answered: its guard, held by the stream's future until the caller gives up.
pub(super) struct Held(pub(super) CallGuard);

/// Holds `guard` until the future is dropped (the caller resets the stream or closes the connection).
pub(super) async fn hold<T>(guard: CallGuard) -> T {
    let _held = guard;
    std::future::pending().await
}
