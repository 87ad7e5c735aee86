//! What a Redis route recorded, as data: per command name its calls, error replies by first word, most in flight
//! and latency, over the run and per phase; per entry its matched and taken counts; connections not RESP.
//!
//! For: the form in `/recording` (under the TCP route, and in the route of calls the runner reads) and the sum of
//! several replicas'. Not for: counting (`crate::tcp::protocol::redis::record` does) or deciding anything.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::MatchCounts;

/// What one command name counted over a span (a phase, or the run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandCounts {
    /// Commands answered (by the server, or by an entry's error), or closed or hung by an entry.
    pub calls: u64,
    /// Error replies by their first word (`OOM`, `LOADING`, `ERR`), faultd's and the server's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    /// The most commands of this name waiting for their reply at once.
    pub max_in_flight: u64,
    /// From the read that brought the command's last byte to the read that brought its reply's last byte (or, for
    /// faultd's own error or a delayed reply, to when it was written), ns; in JSON, base64 of the
    /// HdrHistogram V2+DEFLATE encoding. Hung and closed commands have none.
    #[serde(with = "faultline_hdr::as_base64::histogram")]
    pub latency: Histogram<u64>,
}

impl Default for CommandCounts {
    fn default() -> CommandCounts {
        CommandCounts {
            calls: 0,
            errors: BTreeMap::new(),
            max_in_flight: 0,
            latency: faultline_hdr::new_histogram(),
        }
    }
}

impl CommandCounts {
    /// Error replies of every word.
    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Adds `other`'s counts (maxima add up: several replicas' commands were in flight apart).
    pub fn add(&mut self, other: &CommandCounts) {
        self.calls += other.calls;
        for (word, n) in &other.errors {
            *self.errors.entry(word.clone()).or_default() += n;
        }
        self.max_in_flight += other.max_in_flight;
        let _ = self.latency.add(&other.latency);
    }
}

/// One command name's recording.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CommandRecording {
    /// Commands waiting for their reply now.
    pub in_flight: u64,
    /// Over the run.
    pub totals: CommandCounts,
    /// Per phase the commands were answered in (`before-start` before the schedule's first phase).
    pub phases: BTreeMap<String, CommandCounts>,
}

/// What a Redis route recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RedisRecording {
    /// Per command name, upper-cased.
    pub commands: BTreeMap<String, CommandRecording>,
    /// Per entry (by its name, `redis[i]` when it has none): the commands that met its conditions and reached it,
    /// and those it took.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub entries: BTreeMap<String, MatchCounts>,
    /// Connections whose bytes could not be framed as RESP (passed through or closed, as `on_garbage` says).
    pub garbage: u64,
}

impl RedisRecording {
    /// Adds another replica's recording of the same route.
    pub fn add(&mut self, other: &RedisRecording) {
        for (name, theirs) in &other.commands {
            let mine = self.commands.entry(name.clone()).or_default();
            mine.in_flight += theirs.in_flight;
            mine.totals.add(&theirs.totals);
            for (phase, counts) in &theirs.phases {
                mine.phases.entry(phase.clone()).or_default().add(counts);
            }
        }
        for (name, c) in &other.entries {
            let mine = self.entries.entry(name.clone()).or_default();
            mine.matched += c.matched;
            mine.taken += c.taken;
        }
        self.garbage += other.garbage;
    }
}
