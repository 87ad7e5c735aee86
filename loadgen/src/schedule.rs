//! The timetable of intended send times: a pure function of the rate spec, the arrival kind and the seed.
//!
//! Intended times come from an absolute timetable, never from completions or from when the previous request went
//! out, so a slow service cannot slow the load and no drift builds up. The i-th arrival is where the expected
//! number of arrivals Λ(t) = ∫R reaches i (uniform), or reaches the i-th point of a unit-rate Poisson process
//! (Poisson: the standard time change of a Poisson process, so steps and ramps work the same for both).
//!
//! Not for waiting or sending: this module never touches a clock. The dispatcher asks it for the next time.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp1};

use crate::spec::{Arrivals, RateSpec};

/// A stretch of time over which the rate changes linearly (constant when `r0 == r1`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Piece {
    /// Start, in seconds from the origin.
    start: f64,
    /// End, in seconds (`f64::INFINITY` for the last piece).
    end: f64,
    /// Rate at `start` and at `end`, per second.
    r0: f64,
    r1: f64,
    /// Expected arrivals before `start`: Λ(start).
    mass_before: f64,
}

impl Piece {
    fn mass(&self) -> f64 {
        if self.end.is_infinite() {
            return if self.r0 > 0.0 { f64::INFINITY } else { 0.0 };
        }
        (self.r0 + self.r1) / 2.0 * (self.end - self.start)
    }

    /// The time within this piece where `y` expected arrivals (counted from its start) have accumulated.
    fn time_of(&self, y: f64) -> f64 {
        if y <= 0.0 {
            // Also keeps a ramp up from zero from computing 0/0 for its first arrival.
            return self.start;
        }
        if self.r0 == self.r1 {
            return self.start + y / self.r0;
        }
        // Λ(s) = r0 s + a s²/2 solved for s in the form that does not cancel when r0 is large or a < 0.
        let a = (self.r1 - self.r0) / (self.end - self.start);
        let root = (self.r0 * self.r0 + 2.0 * a * y).max(0.0).sqrt();
        self.start + 2.0 * y / (self.r0 + root)
    }
}

/// The arrival rate as a function of time, built from a [`RateSpec`].
#[derive(Debug, Clone, PartialEq)]
pub struct RateProfile {
    pieces: Vec<Piece>,
}

impl RateProfile {
    /// The profile of a validated rate spec. The rate before the first segment is zero; a ramp starts from the
    /// rate in effect where it begins and holds its target until the next segment.
    pub fn new(spec: &RateSpec) -> Self {
        let mut pieces: Vec<Piece> = Vec::new();
        let mut push = |start: f64, end: f64, r0: f64, r1: f64| {
            if end <= start {
                return;
            }
            let mass_before = pieces
                .last()
                .map(|p| p.mass_before + p.mass())
                .unwrap_or(0.0);
            pieces.push(Piece {
                start,
                end,
                r0,
                r1,
                mass_before,
            });
        };
        match spec {
            RateSpec::Constant(rate) => push(0.0, f64::INFINITY, rate.per_sec(), rate.per_sec()),
            RateSpec::Segments(segments) => {
                let first = segments.first().map(|s| s.at.as_secs_f64()).unwrap_or(0.0);
                push(0.0, first, 0.0, 0.0);
                let mut current = 0.0;
                for (i, s) in segments.iter().enumerate() {
                    let start = s.at.as_secs_f64();
                    let end = segments
                        .get(i + 1)
                        .map(|n| n.at.as_secs_f64())
                        .unwrap_or(f64::INFINITY);
                    match (s.rate, s.ramp_to, s.over) {
                        (Some(rate), _, _) => {
                            current = rate.per_sec();
                            push(start, end, current, current);
                        }
                        (None, Some(to), Some(over)) => {
                            let ramp_end = (start + over.as_secs_f64()).min(end);
                            push(start, ramp_end, current, to.per_sec());
                            current = to.per_sec();
                            push(ramp_end, end, current, current);
                        }
                        _ => push(start, end, current, current),
                    }
                }
            }
        }
        RateProfile { pieces }
    }

    /// The rate at `t` seconds from the origin, per second.
    pub fn rate_at(&self, t: f64) -> f64 {
        self.pieces
            .iter()
            .find(|p| t >= p.start && t < p.end)
            .map(|p| {
                if p.r0 == p.r1 {
                    p.r0
                } else {
                    p.r0 + (p.r1 - p.r0) * (t - p.start) / (p.end - p.start)
                }
            })
            .unwrap_or(0.0)
    }

