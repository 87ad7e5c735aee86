//! The dispatcher's wake-ups, as the HTTP/1.1 lanes see them: when the next one is planned, and each as it
//! happens.
//!
//! A lane whose answer will arrive shortly before the next wake-up can leave it in the kernel until then (see
//! `http1::client`), so one wake-up of the thread serves both. Not for waiting on the timetable: the dispatcher
//! (`dispatch`) does that and tells its plans here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The dispatcher's wake-ups, told to the lanes: when the next one is due, and each as it happens. A lane whose
/// answer will arrive shortly before the next wake-up can leave it in the kernel until then (see `http1::client`), so one
/// wake-up of the thread serves both the answer and the next arrival: on a virtual machine a wake-up from idle
/// costs about as much CPU as a request (bench/loadgen.md, part d).
pub(crate) struct Ticks {
    origin: Instant,
    /// The next wake-up, in nanoseconds after `origin`; `u64::MAX` when none is planned.
    next: AtomicU64,
    woke: Notify,
}

impl Ticks {
    pub(crate) fn new(origin: Instant) -> Ticks {
        Ticks {
            origin,
            next: AtomicU64::new(u64::MAX),
            woke: Notify::new(),
        }
    }

    /// The dispatcher will wake up at `at`.
    pub(crate) fn plan(&self, at: Instant) {
        let ns = at.saturating_duration_since(self.origin).as_nanos();
        self.next
            .store(u64::try_from(ns).unwrap_or(u64::MAX), Ordering::Release);
    }

    /// The dispatcher woke up: every lane waiting for it goes on.
    pub(crate) fn wake(&self) {
        self.woke.notify_waiters();
    }

    /// No wake-up will come any more: lanes waiting for one go on, and none waits again.
    pub(crate) fn end(&self) {
        self.next.store(u64::MAX, Ordering::Release);
        self.woke.notify_waiters();
    }

    /// A future that completes at the next wake-up (or the end). It counts from its creation, polled or not, so
    /// create it before deciding to wait.
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.woke.notified()
    }

    /// When the next wake-up is planned, if it is still ahead and no later than `within` after `now`. One already
    /// past is stale: the dispatcher is issuing the arrivals of that wake-up and has not planned the next one.
    pub(crate) fn next_within(&self, now: Instant, within: Duration) -> Option<Instant> {
        let next = self.next.load(Ordering::Acquire);
        if next == u64::MAX {
            return None;
        }
        let at = self.origin + Duration::from_nanos(next);
        (at >= now && at <= now + within).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lane_sees_a_wake_up_only_while_it_is_planned_ahead_and_near() {
        let now = Instant::now();
        let ticks = Ticks::new(now);
        let ms = Duration::from_millis;
        assert_eq!(ticks.next_within(now, ms(1)), None, "nothing planned");
        ticks.plan(now + Duration::from_micros(400));
        assert_eq!(
            ticks.next_within(now, ms(1)),
            Some(now + Duration::from_micros(400))
        );
        assert_eq!(
            ticks.next_within(now, Duration::from_micros(100)),
            None,
            "too far"
        );
        // Once its instant has passed the plan is stale: the dispatcher is busy issuing, not asleep.
        assert_eq!(ticks.next_within(now + ms(1), ms(1)), None, "stale");
        ticks.plan(now + ms(2));
        ticks.end();
        assert_eq!(ticks.next_within(now + ms(1), ms(5)), None, "ended");
    }
}
