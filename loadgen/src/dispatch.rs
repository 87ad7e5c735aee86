//! The dispatcher: walks the timetable, waits precisely for each intended time, refuses arrivals over the
//! in-flight cap, and hands each arrival to a sending lane; the lanes run the exchanges with their timeout and
//! their three timestamps (intended, actual, done). Also the closed-model loop (`--users N`), kept for
//! comparison only.
//!
//! A lane is a task that owns one keep-alive connection and sends one request at a time on it: there are at
//! most `connections` of them, opened on demand when an arrival finds none idle. Arrivals wait in one FIFO
//! queue for a lane, so a slow service makes them queue here, which the corrected latency and the send lag show.
//! Each lane keeps one timer and moves its deadline forward per request (tokio extends a later deadline without
//! touching the timer wheel), instead of registering a timer per request.
//!
//! The dispatcher also tells the lanes when it will wake up next ([`Ticks`]), so that an answer due just before
//! can wait in the kernel for that wake-up instead of waking the thread on its own.
//!
//! Not for building the timetable (`schedule`), the requests (`mix`) or the bytes on the wire (`send`).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::{watch, Notify};
use tokio::time::{sleep_until, Instant, Sleep};

use crate::mix::Mix;
use crate::outcome::{Classifier, Outcome};
use crate::recorder::Recorder;
use crate::replay::Arrival;
use crate::send::{Transport, Wire};

/// How far apart arrivals may be and still go out in one wake-up of the dispatcher, by default (`load.coalesce`,
/// `--coalesce`): each is stamped with its own intended time, and the batch goes at its last arrival's time. A
/// wake-up costs about as much CPU as a request on a virtual machine (bench/loadgen.md, part d); 0.1 ms bounds
/// them at 10,000/s for a send lag of at most that much, so arrivals further apart (every one below 10,000/s,
/// uniform) are sent each at its own instant.
pub const DEFAULT_COALESCE: Duration = Duration::from_micros(100);

/// The widest `coalesce` accepted: wider would turn the timetable into bursts the service sees as such.
pub const MAX_COALESCE: Duration = Duration::from_millis(10);

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
pub(crate) struct Due {
    pub(crate) index: u64,
    pub(crate) batch: u64,
    pub(crate) arrival: Arrival,
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

impl<I: Iterator<Item = Arrival>> Batched<I> {
    pub(crate) fn new(timetable: I, coalesce: Duration) -> Self {
        Batched {
            inner: timetable.enumerate(),
            coalesce,
            batch: 0,
            first: None,
        }
    }
}

impl<I: Iterator<Item = Arrival>> Iterator for Batched<I> {
    type Item = Due;