    /// The expected number of arrivals in `[0, t)`: Λ(t).
    pub fn expected_count(&self, t: f64) -> f64 {
        let Some(p) = self.pieces.iter().rev().find(|p| t >= p.start) else {
            return 0.0;
        };
        let s = t.min(p.end) - p.start;
        p.mass_before
            + p.r0 * s
            + (p.r1 - p.r0) / (p.end - p.start) * s * s / 2.0 * f64::from(p.r0 != p.r1)
    }

    /// The time where Λ reaches `mass`, searching from piece `from` on (the caller's cursor, since
    /// masses only grow); `None` once the rate stays zero for ever.
    fn time_of(&self, mass: f64, from: &mut usize) -> Option<f64> {
        while let Some(p) = self.pieces.get(*from) {
            let m = p.mass();
            // Strictly below the piece's end: an arrival exactly on a boundary belongs to the next piece with a
            // positive rate, so a step down to zero does not leave one stray arrival at its start.
            if m > 0.0 && mass < p.mass_before + m {
                return Some(p.time_of((mass - p.mass_before).max(0.0)));
            }
            *from += 1;
        }
        None
    }
}

/// The sequence of intended send times, as offsets from the run's origin, in order, up to `end`.
#[derive(Debug, Clone)]
pub struct Schedule {
    profile: RateProfile,
    poisson: Option<StdRng>,
    /// The mass (expected count) of the next arrival.
    next_mass: f64,
    /// The piece the next arrival falls in or after.
    cursor: usize,
    index: u64,
    end: Duration,
}

impl Schedule {
    /// The timetable for `rate` with `arrivals` over `[0, end)`. `seed` only matters for Poisson arrivals.
    pub fn new(rate: &RateSpec, arrivals: Arrivals, seed: u64, end: Duration) -> Self {
        let mut poisson = match arrivals {
            Arrivals::Uniform => None,
            Arrivals::Poisson => Some(StdRng::seed_from_u64(seed)),
        };
        // A uniform timetable starts at t0 (mass 0); a Poisson process's first arrival is one gap after t0.
        let next_mass = poisson.as_mut().map(|rng| Exp1.sample(rng)).unwrap_or(0.0);
        Schedule {
            profile: RateProfile::new(rate),
            poisson,
            next_mass,
            cursor: 0,
            index: 0,
            end,
        }
    }

    /// The rate curve this timetable follows.
    pub fn profile(&self) -> &RateProfile {
        &self.profile
    }
}

