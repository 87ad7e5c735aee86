//! The recording as data: what `GET /recording` serves and a runner reads back, per route and bucket.

use super::*;

/// Everything recorded so far; the control API serves this as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    /// The bucket step: bucket i covers [i*bucket, (i+1)*bucket) from the origin.
    pub bucket: Dur,
    /// The origin as Unix milliseconds, once the schedule has started.
    pub schedule_started_unix_ms: Option<u64>,
    /// The phases entered, with their times from the origin.
    pub phases_entered: Vec<PhaseEntry>,
    /// Per route.
    pub routes: BTreeMap<String, RouteRecording>,
    /// Connections per bucket.
    pub connections: Vec<ConnectionBucket>,
    /// Calls no route matched (answered 404, or forwarded by `unmatched.proxy`) since the schedule started.
    pub unmatched: u64,
    /// Proxied calls that came back to this faultd through a loop (answered 508 Loop Detected, not forwarded
    /// again). Absent in older recordings.
    #[serde(default)]
    pub loops_detected: u64,
    /// The methods and paths of those calls with the most calls, at most 20, most first: where a SUT that
    /// calls the wrong path is calling. Absent in older recordings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmatched_paths: Vec<UnmatchedPath>,
    /// The data plane's TLS handshakes by outcome, when it speaks TLS (the TLS listener records them, not this
    /// recorder: see `tls::record`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::tls::TlsRecording>,
    /// The resolver's queries per name and bucket, when the configuration has `dns:` (the resolver records them,
    /// not this recorder: see `dns::record`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<crate::dns::DnsRecording>,
    /// How many faultd replicas this recording adds up: 1 for one faultd's own recording, N for the merge of N
    /// replicas behind one address ([`Recording::merge_replicas`]). Absent in older recordings, which are one
    /// faultd's.
    #[serde(default = "one_replica")]
    pub replicas: u32,
    /// True when every maximum in flight here (per bucket and over the run, on each route, and the connections
    /// open) is the sum of the replicas' own maxima: an upper bound of the true maximum, since the replicas' peaks
    /// need not fall at the same instant. Counts, histograms and means are exact either way. False for one faultd.
    #[serde(default)]
    pub in_flight_max_is_upper_bound: bool,
    /// Per TCP route speaking `protocol: postgres`: its statements per entry and phase. Absent without such a
    /// route, and in older recordings.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub postgres: BTreeMap<String, super::postgres::PostgresRecording>,
}

impl Recording {
    /// A recording of nothing yet, of one faultd, in buckets `bucket` wide.
    pub fn empty(bucket: std::time::Duration) -> Recording {
        Recording {
            bucket: Dur(bucket),
            schedule_started_unix_ms: None,
            phases_entered: Vec::new(),
            routes: BTreeMap::new(),
            connections: Vec::new(),
            unmatched: 0,
            loops_detected: 0,
            unmatched_paths: Vec::new(),
            tls: None,
            dns: None,
            replicas: 1,
            in_flight_max_is_upper_bound: false,
            postgres: BTreeMap::new(),
        }
    }

    /// Drops every series' buckets before `from` (each route's and instance's, the connections', the TLS
    /// handshakes'), as [`crate::recorder::Recorder::snapshot_since`] leaves them: bucket `from` comes first.
    pub fn drop_buckets_before(&mut self, from: usize) {
        let cut = |len: usize| from.min(len);
        for route in self.routes.values_mut() {
            route.drop_buckets_before(from);
        }
        self.connections.drain(..cut(self.connections.len()));
        if let Some(tls) = &mut self.tls {
            tls.buckets.drain(..cut(tls.buckets.len()));
        }
    }
}

impl RouteRecording {
    /// Drops the route's (and its instances') buckets before `from`, and when `from` is past the start, its
    /// per-phase histograms: what a read from bucket `from` leaves out.
    pub fn drop_buckets_before(&mut self, from: usize) {
        self.buckets.drain(..from.min(self.buckets.len()));
        if from > 0 {
            self.latency.clear();
            self.late.clear();
        }
        for i in &mut self.instances {
            i.drop_buckets_before(from);
        }
    }
}

pub(super) fn one_replica() -> u32 {
    1
}

/// What one route recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteRecording {
    /// Per bucket from the origin; empty for a route no call has reached (read a missing bucket as an empty one).
    pub buckets: Vec<RouteBucket>,
    /// Sums over the run; `in_flight_max` is the run's maximum, `in_flight_mean` the time-weighted mean.
    pub totals: RouteBucket,
    /// The most calls held at once over the run (over several replicas, the sum of their own maxima: an upper
    /// bound, see [`Recording::in_flight_max_is_upper_bound`]).
    pub max_in_flight: u64,
    /// When `max_in_flight` is such an upper bound: the most calls one replica held at once, which the true
    /// maximum is at least. Absent for one faultd, whose `max_in_flight` is exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight_lower_bound: Option<u64>,
    /// Calls in flight when the snapshot was taken.
    pub in_flight: u64,
    /// Served latency (arrival to last byte handed to the socket) in ns, per phase name, 3 significant digits;
    /// in JSON, base64 of the HdrHistogram V2+DEFLATE encoding.
    #[serde(with = "faultline_hdr::as_base64::histogram_map")]
    pub latency: BTreeMap<String, Histogram<u64>>,
    /// faultd's own lateness in ns, per phase, in the same encoding: how long after its answer was due (arrival
    /// plus the delay drawn) each completed call left, for calls answered whole when their delay ended (not a
    /// trickled body, a paced stream or a proxied call). The host's scheduling of faultd is in it: a call the host
    /// held up shows here, not as a longer draw. Absent in older recordings.
    #[serde(
        default,
        with = "faultline_hdr::as_base64::histogram_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub late: BTreeMap<String, Histogram<u64>>,
    /// Per matched entry of the route (by its name, `matched[i]` when it has none): the calls that met its
    /// conditions and the calls it took. Absent when no entry matched a call, and in older recordings.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub matched: BTreeMap<String, MatchCounts>,
    /// Per instance of a route served by several (`instances: N`), in instance order (the first is instance 1):
    /// what reached each instance's own listener. Every such call is the route's too, so the instances' counts
    /// and histograms add up to their part of the route's, and the route's in-flight series is the sum of
    /// theirs, its maxima measured on that sum. Absent for a route of one listener.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<RouteRecording>,
    /// A TCP route with `protocol: redis`: its commands and entries (`super::redis`).
    /// Absent on other routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<super::redis::RedisRecording>,
}

