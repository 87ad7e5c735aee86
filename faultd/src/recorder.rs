//! The recorder: what reached faultd and what it did, per time bucket and per route, exact under concurrency.
//!
//! For: arrivals, completions by status class, resets, hangs, empty, malformed and truncated answers, calls
//! abandoned by their caller, calls in flight (maximum and time-weighted mean per bucket), open connections, and an
//! HDR histogram of the latency served per phase and route. This is the measurement that later proves "the pool
//! stayed under the limit" whatever the service under test claims. Not for: deciding anything; recordings never
//! feed back into behaviour.
//!
//! How counts stay exact: every call holds a [`CallGuard`] from arrival to departure. Arrival increments the
//! route's in-flight counter and `fetch_max`es it into the arrival bucket; the guard's `Drop` decrements it, so a
//! call abandoned by its caller (a hang, a client timeout) still leaves. A bucket's maximum is the larger of the
//! maxima seen at arrivals in it and the level it started with (arrivals minus departures before it), so a bucket
//! in which 200 hung calls simply sit still reports 200. The mean is exact too: the integral of the in-flight
//! level over a bucket is the level at its start times its length plus, per arrival, the time from the arrival
//! to the bucket's end, minus the same per departure; both sums are kept per bucket.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use faultline_units::{Dur, GrpcCode};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::tally::EntryTally;

mod guards;
mod latencies;
mod merge;
pub mod postgres;
mod recording;
pub mod redis;
mod snapshot;
mod traced;
mod unmatched;

pub use guards::{CallGuard, ConnectionGuard};
pub use recording::*;
pub use traced::{CallEnd, CallKey, CallKeys, TracedCall};

pub use merge::MergeError;
pub use unmatched::UnmatchedPath;

/// The recording step when the configuration does not set one.
pub const DEFAULT_BUCKET: Duration = Duration::from_millis(100);

/// Buckets are allocated in chunks of this many, on first use, so an idle long run costs nothing.
const CHUNK: usize = 1024;
/// At most this many chunks: ~29 h at the default 100 ms step. Later samples land in the last bucket.
const MAX_CHUNKS: usize = 1024;

/// One chunk of [`CHUNK`] buckets, allocated on its first write.
type Chunk<T> = OnceLock<Box<[T]>>;

/// A lazily allocated, fixed-capacity array of buckets that concurrent writers index without a lock.
///
/// Even the table of chunks waits for the first write: a route that no call reaches costs a few words, however
/// many routes a configuration holds and however long the run lasts.
struct Buckets<T> {
    chunks: OnceLock<Box<[Chunk<T>]>>,
    used: AtomicUsize,
}

impl<T: Default> Buckets<T> {
    fn new() -> Self {
        Buckets {
            chunks: OnceLock::new(),
            used: AtomicUsize::new(0),
        }
    }

    fn at(&self, index: usize) -> &T {
        let index = index.min(CHUNK * MAX_CHUNKS - 1);
        self.used.fetch_max(index + 1, Ordering::Relaxed);
        let chunks = self
            .chunks
            .get_or_init(|| (0..MAX_CHUNKS).map(|_| OnceLock::new()).collect());
        let chunk =
            chunks[index / CHUNK].get_or_init(|| (0..CHUNK).map(|_| T::default()).collect());
        &chunk[index % CHUNK]
    }

    /// The bucket if it was ever allocated.
    fn peek(&self, index: usize) -> Option<&T> {
        self.chunks
            .get()?
            .get(index / CHUNK)?
            .get()
            .map(|c| &c[index % CHUNK])
    }

    fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// How many chunks of buckets are allocated.
    fn chunks_stored(&self) -> usize {
        self.chunks
            .get()
            .map_or(0, |c| c.iter().filter(|c| c.get().is_some()).count())
    }
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A response was sent in full with this status.
    Completed(u16),
    /// The connection was reset.
    Reset,
    /// The call hung until its caller gave up.
    Hang,
    /// The connection was closed with no response.
    Empty,
    /// Bytes that are not HTTP were sent.
    Malformed,
    /// The answer was cut partway through its body.
    Truncated,
    /// The caller left before faultd answered (during the delay or a slow body).
    Abandoned,
}

