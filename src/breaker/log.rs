//! Breaker transitions read from the SUT's own output: a regex with a named group `state` (and optionally
//! `breaker`) applied to every line a command SUT prints, each match stamped with the moment the line was read.
//!
//! Not for capturing the output (the SUT's room does that) nor for SUTs the runner did not start.

use std::time::Duration;

use regex::Regex;
use tokio::time::Instant;

use super::{BreakerState, BreakerTimeline, Source};
use crate::output::OutputLine;

/// The timeline of `breaker` from the lines that match `pattern`. A line whose `breaker` group names another
/// breaker is skipped; a pattern without that group applies to every line.
pub fn timeline(
    lines: &[OutputLine],
    pattern: &Regex,
    breaker: &str,
    origin: Instant,
) -> BreakerTimeline {
    let obs: Vec<(Duration, BreakerState)> = lines
        .iter()
        .filter_map(|l| {
            let caps = pattern.captures(&l.text)?;
            if let Some(b) = caps.name("breaker") {
                if b.as_str() != breaker {
                    return None;
                }
            }
            let state = BreakerState::parse(caps.name("state")?.as_str())?;
            Some((l.at.saturating_duration_since(origin), state))
        })
        .collect();
    BreakerTimeline::from_observations(&obs, Source::Log, Duration::ZERO)
}
