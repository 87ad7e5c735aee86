//! The circuit breaker's state machine: pure logic driven by an explicit `now`, with no I/O, no clock of its own
//! and no locking, so every transition is tested deterministically under paused tokio time.
//!
//! Not for calling anything, publishing metrics or sharing state between tasks: the breaker *layer*
//! (`layers::breaker`) owns a `Mutex<Breaker>`, asks it for a permit before each call, reports the outcome after,
//! and publishes the state changes this module returns.
//!
//! Semantics (Resilience4j's vocabulary):
//! - Closed: calls pass; their outcomes go into a time-based sliding window of `window`. Once the window holds at
//!   least `min_calls` calls, the breaker opens when failures / calls >= `failure_rate` or slow / calls >=
//!   `slow_call_rate`. Failures are 5xx, timeouts and transport errors; 4xx are successful calls (the dependency
//!   answered). A call is slow when it took longer than `slow_call_duration`, whatever its result.
//! - Open: every call is rejected without touching the network. After `open_for`, the next call moves the
//!   breaker to half-open (lazily, like Resilience4j without the automatic transition).
//! - Half-open: at most `half_open_calls` probes in flight at once; the rest are rejected. A failed or slow probe
//!   re-opens it for another `open_for`; `close_after` successful probes close it with an empty window. With
//!   `recovery_rate` (hysteresis), it instead waits for `close_after` probe outcomes and closes only if their
//!   failure rate is below `recovery_rate`, re-opening as soon as that can no longer happen.
//! - Every transition starts a new epoch; outcomes of calls admitted in an earlier epoch (a slow call that ends
//!   after the breaker opened, a probe that ends after it closed) are ignored, so the window of a state only holds
//!   calls admitted in it.

mod policy;
mod state;
mod window;

#[cfg(test)]
mod tests;

use tokio::time::Instant;

pub use policy::{Outcome, Policy, Verdict};
pub use state::{BreakerState, StateChange};
use window::Window;
pub use window::WindowCounts;

/// Permission to make one call; hand it back with [`Breaker::record`] or [`Breaker::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a permit must be recorded or released, or a half-open probe slot leaks"]
pub struct Permit {
    epoch: u64,
    probe: bool,
    /// The state the call was admitted in (closed or half-open).
    pub state: BreakerState,
}

/// A refusal: the breaker is open, or half-open with every probe slot taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    /// The breaker state this refers to.
    pub state: BreakerState,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Closed,
    Open {
        until: Instant,
    },
    HalfOpen {
        in_flight: u32,
        successes: u32,
        failures: u32,
        completed: u32,
    },
}

/// One circuit breaker: a state, a sliding window and a policy.
#[derive(Debug, Clone)]
pub struct Breaker {
    policy: Policy,
    phase: Phase,
    epoch: u64,
    window: Window,
}

impl Breaker {
    /// A closed breaker with an empty window.
    pub fn new(policy: Policy) -> Self {
        Breaker {
            policy,
            phase: Phase::Closed,
            epoch: 0,
            window: Window::default(),
        }
    }

