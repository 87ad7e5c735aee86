//! What faultd answers for one name: its records (addresses and TTL) and the faults that take a share of its
//! queries, one small type per fault.
//!
//! For: a name's entry as a scenario writes it (`pricing.internal: { a: [127.0.0.1], ttl: 30s, servfail: 20% }`),
//! its validation, and [`decide`], the pure function that turns the entry in force and one query's seeded draws
//! into what that query gets. Not for: DNS messages (`super::answer`), sockets (`super::serve`) or counting
//! (`super::record`).
//!
//! `dns_fault_list!` below is the only place that knows every fault that takes a share: from it come the fields
//! of [`NameAnswer`], [`NameAnswer::over`] and the draw order of [`decide`]. Shares, phases and ramps work as
//! they do for the call faults: a phase's entry is laid over the name's own field by field, shares add up to at
//! most 100%, and during a ramp every share and the delay's quantile move linearly from the previous phase's
//! value; the records (`a`, `aaaa`, `ttl`) switch at the phase's start, as a record change does.
//!
//! Adding a fault means one file here with one type that implements [`DnsFault`], and one line in the list.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use faultline_units::{Dur, Share};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::behaviours::{Fault, Latency, LatencyModel};
use crate::draw::{pick_share, ramp_delay, CallDraws};
use crate::invalid::Invalid;

/// The response codes a fault answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rcode {
    /// The name does not exist.
    NxDomain,
    /// The server failed.
    ServFail,
    /// The server will not answer.
    Refused,
}

/// What one query gets, after its delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DnsAction {
    /// The name's records.
    Answer,
    /// No records, this response code.
    Rcode(Rcode),
    /// No answer at all.
    Drop,
    /// Over UDP, the TC bit and no records; over TCP, the records.
    Truncate,
}

/// One fault of the list: its share of a name's queries and what a query it takes gets.
pub trait DnsFault {
    /// The share of queries it takes.
    fn share(&self) -> Share;
    /// What such a query gets.
    fn action(&self) -> DnsAction;
}

/// The faults that take a share, one line each: `file.rs => field: Type`, in draw order.
macro_rules! dns_fault_list {
    ($then:ident) => {
        $then! {
            /// The share of queries answered NXDOMAIN.
            nxdomain.rs => nxdomain: Nxdomain,
            /// The share of queries answered SERVFAIL.
            servfail.rs => servfail: Servfail,
            /// The share of queries answered REFUSED.
            refused.rs => refused: Refused,
            /// The share of queries never answered (the caller's resolver times out).
            no_answer.rs => no_answer: NoAnswer,
            /// The share of UDP queries answered with TC set and no records (the caller retries over TCP).
            truncate.rs => truncate: Truncate,
        }
    };
}

