//! What the data plane shares between its connections and with the control API: the schedule in force, the
//! recorder, and the clients and limits every call may need.
//!
//! Not for: serving (`listener`) or a call's own state (`call`).

use std::sync::{Arc, RwLock};

use super::timeouts::Timeouts;
use crate::behaviours::ProxyClient;
use crate::deadlines::Deadlines;
use crate::files::Files;
use crate::recorder::Recorder;
use crate::schedule::Live;
use crate::tcp::TcpRoutes;
use crate::tls::Terminator;

/// What the data plane shares between connections and with the control API.
pub struct Shared {
    /// Plan, clock and overrides; read on every call, written by control calls (which only swap small values,
    /// so a control call never holds the lock for long).
    pub live: RwLock<Live>,
    /// The recorder.
    pub recorder: Arc<Recorder>,
    /// The client of proxied calls.
    pub proxy: ProxyClient,
    /// The waker of delayed calls ([`crate::deadlines`]); `None` without a timerfd or with precise delays off
    /// (paused-time tests, where only tokio's timer follows the paused clock), and delays then use tokio's timer.
    pub deadlines: Option<Deadlines>,
    /// TLS termination, when the configuration asks for it: every connection's handshake runs first.
    pub tls: Option<Arc<Terminator>>,
    /// How long a connection may carry no call (a slow head, an idle keep-alive connection).
    pub timeouts: Timeouts,
    /// The TCP routes, whose listeners (with faultd's others) no upstream may name.
    pub tcp: Arc<TcpRoutes>,
    /// Where the control API may read the files a configuration names.
    pub files: Files,
    /// What the resolver recorded, when the configuration has `dns:`.
    pub dns: Option<Arc<crate::dns::DnsRecorder>>,
}

impl Shared {
    /// A read of the live state that survives a panicked writer (the state is plain values, never half-written).
    pub fn live(&self) -> std::sync::RwLockReadGuard<'_, Live> {
        self.live.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A write of the live state.
    pub fn live_mut(&self) -> std::sync::RwLockWriteGuard<'_, Live> {
        self.live.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// The route instance a listener serves (`instances: N`): its calls reach that instance of that route, and any
/// other call is unmatched there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceOf {
    /// The route's name.
    pub route: String,
    /// The instance, numbered from 1.
    pub number: u32,
}
