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
    phases: BTreeMap<Arc<str>, CommandCounts>,
}

#[derive(Debug, Default)]
struct State {
    commands: BTreeMap<String, CommandState>,
    entries: BTreeMap<String, Arc<EntryTally>>,
    garbage: u64,
}

/// The recorder of one Redis route.
#[derive(Debug, Default)]
pub struct RedisRecorder {
    state: Mutex<State>,
}

/// How a command ended, for its counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// Answered, after this long; with the error's first word when the reply was an error.
    Answered(Duration, Option<&'a str>),
    /// Hung or closed by an entry, or its connection ended first: no reply.
    Unanswered,
}

impl RedisRecorder {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The name a command counts under: its own, or `OTHER` once [`MAX_COMMANDS`] names are counted.
    /// The name is copied only the first time it is counted: this runs twice for every command.
    fn slot<'s>(state: &'s mut State, name: &str) -> &'s mut CommandState {
        let known = state.commands.contains_key(name);
        let name = if known || state.commands.len() < MAX_COMMANDS {
            name
        } else {
            "OTHER"
        };
        if !state.commands.contains_key(name) {
            state
                .commands
                .insert(name.to_string(), CommandState::default());
        }
        state
            .commands
            .get_mut(name)
            .expect("the name was inserted above")
    }

    /// A command arrived and waits for its reply, in phase `phase`.
    pub fn sent(&self, name: &str, phase: &Arc<str>) {
        let mut state = self.state();
        let c = Self::slot(&mut state, name);
        c.in_flight += 1;
        let level = c.in_flight;
        c.totals.max_in_flight = c.totals.max_in_flight.max(level);
        let p = c.phases.entry(phase.clone()).or_default();
        p.max_in_flight = p.max_in_flight.max(level);
    }

    /// A command that [`RedisRecorder::sent`] counted ended, in phase `phase`.
    pub fn ended(&self, name: &str, phase: &Arc<str>, outcome: Outcome<'_>) {
        let mut state = self.state();
        let c = Self::slot(&mut state, name);
        c.in_flight = c.in_flight.saturating_sub(1);
        let p = c.phases.entry(phase.clone()).or_default();
        for counts in [p, &mut c.totals] {
            counts.calls += 1;
            if let Outcome::Answered(latency, error) = outcome {
                let _ = counts.latency.record((latency.as_nanos() as u64).max(1));
                if let Some(word) = error {
                    let known = counts.errors.contains_key(word);
                    let word = if known || counts.errors.len() < MAX_ERROR_WORDS {
                        word
                    } else {
                        "OTHER"
                    };
                    *counts.errors.entry(word.to_string()).or_default() += 1;
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
                .commands
                .iter()
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
        r.sent("SET", &a);
        r.sent("SET", &a);
        r.ended("SET", &a, Outcome::Answered(Duration::from_millis(1), None));
        r.ended(
            "SET",
            &b,
            Outcome::Answered(Duration::from_millis(2), Some("OOM")),
        );
        r.sent("GET", &b);
        r.ended("GET", &b, Outcome::Unanswered);
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
        let json = serde_json::to_string(&rec).unwrap();
        let back: RedisRecording = serde_json::from_str(&json).unwrap();
        assert_eq!(back, rec);
    }

    #[test]
    fn names_past_the_bound_count_as_other() {
        let r = RedisRecorder::default();
        let p: Arc<str> = "p".into();
        for i in 0..MAX_COMMANDS + 5 {
            r.sent(&format!("C{i}"), &p);
        }
        let rec = r.snapshot();
        assert_eq!(rec.commands.len(), MAX_COMMANDS + 1);
        assert_eq!(rec.commands["OTHER"].in_flight, 5);
    }
}
