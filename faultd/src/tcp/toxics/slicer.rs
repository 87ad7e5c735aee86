//! slicer: cut each chunk into slices of about `average_size` bytes (± `size_variation`), pausing `delay` µs
//! after each. For: parsers that assume a whole message arrives in one read. Not for: throttling (see
//! `bandwidth`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_count, check_duration, Attributes, ChunkPlan, ChunkRng, Effect, Slices};
use crate::behaviours::Invalid;

/// `{"average_size": bytes, "size_variation": bytes, "delay": µs}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slicer {
    /// The average slice, bytes; at least 1.
    #[serde(default)]
    pub average_size: i64,
    /// The spread of slice sizes, bytes; below `average_size`.
    #[serde(default)]
    pub size_variation: i64,
    /// The pause after each slice, µs.
    #[serde(default)]
    pub delay: i64,
}

impl Effect for Slicer {
    fn shape(&self, plan: &mut ChunkPlan, _rng: &mut ChunkRng) {
        plan.slices = Some(Slices {
            average: self.average_size.max(1) as u64,
            variation: self.size_variation.max(0) as u64,
            pause: Duration::from_micros(self.delay.max(0) as u64),
        });
    }
}

impl Attributes for Slicer {
    const TYPE: &'static str = "slicer";
    fn validate(&self) -> Result<(), Invalid> {
        let average = check_count("average_size", self.average_size)?;
        if average == 0 {
            return Err(Invalid::new("average_size", "must be at least 1 byte"));
        }
        let variation = check_count("size_variation", self.size_variation)?;
        if variation >= average {
            return Err(Invalid::new(
                "size_variation",
                format!("{variation} must be below average_size ({average})"),
            ));
        }
        check_duration("delay", self.delay, Duration::from_micros(1)).map(|_| ())
    }
}
