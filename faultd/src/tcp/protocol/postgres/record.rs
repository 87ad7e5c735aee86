//! What a postgres route recorded, per entry (and `other` for the statements no entry matched) and per phase:
//! statements, those an entry took, errors by SQLSTATE (faultd's or the server's), the latency from the
//! statement sent to the end of its reply (HDR, ns, 3 significant digits), and statements in flight.
//!
//! For: the `postgres` part of a TCP route's recording in `/recording`, and its lines on `/metrics`. Not for:
//! deciding anything.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

pub use crate::recorder::postgres::{PostgresRecording, StatementPhase, StatementRecording, OTHER};

/// The row of `key`, made on first use: the name is copied once, not once per statement.
fn row<'m, T: Default>(map: &'m mut BTreeMap<String, T>, key: &str) -> &'m mut T {
    if !map.contains_key(key) {
        map.insert(key.to_string(), T::default());
    }
    map.get_mut(key)
        .unwrap_or_else(|| unreachable!("inserted above"))
}

/// The recorder of one postgres route.
#[derive(Debug, Default)]
pub struct PostgresRecorder {
    state: Mutex<PostgresRecording>,
}

/// How a statement's reply ended.
#[derive(Debug)]
pub struct Ended<'a> {
    /// Its entry's name (or [`OTHER`]).
    pub entry: &'a str,
    /// The phase it started in.
    pub phase: &'a str,
    /// Whether the entry took it.
    pub taken: bool,
    /// The SQLSTATE of its error.
    pub sqlstate: Option<&'a str>,
    /// Cut short by the connection's end.
    pub cut: bool,
    /// From sent to the reply's end.
    pub latency: Duration,
}

impl PostgresRecorder {
    fn state(&self) -> std::sync::MutexGuard<'_, PostgresRecording> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A statement went out under `entry` (with `pattern`).
    pub fn started(&self, entry: &str, pattern: Option<&String>) {
        let mut s = self.state();
        let r = row(&mut s.statements, entry);
        if r.pattern.is_none() {
            r.pattern = pattern.cloned();
        }
        r.in_flight += 1;
        r.max_in_flight = r.max_in_flight.max(r.in_flight);
    }

    /// A statement's reply ended.
    pub fn ended(&self, e: Ended<'_>) {
        let mut s = self.state();
        let r = row(&mut s.statements, e.entry);
        r.in_flight = r.in_flight.saturating_sub(1);
        let p = row(&mut r.phases, e.phase);
        p.calls += 1;
        p.taken += u64::from(e.taken);
        p.cut += u64::from(e.cut);
        if let Some(code) = e.sqlstate {
            *p.errors.entry(code.to_string()).or_default() += 1;
        }
        let ns = u64::try_from(e.latency.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        let _ = p.latency.record(ns);
    }

    /// A connection's bytes stopped being PostgreSQL.
    pub fn garbage(&self) {
        self.state().garbage += 1;
    }

    /// faultd answered `N` to an encryption request.
    pub fn refused_encryption(&self) {
        self.state().encryption_refused += 1;
    }

    /// A copy of everything recorded.
    pub fn snapshot(&self) -> PostgresRecording {
        self.state().clone()
    }
}
