//! HTTP/1.1's issuing: sending lanes, each a task that owns one keep-alive connection and sends one request at a
//! time on it, running each exchange with its timeout and its three timestamps (intended, actual, done).
//!
//! There are at most `connections` lanes, opened on demand when an arrival finds none idle. Arrivals wait in one
//! FIFO queue for a lane, so a slow service makes them queue here, which the corrected latency and the send lag
//! show. Each lane keeps one timer and moves its deadline forward per request (tokio extends a later deadline
//! without touching the timer wheel), instead of registering a timer per request.
//!
//! Not for when arrivals go out (`dispatch`) nor for the bytes on the wire (`client`, `response`).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use tokio::sync::{watch, Notify};
use tokio::time::{Instant, Sleep};

use super::compile::{Mix, Wire};
use super::transport::Transport;
use crate::outcome::{Answer, Outcome};
use crate::request::dispatch::{stopped, Issue};
use crate::request::ticks::Ticks;
use crate::request::Run;

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
    /// The trace id it carries, in a correlated run.
    trace: Option<u128>,
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

/// What every exchange of an HTTP/1.1 run shares.
pub(crate) struct Exchanges<T> {
    pub(crate) run: Run,
    pub(crate) transport: T,
    pub(crate) lanes: Lanes,
    pub(crate) mix: Mix,
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

impl<T: Transport> Issue for Exchanges<T> {
    type Given = Wire;

    fn run(&self) -> &Run {
        &self.run
    }

    fn ticks(&self) -> Option<Arc<Ticks>> {
        self.transport.ticks()
    }

    /// Checks the cap, renders (unless a replay gave the request) and hands over arrival `index` due at
    /// `intended` (from the origin).
    fn issue(
        self: &Arc<Self>,
        index: u64,
        intended: Duration,
        given: Option<Wire>,
        rng: &mut StdRng,
        max_in_flight: u64,
    ) {
        if self.run.over_cap(intended, max_in_flight) {
            return;
        }
        let request = given.unwrap_or_else(|| self.mix.render(index, rng));
        let (request, trace) = self.traced(request, index);
        let now = self.run.sent(intended);
        self.submit(Job {
            request,
            intended,
            dispatched: now,
            behind_busy_lanes: false,
            deadline: now.max(self.run.origin + intended) + self.run.timeout,
            trace,
        });
    }

    /// Each user on a connection of its own.
    async fn user(
        self: Arc<Self>,
        user: u32,
        users: u32,
        end: Instant,
        mut rng: StdRng,
        stop: watch::Receiver<bool>,
    ) {
        let mut lane = Lane::<T>::new(self.run.timeout);
        let mut index = u64::from(user);
        loop {
            let now = Instant::now();
            if now >= end || stopped(&stop) {
                break;
            }
            let intended = now.saturating_duration_since(self.run.origin);
            let (request, trace) = self.traced(self.mix.render(index, &mut rng), index);
            self.run.recorder.sent(intended, intended);
            let job = Job {
                request,
                intended,
                dispatched: now,
                behind_busy_lanes: false,
                deadline: now + self.run.timeout,
                trace,
            };
            self.serve(&mut lane, job).await;
            index += u64::from(users);
        }
    }

    fn close(&self) {
        self.lanes.close();
    }
}

impl<T: Transport> Exchanges<T> {
    /// `request` as arrival `index` sends it: with its trace id and deadline in a correlated run.
    fn traced(&self, request: Wire, index: u64) -> (Wire, Option<u128>) {
        match &self.run.tracing {
            Some(t) => {
                let (request, trace) = request.traced(t, index);
                (request, Some(trace))
            }
            None => (request, None),
        }
    }

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
            self.run.runtime.spawn(self.clone().lane());
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
        let mut lane = Lane::<T>::new(self.run.timeout);
        while let Some(job) = self.next_job().await {
            self.serve(&mut lane, job).await;
        }
        self.lanes.open.fetch_sub(1, Ordering::AcqRel);
    }

    /// Runs one request to its outcome on `lane` and records it.
    async fn serve(&self, lane: &mut Lane<T>, job: Job) {
        let now = Instant::now();
        if now >= job.deadline {
            // It waited for a lane past its deadline: never sent, charged its whole wait.
            self.run.completed(
                Outcome::Timeout,
                job.intended,
                job.dispatched,
                None,
                now,
                job.trace,
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
                self.run.recorder.connect_error(reason);
                Outcome::ConnectError
            }
            Some(Ok(answer)) => self.run.classifier.classify(answer),
        };
        self.run
            .completed(outcome, job.intended, ready, Some(actual), done, job.trace);
    }
}

/// One exchange on the lane's connection, opening one if needed. A kept-alive connection the server closed
/// while idle is replaced and the request sent again once (nothing of it was processed).
async fn attempt<T: Transport>(
    transport: &T,
    conn: &mut Option<T::Conn>,
    request: &Wire,
) -> Result<Answer, String> {
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
