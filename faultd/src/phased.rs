//! A value over the run's phases: what it is before the first phase, what each phase makes of it, and how far a
//! phase's ramp has moved it from the previous phase's value.
//!
//! For: the one way every wire follows the schedule. An HTTP route's behaviour, the TLS handshake faults and a
//! TCP route's toxics are each a `Phased` of their own compiled value, built from the same phases (their start
//! and ramp), so a phase switches and ramps them alike. Not for: what a value means or how two values blend
//! (each wire blends its own: a behaviour's delay, a toxic's latency), nor the run's clock (`crate::schedule`);
//! nothing here reads the time, so every switch and ramp is tested as a pure function of `t`.

use std::time::Duration;

/// The phase label of calls before the first phase begins (and of every call when there are no phases).
pub const BEFORE_FIRST_PHASE: &str = "before-start";

/// A phase as each wire's schedule follows it: its name, its start from the origin and its ramp.
pub type PhaseTimes<'a> = (&'a str, Duration, Option<Duration>);

/// Where the schedule is at some instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Position {
    /// The phase in force, `None` before the first one.
    pub phase: Option<usize>,
    /// How far that phase's ramp has gone (1.0 once it is complete, or without a ramp).
    pub weight: f64,
}

/// A value before the first phase (`base`, also what a reset to healthy returns to) and after each phase.
#[derive(Debug, Clone)]
pub struct Phased<T> {
    base: T,
    phases: Vec<Step<T>>,
}

#[derive(Debug, Clone)]
struct Step<T> {
    at: Duration,
    ramp: Option<Duration>,
    /// The value once the phase (and its ramp) is complete.
    value: T,
    /// Whether the phase set the value: only then does its ramp move it from the previous phase's.
    set: bool,
}

/// The value at a position: `to`, reached from `from` by `weight` while a ramp runs.
#[derive(Debug)]
pub struct Blend<'a, T> {
    /// The previous phase's value during a ramp of a phase that set this one.
    pub from: Option<&'a T>,
    /// The value in force.
    pub to: &'a T,
    /// How far the ramp has gone (1.0 without one).
    pub weight: f64,
}

impl<T: Clone> Phased<T> {
    /// A value with no phases yet.
    pub fn new(base: T) -> Phased<T> {
        Phased {
            base,
            phases: Vec::new(),
        }
    }

    /// Adds the next phase, starting `at` from the origin with an optional `ramp`; `set` is the value it gives,
    /// `None` when it leaves the value as the previous phase had it. Phases come in time order.
    pub fn push(&mut self, at: Duration, ramp: Option<Duration>, set: Option<T>) {
        let is_set = set.is_some();
        let value = set.unwrap_or_else(|| self.last().clone());
        self.phases.push(Step {
            at,
            ramp,
            value,
            set: is_set,
        });
    }
}

impl<T> Phased<T> {
    /// The value before the first phase.
    pub fn base(&self) -> &T {
        &self.base
    }

    /// The value after the last phase.
    fn last(&self) -> &T {
        self.phases.last().map_or(&self.base, |p| &p.value)
    }

    /// Where the schedule is `t` after the origin.
    pub fn position(&self, t: Duration) -> Position {
        let Some(i) = self.phases.iter().rposition(|p| p.at <= t) else {
            return Position {
                phase: None,
                weight: 1.0,
            };
        };
        let p = &self.phases[i];
        let weight = match p.ramp {
            Some(ramp) if t < p.at + ramp => (t - p.at).as_secs_f64() / ramp.as_secs_f64(),
            _ => 1.0,
        };
        Position {
            phase: Some(i),
            weight,
        }
    }

    /// The value at `position`; `None` (reset to healthy) and before the first phase give the base.
    pub fn at(&self, position: Option<Position>) -> Blend<'_, T> {
        let Some(Position {
            phase: Some(i),
            weight,
        }) = position
        else {
            return Blend {
                from: None,
                to: &self.base,
                weight: 1.0,
            };
        };
        let step = &self.phases[i];
        let from = (weight < 1.0 && step.set).then(|| {
            if i == 0 {
                &self.base
            } else {
                &self.phases[i - 1].value
            }
        });
        Blend {
            from,
            to: &step.value,
            weight,
        }
    }

    /// The value `t` after the origin.
    pub fn at_time(&self, t: Duration) -> Blend<'_, T> {
        self.at(Some(self.position(t)))
    }

    /// The next time after `t` at which the value may move: a phase's start, or the next `step` of a ramp.
    pub fn next_change(&self, t: Duration, step: Duration) -> Option<Duration> {
        for p in &self.phases {
            if p.at > t {
                return Some(p.at);
            }
            if let Some(ramp) = p.ramp {
                if t < p.at + ramp {
                    return Some((t + step).min(p.at + ramp));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// base 0, a phase at 10 s setting 10, one at 20 s leaving it, one at 30 s ramping to 20 over 10 s.
    fn phased() -> Phased<u32> {
        let mut p = Phased::new(0);
        p.push(secs(10.0), None, Some(10));
        p.push(secs(20.0), Some(secs(5.0)), None);
        p.push(secs(30.0), Some(secs(10.0)), Some(20));
        p
    }

    #[test]
    fn a_phase_switches_the_value_at_its_exact_start() {
        let p = phased();
        assert_eq!(*p.at_time(secs(9.999)).to, 0);
        assert_eq!(*p.at_time(secs(10.0)).to, 10);
        assert_eq!(p.position(secs(5.0)).phase, None);
    }

    #[test]
    fn a_phase_that_sets_nothing_keeps_the_value_and_its_ramp_moves_nothing() {
        let p = phased();
        let at = p.at_time(secs(22.0));
        assert_eq!((*at.to, at.from.is_none()), (10, true));
    }

    #[test]
    fn a_ramp_blends_from_the_previous_phase_by_its_weight() {
        let p = phased();
        let at = p.at_time(secs(32.5));
        assert_eq!((at.from.copied(), *at.to, at.weight), (Some(10), 20, 0.25));
        let done = p.at_time(secs(40.0));
        assert_eq!((done.from, done.weight), (None, 1.0));
    }

    #[test]
    fn a_reset_to_healthy_gives_the_base() {
        assert_eq!(*phased().at(None).to, 0);
    }

    #[test]
    fn changes_come_at_phase_starts_and_every_step_of_a_ramp() {
        let p = phased();
        let step = Duration::from_millis(100);
        let n = |t: f64| p.next_change(secs(t), step).map(|d| d.as_secs_f64());
        assert_eq!(n(0.0), Some(10.0));
        assert_eq!(n(30.0), Some(30.1));
        assert_eq!(n(39.95), Some(40.0));
        assert_eq!(n(40.0), None);
    }
}
