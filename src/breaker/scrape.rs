//! Reading a breaker's state off a scraped metrics page: the presets for the metric names people actually export
//! (seed 002's `circuit_breaker_state` gauge, Resilience4j's `resilience4j_circuitbreaker_state`) and a custom
//! mapping for everything else.
//!
//! Not for fetching pages (`metrics` does that on its interval) nor for turning states into transitions
//! (`BreakerTimeline::from_observations`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::prometheus::Sample;
use super::BreakerState;

/// The metric families faultline knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// `circuit_breaker_state{operation="<breaker>"}` with 0 closed, 1 open, 2 half-open (seed 002's names; the
    /// demo service exports these).
    Seed,
    /// `resilience4j_circuitbreaker_state{name="<breaker>",state="..."}`: one series per state, 1 for the current.
    Resilience4j,
}

/// How a breaker's state is encoded in a metric, once presets and overrides are resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct StateMapping {
    pub metric: String,
    /// Every one of these labels must match for a series to belong to the breaker.
    pub labels: BTreeMap<String, String>,
    pub encoding: Encoding,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Encoding {
    /// One gauge whose value names the state.
    Gauge(Vec<(f64, BreakerState)>),
    /// One series per state, the state in this label, value 1 for the current state.
    StateLabel(String),
}

impl StateMapping {
    /// The mapping of a preset for the breaker called `breaker`, with `labels` overriding the preset's matcher.
    pub fn preset(preset: Preset, breaker: &str, labels: &BTreeMap<String, String>) -> Self {
        match preset {
            Preset::Seed => StateMapping {
                metric: "circuit_breaker_state".into(),
                labels: if labels.is_empty() {
                    BTreeMap::from([("operation".to_string(), breaker.to_string())])
                } else {
                    labels.clone()
                },
                encoding: Encoding::Gauge(vec![
                    (0.0, BreakerState::Closed),
                    (1.0, BreakerState::Open),
                    (2.0, BreakerState::HalfOpen),
                ]),
            },
            Preset::Resilience4j => StateMapping {
                metric: "resilience4j_circuitbreaker_state".into(),
                labels: if labels.is_empty() {
                    BTreeMap::from([("name".to_string(), breaker.to_string())])
                } else {
                    labels.clone()
                },
                encoding: Encoding::StateLabel("state".into()),
            },
        }
    }

    /// The breaker's state on this page. Several matching series (one per instance) merge to the most severe
    /// state; `None` when no series matches or none can be read.
    pub fn state(&self, samples: &[Sample]) -> Option<BreakerState> {
        let matching = samples.iter().filter(|s| {
            s.name == self.metric && self.labels.iter().all(|(k, v)| s.labels.get(k) == Some(v))
        });
        match &self.encoding {
            Encoding::Gauge(values) => BreakerState::most_severe(matching.filter_map(|s| {
                values
                    .iter()
                    .find(|(v, _)| (*v - s.value).abs() < 1e-9)
                    .map(|(_, st)| *st)
            })),
            Encoding::StateLabel(label) => BreakerState::most_severe(
                matching
                    .filter(|s| s.value >= 0.5)
                    .filter_map(|s| s.labels.get(label).and_then(|v| BreakerState::parse(v))),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::prometheus::parse;

    #[test]
    fn the_seed_preset_reads_the_gauge_and_merges_instances() {
        let page = "circuit_breaker_state{dependency=\"pricing\",operation=\"pricing\",instance=\"0\"} 0\n\
                    circuit_breaker_state{dependency=\"pricing\",operation=\"pricing\",instance=\"1\"} 1\n\
                    circuit_breaker_state{dependency=\"reviews\",operation=\"reviews\",instance=\"0\"} 2\n";
        let (samples, _) = parse(page);
        let m = StateMapping::preset(Preset::Seed, "pricing", &BTreeMap::new());
        assert_eq!(m.state(&samples), Some(BreakerState::Open));
        let r = StateMapping::preset(Preset::Seed, "reviews", &BTreeMap::new());
        assert_eq!(r.state(&samples), Some(BreakerState::HalfOpen));
        let none = StateMapping::preset(Preset::Seed, "payments", &BTreeMap::new());
        assert_eq!(none.state(&samples), None);
    }

    #[test]
    fn the_resilience4j_preset_reads_the_series_whose_value_is_one() {
        let page = "resilience4j_circuitbreaker_state{name=\"backendA\",state=\"closed\"} 0\n\
                    resilience4j_circuitbreaker_state{name=\"backendA\",state=\"open\"} 0\n\
                    resilience4j_circuitbreaker_state{name=\"backendA\",state=\"half_open\"} 1\n\
                    resilience4j_circuitbreaker_state{name=\"backendA\",state=\"forced_open\"} 0\n\
                    resilience4j_circuitbreaker_state{name=\"backendB\",state=\"open\"} 1\n";
        let (samples, _) = parse(page);
        let a = StateMapping::preset(Preset::Resilience4j, "backendA", &BTreeMap::new());
        assert_eq!(a.state(&samples), Some(BreakerState::HalfOpen));
        let b = StateMapping::preset(Preset::Resilience4j, "backendB", &BTreeMap::new());
        assert_eq!(b.state(&samples), Some(BreakerState::Open));
    }

    #[test]
    fn a_custom_mapping_matches_its_labels_and_values() {
        let (samples, _) = parse("cb{svc=\"pay\"} 10\ncb{svc=\"ship\"} 20\n");
        let m = StateMapping {
            metric: "cb".into(),
            labels: BTreeMap::from([("svc".into(), "pay".into())]),
            encoding: Encoding::Gauge(vec![
                (10.0, BreakerState::Closed),
                (20.0, BreakerState::Open),
            ]),
        };
        assert_eq!(m.state(&samples), Some(BreakerState::Closed));
    }
}
