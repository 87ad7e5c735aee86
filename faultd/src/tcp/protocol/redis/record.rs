//! The Redis recorder of one route: per command name, the commands answered, the error replies by their first
//! word, the latency from the command's arrival to its reply, and the commands in flight; per entry, the
//! commands it matched and took; and the connections whose bytes could not be framed.
//!
//! For: counting what the connections report, per phase and over the run, and the recording's form of it (in
//! `/recording` under the TCP route, on `/metrics`, and read by the runner). Not for: deciding anything.
//!
//! Both an error faultd wrote (an entry's `error`) and one the server wrote count under their first word: the
//! caller saw the same thing either way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::recorder::redis::{CommandCounts, CommandRecording, RedisRecording};
use crate::recorder::MatchCounts;
use crate::tally::EntryTally;

/// The most command names counted apart; the others count under `OTHER` (names come from the client).
pub const MAX_COMMANDS: usize = 256;
/// The most error words counted apart per command; the others count under `OTHER`.
pub const MAX_ERROR_WORDS: usize = 32;
/// The most entry names kept per route.
const MAX_ENTRIES: usize = 1024;

#[derive(Debug, Default)]
struct CommandState {
    in_flight: u64,
    totals: CommandCounts,
    /// Per phase in the order they came (few, and the last the one in force).
    phases: Vec<(Arc<str>, CommandCounts)>,
}

#[derive(Debug, Default)]
struct State {
    /// Each name's place in `commands`.
    ids: BTreeMap<String, CommandId>,
    commands: Vec<CommandState>,
    entries: BTreeMap<String, Arc<EntryTally>>,
    garbage: u64,
}

/// The recorder of one Redis route.
#[derive(Debug, Default)]
pub struct RedisRecorder {
    state: Mutex<State>,
}

/// A command name's place in its route's recorder, the same for the route's life: what a connection counts a
/// command under without looking its name up again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandId(u32);

/// How `n` commands of one name ended alike, for their counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub id: CommandId,
    /// Answered after this long; `None`: hung or closed by an entry, or their connection ended first.
    pub latency: Option<Duration>,
    /// The first word of the error reply that answered them.
    pub error: Option<String>,
    pub n: u64,
}

impl RedisRecorder {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where commands named `name` count: their own place, or `OTHER`'s once [`MAX_COMMANDS`] names are counted.
    /// A connection asks once per name it sees.
    pub fn id(&self, name: &str) -> CommandId {
        let mut state = self.state();
        if let Some(id) = state.ids.get(name) {
            return *id;
        }
        let name = if state.ids.len() < MAX_COMMANDS {
            name
        } else {
            "OTHER"
        };
        if let Some(id) = state.ids.get(name) {
            return *id;
        }
        let id = CommandId(state.commands.len() as u32);
        state.commands.push(CommandState::default());
        state.ids.insert(name.to_string(), id);
        id
    }

    /// Commands that arrived together and wait for their replies, in phase `phase`: one id per command, in order.
    pub fn sent(&self, phase: &Arc<str>, ids: &[CommandId]) {
        let mut state = self.state();
        for id in ids {
            let Some(c) = state.commands.get_mut(id.0 as usize) else {
                continue;
            };
            c.in_flight += 1;
            let level = c.in_flight;
            c.totals.max_in_flight = c.totals.max_in_flight.max(level);
            let p = phase_counts(&mut c.phases, phase);
            p.max_in_flight = p.max_in_flight.max(level);
        }
    }

    /// Commands that [`RedisRecorder::sent`] counted ended, in phase `phase`.
    pub fn ended(&self, phase: &Arc<str>, ended: &[Ended]) {
        let mut state = self.state();
        for e in ended {
            let Some(c) = state.commands.get_mut(e.id.0 as usize) else {
                continue;
            };
            c.in_flight = c.in_flight.saturating_sub(e.n);
            for counts in [phase_counts(&mut c.phases, phase), &mut c.totals] {
                counts.calls += e.n;
                let Some(latency) = e.latency else {
                    continue;
                };
                let _ = counts
                    .latency
                    .record_n((latency.as_nanos() as u64).max(1), e.n);
                if let Some(word) = &e.error {
                    let known = counts.errors.contains_key(word);
                    let word = if known || counts.errors.len() < MAX_ERROR_WORDS {
                        word.as_str()
                    } else {
                        "OTHER"
                    };
                    *counts.errors.entry(word.to_string()).or_default() += e.n;
                }
            }
        }
    }

