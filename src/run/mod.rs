//! One run of a scenario, orchestration only: start the dependency, the webhook receiver and the SUT, set the one
//! clock (t = 0), run the load and the schedule together while the breakers are watched and the expectations decided
//! as they can be, then stop everything and collect the recordings. A hard deadline always ends the run; Ctrl-C and
//! SIGTERM stop the load, return faultd to healthy and still hand back what was recorded, marked aborted.
//!
//! The rooms: `clock` (t = 0), `dependency` (embedded or external faultd), `replicas` (external faultd processes,
//! one or several behind one address), `sut`, `child` and `ready` (the service under test), `load` (loadgen here
//! or its agents), `signals`, `live` (the terminal line), `verdicts` (deciding while the run goes on). Breaker
//! sources live in `crate::breaker`. Not for judging or reporting: `run` returns a `RunOutput`; `expect` and
//! `report` take it from there.

mod child;
pub mod clock;
pub mod dependency;
pub mod live;
pub mod load;
pub mod metrics;
mod ready;
pub mod replicas;
pub mod signals;
pub mod sut;
pub mod verdicts;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::agents::{AgentsOptions, Distributed};
use crate::breaker::crosscheck::{self, Disagreement};
use crate::breaker::watch::BreakerWatch;
use crate::breaker::webhook::Webhook;
use crate::breaker::BreakerTimeline;
use crate::expect::Verdict;
use crate::observe;
use crate::record::RunRecord;
use crate::scenario::Validated;
pub use clock::Clock;
use dependency::Dependency;
use load::Load;
pub use signals::Signals;
use sut::{OutputLine, Started, Sut, SutError};
use verdicts::{LiveVerdicts, Series};

/// The seed of a scenario that names none: runs are reproducible by default.
pub const DEFAULT_SEED: u64 = 1;

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

