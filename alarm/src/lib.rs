//! A one-shot timer with nanosecond resolution whose expiry reaches the tokio runtime through its epoll, like
//! socket readiness: Linux's timerfd. tokio's own timer has a 1 ms granularity and fires ~1.2 ms late at the
//! median on a busy 2-core machine; an armed timerfd wakes the runtime within tens of microseconds of the instant,
//! without spinning and without a thread of its own.
//!
//! loadgen paces its timetable with one; faultd wakes delayed calls with one. Elsewhere than Linux there is none:
//! [`Alarm::new`] fails and callers fall back to tokio's timer.

use std::io;

use tokio::time::Instant;

/// A timerfd registered with the current tokio runtime.
#[cfg(target_os = "linux")]
pub struct Alarm {
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
    /// Where `due` counts from.
    base: Instant,
    /// The instant armed, in nanoseconds after `base`: an expiry is told from a stale readiness by the clock.
    due: std::sync::atomic::AtomicU64,
}

#[cfg(target_os = "linux")]
impl Alarm {
    /// A disarmed alarm on the current runtime (must be called from inside one).
    pub fn new() -> io::Result<Alarm> {
        use std::os::fd::FromRawFd;
        // SAFETY: a plain system call; the descriptor it returns is owned by the `OwnedFd` below.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh, valid descriptor that nothing else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: the `OwnedFd` keeps the descriptor open and unchanged for as long as the `AsyncFd` owns it.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(io::Error::from)?;
        Ok(Alarm {
            fd,
            base: Instant::now(),
            due: std::sync::atomic::AtomicU64::new(u64::MAX),
        })
    }

    /// Arms the alarm for `due`, replacing any earlier arming (and forgetting an expiry not yet waited for).
    /// tokio's clock is CLOCK_MONOTONIC, the timer's clock, so a relative arming is exact to the few nanoseconds
    /// it takes. A `due` already past fires at once.
    pub fn arm(&self, due: Instant) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // A zero value would disarm the timer: an instant already past is armed 1 ns ahead instead.
        let now = Instant::now();
        let left = due
            .saturating_duration_since(now)
            .max(std::time::Duration::from_nanos(1));
        let at = (now + left).saturating_duration_since(self.base).as_nanos();
        self.due.store(
            u64::try_from(at).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(left.subsec_nanos() as i32),
            },
        };
        // SAFETY: the descriptor is our timerfd and `spec` a valid itimerspec; the old value is not asked for.
        if unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } < 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits for the armed instant. Cancel-safe: dropped before the expiry, it leaves the alarm armed.
    ///
    /// The expiry is never read from the timerfd: arming resets its count, and the runtime's epoll is
    /// edge-triggered, so each expiry is one readiness event. A readiness is the expiry when the clock has
    /// reached the armed instant (the kernel's timer cannot end earlier: it starts after `arm` read the clock);
    /// before it, it is left over from an expiry that a re-arming cancelled. That saves a `read` per wake-up.
    pub async fn expired(&self) -> io::Result<()> {
        loop {
            let mut ready = self.fd.readable().await?;
            // tokio keeps a readiness that arrives after this one, so clearing it loses no expiry.
            ready.clear_ready();
            let due = self.due.load(std::sync::atomic::Ordering::Relaxed);
            if due != u64::MAX
                && Instant::now()
                    .saturating_duration_since(self.base)
                    .as_nanos()
                    >= u128::from(due)
            {
                return Ok(());
            }
        }
    }

    /// Arms the alarm for `due` and waits for it; returns at once if `due` has passed.
    pub async fn wait_until(&self, due: Instant) -> io::Result<()> {
        if due <= Instant::now() {
            return Ok(());
        }
        self.arm(due)?;
        self.expired().await
    }
}

/// No timerfd here: [`Alarm::new`] fails, so callers use tokio's timer.
#[cfg(not(target_os = "linux"))]
pub struct Alarm;

#[cfg(not(target_os = "linux"))]
impl Alarm {
    /// Always fails: there is no timerfd on this system.
    pub fn new() -> io::Result<Alarm> {
        Err(io::Error::other("no timerfd on this system"))
    }

    /// Unreachable in practice (no `Alarm` can be made).
    pub fn arm(&self, _due: Instant) -> io::Result<()> {
        Err(io::Error::other("no timerfd on this system"))
    }

    /// Unreachable in practice (no `Alarm` can be made).
    pub async fn expired(&self) -> io::Result<()> {
        Err(io::Error::other("no timerfd on this system"))
    }

    /// Unreachable in practice (no `Alarm` can be made).
    pub async fn wait_until(&self, _due: Instant) -> io::Result<()> {
        Err(io::Error::other("no timerfd on this system"))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "current_thread")]
    async fn it_wakes_at_its_instant_and_not_before() {
        let alarm = Alarm::new().unwrap();
        for ms in [1u64, 3, 7] {
            let due = Instant::now() + Duration::from_millis(ms);
            alarm.wait_until(due).await.unwrap();
            assert!(Instant::now() >= due, "woke before {ms} ms");
        }
        // An instant already past returns at once.
        let start = Instant::now();
        alarm
            .wait_until(start - Duration::from_millis(5))
            .await
            .unwrap();
        assert!(start.elapsed() < Duration::from_millis(50));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn re_arming_replaces_the_earlier_instant() {
        let alarm = Alarm::new().unwrap();
        let start = Instant::now();
        alarm.arm(start + Duration::from_secs(60)).unwrap();
        let due = start + Duration::from_millis(5);
        alarm.arm(due).unwrap();
        alarm.expired().await.unwrap();
        assert!(Instant::now() >= due);
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the 60 s arming was replaced"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_expiry_cancelled_by_a_re_arming_does_not_end_the_next_wait_early() {
        let alarm = Alarm::new().unwrap();
        // The first instant expires unwaited, leaving a readiness behind; the second must not end on it.
        alarm
            .arm(Instant::now() + Duration::from_millis(1))
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let due = Instant::now() + Duration::from_millis(20);
        alarm.arm(due).unwrap();
        alarm.expired().await.unwrap();
        assert!(Instant::now() >= due, "woke on the cancelled expiry");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_instant_already_past_fires_at_once_when_armed() {
        let alarm = Alarm::new().unwrap();
        let start = Instant::now();
        alarm.arm(start - Duration::from_millis(1)).unwrap();
        alarm.expired().await.unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
