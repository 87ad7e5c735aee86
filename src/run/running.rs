//! A run while it goes on, in its three steps: `start` (the dependency, the webhook receiver, the SUT, the agents,
//! then the one clock, the load and the schedule armed for t = 0 and the breakers watched), `follow` (the loop that
//! ticks four times a second until the load ends or something ends the run), and `stop` (the load finished or cut
//! short, everything stopped, the recordings collected).
//!
//! Not for judging what was recorded (`run::judge` and `expect`) nor for how each part starts (their own rooms).

use std::io::IsTerminal;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::dependency::Dependency;
use super::load::Load;
use super::replicas::ReplicaRecording;
use super::sut::{Started, Sut};
use super::verdicts::{LiveVerdicts, Series};
use super::watch::BreakerWatch;
use super::{live, Clock, Ending, OnTick, RunError, Signals, Tick, AGENT_LEAD, DEFAULT_SEED, LEAD};
use crate::agents::{AgentsOptions, Distributed};
use crate::breaker::webhook::Webhook;
use crate::observe;
use crate::output::OutputLine;
use crate::record::RunRecord;
use crate::scenario::Validated;

/// How often the run's loop looks at the run.
const TICK: Duration = Duration::from_millis(250);

/// How often the live record grows and the expectations that can be are decided.
const DECIDE_EVERY: Duration = Duration::from_secs(1);

/// A started run: every part running on one clock.
pub(super) struct Running {
    bucket: Duration,
    phases: Vec<(String, Duration)>,
    dependency: Dependency,
    webhook: Webhook,
    sut: Sut,
    lines: mpsc::UnboundedReceiver<OutputLine>,
    clock: Clock,
    load: Load,
    /// The whole timetable's options when agents share it, to count its arrivals after the run.
    whole_timetable: Option<loadgen::RunOptions>,
    breakers: BreakerWatch,
    series: Series,
    /// A signal that came before t = 0: the run ends as soon as it starts.
    aborted_early: Option<&'static str>,
    decisions: LiveVerdicts,
    /// loadgen's buckets taken so far.
    buckets: Vec<loadgen::Bucket>,
    /// The record as it grows during the run, for the live verdicts. It holds the latency bytes of the buckets it
    /// took (`observe::append_sut_taking`) until the run ends.
    live_record: RunRecord,
    /// The first bucket of faultd's recording the next read asks for: those before it are settled in the record.
    dependency_from: usize,
    deadline: Instant,
}

/// What a stopped run hands to judging.
pub(super) struct Stopped {
    pub ending: Ending,
    pub clock: Clock,
    pub bucket: Duration,
    pub phases: Vec<(String, Duration)>,
    pub breakers: BreakerWatch,
    pub decisions: LiveVerdicts,
    pub load: loadgen::Recording,
    pub distributed: Option<Distributed>,
    pub whole_timetable: Option<loadgen::RunOptions>,
    pub dependency: faultd::Recording,
    pub replicas: Vec<ReplicaRecording>,
    pub ca_pem: Option<String>,
    /// Every call faultd recorded one by one, when the run follows its requests.
    pub traced_calls: Vec<faultd::recorder::TracedCall>,
}

