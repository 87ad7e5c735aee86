//! `faultline size`: a breaker sized from real numbers, by the arithmetic of the seeds (seed 000 above all). From
//! a healthy p99, a rate, the instances sharing it, a pool and a degraded latency, given on the command line or read
//! from a record, it derives the timeout (3x the healthy p99, and what that cuts off the recorded distribution),
//! the calls in flight with and without it against the pool (Little's law), the failure-rate threshold against the
//! calls each instance sees per window, the open window against the fallback, and the half-open rule, each with its
//! reason. It can write a scenario that encodes those settings and the expectations they must meet.
//!
//! `evidence` reads the numbers from a run's folder or a record; `arithmetic` computes; `opening` plays the
//! breaker's window over a recorded degradation; `text` says it; `scenario` writes the scenario. Not for running
//! anything: the scenario written is run or swept like any other.

mod arithmetic;
mod evidence;
mod opening;
mod scenario;
mod text;

use std::path::PathBuf;

use faultline_units::{Dur, Share};
use serde::Serialize;

pub use arithmetic::{
    nice_up, Breaker, Figure, HalfOpen, InFlight, Numbers, OpenWindow, Origin, Sizing, Timeout,
};
pub use evidence::{from_record, from_run, Evidence, Span};
pub use scenario::{scenario, CommandSut, Target};
pub use text::text;

/// Sizes from the given numbers, each missing one read from `evidence` when there is one, with its warnings.
pub fn sizing(given: &Given, evidence: Option<&Evidence>) -> Result<Sizing, SizeError> {
    let mut s = Sizing::compute(given, evidence)?;
    s.warnings = text::warnings(&s);
    Ok(s)
}

/// Why a sizing could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SizeError {
    #[error("{}: {why}", path.display())]
    Record { path: PathBuf, why: String },
    #[error(transparent)]
    Import(#[from] crate::import::ImportError),
    #[error("{0}")]
    Numbers(String),
}

/// What serves a request while the breaker is open (seed 000: decide the fallback before the duration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    /// The last good answer, labelled stale.
    Stale,
    /// A degraded default: an empty strip, an unpersonalised answer.
    Default,
    /// None: 503 with Retry-After, a hard error for the caller.
    None,
}

impl Fallback {
    /// Whether requests failed fast are served something the caller can use.
    pub fn serves(self) -> bool {
        !matches!(self, Fallback::None)
    }
}

/// The numbers a user gives and the choices a user makes; what is not given is read from the record, if any.
#[derive(Debug, Clone)]
pub struct Given {
    /// The dependency's healthy p99.
    pub p99: Option<Dur>,
    /// Calls per second to the dependency, over all instances.
    pub rate: Option<f64>,
    /// Instances of the calling service sharing that rate, each with its own breaker and pool.
    pub instances: u32,
    /// Connections (or the bulkhead) per instance.
    pub pool: Option<u32>,
    /// The dependency's latency when degraded.
    pub degraded: Option<Dur>,
    /// The failure rate that trips the breaker.
    pub failure_rate: Share,
    /// The breaker's rolling window.
    pub window: Dur,
    /// Calls the window must hold before the rate counts.
    pub min_calls: u32,
    /// How long the breaker stays open; chosen from the fallback when not given.
    pub open_for: Option<Dur>,
    pub fallback: Fallback,
    /// Probes let through at once when half-open.
    pub half_open_calls: u32,
    /// Successful probes that close it.
    pub close_after: u32,
}

impl Default for Given {
    /// Seed 000's breaker: 50% over a rolling 10 s window with a 20-call floor, one probe, the stale value.
    fn default() -> Given {
        Given {
            p99: None,
            rate: None,
            instances: 1,
            pool: None,
            degraded: None,
            failure_rate: Share::from_fraction(0.5),
            window: Dur::from_millis(10_000),
            min_calls: 20,
            open_for: None,
            fallback: Fallback::Stale,
            half_open_calls: 1,
            close_after: 1,
        }
    }
}
