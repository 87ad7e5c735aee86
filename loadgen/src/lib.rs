//! loadgen: an open-model HTTP load generator with coordinated-omission-free HDR recording.
//!
//! Requests go out on a timetable of intended send times derived from the arrival rate, whatever the service's
//! latency: a slow service does not slow the load, which is the failure faultline's scenarios provoke. Latency is
//! measured from the intended send time ("corrected"), so queueing anywhere, the generator's own included, is in
//! the numbers; service time from the actual send ("uncorrected") and the send lag are recorded beside it.
//!
//! The library prints nothing. The `loadgen` binary and the `faultline` runner are thin wiring over [`start`],
//! [`LoadRun`] and [`Recording`]. Modules, one concern each: [`spec`] (configuration), [`schedule`] (intended
//! times from a rate), [`replay`] (an exact timetable of recorded requests), `request` (the request pipeline:
//! compile and issue, over HTTP/1.1 in `request::http1` and HTTP/2 and gRPC in `request::http2`), `outcome`
//! (classify), `recorder` and [`recording`] (recording), [`hgrm`] and [`summary`] (output), [`merge`] (adding
//! up the recordings of a distributed run's shares) and [`agent`] (one share of a distributed run). This file
//! holds the wiring of a run, the same for every protocol, with the protocol chosen in one place (`launch`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), loadgen::LoadError> {
//! use std::time::Duration;
//! let spec = loadgen::LoadSpec::constant("500/s".parse().unwrap(), "/product/{rand:1..1000}");
//! let options = loadgen::RunOptions::new("http://127.0.0.1:8080", Duration::from_secs(30));
//! let run = loadgen::start(spec, options, tokio::time::Instant::now())?;
//! let recording = run.finish().await;
//! assert!(recording.conservation.holds);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub mod agent;
pub mod hgrm;
pub mod merge;
mod outcome;
mod recorder;
pub mod recording;
pub mod replay;
mod request;
mod samples;
pub mod schedule;
pub mod spec;
pub mod summary;
mod target;
mod tls;

pub use faultline_units::hosts::is_loopback;
pub use merge::MergeError;
pub use outcome::{ClassCounts, Outcome};
pub use recorder::Progress;
pub use recording::{
    Bucket, BucketLatency, ClassHistograms, Conservation, Measure, Model, PhaseRecording,
    Recording, RequestTrace,
};
pub use replay::Replay;
pub use samples::AnswerSample;
pub use spec::{
    Arrivals, LoadSpec, RateSegment, RateSpec, RequestTemplate, DEFAULT_COALESCE, MAX_COALESCE,
};
pub use target::split_url;
pub use tls::{TlsCounts, TlsSpec};

use outcome::Classifier;
use recorder::Recorder;
use replay::Arrival;
use request::dispatch::{self, Due, Issue, Pacing};
use request::{http1, http2, Run};
use target::Target;

/// Why a load could not start. Every variant is bad input (exit code 2 in the binaries) except `NoRuntime`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// A field of the load spec is wrong; `field` is its path in the scenario (`load.rate[1].over`).
    #[error("{field}: {why}")]
    InvalidSpec {
        /// Where in the scenario, e.g. `load.rate[1].over`.
        field: String,
        /// What is wrong and what is accepted.
        why: String,
    },
    /// The base URL cannot be used.
    #[error("bad target URL {url:?}: {why}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The target is not loopback and was not named in `allow_hosts` (`--allow-host`).
    #[error(
        "refusing to send load to {host:?}: only loopback targets (127.0.0.0/8, ::1, localhost) are allowed \
         unless the host is allowed explicitly (--allow-host {host})"
    )]
    HostNotAllowed {
        /// The refused host.
        host: String,
    },
    /// A run option is out of range.
    #[error("{0}")]
    InvalidOptions(String),
    /// `start` was called outside a tokio runtime.
    #[error("loadgen must be started from inside a tokio runtime")]
    NoRuntime,
}

