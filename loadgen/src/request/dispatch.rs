//! The issuing step of the request pipeline: the dispatcher walks the timetable, waits precisely for each
//! intended time and hands each arrival to the run's protocol ([`Issue`]), which checks the in-flight cap and
//! sends it or counts it dropped. Also the closed-model loop (`--users N`), kept for comparison only.
//!
//! The dispatcher tells the HTTP/1.1 lanes when it will wake up next ([`Ticks`]), so that an answer due just
//! before can wait in the kernel for that wake-up instead of waking the thread on its own.
//!
//! Not for building the timetable (`schedule`, `replay`), compiling the requests (`http1::compile`,
//! `http2::compile`) or sending them (`http1`, `http2`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};

use super::ticks::Ticks;
use super::Run;
use crate::replay::Arrival;

/// Seeds the request mix apart from the Poisson arrivals, so changing the mix never moves the timetable.
const MIX_SEED_SALT: u64 = 0x6d69_785f_7365_6564;

/// How the dispatcher waits for an intended time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pacing {
    /// A tokio task woken by a Linux timerfd armed for the exact instant (nanosecond resolution, delivered
    /// through the runtime's own epoll), without a thread of its own or a spin. The arrivals of one batch (see
    /// [`Batched`]) go out in one wake-up, and wake-ups are at least `coalesce` apart: the send lag is a
    /// wake-up's lateness plus at most `coalesce`.
    Precise { coalesce: Duration },
    /// A tokio task on the timer alone. Used under paused tokio time, where only tokio's clock moves.
    #[cfg_attr(not(test), allow(dead_code))]
    Timer,
}

/// An arrival of the timetable with its place in it: its index (from 0, over the whole timetable) and its batch.
pub(crate) struct Due<R> {
    pub(crate) index: u64,
    pub(crate) batch: u64,
    pub(crate) arrival: Arrival<R>,
}

/// Numbers the batches of a timetable (in time order): an arrival opens a new batch unless it is due within
/// `coalesce` of the first arrival of the current one. The dispatcher sends a batch in one wake-up, at its last
/// arrival's intended time, so no arrival goes out more than `coalesce` late for it; and the shares of a
/// distributed run keep whole batches, so their wake-ups add up to one process's.
pub(crate) struct Batched<I> {
    inner: std::iter::Enumerate<I>,
    coalesce: Duration,
    batch: u64,
    first: Option<Duration>,
}

impl<R, I: Iterator<Item = Arrival<R>>> Batched<I> {
    pub(crate) fn new(timetable: I, coalesce: Duration) -> Self {
        Batched {
            inner: timetable.enumerate(),
            coalesce,
            batch: 0,
            first: None,
        }
    }
}

impl<R, I: Iterator<Item = Arrival<R>>> Iterator for Batched<I> {
    type Item = Due<R>;

    fn next(&mut self) -> Option<Due<R>> {
        let (k, arrival) = self.inner.next()?;
        match self.first {
            Some(first) if arrival.intended < first + self.coalesce => {}
            Some(_) => {
                self.batch += 1;
                self.first = Some(arrival.intended);
            }
            None => self.first = Some(arrival.intended),
        }
        Some(Due {
            index: k as u64,
            batch: self.batch,
            arrival,
        })
    }
}

/// When the dispatcher wakes for each batch: at the batch's last arrival, and at least `coalesce` after the
/// wake-up planned before it, so a batch's first arrival is never planned more than `coalesce` late (batches
/// start at least `coalesce` apart) and wake-ups stay under one per `coalesce` (10,000/s by default). Each is
/// planned from the previous plan, not from when that wake-up happened: a wake-up the kernel delivers late must
/// not push every later one back by its lateness, which at 20,000/s added a wake-up's lateness to every
/// arrival's send lag.
#[derive(Debug)]
struct Wakeups {
    coalesce: Duration,
    planned: Option<Instant>,
}

