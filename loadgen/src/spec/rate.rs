//! The arrival rate as the scenario writes it (`load.rate`: one rate, or segments that step or ramp) and how
//! arrivals are spaced (`load.arrivals`), with the checks of the segments.
//!
//! Not for turning rates into send times (that is `schedule`).

use std::fmt;

use faultline_units::{Dur, Rate};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::LoadError;

/// How inter-arrival gaps are drawn. Both follow the same rate curve; Poisson adds the burstiness of
/// independent users and is reproducible from the run's seed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Evenly spaced: the i-th arrival is where the expected count reaches i (t0 + i/R at a constant rate).
    #[default]
    Uniform,
    /// Exponential gaps (a Poisson process with the same rate curve), drawn from a seeded generator.
    Poisson,
}

/// The arrival rate over the run: one constant rate, or segments that step or ramp between rates.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(untagged)]
#[serde(untagged)]
pub enum RateSpec {
    /// One rate for the whole run.
    Constant(Rate),
    /// Segments in time order; the rate before the first segment is zero.
    Segments(Vec<RateSegment>),
}

/// One change of the arrival rate: from `at` on, either a new constant `rate`, or a linear ramp from the rate in
/// effect at `at` to `ramp_to` over `over` (held after the ramp).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateSegment {
    /// When this segment begins, from the run's origin.
    pub at: Dur,
    /// The constant rate from `at` on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// The rate a ramp reaches at `at + over`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_to: Option<Rate>,
    /// The length of the ramp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<Dur>,
}

// A hand-written Deserialize instead of `untagged`: serde's untagged errors say only "did not match any variant",
// which names neither the field nor what was expected.
impl<'de> Deserialize<'de> for RateSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RateSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a rate such as \"500/s\" or a list of segments such as [{{at: 0s, rate: 100/s}}]")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RateSpec, E> {
                v.parse().map(RateSpec::Constant).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RateSpec, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RateSpec, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RateSpec, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RateSpec, A::Error> {
                let mut segments = Vec::new();
                while let Some(segment) = seq.next_element::<RateSegment>()? {
                    segments.push(segment);
                }
                Ok(RateSpec::Segments(segments))
            }
        }
        d.deserialize_any(V)
    }
}

impl RateSpec {
    /// Checks that the rate sends something, and that segments are in time order with one kind each and ramps
    /// that end before the next segment.
    pub(crate) fn check(&self) -> Result<(), LoadError> {
        let bad = |field: String, why: String| Err(LoadError::InvalidSpec { field, why });
        let sends = match self {
            RateSpec::Constant(r) => r.per_sec() > 0.0,
            RateSpec::Segments(segments) => segments
                .iter()
                .flat_map(|s| [s.rate, s.ramp_to])
                .flatten()
                .any(|r| r.per_sec() > 0.0),
        };
        if !sends && !matches!(self, RateSpec::Segments(s) if s.is_empty()) {
            return bad(
            "load.rate".into(),
            "a rate of 0/s sends no request, so there is nothing to judge: give a rate above zero \
             (e.g. `rate: 100/s`)"
                .into(),
        );
        }
        if let RateSpec::Segments(segments) = self {
            if segments.is_empty() {
                return bad("load.rate".into(), "the list of segments is empty".into());
            }
            for (i, s) in segments.iter().enumerate() {
                let field = format!("load.rate[{i}]");
                match (s.rate, s.ramp_to, s.over) {
                    (Some(_), None, None) => {}
                    (None, Some(_), Some(over)) if over.get().is_zero() => {
                        return bad(field, "a ramp needs `over` longer than 0s".into())
                    }
                    (None, Some(_), Some(_)) => {}
                    (None, Some(_), None) => {
                        return bad(field, "`ramp_to` needs `over` (the ramp's length)".into())
                    }
                    (None, None, Some(_)) => {
                        return bad(field, "`over` needs `ramp_to` (the rate to reach)".into())
                    }
                    (None, None, None) => {
                        return bad(field, "give either `rate` or `ramp_to` with `over`".into())
                    }
                    _ => {
                        return bad(
                            field,
                            "give either `rate` or `ramp_to` with `over`, not both".into(),
                        )
                    }
                }
                if let Some(next) = segments.get(i + 1) {
                    if next.at <= s.at {
                        return bad(
                            format!("load.rate[{}].at", i + 1),
                            format!(
                                "segments must be in time order: {} does not come after {}",
                                next.at, s.at
                            ),
                        );
                    }
                    if let Some(over) = s.over {
                        if s.at.get() + over.get() > next.at.get() {
                            return bad(
                                format!("{field}.over"),
                                format!(
                                "the ramp from {} over {} ends after the next segment starts at {}",
                                s.at, over, next.at
                            ),
                            );
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