/// What one matched entry counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchCounts {
    /// Calls that met the entry's conditions and reached it (an earlier entry took none of them).
    pub matched: u64,
    /// Of those, the calls its trigger took, which got its behaviour.
    pub taken: u64,
}

/// Completed calls by status class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusClasses {
    /// 2xx answers.
    #[serde(rename = "2xx")]
    pub c2xx: u64,
    /// 3xx answers.
    #[serde(rename = "3xx")]
    pub c3xx: u64,
    /// 4xx answers.
    #[serde(rename = "4xx")]
    pub c4xx: u64,
    /// 5xx answers.
    #[serde(rename = "5xx")]
    pub c5xx: u64,
}

impl StatusClasses {
    /// All completed calls.
    pub fn total(&self) -> u64 {
        self.c2xx + self.c3xx + self.c4xx + self.c5xx
    }
}

/// One route's counts over one bucket. Arrivals count in the bucket they arrive in, every other count in the
/// bucket the call leaves in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteBucket {
    /// Calls that arrived.
    pub arrivals: u64,
    /// When the bucket's first arrivals (at most `FIRST_ARRIVALS`) came, in microseconds from the bucket's start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_arrivals_us: Vec<u32>,
    /// How long faultd held each of those calls, in microseconds, until it answered or its caller left (`None`:
    /// still in flight). Beside the arrivals, this places the answer a half-open probe's breaker waited for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_held_us: Vec<Option<u32>>,
    /// Calls answered in full, by status class.
    pub completed: StatusClasses,
    /// Calls reset: their connection (HTTP/1.1) or their stream (HTTP/2 RST_STREAM, an abrupt GOAWAY).
    pub resets: u64,
    /// Hung calls whose caller gave up.
    pub hangs: u64,
    /// Connections closed with no response.
    pub empty: u64,
    /// Malformed answers.
    pub malformed: u64,
    /// Answers cut partway through their body. Absent in older recordings.
    #[serde(default)]
    pub truncated: u64,
    /// Calls whose caller left before the answer was complete (not hangs).
    pub abandoned: u64,
    /// gRPC calls answered in full, by status name (`OK`, `UNAVAILABLE`, ...); they count in `completed` too,
    /// as the HTTP status (200) they carry. Absent when there were none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grpc_status: BTreeMap<String, u64>,
    /// The most calls in flight at any instant of the bucket (over several replicas, the sum of their own
    /// maxima: an upper bound).
    pub in_flight_max: u64,
    /// When `in_flight_max` is a sum over replicas: the most calls one replica held at once in the bucket, which
    /// the true maximum is at least. Absent for one faultd, whose `in_flight_max` is exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_max_lower_bound: Option<u64>,
    /// The time-weighted mean of calls in flight over the bucket.
    pub in_flight_mean: f64,
}

impl RouteBucket {
    /// Adds `o`'s counts (arrivals, completions by class, resets and the other departures, gRPC statuses); the
    /// maxima, the mean and the timed arrivals are the caller's to combine, which depends on how the buckets lie.
    pub fn add(&mut self, o: &RouteBucket) {
        self.arrivals += o.arrivals;
        self.completed.c2xx += o.completed.c2xx;
        self.completed.c3xx += o.completed.c3xx;
        self.completed.c4xx += o.completed.c4xx;
        self.completed.c5xx += o.completed.c5xx;
        self.resets += o.resets;
        self.hangs += o.hangs;
        self.empty += o.empty;
        self.malformed += o.malformed;
        self.truncated += o.truncated;
        self.abandoned += o.abandoned;
        for (code, n) in &o.grpc_status {
            *self.grpc_status.entry(code.clone()).or_insert(0) += n;
        }
    }

    /// Calls that left, whatever the way.
    pub fn departures(&self) -> u64 {
        self.completed.total()
            + self.resets
            + self.hangs
            + self.empty
            + self.malformed
            + self.truncated
            + self.abandoned
    }
}

/// Connections over one bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionBucket {
    /// Connections accepted.
    pub opened: u64,
    /// Connections closed.
    pub closed: u64,
    /// The most connections open at once.
    pub max_open: u64,
    /// Connections shed over the connection limit (answered 503, never served); absent in older recordings.
    #[serde(default)]
    pub shed: u64,
    /// Of the connections accepted, those that speak HTTP/2; absent in older recordings.
    #[serde(default)]
    pub http2_opened: u64,
}
