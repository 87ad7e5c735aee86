//! The agents at work: each is sent its plan (the load, its share, t = 0 on its own clock), then followed by a
//! task of its own that keeps its latest progress and its buckets. A bucket of the whole is merged and handed to
//! the run's series as soon as every agent has sent that bucket (or has ended), so the live line, the live
//! verdicts and abort checks see the whole load while it runs, a second or so behind, as with one process.
//!
//! An agent that fails, disconnects or never hands over its recording is lost: the run ends (exit 3, the agent
//! named), and what the others recorded is kept.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use faultline_units::Dur;
use loadgen::agent::protocol::{self, Plan, ToAgent, ToRunner};
use loadgen::{Bucket, LoadSpec, Progress, Recording, Share};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::register::{Agent, Registered};
use super::{AgentSummary, AgentsError, Distributed};

/// An agent that was lost, as the run's ending names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// "agent 2 (host pid 1234)".
    pub agent: String,
    /// What happened.
    pub why: String,
}

/// Where merged buckets go: as `loadgen::Series` says for one process.
enum Sink {
    Stream(std::sync::mpsc::Sender<Bucket>),
    Keep(Vec<Bucket>),
    Discard,
}

/// What the followers share with the run.
struct Board {
    progress: Vec<Option<Progress>>,
    /// Buckets received and not merged yet, by bucket index, one slot per agent.
    pending: BTreeMap<usize, Vec<Option<Bucket>>>,
    /// Per agent, how many buckets it has sent (the index of the next one).
    received: Vec<usize>,
    /// Per agent, whether it will send nothing more (finished or lost).
    ended: Vec<bool>,
    /// The next bucket of the whole to merge.
    next: usize,
    recordings: Vec<Option<Recording>>,
    late: Vec<Duration>,
    lost: Vec<Option<String>>,
    sink: Option<Sink>,
    /// How long each merge of a bucket took, for the figures of `bench/agents`.
    merge_times: Vec<Duration>,
}

impl Board {
    /// Merges every bucket that no agent can still add to, in order.
    fn merge_ready(&mut self) {
        let n = self.received.len();
        loop {
            let k = self.next;
            let complete = (0..n).all(|a| self.received[a] > k || self.ended[a]);
            if !complete {
                return;
            }
            let parts = self.pending.remove(&k);
            let nobody_has_it = (0..n).all(|a| self.received[a] <= k);
            if nobody_has_it {
                // Every agent has ended and none sent this bucket: the series is over.
                return;
            }
            let parts = parts.unwrap_or_default();
            let started = std::time::Instant::now();
            let merged = Bucket::merge(parts.iter().flatten());
            self.merge_times.push(started.elapsed());
            match merged {
                Ok(b) => match &mut self.sink {
                    Some(Sink::Stream(tx)) => {
                        let _ = tx.send(b);
                    }
                    Some(Sink::Keep(v)) => v.push(b),
                    Some(Sink::Discard) | None => {}
                },
                Err(e) => tracing::warn!("bucket {k} could not be merged: {e}"),
            }
            self.next += 1;
        }
    }

    fn all_ended(&self) -> bool {
        self.ended.iter().all(|e| *e)
    }
}

/// A load running on agents: the counterpart of `loadgen::LoadRun` for a distributed run.
pub struct AgentLoad {
    board: Arc<Mutex<Board>>,
    changed: Arc<Notify>,
    outboxes: Vec<mpsc::UnboundedSender<ToAgent>>,
    names: Vec<String>,
    clocks: Vec<(i64, u64)>,
    children: Vec<tokio::process::Child>,
    origin: Instant,
    phases: Vec<(String, Duration)>,
    bucket: Duration,
    duration: Duration,
}

fn lock(board: &Mutex<Board>) -> MutexGuard<'_, Board> {
    board.lock().unwrap_or_else(|p| p.into_inner())
}

/// The hex of a gRPC message file and the compiled `.proto` files, so that an agent elsewhere needs no copy of
/// them.
fn inline_files(spec: &mut LoadSpec) -> Result<Option<String>, String> {
    for (i, r) in spec.requests.iter_mut().enumerate() {
        if !r.proto.is_empty() {
            let protos = loadgen::spec::read_protos(&r.proto)
                .map_err(|why| format!("load.requests[{i}].proto: {why}"))?;
            r.proto_set = Some(protos.descriptor_set_base64());
            r.proto.clear();
        }
        if let Some(file) = r.message_file.take() {
            let bytes = loadgen::spec::read_message_file(&file)
                .map_err(|why| format!("load.requests[{i}].message_file: {why}"))?;
            r.message = Some(loadgen::spec::MessageSpec::Hex(
                bytes.iter().map(|b| format!("{b:02x}")).collect(),
            ));
        }
    }
    let ca = match spec.tls.as_mut().and_then(|t| t.ca.take()) {
        Some(path) => Some(
            std::fs::read_to_string(&path)
                .map_err(|e| format!("load.tls.ca: cannot read {}: {e}", path.display()))?,
        ),
        None => None,
    };
    Ok(ca)
}

