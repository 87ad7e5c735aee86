//! Redis routes: a TCP route with `protocol: redis` frames RESP2 and RESP3, pairs each reply with the command it
//! answers, and lets its `redis` entries hit single commands (an error reply in place of the server's, a delay, a
//! hang, a close) while every other byte passes through untouched.
//!
//! For: a route's shared Redis state (the entries in force with the phase they belong to, `on_garbage`, the
//! recorder). Modules: [`resp`] (the reader), [`entry`] (the entries and their triggers), [`record`] (per-command
//! counts), `conn` (one connection's relay and its commands), `replies` (its replies), `pending` and `queue`
//! (the commands between the two). Not for: byte toxics or listening (`crate::tcp::proxy`).

use std::sync::Arc;

use tokio::sync::watch;

pub mod entry;
pub mod record;
pub mod resp;

mod conn;
mod outgoing;
mod pending;
mod queue;
mod replies;

pub(crate) use conn::relay;
pub use entry::{validate_list, RedisEntry, RedisMatch};
pub use record::{CommandCounts, CommandRecording, RedisRecorder, RedisRecording};

use super::OnGarbage;
use entry::CompiledEntries;

/// The entries in force on a route, and the phase whose counts the commands answered under them go to.
#[derive(Debug, Default)]
pub struct Rules {
    /// The phase in force (`before-start` before the first).
    pub phase: Arc<str>,
    /// The entries, compiled.
    pub entries: CompiledEntries,
}

/// What every connection of one Redis route shares.
#[derive(Debug)]
pub struct RedisRoute {
    name: String,
    seed: u64,
    /// What a connection does with bytes that are not RESP.
    pub on_garbage: OnGarbage,
    rules: watch::Sender<Arc<Rules>>,
    /// The route's counts.
    pub recorder: RedisRecorder,
}

impl RedisRoute {
    /// A route with no entries (every command passes through).
    pub fn new(name: &str, seed: u64, on_garbage: OnGarbage) -> RedisRoute {
        RedisRoute {
            name: name.to_string(),
            seed,
            on_garbage,
            rules: watch::channel(Arc::new(Rules {
                phase: Arc::from(crate::phased::BEFORE_FIRST_PHASE),
                entries: CompiledEntries::default(),
            }))
            .0,
            recorder: RedisRecorder::default(),
        }
    }

    /// Puts `entries` (validated) in force for the commands that arrive from now on, counting under `phase`.
    pub fn set(&self, entries: &[RedisEntry], phase: &str) {
        let tallies = |name: &str| self.recorder.entry(name);
        let compiled = CompiledEntries::compile(entries, &self.name, self.seed, &tallies);
        self.rules.send_replace(Arc::new(Rules {
            phase: Arc::from(phase),
            entries: compiled,
        }));
    }

    /// The entries in force.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.borrow().clone()
    }
}
