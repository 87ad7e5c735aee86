//! The TCP recorder: what reached each TCP route and what its toxics did, per time bucket (faultd's bucket,
//! 100 ms by default), on the run's clock.
//!
//! For: connection attempts (each accepted connection; a connect refused while the proxy is down never reaches
//! faultd and is the client's to count), connections open (the maximum and the time-weighted mean per bucket: the
//! pool as the dependency sees it), bytes each way, connections each toxic type took, upstream connects that
//! failed, and how connections ended. Served in `/recording` as `tcp_routes` and on `/metrics`. Not for: deciding
//! anything; recordings never feed back into toxics.
//!
//! Connection events are rare next to HTTP calls, so one short lock per event keeps this simple and exact: the
//! level of open connections is integrated over time at every change, so a bucket in which 200 pooled
//! connections sit idle still reports a mean and a maximum of 200.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::toxics::Stream;

/// At most this many buckets per route (~29 h at 100 ms); later events land in the last one.
const MAX_BUCKETS: usize = 1 << 20;

/// One bucket of one TCP route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpBucket {
    /// Connections accepted in the bucket.
    pub attempts: u64,
    /// The most connections open at once in the bucket.
    pub max_open: u64,
    /// The time-weighted mean of connections open over the bucket.
    pub mean_open: f64,
    /// Bytes forwarded client to server.
    pub bytes_upstream: u64,
    /// Bytes forwarded server to client.
    pub bytes_downstream: u64,
    /// Connections closed in the bucket.
    pub closed: u64,
    /// Connections reset (reset_peer) in the bucket.
    pub resets: u64,
    /// Upstream connects that failed in the bucket (refused, unreachable, not allowed).
    pub upstream_errors: u64,
    /// Connections a toxic took, by toxic type.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub toxics: BTreeMap<String, u64>,
}

/// Everything recorded for one TCP route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpRouteRecording {
    /// The address clients connect to.
    pub listen: String,
    /// The address faultd forwards to.
    pub upstream: String,
    /// The bucket step, ms.
    pub bucket_ms: u64,
    /// Connections open now.
    pub open: u64,
    /// The most connections open at once over the whole run.
    pub max_open: u64,
    /// Sums over every bucket (`max_open` and `mean_open` there are the run's maximum and mean).
    pub totals: TcpBucket,
    /// One entry per bucket from t = 0; empty for a route no connection has reached.
    pub buckets: Vec<TcpBucket>,
    /// Per instance of a route served by several (`instances: N`), in instance order (the first is instance 1):
    /// what reached each instance's own listener. Every such connection is the route's too, so the instances'
    /// counts add up to at most the route's (the route's own listener takes the rest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<TcpRouteRecording>,
    /// A route with `protocol: redis`: its commands, replies and entries. Absent on other routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<super::protocol::redis::RedisRecording>,
    /// A route speaking `protocol: postgres`: its statements per entry and phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<crate::recorder::postgres::PostgresRecording>,
}

impl TcpRouteRecording {
    /// Drops the route's (and its instances') buckets before `from`.
    pub fn drop_buckets_before(&mut self, from: usize) {
        self.buckets.drain(..from.min(self.buckets.len()));
        for i in &mut self.instances {
            i.drop_buckets_before(from);
        }
    }

    /// This route's recording in the shape of an HTTP route's, with connections as calls: connection attempts
    /// are arrivals, connections open are calls in flight (max and mean per bucket), closed connections are
    /// completions (counted as 2xx) and resets are resets. No latency is served per call on a TCP route, so the
    /// latency histograms are empty.
    pub fn as_calls(&self) -> crate::recorder::RouteRecording {
        let bucket = |b: &TcpBucket| crate::recorder::RouteBucket {
            arrivals: b.attempts,
            completed: crate::recorder::StatusClasses {
                c2xx: b.closed,
                ..Default::default()
            },
            resets: b.resets,
            in_flight_max: b.max_open,
            in_flight_mean: b.mean_open,
            ..Default::default()
        };
        crate::recorder::RouteRecording {
            buckets: self.buckets.iter().map(bucket).collect(),
            totals: bucket(&self.totals),
            max_in_flight: self.max_open,
            max_in_flight_lower_bound: None,
            in_flight: self.open,
            latency: BTreeMap::new(),
            late: BTreeMap::new(),
            matched: self
                .redis
                .as_ref()
                .map(|r| r.entries.clone())
                .unwrap_or_default(),
            instances: self.instances.iter().map(Self::as_calls).collect(),
            redis: self.redis.clone(),
        }
    }
}

