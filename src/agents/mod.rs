//! Distributed load: the runner's side of `loadgen agent`. N agents each run one share of the timetable (every
//! N-th arrival, so that their union is the timetable itself, Poisson and replays included) from one shared
//! t = 0, and stream their buckets back as they become final; the runner adds them up (histograms added, never
//! percentiles averaged), judges the whole, and names any agent that is lost.
//!
//! The rooms: `register` (the listener, local agent processes, the hello and each agent's clock offset) and
//! `coordinate` (the plans, the streams, the live merge, the final recording). The agent itself and the wire
//! protocol live in `loadgen::agent`, where `loadgen agent` and the local processes share them.
//!
//! Not for the run's orchestration (`crate::run` asks for a load and gets one) nor for judging.

mod coordinate;
mod register;

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use coordinate::{AgentLoad, Lost};
pub use register::{register, Registered};

/// The most agents one runner takes: each is a connection, a stream of buckets and a share of every merge.
pub const MAX_AGENTS: u32 = 1024;

/// How a run's load is spread over agents.
#[derive(Debug, Clone)]
pub struct AgentsOptions {
    /// How many agents share the load.
    pub count: u32,
    /// Wait for agents started elsewhere (a Kubernetes Indexed Job) to dial this address; without it the runner
    /// starts `count` agent processes on this machine, over loopback.
    pub listen: Option<SocketAddr>,
    /// Allow `listen` on an address that is not loopback (agents on other machines).
    pub allow_remote: bool,
    /// How long to wait for every agent to register.
    pub register_within: Duration,
    /// The program of local agents, run as `PROGRAM agent --runner ADDR --index I`: this executable when absent
    /// (`faultline agent` is `loadgen agent`).
    pub program: Option<std::path::PathBuf>,
}

impl AgentsOptions {
    /// `count` local agent processes, registering within 30 s.
    pub fn local(count: u32) -> AgentsOptions {
        AgentsOptions {
            count,
            listen: None,
            allow_remote: false,
            register_within: Duration::from_secs(30),
            program: None,
        }
    }
}

/// Why the agents could not be gathered: the run cannot start (exit code 3), or the options are wrong (2).
#[derive(Debug, thiserror::Error)]
pub enum AgentsError {
    /// `--agents` out of range.
    #[error("--agents {0}: give 1 to {MAX_AGENTS} agents")]
    Count(u32),
    /// A listener on a non-loopback address without `--agents-allow-remote`.
    #[error("--agents-listen {0}: the address is not loopback; add --agents-allow-remote to let agents on other machines dial it")]
    Remote(SocketAddr),
    /// The listener could not be bound.
    #[error("cannot listen for agents on {addr}: {why}")]
    Listen { addr: SocketAddr, why: String },
    /// A local agent process could not be started.
    #[error("cannot start agent process {index}: {why}")]
    Spawn { index: u32, why: String },
    /// Not every agent registered in time.
    #[error("only {registered} of {expected} agents registered within {secs:.0} s{detail}")]
    Registration {
        registered: u32,
        expected: u32,
        secs: f64,
        detail: String,
    },
    /// An agent could not be sent its plan.
    #[error("cannot send agent {agent} its plan: {why}")]
    Plan { agent: String, why: String },
}

impl AgentsError {
    /// 2 for options that are wrong, 3 for a run that could not start.
    pub fn exit_code(&self) -> i32 {
        match self {
            AgentsError::Count(_) | AgentsError::Remote(_) => 2,
            _ => 3,
        }
    }
}

/// A distributed run's agents, as result.json reports them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distributed {
    /// Each agent, by index.
    pub agents: Vec<AgentSummary>,
    /// Buckets of the time series merged from the agents' while the run went on.
    pub buckets_merged: u64,
    /// How long merging one bucket of every agent took, 99th percentile, in milliseconds.
    pub bucket_merge_p99_ms: f64,
}

/// One agent as result.json reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSummary {
    /// Its share of the timetable: arrivals k with k % of == index.
    pub index: u32,
    /// Where it ran (host name and process id).
    pub host: String,
    /// Its wall clock minus the runner's, in milliseconds, measured at registration (the exchange with the
    /// shortest round trip of several).
    pub clock_offset_ms: f64,
    /// The offset is within this many milliseconds of the truth: half that round trip.
    pub clock_uncertainty_ms: f64,
    /// How late it armed its load after t = 0, in milliseconds (0 when it was ready in time).
    pub late_ms: f64,
    /// Arrivals of its share (sent + dropped).
    pub intended: u64,
    /// Requests it dispatched.
    pub sent: u64,
    /// Requests with an outcome, dropped included.
    pub outcomes: u64,
    /// Requests still in flight when it handed over its recording.
    pub in_flight: u64,
    /// Why its recording is missing, when it was lost (died, disconnected, failed, late).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<String>,
}
