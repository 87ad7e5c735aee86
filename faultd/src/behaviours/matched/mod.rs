//! Matched entries: behaviours a route gives only the calls that carry something (a method, a header, a query
//! parameter, a path, gRPC metadata), and of those only the calls a deterministic trigger picks.
//!
//! For: the `matched` list of a behaviour, each entry `{ match: {...}, every | calls | first, per, <any fault
//! field> }` laid over the behaviour it sits in for the calls it takes; checking entries; compiling them once per
//! (route, phase); and [`CompiledBehaviour::matched_entry`], which finds the entry that takes a call and counts
//! it. Not for: what the taken call then gets (the entry's behaviour is decided like any other by `decide`), the
//! recording of the counts (`crate::recorder`, through `crate::tally`) or the request itself (the data plane
//! hands over [`CallFacts`]).
//!
//! A route with no entries pays one check of an empty slice per call: nothing is allocated or counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;
use crate::tally::EntryTally;

mod conditions;

pub use conditions::{CallFacts, Match, Matcher};

/// What an entry's trigger counts: the matching calls of the route (under the behaviour in force, so the count
/// starts again when a phase sets the route), or those of each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    /// The route's matching calls, on every connection together.
    Route,
    /// Each connection's matching calls (an HTTP/2 connection's streams, an HTTP/1.1 connection's requests).
    Connection,
}

/// Builds [`Matched`] from the fault list: its conditions and trigger, then every field of a behaviour.
macro_rules! matched_from_list {
    ($( $(#[$doc:meta])* $module:ident.rs => $field:ident: $ty:ty, )*) => {
        /// One entry of a behaviour's `matched` list. The calls that meet `match` and that the trigger (`every`,
        /// `calls` or `first`; every matching call without one) picks get the entry's fault fields laid over the
        /// behaviour the entry sits in; the entries are tried in list order and the first that takes a call ends
        /// the search, and the calls no entry takes get the behaviour itself.
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct Matched {
            /// The entry's name in the recording; `matched[i]` (its place in the list) when absent.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub name: Option<String>,
            /// The conditions a call must meet; every call when absent.
            #[serde(rename = "match", default, skip_serializing_if = "Match::is_empty")]
            pub conditions: Match,
            /// Takes every Nth matching call (the 3rd, 6th, 9th for `every: 3`).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub every: Option<u64>,
            /// Takes the matching calls with these numbers, counted from 1 (`calls: [1, 2]`).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub calls: Option<Vec<u64>>,
            /// Takes the first N matching calls of each connection.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub first: Option<u64>,
            /// What `every` and `calls` count: `route` (the default) or `connection`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub per: Option<Per>,
            $(
                $(#[$doc])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $field: Option<$ty>,
            )*
        }

        impl Matched {
            /// The fault fields this entry sets, as a behaviour (with no entries of its own).
            pub fn behaviour(&self) -> Behaviour {
                Behaviour {
                    $( $field: self.$field.clone(), )*
                    matched: None,
                }
            }

            /// Replaces the entry's fault fields, keeping its conditions and trigger.
            pub fn set_behaviour(&mut self, b: Behaviour) {
                $( self.$field = b.$field; )*
            }
        }
    };
}

fault_list!(matched_from_list);

/// An entry's trigger, one variant per way of picking calls.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Trigger {
    /// Every Nth call.
    Every(u64),
    /// The calls with these numbers, sorted.
    Calls(Box<[u64]>),
    /// The first N calls.
    First(u64),
}

impl Trigger {
    /// Whether the trigger picks the `n`th matching call (from 1).
    pub(crate) fn picks(&self, n: u64) -> bool {
        match self {
            Trigger::Every(k) => n.is_multiple_of(*k),
            Trigger::Calls(numbers) => numbers.binary_search(&n).is_ok(),
            Trigger::First(k) => n <= *k,
        }
    }
}

impl Matched {
    /// The entry laid over `within`, the behaviour it sits in: what the calls it takes get.
    pub fn over(&self, within: &Behaviour) -> Behaviour {
        Behaviour {
            matched: None,
            ..self.behaviour().over(within)
        }
    }

    /// Multiplies every duration of the entry's fault fields by `factor` (`--time-scale`); counts are unchanged.
    pub fn scale_time(&mut self, factor: f64) {
        let mut b = self.behaviour();
        b.scale_time(factor);
        self.set_behaviour(b);
    }

    /// The trigger and what it counts, `None` for every matching call. Assumes a validated entry.
    fn trigger(&self) -> Option<(Trigger, Per)> {
        self.trigger_fields().compile()
    }

    /// Checks the conditions, the trigger and the fault fields laid over `within`; fields are named relative to
    /// the entry (`match.header.x-tenant`, `every`, `errors[0].status`).
    fn validate(&self, within: &Behaviour) -> Result<(), Invalid> {
        if self.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err(Invalid::new("name", "a name cannot be empty"));
        }
        self.conditions.validate().map_err(|e| e.at("match"))?;
        self.check_trigger()?;
        if self.toxics.is_some() {
            return Err(Invalid::new(
                "toxics",
                "toxics act on TCP routes, whose connections carry no request to match",
            ));
        }
        if self.redis.is_some() {
            return Err(Invalid::new(
                "redis",
                "redis entries act on TCP routes with `protocol: redis`",
            ));
        }
        if self.postgres.is_some() {
            return Err(Invalid::new(
                "postgres",
                "postgres entries act on TCP routes with protocol: postgres and match statements themselves",
            ));
        }
        self.over(within).validate()
    }

    fn check_trigger(&self) -> Result<(), Invalid> {
        self.trigger_fields().check("call")
    }

    fn trigger_fields(&self) -> TriggerFields<'_> {
        TriggerFields {
            share: None,
            every: self.every,
            calls: self.calls.as_deref(),
            first: self.first,
            per: self.per,
        }
    }
}