/// How to run a [`LoadSpec`]: where, for how long, and how to cut the recording.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `http://127.0.0.1:PORT` or `https://...`: scheme and authority; request paths come from the spec (and an
    /// `https://` target's trust from its `tls`).
    pub base_url: String,
    /// How long the schedule runs, from the origin.
    pub duration: Duration,
    /// Seeds Poisson arrivals and the request mix.
    pub seed: u64,
    /// Named phases and their starts; a request belongs to the phase of its intended time (the first phase if
    /// it is due before every start). Empty means one phase called `run`.
    pub phases: Vec<(String, Duration)>,
    /// Width of the time-series buckets (100 ms by default, as faultd's).
    pub bucket: Duration,
    /// Non-loopback hosts the user explicitly allowed.
    pub allow_hosts: Vec<String>,
    /// What becomes of the time series (kept in the recording by default).
    pub series: Series,
    /// Which share of the timetable this process sends: the whole of it by default, or one agent's part.
    pub share: Share,
    /// Follow each request to the dependency: every request carries a fresh trace id in the named header and
    /// the deadline header from the load's timeout, and the recording keeps each request's trace id and times
    /// ([`Recording::requests`]). Off (`None`) by default, at no cost.
    pub correlate: Option<faultline_units::trace::Correlate>,
}

/// One agent's part of a timetable: the arrivals of every `of`-th batch, from batch `index` on. A batch is what one
/// wake-up of the sender sends (the arrivals due within `load.coalesce`, 0.1 ms by default, of the batch's first;
/// see `request::dispatch`): by default, at rates below 10,000/s almost every arrival is a batch of its own, so share i
/// holds the arrivals k with `k % of == i`; above, each share keeps whole batches, so the agents together wake no
/// more often than one process sending the whole load. The union of the `of` shares is the timetable itself,
/// arrival for arrival, whatever the arrival process (uniform, Poisson, a replay): each agent walks the same
/// seeded timetable, numbers its batches the same way and keeps its own. Each share of a constant rate R is a
/// constant rate R / `of`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    /// This part, from 0.
    pub index: u32,
    /// How many parts there are (at least 1).
    pub of: u32,
}

impl Share {
    /// The whole timetable.
    pub const WHOLE: Share = Share { index: 0, of: 1 };

    /// Whether batch `b` of the whole timetable is in this share.
    pub fn holds(&self, b: u64) -> bool {
        self.of <= 1 || b % u64::from(self.of) == u64::from(self.index)
    }
}

impl Default for Share {
    fn default() -> Self {
        Share::WHOLE
    }
}

/// Where the time series' buckets go once they are final, about a second after they end.
///
/// Everything else a recording holds has a fixed size, so this choice alone decides whether memory grows with
/// the length of a run: [`Series::Keep`] costs about 0.8 KB per bucket (measured at 5k/s: counters, percentiles
/// and the compressed interval histogram), close to 30 MB an hour of 100 ms buckets; the other two keep memory
/// flat.
#[derive(Debug, Clone, Default)]
pub enum Series {
    /// Kept in memory and returned in [`Recording::buckets`].
    #[default]
    Keep,
    /// Sent down the channel in order as each becomes final, and not kept ([`Recording::buckets`] is empty).
    /// The recorder drops its sender when the recording is taken, which ends the receiver's loop.
    Stream(std::sync::mpsc::Sender<Bucket>),
    /// Not kept: the recording has the per-phase histograms and the totals, and no time series.
    Discard,
}

impl RunOptions {
    /// Options with seed 1, no phases, 100 ms buckets kept in the recording, and loopback only.
    pub fn new(base_url: impl Into<String>, duration: Duration) -> Self {
        RunOptions {
            base_url: base_url.into(),
            duration,
            seed: 1,
            phases: Vec::new(),
            bucket: Duration::from_millis(100),
            allow_hosts: Vec::new(),
            series: Series::Keep,
            share: Share::WHOLE,
            correlate: None,
        }
    }
}

