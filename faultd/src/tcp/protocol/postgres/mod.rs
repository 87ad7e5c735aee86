//! PostgreSQL on a TCP route (`tcp: { protocol: postgres }`): faultd reads the v3 protocol in both directions
//! and strikes single statements, passing everything else byte for byte.
//!
//! For: the route's settings (`ssl`: what faultd answers to an SSLRequest; `on_garbage`: what it does with bytes
//! that are not PostgreSQL), its entries over the phases, and its recorder. Modules: [`frame`] (the incremental,
//! bounded reader), [`session`] (pairing replies with statements, and the rewrite an error makes), [`entries`]
//! (which entry takes a statement), [`record`] (what is recorded), `conn` (the two directions of a connection).
//! Not for: toxics (a postgres route's connections are not shaped by them) or other wires.

pub mod entries;
pub mod frame;
pub mod record;
pub mod session;

mod conn;

use std::sync::{Arc, RwLock};

use crate::behaviours::PostgresFault;

pub(crate) use conn::serve;
pub use entries::Entries;
pub use record::{PostgresRecorder, PostgresRecording};

pub use crate::config::{OnGarbage, Ssl};

/// A postgres route while it runs.
#[derive(Debug)]
pub struct PostgresRoute {
    /// The answer to encryption requests.
    pub ssl: Ssl,
    /// What garbage gets.
    pub on_garbage: OnGarbage,
    entries: RwLock<Arc<Entries>>,
    /// The phase in force, the recording's key for the statements sent now.
    phase: RwLock<Arc<str>>,
    /// What the route recorded.
    pub recorder: PostgresRecorder,
}

impl PostgresRoute {
    /// A route with no entries.
    pub fn new(ssl: Ssl, on_garbage: OnGarbage) -> PostgresRoute {
        PostgresRoute {
            ssl,
            on_garbage,
            entries: RwLock::new(Arc::new(Entries::none())),
            phase: RwLock::new("healthy".into()),
            recorder: PostgresRecorder::default(),
        }
    }

    /// The entries in force.
    pub fn entries(&self) -> Arc<Entries> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The phase in force.
    pub fn phase(&self) -> Arc<str> {
        self.phase.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts phase `phase` and the entries of `list` in force: statements sent from now on are recorded under the
    /// phase and decided by the entries, whose counts start from zero when the list is not the one in force.
    pub fn set_entries_unless_same(&self, list: &[PostgresFault], phase: &str) {
        let mut slot = self.entries.write().unwrap_or_else(|p| p.into_inner());
        if slot.source != list {
            *slot = Arc::new(Entries::new(list));
        }
        *self.phase.write().unwrap_or_else(|p| p.into_inner()) = phase.into();
    }
}
