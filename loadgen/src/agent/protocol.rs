//! What an agent and the runner say to each other: one JSON object per line over one TCP connection that the
//! agent opens. Histograms travel as base64 V2+DEFLATE inside the JSON, as in every recording.
//!
//! The exchange, in order:
//! 1. the agent says [`ToRunner::Hello`] (its index, if the platform gave it one);
//! 2. the runner sends a few [`ToAgent::Ping`]s, each answered at once with the agent's wall clock
//!    ([`ToRunner::Pong`]): the exchange with the shortest round trip gives the agent's clock offset, within half
//!    that round trip (the NTP estimate);
//! 3. the runner sends the [`Plan`]: the load, the agent's share of the timetable and t = 0 on the agent's own
//!    clock;
//! 4. the agent says [`ToRunner::Started`], then streams each final [`Bucket`] and its progress while it runs,
//!    and ends with its [`Recording`] ([`ToRunner::Finished`]), or [`ToRunner::Failed`]. [`ToAgent::Stop`] ends
//!    the schedule early.
//!
//! Not for running the load (that is the agent, [`super::run`]) nor for merging (that is [`crate::merge`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use faultline_units::Dur;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use crate::recorder::Progress;
use crate::recording::{Bucket, Recording};
use crate::spec::LoadSpec;
use crate::Share;

/// The version of this exchange; an agent and a runner must speak the same one.
pub const PROTOCOL: u32 = 1;

/// The longest line either side accepts: a final recording with every histogram of a long run fits many times.
pub const MAX_LINE: usize = 64 * 1024 * 1024;

/// What an agent sends to the runner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToRunner {
    /// The first line: who is speaking.
    Hello {
        /// [`PROTOCOL`] as the agent knows it.
        protocol: u32,
        /// The agent's own version (`loadgen --version`).
        version: String,
        /// The index its platform gave it (a Kubernetes Indexed Job's `JOB_COMPLETION_INDEX`), if any; the
        /// runner assigns one otherwise.
        index: Option<u32>,
        /// Where it runs (host name and process id), to name it in reports and errors.
        host: String,
    },
    /// The answer to a ping: the agent's wall clock when it read the ping.
    Pong {
        /// The ping's sequence number.
        seq: u32,
        /// Nanoseconds since the Unix epoch on the agent's clock.
        wall_ns: u64,
    },
    /// The load has started on the agent.
    Started {
        /// How late the agent armed its load after t = 0 (zero when it was ready before, as it should be).
        late: Dur,
    },
    /// A bucket of the time series, final, in order from bucket 0.
    Bucket {
        /// Its index (its start divided by the bucket width).
        index: usize,
        /// The bucket.
        bucket: Bucket,
    },
    /// Counts so far, a few times a second.
    Progress {
        /// The snapshot.
        progress: Progress,
    },
    /// The agent's whole recording (its buckets already streamed), the last line before it closes.
    Finished {
        /// The recording, without its time series.
        recording: Box<Recording>,
    },
    /// The agent cannot go on; the last line before it closes.
    Failed {
        /// Why, in a sentence.
        why: String,
    },
}

/// What the runner sends to an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToAgent {
    /// Answer with a [`ToRunner::Pong`] at once.
    Ping {
        /// Echoed in the pong.
        seq: u32,
    },
    /// Run this.
    Plan {
        /// The plan.
        plan: Box<Plan>,
    },
    /// Stop the schedule now (Ctrl-C, a failed expectation, another agent lost); requests in flight finish.
    Stop,
    /// The runner will not use this agent (its index is taken or out of range, a protocol mismatch).
    Refused {
        /// Why.
        why: String,
    },
}

