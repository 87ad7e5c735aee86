//! A service under test that is a command: started in a process group of its own, its output captured (the last
//! lines for error reports, every line for log-based breaker observation and for a readiness line), readiness
//! probed with a deadline, and the whole group stopped at the end so that nothing is left behind.
//!
//! Not for the in-process demo nor for a SUT that is already running (`sut` chooses between the three).

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use faultline_units::Dur;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::ready::{OutputWatch, Probe};
use crate::output::OutputLine;

/// How many output lines are kept for error reports.
const KEPT_LINES: usize = 40;

/// The longest one readiness attempt may take before the next one starts.
const ATTEMPT: Duration = Duration::from_secs(1);

/// A running SUT process.
pub struct ChildSut {
    child: Child,
    /// The process group (the child's pid, taken at spawn: `Child::id` is gone once the child is reaped, and the
    /// group may outlive it).
    group: Option<u32>,
    last_lines: Arc<Mutex<VecDeque<String>>>,
}

/// Why a SUT command could not be started or did not become ready.
#[derive(Debug, thiserror::Error)]
pub enum SutError {
    #[error("cannot start the SUT command {program:?}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("the SUT exited before it was ready ({status}); its last output:\n{last_lines}")]
    ExitedEarly { status: String, last_lines: String },
    /// `reason` names the kind of readiness and what the last attempt saw.
    #[error("{reason}; its last output:\n{last_lines}")]
    NotReady { reason: String, last_lines: String },
    #[error("cannot probe the SUT's readiness: {0}")]
    Unprobeable(String),
}

impl ChildSut {
    /// Starts `argv` with `env` in a process group of its own; every output line goes to `lines`, and to `watch`
    /// (a readiness line looked for) if there is one.
    pub fn start(
        argv: &[String],
        env: &[(String, String)],
        lines: mpsc::UnboundedSender<OutputLine>,
        watch: Option<Arc<OutputWatch>>,
    ) -> Result<Self, SutError> {
        let (program, args) = argv.split_first().ok_or_else(|| SutError::Spawn {
            program: String::new(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"),
        })?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd.spawn().map_err(|source| SutError::Spawn {
            program: program.clone(),
            source,
        })?;
        let group = child.id();
        let last_lines = Arc::new(Mutex::new(VecDeque::with_capacity(KEPT_LINES)));
        if let Some(out) = child.stdout.take() {
            tokio::spawn(read_lines(
                BufReader::new(out),
                last_lines.clone(),
                lines.clone(),
                watch.clone(),
            ));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(read_lines(
                BufReader::new(err),
                last_lines.clone(),
                lines,
                watch,
            ));
        }
        Ok(ChildSut {
            child,
            group,
            last_lines,
        })
    }

    /// The last lines the SUT printed, oldest first.
    pub fn last_lines(&self) -> String {
        let lines = self
            .last_lines
            .lock()
            .map(|l| l.iter().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        if lines.is_empty() {
            "(no output)".into()
        } else {
            lines.join("\n")
        }
    }

    /// `Some(status)` if the process has exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }

    /// Probes until `probe` passes, the process exits, or `timeout` passes. No attempt outlives the deadline, so a
    /// SUT that accepts and never answers is not waited for longer than the scenario says.
    pub async fn wait_ready(&mut self, probe: &Probe, timeout: Duration) -> Result<(), SutError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = String::from("none finished");
        loop {
            if let Some(status) = self.exited() {
                // The last lines of a SUT that died are still on their way through the pipes.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Err(SutError::ExitedEarly {
                    status,
                    last_lines: self.last_lines(),
                });
            }
            // Checked before an attempt, not after the pause: what the last whole attempt saw is the news.
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(SutError::NotReady {
                    reason: probe.not_ready(Dur(timeout), &last),
                    last_lines: self.last_lines(),
                });
            }
            let limit = left.min(ATTEMPT);
            last = match tokio::time::timeout(limit, probe.attempt()).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(seen)) => seen,
                Err(_) => format!("no answer within {}", Dur(limit)),
            };
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the whole process group: SIGTERM, then SIGKILL to whatever is left of the group after `grace`. The
    /// wait is for every member, not just the process faultline started: a worker that ignores SIGTERM must not
    /// outlive the run because its parent exited politely (nor must the group of a SUT that already died).
    pub async fn stop(mut self, grace: Duration) {
        #[cfg(unix)]
        if let Some(group) = self.group {
            let group = group as libc::pid_t;
            signal_group(group, libc::SIGTERM);
            let end = tokio::time::Instant::now() + grace;
            let mut killed = false;
            loop {
                // Reap the leader as soon as it exits, so that it does not linger as a zombie member.
                let _ = self.child.try_wait();
                if !group_alive(group) {
                    break;
                }
                let now = tokio::time::Instant::now();
                if now >= end && !killed {
                    signal_group(group, libc::SIGKILL);
                    killed = true;
                } else if now >= end + Duration::from_secs(1) {
                    // SIGKILL cannot be refused; a member still listed is in uninterruptible sleep.
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let _ = self.child.kill().await;
        let _ = self.child.wait().await;
    }
}

#[cfg(unix)]
fn signal_group(group: libc::pid_t, signal: libc::c_int) {
    // SAFETY: killpg only sends a signal; the group is our child's own (process_group(0) in `start`).
    unsafe {
        libc::killpg(group, signal);
    }
}

/// Whether any process of the group is still running (zombies waiting for their reaper do not count).
#[cfg(unix)]
fn group_alive(group: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the group exists.
    if unsafe { libc::killpg(group, 0) } != 0 {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        // "pid (comm) state ppid pgrp ...": split after the last ')', as comm may hold spaces.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).and_then(|p| p.parse::<libc::pid_t>().ok());
        pgrp == Some(group) && state != "Z" && state != "X"
    })
}

async fn read_lines<R: tokio::io::AsyncRead + Unpin>(
    reader: BufReader<R>,
    last: Arc<Mutex<VecDeque<String>>>,
    tx: mpsc::UnboundedSender<OutputLine>,
    watch: Option<Arc<OutputWatch>>,
) {
    let mut lines = reader.lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(w) = &watch {
            w.offer(&line);
        }
        if let Ok(mut l) = last.lock() {
            if l.len() == KEPT_LINES {
                l.pop_front();
            }
            l.push_back(line.clone());
        }
        let _ = tx.send(OutputLine {
            at: tokio::time::Instant::now(),
            text: line,
        });
    }
}