/// A running load. Dropping it without [`LoadRun::finish`] stops the schedule.
pub struct LoadRun {
    watch: LoadWatch,
    dispatcher: JoinHandle<bool>,
    /// Tells the protocol that no arrival will come any more (`Issue::close`).
    close: Box<dyn Fn() + Send + Sync>,
    timeout: Duration,
    model: Model,
}

/// A cloneable view of a running load for other tasks (a live progress line, a Ctrl-C handler): progress and
/// stop, without the right to finish it.
#[derive(Clone)]
pub struct LoadWatch {
    recorder: Arc<Recorder>,
    stop: Arc<watch::Sender<bool>>,
    origin: Instant,
}

impl LoadWatch {
    /// Same as [`LoadRun::progress`].
    pub fn progress(&self) -> Progress {
        self.recorder.progress(self.origin.elapsed())
    }

    /// Same as [`LoadRun::stop`].
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }
}

impl LoadRun {
    /// Sent, completed, in flight, dropped and by class so far, and the p99 of the last second.
    pub fn progress(&self) -> Progress {
        self.watch.progress()
    }

    /// Stops scheduling now (Ctrl-C). Requests in flight may still finish, up to their timeout.
    pub fn stop(&self) {
        self.watch.stop();
    }

    /// A handle for other tasks to follow the run and stop it.
    pub fn watch(&self) -> LoadWatch {
        self.watch.clone()
    }

    /// Waits for the schedule to end (or `stop`) and for requests in flight to settle (bounded by the timeout),
    /// then returns the recording. Requests still in flight after that are reported, not waited for.
    pub async fn finish(mut self) -> Recording {
        let stopped_early = (&mut self.dispatcher).await.unwrap_or(true);
        // No arrival comes any more: lanes drain the queue, then end and close their connections.
        (self.close)();
        // Every exchange ends by its timeout; the margin covers the task waking up to record it.
        let deadline = Instant::now() + self.timeout + Duration::from_millis(250);
        let recorder = &self.watch.recorder;
        while recorder.in_flight() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        recorder.recording(self.model, stopped_early)
    }
}

impl Drop for LoadRun {
    fn drop(&mut self) {
        // Without `finish`: stop the schedule (the stop sender goes with the watch) and let idle lanes end.
        self.watch.stop();
        (self.close)();
    }
}

/// Starts the open-model load of `spec` against `options.base_url`, with intended times measured from `origin`
/// (the run's shared clock). Returns at once; the load runs on the current tokio runtime.
pub fn start(spec: LoadSpec, options: RunOptions, origin: Instant) -> Result<LoadRun, LoadError> {
    let tls = tls_client(&spec, &options)?;
    let pacing = Pacing::Precise {
        coalesce: spec.coalesce.get(),
    };
    launch(spec, options, origin, tls, LoadModel::Open(pacing))
}

/// The TLS client of an `https://` target, trusting what `load.tls` says; `None` for `http://`.
fn tls_client(spec: &LoadSpec, options: &RunOptions) -> Result<Option<tls::TlsClient>, LoadError> {
    let target = Target::parse(&options.base_url, &options.allow_hosts)?;
    if !target.is_tls() {
        return Ok(None);
    }
    let trust = spec.tls.clone().unwrap_or_default();
    let alpn: &[u8] = if spec.is_http2() { b"h2" } else { b"http/1.1" };
    tls::TlsClient::new(&trust, target.host(), alpn).map(Some)
}

/// Starts the closed model for comparison: `users` loops that each wait for their answer before the next
/// request. The spec's rate and arrivals are ignored. Its latencies cannot show queueing; see the crate docs.
pub fn start_closed(
    spec: LoadSpec,
    options: RunOptions,
    users: u32,
    origin: Instant,
) -> Result<LoadRun, LoadError> {
    if users == 0 {
        return Err(LoadError::InvalidOptions(
            "the closed model needs at least 1 user".into(),
        ));
    }
    let tls = tls_client(&spec, &options)?;
    launch(spec, options, origin, tls, LoadModel::Closed(users))
}

