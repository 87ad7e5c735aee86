//! One run of a scenario, orchestration only: start the dependency, the webhook receiver and the SUT, set the one
//! clock (t = 0), run the load and the schedule together while the breakers are watched and the expectations decided
//! as they can be, then stop everything and collect the recordings. A hard deadline always ends the run; Ctrl-C and
//! SIGTERM stop the load, return faultd to healthy and still hand back what was recorded, marked aborted.
//!
//! The rooms: `clock` (t = 0), `dependency` (embedded or external faultd), `replicas` (external faultd processes,
//! one or several behind one address), `sut`, `child` and `ready` (the service under test), `load` (loadgen here
//! or its agents), `signals`, `live` (the terminal line), `verdicts` (deciding while the run goes on), `watch`
//! (every breaker source at once), `running` (the run's steps while it goes on). Breaker sources live in
//! `crate::breaker`; the live metrics export in `crate::metrics`, fed by `on_tick`. Not for judging or reporting:
//! `run` returns a `RunOutput`; `expect` and `report` take it from there.

mod child;
pub mod clock;
pub mod dependency;
pub mod live;
pub mod load;
mod ready;
pub mod replicas;
mod running;
pub mod signals;
pub mod sut;
pub mod verdicts;
pub mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::agents::{AgentsOptions, Distributed};
use crate::breaker::crosscheck::{self, Disagreement};
use crate::breaker::BreakerTimeline;
use crate::expect::Verdict;
use crate::observe;
use crate::record::RunRecord;
use crate::scenario::Validated;
pub use clock::Clock;
use running::{Running, Stopped};
pub use signals::Signals;
use sut::SutError;
use watch::BreakerWatch;

/// The seed of a scenario that names none: runs are reproducible by default.
pub const DEFAULT_SEED: u64 = 1;

/// The exit code of a run in which nothing failed but at least one expectation could not be judged.
pub const INCONCLUSIVE: i32 = 4;

/// How long before t = 0 the clock is set, so that every component is armed before it.
const LEAD: Duration = Duration::from_millis(20);

/// The lead when agents share the load: t = 0 must reach every agent, on its own machine, before it comes.
const AGENT_LEAD: Duration = Duration::from_secs(2);

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    /// The load ran its full duration.
    Completed,
    /// Stopped by a signal (Ctrl-C, SIGTERM).
    Aborted { signal: String },
    /// The hard deadline passed before the load finished.
    Deadline,
    /// The SUT exited during the run.
    SutDied { status: String, last_lines: String },
    /// An expectation marked `abort_on_fail` was decided as failed while the run went on.
    StoppedOnFailure { expectation: String },
    /// An agent of a distributed load died, disconnected, failed or started late; what the others recorded is kept.
    AgentLost { agent: String, why: String },
}

/// How an ending that cut the run short reads in every report: a headline, which each format styles its own way
/// (upper case, bold, a banner), and the rest of the sentence as it follows the headline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndingSentence {
    pub head: &'static str,
    pub rest: String,
}

impl Ending {
    /// What the ending was, in the one sentence every report says it with; `None` for a run that completed.
    pub fn sentence(&self) -> Option<EndingSentence> {
        let (head, rest) = match self {
            Ending::Completed => return None,
            Ending::Aborted { signal } => (
                "Aborted",
                format!(" by {signal}: the figures cover the run up to then."),
            ),
            Ending::StoppedOnFailure { expectation } => (
                "Stopped early",
                format!(": {expectation} failed while the run went on (abort_on_fail)."),
            ),
            Ending::Deadline => ("Stopped at the hard deadline", ".".to_string()),
            Ending::SutDied { status, .. } => {
                ("The SUT died", format!(" during the run ({status})."))
            }
            Ending::AgentLost { agent, why } => (
                "An agent was lost",
                format!(": {agent}: {why}. The figures are what the other agents recorded."),
            ),
        };
        Some(EndingSentence { head, rest })
    }
}

/// Everything a run produced, before reporting.
pub struct RunOutput {
    /// The wall-clock time of t = 0, the origin every time in the recordings counts from.
    pub started: SystemTime,
    pub ending: Ending,
    pub record: RunRecord,
    pub load: loadgen::Recording,
    pub dependency: faultd::Recording,
    /// For each breaker with a known route, the timeline inferred from traffic (beside the observed one).
    pub inferred: BTreeMap<String, BreakerTimeline>,
    /// Changes of state that one of a breaker's timelines shows and another does not.
    pub disagreements: Vec<Disagreement>,
    pub verdicts: Vec<Verdict>,
    /// The run's own checks that failed (e.g. request conservation), as sentences.
    pub run_errors: Vec<String>,
    /// The run's CA certificate (PEM) when the embedded faultd minted one for TLS: the report keeps it as ca.pem.
    pub ca_pem: Option<String>,
    /// The agents of a distributed load (`--agents N`), with their clock offsets.
    pub distributed: Option<Distributed>,
    /// When the dependency was several faultd replicas: each one's own recording and start, in the scenario's
    /// order (`dependency` is their merge). Empty otherwise.
    pub replicas: Vec<replicas::ReplicaRecording>,
}

