//! A postgres route's entries made ready for the hot path, and the decision of which entry takes a statement.
//!
//! For: compiling a list (regexes once), the triggers (`share` drawn from the seed per statement; `every` and
//! `calls` counting the route's or the connection's matching statements; `first` a connection's), and the
//! counts that restart with each phase (each compiled entry counts under a number of its own). Not for: what the fault does
//! (see `session`) or recording (see `record`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use regex::Regex;

use faultline_units::Share;

use crate::behaviours::matched::{Trigger, NEXT_ENTRY};
use crate::behaviours::{ConnectionCounts, Per, PostgresFault, StatementFault};
use crate::draw::{route_key, CallDraws};

/// One compiled entry.
#[derive(Debug)]
pub struct Entry {
    /// Its name in the recording.
    pub label: Arc<str>,
    /// Its pattern as written (shown in the recording).
    pub pattern: Option<String>,
    regex: Option<Regex>,
    /// `every`, `calls` or `first`, and what it counts; `None` for a share's draw or every matching statement.
    trigger: Option<(Trigger, Per)>,
    share: Option<f64>,
    /// Its number among every compiled entry, under which connections count its statements.
    id: u64,
    fault: StatementFault,
    /// Matching statements of the route so far (under this list).
    seen: AtomicU64,
    key: u64,
}

/// The entries in force on a route.
#[derive(Debug)]
pub struct Entries {
    /// The entries, in list order.
    pub list: Vec<Entry>,
    /// The list it was compiled from.
    pub source: Vec<PostgresFault>,
}

/// The decision for one statement.
#[derive(Debug, PartialEq)]
pub struct Decision {
    /// The entry it is recorded under: the one that took it, else the first that matched.
    pub entry: Option<usize>,
    /// The fault, when an entry took it.
    pub fault: Option<StatementFault>,
}

impl Entries {
    /// Compiles a validated list (an entry that fails to compile is left out, with a warning).
    pub fn new(list: &[PostgresFault]) -> Entries {
        let source = list.to_vec();
        let list = list
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                let regex = match f.conditions.statement.as_deref().map(Regex::new) {
                    Some(Ok(r)) => Some(r),
                    Some(Err(e)) => {
                        tracing::warn!("postgres entry {} left out: {e}", f.label(i));
                        return None;
                    }
                    None => None,
                };
                let label = f.label(i);
                Some(Entry {
                    key: route_key(&label),
                    label: label.into(),
                    pattern: f.conditions.statement.clone(),
                    regex,
                    trigger: f.trigger_fields().compile(),
                    share: f.share.map(Share::fraction),
                    id: NEXT_ENTRY.fetch_add(1, Ordering::Relaxed),
                    fault: f.fault(),
                    seen: AtomicU64::new(0),
                })
            })
            .collect();
        Entries { list, source }
    }

    /// An empty list (a byte-for-byte postgres route).
    pub fn none() -> Entries {
        Entries::new(&[])
    }

    /// Which entry takes `statement` on connection `conn` of the route (`seed` and `route` key the draws);
    /// counts every entry it meets up to the one that takes it.
    pub fn decide(
        &self,
        statement: &str,
        seed: u64,
        route: u64,
        conn: &ConnectionCounts,
    ) -> Decision {
        let mut first_match = None;
        for (i, e) in self.list.iter().enumerate() {
            if !e.regex.as_ref().is_none_or(|r| r.is_match(statement)) {
                continue;
            }
            first_match.get_or_insert(i);
            let n_route = e.seen.fetch_add(1, Ordering::Relaxed) + 1;
            let takes = match (&e.trigger, e.share) {
                (Some((trigger, Per::Route)), _) => trigger.picks(n_route),
                (Some((trigger, Per::Connection)), _) => trigger.picks(conn.next(e.id)),
                (None, Some(share)) => {
                    CallDraws::new(seed, route ^ e.key.rotate_left(17), n_route).fault < share
                }
                (None, None) => true,
            };
            if takes {
                return Decision {
                    entry: Some(i),
                    fault: Some(e.fault.clone()),
                };
            }
        }
        Decision {
            entry: first_match,
            fault: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(yaml: &str) -> Vec<PostgresFault> {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn every_counts_the_routes_matching_statements_and_first_each_connections() {
        let e = Entries::new(
            &list("[ { name: upd, match: { statement: '^UPDATE' }, every: 2, terminate: true }, { first: 1, delay: 1s } ]"),
        );
        let (a, b) = (ConnectionCounts::default(), ConnectionCounts::default());
        let d = |s: &str, c: &ConnectionCounts| e.decide(s, 1, 2, c);
        let delay = Some(StatementFault::Delay(std::time::Duration::from_secs(1)));
        // upd passes on the route's first UPDATE: the next entry takes the connection's first statement.
        assert_eq!(
            d("UPDATE x", &a),
            Decision {
                entry: Some(1),
                fault: delay.clone()
            }
        );
        assert_eq!(d("UPDATE x", &b).fault, Some(StatementFault::Terminate));
        assert_eq!(
            d("select 1", &a),
            Decision {
                entry: Some(1),
                fault: None
            }
        );
        assert_eq!(
            d("select 1", &b),
            Decision {
                entry: Some(1),
                fault: delay
            }
        );
        assert_eq!(
            d("UPDATE x", &a),
            Decision {
                entry: Some(0),
                fault: None
            }
        );
    }

    #[test]
    fn a_share_takes_about_its_share_and_the_same_seed_the_same_statements() {
        let e = Entries::new(&list("[ { share: 10%, terminate: true } ]"));
        let run = |e: &Entries| {
            let c = ConnectionCounts::default();
            (0..2000)
                .filter(|_| e.decide("x", 7, 3, &c).fault.is_some())
                .count()
        };
        let taken = run(&e);
        assert!((120..280).contains(&taken), "{taken} of 2000");
        let again = Entries::new(&list("[ { share: 10%, terminate: true } ]"));
        assert_eq!(run(&again), taken);
    }
}