/// One agent's part of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Which share of the timetable this agent sends.
    pub share: Share,
    /// The whole load, as the scenario gives it; the share picks the agent's arrivals from its timetable.
    pub spec: LoadSpec,
    /// Where the load goes (`http://host:port` or `https://...`).
    pub base_url: String,
    /// How long the schedule runs from t = 0.
    pub duration: Dur,
    /// The run's seed (the timetable's randomness is the whole run's, so that the shares add up to it).
    pub seed: u64,
    /// The phases by name and start, as the runner's.
    pub phases: Vec<(String, Dur)>,
    /// The width of a time-series bucket.
    pub bucket: Dur,
    /// Hosts beyond loopback the scenario allows; the agent refuses any other target.
    pub allow_hosts: Vec<String>,
    /// t = 0 on the agent's own wall clock (its offset from the runner's already applied), in nanoseconds since
    /// the Unix epoch.
    pub start_unix_ns: u64,
    /// The PEM of the CAs to trust for an `https://` target when the scenario names a CA file, read by the runner
    /// so that an agent elsewhere needs no copy of the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_pem: Option<String>,
    /// Whether each request carries a trace id and a deadline, and its record is kept (the runner's
    /// `RunOptions::correlate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlate: Option<faultline_units::trace::Correlate>,
}

/// Why a line could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The connection failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection.
    #[error("the connection closed")]
    Closed,
    /// The line is not a message of this protocol.
    #[error("not a message of the agent protocol: {0}")]
    Malformed(String),
    /// The line is longer than [`MAX_LINE`].
    #[error("a line longer than {MAX_LINE} bytes")]
    TooLong,
}

/// Writes one message as one line and flushes it.
pub async fn write<W: AsyncWrite + Unpin>(
    w: &mut W,
    message: &impl Serialize,
) -> Result<(), WireError> {
    let mut line = serde_json::to_vec(message).map_err(|e| WireError::Malformed(e.to_string()))?;
    line.push(b'\n');
    w.write_all(&line).await?;
    w.flush().await?;
    Ok(())
}

/// Reads the next message; `buf` is reused between calls.
pub async fn read<R: AsyncBufRead + Unpin, M: for<'de> Deserialize<'de>>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Result<M, WireError> {
    buf.clear();
    let mut limited = tokio::io::AsyncReadExt::take(r, MAX_LINE as u64 + 1);
    let n = limited.read_until(b'\n', buf).await?;
    if n == 0 {
        return Err(WireError::Closed);
    }
    if buf.last() != Some(&b'\n') {
        return Err(if buf.len() > MAX_LINE {
            WireError::TooLong
        } else {
            WireError::Closed
        });
    }
    serde_json::from_slice(buf).map_err(|e| WireError::Malformed(e.to_string()))
}

/// Nanoseconds since the Unix epoch of a wall-clock time (0 before the epoch).
pub fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The wall-clock time of nanoseconds since the Unix epoch.
pub fn from_unix_ns(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_travel_one_per_line_and_a_closed_peer_is_told_apart_from_a_bad_line() {
        let mut wire = Vec::new();
        write(&mut wire, &ToAgent::Ping { seq: 7 }).await.unwrap();
        write(&mut wire, &ToAgent::Stop).await.unwrap();
        wire.extend_from_slice(b"{\"type\":\"nonsense\"}\n");
        wire.extend_from_slice(b"{\"type\":\"stop\"");
        let mut r = tokio::io::BufReader::new(&wire[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read::<_, ToAgent>(&mut r, &mut buf).await.unwrap(),
            ToAgent::Ping { seq: 7 }
        );
        assert_eq!(
            read::<_, ToAgent>(&mut r, &mut buf).await.unwrap(),
            ToAgent::Stop
        );
        assert!(matches!(
            read::<_, ToAgent>(&mut r, &mut buf).await,
            Err(WireError::Malformed(_))
        ));
        assert!(
            matches!(
                read::<_, ToAgent>(&mut r, &mut buf).await,
                Err(WireError::Closed)
            ),
            "a cut line"
        );
        assert!(matches!(
            read::<_, ToAgent>(&mut r, &mut buf).await,
            Err(WireError::Closed)
        ));
    }
}
