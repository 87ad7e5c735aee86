//! Breaker timelines: for each breaker the SUT has, when it went closed -> open -> half-open -> closed, and how
//! we know. A timeline is built from whatever the SUT offers (a metrics endpoint, pushed events, log lines) or, for
//! any SUT at all, inferred from traffic. Each transition carries its source and its time resolution, because a
//! transition seen by a 500 ms scrape is only known to within 500 ms, and an expectation must say so.
//!
//! One file per source: `metrics` (the scrape loop) with `scrape` (reading a state off a page) and `prometheus`
//! (the page parser), `webhook`, `log`, `inference`; `run::watch` runs them all for a run.
//!
//! Not for: deciding whether a timeline is good. That is `expect`'s job; this module only records what happened.

pub mod crosscheck;
pub mod inference;
pub mod log;
pub mod metrics;
pub mod prometheus;
pub mod scrape;
pub mod webhook;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The three states of a circuit breaker (seed 000: closed passes calls, open rejects them, half-open probes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    /// Reads the usual spellings: closed/open/half_open/half-open/halfopen, any case.
    pub fn parse(s: &str) -> Option<Self> {
        match s
            .trim()
            .to_ascii_lowercase()
            .replace(['-', ' '], "_")
            .as_str()
        {
            "closed" | "close" => Some(BreakerState::Closed),
            "open" | "opened" => Some(BreakerState::Open),
            "half_open" | "halfopen" | "half_opened" => Some(BreakerState::HalfOpen),
            _ => None,
        }
    }

    /// How severe a state is, for merging several instances of one breaker: open beats half-open beats closed.
    fn severity(self) -> u8 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen => 1,
            BreakerState::Open => 2,
        }
    }

    /// The state of a breaker that runs as several instances, seen as one: open if any instance is open.
    pub fn most_severe(states: impl IntoIterator<Item = BreakerState>) -> Option<BreakerState> {
        states.into_iter().max_by_key(|s| s.severity())
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        })
    }
}

/// Where a transition was learned from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Metrics,
    Webhook,
    Log,
    Inferred,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Metrics => "metrics scrape",
            Source::Webhook => "webhook event",
            Source::Log => "log line",
            Source::Inferred => "inferred from traffic",
        })
    }
}

/// One change of state, at `at` from the run's origin. The change happened in `(at - resolution, at]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    #[serde(with = "secs")]
    pub at: Duration,
    pub from: BreakerState,
    pub to: BreakerState,
    pub source: Source,
    #[serde(with = "secs")]
    pub resolution: Duration,
}

/// The life of one breaker over a run. Starts closed; transitions are in time order and each changes the state.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BreakerTimeline {
    pub transitions: Vec<Transition>,
    /// How finely this timeline can place a transition (the scrape interval, or the inference window).
    #[serde(with = "secs")]
    pub resolution: Duration,
    /// Spans in which nothing could be observed (failed scrapes), as `[start, end)`.
    #[serde(default)]
    pub gaps: Vec<(f64, f64)>,
    /// Where the whole timeline comes from (also on each transition; this says it for a timeline without any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// For a polled source, every state it read and when: a scrape that saw the breaker open between two calls
    /// proves they belong to different half-open windows, even when it never saw the windows themselves.
    #[serde(skip)]
    pub samples: Vec<(Duration, BreakerState)>,
}

impl BreakerTimeline {
    /// Builds a timeline from observed states in time order. Repeated states are folded; each change becomes a
    /// transition at the time of the first observation showing it, with the time since the previous observation
    /// as its resolution (so a gap in scraping shows up as a coarse transition, not a wrong one).
    pub fn from_observations(
        observations: &[(Duration, BreakerState)],
        source: Source,
        nominal: Duration,
    ) -> Self {
        let mut timeline = BreakerTimeline {
            transitions: Vec::new(),
            resolution: nominal,
            gaps: Vec::new(),
            source: Some(source),
            samples: if nominal.is_zero() {
                Vec::new()
            } else {
                observations.to_vec()
            },
        };
        let mut state = BreakerState::Closed;
        let mut last_seen = Duration::ZERO;
        for &(at, observed) in observations {
            let since = at.saturating_sub(last_seen);
            if since > nominal.mul_f64(2.5) && !nominal.is_zero() {
                timeline
                    .gaps
                    .push((last_seen.as_secs_f64(), at.as_secs_f64()));
            }
            if observed != state {
                timeline.transitions.push(Transition {
                    at,
                    from: state,
                    to: observed,
                    source,
                    // Pushed sources (webhook, log) are exact: only a polled source's gaps widen a transition.
                    resolution: if nominal.is_zero() {
                        Duration::ZERO
                    } else {
                        since.max(nominal)
                    },
                });
                state = observed;
            }
            last_seen = at;
        }
        timeline
    }

    /// The state at time `t` (after any transition stamped at exactly `t`).
    pub fn state_at(&self, t: Duration) -> BreakerState {
        self.transitions
            .iter()
            .take_while(|tr| tr.at <= t)
            .last()
            .map(|tr| tr.to)
            .unwrap_or(BreakerState::Closed)
    }