/// How a run sends: the open model's timetable at the given pacing, or the closed model's users.
#[derive(Debug, Clone, Copy)]
enum LoadModel {
    Open(Pacing),
    Closed(u32),
}

fn fallback_header(spec: &LoadSpec) -> Option<hyper::header::HeaderName> {
    spec.fallback_header.as_deref().and_then(|h| h.parse().ok())
}

/// The wiring of a run, and the one place its protocol is chosen: HTTP/2 streams when the mix asks for HTTP/2 or
/// gRPC, HTTP/1.1 lanes otherwise.
fn launch(
    spec: LoadSpec,
    mut options: RunOptions,
    origin: Instant,
    tls: Option<tls::TlsClient>,
    model: LoadModel,
) -> Result<LoadRun, LoadError> {
    let (target, run) = prepare(&spec, &mut options, origin, tls.as_ref())?;
    if spec.is_http2() {
        let mix = http2::Mix::compile(&spec.requests, &target)?;
        let streams = http2::Streams::new(
            run,
            fallback_header(&spec),
            &target,
            mix,
            spec.connections,
            spec.streams_per_connection,
            tls,
        );
        // A replay's requests are HTTP/1.1: an HTTP/2 timetable gives none.
        let given = None::<fn(&str, &str) -> std::convert::Infallible>;
        return drive(Arc::new(streams), given, &spec, &options, model);
    }
    let transport = http1::HttpTransport::new(&target, fallback_header(&spec), tls)
        .holding_within(spec.coalesce.get());
    over_http1(run, transport, &spec, &options, &target, model)
}

/// Checks the spec and the options and makes what every exchange of the run shares: the target and the [`Run`]
/// (with its recorder, which takes the options' series).
fn prepare(
    spec: &LoadSpec,
    options: &mut RunOptions,
    origin: Instant,
    tls: Option<&tls::TlsClient>,
) -> Result<(Target, Run), LoadError> {
    spec.validate()?;
    if options.bucket.is_zero() {
        return Err(LoadError::InvalidOptions(
            "the bucket width must be longer than 0s".into(),
        ));
    }
    if options.share.of == 0 || options.share.index >= options.share.of {
        return Err(LoadError::InvalidOptions(format!(
            "share {} of {}: the index must be below the number of shares",
            options.share.index, options.share.of
        )));
    }
    let target = Target::parse(&options.base_url, &options.allow_hosts)?;
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| LoadError::NoRuntime)?;
    let recorder = Arc::new(Recorder::new(
        &options.phases,
        options.bucket,
        options.duration,
        std::mem::take(&mut options.series),
    ));
    if let Some(tls) = tls {
        let _ = recorder.tls.set(tls.counters.clone());
    }
    let run = Run {
        recorder,
        classifier: Classifier {
            fallback_status: spec.fallback_status.clone(),
            fallback_grpc_status: spec.fallback_grpc_status.clone(),
        },
        timeout: spec.timeout.get(),
        origin,
        runtime,
        tracing: options
            .correlate
            .clone()
            .map(|c| request::trace::Tracing::new(c, spec.timeout.get())),
    };
    Ok((target, run))
}

/// HTTP/1.1 lanes over `transport`: the real client, or the deterministic tests' mock.
fn over_http1<T: http1::Transport>(
    run: Run,
    transport: T,
    spec: &LoadSpec,
    options: &RunOptions,
    target: &Target,
    model: LoadModel,
) -> Result<LoadRun, LoadError> {
    let exchanges = http1::Exchanges {
        run,
        transport,
        lanes: http1::Lanes::new(spec.connections),
        mix: http1::Mix::compile(&spec.requests, target)?,
    };
    let given = Some(http1::replayed(target));
    drive(Arc::new(exchanges), given, spec, options, model)
}

