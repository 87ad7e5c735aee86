//! DNS: faultd as the resolver of the service under test, answering the names a scenario gives with the records
//! and the faults of each phase.
//!
//! For: the `dns:` section of a configuration ([`DnsConfig`]), its plan over the schedule's phases ([`DnsPlan`]),
//! the faults per name ([`faults`]), the pure query-to-answer step ([`answer`], what the fuzz target drives), the
//! UDP and TCP listeners ([`serve`]) and what they recorded ([`record`]). Not for: names faultd was not given,
//! which are refused or forwarded to one upstream as the section says, never resolved here; nor recursion, zones
//! or DNSSEC.
//!
//! ```yaml
//! dns:
//!   listen: 127.0.0.1:0                  # UDP and TCP on the same port; a free one when 0
//!   unknown: refuse                      # or { forward: 127.0.0.1:5353 }
//!   names:
//!     pricing.internal: { a: [127.0.0.1], ttl: 30s }
//!   phases:                              # entries per phase of the schedule, laid over the name's own
//!     outage: { pricing.internal: { servfail: 100% } }
//!     moved: { pricing.internal: { a: [127.0.0.2], ttl: 5s } }
//! phases:
//!   - { name: healthy, at: 0s }
//!   - { name: outage, at: 10s }
//!   - { name: moved, at: 30s }
//! ```
//!
//! The entries of a phase sit under `dns.phases.<phase>` rather than in the phase itself, as TLS's do, so the
//! schedule's phases keep their shape; the phase's start and ramp apply to them as to its routes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod answer;
pub mod faults;
pub mod record;
pub mod serve;

pub use answer::{respond, Handled, Lookup, Reply, Transport};
pub use faults::{decide, CompiledName, DnsAction, NameAnswer, NameDecision, Rcode};
pub use record::{DnsBucket, DnsNameRecording, DnsRecorder, DnsRecording};

use crate::draw::{route_key, CallDraws};
use crate::invalid::Invalid;
use crate::phased::{PhaseTimes, Phased, Position};

/// A configuration's `dns:` section: faultd's resolver.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DnsConfig {
    /// Where the resolver listens, UDP and TCP on the same port, e.g. `127.0.0.1:5300`; `127.0.0.1:0` (a free
    /// port) when absent. Loopback unless faultd allows the address (`--allow-listen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// The names faultd answers (without the final dot, any case), each with its records and faults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub names: BTreeMap<String, NameAnswer>,
    /// What a query for any other name gets: `refuse` (REFUSED, the default) or `{ forward: host:port }` (the
    /// query is relayed to that resolver, on loopback, and its answer relayed back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<Unknown>,
    /// Entries by phase name, then by name, laid over the name's own from the phase's start (its ramp applies).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phases: BTreeMap<String, BTreeMap<String, NameAnswer>>,
}

/// What a query for a name faultd was not given gets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Unknown {
    /// REFUSED.
    Refuse,
    /// Relayed to this resolver (`host:port`, loopback), its answer relayed back.
    Forward(String),
}

impl DnsConfig {
    /// The listener's address (default `127.0.0.1:0`).
    pub fn listen_addr(&self) -> Result<SocketAddr, Invalid> {
        let text = self.listen.as_deref().unwrap_or("127.0.0.1:0");
        text.trim().parse().map_err(|_| {
            Invalid::new(
                "listen",
                format!("{text:?} is not an address such as 127.0.0.1:5300"),
            )
        })
    }

    /// The upstream of unknown names, when they are forwarded.
    pub fn forward_addr(&self) -> Result<Option<SocketAddr>, Invalid> {
        match &self.unknown {
            None | Some(Unknown::Refuse) => Ok(None),
            Some(Unknown::Forward(text)) => {
                let addr: SocketAddr = text.trim().parse().map_err(|_| {
                    Invalid::new(
                        "unknown.forward",
                        format!("{text:?} is not an address such as 127.0.0.1:53"),
                    )
                })?;
                if !addr.ip().is_loopback() {
                    return Err(Invalid::new(
                        "unknown.forward",
                        format!("{addr} is not on loopback: faultd forwards only to a resolver on this machine"),
                    ));
                }
                Ok(Some(addr))
            }
        }
    }