macro_rules! name_answer_from_list {
    ($( $(#[$doc:meta])* $module:ident.rs => $field:ident: $ty:ident, )*) => {
        $( pub mod $module; pub use $module::$ty; )*

        /// A name's entry: its records and its faults. Every field is optional; a phase's entry replaces the
        /// name's own field by field, so `{servfail: 100%}` keeps the name's addresses for when it ends.
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct NameAnswer {
            /// The IPv4 addresses answered to an A query, e.g. `[127.0.0.1]`; `[]` answers none (NODATA).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub a: Option<Vec<Ipv4Addr>>,
            /// The IPv6 addresses answered to an AAAA query, e.g. `["::1"]`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub aaaa: Option<Vec<Ipv6Addr>>,
            /// The records' TTL, in whole seconds on the wire, e.g. `30s`; `0s` tells callers not to cache.
            /// 60s when absent.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub ttl: Option<Dur>,
            /// The delay before any answer (not before `no_answer`), as a latency distribution (`{fixed: 2s}`,
            /// `{p50: 5ms, p99: 800ms}`).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub delay: Option<Latency>,
            $(
                $(#[$doc])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $field: Option<$ty>,
            )*
        }

        impl NameAnswer {
            /// This entry laid over `base`: each field set here wins.
            pub fn over(&self, base: &NameAnswer) -> NameAnswer {
                NameAnswer {
                    a: self.a.clone().or_else(|| base.a.clone()),
                    aaaa: self.aaaa.clone().or_else(|| base.aaaa.clone()),
                    ttl: self.ttl.or(base.ttl),
                    delay: self.delay.clone().or_else(|| base.delay.clone()),
                    $( $field: self.$field.or(base.$field), )*
                }
            }

            /// The faults that take a share, in draw order, with their field names.
            pub fn slots(&self) -> Vec<(&'static str, Option<Share>, DnsAction)> {
                vec![$( (
                    stringify!($field),
                    self.$field.as_ref().map(DnsFault::share),
                    self.$field.as_ref().map_or(
                        // The action a fault would take does not depend on its share.
                        $ty(Share::from_fraction(0.0)).action(),
                        DnsFault::action,
                    ),
                ), )*]
            }
        }
    };
}

dns_fault_list!(name_answer_from_list);

/// The TTL of a name's records when its entry sets none.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

impl NameAnswer {
    /// Checks the delay and that the shares add up to at most 100%. Fields are named relative to the entry.
    pub fn validate(&self) -> Result<(), Invalid> {
        if let Some(delay) = &self.delay {
            Fault::validate(delay).map_err(|e| e.at("delay"))?;
        }
        if let Some(ttl) = self.ttl {
            if ttl.get() > Duration::from_secs(i32::MAX as u64) {
                return Err(Invalid::new("ttl", "longer than DNS allows (2^31 - 1 s)"));
            }
        }
        let slots = self.slots();
        crate::invalid::check_shares(slots.iter().map(|(n, s, _)| (*n, s.map(Share::fraction))))
    }

    /// Multiplies the delay and the TTL by `factor` (`--time-scale`); shares are unchanged.
    pub fn scale_time(&mut self, factor: f64) {
        if let Some(delay) = &mut self.delay {
            Fault::scale_time(delay, factor);
        }
        if let Some(ttl) = &mut self.ttl {
            *ttl = ttl.scaled(factor);
        }
    }
}

/// A name's entry made ready for the query path: validated, the delay's model built once.
#[derive(Debug)]
pub struct CompiledName {
    /// The entry as configured (already laid over the name's own).
    pub answer: NameAnswer,
    /// The A records.
    pub a: Arc<[Ipv4Addr]>,
    /// The AAAA records.
    pub aaaa: Arc<[Ipv6Addr]>,
    /// The TTL on the wire, in seconds.
    pub ttl: u32,
    delay: Option<LatencyModel>,
}

impl CompiledName {
    /// Validates and prepares `answer`.
    pub fn compile(answer: &NameAnswer) -> Result<CompiledName, Invalid> {
        answer.validate()?;
        let delay = answer
            .delay
            .as_ref()
            .map(Latency::model)
            .transpose()
            .map_err(|e| e.at("delay"))?;
        Ok(CompiledName {
            a: answer.a.clone().unwrap_or_default().into(),
            aaaa: answer.aaaa.clone().unwrap_or_default().into(),
            ttl: answer.ttl.map_or(DEFAULT_TTL, Dur::get).as_secs() as u32,
            answer: answer.clone(),
            delay,
        })
    }

    fn delay(&self, u: f64) -> f64 {
        self.delay
            .as_ref()
            .map_or(0.0, |m| m.quantile(u).as_secs_f64())
    }
}

/// What one query for a known name gets.
#[derive(Debug, Clone)]
pub struct NameDecision {
    /// How long the answer waits (none is sent for [`DnsAction::Drop`]).
    pub delay: Duration,
    /// What the query gets.
    pub action: DnsAction,
    /// The records in force.
    pub a: Arc<[Ipv4Addr]>,
    /// The AAAA records in force.
    pub aaaa: Arc<[Ipv6Addr]>,
    /// Their TTL, seconds.
    pub ttl: u32,
}

/// Decides what one query gets. `to` is in force; during a ramp `from` is the previous phase's and `weight`
/// (0..=1) how far the ramp has gone. The draw walks the list in order, each share blended along the ramp; past
/// them all the query gets the records of `to`.
pub fn decide(
    from: Option<&CompiledName>,
    to: &CompiledName,
    weight: f64,
    draws: CallDraws,
) -> NameDecision {
    let w = if from.is_some() {
        weight.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let delay = ramp_delay(
        from.map(|f| f.delay(draws.latency)),
        to.delay(draws.latency),
        w,
    );
    let later = to.answer.slots();
    let shares = |slots: &[(&str, Option<Share>, DnsAction)]| -> Vec<f64> {
        slots
            .iter()
            .map(|(_, s, _)| s.map_or(0.0, Share::fraction))
            .collect()
    };
    let from_shares = from.map(|f| shares(&f.answer.slots()));
    let action = pick_share(from_shares.as_deref(), &shares(&later), w, draws.fault)
        .map_or(DnsAction::Answer, |i| later[i].2);
    NameDecision {
        delay: Duration::from_secs_f64(delay.max(0.0)),
        action,
        a: to.a.clone(),
        aaaa: to.aaaa.clone(),
        ttl: to.ttl,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(yaml: &str) -> CompiledName {
        let a: NameAnswer = serde_saphyr::from_str(yaml).unwrap();
        CompiledName::compile(&a).unwrap()
    }

    fn share_of(from: Option<&CompiledName>, to: &CompiledName, w: f64, action: DnsAction) -> f64 {
        let n = 50_000;
        let hits = (0..n)
            .filter(|&i| decide(from, to, w, CallDraws::new(3, 9, i)).action == action)
            .count();
        hits as f64 / n as f64
    }

    #[test]
    fn each_fault_takes_its_share_and_the_rest_get_the_records() {
        let c = compiled("{ a: [127.0.0.2], servfail: 30%, nxdomain: 10%, no_answer: 20% }");
        let servfail = share_of(None, &c, 1.0, DnsAction::Rcode(Rcode::ServFail));
        let nx = share_of(None, &c, 1.0, DnsAction::Rcode(Rcode::NxDomain));
        let dropped = share_of(None, &c, 1.0, DnsAction::Drop);
        let answered = share_of(None, &c, 1.0, DnsAction::Answer);
        for (got, want) in [(servfail, 0.3), (nx, 0.1), (dropped, 0.2), (answered, 0.4)] {
            assert!((got - want).abs() < 0.015, "{got} vs {want}");
        }
        let d = decide(None, &c, 1.0, CallDraws::new(1, 1, 1));
        assert_eq!((&*d.a, d.ttl), (&[Ipv4Addr::new(127, 0, 0, 2)][..], 60));
    }

    #[test]
    fn a_ramp_moves_the_share_from_the_previous_phase() {
        let before = compiled("{ a: [127.0.0.1] }");
        let after = compiled("{ a: [127.0.0.1], servfail: 80% }");
        let half = share_of(
            Some(&before),
            &after,
            0.5,
            DnsAction::Rcode(Rcode::ServFail),
        );
        assert!((half - 0.4).abs() < 0.015, "{half}");
    }

    #[test]
    fn shares_over_one_hundred_percent_are_refused_naming_the_faults() {
        let a: NameAnswer = serde_saphyr::from_str("{ servfail: 70%, refused: 40% }").unwrap();
        let e = a.validate().unwrap_err();
        assert!(e.message.contains("servfail, refused"), "{e:?}");
    }

    #[test]
    fn a_phase_entry_replaces_field_by_field() {
        let base: NameAnswer = serde_saphyr::from_str("{ a: [127.0.0.1], ttl: 30s }").unwrap();
        let set: NameAnswer = serde_saphyr::from_str("{ servfail: 100% }").unwrap();
        let merged = set.over(&base);
        assert_eq!(merged.a, base.a);
        assert!(merged.servfail.is_some());
        let c = CompiledName::compile(&merged).unwrap();
        assert_eq!(c.ttl, 30);
    }
}
