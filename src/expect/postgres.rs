//! Expectations on the statements of a dependency route speaking `protocol: postgres`, as faultd recorded them
//! per entry and phase: at most so many errors (of one SQLSTATE, or any), at least so many statements, a p99
//! latency bound, at most so many statements per request sent to the SUT (a transaction run again, or a call
//! retried, shows as more than one statement per request). `statement` names the entry (its `name`, `postgres[i]`, or `other` for the statements no entry
//! matched).
//!
//! Every figure is faultd's own: errors count faultd's answers and the server's alike, and the latency runs from
//! the statement sent on to the end of its reply. Not for the route's connections (`dependency`) nor for what the
//! SUT's driver reports.

use std::time::Duration;

use faultline_units::Dur;
use serde::{Deserialize, Serialize};

use super::dependency::per_request;
use super::spec::ExpectationSpec;
use super::words::{during_words, ms};
use super::{ended, span, Outcome, Verdict};
use crate::record::RunRecord;

/// A check on one entry's statements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostgresCheck {
    pub route: String,
    pub statement: String,
    pub bound: StatementBound,
    /// The phase the statements started in; every phase when absent.
    pub during: Option<String>,
}

/// What the statements must stay within.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StatementBound {
    /// At most this many errors, of `sqlstate` or any.
    ErrorsAtMost {
        at_most: u64,
        sqlstate: Option<String>,
    },
    /// At least this many statements.
    CallsAtLeast { at_least: u64 },
    /// The 99th percentile of their latency below this.
    P99Below { below: Dur },
    /// At most this many statements per request sent to the SUT in the same span.
    PerRequestAtMost { at_most: f64 },
}

/// A postgres check as written, its names not yet resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct PostgresEntry<'a> {
    route: &'a str,
    statement: &'a str,
    bound: StatementBound,
    during: Option<&'a str>,
}

/// Resolves a name a field gives against the scenario (the field, the name), or says why it cannot.
pub type Lookup<'r> = &'r dyn Fn(&str, &str) -> Result<String, String>;

impl<'a> PostgresEntry<'a> {
    /// The postgres check an entry holds (it names a `statement`), or what is wrong with it.
    pub fn read(spec: &'a ExpectationSpec) -> Option<Result<PostgresEntry<'a>, String>> {
        let statement = spec.statement.as_deref()?;
        let Some(route) = spec.dependency.as_deref() else {
            return Some(Err(
                "`statement` needs `dependency: <route>`, the postgres route".into(),
            ));
        };
        let bounds = [
            spec.errors_at_most
                .map(|at_most| StatementBound::ErrorsAtMost {
                    at_most,
                    sqlstate: spec.sqlstate.clone(),
                }),
            spec.calls_at_least
                .map(|at_least| StatementBound::CallsAtLeast { at_least }),
            spec.p99_below
                .map(|below| StatementBound::P99Below { below }),
            spec.per_request_at_most
                .map(|at_most| StatementBound::PerRequestAtMost { at_most }),
        ];
        let mut given = bounds.into_iter().flatten();
        let (Some(bound), None) = (given.next(), given.next()) else {
            return Some(Err(
                "`statement` takes one of `errors_at_most`, `calls_at_least`, `p99_below` or `per_request_at_most`".into(),
            ));
        };
        if let StatementBound::PerRequestAtMost { at_most } = bound {
            if !(at_most.is_finite() && at_most >= 0.0) {
                return Some(Err(format!(
                    "`per_request_at_most` must be a number at or above 0, got {at_most}"
                )));
            }
        }
        if spec.sqlstate.is_some() && !matches!(bound, StatementBound::ErrorsAtMost { .. }) {
            return Some(Err("`sqlstate` narrows `errors_at_most`; give that".into()));
        }
        Some(Ok(PostgresEntry {
            route,
            statement,
            bound,
            during: spec.during.as_deref(),
        }))
    }

    /// The check, its route and phase resolved.
    pub fn resolve(self, route: Lookup<'_>, phase: Lookup<'_>) -> Result<PostgresCheck, String> {
        Ok(PostgresCheck {
            route: route("dependency", self.route)?,
            statement: self.statement.to_string(),
            bound: self.bound,
            during: self.during.map(|p| phase("during", p)).transpose()?,
        })
    }
}

impl PostgresCheck {
    /// A short name, for JUnit test cases and tables.
    pub fn name(&self) -> String {
        let what = match &self.bound {
            StatementBound::ErrorsAtMost { at_most, sqlstate } => format!(
                "at most {at_most} {}errors",
                sqlstate
                    .as_ref()
                    .map(|s| format!("{s} "))
                    .unwrap_or_default()
            ),
            StatementBound::CallsAtLeast { at_least } => format!("at least {at_least} statements"),
            StatementBound::P99Below { below } => format!("p99 below {below}"),
            StatementBound::PerRequestAtMost { at_most } => {
                format!("at most {at_most} per SUT request")
            }
        };
        format!(
            "statements {} on {}: {what}{}",
            self.statement,
            self.route,
            during_words(&self.during)
        )
    }

