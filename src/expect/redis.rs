//! Expectations on what faultd counted per command of a Redis route (`protocol: redis`) and per entry of any
//! route (HTTP `matched` entries, Redis `redis` entries): "GET on cache failed at most 5 times during brownout",
//! "the oom entry took at least 10 commands".
//!
//! For: reading such an entry (`{ dependency: cache, command: GET, errors_at_most: 5, during: brownout }`,
//! `{ dependency: cache, entry: oom, taken_at_least: 10 }`), resolving it against the scenario, and judging it on
//! the record's `redis` and `entries`. Not for: counting (faultd does) or other dependency checks (`dependency`).
//! Both are judged on the finished run: counts per phase grow until the phase ends, and faultd counts per phase,
//! not per bucket.

use std::time::Duration;

use faultline_units::{Dur, Share};
use serde::{Deserialize, Serialize};

use super::spec::ExpectationSpec;
use super::words::{ms, trim2};
use super::Verdict;
use crate::record::RunRecord;

/// What a command's counts must stay within.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandBound {
    /// At most this many error replies (faultd's and the server's).
    ErrorsAtMost(u64),
    /// Error replies under this share of the command's calls.
    ErrorShareBelow(Share),
    /// At least this many calls.
    CallsAtLeast(u64),
    /// The 99th percentile of the command's latency under this.
    P99Below(Dur),
}

/// What an entry's counts must reach or stay within.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryBound {
    /// It took at least this many calls.
    TakenAtLeast(u64),
    /// It took at most this many calls.
    TakenAtMost(u64),
    /// At least this many calls met its conditions.
    MatchedAtLeast(u64),
}

/// A resolved check of this family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum RedisCheck {
    /// One command of a Redis route, over a phase or the run.
    Command {
        route: String,
        command: String,
        bound: CommandBound,
        during: Option<String>,
    },
    /// One entry of a route, over the run.
    Entry {
        route: String,
        entry: String,
        bound: EntryBound,
    },
}

/// Reads the bound of a `command` entry (exactly one) from `spec`.
pub fn command_bound(spec: &ExpectationSpec) -> Result<CommandBound, String> {
    let given: Vec<CommandBound> = [
        spec.errors_at_most.map(CommandBound::ErrorsAtMost),
        spec.error_share_below.map(CommandBound::ErrorShareBelow),
        spec.calls_at_least.map(CommandBound::CallsAtLeast),
        spec.p99_below.map(CommandBound::P99Below),
    ]
    .into_iter()
    .flatten()
    .collect();
    match given[..] {
        [bound] => Ok(bound),
        _ => Err("`command` needs one bound: `errors_at_most`, `error_share_below`, `calls_at_least` or `p99_below`".into()),
    }
}

/// Reads the bound of an `entry` entry (exactly one) from `spec`.
pub fn entry_bound(spec: &ExpectationSpec) -> Result<EntryBound, String> {
    let given: Vec<EntryBound> = [
        spec.taken_at_least.map(EntryBound::TakenAtLeast),
        spec.taken_at_most.map(EntryBound::TakenAtMost),
        spec.matched_at_least.map(EntryBound::MatchedAtLeast),
    ]
    .into_iter()
    .flatten()
    .collect();
    match given[..] {
        [bound] => Ok(bound),
        _ => Err(
            "`entry` needs one bound: `taken_at_least`, `taken_at_most` or `matched_at_least`"
                .into(),
        ),
    }
}

