//! The guards a connection and a call hold while they last: dropping one records its end (a call's outcome,
//! status, served latency and faultd's own lateness), so no path through the data plane can forget to.

use super::*;

/// Held by a connection from accept to close.
pub struct ConnectionGuard {
    pub(super) recorder: Arc<Recorder>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let r = &self.recorder;
        r.open_connections.fetch_sub(1, Ordering::Relaxed);
        let cell = r
            .connections
            .at((r.time_ns(Instant::now()) / r.bucket_ns()) as usize);
        cell.closed.fetch_add(1, Ordering::Relaxed);
    }
}

/// The bucket and slot that timed a call's arrival on one recorder, when it was among its bucket's first.
pub(super) type Timed = Option<(usize, usize)>;

/// Held by a call from arrival to departure; dropping it records the departure with the outcome set last.
pub struct CallGuard {
    pub(super) recorder: Arc<Recorder>,
    pub(super) route: Arc<RouteRecorder>,
    /// The instance of the route the call reached, with its own timed slot, when it came to an instance.
    pub(super) instance: Option<(Arc<RouteRecorder>, Timed)>,
    pub(super) phase: Arc<str>,
    pub(super) arrival: Instant,
    /// The bucket and slot that timed the call's arrival, when it was among its bucket's first.
    pub(super) timed: Timed,
    pub(super) outcome: Outcome,
    pub(super) grpc_status: Option<GrpcCode>,
    pub(super) due: Option<Instant>,
    /// What the call carried of its request, when the configuration correlates: it is then recorded one by one.
    pub(super) key: Option<CallKey>,
}

impl CallGuard {
    /// Sets when the call's whole answer was due (its arrival plus its delay): the call's departure past it is
    /// recorded as faultd's own lateness ([`RouteRecording::late`]). Not set for an answer that takes time of its
    /// own (a trickled body, a paced stream, a proxied call).
    pub fn set_due(&mut self, due: Instant) {
        self.due = Some(due);
    }

    /// Records this call one by one, with what it carried of the request that caused it.
    pub fn set_key(&mut self, key: CallKey) {
        self.key = Some(key);
    }

    /// Sets the gRPC status the call's answer carries, counted when the answer is complete.
    pub fn set_grpc_status(&mut self, code: GrpcCode) {
        self.grpc_status = Some(code);
    }

    /// Sets how the call ends if nothing changes it again (the default is `Abandoned`).
    pub fn set_outcome(&mut self, outcome: Outcome) {
        self.outcome = outcome;
    }

    /// The outcome recorded if the call left now.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// When the call arrived.
    pub fn arrival(&self) -> Instant {
        self.arrival
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let now = Instant::now();
        let t = self.recorder.time_ns(now);
        self.depart(&self.route, self.timed, now, t);
        if let Some((instance, timed)) = &self.instance {
            self.depart(instance, *timed, now, t);
        }
    }
}

impl CallGuard {
    /// Records the call's departure from `route`, `t` ns after the origin.
    fn depart(&self, route: &RouteRecorder, timed: Timed, now: Instant, t: u64) {
        let b = route.bucket_ns;
        let index = (t / b) as usize;
        let cell = route.cells.at(index);
        if let Some((bucket, nth)) = timed {
            let held = now.saturating_duration_since(self.arrival).as_micros();
            if let Some(slot) = route.cells.at(bucket).held.get(nth) {
                slot.store(
                    (held.min(u128::from(u32::MAX - 1)) as u32) + 1,
                    Ordering::Relaxed,
                );
            }
        }
        match self.outcome {
            Outcome::Completed(status) => {
                let class = match status {
                    300..=399 => 1,
                    400..=499 => 2,
                    500..=599 => 3,
                    _ => 0,
                };
                cell.class[class].fetch_add(1, Ordering::Relaxed);
                if let Some(code) = self.grpc_status {
                    route.grpc.at(index).0[code.number() as usize].fetch_add(1, Ordering::Relaxed);
                }
                record_completed(route, &self.phase, self.arrival, self.due, now);
            }
            Outcome::Reset => {
                cell.resets.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Hang => {
                cell.hangs.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Empty => {
                cell.empty.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Malformed => {
                cell.malformed.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Truncated => {
                cell.truncated.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Abandoned => {
                cell.abandoned.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(key) = self.key {
            let (end, status) = super::traced::end_of(self.outcome);
            self.recorder.traced.push(TracedCall {
                route: route.name.to_string(),
                trace: key.trace,
                parent: key.parent,
                arrival: Dur(Duration::from_nanos(self.recorder.time_ns(self.arrival))),
                ended: Dur(Duration::from_nanos(t)),
                end,
                status,
                grpc_status: self.grpc_status.map(|c| c.number()),
                deadline: key.deadline.map(Dur),
            });
        }
        cell.departures.fetch_add(1, Ordering::Relaxed);
        cell.departure_residual
            .fetch_add(b - t % b, Ordering::Relaxed);
        route.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Records a completed call's latency (from `arrival` to `now`) and, when it had a due instant, its lateness
/// (from `due` to `now`) in `phase`'s histograms, each at least 1 ns.
pub(super) fn record_completed(
    route: &RouteRecorder,
    phase: &Arc<str>,
    arrival: Instant,
    due: Option<Instant>,
    now: Instant,
) {
    let since = |from: Instant| {
        now.saturating_duration_since(from)
            .as_nanos()
            .clamp(1, u128::from(u64::MAX)) as u64
    };
    // `record` grows a histogram; it can only fail past u64 range, where saturating is right.
    let record = |h: &mut Histogram<u64>, ns: u64| {
        if h.record(ns).is_err() {
            h.saturating_record(ns);
        }
    };
    if let Ok(mut h) = route.histograms.lock() {
        let histograms = h.get_mut(phase);
        record(&mut histograms.latency, since(arrival));
        if let Some(due) = due {
            record(
                histograms.late.get_or_insert_with(new_histogram),
                since(due),
            );
        }
    }
}
