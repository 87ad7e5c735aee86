//! Cross-checks of a breaker's timelines against each other: each source it has, and the one inferred from its
//! traffic. A change of state that one timeline shows and another does not, beyond what their resolutions allow,
//! is a disagreement, listed in the summary, result.json and the report so that nobody trusts a verdict without
//! seeing that its evidence is contested.
//!
//! A change agrees with another timeline when that timeline is in the same state somewhere within both
//! resolutions of it: a scrape that saw an opening 80 ms after a log line agrees with it, a scrape that never saw a
//! 30 ms half-open window does not. Not for choosing the evidence a verdict uses (`expect` does that); only for
//! saying where the evidence does not agree.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{BreakerState, BreakerTimeline, Source};

/// How far apart two sources may place the same change beyond their resolutions: a webhook's stamp, a log line
/// read from a pipe, a scrape's request all lag the change by a few milliseconds.
const SLACK: Duration = Duration::from_millis(50);

/// One change of state that one source saw and another did not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disagreement {
    pub breaker: String,
    /// When the change was seen, in seconds from t = 0.
    pub at_s: f64,
    pub to: BreakerState,
    pub seen_by: Source,
    /// The resolution of the source that saw it, in seconds.
    pub seen_resolution_s: f64,
    pub missed_by: Source,
    pub missed_resolution_s: f64,
    /// True when the source that missed it is at least as fine as the one that saw it: then the change itself is in
    /// doubt. False when a coarser source missed what a finer one saw, as it can at its resolution.
    pub finer_missed: bool,
}

impl Disagreement {
    /// One line for a person.
    pub fn sentence(&self) -> String {
        // The source as a subject, and whether it takes a plural verb.
        let noun = |s: Source| match s {
            Source::Metrics => ("the metrics scrape", false),
            Source::Webhook => ("the webhook events", true),
            Source::Log => ("the log lines", true),
            Source::Inferred => ("inference from traffic", false),
        };
        let (seen, seen_plural) = noun(self.seen_by);
        let (missed, missed_plural) = noun(self.missed_by);
        let ms = |s: f64| format!("±{:.0} ms", s * 1e3);
        let relation = if self.missed_resolution_s < self.seen_resolution_s
            || self.missed_resolution_s == 0.0
        {
            "finer: the change is in doubt"
        } else if self.missed_resolution_s == self.seen_resolution_s {
            "as fine: one of the two is wrong, or the change was shorter than both can place"
        } else {
            "coarser: it cannot see so short a change"
        };
        format!(
            "{seen} ({}) {} breaker {} going {} at {:.2} s; {missed} ({}) never {} it {} near then ({relation})",
            ms(self.seen_resolution_s),
            if seen_plural { "show" } else { "shows" },
            self.breaker,
            self.to,
            self.at_s,
            ms(self.missed_resolution_s),
            if missed_plural { "show" } else { "shows" },
            self.to,
        )
    }
}

/// Every disagreement between the timelines of each breaker.
pub fn disagreements(evidence: &BTreeMap<String, Vec<BreakerTimeline>>) -> Vec<Disagreement> {
    let mut out = Vec::new();
    for (breaker, timelines) in evidence {
        for a in timelines {
            for b in timelines {
                let (Some(sa), Some(sb)) = (a.source, b.source) else {
                    continue;
                };
                if std::ptr::eq(a, b) || sa == sb {
                    continue;
                }
                for tr in &a.transitions {
                    // Agreement: `b` is in the same state somewhere near, within both resolutions.
                    let tolerance = tr.resolution + b.resolution + SLACK;
                    let from = tr.at.saturating_sub(tolerance);
                    let agrees = b.state_at(from) == tr.to
                        || b.transitions_in(from, tr.at + tolerance + Duration::from_nanos(1))
                            .any(|other| other.to == tr.to);
                    if !agrees {
                        out.push(Disagreement {
                            breaker: breaker.clone(),
                            at_s: tr.at.as_secs_f64(),
                            to: tr.to,
                            seen_by: sa,
                            seen_resolution_s: tr.resolution.as_secs_f64(),
                            missed_by: sb,
                            missed_resolution_s: b.resolution.as_secs_f64(),
                            finer_missed: b.resolution <= a.resolution,
                        });
                    }
                }
            }
        }
    }
    out.sort_by(|x, y| x.at_s.total_cmp(&y.at_s));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use BreakerState::*;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    #[test]
    fn sources_that_agree_within_their_resolutions_raise_nothing() {
        let log = BreakerTimeline::from_observations(
            &[(s(5.02), Open), (s(35.04), Closed)],
            Source::Log,
            Duration::ZERO,
        );
        let scrape = BreakerTimeline::from_observations(
            &[
                (s(5.0), Closed),
                (s(5.1), Open),
                (s(35.0), Open),
                (s(35.1), Closed),
            ],
            Source::Metrics,
            s(0.1),
        );
        let all = BTreeMap::from([("pricing".to_string(), vec![log, scrape])]);
        assert_eq!(disagreements(&all), Vec::new());
    }

    #[test]
    fn a_flap_the_scrape_missed_and_an_opening_the_log_never_saw_are_told_apart() {
        let log = BreakerTimeline::from_observations(
            &[
                (s(5.0), Open),
                (s(9.0), Closed),
                (s(9.03), Open),
                (s(20.0), Closed),
            ],
            Source::Log,
            Duration::ZERO,
        );
        let scrape = BreakerTimeline::from_observations(
            &[
                (s(4.9), Closed),
                (s(5.0), Open),
                (s(20.0), Closed),
                (s(24.9), Closed),
                (s(25.0), Open),
            ],
            Source::Metrics,
            s(0.1),
        );
        let all = BTreeMap::from([("pricing".to_string(), vec![log, scrape])]);
        let d = disagreements(&all);
        let seen: Vec<(f64, BreakerState, Source, bool)> = d
            .iter()
            .map(|d| (d.at_s, d.to, d.seen_by, d.finer_missed))
            .collect();
        assert_eq!(
            seen,
            // The log's re-opening at 9.03 s agrees: the scrape was open then too, it only missed the close.
            vec![
                (9.0, Closed, Source::Log, false),
                (25.0, Open, Source::Metrics, true),
            ]
        );
        assert!(
            d[1].sentence().contains("(finer: the change is in doubt)"),
            "{}",
            d[1].sentence()
        );
        assert!(
            d[0].sentence().contains(
                "the log lines (±0 ms) show breaker pricing going closed at 9.00 s; the metrics scrape (±100 ms) never shows it closed near then (coarser"
            ),
            "{}",
            d[0].sentence()
        );
    }
}
