//! The closed breaker's time-based sliding window: the calls of the last `window`, with their running counts of
//! failures and slow calls.
//!
//! Not for judging a call (the policy does) nor for the decision to trip, which the state machine takes from
//! these counts.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// What the window holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowCounts {
    /// Calls in the window.
    pub calls: u32,
    /// Failed calls in the window.
    pub failures: u32,
    /// Slow calls in the window.
    pub slow: u32,
}

/// Calls of the last `window`, exact (one entry per call): at 500 calls/s over 10 s that is 5,000 entries of 24
/// bytes, and exactness is what makes the tests able to say "the 20th call trips it".
#[derive(Debug, Clone, Default)]
pub(super) struct Window {
    calls: VecDeque<(Instant, bool, bool)>,
    counts: WindowCounts,
}

impl Window {
    pub(super) fn push(&mut self, at: Instant, failed: bool, slow: bool) {
        self.calls.push_back((at, failed, slow));
        self.counts.calls += 1;
        self.counts.failures += failed as u32;
        self.counts.slow += slow as u32;
    }

    /// Forgets calls that ended `window` or more before `now`.
    pub(super) fn prune(&mut self, now: Instant, window: Duration) {
        while let Some(&(at, failed, slow)) = self.calls.front() {
            if now.saturating_duration_since(at) < window {
                break;
            }
            self.calls.pop_front();
            self.counts.calls -= 1;
            self.counts.failures -= failed as u32;
            self.counts.slow -= slow as u32;
        }
    }

    /// What the window holds as of its last prune.
    pub(super) fn counts(&self) -> WindowCounts {
        self.counts
    }

    pub(super) fn clear(&mut self) {
        self.calls.clear();
        self.counts = WindowCounts::default();
    }
}
