//! What the resolver recorded: per name and time bucket, the queries by type, the answers by outcome and the
//! delays, on the recorder's clock.
//!
//! For: the `dns` field of `/recording` and the `faultd_dns_*` counters of `/metrics`. Not for: deciding or
//! answering. One lock per query is cheap next to a datagram's round trip, and a service resolving on every call
//! is exactly what these counts are there to show.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use serde::{Deserialize, Serialize};

use super::answer::Handled;

/// One bucket of one name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DnsBucket {
    /// Queries by type (`A`, `AAAA`, ...; `unreadable` for bytes that were not a query).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queries: BTreeMap<String, u64>,
    /// Answers by outcome: a response code (`NOERROR`, `NXDOMAIN`, `SERVFAIL`, `REFUSED`, `FORMERR`, `NOTIMP`),
    /// `truncated`, `no_answer`, `forwarded` or `dropped`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub answers: BTreeMap<String, u64>,
    /// Queries the `delay` fault held.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delayed: u64,
    /// The longest of those delays, in milliseconds.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub delay_max_ms: f64,
}

impl DnsBucket {
    /// All queries counted here.
    pub fn total(&self) -> u64 {
        self.queries.values().sum()
    }

    /// Answers with `outcome`.
    pub fn answered(&self, outcome: &str) -> u64 {
        self.answers.get(outcome).copied().unwrap_or(0)
    }

    fn add(&mut self, other: &DnsBucket) {
        for (k, n) in &other.queries {
            *self.queries.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &other.answers {
            *self.answers.entry(k.clone()).or_default() += n;
        }
        self.delayed += other.delayed;
        self.delay_max_ms = self.delay_max_ms.max(other.delay_max_ms);
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_f64(n: &f64) -> bool {
    *n == 0.0
}

/// What one name recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DnsNameRecording {
    /// Per bucket from the origin (the recording's `bucket` step); read a missing bucket as an empty one.
    pub buckets: Vec<DnsBucket>,
    /// Sums over the run (`delay_max_ms` the run's longest).
    pub totals: DnsBucket,
}

/// The `dns` field of `/recording`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DnsRecording {
    /// The resolver's address (`host:port`, UDP and TCP).
    pub listen: String,
    /// Per name the configuration gives (its key: lower case, no final dot).
    pub names: BTreeMap<String, DnsNameRecording>,
    /// Queries for every other name, and bytes that were not a query.
    pub other: DnsNameRecording,
}

impl DnsRecording {
    /// Adds another replica's recording (the same bucket step), bucket by bucket.
    pub fn merge(&mut self, other: &DnsRecording) {
        for (name, r) in &other.names {
            add_name(self.names.entry(name.clone()).or_default(), r);
        }
        add_name(&mut self.other, &other.other);
    }
}

fn add_name(a: &mut DnsNameRecording, b: &DnsNameRecording) {
    if a.buckets.len() < b.buckets.len() {
        a.buckets.resize(b.buckets.len(), DnsBucket::default());
    }
    for (x, y) in a.buckets.iter_mut().zip(&b.buckets) {
        x.add(y);
    }
    a.totals.add(&b.totals);
}

/// Counts queries per name and bucket.
#[derive(Debug)]
pub struct DnsRecorder {
    bucket_ns: u64,
    listen: String,
    names: Mutex<BTreeMap<Option<String>, Vec<DnsBucket>>>,
}

impl DnsRecorder {
    /// A recorder with this bucket width, for the resolver at `listen`.
    pub fn new(bucket: Duration, listen: String) -> DnsRecorder {
        DnsRecorder {
            bucket_ns: (bucket.as_nanos() as u64).max(1),
            listen,
            names: Mutex::new(BTreeMap::new()),
        }
    }

    /// Counts one handled query that arrived `t_ns` after the origin.
    pub fn record(&self, t_ns: u64, handled: &Handled) {
        let i = (t_ns / self.bucket_ns) as usize;
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let buckets = names.entry(handled.name.clone()).or_default();
        if buckets.len() <= i {
            buckets.resize(i + 1, DnsBucket::default());
        }
        let b = &mut buckets[i];
        let qtype = handled.qtype.as_deref().unwrap_or("unreadable");
        *b.queries.entry(qtype.to_string()).or_default() += 1;
        *b.answers.entry(handled.outcome.to_string()).or_default() += 1;
        if !handled.delay.is_zero() {
            b.delayed += 1;
            b.delay_max_ms = b.delay_max_ms.max(handled.delay.as_secs_f64() * 1e3);
        }
    }