/// Starts the dispatcher over `issuer` (the open model) or its users (the closed model). `given` makes a replay's
/// lines into the protocol's requests.
fn drive<I: Issue, F>(
    issuer: Arc<I>,
    given: Option<F>,
    spec: &LoadSpec,
    options: &RunOptions,
    model: LoadModel,
) -> Result<LoadRun, LoadError>
where
    I::Given: Clone,
    F: Fn(&str, &str) -> I::Given + Send + 'static,
{
    let (stop, stopped) = watch::channel(false);
    let (duration, seed) = (options.duration, options.seed);
    let (dispatcher, model) = match model {
        LoadModel::Open(pacing) => {
            let schedule = arrivals(spec, seed, duration, options.share, given)?;
            let task = dispatch::run_open(
                issuer.clone(),
                schedule,
                spec.max_in_flight,
                duration,
                mix_seed(seed, options.share),
                pacing,
                stopped,
            );
            (task, Model::Open)
        }
        LoadModel::Closed(users) => {
            let task = dispatch::run_closed(issuer.clone(), users, duration, seed, stopped);
            (tokio::spawn(task), Model::Closed { users })
        }
    };
    let closing = Arc::downgrade(&issuer);
    let watch = LoadWatch {
        recorder: issuer.run().recorder.clone(),
        stop: Arc::new(stop),
        origin: issuer.run().origin,
    };
    Ok(LoadRun {
        watch,
        dispatcher,
        close: Box::new(move || {
            // Held weakly: the run's connections end with its last exchange, not with the handle.
            if let Some(issuer) = closing.upgrade() {
                issuer.close();
            }
        }),
        timeout: spec.timeout.get(),
        model,
    })
}

#[cfg(test)]
mod tests;

/// The arrivals of a validated spec that fall in `share`, each with its index and its batch in the whole
/// timetable: its replay's timetable (each line's request made by `given`), or the intended times of its rate.
fn arrivals<R, F>(
    spec: &LoadSpec,
    seed: u64,
    duration: Duration,
    share: Share,
    given: Option<F>,
) -> Result<Box<dyn Iterator<Item = Due<R>> + Send>, LoadError>
where
    R: Clone + Send + 'static,
    F: Fn(&str, &str) -> R + Send + 'static,
{
    let whole: Box<dyn Iterator<Item = Arrival<R>> + Send> = match &spec.replay {
        Some(r) => {
            let render = given.ok_or_else(|| LoadError::InvalidSpec {
                field: "load.replay".into(),
                why: "a replay's requests are HTTP/1.1".into(),
            })?;
            Box::new(replay::Player::open(r, seed, duration, render)?)
        }
        None => {
            let rate = spec.rate.as_ref().ok_or_else(|| LoadError::InvalidSpec {
                field: "load.rate".into(),
                why: "give the arrival rate, or a timetable with `replay: FILE`".into(),
            })?;
            let schedule = schedule::Schedule::new(rate, spec.arrivals, seed, duration);
            Box::new(schedule.map(|intended| Arrival {
                intended,
                request: None,
            }))
        }
    };
    let batched = dispatch::Batched::new(whole, spec.coalesce.get());
    if share == Share::WHOLE {
        return Ok(Box::new(batched));
    }
    Ok(Box::new(batched.filter(move |due| share.holds(due.batch))))
}

/// How many arrivals the whole timetable of `spec` holds over `duration`: what the shares of a distributed run
/// must add up to. Reads a replay's file through once.
pub fn timetable_len(spec: &LoadSpec, options: &RunOptions) -> Result<u64, LoadError> {
    spec.validate()?;
    // A target `start` would refuse is refused here too.
    Target::parse(&options.base_url, &options.allow_hosts)?;
    // Only the times count: a replay's lines need no request.
    let given = Some(|_: &str, _: &str| ());
    Ok(arrivals(spec, options.seed, options.duration, Share::WHOLE, given)?.count() as u64)
}

/// The seed of the request mix (template picks, `{rand:..}` values): each share draws its own stream, so two
/// agents do not send the same random path at the same moment.
fn mix_seed(seed: u64, share: Share) -> u64 {
    if share == Share::WHOLE {
        seed
    } else {
        seed ^ u64::from(share.index).rotate_left(48) ^ u64::from(share.of).rotate_left(24)
    }
}
