//! A command on its way from a Redis connection's command side to its reply side, and what both sides share.
//!
//! For: the record each command leaves for the reply side ([`Pending`]), how one that is never answered counts, and
//! how either side sees that the connection was ended. Not for: reading commands (`super::conn`) or pairing
//! replies (`super::replies`).

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::record::{CommandId, Ended};
use crate::tcp::toxics::Ending;

/// Bytes read at once from either side.
pub(super) const READ_SIZE: usize = 16 * 1024;

/// A command on its way, as the reply side sees it.
#[derive(Debug)]
pub(super) enum Pending {
    /// Forwarded to the server; its reply is held until `at + delay`.
    Forwarded {
        id: CommandId,
        at: Instant,
        delay: Option<Duration>,
    },
    /// Not forwarded: answered with this error.
    Injected {
        id: CommandId,
        at: Instant,
        reply: Bytes,
    },
    /// Never answered, nor anything after it.
    Hang { id: CommandId },
    /// The connection closes here (an entry's close, or bytes that are not RESP under `on_garbage: close`).
    Close { id: Option<CommandId> },
    /// Forwarded, and from here on both directions are forwarded untouched.
    Raw { id: Option<CommandId> },
}

impl Pending {
    pub(super) fn id(&self) -> Option<CommandId> {
        match self {
            Pending::Forwarded { id, .. } | Pending::Injected { id, .. } | Pending::Hang { id } => {
                Some(*id)
            }
            Pending::Close { id } | Pending::Raw { id } => *id,
        }
    }
}

/// A command that will not be answered, for its counts.
pub(super) fn lost(p: &Pending) -> Option<Ended> {
    Some(Ended {
        id: p.id()?,
        latency: None,
        error: None,
        n: 1,
    })
}

/// Whether the connection was ended since `seen` last looked: a version compared, unless it moved.
pub(super) fn over(seen: &mut tokio::sync::watch::Receiver<Ending>) -> bool {
    seen.has_changed().unwrap_or(true) && *seen.borrow_and_update() != Ending::Open
}