/// As `run`, handing the run's figures to a live metrics endpoint once per tick, and spreading the load over
/// agents when `agents` says so.
pub async fn run_with(
    v: &Validated,
    metrics: Option<&metrics::Metrics>,
    agents: Option<&AgentsOptions>,
) -> Result<RunOutput, RunError> {
    let scenario = &v.scenario;
    let bucket = scenario
        .bucket
        .map(|b| b.get())
        .unwrap_or(Duration::from_millis(100));
    let seed = scenario.seed.unwrap_or(DEFAULT_SEED);
    // Listen for Ctrl-C and SIGTERM from the very start: until a handler is installed, either signal kills the
    // process outright, which would orphan a SUT that is still starting (it runs in a process group of its own).
    let mut signals = Signals::new();

    let dependency = Dependency::start(scenario, seed, bucket).await?;
    let webhook = Webhook::serve().await.map_err(RunError::Webhook)?;
    let (lines_tx, mut lines_rx) = mpsc::unbounded_channel::<OutputLine>();
    let (mut sut, aborted_early) = match Sut::start(
        scenario,
        &dependency,
        webhook.url(),
        seed,
        lines_tx,
        &mut signals,
    )
    .await?
    {
        Started::Ready(s) => (s, None),
        Started::Interrupted(s, signal) => (s, Some(signal)),
    };

    // Agents register and have their clocks measured before t = 0 is fixed. A signal meanwhile stops the run as
    // one during the SUT's start does.
    let mut aborted_early = aborted_early;
    let registered = match agents {
        Some(options) if aborted_early.is_none() => {
            tokio::select! {
                r = crate::agents::register(options) => match r {
                    Ok(r) => Some(r),
                    Err(e) => {
                        sut.stop().await;
                        dependency.stop().await;
                        return Err(e.into());
                    }
                },
                name = signals.recv() => {
                    aborted_early = Some(name);
                    None
                }
            }
        }
        _ => None,
    };
    let clock = Clock::starting_in(if registered.is_some() {
        AGENT_LEAD
    } else {
        LEAD
    });
    let phases = scenario.dependency.phase_names();
    let (series_sender, series) = Series::new();
    let load_options = loadgen::RunOptions {
        base_url: sut.url.clone(),
        // Aborted before the SUT was ready: an empty timetable, so that not one request reaches it.
        duration: if aborted_early.is_some() {
            Duration::ZERO
        } else {
            scenario.duration.get()
        },
        seed,
        phases: phases.clone(),
        bucket,
        allow_hosts: scenario.allow_hosts.clone(),
        series: series_sender,
        share: loadgen::Share::WHOLE,
    };
    let whole_timetable = registered.is_some().then(|| loadgen::RunOptions {
        series: loadgen::Series::Discard,
        ..load_options.clone()
    });
    let mut load = Load::start(
        &scenario.load,
        load_options,
        clock.origin,
        clock.wall,
        registered,
    )
    .map_err(RunError::Load)?;
    // The load waits for t = 0 on its own; an external faultd starts its schedule when the request reaches it, so
    // the request is sent at t = 0, after the load is armed.
    if let Err(e) = dependency.start_schedule(clock.origin).await {
        load.stop();
        return Err(e);
    }
    let mut breakers = BreakerWatch::start(v, &sut.url, webhook.events(), clock.origin, clock.wall);

    // Wait for the load to end, a signal, the SUT dying, a decided failure that stops the run, or the deadline.
    let live = std::io::stderr().is_terminal();
    let judge_live = live || metrics.is_some() || LiveVerdicts::can_stop(&v.expectations);
    let mut decisions = LiveVerdicts::new(&v.expectations);
    let mut buckets: Vec<loadgen::Bucket> = Vec::new();
    let mut live_record = RunRecord::empty(bucket);
    let deadline = clock.origin
        + scenario.duration.get()
        + scenario.load.timeout.get()
        + Duration::from_secs(30);
    let end_of_schedule = clock.origin + scenario.duration.get();
    let mut ending = match aborted_early {
        Some(signal) => Ending::Aborted {
            signal: signal.to_string(),
        },
        None => Ending::Completed,
    };
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    let mut next_decision = Instant::now() + Duration::from_secs(1);
    while aborted_early.is_none() {
        tokio::select! {
            _ = ticker.tick() => {
                if let Some(status) = sut.exited() {
                    // Let the last output lines arrive before they are kept.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    ending = Ending::SutDied { status, last_lines: sut.last_lines() };
                    break;
                }
                if judge_live && Instant::now() >= next_decision {
                    next_decision += Duration::from_secs(1);
                    let fresh = series.take_new();
                    observe::append_sut(&mut live_record, &fresh);
                    buckets.extend(fresh);
                    let covered = bucket * buckets.len() as u32;
                    if let Ok(rec) = dependency.recording().await {
                        observe::advance(&mut live_record, covered, &phases, &rec);
                        let t = breakers.timelines(&live_record);
                        live_record.breakers = t.observed;
                        live_record.evidence = t.evidence;
                        let (new, stop) = decisions.update(&v.expectations, &live_record);
                        if live {
                            for verdict in &new {
                                live::announce(clock.elapsed(), verdict);
                            }
                        }
                        if let Some(expectation) = stop {
                            ending = Ending::StoppedOnFailure { expectation };
                            break;
                        }
                    }
                }
                if live {
                    let decided = live::decided_words(&v.expectations, decisions.decided());
                    live::draw(clock.elapsed(), &phases, &load.progress(), dependency.in_flight(), dependency.unmatched(), &breakers, &decided);
                }
                if let Some(m) = metrics {
                    m.tick(clock.elapsed(), &phases, &load.progress(), &buckets, &live_record, &breakers, decisions.decided());
                }
                if let Some(lost) = load.lost() {
                    ending = Ending::AgentLost { agent: lost.agent, why: lost.why };
                    break;
                }
                if Instant::now() >= end_of_schedule {
                    break;
                }
                if Instant::now() >= deadline {
                    ending = Ending::Deadline;
                    break;
                }
            }
            Some(line) = lines_rx.recv() => breakers.push_line(line),
            name = signals.recv() => {
                ending = Ending::Aborted { signal: name.to_string() };
                break;
            }
        }
    }
    if live {
        eprint!("\r\x1b[2K");
    }
    if ending != Ending::Completed {
        load.stop();
        dependency.reset_to_healthy();
    }
    // Let in-flight requests finish. The wait is bounded by the client timeout (and the deadline), so a signal
    // here does not cut it short, which would lose the recording: it marks the run aborted and the wait goes on.
    let finish_by = deadline.max(Instant::now() + Duration::from_secs(1));
    let finish = tokio::time::timeout_at(finish_by, load.finish(finish_by));
    tokio::pin!(finish);
    let load_recording = loop {
        tokio::select! {
            r = &mut finish => break r.ok(),
            name = signals.recv() => {
                if ending == Ending::Completed {
                    ending = Ending::Aborted { signal: name.to_string() };
                    dependency.reset_to_healthy();
                }
            }
        }
    };
    breakers.stop();
    while let Ok(line) = lines_rx.try_recv() {
        breakers.push_line(line);
    }
    let dependency_recording = dependency.final_recording().await;
    let ca_pem = dependency.ca_pem();
    dependency.stop().await;
    sut.stop().await;
    drop(webhook);
    let (dependency_recording, replicas) = dependency_recording?;
    let Some((mut load_recording, distributed)) = load_recording else {
        return Err(RunError::Load(
            "the load did not finish in time after the run was stopped".into(),
        ));
    };
    if let (Ending::Completed, Some(d)) = (&ending, &distributed) {
        // An agent that ran to the end but never handed over its recording is lost too.
        if let Some(a) = d.agents.iter().find(|a| a.lost.is_some()) {
            ending = Ending::AgentLost {
                agent: format!("agent {} ({})", a.index, a.host),
                why: a.lost.clone().unwrap_or_default(),
            };
        }
    }
    buckets.extend(series.finish());
    load_recording.buckets = buckets;

    let run_length = if ending == Ending::Completed {
        scenario.duration.get()
    } else {
        clock.elapsed().min(scenario.duration.get())
    };
    let mut record = observe::record(
        bucket,
        run_length,
        &phases,
        &load_recording,
        &dependency_recording,
    );
    let timelines = breakers.timelines(&record);
    record.breakers = timelines.observed;
    record.evidence = timelines.evidence;

    let mut run_errors = Vec::new();
    let c = load_recording.conservation;
    if !c.holds {
        run_errors.push(format!(
            "requests were not conserved: {} sent, but the outcome classes add up to {} with {} still in flight",
            c.sent, c.sum_of_classes, c.in_flight
        ));
    }
    if let (Ending::Completed, Some(options), Some(d)) = (&ending, &whole_timetable, &distributed) {
        // The agents' shares must add up to the timetable itself, arrival for arrival.
        let (spec, options) = (scenario.load.clone(), options.clone());
        let whole =
            tokio::task::spawn_blocking(move || loadgen::timetable_len(&spec, &options)).await;
        if let Ok(Ok(whole)) = whole {
            if whole != load_recording.intended {
                run_errors.push(format!(
                    "the {} agents issued {} arrivals, but the timetable holds {whole}",
                    d.agents.len(),
                    load_recording.intended
                ));
            }
        }
    }
    let stopped_by = match &ending {
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
    let verdicts = decisions.finish(&v.expectations, &record, stopped_by.as_deref());
    let disagreements = crosscheck::disagreements(&record.evidence);
    Ok(RunOutput {
        started: clock.wall,
        ending,
        record,
        load: load_recording,
        dependency: dependency_recording,
        inferred: timelines.inferred,
        disagreements,
        verdicts,
        run_errors,
        ca_pem,
        distributed,
        replicas,
    })
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}