    /// The spans `[start, end)` within `[from, to)` during which the breaker was in `state`.
    pub fn spans_in(
        &self,
        state: BreakerState,
        from: Duration,
        to: Duration,
    ) -> Vec<(Duration, Duration)> {
        let mut spans = Vec::new();
        let mut current = self.state_at(from);
        let mut since = from;
        for tr in self
            .transitions
            .iter()
            .filter(|tr| tr.at > from && tr.at < to)
        {
            if current == state {
                spans.push((since, tr.at));
            }
            current = tr.to;
            since = tr.at;
        }
        if current == state && since < to {
            spans.push((since, to));
        }
        spans
    }

    /// The timeline as far as `t`: transitions stamped after it are left out.
    pub fn until(mut self, t: Duration) -> BreakerTimeline {
        self.transitions.retain(|tr| tr.at <= t);
        self.samples.retain(|(at, _)| *at <= t);
        self
    }

    /// Whether this timeline places every transition exactly (pushed events and log lines do; a scrape and an
    /// inference only to within their resolution).
    pub fn is_exact(&self) -> bool {
        self.resolution.is_zero()
    }

    /// Transitions stamped in `[from, to)`.
    pub fn transitions_in(
        &self,
        from: Duration,
        to: Duration,
    ) -> impl Iterator<Item = &Transition> {
        self.transitions
            .iter()
            .filter(move |tr| tr.at >= from && tr.at < to)
    }
}

/// Durations in result files are seconds as floating point numbers: what a reader of result.json expects.
pub(crate) mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        if !(v.is_finite() && v >= 0.0) {
            return Err(serde::de::Error::custom(
                "expected a non-negative number of seconds",
            ));
        }
        Ok(Duration::from_secs_f64(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BreakerState::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    #[test]
    fn observations_fold_into_transitions_at_the_first_sample_showing_the_change() {
        let obs = [
            (s(0.5), Closed),
            (s(1.0), Closed),
            (s(1.5), Open),
            (s(2.0), Open),
            (s(2.5), HalfOpen),
            (s(3.0), Closed),
        ];
        let t = BreakerTimeline::from_observations(&obs, Source::Metrics, s(0.5));
        let got: Vec<_> = t
            .transitions
            .iter()
            .map(|tr| (tr.at, tr.from, tr.to))
            .collect();
        assert_eq!(
            got,
            vec![
                (s(1.5), Closed, Open),
                (s(2.5), Open, HalfOpen),
                (s(3.0), HalfOpen, Closed)
            ]
        );
        assert!(t.gaps.is_empty());
    }

    #[test]
    fn a_gap_in_scraping_widens_the_resolution_of_the_transition_behind_it() {
        let obs = [(s(0.5), Closed), (s(4.5), Open)];
        let t = BreakerTimeline::from_observations(&obs, Source::Metrics, s(0.5));
        assert_eq!(t.transitions[0].resolution, s(4.0));
        assert_eq!(t.gaps, vec![(0.5, 4.5)]);
    }

    #[test]
    fn state_at_and_spans_follow_the_transitions() {
        let obs = [
            (s(1.0), Open),
            (s(4.0), HalfOpen),
            (s(4.2), Closed),
            (s(6.0), Open),
        ];
        let t = BreakerTimeline::from_observations(&obs, Source::Webhook, Duration::ZERO);
        assert_eq!(t.state_at(s(0.5)), Closed);
        assert_eq!(t.state_at(s(1.0)), Open);
        assert_eq!(t.state_at(s(4.1)), HalfOpen);
        assert_eq!(t.state_at(s(7.0)), Open);
        assert_eq!(
            t.spans_in(Open, s(0.0), s(10.0)),
            vec![(s(1.0), s(4.0)), (s(6.0), s(10.0))]
        );
        assert_eq!(t.spans_in(Open, s(2.0), s(5.0)), vec![(s(2.0), s(4.0))]);
        assert_eq!(
            t.spans_in(Closed, s(0.0), s(5.0)),
            vec![(s(0.0), s(1.0)), (s(4.2), s(5.0))]
        );
        assert_eq!(t.transitions_in(s(4.0), s(6.0)).count(), 2);
    }

    #[test]
    fn several_instances_merge_to_the_most_severe_state() {
        assert_eq!(
            BreakerState::most_severe([Closed, HalfOpen, Closed]),
            Some(HalfOpen)
        );
        assert_eq!(
            BreakerState::most_severe([Closed, Open, HalfOpen]),
            Some(Open)
        );
        assert_eq!(BreakerState::most_severe([]), None);
        assert_eq!(BreakerState::parse("HALF-OPEN"), Some(HalfOpen));
        assert_eq!(BreakerState::parse("half_open"), Some(HalfOpen));
        assert_eq!(BreakerState::parse("shut"), None);
    }
}