    /// Decidable live: a bound of at most is broken for good once passed; the rest wait for the phase's end.
    pub(crate) fn decidable_live(&self) -> bool {
        true
    }

    pub(crate) fn decide(&self, name: String, record: &RunRecord) -> Option<Verdict> {
        let v = self.evaluate(name, record);
        let broken = v.failed() && matches!(self.bound, StatementBound::ErrorsAtMost { .. });
        (broken || ended(record, &self.during)).then_some(v)
    }

    pub(crate) fn evaluate(&self, name: String, record: &RunRecord) -> Verdict {
        let who = format!(
            "statements {} on {}{}",
            self.statement,
            self.route,
            during_words(&self.during)
        );
        let Some(route) = record.postgres.get(&self.route) else {
            return Verdict::new(
                name,
                false,
                format!("no postgres recording of route {}", self.route),
                None,
                None,
            );
        };
        let empty = Default::default();
        let phases = route
            .statements
            .get(&self.statement)
            .map_or(&empty, |s| &s.phases);
        let in_span = phases
            .iter()
            .filter(|(phase, _)| self.during.as_ref().is_none_or(|d| d == *phase))
            .map(|(_, p)| p);
        match &self.bound {
            StatementBound::ErrorsAtMost { at_most, sqlstate } => {
                let errors: u64 = in_span
                    .flat_map(|p| p.errors.iter())
                    .filter(|(code, _)| sqlstate.as_ref().is_none_or(|s| s == *code))
                    .map(|(_, n)| n)
                    .sum();
                let kind = sqlstate
                    .as_ref()
                    .map(|s| format!("{s} "))
                    .unwrap_or_default();
                let text = format!("{who} had {errors} {kind}errors; expected at most {at_most}");
                Verdict::new(
                    name,
                    errors <= *at_most,
                    text,
                    Some(errors as f64),
                    Some(*at_most as f64),
                )
            }
            StatementBound::CallsAtLeast { at_least } => {
                let calls: u64 = in_span.map(|p| p.calls).sum();
                let text = format!("{who}: {calls} statements; expected at least {at_least}");
                Verdict::new(
                    name,
                    calls >= *at_least,
                    text,
                    Some(calls as f64),
                    Some(*at_least as f64),
                )
            }
            StatementBound::P99Below { below } => {
                let mut all = faultline_hdr::new_histogram();
                for p in in_span {
                    let _ = all.add(&p.latency);
                }
                let bound = Some(below.get().as_secs_f64());
                if all.is_empty() {
                    let text = format!("{who}: no statement recorded");
                    return Verdict::with_outcome(name, Outcome::Inconclusive, text, None, bound);
                }
                let p99 = Duration::from_nanos(all.value_at_quantile(0.99));
                let text = format!("{who}: p99 {}; expected below {}", ms(p99), ms(below.get()));
                let measured = Some(p99.as_secs_f64());
                Verdict::new(name, p99 < below.get(), text, measured, bound)
            }
            StatementBound::PerRequestAtMost { at_most } => {
                let calls: u64 = in_span.map(|p| p.calls).sum();
                let s = span(record, &self.during);
                let sent = record.sent_in(record.buckets_in(s.start, s.end));
                let what = format!(
                    "statements {} on {}: {calls} for {sent} SUT requests",
                    self.statement, self.route
                );
                per_request(name, &s, calls, sent, *at_most, what)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultd::tcp::protocol::postgres::record::{StatementPhase, StatementRecording};
    use faultd::tcp::protocol::postgres::PostgresRecording;

    fn record() -> RunRecord {
        let mut r = RunRecord::empty(Duration::from_millis(100));
        r.duration = Duration::from_secs(20);
        r.phases = vec![
            crate::record::PhaseSpan {
                name: "healthy".into(),
                start: Duration::ZERO,
                end: Duration::from_secs(10),
            },
            crate::record::PhaseSpan {
                name: "brownout".into(),
                start: Duration::from_secs(10),
                end: Duration::from_secs(20),
            },
        ];
        let phase = |calls: u64, errors: &[(&str, u64)], ms: u64| {
            let mut p = StatementPhase {
                calls,
                ..Default::default()
            };
            p.errors = errors.iter().map(|(c, n)| (c.to_string(), *n)).collect();
            for _ in 0..calls {
                p.latency.record(ms * 1_000_000).unwrap();
            }
            p
        };
        let mut update = StatementRecording::default();
        update.phases.insert("healthy".into(), phase(100, &[], 2));
        update.phases.insert(
            "brownout".into(),
            phase(100, &[("40001", 10), ("25P02", 3)], 40),
        );
        let mut pg = PostgresRecording::default();
        pg.statements.insert("update".into(), update);
        r.postgres.insert("db".into(), pg);
        // One request sent to the SUT per 100 ms bucket, save the brownout's last second: 100 in healthy, 90 in
        // the brownout.
        r.sut = (0..200)
            .map(|i| crate::record::SutBucket {
                offered: u64::from(i < 190),
                ..Default::default()
            })
            .collect();
        r
    }

    fn spec(yaml: &str) -> ExpectationSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn judge(yaml: &str) -> Verdict {
        let s = spec(yaml);
        let entry = PostgresEntry::read(&s)
            .expect("a postgres entry")
            .expect("well formed");
        let ok = |_: &str, n: &str| Ok(n.to_string());
        entry
            .resolve(&ok, &ok)
            .unwrap()
            .evaluate("t".into(), &record())
    }

    #[test]
    fn errors_are_counted_per_phase_and_sqlstate() {
        assert!(
            judge("{ dependency: db, statement: update, errors_at_most: 0, during: healthy }")
                .passed
        );
        let v =
            judge("{ dependency: db, statement: update, errors_at_most: 12, during: brownout }");
        assert!(v.failed(), "{}", v.sentence);
        assert_eq!(v.measured, Some(13.0));
        let v =
            judge("{ dependency: db, statement: update, errors_at_most: 10, sqlstate: '40001' }");
        assert!(v.passed, "{}", v.sentence);
    }

    #[test]
    fn calls_and_p99_read_the_phase_they_name() {
        assert!(judge("{ dependency: db, statement: update, calls_at_least: 200 }").passed);
        assert!(judge(
            "{ dependency: db, statement: update, calls_at_least: 101, during: healthy }"
        )
        .failed());
        assert!(
            judge("{ dependency: db, statement: update, p99_below: 5ms, during: healthy }").passed
        );
        let v = judge("{ dependency: db, statement: update, p99_below: 5ms, during: brownout }");
        assert!(
            v.failed() && v.sentence.contains("p99 40"),
            "{}",
            v.sentence
        );
        let v = judge("{ dependency: db, statement: nothing, p99_below: 5ms }");
        assert!(v.inconclusive(), "{}", v.sentence);
    }

    #[test]
    fn statements_per_request_are_the_phases_statements_over_the_requests_sent_in_it() {
        let v = judge(
            "{ dependency: db, statement: update, per_request_at_most: 1.2, during: brownout }",
        );
        assert!(v.passed, "{}", v.sentence);
        assert!(
            (v.measured.unwrap() - 100.0 / 90.0).abs() < 1e-9,
            "{}",
            v.sentence
        );
        assert!(
            v.sentence.contains("100 for 90 SUT requests"),
            "{}",
            v.sentence
        );
        assert!(judge(
            "{ dependency: db, statement: update, per_request_at_most: 1.1, during: brownout }"
        )
        .failed());
        assert!(
            judge(
                "{ dependency: db, statement: update, per_request_at_most: 1.0, during: healthy }"
            )
            .passed
        );
        let v = judge("{ dependency: db, statement: update, per_request_at_most: 1.0 }");
        assert!(
            v.failed() && v.measured == Some(200.0 / 190.0),
            "{}",
            v.sentence
        );
    }

    #[test]
    fn an_entry_needs_its_route_and_one_bound() {
        let read = |y: &str| PostgresEntry::read(&spec(y)).map(|r| r.map(|_| ()));
        assert!(read("{ dependency: db, statement: u }").unwrap().is_err());
        assert!(read("{ statement: u, calls_at_least: 1 }")
            .unwrap()
            .is_err());
        assert!(
            read("{ dependency: db, statement: u, calls_at_least: 1, p99_below: 1s }")
                .unwrap()
                .is_err()
        );
        assert!(
            read("{ dependency: db, statement: u, p99_below: 1s, sqlstate: '40001' }")
                .unwrap()
                .is_err()
        );
        assert!(
            read("{ dependency: db, statement: u, per_request_at_most: -1 }")
                .unwrap()
                .is_err()
        );
        assert!(read("{ dependency: db, calls_at_least: 1 }").is_none());
    }
}