impl Wakeups {
    fn new(coalesce: Duration) -> Wakeups {
        Wakeups {
            coalesce,
            planned: None,
        }
    }

    /// The wake-up for a batch whose last arrival is due at `due`.
    fn plan(&mut self, due: Instant) -> Instant {
        let at = self.planned.map_or(due, |p| due.max(p + self.coalesce));
        self.planned = Some(at);
        at
    }
}

/// Ends the ticks when the dispatcher's task ends, however it ends.
struct EndTicks(Option<Arc<Ticks>>);

impl Drop for EndTicks {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.end();
        }
    }
}

/// What the dispatcher hands each arrival to: one protocol's way of sending, HTTP/1.1's lanes
/// (`http1::Exchanges`) or HTTP/2's streams (`http2::Streams`), chosen once per run.
pub(crate) trait Issue: Send + Sync + 'static {
    /// A request the timetable gives whole (a replay's line), ready for this protocol.
    type Given: Send + 'static;

    /// The run this protocol's exchanges belong to.
    fn run(&self) -> &Run;

    /// The wake-ups the dispatcher tells its senders of, if they can use them.
    fn ticks(&self) -> Option<Arc<Ticks>> {
        None
    }

    /// Checks the cap, renders (unless the timetable gave `given`) and sends arrival `index` due at `intended`
    /// (from the origin), or counts it dropped.
    fn issue(
        self: &Arc<Self>,
        index: u64,
        intended: Duration,
        given: Option<Self::Given>,
        rng: &mut StdRng,
        max_in_flight: u64,
    );

    /// One closed-model user: sends, waits for the answer and sends again until `end` or a stop, numbering its
    /// requests `user`, `user + users`, ... Its intended time is its actual send.
    fn user(
        self: Arc<Self>,
        user: u32,
        users: u32,
        end: Instant,
        rng: StdRng,
        stop: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send;

    /// No arrival will come any more: senders waiting for one end (HTTP/1.1's idle lanes). Idempotent.
    fn close(&self) {}
}

/// Whether the run was stopped.
pub(crate) fn stopped(stop: &watch::Receiver<bool>) -> bool {
    // A dropped `LoadRun` drops the sender: that is a stop too.
    *stop.borrow() || stop.has_changed().is_err()
}

/// Waits on `alarm` (or tokio's timer without one) until `due`; false if the run was stopped meanwhile.
async fn wait_precisely(
    alarm: Option<&faultline_alarm::Alarm>,
    due: Instant,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let Some(alarm) = alarm else {
        return wait_timer(due, stop).await;
    };
    if stopped(stop) {
        return false;
    }
    if due > Instant::now() {
        let woke = tokio::select! {
            woke = alarm.wait_until(due) => woke,
            _ = stop.wait_for(|stopped| *stopped) => return false,
        };
        if woke.is_err() {
            // The timerfd failed (it does not in practice): finish the wait on tokio's timer.
            return wait_timer(due, stop).await;
        }
    }
    true
}

/// Waits on tokio's timer until `due`; false if the run was stopped meanwhile.
async fn wait_timer(due: Instant, stop: &mut watch::Receiver<bool>) -> bool {
    if stopped(stop) {
        return false;
    }
    if due > Instant::now() {
        tokio::select! {
            _ = sleep_until(due) => {}
            _ = stop.wait_for(|stopped| *stopped) => return false,
        }
    }
    true
}

