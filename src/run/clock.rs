//! The run's one clock: t = 0 as a monotonic instant (what every component schedules and stamps against) and as
//! the wall-clock time of that same instant (what `result.json`'s `started_at` and the interval log's StartTime
//! say), taken together so that a report lines up with the SUT's own logs to the millisecond.
//!
//! Not for the schedule itself: faultd and loadgen each keep their own, from this origin.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// t = 0 of a run.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// The origin on the monotonic clock.
    pub origin: Instant,
    /// The wall-clock time of the origin.
    pub wall: SystemTime,
}

impl Clock {
    /// A clock whose origin is `lead` from now, so that every component can be armed before it.
    pub fn starting_in(lead: Duration) -> Clock {
        // Read both clocks back to back; the pair is as close as two reads can be.
        let now = Instant::now();
        let wall = SystemTime::now();
        Clock {
            origin: now + lead,
            wall: wall + lead,
        }
    }

    /// The run time now (zero before the origin).
    pub fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(self.origin)
    }
}
