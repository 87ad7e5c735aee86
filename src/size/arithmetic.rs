//! The seeds' arithmetic with the user's numbers in it: the timeout (about 3x the healthy p99, seed 000 and seed
//! 004), the calls in flight by Little's law (rate x latency) against the pool, the failure-rate threshold against
//! the calls each instance sees per window (seed 000's volume floor), the open window against the fallback
//! (requests failed fast per trip, probe waves per minute), and the half-open rule. Every figure is kept with where
//! it came from, so that the text can give its reason.
//!
//! Not for reading the numbers (`evidence`) nor for saying them (`text`).

use faultline_units::Dur;
use serde::Serialize;

use super::evidence::Evidence;
use super::{opening, Fallback, Given, SizeError};

/// The share of healthy calls a timeout may cut off before the sizing says it is too tight.
pub const TOLERABLE_CUT: f64 = 0.01;

/// The smallest pool the sizing recommends.
pub const MIN_POOL: u32 = 10;

/// The smallest of 1, 1.5, 2, 2.5, 3, 4, 5, 6 and 8 times a power of ten that is at least `x` (seconds): 180 ms
/// gives 200 ms, 240 ms gives 250 ms (the seed's "roughly 3x").
pub fn nice_up(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return x.max(0.0);
    }
    let mut power = 10f64.powf(x.log10().floor());
    loop {
        for m in [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0] {
            let v = m * power;
            if v >= x * (1.0 - 1e-9) {
                // Whole microseconds: no float noise in a duration written out.
                return (v * 1e6).round() / 1e6;
            }
        }
        power *= 10.0;
    }
}

/// Where a number came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// The command line.
    Given,
    /// The record.
    Record,
}

/// A number and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    pub value: f64,
    pub from: Origin,
}

/// The numbers the sizing used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Numbers {
    /// Where the record's numbers come from, when one was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
    /// The dependency read from the record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dependency: Option<String>,
    /// The healthy p99, seconds.
    pub p99_s: Option<Figure>,
    /// Calls per second over all instances.
    pub rate_per_s: Option<Figure>,
    pub instances: u32,
    /// Calls per second each instance makes.
    pub rate_per_instance: Option<f64>,
    /// The pool per instance, when given.
    pub pool: Option<u32>,
    /// The degraded latency, seconds.
    pub degraded_s: Option<Figure>,
}

/// The timeout and what it costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeout {
    pub seconds: f64,
    /// 3x the healthy p99, before rounding up.
    pub three_p99_s: f64,
    /// Healthy calls of the record over the timeout (fractional: the bin that holds it counts in part).
    pub cut_calls: Option<f64>,
    /// Healthy calls in the record.
    pub healthy_calls: Option<u64>,
    /// The share of healthy calls it cuts off: from the record, or at most 1% from a p99 alone.
    pub cut_share: Option<f64>,
}

/// Calls in flight per instance (Little's law) against the pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InFlight {
    /// Healthy: the rate times the mean latency (the record's), or at most the rate times the p99.
    pub healthy: Option<f64>,
    /// Whether `healthy` is a bound from the p99 (no distribution to take the mean of).
    pub healthy_is_bound: bool,
    /// Degraded, without a timeout: the rate times the degraded latency.
    pub without_timeout: Option<f64>,
    /// How long after the degradation begins the pool is full without a timeout, seconds.
    pub pool_full_after_s: Option<f64>,
    /// Degraded, with the timeout: the rate times the shorter of the timeout and the degraded latency.
    pub with_timeout: Option<f64>,
    /// The pool used: the given one or the recommended one.
    pub pool: u32,
    /// Whether the pool was given (else recommended: half again the calls the timeout lets through).
    pub pool_given: bool,
}

/// The failure-rate threshold against the calls per window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Breaker {
    pub failure_rate: f64,
    pub window_s: f64,
    pub min_calls: u32,
    /// Calls one instance sees in a window.
    pub calls_per_window: Option<f64>,
    /// Whether the window ever holds the floor.
    pub floor_met: Option<bool>,
    /// How long a window must be to hold the floor at this rate, seconds.
    pub window_needed_s: Option<f64>,
    /// When every call fails: the timeout plus the failure rate's share of the window, seconds.
    pub opens_after_s: Option<f64>,
    /// On the recorded degradation, bucket by bucket, seconds after it began (`None`: it never opens there).
    pub opens_on_record_s: Option<f64>,
    /// Whether the record was played (so that `opens_on_record_s` of `None` means "never").
    pub played_record: bool,
}