    /// The policy this breaker follows.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The current state (an open breaker whose `open_for` has passed stays open until the next call asks).
    pub fn state(&self) -> BreakerState {
        match self.phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// The closed window's counts as of `now`.
    pub fn window_counts(&mut self, now: Instant) -> WindowCounts {
        self.window.prune(now, self.policy.window);
        self.window.counts()
    }

    /// Asks to make a call at `now`. May move an open breaker whose wait is over to half-open (returned as the
    /// state change, which happens before the admission decision).
    pub fn try_acquire(&mut self, now: Instant) -> (Result<Permit, Rejected>, Option<StateChange>) {
        let mut change = None;
        if let Phase::Open { until } = self.phase {
            if now < until {
                return (
                    Err(Rejected {
                        state: BreakerState::Open,
                    }),
                    None,
                );
            }
            change = Some(self.enter(
                Phase::HalfOpen {
                    in_flight: 0,
                    successes: 0,
                    failures: 0,
                    completed: 0,
                },
                now,
            ));
        }
        let admission = match &mut self.phase {
            Phase::Closed => Ok(Permit {
                epoch: self.epoch,
                probe: false,
                state: BreakerState::Closed,
            }),
            Phase::HalfOpen { in_flight, .. } => {
                if self.policy.unlimited_half_open || *in_flight < self.policy.half_open_calls {
                    *in_flight += 1;
                    Ok(Permit {
                        epoch: self.epoch,
                        probe: true,
                        state: BreakerState::HalfOpen,
                    })
                } else {
                    Err(Rejected {
                        state: BreakerState::HalfOpen,
                    })
                }
            }
            Phase::Open { .. } => Err(Rejected {
                state: BreakerState::Open,
            }),
        };
        (admission, change)
    }

    /// Reports the outcome of a call admitted with `permit`, at `now` (when it ended).
    pub fn record(
        &mut self,
        now: Instant,
        permit: Permit,
        outcome: Outcome,
    ) -> Option<StateChange> {
        if permit.epoch != self.epoch {
            return None;
        }
        let (failed, slow) = self.policy.classify(outcome);
        match self.phase {
            Phase::Closed => {
                self.window.push(now, failed, slow);
                self.window.prune(now, self.policy.window);
                self.should_trip().then(|| {
                    self.enter(
                        Phase::Open {
                            until: now + self.policy.open_for,
                        },
                        now,
                    )
                })
            }
            Phase::HalfOpen {
                in_flight,
                successes,
                failures,
                completed,
            } => {
                let bad = failed || slow;
                let in_flight = in_flight.saturating_sub(1);
                let successes = successes + u32::from(!bad);
                let failures = failures + u32::from(bad);
                let completed = completed + 1;
                let reopen = Phase::Open {
                    until: now + self.policy.open_for,
                };
                let next = match self.policy.recovery_rate {
                    Some(_) if self.policy.close_on_first_success => {
                        if bad {
                            reopen
                        } else {
                            Phase::Closed
                        }
                    }
                    None => {
                        let needed = if self.policy.close_on_first_success {
                            1
                        } else {
                            self.policy.close_after
                        };
                        if bad {
                            reopen
                        } else if successes >= needed {
                            Phase::Closed
                        } else {
                            Phase::HalfOpen {
                                in_flight,
                                successes,
                                failures,
                                completed,
                            }
                        }
                    }
                    Some(recovery) => {
                        let out_of = f64::from(self.policy.close_after);
                        if f64::from(failures) / out_of >= recovery {
                            reopen
                        } else if completed >= self.policy.close_after {
                            Phase::Closed
                        } else {
                            Phase::HalfOpen {
                                in_flight,
                                successes,
                                failures,
                                completed,
                            }
                        }
                    }
                };
                match next {
                    Phase::HalfOpen { .. } => {
                        self.phase = next;
                        None
                    }
                    _ => Some(self.enter(next, now)),
                }
            }
            Phase::Open { .. } => None,
        }
    }

    /// Hands back a permit whose call never produced an outcome (its caller went away, or an inner layer refused
    /// it before reaching the dependency). Frees the probe slot; counts nothing.
    pub fn release(&mut self, permit: Permit) {
        if permit.epoch != self.epoch || !permit.probe {
            return;
        }
        if let Phase::HalfOpen { in_flight, .. } = &mut self.phase {
            *in_flight = in_flight.saturating_sub(1);
        }
    }

    fn should_trip(&self) -> bool {
        let p = &self.policy;
        let c = self.window.counts();
        if p.bare_count {
            return c.failures >= p.min_calls || c.slow >= p.min_calls;
        }
        let floor = if p.no_min_calls { 1 } else { p.min_calls };
        if c.calls < floor || c.calls == 0 {
            return false;
        }
        let calls = f64::from(c.calls);
        f64::from(c.failures) / calls >= p.failure_rate
            || f64::from(c.slow) / calls >= p.slow_call_rate
    }

    fn enter(&mut self, next: Phase, now: Instant) -> StateChange {
        let from = self.state();
        self.phase = next;
        self.epoch += 1;
        self.window.clear();
        StateChange {
            from,
            to: self.state(),
            at: now,
        }
    }
}