#[derive(Default)]
struct RouteCell {
    arrivals: AtomicU64,
    /// Offsets in the bucket (us) of its first arrivals, so that sparse calls (half-open probes) can be placed
    /// more finely than the bucket.
    first: [AtomicU32; FIRST_ARRIVALS],
    /// How long faultd held each of those calls (us, plus one; 0 while in flight): its answer, or the moment its
    /// caller left, is when the caller could first know how it went.
    held: [AtomicU32; FIRST_ARRIVALS],
    departures: AtomicU64,
    class: [AtomicU64; 4],
    resets: AtomicU64,
    hangs: AtomicU64,
    empty: AtomicU64,
    malformed: AtomicU64,
    truncated: AtomicU64,
    abandoned: AtomicU64,
    in_flight_max: AtomicU64,
    /// Sum over arrivals in the bucket of (bucket end - arrival), ns.
    arrival_residual: AtomicU64,
    /// Sum over departures in the bucket of (bucket end - departure), ns.
    departure_residual: AtomicU64,
}

/// gRPC calls answered in a bucket, by the number of their status: kept beside the route's cells, and allocated
/// only once a gRPC call ends, so that an HTTP route's buckets do not carry them through a run of hours.
#[derive(Default)]
struct GrpcCell([AtomicU64; GRPC_CODES]);

#[derive(Default)]
struct ConnectionCell {
    opened: AtomicU64,
    closed: AtomicU64,
    open_max: AtomicU64,
    shed: AtomicU64,
    http2: AtomicU64,
}

/// How many gRPC status codes there are (0..=16).
const GRPC_CODES: usize = 17;

/// How many arrivals per bucket and route are timed individually.
pub const FIRST_ARRIVALS: usize = 8;

/// The recorder of one route.
pub struct RouteRecorder {
    /// The route's name, as traced calls say it.
    name: Arc<str>,
    bucket_ns: u64,
    cells: Buckets<RouteCell>,
    grpc: Buckets<GrpcCell>,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    /// Per phase, under one lock: a completed call records its latency and its lateness together.
    histograms: Mutex<latencies::PhaseLatencies>,
    /// The counts of each matched entry by name, shared with the compiled entries that count into them.
    entries: Mutex<BTreeMap<String, Arc<EntryTally>>>,
    /// The recorders of the route's instances, in order, created on first use.
    instances: Mutex<Vec<Arc<RouteRecorder>>>,
    /// The sums over its settled buckets, so that reading the newest ones does not walk the whole run.
    checkpoint: Mutex<snapshot::Checkpoint>,
}

/// The run's clock as the recorder sees it: times are nanoseconds since the schedule's origin, and everything
/// before the schedule starts is at 0 (bucket 0).
struct RecordClock {
    base: Instant,
    /// Origin minus base in ns; `i64::MIN` while the schedule has not started.
    origin_offset: AtomicI64,
    started_unix_ms: AtomicU64,
}

impl RecordClock {
    fn ns(&self, now: Instant) -> u64 {
        let offset = self.origin_offset.load(Ordering::Relaxed);
        if offset == i64::MIN {
            return 0;
        }
        // `now` is after the base but for instants older than the recorder, so one subtraction is the usual case.
        let since_base = match now.checked_duration_since(self.base) {
            Some(d) => d.as_nanos() as i128,
            None => -(self.base.duration_since(now).as_nanos() as i128),
        };
        (since_base - i128::from(offset)).clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// Everything faultd records, shared by the data plane and the control API.
pub struct Recorder {
    bucket: Duration,
    clock: RecordClock,
    routes: RwLock<BTreeMap<String, Arc<RouteRecorder>>>,
    connections: Buckets<ConnectionCell>,
    open_connections: AtomicU64,
    shed: AtomicU64,
    unmatched: unmatched::Unmatched,
    loops: AtomicU64,
    phases_entered: Mutex<Vec<PhaseEntry>>,
    /// Each call one by one, when the configuration correlates.
    traced: traced::TracedCalls,
}

/// A phase the schedule entered, at its time from the origin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseEntry {
    /// The phase's name.
    pub name: String,
    /// When it began, from the schedule's origin.
    pub at: Dur,
}

impl Recorder {
    /// A recorder with this bucket step.
    pub fn new(bucket: Duration) -> Recorder {
        Recorder {
            bucket: bucket.max(Duration::from_micros(1)),
            clock: RecordClock {
                base: Instant::now(),
                origin_offset: AtomicI64::new(i64::MIN),
                started_unix_ms: AtomicU64::new(0),
            },
            routes: RwLock::new(BTreeMap::new()),
            connections: Buckets::new(),
            open_connections: AtomicU64::new(0),
            shed: AtomicU64::new(0),
            unmatched: unmatched::Unmatched::default(),
            loops: AtomicU64::new(0),
            phases_entered: Mutex::new(Vec::new()),
            traced: traced::TracedCalls::default(),
        }
    }

