//! Merging the recordings of several faultd replicas that serve one dependency behind one address (a Kubernetes
//! Service, a load balancer), so that the rest of the harness reads them as the recording of one faultd.
//!
//! What adds up exactly: every count (arrivals, completions by status class, resets, hangs, empty, malformed,
//! abandoned, gRPC statuses, matched entries' calls, unmatched calls, connections opened, closed and shed, TLS handshakes), the served-latency
//! histograms (an HDR histogram of the union of the calls is the bin-by-bin sum of the replicas' histograms, with
//! the same settings), and the time-weighted mean in flight per bucket (the level at the dependency is the sum of
//! the replicas' levels at every instant, and the mean of a sum is the sum of the means).
//!
//! What does not: a maximum. The most calls the dependency held at once is the maximum over time of the sum of the
//! replicas' levels, and each replica only knows the maximum of its own; their peaks may fall at different
//! instants. The sum of the per-replica maxima is therefore an upper bound, and the largest single replica's
//! maximum a lower bound; the merged recording keeps both and says so
//! ([`Recording::in_flight_max_is_upper_bound`]). Not for: reading replicas over the network (the runner does).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use faultline_units::Dur;

use super::{ConnectionBucket, PhaseEntry, Recording, RouteBucket, RouteRecording, FIRST_ARRIVALS};
use crate::tls::TlsBucket;

/// Why the recordings of replicas cannot be merged into one.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// There was no recording at all.
    #[error("there is no recording to merge")]
    Empty,
    /// The replicas record on different bucket steps, so bucket i is not the same span on each.
    #[error("replica {replica} records in buckets of {other}, replica 0 in buckets of {first}: give every replica the same configuration")]
    Buckets {
        /// The index of the replica that differs from the first.
        replica: usize,
        /// The first replica's step.
        first: Dur,
        /// That replica's step.
        other: Dur,
    },
    /// The replicas entered different phases: they do not run one schedule.
    #[error("replica {replica} entered the phases {other:?}, replica 0 {first:?}: give every replica the same configuration")]
    Phases {
        /// The index of the replica that differs from the first.
        replica: usize,
        /// The phases the first replica entered, by name.
        first: Vec<String>,
        /// The phases that replica entered, by name.
        other: Vec<String>,
    },
    /// Two served-latency histograms could not be added (their settings differ).
    #[error("route {route}, phase {phase}: cannot add the served-latency histograms: {message}")]
    Histogram {
        /// The route.
        route: String,
        /// The phase.
        phase: String,
        /// hdrhistogram's reason.
        message: String,
    },
}

impl Recording {
    /// The recording of one dependency served by several faultd replicas, from each replica's own recording (all
    /// configured alike, their schedules started together).
    ///
    /// Per route and bucket, counts, served-latency histograms and the mean in flight add exactly. The maximum in
    /// flight (per bucket, per route over the run, and the connections open) becomes the sum of the replicas'
    /// maxima, an upper bound, with the largest single replica's maximum kept beside it as a lower bound
    /// (`in_flight_max_lower_bound`, `max_in_flight_lower_bound`); the result says so with
    /// `in_flight_max_is_upper_bound` and counts its `replicas`. Merging merged recordings again keeps both bounds
    /// valid. One recording comes back unchanged. Phases: the replicas must have entered the same phases, one list
    /// possibly further along than another (read a few milliseconds later); the longest is kept, and where the times
    /// of an entry differ (a reset to healthy), the earliest. The origin is the earliest replica's.
    pub fn merge_replicas(replicas: &[Recording]) -> Result<Recording, MergeError> {
        let (first, rest) = replicas.split_first().ok_or(MergeError::Empty)?;
        let mut merged = first.clone();
        for (i, other) in rest.iter().enumerate() {
            merged.add_replica(other, i + 1)?;
        }
        Ok(merged)
    }