    /// Everything so far; every name of `known` is present, queried or not.
    pub fn snapshot<'a>(&self, known: impl Iterator<Item = &'a str>) -> DnsRecording {
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let recording_of = |buckets: &Vec<DnsBucket>| {
            let mut totals = DnsBucket::default();
            buckets.iter().for_each(|b| totals.add(b));
            DnsNameRecording {
                buckets: buckets.clone(),
                totals,
            }
        };
        let mut out = DnsRecording {
            listen: self.listen.clone(),
            ..DnsRecording::default()
        };
        for name in known {
            out.names
                .insert(name.to_string(), DnsNameRecording::default());
        }
        for (name, buckets) in names.iter() {
            match name {
                Some(n) => {
                    out.names.insert(n.clone(), recording_of(buckets));
                }
                None => out.other = recording_of(buckets),
            }
        }
        out
    }
}

/// The resolver's counters for `/metrics`.
#[derive(Debug)]
pub struct DnsMetrics(pub DnsRecording);

impl prometheus_client::collector::Collector for DnsMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let all = || {
            self.0
                .names
                .iter()
                .map(|(n, r)| (n.as_str(), &r.totals))
                .chain([("(other)", &self.0.other.totals)])
        };
        {
            let mut family = encoder.encode_descriptor(
                "faultd_dns_queries",
                "DNS queries to faultd's resolver, by name and type",
                None,
                MetricType::Counter,
            )?;
            for (name, totals) in all() {
                for (qtype, n) in &totals.queries {
                    ConstCounter::new(*n).encode(
                        family.encode_family(&[("name", name), ("type", qtype.as_str())])?,
                    )?;
                }
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "faultd_dns_answers",
                "DNS answers of faultd's resolver, by name and outcome",
                None,
                MetricType::Counter,
            )?;
            for (name, totals) in all() {
                for (outcome, n) in &totals.answers {
                    ConstCounter::new(*n).encode(
                        family.encode_family(&[("name", name), ("outcome", outcome.as_str())])?,
                    )?;
                }
            }
        }
        let mut family = encoder.encode_descriptor(
            "faultd_dns_delayed",
            "DNS queries held by the delay fault, by name",
            None,
            MetricType::Counter,
        )?;
        for (name, totals) in all() {
            ConstCounter::new(totals.delayed).encode(family.encode_family(&[("name", name)])?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::answer::Reply;

    fn handled(name: Option<&str>, qtype: &str, outcome: &'static str, delay_ms: u64) -> Handled {
        Handled {
            name: name.map(str::to_string),
            qtype: Some(qtype.to_string()),
            outcome,
            delay: Duration::from_millis(delay_ms),
            reply: Reply::Drop,
        }
    }

    #[test]
    fn queries_are_counted_per_name_bucket_type_and_outcome() {
        let r = DnsRecorder::new(Duration::from_millis(100), "127.0.0.1:53".into());
        r.record(
            50_000_000,
            &handled(Some("pricing.internal"), "A", "NOERROR", 0),
        );
        r.record(
            150_000_000,
            &handled(Some("pricing.internal"), "AAAA", "SERVFAIL", 40),
        );
        r.record(160_000_000, &handled(None, "A", "REFUSED", 0));
        let s = r.snapshot(["pricing.internal", "quiet.internal"].into_iter());
        let p = &s.names["pricing.internal"];
        assert_eq!(p.buckets.len(), 2);
        assert_eq!(p.buckets[1].answered("SERVFAIL"), 1);
        assert_eq!(
            (p.totals.total(), p.totals.delayed, p.totals.delay_max_ms),
            (2, 1, 40.0)
        );
        assert_eq!(s.names["quiet.internal"].totals.total(), 0);
        assert_eq!(s.other.totals.answered("REFUSED"), 1);
        let mut twice = s.clone();
        twice.merge(&s);
        assert_eq!(twice.names["pricing.internal"].buckets[0].total(), 2);
    }
}
