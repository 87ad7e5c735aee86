//! The `dns` section of result.json: what faultd's resolver answered, per name, over the run and per phase, with
//! the queries per bucket for charts.
//!
//! For: turning the record's resolver counts ([`RunRecord::dns`]) into sums a reader (and the summary and the
//! HTML report) takes as they are. Not for: judging them (`crate::expect::dns`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::RunRecord;

/// The resolver's figures: its address, and per name (plus `other`: every other name and unreadable queries).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DnsSummary {
    /// The resolver's `host:port` (UDP and TCP).
    pub listen: String,
    /// Per name the scenario gives, by its name in lower case without the final dot.
    pub names: BTreeMap<String, NameSummary>,
    /// Queries for other names (refused or forwarded) and bytes that were not a query.
    pub other: NameSummary,
}

/// One name's figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NameSummary {
    /// Queries over the run.
    pub queries: u64,
    /// Queries by type (`A`, `AAAA`, ...).
    pub types: BTreeMap<String, u64>,
    /// Answers by outcome (`NOERROR`, `NXDOMAIN`, `SERVFAIL`, `REFUSED`, `truncated`, `no_answer`, ...).
    pub answers: BTreeMap<String, u64>,
    /// Queries the `delay` fault held, and the longest such delay in ms.
    pub delayed: u64,
    pub delay_max_ms: f64,
    /// The same per phase, by the time each query arrived.
    pub phases: Vec<PhaseQueries>,
    /// Queries per bucket (the `series.bucket_s` step).
    pub series: Vec<u64>,
}

/// One phase's queries of a name.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PhaseQueries {
    pub name: String,
    pub queries: u64,
    pub answers: BTreeMap<String, u64>,
}

/// The section, when the dependency had a resolver.
pub fn dns_summary(rec: &RunRecord) -> Option<DnsSummary> {
    let dns = rec.dns.as_ref()?;
    let name = |r: &faultd::dns::DnsNameRecording| {
        let n = rec.sut.len().max(r.buckets.len());
        let phases = rec
            .phases
            .iter()
            .map(|p| {
                let mut phase = PhaseQueries {
                    name: p.name.clone(),
                    ..PhaseQueries::default()
                };
                for b in rec
                    .buckets_in(p.start, p.end)
                    .filter_map(|i| r.buckets.get(i))
                {
                    phase.queries += b.total();
                    for (k, v) in &b.answers {
                        *phase.answers.entry(k.clone()).or_default() += v;
                    }
                }
                phase
            })
            .collect();
        NameSummary {
            queries: r.totals.total(),
            types: r.totals.queries.clone(),
            answers: r.totals.answers.clone(),
            delayed: r.totals.delayed,
            delay_max_ms: r.totals.delay_max_ms,
            phases,
            series: (0..n)
                .map(|i| r.buckets.get(i).map_or(0, |b| b.total()))
                .collect(),
        }
    };
    Some(DnsSummary {
        listen: dns.listen.clone(),
        names: dns
            .names
            .iter()
            .map(|(k, r)| (k.clone(), name(r)))
            .collect(),
        other: name(&dns.other),
    })
}
