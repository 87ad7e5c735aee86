//! The `postgres` section of result.json: per dependency route speaking `protocol: postgres`, per entry of it (and
//! `other`), per phase: the statements, those the entry took, their errors by SQLSTATE and latency percentiles,
//! as faultd recorded them. Not for judging them (`expect::postgres`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::RunRecord;

/// One entry's statements in one phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StatementPhaseSummary {
    pub calls: u64,
    pub taken: u64,
    /// Replies with an error, by SQLSTATE (faultd's and the server's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    /// Statements the connection's end cut short.
    pub cut: u64,
    /// Latency from the statement sent to the end of its reply; null without a statement.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

/// One entry's statements.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StatementSummary {
    /// Its `match.statement`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The most in flight at once.
    pub max_in_flight: u64,
    /// Per phase name.
    pub phases: BTreeMap<String, StatementPhaseSummary>,
}

/// Per route, per entry: the `postgres` section.
pub fn statements(rec: &RunRecord) -> BTreeMap<String, BTreeMap<String, StatementSummary>> {
    let ms = |ns: u64| ns as f64 / 1e6;
    rec.postgres
        .iter()
        .map(|(route, pg)| {
            let entries = pg
                .statements
                .iter()
                .map(|(name, s)| {
                    let phases = s
                        .phases
                        .iter()
                        .map(|(phase, p)| {
                            let some = !p.latency.is_empty();
                            let at = |q: f64| some.then(|| ms(p.latency.value_at_quantile(q)));
                            let summary = StatementPhaseSummary {
                                calls: p.calls,
                                taken: p.taken,
                                errors: p.errors.clone(),
                                cut: p.cut,
                                p50_ms: at(0.5),
                                p99_ms: at(0.99),
                                max_ms: some.then(|| ms(p.latency.max())),
                            };
                            (phase.clone(), summary)
                        })
                        .collect();
                    let summary = StatementSummary {
                        pattern: s.pattern.clone(),
                        max_in_flight: s.max_in_flight,
                        phases,
                    };
                    (name.clone(), summary)
                })
                .collect();
            (route.clone(), entries)
        })
        .collect()
}