    /// Checks the addresses, every name and every phase's entries (laid over the name's own), and that the
    /// phases are the schedule's (`schedule`). Fields are named relative to `dns`.
    pub fn validate(&self, schedule: &[&str]) -> Result<(), Invalid> {
        self.listen_addr()?;
        self.forward_addr()?;
        let mut keys = std::collections::BTreeSet::new();
        for (name, entry) in &self.names {
            check_name(name).map_err(|e| e.at(&format!("names.{name}")))?;
            if !keys.insert(name_key(name)) {
                return Err(Invalid::new(
                    format!("names.{name}"),
                    "the same name twice (names are compared in lower case, without the final dot)",
                ));
            }
            entry
                .validate()
                .map_err(|e| e.at(&format!("names.{name}")))?;
        }
        for (phase, entries) in &self.phases {
            if !schedule.contains(&phase.as_str()) {
                return Err(Invalid::new(
                    format!("phases.{phase}"),
                    format!("no phase named {phase:?} (phases: {})", schedule.join(", ")),
                ));
            }
            for (name, entry) in entries {
                let at = |e: Invalid| e.at(&format!("phases.{phase}.{name}"));
                let Some(base) = self.entry(name) else {
                    let known: Vec<&str> = self.names.keys().map(String::as_str).collect();
                    return Err(at(Invalid::new(
                        "",
                        format!("no name {name:?} under dns.names ({})", known.join(", ")),
                    )));
                };
                entry.over(base).validate().map_err(at)?;
            }
        }
        Ok(())
    }

    /// The entry of `name` under `names`, compared as [`name_key`]s.
    fn entry(&self, name: &str) -> Option<&NameAnswer> {
        let key = name_key(name);
        self.names
            .iter()
            .find(|(n, _)| name_key(n) == key)
            .map(|(_, entry)| entry)
    }

    /// The entry phase `phase` gives `name`, compared as [`name_key`]s.
    fn phase_entry(&self, phase: &str, name: &str) -> Option<&NameAnswer> {
        let key = name_key(name);
        self.phases
            .get(phase)?
            .iter()
            .find(|(n, _)| name_key(n) == key)
            .map(|(_, entry)| entry)
    }

    /// Multiplies every delay and TTL by `factor` (`--time-scale`).
    pub fn scale_time(&mut self, factor: f64) {
        self.names
            .values_mut()
            .chain(self.phases.values_mut().flat_map(BTreeMap::values_mut))
            .for_each(|n| n.scale_time(factor));
    }
}

/// The key a name is looked up by: lower case, without the final dot.
pub fn name_key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn check_name(name: &str) -> Result<(), Invalid> {
    let key = name_key(name);
    let fine = !key.is_empty()
        && key.len() <= 253
        && key.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if fine {
        Ok(())
    } else {
        Err(Invalid::new(
            "",
            format!("{name:?} is not a DNS name such as pricing.internal"),
        ))
    }
}

/// One name compiled over the phases.
#[derive(Debug)]
pub struct PlanName {
    /// The name's key ([`name_key`]).
    pub name: String,
    /// The key of its seeded draws.
    key: u64,
    /// Queries for it under this plan: the draw number of the next one.
    queries: AtomicU64,
    /// Its entry before the first phase and once each phase began.
    entries: Phased<Arc<CompiledName>>,
}

/// The names of a `dns:` section compiled over the schedule's phases: what the query path looks up. Part of the
/// schedule's plan, so it changes with the configuration and follows the same clock.
#[derive(Debug, Default)]
pub struct DnsPlan {
    names: Vec<PlanName>,
    /// Where unknown names go.
    pub forward: Option<SocketAddr>,
}