impl AgentLoad {
    /// Sends every agent its plan, t = 0 being `wall` on the runner's clock (`origin` on its monotonic clock), and
    /// starts following them. `options.series` says where the merged buckets go, as for one process.
    pub fn start(
        registered: Registered,
        spec: &LoadSpec,
        options: loadgen::RunOptions,
        origin: Instant,
        wall: SystemTime,
    ) -> Result<AgentLoad, AgentsError> {
        let Registered { agents, children } = registered;
        let n = agents.len();
        let mut spec = spec.clone();
        let ca_pem = inline_files(&mut spec).map_err(|why| AgentsError::Plan {
            agent: "every agent".into(),
            why,
        })?;
        let sink = match options.series {
            loadgen::Series::Stream(tx) => Sink::Stream(tx),
            loadgen::Series::Keep => Sink::Keep(Vec::new()),
            loadgen::Series::Discard => Sink::Discard,
        };
        let board = Arc::new(Mutex::new(Board {
            progress: vec![None; n],
            pending: BTreeMap::new(),
            received: vec![0; n],
            ended: vec![false; n],
            next: 0,
            recordings: vec![None; n],
            late: vec![Duration::ZERO; n],
            lost: vec![None; n],
            sink: Some(sink),
            merge_times: Vec::new(),
        }));
        let changed = Arc::new(Notify::new());
        let t0 = protocol::unix_ns(wall);
        let mut outboxes = Vec::with_capacity(n);
        let mut names = Vec::with_capacity(n);
        let mut clocks = Vec::with_capacity(n);
        for (slot, agent) in agents.into_iter().enumerate() {
            let Agent {
                index,
                host,
                offset_ns,
                uncertainty_ns,
                reader,
                mut writer,
            } = agent;
            let name = format!("agent {index} ({host})");
            let plan = Plan {
                share: Share {
                    index,
                    of: n as u32,
                },
                spec: spec.clone(),
                base_url: options.base_url.clone(),
                duration: Dur(options.duration),
                seed: options.seed,
                phases: options
                    .phases
                    .iter()
                    .map(|(name, start)| (name.clone(), Dur(*start)))
                    .collect(),
                bucket: Dur(options.bucket),
                allow_hosts: options.allow_hosts.clone(),
                start_unix_ns: t0.saturating_add_signed(offset_ns),
                ca_pem: ca_pem.clone(),
                correlate: options.correlate.clone(),
            };
            let (tx, mut rx) = mpsc::unbounded_channel::<ToAgent>();
            let _ = tx.send(ToAgent::Plan {
                plan: Box::new(plan),
            });
            tokio::spawn(async move {
                while let Some(m) = rx.recv().await {
                    if protocol::write(&mut writer, &m).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(follow(slot, reader, board.clone(), changed.clone()));
            outboxes.push(tx);
            names.push(name);
            clocks.push((offset_ns, uncertainty_ns));
        }
        Ok(AgentLoad {
            board,
            changed,
            outboxes,
            names,
            clocks,
            children,
            origin,
            phases: options.phases,
            bucket: options.bucket,
            duration: options.duration,
        })
    }

    /// The whole load's progress: every agent's latest, added up.
    pub fn progress(&self) -> Progress {
        let board = lock(&self.board);
        let mut p = Progress::sum(board.progress.iter().flatten());
        p.elapsed = Dur(Instant::now().saturating_duration_since(self.origin));
        p
    }

    /// Stops every agent's schedule; requests in flight finish.
    pub fn stop(&self) {
        for tx in &self.outboxes {
            let _ = tx.send(ToAgent::Stop);
        }
    }

    /// The first agent lost so far, if any.
    pub fn lost(&mut self) -> Option<Lost> {
        let slot = lock(&self.board).lost.iter().position(Option::is_some)?;
        Some(self.describe_loss(slot))
    }

    fn describe_loss(&mut self, slot: usize) -> Lost {
        let why = lock(&self.board).lost[slot].clone().unwrap_or_default();
        // A local agent's own end says more than its closed connection.
        let exited = self
            .children
            .get_mut(slot)
            .and_then(|c| c.try_wait().ok().flatten())
            .map(|status| format!(" (its process exited: {status})"))
            .unwrap_or_default();
        Lost {
            agent: self.names[slot].clone(),
            why: format!("{why}{exited}"),
        }
    }

    /// Waits until every agent has handed over its recording or is lost (those still running at `deadline` are
    /// lost), merges what arrived, and returns it with a summary per agent. The merged series has gone to the
    /// run's series (or is in the recording, as `Series` asked).
    pub async fn finish(mut self, deadline: Instant) -> (Recording, Distributed) {
        loop {
            let notified = self.changed.notified();
            if lock(&self.board).all_ended() {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let mut board = lock(&self.board);
                for slot in 0..board.ended.len() {
                    if !board.ended[slot] {
                        board.ended[slot] = true;
                        board.lost[slot] = Some(
                            "it had not handed over its recording by the run's deadline".into(),
                        );
                    }
                }
                break;
            }
        }
        // Local agents exit once they have handed over their recordings: reap them, so that their CPU time is
        // counted in this process's children (what `time faultline run --agents N` shows).
        for child in &mut self.children {
            let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        }
        let mut losses: Vec<Option<Lost>> = Vec::with_capacity(self.names.len());
        for slot in 0..self.names.len() {
            let was_lost = lock(&self.board).lost[slot].is_some();
            losses.push(was_lost.then(|| self.describe_loss(slot)));
        }
        let mut board = lock(&self.board);
        board.merge_ready();
        let kept = match board.sink.take() {
            Some(Sink::Keep(v)) => v,
            // Dropping the sender ends the run's series.
            _ => Vec::new(),
        };
        let mut summaries = Vec::with_capacity(self.names.len());
        for (slot, name) in self.names.iter().enumerate() {
            let rec = board.recordings[slot].as_ref();
            let (offset, uncertainty) = self.clocks[slot];
            summaries.push(AgentSummary {
                index: slot as u32,
                host: name
                    .split_once(" (")
                    .map(|(_, h)| h.trim_end_matches(')').to_string())
                    .unwrap_or_default(),
                clock_offset_ms: offset as f64 / 1e6,
                clock_uncertainty_ms: uncertainty as f64 / 1e6,
                late_ms: board.late[slot].as_secs_f64() * 1e3,
                intended: rec.map_or(0, |r| r.intended),
                sent: rec.map_or(0, |r| r.sent),
                outcomes: rec.map_or(0, |r| r.totals.total()),
                in_flight: rec.map_or(0, |r| r.still_in_flight),
                lost: losses[slot].as_ref().map(|l| l.why.clone()),
            });
        }
        let parts: Vec<Recording> = board.recordings.iter().flatten().cloned().collect();
        let distributed = Distributed {
            buckets_merged: board.merge_times.len() as u64,
            bucket_merge_p99_ms: merge_p99(&board.merge_times).as_secs_f64() * 1e3,
            agents: summaries,
        };
        drop(board);
        let mut recording = Recording::merge(&parts).unwrap_or_else(|e| {
            if !parts.is_empty() {
                tracing::warn!("the agents' recordings could not be merged: {e}");
            }
            Recording::empty(&self.phases, self.bucket, self.duration)
        });
        recording.buckets = kept;
        (recording, distributed)
    }
}

/// The 99th percentile of the merge times (zero for none).
fn merge_p99(times: &[Duration]) -> Duration {
    let mut t = times.to_vec();
    t.sort();
    t.get((t.len() * 99 / 100).min(t.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

/// Follows one agent until it hands over its recording or is lost.
async fn follow(
    slot: usize,
    mut reader: tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
    board: Arc<Mutex<Board>>,
    changed: Arc<Notify>,
) {
    let mut buf = Vec::new();
    let lost = |why: String| {
        let mut b = lock(&board);
        b.lost[slot] = Some(why);
        b.ended[slot] = true;
        b.merge_ready();
        drop(b);
        changed.notify_waiters();
    };
    loop {
        match protocol::read::<_, ToRunner>(&mut reader, &mut buf).await {
            Ok(ToRunner::Started { late }) => lock(&board).late[slot] = late.get(),
            Ok(ToRunner::Bucket { index, bucket }) => {
                let mut b = lock(&board);
                if index != b.received[slot] {
                    drop(b);
                    lost(format!(
                        "it sent bucket {index} where bucket {} was due",
                        lock(&board).received[slot]
                    ));
                    return;
                }
                let n = b.received.len();
                b.pending.entry(index).or_insert_with(|| vec![None; n])[slot] = Some(bucket);
                b.received[slot] = index + 1;
                b.merge_ready();
            }
            Ok(ToRunner::Progress { progress }) => lock(&board).progress[slot] = Some(progress),
            Ok(ToRunner::Finished { recording }) => {
                let mut b = lock(&board);
                b.recordings[slot] = Some(*recording);
                b.ended[slot] = true;
                b.merge_ready();
                drop(b);
                changed.notify_waiters();
                return;
            }
            Ok(ToRunner::Failed { why }) => {
                lost(why);
                return;
            }
            Ok(ToRunner::Hello { .. } | ToRunner::Pong { .. }) => {}
            Err(e) => {
                lost(format!(
                    "its connection ended before it handed over its recording ({e})"
                ));
                return;
            }
        }
    }
}