#[derive(Debug)]
struct State {
    origin: Instant,
    buckets: Vec<TcpBucket>,
    /// Per bucket, the integral of the open level, in connection-nanoseconds.
    area: Vec<f64>,
    open: u64,
    max_open: u64,
    last_change: Instant,
    /// The bucket the last chunk's bytes landed in and the instants it spans (from, until): the chunks that
    /// follow in the same bucket find it by two comparisons instead of a division.
    current: Option<(usize, Instant, Instant)>,
}

/// The recorder of one TCP route, or of one instance of a route served by several.
#[derive(Debug)]
pub struct TcpRecorder {
    bucket: Duration,
    state: Mutex<State>,
    /// The route's recorder when this one records an instance: every event is the route's too, recorded there
    /// as it happens, so the route's open level (and its maximum) is exact rather than a sum of maxima.
    route: Option<Arc<TcpRecorder>>,
}

impl TcpRecorder {
    /// A recorder with buckets of `bucket` from `origin`.
    pub fn new(bucket: Duration, origin: Instant) -> TcpRecorder {
        TcpRecorder {
            bucket: bucket.max(Duration::from_millis(1)),
            state: Mutex::new(State {
                origin,
                buckets: Vec::new(),
                area: Vec::new(),
                open: 0,
                max_open: 0,
                last_change: origin,
                current: None,
            }),
            route: None,
        }
    }

