//! Reading one route's cells into its part of a [`Recording`]: the whole series, or only its buckets from a given
//! index on (what a reader that already holds the earlier ones asks for once a second), with the run-wide figures
//! (totals, maxima, entries) whole either way; the per-phase histograms come only with the whole series.
//!
//! The level in flight at a bucket's start and the run's totals are sums over every earlier bucket. So that a read
//! of the last few buckets does not walk the whole run again, each route keeps a [`Checkpoint`]: those sums up to a
//! bucket old enough that nothing lands in it any more. Not for recording (the guards do that).

use super::*;

/// How far behind the current bucket a checkpoint stays, in time: a call's arrival is recorded at the instant its
/// handler read, a little before the recorder sees it, so the newest buckets may still gain arrivals.
const SETTLED_AFTER: Duration = Duration::from_secs(1);

/// The sums over a route's buckets before `index`, every one of them settled.
#[derive(Default)]
pub(super) struct Checkpoint {
    index: usize,
    /// Calls in flight at the start of bucket `index`.
    level: u64,
    totals: RouteBucket,
    /// The integral of the level over buckets before `index`, ns.
    integral: f64,
}

impl RouteRecorder {
    /// The route's recording, its series (and its instances') from bucket `from` on; a route no call has reached
    /// has none.
    pub(super) fn snapshot(&self, now_ns: u64, current: usize, from: usize) -> RouteRecording {
        // A route no call has reached has no series: its zeros would cost routes x elapsed buckets to write, and
        // every reader takes a missing bucket as an empty one.
        if self.cells.used() == 0 {
            return RouteRecording::default();
        }
        let b = self.bucket_ns;
        let n = self.cells.used().max(current + 1).min(CHUNK * MAX_CHUNKS);
        let settled = SETTLED_AFTER.as_nanos().div_ceil(u128::from(b)) as usize;
        let keep_at = from.min(current.saturating_sub(settled));
        let mut checkpoint = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        // A read from before the checkpoint (the whole series) walks from the start and leaves it as it is.
        let start = if checkpoint.index <= from {
            checkpoint.index
        } else {
            0
        };
        let (mut level, mut totals, mut integral_total) = if start > 0 {
            (
                checkpoint.level,
                checkpoint.totals.clone(),
                checkpoint.integral,
            )
        } else {
            (0, RouteBucket::default(), 0.0)
        };
        let mut buckets = Vec::with_capacity(n.saturating_sub(from));
        for i in start..n {
            if i == keep_at && i > checkpoint.index {
                *checkpoint = Checkpoint {
                    index: i,
                    level,
                    totals: totals.clone(),
                    integral: integral_total,
                };
            }
            // The bucket that holds `now` has only run until now; later ones (there are none) would be empty.
            let length = if i == current {
                now_ns.saturating_sub(i as u64 * b).min(b)
            } else {
                b
            };
            let (out, integral) = self.read_cell(i, length, &mut level);
            integral_total += integral.max(0.0);
            totals.add(&out);
            if i >= from {
                buckets.push(out);
            }
        }
        drop(checkpoint);
        let run = (n as u64 - 1) * b + now_ns.saturating_sub((n as u64 - 1) * b).min(b);
        totals.in_flight_max = self.max_in_flight();
        totals.in_flight_mean = if run > 0 {
            integral_total / run as f64
        } else {
            0.0
        };
        // The histograms are the whole run's and grow with its phases: a read of the newest buckets leaves them
        // out (the end of a run reads them whole).
        let (latency, late) = match from {
            0 => self
                .histograms
                .lock()
                .map(|h| h.decoded())
                .unwrap_or_default(),
            _ => Default::default(),
        };
        RouteRecording {
            buckets,
            totals,
            max_in_flight: self.max_in_flight(),
            max_in_flight_lower_bound: None,
            in_flight: self.in_flight(),
            latency,
            late,
            matched: self.matched(),
            instances: self
                .instances
                .lock()
                .map(|i| i.clone())
                .unwrap_or_default()
                .iter()
                .map(|i| i.snapshot(now_ns, current, from))
                .collect(),
            redis: None,
        }
    }

    /// Bucket `i` as it stands, `length` ns of it run, given the level in flight at its start (moved on to the
    /// level at its end); and the integral of the level over it.
    fn read_cell(&self, i: usize, length: u64, level: &mut u64) -> (RouteBucket, f64) {
        let b = self.bucket_ns;
        let unrun = b - length;
        let mut out = RouteBucket::default();
        let integral;
        if let Some(c) = self.cells.peek(i) {
            let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
            out.arrivals = load(&c.arrivals);
            out.first_arrivals_us = c
                .first
                .iter()
                .take(out.arrivals.min(FIRST_ARRIVALS as u64) as usize)
                .map(|a| a.load(Ordering::Relaxed))
                .collect();
            out.first_held_us = c
                .held
                .iter()
                .take(out.first_arrivals_us.len())
                .map(|h| h.load(Ordering::Relaxed).checked_sub(1))
                .collect();
            let departures = load(&c.departures);
            out.completed = StatusClasses {
                c2xx: load(&c.class[0]),
                c3xx: load(&c.class[1]),
                c4xx: load(&c.class[2]),
                c5xx: load(&c.class[3]),
            };
            out.resets = load(&c.resets);
            out.hangs = load(&c.hangs);
            out.empty = load(&c.empty);
            out.malformed = load(&c.malformed);
            out.truncated = load(&c.truncated);
            out.abandoned = load(&c.abandoned);
            if let Some(g) = self.grpc.peek(i) {
                out.grpc_status = GrpcCode::all()
                    .filter_map(|code| {
                        let n = load(&g.0[code.number() as usize]);
                        (n > 0).then(|| (code.name().to_string(), n))
                    })
                    .collect();
            }
            out.in_flight_max = load(&c.in_flight_max).max(*level);
            integral = *level as f64 * length as f64
                + (load(&c.arrival_residual) as f64 - out.arrivals as f64 * unrun as f64)
                - (load(&c.departure_residual) as f64 - departures as f64 * unrun as f64);
            *level = (*level + out.arrivals).saturating_sub(departures);
        } else {
            out.in_flight_max = *level;
            integral = *level as f64 * length as f64;
        }
        out.in_flight_mean = if length > 0 {
            (integral / length as f64).max(0.0)
        } else {
            *level as f64
        };
        (out, integral)
    }
}