impl Running {
    /// Starts the dependency, the webhook receiver and the SUT, gathers the agents, fixes t = 0, arms the load and
    /// the schedule for it and starts watching the breakers.
    pub(super) async fn start(
        v: &Validated,
        agents: Option<&AgentsOptions>,
        signals: &mut Signals,
    ) -> Result<Running, RunError> {
        let scenario = &v.scenario;
        let bucket = scenario
            .bucket
            .map(|b| b.get())
            .unwrap_or(Duration::from_millis(100));
        let seed = scenario.seed.unwrap_or(DEFAULT_SEED);
        let correlate = v.correlation();
        let dependency = Dependency::start(scenario, seed, bucket, correlate.clone()).await?;
        let webhook = Webhook::serve().await.map_err(RunError::Webhook)?;
        let (lines_tx, lines) = mpsc::unbounded_channel::<OutputLine>();
        let (sut, mut aborted_early) = match Sut::start(
            scenario,
            &dependency,
            webhook.url(),
            seed,
            lines_tx,
            signals,
        )
        .await?
        {
            Started::Ready(s) => (s, None),
            Started::Interrupted(s, signal) => (s, Some(signal)),
        };

        // Agents register and have their clocks measured before t = 0 is fixed. A signal meanwhile stops the run
        // as one during the SUT's start does.
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
            correlate,
        };
        let whole_timetable = registered.is_some().then(|| loadgen::RunOptions {
            series: loadgen::Series::Discard,
            ..load_options.clone()
        });
        let load = Load::start(
            &scenario.load,
            load_options,
            clock.origin,
            clock.wall,
            registered,
        )
        .map_err(RunError::Load)?;
        // The load waits for t = 0 on its own; an external faultd starts its schedule when the request reaches it,
        // so the request is sent at t = 0, after the load is armed.
        if let Err(e) = dependency.start_schedule(clock.origin).await {
            load.stop();
            return Err(e);
        }
        let breakers = BreakerWatch::start(v, &sut.url, webhook.events(), clock.origin, clock.wall);
        let deadline = clock.origin
            + scenario.duration.get()
            + scenario.load.timeout.get()
            + Duration::from_secs(30);
        Ok(Running {
            bucket,
            phases,
            dependency,
            webhook,
            sut,
            lines,
            clock,
            load,
            whole_timetable,
            breakers,
            series,
            aborted_early,
            decisions: LiveVerdicts::new(&v.expectations),
            buckets: Vec::new(),
            live_record: RunRecord::empty(bucket),
            dependency_from: 0,
            deadline,
        })
    }

    /// Follows the run until the load ends, a signal, the SUT dying, a decided failure that stops the run, an
    /// agent lost, or the deadline; says how it ended.
    pub(super) async fn follow(
        &mut self,
        v: &Validated,
        on_tick: Option<OnTick<'_>>,
        signals: &mut Signals,
    ) -> Ending {
        let live = std::io::stderr().is_terminal();
        let judge_live = live || on_tick.is_some() || LiveVerdicts::can_stop(&v.expectations);
        let end_of_schedule = self.clock.origin + v.scenario.duration.get();
        let mut ticker = tokio::time::interval(TICK);
        let mut next_decision = Instant::now() + DECIDE_EVERY;
        let ending = loop {
            if let Some(signal) = self.aborted_early {
                break Ending::Aborted {
                    signal: signal.to_string(),
                };
            }
            tokio::select! {
                _ = ticker.tick() => {
                    if let Some(ending) = self.tick(v, live, judge_live, &mut next_decision, on_tick).await {
                        break ending;
                    }
                    if Instant::now() >= end_of_schedule {
                        break Ending::Completed;
                    }
                    if Instant::now() >= self.deadline {
                        break Ending::Deadline;
                    }
                }
                Some(line) = self.lines.recv() => self.breakers.push_line(line),
                name = signals.recv() => break Ending::Aborted { signal: name.to_string() },
            }
        };
        if live {
            eprint!("\r\x1b[2K");
        }
        ending
    }

    /// One tick of the loop: the SUT still alive, the live record grown and the expectations decided once a
    /// second, the terminal line drawn, `on_tick` called, the agents still there. An ending when one came.
    async fn tick(
        &mut self,
        v: &Validated,
        live: bool,
        judge_live: bool,
        next_decision: &mut Instant,
        on_tick: Option<OnTick<'_>>,
    ) -> Option<Ending> {
        if let Some(status) = self.sut.exited() {
            // Let the last output lines arrive before they are kept.
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Some(Ending::SutDied {
                status,
                last_lines: self.sut.last_lines(),
            });
        }
        if judge_live && Instant::now() >= *next_decision {
            *next_decision += DECIDE_EVERY;
            if let Some(expectation) = self.decide(v, live).await {
                return Some(Ending::StoppedOnFailure { expectation });
            }
        }
        // The load's progress is read only for someone who shows it.
        let progress = (live || on_tick.is_some()).then(|| self.load.progress());
        if let (true, Some(progress)) = (live, &progress) {
            let decided = live::decided_words(&v.expectations, self.decisions.decided());
            live::draw(
                self.clock.elapsed(),
                &self.phases,
                progress,
                self.dependency.in_flight(),
                self.dependency.unmatched(),
                &self.breakers,
                &decided,
            );
        }
        if let (Some(on_tick), Some(progress)) = (on_tick, &progress) {
            on_tick(&Tick {
                elapsed: self.clock.elapsed(),
                phases: &self.phases,
                progress,
                buckets: &self.buckets,
                live: &self.live_record,
                breakers: &self.breakers,
                decided: self.decisions.decided(),
            });
        }
        self.load.lost().map(|lost| Ending::AgentLost {
            agent: lost.agent,
            why: lost.why,
        })
    }

    /// Grows the live record by the buckets that arrived and decides what can be decided; the expectation whose
    /// failure stops the run, if one did.
    async fn decide(&mut self, v: &Validated, live: bool) -> Option<String> {
        let mut fresh = self.series.take_new();
        observe::append_sut_taking(&mut self.live_record, &mut fresh);
        self.buckets.extend(fresh);
        let covered = self.bucket * self.buckets.len() as u32;
        let from = self.dependency_from;
        let rec = self.dependency.recording_since(from).await.ok()?;
        observe::advance_since(&mut self.live_record, covered, &self.phases, &rec, from);
        self.dependency_from = observe::next_read_from(&self.live_record, from);
        let t = self.breakers.timelines(&self.live_record);
        self.live_record.breakers = t.observed;
        self.live_record.evidence = t.evidence;
        self.live_record.sut_metrics = t.metrics;
        let (new, stop) = self.decisions.update(&v.expectations, &self.live_record);
        if live {
            for verdict in &new {
                live::announce(self.clock.elapsed(), verdict);
            }
        }
        stop
    }

    /// Ends the run: stops the load and returns faultd to healthy unless the run completed, lets the requests in
    /// flight finish, stops the dependency and the SUT, and collects every recording.
    pub(super) async fn stop(
        self,
        mut ending: Ending,
        signals: &mut Signals,
    ) -> Result<Stopped, RunError> {
        let Running {
            bucket,
            phases,
            dependency,
            webhook,
            sut,
            mut lines,
            clock,
            load,
            whole_timetable,
            mut breakers,
            series,
            decisions,
            mut buckets,
            live_record,
            deadline,
            ..
        } = self;
        if ending != Ending::Completed {
            load.stop();
            dependency.reset_to_healthy();
        }
        // Let in-flight requests finish. The wait is bounded by the client timeout (and the deadline), so a signal
        // here does not cut it short, which would lose the recording: it marks the run aborted and the wait goes
        // on.
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
        while let Ok(line) = lines.try_recv() {
            breakers.push_line(line);
        }
        let dependency_recording = dependency.final_recording().await;
        let traced_calls = if load_recording
            .as_ref()
            .is_some_and(|(l, _)| !l.requests.is_empty())
        {
            dependency.traced_calls().await
        } else {
            Ok(Vec::new())
        };
        let ca_pem = dependency.ca_pem();
        dependency.stop().await;
        sut.stop().await;
        drop(webhook);
        let (dependency_recording, replicas) = dependency_recording?;
        let traced_calls = traced_calls?;
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
        observe::restore_latency(&live_record, &mut buckets);
        drop(live_record);
        buckets.extend(series.finish());
        load_recording.buckets = buckets;
        Ok(Stopped {
            ending,
            clock,
            bucket,
            phases,
            breakers,
            decisions,
            load: load_recording,
            distributed,
            whole_timetable,
            dependency: dependency_recording,
            replicas,
            ca_pem,
            traced_calls,
        })
    }
}
