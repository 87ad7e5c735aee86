//! The recording of a TCP route speaking `protocol: postgres`, as data: per entry (and `other`) and per phase, the
//! statements, those an entry took, errors by SQLSTATE, statements cut short, latency (HDR) and statements in
//! flight. For: `/recording`'s `tcp_routes.NAME.postgres`, what a runner reads back, and the sum of replicas. Not
//! for: recording it (`crate::tcp::protocol::postgres::record`).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The row of the statements no entry matched.
pub const OTHER: &str = "other";

/// One entry's counts in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatementPhase {
    /// Statements whose reply ended (or that the connection's end cut short).
    pub calls: u64,
    /// Of those, the ones the entry took.
    pub taken: u64,
    /// Replies that carried an error, by SQLSTATE.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    /// Statements the connection's end cut short (terminated, or the client or server left).
    #[serde(default)]
    pub cut: u64,
    /// Latency in ns; in JSON, base64 of the HdrHistogram V2+DEFLATE encoding.
    #[serde(with = "faultline_hdr::as_base64::histogram")]
    pub latency: Histogram<u64>,
}

impl Default for StatementPhase {
    fn default() -> StatementPhase {
        StatementPhase {
            calls: 0,
            taken: 0,
            errors: BTreeMap::new(),
            cut: 0,
            latency: faultline_hdr::new_histogram(),
        }
    }
}

/// One entry's recording.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatementRecording {
    /// The entry's `match.statement`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Statements in flight now.
    pub in_flight: u64,
    /// The most in flight at once.
    pub max_in_flight: u64,
    /// Per phase name (`healthy` before the first phase).
    pub phases: BTreeMap<String, StatementPhase>,
}

/// A postgres route's recording.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PostgresRecording {
    /// Per entry name, and `other`.
    pub statements: BTreeMap<String, StatementRecording>,
    /// Connections whose bytes were not PostgreSQL v3 somewhere (passed through raw or closed).
    pub garbage: u64,
    /// SSLRequests and GSSENCRequests faultd answered `N` to.
    pub encryption_refused: u64,
}

impl PostgresRecording {
    /// Adds another replica's recording of the same route: counts and histograms add up exactly; in flight now
    /// and its maximum become sums (the maximum an upper bound, as for the routes' calls in flight).
    pub fn add(&mut self, other: &PostgresRecording) {
        self.garbage += other.garbage;
        self.encryption_refused += other.encryption_refused;
        for (name, theirs) in &other.statements {
            let mine = self.statements.entry(name.clone()).or_default();
            mine.pattern = mine.pattern.take().or_else(|| theirs.pattern.clone());
            mine.in_flight += theirs.in_flight;
            mine.max_in_flight += theirs.max_in_flight;
            for (phase, p) in &theirs.phases {
                let m = mine.phases.entry(phase.clone()).or_default();
                m.calls += p.calls;
                m.taken += p.taken;
                m.cut += p.cut;
                for (code, n) in &p.errors {
                    *m.errors.entry(code.clone()).or_default() += n;
                }
                let _ = m.latency.add(&p.latency);
            }
        }
    }

    /// Per entry: statements over every phase, and those in flight now.
    pub fn totals(&self) -> Vec<(&str, u64, u64)> {
        self.statements
            .iter()
            .map(|(name, r)| {
                (
                    name.as_str(),
                    r.phases.values().map(|p| p.calls).sum(),
                    r.in_flight,
                )
            })
            .collect()
    }

    /// Per entry and SQLSTATE: errors over every phase.
    pub fn error_totals(&self) -> Vec<(&str, &str, u64)> {
        let mut out: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for (name, r) in &self.statements {
            for p in r.phases.values() {
                for (code, n) in &p.errors {
                    *out.entry((name.as_str(), code.as_str())).or_default() += n;
                }
            }
        }
        out.into_iter().map(|((e, c), n)| (e, c, n)).collect()
    }
}