    fn next(&mut self) -> Option<Due> {
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

/// The dispatcher's wake-ups, told to the lanes: when the next one is due, and each as it happens. A lane whose
/// answer will arrive shortly before the next wake-up can leave it in the kernel until then (see `send`), so one
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

/// One arrival on its way to a lane.
struct Job {
    request: Wire,
    /// From the origin.
    intended: Duration,
    /// When the dispatcher handed it over.
    dispatched: Instant,
    /// It found every lane busy with a request and none could be opened: its wait for a lane is the service's
    /// doing (coordinated omission) and counts in its latency from `dispatched`. Otherwise a lane was free or
    /// opened for it, and the wait until that lane ran is the generator's own.
    behind_busy_lanes: bool,
    /// The timeout counts from dispatch, so an arrival waiting for a lane times out like one waiting for the
    /// server, and every arrival ends by its deadline.
    deadline: Instant,
}

/// The arrivals waiting for a lane, and the lanes waiting for arrivals.
pub(crate) struct Lanes {
    jobs: Mutex<VecDeque<Job>>,
    /// Idle lanes wait here; the dispatcher wakes one per arrival it hands over.
    ready: Notify,
    /// Lanes waiting on `ready` that no arrival has claimed yet.
    idle: AtomicUsize,
    /// Lanes alive (at most `max`).
    open: AtomicUsize,
    max: usize,
    /// Set once no arrival will come: lanes finish the queue and end, closing their connections.
    closed: AtomicBool,
}

impl Lanes {
    pub(crate) fn new(connections: u32) -> Lanes {
        Lanes {
            jobs: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
            idle: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            max: (connections as usize).max(1),
            closed: AtomicBool::new(false),
        }
    }

    fn jobs(&self) -> MutexGuard<'_, VecDeque<Job>> {
        // The queue holds plain values; a panic elsewhere cannot leave it inconsistent.
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the lanes once the queue is empty. Idempotent.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ready.notify_waiters();
    }

    /// Claims one idle lane, if any (each claim is followed by exactly one wake-up).
    fn claim_idle(&self) -> bool {
        self.idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// What every exchange of a run shares.
pub(crate) struct Exchanges<T> {
    pub(crate) recorder: Arc<Recorder>,
    pub(crate) transport: T,
    pub(crate) lanes: Arc<Lanes>,
    pub(crate) classifier: Classifier,
    pub(crate) timeout: Duration,
    pub(crate) origin: Instant,
    pub(crate) mix: Mix,
    /// Where lanes are spawned: the runtime `start` was called on.
    pub(crate) runtime: tokio::runtime::Handle,
}

/// A lane's reusable state: its connection and its timer.
struct Lane<T: Transport> {
    conn: Option<T::Conn>,
    timer: Pin<Box<Sleep>>,
}

impl<T: Transport> Lane<T> {
    fn new(timeout: Duration) -> Self {
        Lane {
            conn: None,
            timer: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

/// What the open-model dispatcher hands each arrival to: HTTP/1.1's lanes ([`Exchanges`]) or the HTTP/2
/// streams of `h2`.
pub(crate) trait Issue: Send + Sync + 'static {
    /// The run's origin, from which intended times count.
    fn origin(&self) -> Instant;
    /// The wake-ups the dispatcher tells its lanes of, if they can use them.
    fn ticks(&self) -> Option<Arc<Ticks>> {
        None
    }
    /// Checks the cap, renders (unless a replay gave `request`) and sends arrival `index` due at `intended`
    /// (from the origin), or counts it dropped.
    fn issue(
        self: &Arc<Self>,
        index: u64,
        intended: Duration,
        request: Option<Wire>,
        rng: &mut StdRng,
        max_in_flight: u64,
    );
}

impl<T: Transport> Issue for Exchanges<T> {
    fn origin(&self) -> Instant {
        self.origin
    }

    fn ticks(&self) -> Option<Arc<Ticks>> {
        self.transport.ticks()
    }

    fn issue(
        self: &Arc<Self>,
        index: u64,
        intended: Duration,
        request: Option<Wire>,
        rng: &mut StdRng,
        max_in_flight: u64,
    ) {
        Exchanges::issue(self, index, intended, request, rng, max_in_flight);
    }
}

impl<T: Transport> Exchanges<T> {
    /// Hands an arrival to an idle lane, or opens a lane if fewer than `connections` exist; otherwise it waits in
    /// the queue for the first lane to finish. Never blocks.
    fn submit(self: &Arc<Self>, mut job: Job) {
        let lanes = &self.lanes;
        if lanes.claim_idle() {
            lanes.jobs().push_back(job);
            lanes.ready.notify_one();
            return;
        }
        let opened = lanes
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < lanes.max).then_some(n + 1)
            })
            .is_ok();
        job.behind_busy_lanes = !opened;
        lanes.jobs().push_back(job);
        if opened {
            self.runtime.spawn(self.clone().lane());
        } else if lanes.claim_idle() {
            // A lane that went idle after the first claim, and may have found the queue still empty.
            lanes.ready.notify_one();
        }
    }

    /// The next arrival for a lane, or `None` once the queue is closed and empty.
    async fn next_job(&self) -> Option<Job> {
        let lanes = &self.lanes;
        loop {
            if let Some(job) = lanes.jobs().pop_front() {
                return Some(job);
            }
            if lanes.closed.load(Ordering::Acquire) {
                return None;
            }
            let notified = lanes.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            lanes.idle.fetch_add(1, Ordering::AcqRel);
            // An arrival queued between the pop above and the count may have found no idle lane: take it now,
            // withdrawing from the idle count unless a dispatcher already claimed this wake-up.
            if (!lanes.jobs().is_empty() || lanes.closed.load(Ordering::Acquire))
                && lanes.claim_idle()
            {
                continue;
            }
            notified.await;
        }
    }

    async fn lane(self: Arc<Self>) {
        let mut lane = Lane::<T>::new(self.timeout);
        while let Some(job) = self.next_job().await {
            self.serve(&mut lane, job).await;
        }
        self.lanes.open.fetch_sub(1, Ordering::AcqRel);
    }

    /// Runs one request to its outcome on `lane` and records it.
    async fn serve(&self, lane: &mut Lane<T>, job: Job) {
        let now = Instant::now();
        let from_origin = |t: Instant| t.saturating_duration_since(self.origin);
        if now >= job.deadline {
            // It waited for a lane past its deadline: never sent, charged its whole wait.
            self.recorder.completed(
                Outcome::Timeout,
                job.intended,
                from_origin(job.dispatched),
                None,
                from_origin(now),
            );
            return;
        }
        let actual = now;
        let ready = if job.behind_busy_lanes {
            job.dispatched
        } else {
            actual
        };
        lane.timer.as_mut().reset(job.deadline);
        let result = tokio::select! {
            biased;
            r = attempt(&self.transport, &mut lane.conn, &job.request) => Some(r),
            _ = lane.timer.as_mut() => None,
        };
        // An answer left in the kernel until the dispatcher's wake-up ended when the kernel received it.
        let done = match (&result, &lane.conn) {
            (Some(Ok(_)), Some(conn)) => {
                T::received(conn).map_or_else(Instant::now, |t| t.max(actual))
            }
            _ => Instant::now(),
        };
        let outcome = match result {
            None => {
                // Mid-exchange: the connection's state is unknown.
                lane.conn = None;
                Outcome::Timeout
            }
            Some(Err(reason)) => {
                self.recorder.connect_error(reason);
                Outcome::ConnectError
            }
            Some(Ok(answer)) => self.classifier.classify(answer),
        };
        self.recorder.completed(
            outcome,
            job.intended,
            from_origin(ready),
            Some(from_origin(actual)),
            from_origin(done),
        );
    }

    /// Checks the cap, renders (unless a replay gave `request`) and hands over arrival `index` due at
    /// `intended` (from the origin).
    fn issue(
        self: &Arc<Self>,
        index: u64,
        intended: Duration,
        request: Option<Wire>,
        rng: &mut StdRng,
        max_in_flight: u64,
    ) {
        if self.recorder.in_flight() >= max_in_flight {
            self.recorder.dropped(intended);
            return;
        }
        let request = request.unwrap_or_else(|| self.mix.render(index, rng));
        let now = Instant::now();
        self.recorder
            .sent(intended, now.saturating_duration_since(self.origin));
        self.submit(Job {
            request,
            intended,
            dispatched: now,
            behind_busy_lanes: false,
            deadline: now.max(self.origin + intended) + self.timeout,
        });
    }
}

/// One exchange on the lane's connection, opening one if needed. A kept-alive connection the server closed
/// while idle is replaced and the request sent again once (nothing of it was processed).
async fn attempt<T: Transport>(
    transport: &T,
    conn: &mut Option<T::Conn>,
    request: &Wire,
) -> Result<crate::send::Answer, String> {
    loop {
        let fresh = conn.is_none();
        let c = match conn {
            Some(c) => c,
            None => conn.insert(transport.connect().await.map_err(|e| e.0)?),
        };
        match transport.exchange(c, request).await {
            Ok((answer, reusable)) => {
                if !reusable {
                    *conn = None;
                }
                return Ok(answer);
            }
            Err(e) => {
                *conn = None;
                if fresh || !e.is_stale() {
                    return Err(e.0);
                }
            }
        }
    }
}

fn stopped(stop: &watch::Receiver<bool>) -> bool {
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
    schedule: impl Iterator<Item = Due> + Send + 'static,
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
            let origin = exchanges.origin();
            let ticks = EndTicks(exchanges.ticks());
            // The origin is usually a little ahead: an arrival due at t = 0 must wait for it, not go at once.
            let mut woke = Instant::now();
            let mut wakeups = Wakeups::new(coalesce);
            let mut schedule = schedule.peekable();
            let mut batch: Vec<(u64, Arrival)> = Vec::new();
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
            let origin = exchanges.origin();
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
pub(crate) fn user_rng(seed: u64, user: u32) -> StdRng {
    StdRng::seed_from_u64(seed ^ MIX_SEED_SALT ^ u64::from(user).rotate_left(32))
}

/// The closed model: `users` loops that each send, wait for the answer, and send again, each on its own
/// connection. Intended time is the actual send, so this model cannot see queueing: it exists to show that,
/// side by side with the open model.
pub(crate) async fn run_closed<T: Transport>(
    exchanges: Arc<Exchanges<T>>,
    users: u32,
    duration: Duration,
    seed: u64,
    stop: watch::Receiver<bool>,
) -> bool {
    let end = exchanges.origin + duration;
    let mut loops = tokio::task::JoinSet::new();
    for user in 0..users {
        let exchanges = exchanges.clone();
        let stop = stop.clone();
        loops.spawn(async move {
            let mut rng = user_rng(seed, user);
            let mut lane = Lane::<T>::new(exchanges.timeout);
            let mut index = u64::from(user);
            loop {
                let now = Instant::now();
                if now >= end || stopped(&stop) {
                    break;
                }
                let intended = now.saturating_duration_since(exchanges.origin);
                let request = exchanges.mix.render(index, &mut rng);
                exchanges.recorder.sent(intended, intended);
                let job = Job {
                    request,
                    intended,
                    dispatched: now,
                    behind_busy_lanes: false,
                    deadline: now + exchanges.timeout,
                };
                exchanges.serve(&mut lane, job).await;
                index += u64::from(users);
            }
        });
    }
    while loops.join_next().await.is_some() {}
    *stop.borrow()
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

    #[tokio::test(start_paused = true)]
    async fn wake_ups_keep_to_the_timetable_however_late_each_one_comes() {
        let origin = Instant::now();
        let us = Duration::from_micros;
        // 20,000/s uniform: batches of two arrivals 50 us apart, one batch per 100 us.
        let timetable = (0..40u64).map(|k| Arrival {
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
            (0..1000u64).map(|k| Arrival {
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