impl RedisCheck {
    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        match self {
            RedisCheck::Command {
                route,
                command,
                bound,
                during,
            } => {
                let what = match bound {
                    CommandBound::ErrorsAtMost(n) => format!("errors at most {n}"),
                    CommandBound::ErrorShareBelow(s) => format!("error share below {s}"),
                    CommandBound::CallsAtLeast(n) => format!("calls at least {n}"),
                    CommandBound::P99Below(d) => format!("p99 below {}", ms(d.get())),
                };
                let during = super::words::during_words(during);
                format!("{route} {command}: {what}{during}")
            }
            RedisCheck::Entry {
                route,
                entry,
                bound,
            } => {
                let what = match bound {
                    EntryBound::TakenAtLeast(n) => format!("taken at least {n}"),
                    EntryBound::TakenAtMost(n) => format!("taken at most {n}"),
                    EntryBound::MatchedAtLeast(n) => format!("matched at least {n}"),
                };
                format!("{route} entry {entry}: {what}")
            }
        }
    }

    /// Decided only on the finished run.
    pub fn decidable_live(&self) -> bool {
        false
    }

    /// The verdict on a finished run.
    pub fn evaluate(&self, name: String, record: &RunRecord) -> Verdict {
        match self {
            RedisCheck::Command {
                route,
                command,
                bound,
                during,
            } => {
                let Some(rec) = record.redis.get(route) else {
                    return Verdict::unrecorded(name, route, None);
                };
                let counts = rec.commands.get(command).and_then(|c| match during {
                    Some(p) => c.phases.get(p),
                    None => Some(&c.totals),
                });
                let (calls, errors) = counts.map_or((0, 0), |c| (c.calls, c.error_total()));
                let span = super::words::during_words(during);
                let subject = format!("{command} on {route}{span}");
                match *bound {
                    CommandBound::ErrorsAtMost(n) => Verdict::new(
                        name,
                        errors <= n,
                        format!("{subject}: {errors} error replies of {calls} calls; expected at most {n}"),
                        Some(errors as f64),
                        Some(n as f64),
                    ),
                    CommandBound::ErrorShareBelow(share) => {
                        if calls == 0 {
                            return Verdict::with_outcome(
                                name,
                                super::Outcome::Inconclusive,
                                format!("{subject}: no calls, so no share of errors"),
                                None,
                                Some(share.fraction()),
                            );
                        }
                        let measured = errors as f64 / calls as f64;
                        Verdict::new(
                            name,
                            measured < share.fraction(),
                            format!(
                                "{subject}: {}% of {calls} calls were error replies; expected below {share}",
                                trim2(measured * 100.0)
                            ),
                            Some(measured),
                            Some(share.fraction()),
                        )
                    }
                    CommandBound::CallsAtLeast(n) => Verdict::new(
                        name,
                        calls >= n,
                        format!("{subject}: {calls} calls; expected at least {n}"),
                        Some(calls as f64),
                        Some(n as f64),
                    ),
                    CommandBound::P99Below(d) => {
                        let answered = counts.filter(|c| !c.latency.is_empty());
                        let Some(c) = answered else {
                            return Verdict::with_outcome(
                                name,
                                super::Outcome::Inconclusive,
                                format!("{subject}: no answered calls, so no latency"),
                                None,
                                Some(d.as_secs_f64()),
                            );
                        };
                        let p99 = Duration::from_nanos(c.latency.value_at_quantile(0.99));
                        Verdict::new(
                            name,
                            p99 < d.get(),
                            format!("{subject}: p99 {} over {calls} calls; expected below {}", ms(p99), ms(d.get())),
                            Some(p99.as_secs_f64()),
                            Some(d.as_secs_f64()),
                        )
                    }
                }
            }
            RedisCheck::Entry {
                route,
                entry,
                bound,
            } => {
                let counts = record
                    .entries
                    .get(route)
                    .and_then(|e| e.get(entry))
                    .copied()
                    .unwrap_or_default();
                let (measured, n, passed, what) = match *bound {
                    EntryBound::TakenAtLeast(n) => (counts.taken, n, counts.taken >= n, "took"),
                    EntryBound::TakenAtMost(n) => (counts.taken, n, counts.taken <= n, "took"),
                    EntryBound::MatchedAtLeast(n) => {
                        (counts.matched, n, counts.matched >= n, "matched")
                    }
                };
                let expected = match bound {
                    EntryBound::TakenAtMost(_) => "at most",
                    _ => "at least",
                };
                Verdict::new(
                    name,
                    passed,
                    format!(
                        "entry {entry} on {route} {what} {measured} calls ({} matched, {} taken); expected {expected} {n}",
                        counts.matched, counts.taken
                    ),
                    Some(measured as f64),
                    Some(n as f64),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultd::tcp::protocol::redis::{CommandCounts, CommandRecording, RedisRecording};
    use faultd::MatchCounts;
    use std::collections::BTreeMap;

    fn counts(calls: u64, errors: u64, latencies_ms: &[u64]) -> CommandCounts {
        let mut c = CommandCounts {
            calls,
            ..CommandCounts::default()
        };
        if errors > 0 {
            c.errors.insert("OOM".into(), errors);
        }
        for ms in latencies_ms {
            c.latency.record(ms * 1_000_000).unwrap();
        }
        c
    }

    fn record() -> RunRecord {
        let mut r = RunRecord::empty(Duration::from_millis(100));
        let set = CommandRecording {
            in_flight: 0,
            totals: counts(100, 30, &[1; 100]),
            phases: BTreeMap::from([
                ("healthy".to_string(), counts(50, 0, &[1; 50])),
                ("oom".to_string(), counts(50, 30, &[250; 50])),
            ]),
        };
        r.redis.insert(
            "cache".into(),
            RedisRecording {
                commands: BTreeMap::from([("SET".to_string(), set)]),
                entries: BTreeMap::new(),
                garbage: 0,
            },
        );
        r.entries.insert(
            "cache".into(),
            BTreeMap::from([(
                "oom".to_string(),
                MatchCounts {
                    matched: 50,
                    taken: 30,
                },
            )]),
        );
        r
    }

    fn judge(check: RedisCheck) -> Verdict {
        let name = check.name();
        check.evaluate(name, &record())
    }

    fn command(bound: CommandBound, during: Option<&str>) -> RedisCheck {
        RedisCheck::Command {
            route: "cache".into(),
            command: "SET".into(),
            bound,
            during: during.map(String::from),
        }
    }

    #[test]
    fn a_commands_errors_calls_and_p99_are_judged_over_a_phase_or_the_run() {
        let v = judge(command(CommandBound::ErrorsAtMost(0), Some("healthy")));
        assert!(v.passed, "{}", v.sentence);
        let v = judge(command(CommandBound::ErrorsAtMost(10), Some("oom")));
        assert!(!v.passed);
        assert!(
            v.sentence.contains("30 error replies of 50 calls"),
            "{}",
            v.sentence
        );
        let v = judge(command(
            CommandBound::ErrorShareBelow(Share::from_fraction(0.5)),
            None,
        ));
        assert!(v.passed, "30 of 100: {}", v.sentence);
        let v = judge(command(
            CommandBound::ErrorShareBelow(Share::from_fraction(0.5)),
            Some("oom"),
        ));
        assert!(!v.passed, "30 of 50: {}", v.sentence);
        assert!(judge(command(CommandBound::CallsAtLeast(100), None)).passed);
        assert!(!judge(command(CommandBound::CallsAtLeast(51), Some("oom"))).passed);
        let p99 = |during| {
            judge(command(
                CommandBound::P99Below(Dur::from_millis(200)),
                during,
            ))
        };
        assert!(p99(Some("healthy")).passed);
        assert!(!p99(Some("oom")).passed, "{}", p99(Some("oom")).sentence);
        let none = judge(command(
            CommandBound::ErrorShareBelow(Share::from_fraction(0.5)),
            Some("absent"),
        ));
        assert!(none.inconclusive(), "{}", none.sentence);
    }

    #[test]
    fn an_entrys_taken_and_matched_counts_are_judged_and_an_unknown_route_is_unrecorded() {
        let entry = |bound| RedisCheck::Entry {
            route: "cache".into(),
            entry: "oom".into(),
            bound,
        };
        assert!(judge(entry(EntryBound::TakenAtLeast(30))).passed);
        assert!(!judge(entry(EntryBound::TakenAtMost(29))).passed);
        assert!(judge(entry(EntryBound::MatchedAtLeast(50))).passed);
        let missing = RedisCheck::Entry {
            route: "cache".into(),
            entry: "never".into(),
            bound: EntryBound::TakenAtLeast(1),
        };
        let v = judge(missing);
        assert!(
            !v.passed && v.sentence.contains("took 0 calls"),
            "{}",
            v.sentence
        );
        let v = judge(RedisCheck::Command {
            route: "db".into(),
            command: "GET".into(),
            bound: CommandBound::CallsAtLeast(1),
            during: None,
        });
        assert!(
            !v.passed && v.sentence.contains("no recording of route db"),
            "{}",
            v.sentence
        );
    }
}