/// The open window against the fallback.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenWindow {
    pub seconds: f64,
    pub open_for_given: bool,
    pub fallback: Fallback,
    /// Requests failed fast per trip over all instances (rate x open window).
    pub failed_fast_per_trip: Option<f64>,
    /// Probe waves per minute from one instance.
    pub probe_waves_per_minute: f64,
}

/// Half-open: how many probes, and what closes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HalfOpen {
    pub probes: u32,
    pub close_after: u32,
    /// Probes per minute reaching the dependency from all instances while it stays sick.
    pub probes_per_minute: f64,
}

/// Everything `faultline size` says, as figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sizing {
    pub numbers: Numbers,
    pub timeout: Option<Timeout>,
    pub in_flight: Option<InFlight>,
    pub breaker: Breaker,
    pub open_window: OpenWindow,
    pub half_open: HalfOpen,
    /// What the user must look at, one sentence each (filled by [`super::sizing`]).
    pub warnings: Vec<String>,
}

impl Sizing {
    /// Sizes from the given numbers, each missing one read from `evidence` when there is one; the warnings are
    /// left to [`super::sizing`], which says them.
    pub fn compute(given: &Given, evidence: Option<&Evidence>) -> Result<Sizing, SizeError> {
        let pick = |g: Option<f64>, r: Option<f64>| match (g, r) {
            (Some(v), _) => Some(Figure {
                value: v,
                from: Origin::Given,
            }),
            (None, Some(v)) => Some(Figure {
                value: v,
                from: Origin::Record,
            }),
            _ => None,
        };
        let p99 = pick(
            given.p99.map(Dur::as_secs_f64),
            evidence.and_then(Evidence::p99),
        );
        let rate = pick(given.rate, evidence.and_then(Evidence::rate));
        let degraded = pick(
            given.degraded.map(Dur::as_secs_f64),
            evidence.and_then(Evidence::degraded_latency),
        );
        if p99.is_none() && rate.is_none() {
            return Err(SizeError::Numbers(
                "nothing to size from: give a record (a run's folder, or files with --format) or numbers \
                 (--p99, --rate)"
                    .into(),
            ));
        }
        if given.instances == 0 {
            return Err(SizeError::Numbers("--instances must be at least 1".into()));
        }
        let zero = |what: &str| Err(SizeError::Numbers(format!("{what} must be above 0")));
        if p99.is_some_and(|p| p.value <= 0.0) {
            return zero("the healthy p99 (--p99)");
        }
        if rate.is_some_and(|r| r.value <= 0.0) {
            return zero("the rate (--rate)");
        }
        if given.window.get().is_zero() {
            return zero("--window");
        }
        if given.failure_rate.fraction() <= 0.0 {
            return zero("--failure-rate");
        }
        if given.open_for.is_some_and(|o| o.get().is_zero()) {
            return zero("--open-for");
        }
        let n = f64::from(given.instances);
        let per_instance = rate.map(|r| r.value / n);
        let numbers = Numbers {
            record: evidence.map(|e| e.source.clone()),
            dependency: evidence.map(|e| e.dependency.clone()),
            p99_s: p99,
            rate_per_s: rate,
            instances: given.instances,
            rate_per_instance: per_instance,
            pool: given.pool,
            degraded_s: degraded,
        };
        let timeout = p99.map(|p| timeout(p.value, evidence, given.p99.is_some()));
        let t = timeout.as_ref().map(|t| t.seconds);
        let in_flight = per_instance.map(|l| in_flight(l, p99, t, degraded, given, evidence));
        let breaker = breaker(given, per_instance, t, evidence);
        let open_for = given.open_for.map_or(
            if given.fallback.serves() { 30.0 } else { 5.0 },
            Dur::as_secs_f64,
        );
        let open_window = OpenWindow {
            seconds: open_for,
            open_for_given: given.open_for.is_some(),
            fallback: given.fallback,
            failed_fast_per_trip: rate.map(|r| r.value * open_for),
            probe_waves_per_minute: 60.0 / open_for.max(1e-3),
        };
        let half_open = HalfOpen {
            probes: given.half_open_calls,
            close_after: given.close_after,
            probes_per_minute: n * f64::from(given.half_open_calls) * 60.0 / open_for.max(1e-3),
        };
        Ok(Sizing {
            numbers,
            timeout,
            in_flight,
            breaker,
            open_window,
            half_open,
            warnings: Vec::new(),
        })
    }
}