/// The trigger fields an entry carries on any wire (an HTTP route's `matched`, a Redis or a PostgreSQL route's
/// entries), checked and compiled in one place so that they mean the same everywhere.
pub(crate) struct TriggerFields<'a> {
    /// Whether `share` was given, on the wires that draw one; `None` on a wire without `share`.
    pub share: Option<bool>,
    /// `every`.
    pub every: Option<u64>,
    /// `calls`.
    pub calls: Option<&'a [u64]>,
    /// `first`.
    pub first: Option<u64>,
    /// `per`.
    pub per: Option<Per>,
}

impl TriggerFields<'_> {
    /// Checks that at most one trigger is given, that counts start at 1, and that `per` goes with a count;
    /// `unit` names what is counted (`call`, `command`, `statement`).
    pub(crate) fn check(&self, unit: &str) -> Result<(), Invalid> {
        let given: Vec<&str> = [
            ("share", self.share == Some(true)),
            ("every", self.every.is_some()),
            ("calls", self.calls.is_some()),
            ("first", self.first.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if let [first, second, ..] = given[..] {
            let one_of = if self.share.is_some() {
                "share, every, calls or first"
            } else {
                "every, calls or first"
            };
            return Err(Invalid::new(
                second,
                format!("give one of {one_of}, not both {first} and {second}"),
            ));
        }
        if self.every == Some(0) {
            return Err(Invalid::new(
                "every",
                format!("at least 1 (every: 1 takes every matching {unit})"),
            ));
        }
        if self.first == Some(0) {
            return Err(Invalid::new("first", "at least 1"));
        }
        if let Some(calls) = self.calls {
            if calls.is_empty() {
                return Err(Invalid::new(
                    "calls",
                    format!("give at least one {unit} number"),
                ));
            }
            if let Some(i) = calls.iter().position(|n| *n == 0) {
                return Err(Invalid::new(
                    format!("calls[{i}]"),
                    format!("{unit} numbers start at 1"),
                ));
            }
        }
        let counted = self.every.is_some() || self.calls.is_some() || self.first.is_some();
        match self.per {
            Some(_) if !counted => Err(Invalid::new(
                "per",
                "per says what every or calls count; give one of them",
            )),
            Some(Per::Route) if self.first.is_some() => Err(Invalid::new(
                "per",
                format!("first counts the {unit}s of each connection; for the route's first {unit}s give calls: [1, 2, ...]"),
            )),
            _ => Ok(()),
        }
    }

    /// The trigger and what it counts, `None` for every matching call (or a share's draw). Assumes checked
    /// fields.
    pub(crate) fn compile(&self) -> Option<(Trigger, Per)> {
        let per = self.per.unwrap_or(Per::Route);
        if let Some(n) = self.every {
            return Some((Trigger::Every(n), per));
        }
        if let Some(calls) = self.calls {
            let mut numbers = calls.to_vec();
            numbers.sort_unstable();
            numbers.dedup();
            return Some((Trigger::Calls(numbers.into()), per));
        }
        self.first.map(|n| (Trigger::First(n), Per::Connection))
    }
}

/// Checks a behaviour's `matched` list: each entry within `within` (the behaviour holding the list) and their
/// names; fields are named relative to the list (`[1].every`).
pub(super) fn validate_list(list: &[Matched], within: &Behaviour) -> Result<(), Invalid> {
    for (i, entry) in list.iter().enumerate() {
        entry
            .validate(within)
            .map_err(|e| e.at(&format!("[{i}]")))?;
        let name = label(entry, i);
        if let Some(j) = (0..i).find(|&j| label(&list[j], j) == name) {
            return Err(Invalid::new(
                format!("[{i}].name"),
                format!(
                    "{name:?} already names entry {j}: the recording counts each entry by its name"
                ),
            ));
        }
    }
    Ok(())
}

/// An entry's name in the recording.
fn label(entry: &Matched, i: usize) -> String {
    entry
        .name
        .clone()
        .unwrap_or_else(|| format!("matched[{i}]"))
}

/// Where a compiled entry's counts go: the recorder's tally for the entry of that name on the route, or a tally of
/// its own for a behaviour no recorder reads.
pub type Tallies<'a> = &'a dyn Fn(&str) -> Arc<EntryTally>;

/// The source of the per-connection counts' keys: every compiled entry has its own, so a connection that outlives
/// a phase or a configuration never counts a new entry's calls under an old one's.
pub(crate) static NEXT_ENTRY: AtomicU64 = AtomicU64::new(0);

/// An entry ready for the hot path: its conditions and trigger compiled, its behaviour (laid over the one it sits
/// in) compiled, and its counts.
#[derive(Debug)]
pub struct CompiledEntry {
    id: u64,
    matcher: Matcher,
    trigger: Option<(Trigger, Per)>,
    /// Matching calls so far, for a trigger that counts per route.
    seen: AtomicU64,
    tally: Arc<EntryTally>,
    behaviour: Arc<CompiledBehaviour>,
}

/// Compiles the entries of `within` (already validated), each over it; `healthy` is `within`'s healthy response,
/// which an entry that sets no `response` shares instead of building its own.
pub(super) fn compile_entries(
    within: &Behaviour,
    healthy: &PreparedResponse,
    tallies: Tallies<'_>,
) -> Result<Box<[CompiledEntry]>, Invalid> {
    let Some(list) = &within.matched else {
        return Ok(Box::default());
    };
    list.iter()
        .enumerate()
        .map(|(i, entry)| {
            let at = |e: Invalid| e.at(&format!("matched[{i}]"));
            let shared = entry.response.is_none().then_some(healthy);
            let behaviour = CompiledBehaviour::compile_with(&entry.over(within), shared, tallies)
                .map_err(at)?;
            Ok(CompiledEntry {
                id: NEXT_ENTRY.fetch_add(1, Ordering::Relaxed),
                matcher: entry.conditions.compile().map_err(|e| at(e.at("match")))?,
                trigger: entry.trigger(),
                seen: AtomicU64::new(0),
                tally: tallies(&label(entry, i)),
                behaviour: Arc::new(behaviour),
            })
        })
        .collect()
}

impl CompiledEntry {
    /// Whether this entry takes the call; a call that meets its conditions is counted as matched, and as taken
    /// when the trigger picks it.
    fn takes(&self, call: &CallFacts<'_>, connection: &ConnectionCounts) -> bool {
        if !self.matcher.matches(call) {
            return false;
        }
        let taken = match &self.trigger {
            None => true,
            Some((trigger, Per::Route)) => {
                trigger.picks(self.seen.fetch_add(1, Ordering::Relaxed) + 1)
            }
            Some((trigger, Per::Connection)) => trigger.picks(connection.next(self.id)),
        };
        self.tally.count(taken);
        taken
    }
}

impl CompiledBehaviour {
    /// The behaviour a call gets from the first entry of this behaviour's `matched` list that takes it; `None`
    /// when none does (or there are none), and the call gets this behaviour. `connection` holds the counts of
    /// the connection the call came on.
    pub fn matched_entry(
        &self,
        call: &CallFacts<'_>,
        connection: &ConnectionCounts,
    ) -> Option<&Arc<CompiledBehaviour>> {
        self.entries
            .iter()
            .find(|e| e.takes(call, connection))
            .map(|e| &e.behaviour)
    }
}

/// How many entries one connection keeps counts for: a connection that lives across many configurations forgets
/// the oldest entries' counts rather than growing.
const CONNECTION_ENTRIES: usize = 64;

/// One connection's counts of matching calls, per entry that counts per connection. Empty (and unallocated) until
/// such an entry matches a call on the connection.
#[derive(Debug, Default)]
pub struct ConnectionCounts {
    counts: Mutex<Vec<(u64, u64)>>,
}

impl ConnectionCounts {
    /// Counts a matching call of entry `id` on this connection; returns its number (from 1).
    pub(crate) fn next(&self, id: u64) -> u64 {
        let mut counts = match self.counts.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some((_, n)) = counts.iter_mut().find(|(e, _)| *e == id) {
            *n += 1;
            return *n;
        }
        if counts.len() >= CONNECTION_ENTRIES {
            counts.remove(0);
        }
        counts.push((id, 1));
        1
    }
}

#[cfg(test)]
mod tests;