    /// The recorder of one instance of the route `route` records: same bucket and origin, and every event
    /// recorded on the route's as well.
    pub fn instance_of(route: Arc<TcpRecorder>) -> TcpRecorder {
        let origin = route.state().origin;
        TcpRecorder {
            route: Some(route.clone()),
            ..TcpRecorder::new(route.bucket, origin)
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn index(&self, state: &State, at: Instant) -> usize {
        let since = at.saturating_duration_since(state.origin);
        ((since.as_nanos() / self.bucket.as_nanos()) as usize).min(MAX_BUCKETS - 1)
    }

    fn grow(state: &mut State, index: usize) {
        if state.buckets.len() <= index {
            state.buckets.resize(index + 1, TcpBucket::default());
            state.area.resize(index + 1, 0.0);
        }
    }

    /// Adds the open level from the last change up to `now` into the buckets it spans.
    fn integrate(&self, state: &mut State, now: Instant) {
        let from = state.last_change.max(state.origin);
        // A route no connection has reached keeps no series: its zeros would cost routes x elapsed buckets.
        if now <= from || state.buckets.is_empty() {
            state.last_change = state.last_change.max(now);
            return;
        }
        let level = state.open as f64;
        let step = self.bucket.as_nanos();
        let mut t = from.duration_since(state.origin).as_nanos();
        let end = now.duration_since(state.origin).as_nanos();
        let last = self.index(state, now);
        Self::grow(state, last);
        while t < end {
            let index = ((t / step) as usize).min(MAX_BUCKETS - 1);
            let bucket_end = if index == MAX_BUCKETS - 1 {
                end
            } else {
                ((t / step) + 1) * step
            };
            let upto = bucket_end.min(end);
            state.area[index] += level * (upto - t) as f64;
            let b = &mut state.buckets[index];
            b.max_open = b.max_open.max(state.open);
            t = upto;
        }
        state.last_change = now;
    }

    /// Sets the run's t = 0; what was recorded before lands in bucket 0 from now on.
    pub fn set_origin(&self, origin: Instant) {
        let mut s = self.state();
        let now = Instant::now();
        self.integrate(&mut s, now);
        s.origin = origin;
        s.last_change = now.max(origin);
        s.current = None;
        if s.buckets.is_empty() {
            return;
        }
        let mut first = TcpBucket::default();
        for b in s.buckets.drain(..) {
            first.attempts += b.attempts;
            first.bytes_upstream += b.bytes_upstream;
            first.bytes_downstream += b.bytes_downstream;
            first.closed += b.closed;
            first.resets += b.resets;
            first.upstream_errors += b.upstream_errors;
            first.max_open = first.max_open.max(b.max_open);
            for (k, v) in b.toxics {
                *first.toxics.entry(k).or_default() += v;
            }
        }
        s.area.clear();
        s.buckets.push(first);
        s.area.push(0.0);
    }

    /// A connection was accepted and is now open.
    pub fn opened(&self) {
        let now = Instant::now();
        let mut s = self.state();
        self.integrate(&mut s, now);
        s.open += 1;
        s.max_open = s.max_open.max(s.open);
        let i = self.index(&s, now);
        Self::grow(&mut s, i);
        let open = s.open;
        let b = &mut s.buckets[i];
        b.attempts += 1;
        b.max_open = b.max_open.max(open);
        drop(s);
        if let Some(route) = &self.route {
            route.opened();
        }
    }

    /// A connection ended, reset or not.
    pub fn closed(&self, reset: bool) {
        let now = Instant::now();
        let mut s = self.state();
        self.integrate(&mut s, now);
        s.open = s.open.saturating_sub(1);
        let i = self.index(&s, now);
        Self::grow(&mut s, i);
        let b = &mut s.buckets[i];
        b.closed += 1;
        if reset {
            b.resets += 1;
        }
        drop(s);
        if let Some(route) = &self.route {
            route.closed(reset);
        }
    }

    /// Bytes forwarded one way: called for every chunk a TCP route moves, so the bucket is looked up from the
    /// previous chunk's where it can be.
    pub fn bytes(&self, stream: Stream, n: usize) {
        let now = Instant::now();
        let mut s = self.state();
        let i = match s.current {
            Some((i, from, until)) if from <= now && now < until => i,
            _ => {
                let i = self.index(&s, now);
                Self::grow(&mut s, i);
                // The last bucket takes everything later and a time before the origin lands in the first: neither
                // spans one step, so neither is kept.
                let from = u32::try_from(i)
                    .ok()
                    .and_then(|k| self.bucket.checked_mul(k))
                    .map(|d| s.origin + d);
                s.current = match from {
                    Some(from) if i < MAX_BUCKETS - 1 && from <= now => {
                        Some((i, from, from + self.bucket))
                    }
                    _ => None,
                };
                i
            }
        };
        let b = &mut s.buckets[i];
        match stream {
            Stream::Upstream => b.bytes_upstream += n as u64,
            Stream::Downstream => b.bytes_downstream += n as u64,
        }
        drop(s);
        if let Some(route) = &self.route {
            route.bytes(stream, n);
        }
    }

    /// A toxic of type `kind` took a connection.
    pub fn toxic(&self, kind: &str) {
        let now = Instant::now();
        let mut s = self.state();
        let i = self.index(&s, now);
        Self::grow(&mut s, i);
        *s.buckets[i].toxics.entry(kind.to_string()).or_default() += 1;
        drop(s);
        if let Some(route) = &self.route {
            route.toxic(kind);
        }
    }

    /// The upstream connect failed.
    pub fn upstream_error(&self) {
        let now = Instant::now();
        let mut s = self.state();
        let i = self.index(&s, now);
        Self::grow(&mut s, i);
        s.buckets[i].upstream_errors += 1;
        drop(s);
        if let Some(route) = &self.route {
            route.upstream_error();
        }
    }

    /// Connections open now.
    pub fn open(&self) -> u64 {
        self.state().open
    }

    /// Everything so far, up to now.
    pub fn snapshot(&self, listen: String, upstream: String) -> TcpRouteRecording {
        let now = Instant::now();
        let mut s = self.state();
        self.integrate(&mut s, now);
        let step = self.bucket.as_nanos() as f64;
        let mut buckets = s.buckets.clone();
        for (b, area) in buckets.iter_mut().zip(&s.area) {
            b.mean_open = area / step;
        }
        // The bucket in progress is averaged over the part that has elapsed.
        let elapsed_in_last = now.saturating_duration_since(s.origin).as_nanos() as f64 % step;
        if let (Some(b), Some(area)) = (buckets.last_mut(), s.area.last()) {
            if elapsed_in_last > 0.0 && now >= s.origin {
                b.mean_open = area / elapsed_in_last;
            }
        }
        let mut totals = TcpBucket::default();
        let mut area_sum = 0.0;
        for (b, area) in buckets.iter().zip(&s.area) {
            totals.attempts += b.attempts;
            totals.bytes_upstream += b.bytes_upstream;
            totals.bytes_downstream += b.bytes_downstream;
            totals.closed += b.closed;
            totals.resets += b.resets;
            totals.upstream_errors += b.upstream_errors;
            totals.max_open = totals.max_open.max(b.max_open);
            for (k, v) in &b.toxics {
                *totals.toxics.entry(k.clone()).or_default() += v;
            }
            area_sum += area;
        }
        let span = now.saturating_duration_since(s.origin).as_nanos() as f64;
        totals.mean_open = if span > 0.0 { area_sum / span } else { 0.0 };
        TcpRouteRecording {
            listen,
            upstream,
            bucket_ms: self.bucket.as_millis() as u64,
            open: s.open,
            max_open: s.max_open,
            totals,
            buckets,
            instances: Vec::new(),
            redis: None,
            postgres: None,
        }
    }
}

/// The TCP routes' figures for `/metrics`, encoded at scrape time from a snapshot of every route.
#[derive(Debug)]
pub struct TcpMetrics(pub BTreeMap<String, TcpRouteRecording>);

impl prometheus_client::collector::Collector for TcpMetrics {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use crate::exposition::Row;
        use prometheus_client::metrics::MetricType;

        let mut family = |name: &str, help: &str, kind: MetricType, rows: Vec<Row<'_>>| {
            crate::exposition::family(&mut encoder, name, help, kind, rows)
        };
        let per_route = |get: fn(&TcpRouteRecording) -> u64| -> Vec<Row<'_>> {
            self.0
                .iter()
                .map(|(name, r)| (vec![("tcp_route", name.as_str())], get(r)))
                .collect()
        };
        family(
            "faultd_tcp_open_connections",
            "Connections a TCP route holds open now",
            MetricType::Gauge,
            per_route(|r| r.open),
        )?;
        family(
            "faultd_tcp_max_open_connections",
            "The most connections a TCP route held open at once since start",
            MetricType::Gauge,
            per_route(|r| r.max_open),
        )?;
        family(
            "faultd_tcp_connections",
            "Connections a TCP route accepted",
            MetricType::Counter,
            per_route(|r| r.totals.attempts),
        )?;
        family(
            "faultd_tcp_upstream_errors",
            "Upstream connects a TCP route could not make",
            MetricType::Counter,
            per_route(|r| r.totals.upstream_errors),
        )?;
        family(
            "faultd_tcp_resets",
            "Connections a TCP route reset",
            MetricType::Counter,
            per_route(|r| r.totals.resets),
        )?;
        let bytes = self
            .0
            .iter()
            .flat_map(|(name, r)| {
                [
                    (
                        vec![("tcp_route", name.as_str()), ("stream", "upstream")],
                        r.totals.bytes_upstream,
                    ),
                    (
                        vec![("tcp_route", name.as_str()), ("stream", "downstream")],
                        r.totals.bytes_downstream,
                    ),
                ]
            })
            .collect();
        family(
            "faultd_tcp_bytes",
            "Bytes a TCP route forwarded, by stream",
            MetricType::Counter,
            bytes,
        )?;
        let toxics = self
            .0
            .iter()
            .flat_map(|(name, r)| {
                r.totals.toxics.iter().map(move |(kind, n)| {
                    (
                        vec![("tcp_route", name.as_str()), ("toxic", kind.as_str())],
                        *n,
                    )
                })
            })
            .collect();
        family(
            "faultd_tcp_toxic_connections",
            "Connections a toxic took, by TCP route and toxic type",
            MetricType::Counter,
            toxics,
        )?;
        let pg = || {
            self.0
                .iter()
                .filter_map(|(n, r)| Some((n.as_str(), r.postgres.as_ref()?)))
        };
        let totals = || pg().flat_map(|(route, p)| p.totals().into_iter().map(move |t| (route, t)));
        let labels = |route, entry| vec![("tcp_route", route), ("entry", entry)];
        family(
            "faultd_postgres_statements",
            "Statements whose reply ended, by postgres route and entry (other: no entry matched)",
            MetricType::Counter,
            totals()
                .map(|(route, (entry, n, _))| (labels(route, entry), n))
                .collect(),
        )?;
        family(
            "faultd_postgres_in_flight",
            "Statements waiting for their reply now, by postgres route and entry",
            MetricType::Gauge,
            totals()
                .map(|(route, (entry, _, n))| (labels(route, entry), n))
                .collect(),
        )?;
        let errors = pg().flat_map(|(route, p)| {
            p.error_totals().into_iter().map(move |(entry, code, n)| {
                (
                    vec![("tcp_route", route), ("entry", entry), ("sqlstate", code)],
                    n,
                )
            })
        });
        family(
            "faultd_postgres_errors",
            "Statements answered with an error (faultd's or the server's), by postgres route, entry and SQLSTATE",
            MetricType::Counter,
            errors.collect(),
        )
    }
}