impl DnsPlan {
    /// Compiles a `dns:` section (none: no names) over the schedule's `phases`.
    pub fn compile(dns: Option<&DnsConfig>, phases: &[PhaseTimes<'_>]) -> Result<DnsPlan, Invalid> {
        let Some(dns) = dns else {
            return Ok(DnsPlan::default());
        };
        let names: Vec<&str> = phases.iter().map(|p| p.0).collect();
        dns.validate(&names).map_err(|e| e.at("dns"))?;
        let mut compiled = Vec::new();
        for (name, own) in &dns.names {
            let at = |e: Invalid| e.at(&format!("dns.names.{name}"));
            let base = Arc::new(CompiledName::compile(own).map_err(at)?);
            let mut entries = Phased::new(base);
            for &(phase, start, ramp) in phases {
                let set = match dns.phase_entry(phase, name) {
                    Some(set) => Some(Arc::new(
                        CompiledName::compile(&set.over(own))
                            .map_err(|e| e.at(&format!("dns.phases.{phase}.{name}")))?,
                    )),
                    None => None,
                };
                entries.push(start, ramp, set);
            }
            compiled.push(PlanName {
                key: route_key(&format!("dns:{}", name_key(name))),
                name: name_key(name),
                queries: AtomicU64::new(0),
                entries,
            });
        }
        Ok(DnsPlan {
            names: compiled,
            forward: dns.forward_addr().map_err(|e| e.at("dns"))?,
        })
    }

    /// The names, in configuration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|n| n.name.as_str())
    }

    /// What the next query for `name` (a [`name_key`]) gets at `position` (`None`: reset to healthy), drawn with
    /// the run's `seed`; `None` for a name the plan does not know.
    pub fn draw(&self, name: &str, position: Option<Position>, seed: u64) -> Option<NameDecision> {
        let entry = self.names.iter().find(|n| n.name == name)?;
        let at = entry.entries.at(position);
        let n = entry.queries.fetch_add(1, Ordering::Relaxed);
        Some(decide(
            at.from.map(|f| &**f),
            at.to,
            at.weight,
            CallDraws::new(seed, entry.key, n),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::time::Duration;

    const YAML: &str = "routes:\n  any: { path: /** }\n\
        phases:\n  - { name: healthy, at: 0s }\n  - { name: outage, at: 10s }\n  - { name: moved, at: 20s }\n\
        dns:\n  names:\n    Pricing.Internal.: { a: [127.0.0.1], ttl: 30s }\n  \
        phases:\n    outage: { pricing.internal: { servfail: 100% } }\n    moved: { pricing.internal: { a: [127.0.0.2], ttl: 1s } }\n";

    fn plan(yaml: &str) -> crate::schedule::Plan {
        let config = Config::from_yaml(yaml, "t.yaml").unwrap();
        crate::schedule::Plan::compile(
            config,
            1,
            &crate::recorder::Recorder::new(Duration::from_millis(100)),
        )
        .unwrap()
    }

    #[test]
    fn a_name_follows_the_schedule_its_records_moving_at_the_phase_start() {
        let plan = plan(YAML);
        let at = |s: u64| {
            plan.dns
                .draw(
                    "pricing.internal",
                    Some(plan.position(Duration::from_secs(s))),
                    1,
                )
                .unwrap()
        };
        assert_eq!(at(5).action, DnsAction::Answer);
        assert_eq!(at(5).ttl, 30);
        assert_eq!(at(15).action, DnsAction::Rcode(Rcode::ServFail));
        let moved = at(25);
        assert_eq!(
            (moved.action, &moved.a[..], moved.ttl),
            (DnsAction::Answer, &["127.0.0.2".parse().unwrap()][..], 1)
        );
        assert!(plan.dns.draw("other.internal", None, 1).is_none());
    }

    #[test]
    fn a_phase_or_a_name_that_does_not_exist_is_refused_with_its_field() {
        let e = Config::from_yaml(
            &YAML.replace("outage: { pricing", "outge: { pricing"),
            "t.yaml",
        )
        .unwrap_err();
        assert!(e.field.contains("dns.phases.outge"), "{e}");
        let e = Config::from_yaml(
            &YAML.replace("outage: { pricing.internal", "outage: { pricng.internal"),
            "t.yaml",
        )
        .unwrap_err();
        assert!(e.message.contains("no name \"pricng.internal\""), "{e}");
        let e = Config::from_yaml(
            &YAML.replace("dns:\n", "dns:\n  unknown: { forward: 10.0.0.1:53 }\n"),
            "t.yaml",
        )
        .unwrap_err();
        assert!(e.field.contains("dns.unknown.forward"), "{e}");
    }
}
