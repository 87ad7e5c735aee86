//! Agent mode: one share of a distributed load. The agent dials the runner, has its clock compared, receives its
//! [`protocol::Plan`], runs its share of the timetable from the shared t = 0, and streams each bucket back as it
//! becomes final, then its whole recording. The runner adds the shares up ([`crate::merge`]) and judges the whole.
//!
//! The same code runs for `loadgen agent` on a machine of its own (a Kubernetes Indexed Job, say) and for the
//! local agent processes of `faultline run --agents N`.
//!
//! Not for the runner's side (the `faultline` runner keeps that) nor for the load itself ([`crate::start`]).

pub mod protocol;

use std::time::{Duration, SystemTime};

use faultline_units::Dur;
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::{RunOptions, Series};
use protocol::{Plan, ToAgent, ToRunner, WireError};

/// How often an agent sends its progress and the buckets that became final.
const REPORT_EVERY: Duration = Duration::from_millis(250);

/// How an agent finds its runner.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The runner's agent listener, `host:port`.
    pub runner: String,
    /// The index this agent's platform gave it, if any.
    pub index: Option<u32>,
    /// How long to keep dialling a runner that is not listening yet (its pod may start after the agents').
    pub connect_for: Duration,
}

/// Why an agent stopped without handing over a whole recording.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The runner could not be reached within the time allowed.
    #[error("cannot reach the runner at {runner} within {secs:.0} s: {why}")]
    Connect {
        /// The address dialled.
        runner: String,
        /// How long it tried.
        secs: f64,
        /// The last error.
        why: String,
    },
    /// The runner refused this agent.
    #[error("the runner refused this agent: {0}")]
    Refused(String),
    /// The plan cannot be run here (a target this agent may not send to, a file it cannot read).
    #[error("cannot run the plan: {0}")]
    Plan(String),
    /// t = 0 had passed by more than a bucket when the plan arrived.
    #[error("the plan arrived {late:.3} s after t = 0, more than a bucket ({bucket:.3} s) late")]
    Late {
        /// Seconds late.
        late: f64,
        /// The bucket width in seconds.
        bucket: f64,
    },
    /// The connection to the runner failed or carried something else than the protocol.
    #[error("lost the runner: {0}")]
    Wire(#[from] WireError),
}

impl AgentError {
    /// The exit code of `loadgen agent`: 2 for a plan that is wrong, 3 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            AgentError::Plan(_) => 2,
            _ => 3,
        }
    }
}

/// What an agent did, for its own log line.
#[derive(Debug, Clone, Copy)]
pub struct AgentReport {
    /// The share it ran.
    pub share: crate::Share,
    /// Arrivals it issued.
    pub intended: u64,
    /// Whether it was told to stop early.
    pub stopped_early: bool,
}