    /// A connection whose bytes were not RESP.
    pub fn garbage(&self) {
        self.state().garbage += 1;
    }

    /// The counts of entry `name`, created on first use and kept across phases: entries of the same name (in the
    /// base and in a phase) count together.
    pub fn entry(&self, name: &str) -> Arc<EntryTally> {
        let mut state = self.state();
        if state.entries.len() >= MAX_ENTRIES && !state.entries.contains_key(name) {
            return Arc::new(EntryTally::default());
        }
        state.entries.entry(name.to_string()).or_default().clone()
    }

    /// What was recorded so far.
    pub fn snapshot(&self) -> RedisRecording {
        let state = self.state();
        RedisRecording {
            commands: state
                .ids
                .iter()
                .filter_map(|(name, id)| Some((name, state.commands.get(id.0 as usize)?)))
                .map(|(name, c)| {
                    (
                        name.clone(),
                        CommandRecording {
                            in_flight: c.in_flight,
                            totals: c.totals.clone(),
                            phases: c
                                .phases
                                .iter()
                                .map(|(p, counts)| (p.to_string(), counts.clone()))
                                .collect(),
                        },
                    )
                })
                .collect(),
            entries: state
                .entries
                .iter()
                .map(|(name, t)| {
                    let (matched, taken) = t.read();
                    (name.clone(), MatchCounts { matched, taken })
                })
                .filter(|(_, c)| c.matched > 0)
                .collect(),
            garbage: state.garbage,
        }
    }
}

/// A command's counts in `phase`, made on first use. The phase in force is nearly always the last one and the
/// same shared name, so it is found at the first comparison.
fn phase_counts<'a>(
    phases: &'a mut Vec<(Arc<str>, CommandCounts)>,
    phase: &Arc<str>,
) -> &'a mut CommandCounts {
    let found = phases
        .iter()
        .rposition(|(p, _)| Arc::ptr_eq(p, phase) || p == phase);
    let i = match found {
        Some(i) => i,
        None => {
            phases.push((phase.clone(), CommandCounts::default()));
            phases.len() - 1
        }
    };
    &mut phases[i].1
}

/// The Redis routes' figures for `/metrics`, by TCP route, encoded at scrape time.
#[derive(Debug)]
pub struct RedisMetrics(pub BTreeMap<String, RedisRecording>);

impl prometheus_client::collector::Collector for RedisMetrics {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use crate::exposition::Row;
        use prometheus_client::metrics::MetricType;