    /// The recording step.
    pub fn bucket(&self) -> Duration {
        self.bucket
    }

    fn bucket_ns(&self) -> u64 {
        self.bucket.as_nanos().max(1) as u64
    }

    /// Sets the origin (t = 0) that every later sample is measured from. The run starts there: calls that matched no
    /// route before it (a probe of a faultd started ahead of the run, an earlier run's) are not the run's.
    pub fn set_origin(&self, origin: Instant, unix_ms: u64) {
        self.unmatched.clear();
        self.traced.clear();
        let after = origin.saturating_duration_since(self.clock.base).as_nanos() as i128;
        let before = self.clock.base.saturating_duration_since(origin).as_nanos() as i128;
        let offset = (after - before).clamp(i128::from(i64::MIN + 1), i128::from(i64::MAX)) as i64;
        self.clock.origin_offset.store(offset, Ordering::Relaxed);
        self.clock.started_unix_ms.store(unix_ms, Ordering::Relaxed);
    }

    /// Nanoseconds from the origin to `now` (0 before the schedule starts).
    pub fn time_ns(&self, now: Instant) -> u64 {
        self.clock.ns(now)
    }

    /// Replaces the list of phases entered (the schedule owns what it means).
    pub fn set_phases_entered(&self, entries: Vec<PhaseEntry>) {
        if let Ok(mut p) = self.phases_entered.lock() {
            *p = entries;
        }
    }

    /// The recorder of route `name`, created on first use and kept across configuration changes.
    pub fn route(&self, name: &str) -> Arc<RouteRecorder> {
        if let Some(r) = self.routes.read().ok().and_then(|m| m.get(name).cloned()) {
            return r;
        }
        let mut routes = match self.routes.write() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        routes
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(RouteRecorder::new(Arc::from(name), self.bucket_ns())))
            .clone()
    }

    /// Counts a call of `method` to `path` that no route matched.
    pub fn unmatched(&self, method: &str, path: &str) {
        self.unmatched.record(method, path);
    }