/// 3x the p99, rounded up; what it cuts off the record's healthy calls when they were read from it.
fn timeout(p99: f64, evidence: Option<&Evidence>, p99_given: bool) -> Timeout {
    let seconds = nice_up(3.0 * p99);
    // The cut is measured on the record's distribution, unless the p99 given overrides the record's.
    let measured = evidence.filter(|_| !p99_given).map(|e| {
        let calls = e.healthy_latency.count();
        let cut = e.healthy_latency.count_above(seconds);
        (cut, calls)
    });
    Timeout {
        seconds,
        three_p99_s: 3.0 * p99,
        cut_calls: measured.map(|m| m.0),
        healthy_calls: measured.map(|m| m.1),
        cut_share: match measured {
            Some((cut, calls)) if calls > 0 => Some(cut / calls as f64),
            Some(_) => None,
            None => Some(TOLERABLE_CUT),
        },
    }
}

/// Little's law per instance: healthy, degraded without the timeout, degraded with it.
fn in_flight(
    rate: f64,
    p99: Option<Figure>,
    timeout: Option<f64>,
    degraded: Option<Figure>,
    given: &Given,
    evidence: Option<&Evidence>,
) -> InFlight {
    let mean = evidence
        .filter(|_| given.p99.is_none())
        .and_then(|e| e.healthy_latency.mean());
    let healthy = mean.or(p99.map(|p| p.value)).map(|l| rate * l);
    let without_timeout = degraded.map(|d| rate * d.value);
    let with_timeout = timeout.map(|t| rate * degraded.map_or(t, |d| d.value.min(t)));
    let pool = given.pool.unwrap_or_else(|| {
        let need = with_timeout.or(healthy).unwrap_or(1.0);
        (nice_up(1.5 * need).ceil() as u32).max(MIN_POOL)
    });
    let pool_full_after_s = without_timeout
        .filter(|w| *w > f64::from(pool))
        .map(|_| f64::from(pool) / rate);
    InFlight {
        healthy,
        healthy_is_bound: mean.is_none(),
        without_timeout,
        pool_full_after_s,
        with_timeout,
        pool,
        pool_given: given.pool.is_some(),
    }
}

/// The threshold against the calls each instance sees per window, and when it opens.
fn breaker(
    given: &Given,
    rate: Option<f64>,
    timeout: Option<f64>,
    evidence: Option<&Evidence>,
) -> Breaker {
    let f = given.failure_rate.fraction();
    let w = given.window.as_secs_f64();
    let calls = rate.map(|r| r * w);
    let floor_met = calls.map(|c| c >= f64::from(given.min_calls));
    let opens_after_s = match (floor_met, timeout) {
        (Some(true), Some(t)) => Some(t + f * w),
        _ => None,
    };
    let played = evidence.filter(|e| e.degraded().is_some());
    let opens_on_record_s = match (played, timeout, rate) {
        (Some(e), Some(t), Some(r)) => opening::opens_after(
            e,
            &opening::Rule {
                timeout_s: t,
                rate_per_s: r,
                failure_rate: f,
                window_s: w,
                min_calls: given.min_calls,
            },
        ),
        _ => None,
    };
    Breaker {
        failure_rate: f,
        window_s: w,
        min_calls: given.min_calls,
        calls_per_window: calls,
        floor_met,
        window_needed_s: rate
            .filter(|r| *r > 0.0)
            .map(|r| f64::from(given.min_calls) / r),
        opens_after_s,
        opens_on_record_s,
        played_record: played.is_some() && timeout.is_some() && rate.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_up_rounds_three_p99_as_the_seeds_do() {
        assert_eq!(nice_up(0.18), 0.2);
        assert_eq!(nice_up(0.24), 0.25);
        assert_eq!(nice_up(0.2), 0.2);
        assert_eq!(nice_up(3.6), 4.0);
        assert_eq!(nice_up(0.0009), 0.001);
        assert_eq!(nice_up(9.0), 10.0);
        assert_eq!(nice_up(0.0), 0.0);
    }
}