impl Iterator for Schedule {
    /// The intended send time of the next arrival, from the origin, rounded to the nanosecond.
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let t = self.profile.time_of(self.next_mass, &mut self.cursor)?;
        let at = Duration::from_nanos((t * 1e9).round() as u64);
        if at >= self.end {
            return None;
        }
        self.index += 1;
        self.next_mass = match &mut self.poisson {
            None => self.index as f64,
            Some(rng) => self.next_mass + <Exp1 as Distribution<f64>>::sample(&Exp1, rng),
        };
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_nanos((s * 1e9).round() as u64)
    }

    fn rate(yaml: &str) -> RateSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn constant_rate_sends_at_t0_plus_i_over_r() {
        let times: Vec<Duration> =
            Schedule::new(&rate("500/s"), Arrivals::Uniform, 0, secs(10.0)).collect();
        assert_eq!(times.len(), 5000);
        for (i, t) in times.iter().enumerate() {
            assert_eq!(*t, Duration::from_micros(2000 * i as u64), "arrival {i}");
        }
        let slow: Vec<Duration> =
            Schedule::new(&rate("0.1/s"), Arrivals::Uniform, 0, secs(35.0)).collect();
        assert_eq!(slow, vec![secs(0.0), secs(10.0), secs(20.0), secs(30.0)]);
        let third: Vec<Duration> =
            Schedule::new(&rate("3/s"), Arrivals::Uniform, 0, secs(1.0)).collect();
        assert_eq!(
            third,
            vec![
                Duration::ZERO,
                Duration::from_nanos(333_333_333),
                Duration::from_nanos(666_666_667)
            ]
        );
    }

    #[test]
    fn steps_switch_rate_exactly_at_the_segment_start() {
        let spec = rate("[{at: 1s, rate: 10/s}, {at: 2s, rate: 20/s}, {at: 3s, rate: 0/s}, {at: 4s, rate: 4/s}]");
        let times: Vec<Duration> = Schedule::new(&spec, Arrivals::Uniform, 0, secs(5.0)).collect();
        let mut expected: Vec<Duration> = (0..10).map(|i| secs(1.0 + i as f64 * 0.1)).collect();
        expected.extend((0..20).map(|i| secs(2.0 + i as f64 * 0.05)));
        expected.extend((0..4).map(|i| secs(4.0 + i as f64 * 0.25)));
        assert_eq!(times, expected);
    }

    #[test]
    fn a_ramp_places_arrivals_where_the_integral_of_the_rate_reaches_each_count() {
        // From 0 to 100/s over 2 s: Λ(t) = 25 t², so arrival i is at sqrt(i / 25) = sqrt(i) / 5; then 100/s.
        let spec = rate("[{at: 0s, rate: 0/s}, {at: 1s, ramp_to: 100/s, over: 2s}]");
        let times: Vec<Duration> = Schedule::new(&spec, Arrivals::Uniform, 0, secs(3.5)).collect();
        let mut expected: Vec<Duration> = (0..100)
            .map(|i| secs(1.0 + (i as f64).sqrt() / 5.0))
            .collect();
        expected.extend((0..50).map(|i| secs(3.0 + i as f64 * 0.01)));
        assert_eq!(times.len(), expected.len());
        for (got, want) in times.iter().zip(&expected) {
            assert!(
                got.abs_diff(*want) <= Duration::from_nanos(1),
                "{got:?} vs {want:?}"
            );
        }
        // A ramp down from 100/s to 0 over 2 s mirrors it: Λ(t) = 100 t - 25 t² reaches i at 2 - sqrt(4 - i/25).
        let down = rate("[{at: 0s, rate: 100/s}, {at: 1s, ramp_to: 0/s, over: 2s}]");
        let times: Vec<Duration> = Schedule::new(&down, Arrivals::Uniform, 0, secs(10.0)).collect();
        assert_eq!(times.len(), 100 + 100);
        for (i, got) in times[100..].iter().enumerate() {
            let want = secs(1.0 + 2.0 - (4.0 - i as f64 / 25.0).sqrt());
            assert!(
                got.abs_diff(want) <= Duration::from_nanos(1),
                "{i}: {got:?} vs {want:?}"
            );
        }
    }

    #[test]
    fn seeded_poisson_arrivals_are_the_cumulated_exponential_draws_over_the_rate() {
        let spec = rate("200/s");
        let times: Vec<Duration> =
            Schedule::new(&spec, Arrivals::Poisson, 42, secs(50.0)).collect();
        let again: Vec<Duration> =
            Schedule::new(&spec, Arrivals::Poisson, 42, secs(50.0)).collect();
        assert_eq!(times, again, "the same seed gives the same timetable");
        let other: Vec<Duration> =
            Schedule::new(&spec, Arrivals::Poisson, 43, secs(50.0)).collect();
        assert_ne!(times, other);

        let mut rng = StdRng::seed_from_u64(42);
        let mut mass = 0.0;
        for (i, got) in times.iter().enumerate() {
            mass += <Exp1 as Distribution<f64>>::sample(&Exp1, &mut rng);
            assert_eq!(*got, secs(mass / 200.0), "arrival {i}");
        }
        // 10,000 expected with a standard deviation of 100: four sigmas is a deterministic, non-flaky bound
        // for this fixed seed and a sanity check of the process itself.
        assert!(
            (times.len() as f64 - 10_000.0).abs() < 400.0,
            "{}",
            times.len()
        );
    }

    #[test]
    fn the_profile_integrates_steps_and_ramps() {
        let p = RateProfile::new(&rate(
            "[{at: 0s, rate: 10/s}, {at: 2s, ramp_to: 30/s, over: 2s}]",
        ));
        assert_eq!(p.rate_at(1.0), 10.0);
        assert_eq!(p.rate_at(3.0), 20.0);
        assert_eq!(p.rate_at(9.0), 30.0);
        assert!((p.expected_count(2.0) - 20.0).abs() < 1e-9);
        assert!((p.expected_count(4.0) - 60.0).abs() < 1e-9);
        assert!((p.expected_count(5.0) - 90.0).abs() < 1e-9);
    }

    #[test]
    fn a_rate_that_falls_to_zero_ends_the_timetable() {
        let spec = rate("[{at: 0s, rate: 2/s}, {at: 1s, rate: 0/s}]");
        let times: Vec<Duration> =
            Schedule::new(&spec, Arrivals::Uniform, 0, secs(3600.0)).collect();
        assert_eq!(times, vec![secs(0.0), secs(0.5)]);
    }
}