    /// Counts a proxied call that came back to this faultd (answered 508, not forwarded again).
    pub fn loop_detected(&self) {
        self.loops.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection opening; the returned guard counts it closing.
    pub fn connection_opened(self: &Arc<Self>) -> ConnectionGuard {
        let open = self.open_connections.fetch_add(1, Ordering::Relaxed) + 1;
        let cell = self
            .connections
            .at((self.time_ns(Instant::now()) / self.bucket_ns()) as usize);
        cell.opened.fetch_add(1, Ordering::Relaxed);
        cell.open_max.fetch_max(open, Ordering::Relaxed);
        ConnectionGuard {
            recorder: self.clone(),
        }
    }

    /// Counts a connection shed over the connection limit (answered 503 and closed, never served).
    pub fn connection_shed(&self) {
        self.shed.fetch_add(1, Ordering::Relaxed);
        let cell = self
            .connections
            .at((self.time_ns(Instant::now()) / self.bucket_ns()) as usize);
        cell.shed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection (already counted as opened) that speaks HTTP/2.
    pub fn connection_is_http2(&self) {
        let cell = self
            .connections
            .at((self.time_ns(Instant::now()) / self.bucket_ns()) as usize);
        cell.http2.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections shed over the connection limit so far.
    pub fn shed_count(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }

    /// Records a call's arrival on `route` during phase `phase`; the guard records its departure.
    pub fn arrive(self: &Arc<Self>, route: Arc<RouteRecorder>, phase: Arc<str>) -> CallGuard {
        self.arrive_at(route, phase, Instant::now())
    }

    /// [`Recorder::arrive`] for a call that arrived at `arrival` (the instant its handler already read).
    pub fn arrive_at(
        self: &Arc<Self>,
        route: Arc<RouteRecorder>,
        phase: Arc<str>,
        arrival: Instant,
    ) -> CallGuard {
        let t = self.time_ns(arrival);
        let timed = route.arrive(t);
        CallGuard {
            recorder: self.clone(),
            route,
            instance: None,
            phase,
            arrival,
            timed,
            outcome: Outcome::Abandoned,
            grpc_status: None,
            due: None,
            key: None,
        }
    }

    /// The calls of a correlating configuration so far, one by one in the order they ended (empty otherwise).
    pub fn traced_calls(&self) -> Vec<TracedCall> {
        self.traced.all()
    }

    /// [`Recorder::arrive_at`] for a call that reached `instance` of `route` (one of the route's instance
    /// recorders): recorded on both, so the route's series is the sum of its instances'.
    pub fn arrive_on_instance(
        self: &Arc<Self>,
        route: Arc<RouteRecorder>,
        instance: Arc<RouteRecorder>,
        phase: Arc<str>,
        arrival: Instant,
    ) -> CallGuard {
        let t = self.time_ns(arrival);
        let timed = instance.arrive(t);
        let mut guard = self.arrive_at(route, phase, arrival);
        guard.instance = Some((instance, timed));
        guard
    }

    /// Calls in flight now, over all routes.
    pub fn in_flight(&self) -> u64 {
        self.routes
            .read()
            .map(|r| {
                r.values()
                    .map(|r| r.in_flight.load(Ordering::Relaxed))
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Open connections now.
    pub fn open_connections(&self) -> u64 {
        self.open_connections.load(Ordering::Relaxed)
    }

    /// The origin as Unix milliseconds, once the schedule has started.
    pub fn snapshot_started_unix_ms(&self) -> Option<u64> {
        let started = self.clock.started_unix_ms.load(Ordering::Relaxed);
        (started > 0).then_some(started)
    }

    /// Calls no route matched, so far.
    pub fn unmatched_count(&self) -> u64 {
        self.unmatched.total()
    }

    /// A consistent-enough snapshot: every counter is read once; calls still running are in flight.
    pub fn snapshot(&self) -> Recording {
        self.snapshot_since(0)
    }

    /// [`Recorder::snapshot`] with every series (each route's and instance's buckets, the connections) from bucket
    /// `from` on, for a reader that holds the earlier ones: its cost follows the buckets read, not the run's
    /// length. Totals, maxima, histograms and counts are over the whole run either way.
    pub fn snapshot_since(&self, from: usize) -> Recording {
        let now_ns = self.time_ns(Instant::now());
        let b = self.bucket_ns();
        let current = (now_ns / b) as usize;
        let routes = self.routes.read().map(|r| r.clone()).unwrap_or_default();
        let routes = routes
            .into_iter()
            .map(|(name, r)| (name, r.snapshot(now_ns, current, from)))
            .collect();
        let mut connections = Vec::new();
        let mut open = 0u64;
        let n = self
            .connections
            .used()
            .max(current + 1)
            .min(CHUNK * MAX_CHUNKS);
        for i in 0..n {
            let (opened, closed, max, shed, http2) = match self.connections.peek(i) {
                Some(c) => (
                    c.opened.load(Ordering::Relaxed),
                    c.closed.load(Ordering::Relaxed),
                    c.open_max.load(Ordering::Relaxed),
                    c.shed.load(Ordering::Relaxed),
                    c.http2.load(Ordering::Relaxed),
                ),
                None => (0, 0, 0, 0, 0),
            };
            // The level open is a sum from the start (a few loads per bucket); only the buckets asked for are
            // kept.
            if i >= from {
                connections.push(ConnectionBucket {
                    opened,
                    closed,
                    max_open: max.max(open),
                    shed,
                    http2_opened: http2,
                });
            }
            open = (open + opened).saturating_sub(closed);
        }
        let started = self.clock.started_unix_ms.load(Ordering::Relaxed);
        Recording {
            bucket: Dur(self.bucket),
            schedule_started_unix_ms: (started > 0).then_some(started),
            phases_entered: self
                .phases_entered
                .lock()
                .map(|p| p.clone())
                .unwrap_or_default(),
            routes,
            connections,
            unmatched: self.unmatched_count(),
            loops_detected: self.loops.load(Ordering::Relaxed),
            unmatched_paths: self.unmatched.top(),
            tls: None,
            dns: None,
            replicas: 1,
            in_flight_max_is_upper_bound: false,
            postgres: BTreeMap::new(),
        }
    }
}

impl RouteRecorder {
    fn new(name: Arc<str>, bucket_ns: u64) -> RouteRecorder {
        RouteRecorder {
            name,
            bucket_ns,
            cells: Buckets::new(),
            grpc: Buckets::new(),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            histograms: Mutex::new(latencies::PhaseLatencies::default()),
            entries: Mutex::new(BTreeMap::new()),
            instances: Mutex::new(Vec::new()),
            checkpoint: Mutex::default(),
        }
    }

    /// The recorder of the route's instance `number` (from 1), created with those before it on first use.
    pub fn instance(&self, number: u32) -> Arc<RouteRecorder> {
        let mut instances = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        while instances.len() < number as usize {
            instances.push(Arc::new(RouteRecorder::new(
                self.name.clone(),
                self.bucket_ns,
            )));
        }
        instances[(number.max(1) - 1) as usize].clone()
    }

    /// Counts an arrival `t` ns after the origin; the bucket and slot that timed it, when it was among its
    /// bucket's first.
    fn arrive(&self, t: u64) -> Option<(usize, usize)> {
        let level = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        self.max_in_flight.fetch_max(level, Ordering::Relaxed);
        let b = self.bucket_ns;
        let cell = self.cells.at((t / b) as usize);
        let nth = cell.arrivals.fetch_add(1, Ordering::Relaxed) as usize;
        let timed = cell.first.get(nth).map(|slot| {
            slot.store(
                ((t % b) / 1_000).min(u64::from(u32::MAX)) as u32,
                Ordering::Relaxed,
            );
            ((t / b) as usize, nth)
        });
        cell.arrival_residual
            .fetch_add(b - t % b, Ordering::Relaxed);
        cell.in_flight_max.fetch_max(level, Ordering::Relaxed);
        timed
    }

    /// Calls in flight on this route now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The most calls this route has held at once.
    pub fn max_in_flight(&self) -> u64 {
        self.max_in_flight.load(Ordering::Relaxed)
    }

    /// The counts of the route's matched entry `name`, created on first use and kept across phases and
    /// configurations: entries of the same name (in the base and in a phase) count together.
    pub fn entry_tally(&self, name: &str) -> Arc<EntryTally> {
        let mut entries = match self.entries.lock() {
            Ok(e) => e,
            Err(poisoned) => poisoned.into_inner(),
        };
        entries.entry(name.to_string()).or_default().clone()
    }

    /// The counts of every matched entry that matched a call.
    fn matched(&self) -> BTreeMap<String, MatchCounts> {
        let Ok(entries) = self.entries.lock() else {
            return BTreeMap::new();
        };
        entries
            .iter()
            .map(|(name, tally)| (name, tally.read()))
            .filter(|(_, (matched, _))| *matched > 0)
            .map(|(name, (matched, taken))| (name.clone(), MatchCounts { matched, taken }))
            .collect()
    }

    /// How many buckets this route stores: none until its first call, then whole chunks of them.
    pub fn buckets_stored(&self) -> usize {
        self.cells.chunks_stored() * CHUNK
    }
}

/// An HDR histogram of nanoseconds with 3 significant digits that grows as needed (the shared codec's settings).
pub use faultline_hdr::new_histogram;

#[cfg(test)]
mod tests;
