//! The load of a run: loadgen in this process, or its agents (`--agents N`). Either way the run sees the same
//! surface: progress for the live line, stop, a lost agent, and at the end one recording whose buckets went to
//! the run's series as they became final.
//!
//! Not for the agents' registration and merging (`crate::agents`) nor for the load itself (`loadgen`).

use std::time::SystemTime;

use tokio::time::Instant;

use crate::agents::{AgentLoad, Distributed, Lost, Registered};

/// A running load.
pub enum Load {
    /// loadgen in this process.
    Local(loadgen::LoadRun),
    /// Agents, each running a share.
    Agents(AgentLoad),
}

impl Load {
    /// Starts the load: in this process, or on the registered agents.
    pub fn start(
        spec: &loadgen::LoadSpec,
        options: loadgen::RunOptions,
        origin: Instant,
        wall: SystemTime,
        agents: Option<Registered>,
    ) -> Result<Load, String> {
        match agents {
            None => loadgen::start(spec.clone(), options, origin)
                .map(Load::Local)
                .map_err(|e| e.to_string()),
            Some(registered) => AgentLoad::start(registered, spec, options, origin, wall)
                .map(Load::Agents)
                .map_err(|e| e.to_string()),
        }
    }

    /// The whole load's progress.
    pub fn progress(&self) -> loadgen::Progress {
        match self {
            Load::Local(l) => l.progress(),
            Load::Agents(a) => a.progress(),
        }
    }

    /// Stops the schedule; requests in flight finish.
    pub fn stop(&self) {
        match self {
            Load::Local(l) => l.stop(),
            Load::Agents(a) => a.stop(),
        }
    }

    /// An agent lost so far (never for a load in this process).
    pub fn lost(&mut self) -> Option<Lost> {
        match self {
            Load::Local(_) => None,
            Load::Agents(a) => a.lost(),
        }
    }

    /// Waits for the load to end and returns its recording, and the agents' summary for a distributed run. An
    /// agent that has not handed over its recording by `deadline` is lost.
    pub async fn finish(self, deadline: Instant) -> (loadgen::Recording, Option<Distributed>) {
        match self {
            Load::Local(l) => (l.finish().await, None),
            Load::Agents(a) => {
                let (r, d) = a.finish(deadline).await;
                (r, Some(d))
            }
        }
    }
}