/// The open model: every arrival of `schedule` (a rate's timetable or a replay's, each arrival with its index and
/// batch in the whole timetable) is dispatched at its intended time, or dropped at the cap. With precise pacing a
/// batch goes out in one wake-up at its last arrival's time (see [`Batched`]); under tokio's timer alone (paused
/// time in tests) each arrival goes at its own instant.
/// Each arrival keeps its own intended time even when a wait overshoots: a late wake-up dispatches every due
/// arrival at once, each stamped with when it should have gone. Returns a handle that yields true if the run
/// was stopped before the end of `duration`.
pub(crate) fn run_open<I: Issue>(
    exchanges: Arc<I>,
    schedule: impl Iterator<Item = Due<I::Given>> + Send + 'static,
    max_in_flight: u64,
    duration: Duration,
    seed: u64,
    pacing: Pacing,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<bool> {
    let mut rng = StdRng::seed_from_u64(seed ^ MIX_SEED_SALT);
    match pacing {
        Pacing::Precise { coalesce } => tokio::spawn(async move {
            // tokio's timer has a 1 ms granularity and fires ~1.2 ms late at the median here; the timerfd wakes
            // the same runtime on time, so no thread of its own, no spin, and a hand-over that stays on the
            // runtime (a lane is woken like any task, without waking another thread).
            let alarm = faultline_alarm::Alarm::new().ok();
            let origin = exchanges.run().origin;
            let ticks = EndTicks(exchanges.ticks());
            // The origin is usually a little ahead: an arrival due at t = 0 must wait for it, not go at once.
            let mut woke = Instant::now();
            let mut wakeups = Wakeups::new(coalesce);
            let mut schedule = schedule.peekable();
            let mut batch: Vec<(u64, Arrival<I::Given>)> = Vec::new();
            while let Some(first) = schedule.next() {
                batch.push((first.index, first.arrival));
                while let Some(next) = schedule.next_if(|d| d.batch == first.batch) {
                    batch.push((next.index, next.arrival));
                }
                let last = batch.last().map_or(Duration::ZERO, |(_, a)| a.intended);
                let due = origin + last;
                if due > woke {
                    let at = wakeups.plan(due);
                    if let Some(t) = &ticks.0 {
                        t.plan(at);
                    }
                    if !wait_precisely(alarm.as_ref(), at, &mut stop).await {
                        return true;
                    }
                    woke = Instant::now();
                    if let Some(t) = &ticks.0 {
                        t.wake();
                    }
                }
                for (index, arrival) in batch.drain(..) {
                    exchanges.issue(
                        index,
                        arrival.intended,
                        arrival.request,
                        &mut rng,
                        max_in_flight,
                    );
                }
            }
            // The timetable may end before the run does (a rate that falls to zero): the run still lasts.
            drop(ticks);
            !wait_precisely(alarm.as_ref(), origin + duration, &mut stop).await
        }),
        Pacing::Timer => tokio::spawn(async move {
            let origin = exchanges.run().origin;
            for Due { index, arrival, .. } in schedule {
                if !wait_timer(origin + arrival.intended, &mut stop).await {
                    return true;
                }
                exchanges.issue(
                    index,
                    arrival.intended,
                    arrival.request,
                    &mut rng,
                    max_in_flight,
                );
            }
            !wait_timer(origin + duration, &mut stop).await
        }),
    }
}

/// The random source of closed-model user `user`: its own stream of the run's seed.
fn user_rng(seed: u64, user: u32) -> StdRng {
    StdRng::seed_from_u64(seed ^ MIX_SEED_SALT ^ u64::from(user).rotate_left(32))
}

/// The closed model: `users` loops that each send, wait for the answer, and send again. Intended time is the
/// actual send, so this model cannot see queueing: it exists to show that, side by side with the open model.
pub(crate) async fn run_closed<I: Issue>(
    issuer: Arc<I>,
    users: u32,
    duration: Duration,
    seed: u64,
    stop: watch::Receiver<bool>,
) -> bool {
    let end = issuer.run().origin + duration;
    let mut loops = tokio::task::JoinSet::new();
    for user in 0..users {
        let rng = user_rng(seed, user);
        loops.spawn(issuer.clone().user(user, users, end, rng, stop.clone()));
    }
    while loops.join_next().await.is_some() {}
    let stopped = *stop.borrow();
    stopped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::DEFAULT_COALESCE;

    #[tokio::test(start_paused = true)]
    async fn wake_ups_keep_to_the_timetable_however_late_each_one_comes() {
        let origin = Instant::now();
        let us = Duration::from_micros;
        // 20,000/s uniform: batches of two arrivals 50 us apart, one batch per 100 us.
        let timetable = (0..40u64).map(|k| Arrival::<()> {
            intended: us(50 * k),
            request: None,
        });
        let mut batches: Vec<Duration> = Vec::new();
        for due in Batched::new(timetable, DEFAULT_COALESCE) {
            match batches.get_mut(due.batch as usize) {
                Some(last) => *last = due.arrival.intended,
                None => batches.push(due.arrival.intended),
            }
        }
        assert_eq!(batches.len(), 20);
        let mut wakeups = Wakeups::new(DEFAULT_COALESCE);
        for (i, last) in batches.iter().enumerate() {
            let at = wakeups.plan(origin + *last);
            // The plan depends on the timetable alone, not on when the wake-ups before it came: each batch
            // goes at its last arrival's time.
            assert_eq!(at, origin + *last, "batch {i}");
        }
        // Batches due closer together than the coalescing window (a Poisson burst) are spread to it from the
        // plan.
        let mut wakeups = Wakeups::new(DEFAULT_COALESCE);
        assert_eq!(wakeups.plan(origin + us(100)), origin + us(100));
        assert_eq!(wakeups.plan(origin + us(130)), origin + us(200));
        assert_eq!(wakeups.plan(origin + us(210)), origin + us(300));
        assert_eq!(wakeups.plan(origin + us(900)), origin + us(900));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wider_window_sends_more_arrivals_per_wake_up_none_later_than_the_window() {
        let origin = Instant::now();
        let us = Duration::from_micros;
        // 5,000/s uniform, arrivals 200 us apart.
        let timetable = || {
            (0..1000u64).map(|k| Arrival::<()> {
                intended: us(200 * k),
                request: None,
            })
        };
        for (window, per_batch) in [(us(0), 1), (us(100), 1), (us(1000), 5), (us(2000), 10)] {
            let mut wakeups = Wakeups::new(window);
            let mut sends: Vec<(u64, Duration, Instant)> = Vec::new();
            let mut dues = Batched::new(timetable(), window).peekable();
            while let Some(first) = dues.next() {
                let mut batch = vec![first];
                while let Some(next) = dues.next_if(|d| d.batch == batch[0].batch) {
                    batch.push(next);
                }
                let at = wakeups.plan(origin + batch.last().unwrap().arrival.intended);
                sends.extend(batch.iter().map(|d| (d.batch, d.arrival.intended, at)));
            }
            assert_eq!(sends.len(), 1000, "{window:?}: every arrival sent once");
            let batches = sends.last().unwrap().0 + 1;
            assert_eq!(
                batches,
                1000 / per_batch,
                "{window:?}: {per_batch} arrivals a wake-up"
            );
            for (batch, intended, at) in sends {
                let lag = at
                    .checked_duration_since(origin + intended)
                    .expect("never sent before its intended time");
                // Never early, never later than the window (the last of a batch goes on time).
                assert!(
                    lag < window.max(us(1)),
                    "{window:?}: batch {batch} lag {lag:?}"
                );
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_begun_before_the_wake_up_ends_with_it_and_the_end_releases_every_wait() {
        let ticks = Arc::new(Ticks::new(Instant::now()));
        let first = ticks.notified();
        // Created before the wake-up and polled only after it: still woken.
        ticks.wake();
        tokio::time::timeout(Duration::from_secs(1), first)
            .await
            .expect("woken by the wake-up it was created before");
        let waiting = {
            let ticks = ticks.clone();
            tokio::spawn(async move { ticks.notified().await })
        };
        tokio::task::yield_now().await;
        drop(EndTicks(Some(ticks.clone())));
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("released by the end")
            .unwrap();
    }
}
