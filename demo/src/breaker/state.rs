//! The breaker's three states and the change from one to another, as the rest of the demo sees them: the label
//! values of metrics, logs and webhook events, the gauge's numbers, and the [`StateChange`] the state machine
//! hands back for the layer to publish.
//!
//! Not for deciding when a state changes (the state machine in `breaker`) nor for publishing it (`observe`).

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// The three states, with the label values used in metrics and transition events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Calls pass; outcomes are counted.
    Closed,
    /// Calls are refused without touching the network.
    Open,
    /// A few probe calls pass to test recovery.
    HalfOpen,
}

impl BreakerState {
    /// `closed`, `open` or `half_open`: the label value in metrics, logs and webhook events.
    pub fn label(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    /// The value of the `circuit_breaker_state` gauge: 0 closed, 1 open, 2 half-open (seed 002's convention).
    pub fn gauge(self) -> i64 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::Open => 1,
            BreakerState::HalfOpen => 2,
        }
    }
}

/// A change of state at `at`, for the layer to publish (metric, log line, webhook).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateChange {
    /// The state left.
    pub from: BreakerState,
    /// The state entered.
    pub to: BreakerState,
    /// When it happened (the `now` of the call that caused it).
    pub at: Instant,
}