        let mut family = |name: &str, help: &str, kind: MetricType, rows: Vec<Row<'_>>| {
            crate::exposition::family(&mut encoder, name, help, kind, rows)
        };
        let redis: Vec<(&str, &RedisRecording)> =
            self.0.iter().map(|(name, r)| (name.as_str(), r)).collect();
        let per_command = |get: fn(&CommandRecording) -> u64| {
            redis
                .iter()
                .flat_map(|(route, r)| {
                    r.commands.iter().map(move |(command, c)| {
                        (
                            vec![("tcp_route", *route), ("command", command.as_str())],
                            get(c),
                        )
                    })
                })
                .collect::<Vec<Row<'_>>>()
        };
        family(
            "faultd_redis_commands",
            "Commands a Redis route answered (or hung or closed), by command",
            MetricType::Counter,
            per_command(|c| c.totals.calls),
        )?;
        family(
            "faultd_redis_in_flight",
            "Commands of a Redis route waiting for their reply now, by command",
            MetricType::Gauge,
            per_command(|c| c.in_flight),
        )?;
        let errors = redis
            .iter()
            .flat_map(|(route, r)| {
                r.commands.iter().flat_map(move |(command, c)| {
                    c.totals.errors.iter().map(move |(word, n)| {
                        let labels = vec![
                            ("tcp_route", *route),
                            ("command", command.as_str()),
                            ("error", word.as_str()),
                        ];
                        (labels, *n)
                    })
                })
            })
            .collect();
        family(
            "faultd_redis_errors",
            "Error replies of a Redis route (faultd's and the server's), by command and first word",
            MetricType::Counter,
            errors,
        )?;
        let entries = |get: fn(&crate::recorder::MatchCounts) -> u64| {
            redis
                .iter()
                .flat_map(|(route, r)| {
                    r.entries.iter().map(move |(entry, c)| {
                        (
                            vec![("tcp_route", *route), ("entry", entry.as_str())],
                            get(c),
                        )
                    })
                })
                .collect::<Vec<Row<'_>>>()
        };
        family(
            "faultd_redis_entry_matched",
            "Commands that met a Redis entry's conditions",
            MetricType::Counter,
            entries(|c| c.matched),
        )?;
        family(
            "faultd_redis_entry_taken",
            "Commands a Redis entry took",
            MetricType::Counter,
            entries(|c| c.taken),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_count_per_phase_and_over_the_run_with_errors_by_word() {
        let r = RedisRecorder::default();
        let (a, b): (Arc<str>, Arc<str>) = ("healthy".into(), "oom".into());
        let (set, get) = (r.id("SET"), r.id("GET"));
        assert_eq!(r.id("SET"), set);
        r.sent(&a, &[set, set]);
        let ended = |latency: Option<u64>, error: Option<&str>| Ended {
            id: set,
            latency: latency.map(Duration::from_millis),
            error: error.map(str::to_string),
            n: 1,
        };
        r.ended(&a, &[ended(Some(1), None)]);
        r.ended(&b, &[ended(Some(2), Some("OOM"))]);
        r.sent(&b, &[get]);
        r.ended(
            &b,
            &[Ended {
                id: get,
                latency: None,
                error: None,
                n: 1,
            }],
        );
        r.entry("oom").count(true);
        r.entry("never").count(false);
        let rec = r.snapshot();
        let set = &rec.commands["SET"];
        assert_eq!(
            (set.totals.calls, set.totals.max_in_flight, set.in_flight),
            (2, 2, 0)
        );
        assert_eq!(set.phases["oom"].errors["OOM"], 1);
        assert_eq!(set.phases["healthy"].error_total(), 0);
        assert_eq!(set.totals.latency.len(), 2);
        assert_eq!(rec.commands["GET"].totals.latency.len(), 0);
        assert_eq!(
            rec.entries["oom"],
            MatchCounts {
                matched: 1,
                taken: 1
            }
        );
        assert_eq!(
            rec.entries["never"],
            MatchCounts {
                matched: 1,
                taken: 0
            }
        );
        // Alike endings count together: a pipeline of 16 answered in one read.
        r.sent(&a, &[get; 16]);
        r.ended(
            &a,
            &[Ended {
                id: get,
                latency: Some(Duration::from_micros(300)),
                error: Some("LOADING".into()),
                n: 16,
            }],
        );
        let rec = r.snapshot();
        let get = &rec.commands["GET"];
        assert_eq!((get.totals.calls, get.totals.max_in_flight), (17, 16));
        assert_eq!(get.phases["healthy"].errors["LOADING"], 16);
        assert_eq!(get.totals.latency.len(), 16);
        assert_eq!(get.in_flight, 0);
        let json = serde_json::to_string(&rec).unwrap();
        let back: RedisRecording = serde_json::from_str(&json).unwrap();
        assert_eq!(back, rec);
    }

    #[test]
    fn names_past_the_bound_count_as_other() {
        let r = RedisRecorder::default();
        let p: Arc<str> = "p".into();
        for i in 0..MAX_COMMANDS + 5 {
            r.sent(&p, &[r.id(&format!("C{i}"))]);
        }
        let rec = r.snapshot();
        assert_eq!(rec.commands.len(), MAX_COMMANDS + 1);
        assert_eq!(rec.commands["OTHER"].in_flight, 5);
    }
}