    /// Adds one more replica's recording (`index` in the list, for errors) into this one.
    fn add_replica(&mut self, other: &Recording, index: usize) -> Result<(), MergeError> {
        if self.bucket != other.bucket {
            return Err(MergeError::Buckets {
                replica: index,
                first: self.bucket,
                other: other.bucket,
            });
        }
        self.phases_entered = merge_phases(&self.phases_entered, &other.phases_entered)
            .ok_or_else(|| MergeError::Phases {
                replica: index,
                first: names(&self.phases_entered),
                other: names(&other.phases_entered),
            })?;
        self.schedule_started_unix_ms = match (
            self.schedule_started_unix_ms,
            other.schedule_started_unix_ms,
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // A route no call reached on a replica: nothing in flight, nothing counted, no series.
        let empty = RouteRecording::default();
        for name in other.routes.keys() {
            self.routes.entry(name.clone()).or_default();
        }
        for (name, route) in self.routes.iter_mut() {
            add_route(route, other.routes.get(name).unwrap_or(&empty), name)?;
        }
        add_series(&mut self.connections, &other.connections, add_connections);
        self.unmatched += other.unmatched;
        self.loops_detected += other.loops_detected;
        self.unmatched_paths = super::unmatched::top(
            std::mem::take(&mut self.unmatched_paths)
                .into_iter()
                .chain(other.unmatched_paths.iter().cloned()),
        );
        self.tls = match (self.tls.take(), &other.tls) {
            (Some(mut a), Some(b)) => {
                add_series(&mut a.buckets, &b.buckets, add_handshakes);
                add_handshakes(&mut a.totals, &b.totals);
                Some(a)
            }
            (a, b) => a.or_else(|| b.clone()),
        };
        self.dns = match (self.dns.take(), &other.dns) {
            (Some(mut a), Some(b)) => {
                a.merge(b);
                Some(a)
            }
            (a, b) => a.or_else(|| b.clone()),
        };
        for (route, pg) in &other.postgres {
            self.postgres.entry(route.clone()).or_default().add(pg);
        }
        self.replicas += other.replicas;
        self.in_flight_max_is_upper_bound = true;
        Ok(())
    }
}

fn names(entries: &[PhaseEntry]) -> Vec<String> {
    entries.iter().map(|e| e.name.clone()).collect()
}

/// The phases of two replicas of one schedule: one list a prefix of the other by name, the longer kept, each entry
/// at the earlier of its two times. `None` when the names differ.
fn merge_phases(a: &[PhaseEntry], b: &[PhaseEntry]) -> Option<Vec<PhaseEntry>> {
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    let mut out = long.to_vec();
    for (entry, other) in out.iter_mut().zip(short) {
        if entry.name != other.name {
            return None;
        }
        entry.at = entry.at.min(other.at);
    }
    Some(out)
}

fn add_route(
    into: &mut RouteRecording,
    other: &RouteRecording,
    name: &str,
) -> Result<(), MergeError> {
    add_series(&mut into.buckets, &other.buckets, add_bucket);
    add_bucket(&mut into.totals, &other.totals);
    add_maxima(
        (&mut into.max_in_flight, &mut into.max_in_flight_lower_bound),
        (other.max_in_flight, other.max_in_flight_lower_bound),
    );
    into.in_flight += other.in_flight;
    for (entry, counts) in &other.matched {
        let mine = into.matched.entry(entry.clone()).or_default();
        mine.matched += counts.matched;
        mine.taken += counts.taken;
    }
    add_histograms(&mut into.latency, &other.latency, name)?;
    add_histograms(&mut into.late, &other.late, name)?;
    if let Some(theirs) = &other.redis {
        into.redis.get_or_insert_with(Default::default).add(theirs);
    }
    // Instance i of one replica and instance i of another are the dependency's instance i behind one address.
    if into.instances.len() < other.instances.len() {
        into.instances
            .resize_with(other.instances.len(), RouteRecording::default);
    }
    for (mine, theirs) in into.instances.iter_mut().zip(&other.instances) {
        add_route(mine, theirs, name)?;
    }
    Ok(())
}

/// Adds `other`'s histograms into `into`'s, phase by phase.
fn add_histograms(
    into: &mut BTreeMap<String, Histogram<u64>>,
    other: &BTreeMap<String, Histogram<u64>>,
    route: &str,
) -> Result<(), MergeError> {
    for (phase, h) in other {
        match into.get_mut(phase) {
            Some(mine) => mine.add(h).map_err(|e| MergeError::Histogram {
                route: route.to_string(),
                phase: phase.clone(),
                message: format!("{e:?}"),
            })?,
            None => {
                into.insert(phase.clone(), h.clone());
            }
        }
    }
    Ok(())
}

/// Two maxima in flight, each with its lower bound (`None`: the maximum is exact, its own lower bound): the sum of
/// the maxima is an upper bound of the maximum of the sum, and the larger lower bound a lower bound of it.
fn add_maxima(into: (&mut u64, &mut Option<u64>), other: (u64, Option<u64>)) {
    let (max, lower) = into;
    let least = lower.unwrap_or(*max).max(other.1.unwrap_or(other.0));
    *max += other.0;
    *lower = Some(least);
}

/// Adds `other`'s series bucket by bucket; a series that ends earlier (a replica read a moment sooner) counts as
/// empty buckets.
fn add_series<T: Default + Clone>(into: &mut Vec<T>, other: &[T], add: fn(&mut T, &T)) {
    if into.len() < other.len() {
        into.resize(other.len(), T::default());
    }
    for (a, b) in into.iter_mut().zip(other) {
        add(a, b);
    }
}

/// One bucket of one route, two replicas: counts and means add, maxima add into an upper bound beside the larger
/// lower bound, and the first arrivals of the union are the earliest of both lists.
fn add_bucket(into: &mut RouteBucket, other: &RouteBucket) {
    into.add(other);
    add_maxima(
        (&mut into.in_flight_max, &mut into.in_flight_max_lower_bound),
        (other.in_flight_max, other.in_flight_max_lower_bound),
    );
    into.in_flight_mean += other.in_flight_mean;
    // Each list holds its replica's earliest arrivals, so the earliest of the union are among them; and every
    // arrival left untimed came after the last one kept, as `first_arrivals_us` promises.
    let timed = |b: &RouteBucket| {
        let held = b
            .first_held_us
            .iter()
            .copied()
            .chain(std::iter::repeat(None));
        b.first_arrivals_us
            .iter()
            .copied()
            .zip(held)
            .collect::<Vec<_>>()
    };
    let mut calls = timed(into);
    calls.extend(timed(other));
    calls.sort_unstable();
    calls.truncate(FIRST_ARRIVALS);
    into.first_arrivals_us = calls.iter().map(|c| c.0).collect();
    into.first_held_us = if calls.iter().any(|c| c.1.is_some()) {
        calls.iter().map(|c| c.1).collect()
    } else {
        Vec::new()
    };
}

fn add_connections(into: &mut ConnectionBucket, other: &ConnectionBucket) {
    into.opened += other.opened;
    into.closed += other.closed;
    into.max_open += other.max_open;
    into.shed += other.shed;
    into.http2_opened += other.http2_opened;
}

fn add_handshakes(into: &mut TlsBucket, other: &TlsBucket) {
    for (outcome, n) in &other.handshakes {
        *into.handshakes.entry(outcome.clone()).or_insert(0) += n;
    }
    into.delayed += other.delayed;
}

#[cfg(test)]
mod tests;