/// Why a run could not start or broke before recording anything: exit code 3.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start faultd: {0}")]
    Faultd(String),
    #[error("cannot start the demo SUT: {0}")]
    Demo(String),
    #[error(transparent)]
    Sut(#[from] SutError),
    #[error("cannot start the load: {0}")]
    Load(String),
    #[error("cannot gather the agents: {0}")]
    Agents(#[from] crate::agents::AgentsError),
    #[error("cannot serve the breaker webhook: {0}")]
    Webhook(std::io::Error),
    #[error("cannot configure the external faultd at {url}: {message}")]
    ExternalFaultd { url: String, message: String },
}

/// Runs a validated scenario to its end.
pub async fn run(v: &Validated) -> Result<RunOutput, RunError> {
    run_with(v, None, None).await
}

/// The run's figures at one tick of its loop (four times a second), for whoever follows the run from outside, such
/// as the live metrics export.
pub struct Tick<'a> {
    pub elapsed: Duration,
    pub phases: &'a [(String, Duration)],
    pub progress: &'a loadgen::Progress,
    /// loadgen's finished buckets so far.
    pub buckets: &'a [loadgen::Bucket],
    /// The record as it grows, second by second (calls in flight per route, handshakes).
    pub live: &'a RunRecord,
    pub breakers: &'a BreakerWatch,
    /// Each expectation's verdict where it is decided already.
    pub decided: &'a [Option<Verdict>],
}

/// What is called with every tick of the run's loop.
pub type OnTick<'a> = &'a (dyn Fn(&Tick<'_>) + Sync);

/// As `run`, calling `on_tick` once per tick of the run's loop, and spreading the load over agents when `agents`
/// says so: start everything on one clock, follow the run to its end, stop everything, then judge what was recorded.
pub async fn run_with(
    v: &Validated,
    on_tick: Option<OnTick<'_>>,
    agents: Option<&AgentsOptions>,
) -> Result<RunOutput, RunError> {
    // Listen for Ctrl-C and SIGTERM from the very start: until a handler is installed, either signal kills the
    // process outright, which would orphan a SUT that is still starting (it runs in a process group of its own).
    let mut signals = Signals::new();
    let mut running = Running::start(v, agents, &mut signals).await?;
    let ending = running.follow(v, on_tick, &mut signals).await;
    let stopped = running.stop(ending, &mut signals).await?;
    Ok(judge(v, stopped).await)
}

/// Turns what a stopped run recorded into its output: the record on the run's clock, the breakers' timelines, the
/// run's own checks and the verdicts.
async fn judge(v: &Validated, stopped: Stopped) -> RunOutput {
    let scenario = &v.scenario;
    let run_length = if stopped.ending == Ending::Completed {
        scenario.duration.get()
    } else {
        stopped.clock.elapsed().min(scenario.duration.get())
    };
    let mut record = observe::record(
        stopped.bucket,
        run_length,
        &stopped.phases,
        &stopped.load,
        &stopped.dependency,
    );
    let mut stopped = stopped;
    if v.correlation().is_some() {
        // The requests go to the join, not to load.json: requests.csv holds them, one line each.
        let requests = std::mem::take(&mut stopped.load.requests);
        record.requests = Some(std::sync::Arc::new(crate::correlate::Join::new(
            &requests,
            &stopped.traced_calls,
            scenario.load.timeout.get(),
        )));
    }
    let timelines = stopped.breakers.timelines(&record);
    record.breakers = timelines.observed;
    record.evidence = timelines.evidence;

    let mut run_errors = Vec::new();
    let c = stopped.load.conservation;
    if !c.holds {
        run_errors.push(format!(
            "requests were not conserved: {} sent, but the outcome classes add up to {} with {} still in flight",
            c.sent, c.sum_of_classes, c.in_flight
        ));
    }
    if let (Ending::Completed, Some(options), Some(d)) = (
        &stopped.ending,
        &stopped.whole_timetable,
        &stopped.distributed,
    ) {
        // The agents' shares must add up to the timetable itself, arrival for arrival.
        let (spec, options) = (scenario.load.clone(), options.clone());
        let whole =
            tokio::task::spawn_blocking(move || loadgen::timetable_len(&spec, &options)).await;
        if let Ok(Ok(whole)) = whole {
            if whole != stopped.load.intended {
                run_errors.push(format!(
                    "the {} agents issued {} arrivals, but the timetable holds {whole}",
                    d.agents.len(),
                    stopped.load.intended
                ));
            }
        }
    }
    let stopped_by = match &stopped.ending {
        Ending::StoppedOnFailure { expectation } => Some(
            expectation
                .split(':')
                .next()
                .unwrap_or(expectation)
                .to_string()
                + " failed",
        ),
        _ => None,
    };
    let verdicts = stopped
        .decisions
        .finish(&v.expectations, &record, stopped_by.as_deref());
    let disagreements = crosscheck::disagreements(&record.evidence);
    RunOutput {
        started: stopped.clock.wall,
        ending: stopped.ending,
        record,
        load: stopped.load,
        dependency: stopped.dependency,
        inferred: timelines.inferred,
        disagreements,
        verdicts,
        run_errors,
        ca_pem: stopped.ca_pem,
        distributed: stopped.distributed,
        replicas: stopped.replicas,
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}