/// Dials the runner and keeps trying until `for_` has passed.
async fn dial(runner: &str, for_: Duration) -> Result<TcpStream, AgentError> {
    let started = Instant::now();
    loop {
        match TcpStream::connect(runner).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) if started.elapsed() >= for_ => {
                return Err(AgentError::Connect {
                    runner: runner.to_string(),
                    secs: for_.as_secs_f64(),
                    why: e.to_string(),
                })
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Where this process runs, to name it: the host name and the process id.
fn whereabouts() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    format!("{host} pid {}", std::process::id())
}

/// Runs one agent to its end: dial, register, run the plan, hand over the recording.
pub async fn run(options: AgentOptions) -> Result<AgentReport, AgentError> {
    let stream = dial(&options.runner, options.connect_for).await?;
    let (read_half, mut write_half) = stream.into_split();
    let mut reader = BufReader::new(read_half);
    let mut buf = Vec::new();
    protocol::write(
        &mut write_half,
        &ToRunner::Hello {
            protocol: protocol::PROTOCOL,
            version: env!("CARGO_PKG_VERSION").to_string(),
            index: options.index,
            host: whereabouts(),
        },
    )
    .await?;
    // Registration: answer pings at once until the plan comes.
    let plan = loop {
        match protocol::read::<_, ToAgent>(&mut reader, &mut buf).await? {
            ToAgent::Ping { seq } => {
                let wall_ns = protocol::unix_ns(SystemTime::now());
                protocol::write(&mut write_half, &ToRunner::Pong { seq, wall_ns }).await?;
            }
            ToAgent::Plan { plan } => break *plan,
            ToAgent::Refused { why } => return Err(AgentError::Refused(why)),
            ToAgent::Stop => return Err(AgentError::Refused("stopped before the plan".into())),
        }
    };
    // From here on every line to the runner goes through one writer task, so that the bucket stream, progress and
    // pongs never interleave mid-line.
    let (out, mut outbox) = mpsc::unbounded_channel::<ToRunner>();
    let writer = tokio::spawn(async move {
        while let Some(m) = outbox.recv().await {
            protocol::write(&mut write_half, &m).await?;
        }
        Ok::<(), WireError>(())
    });
    let result = run_plan(plan, &mut reader, &out).await;
    if let Err(e) = &result {
        let _ = out.send(ToRunner::Failed { why: e.to_string() });
    }
    drop(out);
    // The last lines must reach the runner before the process ends.
    match writer.await {
        Ok(Err(e)) if result.is_ok() => return Err(e.into()),
        _ => {}
    }
    result
}

/// The load's origin on this machine's monotonic clock from t = 0 on its wall clock, and how late it is already.
fn origin_of(start_unix_ns: u64) -> (Instant, Duration) {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let start = protocol::from_unix_ns(start_unix_ns);
    match start.duration_since(wall) {
        Ok(ahead) => (now + ahead, Duration::ZERO),
        Err(behind) => {
            let late = behind.duration();
            (now.checked_sub(late).unwrap_or(now), late)
        }
    }
}

/// Writes the plan's CA to a file of the agent's own, since the TLS client reads its trust from a file.
fn ca_file(pem: &str) -> Result<std::path::PathBuf, AgentError> {
    let path = std::env::temp_dir().join(format!("loadgen-agent-ca-{}.pem", std::process::id()));
    std::fs::write(&path, pem)
        .map_err(|e| AgentError::Plan(format!("cannot write the CA to {}: {e}", path.display())))?;
    Ok(path)
}

async fn run_plan(
    plan: Plan,
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    out: &mpsc::UnboundedSender<ToRunner>,
) -> Result<AgentReport, AgentError> {
    let (origin, late) = origin_of(plan.start_unix_ns);
    if late > plan.bucket.get() {
        return Err(AgentError::Late {
            late: late.as_secs_f64(),
            bucket: plan.bucket.as_secs_f64(),
        });
    }
    let mut spec = plan.spec;
    // The runner sends every message inline; a plan that names a file would have the agent read its own disk on
    // another's word.
    if let Some(i) = spec.requests.iter().position(|r| r.message_file.is_some()) {
        return Err(AgentError::Plan(format!(
            "load.requests[{i}].message_file: an agent reads no file a plan names; the runner sends the message inline"
        )));
    }
    if let Some(i) = spec.requests.iter().position(|r| !r.proto.is_empty()) {
        return Err(AgentError::Plan(format!(
            "load.requests[{i}].proto: an agent reads no file a plan names; the runner sends the files compiled"
        )));
    }
    let ca = match &plan.ca_pem {
        Some(pem) => Some(ca_file(pem)?),
        None => None,
    };
    if let Some(path) = &ca {
        spec.tls.get_or_insert_with(Default::default).ca = Some(path.clone());
    }
    let (buckets_tx, buckets) = std::sync::mpsc::channel();
    let bucket_width = plan.bucket.get();
    let options = RunOptions {
        base_url: plan.base_url,
        duration: plan.duration.get(),
        seed: plan.seed,
        phases: plan.phases.into_iter().map(|(n, s)| (n, s.get())).collect(),
        bucket: bucket_width,
        allow_hosts: plan.allow_hosts,
        series: Series::Stream(buckets_tx),
        share: plan.share,
        correlate: plan.correlate,
    };
    let started = crate::start(spec, options, origin);
    if let Some(path) = &ca {
        // The TLS client has read it.
        let _ = std::fs::remove_file(path);
    }
    let load = started.map_err(|e| AgentError::Plan(e.to_string()))?;
    let _ = out.send(ToRunner::Started { late: Dur(late) });
    let watch = load.watch();
    let mut finishing = tokio::spawn(load.finish());
    let mut tick = tokio::time::interval(REPORT_EVERY);
    let mut buf = Vec::new();
    let mut runner_open = true;
    let forward = |index: &mut usize| {
        for bucket in buckets.try_iter() {
            let _ = out.send(ToRunner::Bucket {
                index: *index,
                bucket,
            });
            *index += 1;
        }
    };
    let mut next_bucket = 0usize;
    let recording = loop {
        tokio::select! {
            done = &mut finishing => {
                break done.map_err(|e| AgentError::Plan(format!("the load's task ended abnormally: {e}")))?;
            }
            _ = tick.tick() => {
                forward(&mut next_bucket);
                let _ = out.send(ToRunner::Progress { progress: watch.progress() });
            }
            message = protocol::read::<_, ToAgent>(reader, &mut buf), if runner_open => match message {
                Ok(ToAgent::Stop) => watch.stop(),
                Ok(ToAgent::Ping { seq }) => {
                    let wall_ns = protocol::unix_ns(SystemTime::now());
                    let _ = out.send(ToRunner::Pong { seq, wall_ns });
                }
                Ok(_) => {}
                Err(e) => {
                    // Nobody is left to send the results to: stop, and say why once the requests in flight end.
                    watch.stop();
                    runner_open = false;
                    tracing::warn!("lost the runner while running: {e}");
                }
            },
        }
    };
    // The recorder closed the series when it handed over the recording: what is left is the last buckets.
    forward(&mut next_bucket);
    if !runner_open {
        return Err(AgentError::Wire(WireError::Closed));
    }
    let report = AgentReport {
        share: plan.share,
        intended: recording.intended,
        stopped_early: recording.stopped_early,
    };
    let _ = out.send(ToRunner::Finished {
        recording: Box::new(recording),
    });
    Ok(report)
}
