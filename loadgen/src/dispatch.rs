//! The dispatcher: walks the timetable, waits precisely for each intended time, refuses arrivals over the
//! in-flight cap, and runs each exchange with its timeout and its three timestamps (intended, actual, done).
//! Also the closed-model loop (`--users N`), kept for comparison only.
//!
//! Not for building the timetable (`schedule`), the requests (`mix`) or the bytes on the wire (`send`).

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::{watch, Semaphore};
use tokio::time::{sleep_until, Instant};

use crate::mix::Mix;
use crate::outcome::{Classifier, Outcome};
use crate::recorder::Recorder;
use crate::schedule::Schedule;
use crate::send::Transport;
use crate::target::Target;

/// tokio's timer fires ~1.2 ms late at the median and up to ~4 ms at p99 on this machine, so the dispatcher
/// sleeps until this much before the intended time and yields in a loop for the rest.
const SPIN_WINDOW: Duration = Duration::from_millis(2);

/// Seeds the request mix apart from the Poisson arrivals, so changing the mix never moves the timetable.
const MIX_SEED_SALT: u64 = 0x6d69_785f_7365_6564;

/// How the dispatcher waits for an intended time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pacing {
    /// Timer until `SPIN_WINDOW` before, then yield until the instant: sub-millisecond send lag.
    Precise,
    /// The timer alone. Used under paused tokio time, where a yield loop would never see the clock move.
    #[cfg_attr(not(test), allow(dead_code))]
    Timer,
}

impl Pacing {
    /// Waits until `due`; false if the run was stopped meanwhile.
    async fn wait(self, due: Instant, stop: &mut watch::Receiver<bool>) -> bool {
        if *stop.borrow() {
            return false;
        }
        let now = Instant::now();
        if due <= now {
            return true;
        }
        let wake = match self {
            Pacing::Precise => due.checked_sub(SPIN_WINDOW).unwrap_or(due),
            Pacing::Timer => due,
        };
        if wake > now {
            tokio::select! {
                _ = sleep_until(wake) => {}
                _ = stop.wait_for(|stopped| *stopped) => return false,
            }
        }
        while Instant::now() < due {
            if *stop.borrow() {
                return false;
            }
            tokio::task::yield_now().await;
        }
        true
    }
}

/// What every exchange of a run shares.
pub(crate) struct Exchanges<T> {
    pub(crate) recorder: Arc<Recorder>,
    pub(crate) transport: T,
    /// One permit per connection: a request holds one from the moment it goes out until its body is read.
    pub(crate) slots: Semaphore,
    pub(crate) classifier: Classifier,
    pub(crate) timeout: Duration,
    pub(crate) origin: Instant,
    pub(crate) target: Target,
    pub(crate) mix: Mix,
}

impl<T: Transport> Exchanges<T> {
    /// Runs one request to its outcome and records it. The timeout counts from dispatch, so a request waiting
    /// for a connection times out like one waiting for the server, and every request ends by `timeout`.
    async fn run(
        self: Arc<Self>,
        request: hyper::Request<http_body_util::Full<bytes::Bytes>>,
        intended: Duration,
    ) {
        let mut actual: Option<Instant> = None;
        let result = tokio::time::timeout(self.timeout, async {
            let _slot = self.slots.acquire().await.ok();
            actual = Some(Instant::now());
            self.transport.exchange(request).await
        })
        .await;
        let done = Instant::now();
        let outcome = match result {
            Err(_) => Outcome::Timeout,
            Ok(Err(_)) => Outcome::ConnectError,
            Ok(Ok(parts)) => self.classifier.classify(&parts),
        };
        let from_origin = |t: Instant| t.saturating_duration_since(self.origin);
        self.recorder.completed(
            outcome,
            intended,
            actual.map(from_origin),
            from_origin(done),
        );
    }
}

/// The open model: every arrival of `schedule` is dispatched at its intended time, or dropped at the cap.
/// Returns true if stopped before the end of `duration`.
pub(crate) async fn run_open<T: Transport>(
    exchanges: Arc<Exchanges<T>>,
    schedule: Schedule,
    max_in_flight: u64,
    duration: Duration,
    seed: u64,
    pacing: Pacing,
    mut stop: watch::Receiver<bool>,
) -> bool {
    let origin = exchanges.origin;
    let recorder = &exchanges.recorder;
    let mut rng = StdRng::seed_from_u64(seed ^ MIX_SEED_SALT);
    for (index, intended) in schedule.enumerate() {
        // Each arrival keeps its own intended time even when the wait overshoots: a late wake-up dispatches
        // every due arrival at once, each stamped with when it should have gone.
        if !pacing.wait(origin + intended, &mut stop).await {
            return true;
        }
        if recorder.in_flight() >= max_in_flight {
            recorder.dropped(intended);
            continue;
        }
        let request = exchanges
            .mix
            .render(index as u64, &exchanges.target, &mut rng);
        recorder.sent(intended, origin.elapsed());
        tokio::spawn(exchanges.clone().run(request, intended));
    }
    // The timetable may end before the run does (a rate that falls to zero): the run still lasts `duration`.
    !Pacing::Timer.wait(origin + duration, &mut stop).await
}

/// The closed model: `users` loops that each send, wait for the answer, and send again. Intended time is the
/// actual send, so this model cannot see queueing: it exists to show that, side by side with the open model.
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
            let mut rng =
                StdRng::seed_from_u64(seed ^ MIX_SEED_SALT ^ u64::from(user).rotate_left(32));
            let mut index = u64::from(user);
            while Instant::now() < end && !*stop.borrow() {
                let intended = exchanges.origin.elapsed();
                let request = exchanges.mix.render(index, &exchanges.target, &mut rng);
                exchanges.recorder.sent(intended, intended);
                exchanges.clone().run(request, intended).await;
                index += u64::from(users);
            }
        });
    }
    while loops.join_next().await.is_some() {}
    *stop.borrow()
}