/// A recording with every TCP route's own recording added as a route of calls ([`TcpRouteRecording::as_calls`]), so
/// that whatever reads HTTP routes (expectations, reports) reads TCP ones alike.
pub fn with_tcp_routes(
    recording: crate::recorder::Recording,
    tcp: BTreeMap<String, TcpRouteRecording>,
) -> crate::recorder::Recording {
    with_tcp_routes_since(recording, tcp, 0)
}

/// [`with_tcp_routes`] for a recording read from bucket `from` on ([`crate::Faultd::recording_since`]): the TCP
/// routes' series are cut the same way.
pub fn with_tcp_routes_since(
    mut recording: crate::recorder::Recording,
    tcp: BTreeMap<String, TcpRouteRecording>,
    from: usize,
) -> crate::recorder::Recording {
    for (name, mut route) in tcp {
        route.drop_buckets_before(from);
        recording.routes.insert(name.clone(), route.as_calls());
        if let Some(pg) = route.postgres {
            recording.postgres.insert(name, pg);
        }
    }
    recording
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_open_connections_count_in_every_bucket_they_span() {
        let origin = Instant::now();
        let r = TcpRecorder::new(Duration::from_millis(100), origin);
        r.opened();
        r.opened();
        tokio::time::advance(Duration::from_millis(250)).await;
        r.closed(false);
        tokio::time::advance(Duration::from_millis(140)).await;
        let rec = r.snapshot("l".into(), "u".into());
        assert_eq!(rec.buckets.len(), 4);
        assert_eq!(rec.buckets[0].attempts, 2);
        assert_eq!(rec.buckets[1].max_open, 2);
        assert!((rec.buckets[1].mean_open - 2.0).abs() < 1e-9, "{rec:?}");
        assert!((rec.buckets[2].mean_open - 1.5).abs() < 1e-9, "{rec:?}");
        assert_eq!(rec.buckets[2].closed, 1);
        assert_eq!(rec.buckets[3].max_open, 1);
        assert_eq!((rec.open, rec.max_open, rec.totals.attempts), (1, 2, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_route_no_connection_reached_keeps_no_buckets_however_long_the_run() {
        let step = Duration::from_millis(100);
        let r = TcpRecorder::new(step, Instant::now());
        r.set_origin(Instant::now());
        for _ in 0..6 {
            // 60 s, 600 buckets, read as a runner polls.
            tokio::time::advance(Duration::from_secs(10)).await;
            let rec = r.snapshot(String::new(), String::new());
            assert_eq!(rec.buckets, [], "an idle route reported a series");
            assert_eq!(r.state().buckets.len(), 0, "an idle route stored buckets");
        }
        // Its first connection starts the series, with the time before it empty.
        r.opened();
        tokio::time::advance(step).await;
        let rec = r.snapshot(String::new(), String::new());
        assert_eq!(rec.buckets.len(), 602);
        assert_eq!(rec.buckets[600].attempts, 1);
        assert_eq!(rec.buckets[599].max_open, 0);
        assert!(
            (rec.buckets[600].mean_open - 1.0).abs() < 1e-9,
            "{:?}",
            rec.buckets[600]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_and_toxics_land_in_their_bucket() {
        let r = TcpRecorder::new(Duration::from_millis(100), Instant::now());
        r.bytes(Stream::Upstream, 10);
        tokio::time::advance(Duration::from_millis(120)).await;
        r.bytes(Stream::Downstream, 7);
        r.toxic("latency");
        let rec = r.snapshot(String::new(), String::new());
        assert_eq!(rec.buckets[0].bytes_upstream, 10);
        assert_eq!(rec.buckets[1].bytes_downstream, 7);
        assert_eq!(rec.totals.toxics["latency"], 1);
    }

    #[tokio::test(start_paused = true)]
    async fn chunks_after_the_first_find_their_bucket_at_each_edge_and_after_a_new_origin() {
        let step = Duration::from_millis(100);
        let origin = Instant::now() + Duration::from_millis(50);
        let r = TcpRecorder::new(step, origin);
        // Before the origin: the first bucket, every time.
        r.bytes(Stream::Upstream, 1);
        r.bytes(Stream::Upstream, 2);
        tokio::time::advance(Duration::from_millis(50)).await;
        // At the origin exactly, then the last instant of bucket 0, then bucket 1's first instant.
        r.bytes(Stream::Upstream, 4);
        tokio::time::advance(step - Duration::from_nanos(1)).await;
        r.bytes(Stream::Upstream, 8);
        tokio::time::advance(Duration::from_nanos(1)).await;
        r.bytes(Stream::Upstream, 16);
        r.bytes(Stream::Downstream, 32);
        // Two buckets on, skipping one.
        tokio::time::advance(2 * step).await;
        r.bytes(Stream::Upstream, 64);
        let rec = r.snapshot(String::new(), String::new());
        let up: Vec<u64> = rec.buckets.iter().map(|b| b.bytes_upstream).collect();
        assert_eq!(up, [15, 16, 0, 64]);
        assert_eq!(rec.buckets[1].bytes_downstream, 32);

        // A new origin 30 ms from now: what came before folds into bucket 0, and the bucket remembered from
        // before is not reused.
        let origin = Instant::now() + Duration::from_millis(30);
        r.set_origin(origin);
        r.bytes(Stream::Upstream, 128);
        tokio::time::advance(Duration::from_millis(30) + step).await;
        r.bytes(Stream::Upstream, 256);
        let rec = r.snapshot(String::new(), String::new());
        let up: Vec<u64> = rec.buckets.iter().map(|b| b.bytes_upstream).collect();
        assert_eq!(up, [15 + 16 + 64 + 128, 256]);
    }
}
