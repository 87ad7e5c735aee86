//! A line a command SUT printed, stamped with the moment it was read: what the run's process handling captures, and
//! what a log readiness check and a log breaker source read.
//!
//! Not for capturing the output (`run::child` does that) nor for matching it (`breaker::log`, `run::ready`).

/// A line the SUT printed, with the run time at which it was read.
#[derive(Debug, Clone)]
pub struct OutputLine {
    pub at: tokio::time::Instant,
    pub text: String,
}
