//! The schedule: which behaviour each route has at each instant of the run.
//!
//! For: the run's clock (not started, running, frozen, reset to healthy), run-time route overrides, and the pure
//! lookup "at time t, route r behaves like this, blended this far along a ramp" ([`Live`]); compiling a
//! configuration into the [`Plan`] it reads (`plan`, holding it to the `rules` first), reading a configuration
//! (`load`) and the route table (`routing`). Not for: waiting or sockets; nothing here sleeps, so paused tokio
//! time tests every switch and ramp to the nanosecond.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::behaviours::{Behaviour, CompiledBehaviour};
use crate::config::{ConfigError, PhaseRoute};
use crate::phased::Position;
use crate::recorder::PhaseEntry;

mod load;
mod plan;
pub mod routing;
mod rules;

pub use plan::{Plan, PlanInstance, PlanPhase, PlanRoute, Resolved};
pub use rules::MAX_INSTANCES;

pub use crate::phased::BEFORE_FIRST_PHASE;
/// The phase label once the routes were reset to their base behaviour (Ctrl-C, or the control API).
pub const HEALTHY_RESET: &str = "healthy-reset";

/// The run's clock: what the schedule does with time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clock {
    /// Before `start_schedule`: routes behave as at t = 0.
    NotStarted,
    /// Phases follow time from `origin`.
    Running {
        /// t = 0.
        origin: Instant,
    },
    /// Stopped: the schedule stays where it was `at` after the origin, while recording time goes on.
    Frozen {
        /// t = 0.
        origin: Instant,
        /// The schedule time it froze at.
        at: Duration,
    },
    /// Every route back to its base behaviour; the schedule reached `reached` and was reset at `at`.
    Healthy {
        /// The schedule time reached before the reset.
        reached: Duration,
        /// When the reset happened (schedule time).
        at: Duration,
    },
}

impl Clock {
    /// The schedule time at `now` (`None` once reset to healthy).
    pub fn schedule_time(&self, now: Instant) -> Option<Duration> {
        match *self {
            Clock::NotStarted => Some(Duration::ZERO),
            Clock::Running { origin } => Some(now.saturating_duration_since(origin)),
            Clock::Frozen { at, .. } => Some(at),
            Clock::Healthy { .. } => None,
        }
    }
}

/// A behaviour set on one route at run time. It holds until the schedule enters another phase, the schedule is
/// restarted or reset, or the configuration is replaced.
#[derive(Clone)]
pub struct Override {
    behaviour: Arc<CompiledBehaviour>,
    phase: Option<usize>,
}

/// The state the data plane reads on every call: the plan, the clock and the overrides.
#[derive(Clone)]
pub struct Live {
    /// The compiled configuration.
    pub plan: Arc<Plan>,
    /// The clock.
    pub clock: Clock,
    overrides: Vec<Option<Override>>,
    /// Per route, per instance: an override of the route reaches every instance, one of an instance only it.
    instance_overrides: Vec<Vec<Option<Override>>>,
}

/// No override on any route or instance of `plan`.
fn no_overrides(plan: &Plan) -> (Vec<Option<Override>>, Vec<Vec<Option<Override>>>) {
    (
        vec![None; plan.routes.len()],
        plan.routes
            .iter()
            .map(|r| vec![None; r.instances.len()])
            .collect(),
    )
}

impl Live {
    /// A fresh state for `plan`, not started.
    pub fn new(plan: Arc<Plan>) -> Live {
        let (overrides, instance_overrides) = no_overrides(&plan);
        Live {
            plan,
            clock: Clock::NotStarted,
            overrides,
            instance_overrides,
        }
    }

    /// Swaps in a new plan (a replaced configuration), keeping the clock and dropping overrides.
    pub fn replace_plan(&mut self, plan: Arc<Plan>) {
        (self.overrides, self.instance_overrides) = no_overrides(&plan);
        self.plan = plan;
    }

    /// The position of the schedule at `now`, or `None` once reset to healthy.
    pub fn position(&self, now: Instant) -> Option<Position> {
        self.clock.schedule_time(now).map(|t| self.plan.position(t))
    }

    /// The behaviour of `route` for a call arriving at `now`.
    pub fn resolve(&self, route: usize, now: Instant) -> Resolved {
        self.resolve_on(route, None, now)
    }

    /// The behaviour of `route` for a call arriving at `now` on its own listener (`instance` `None`) or on
    /// instance `instance` (index from 0).
    pub fn resolve_on(&self, route: usize, instance: Option<usize>, now: Instant) -> Resolved {
        let Some(position) = self.position(now) else {
            return Resolved {
                from: None,
                to: self.plan.base(route),
                weight: 1.0,
                phase: self.plan.healthy_reset.clone(),
            };
        };
        let o = match instance {
            None => self.overrides.get(route),
            Some(i) => self.instance_overrides.get(route).and_then(|o| o.get(i)),
        };
        if let Some(Some(o)) = o {
            if o.phase == position.phase {
                return Resolved {
                    from: None,
                    to: o.behaviour.clone(),
                    weight: 1.0,
                    phase: self.plan.label(position),
                };
            }
        }
        match instance {
            None => self.plan.resolve(route, position),
            Some(i) => self.plan.resolve_instance(route, i, position),
        }
    }

    /// The name of the phase in force at `now`.
    pub fn current_phase(&self, now: Instant) -> Option<String> {
        match self.position(now) {
            None => Some(HEALTHY_RESET.to_string()),
            Some(p) => p.phase.map(|i| self.plan.phases[i].name.to_string()),
        }
    }

    /// Starts the schedule with `origin` as t = 0, dropping run-time overrides.
    pub fn start(&mut self, origin: Instant) {
        self.clock = Clock::Running { origin };
        self.clear_overrides();
    }

    /// Freezes the schedule where it is at `now`.
    pub fn stop(&mut self, now: Instant) {
        if let Clock::Running { origin } = self.clock {
            self.clock = Clock::Frozen {
                origin,
                at: now.saturating_duration_since(origin),
            };
        }
    }

    /// Every route back to its base behaviour, overrides dropped.
    pub fn reset_to_healthy(&mut self, now: Instant) {
        let reached = self.clock.schedule_time(now);
        let at = match self.clock {
            Clock::Running { origin } | Clock::Frozen { origin, .. } => {
                now.saturating_duration_since(origin)
            }
            Clock::Healthy { at, .. } => at,
            Clock::NotStarted => Duration::ZERO,
        };
        if let Some(reached) = reached {
            self.clock = Clock::Healthy { reached, at };
        }
        self.clear_overrides();
    }

    fn clear_overrides(&mut self) {
        self.overrides.iter_mut().for_each(|o| *o = None);
        self.instance_overrides
            .iter_mut()
            .flatten()
            .for_each(|o| *o = None);
    }

    /// Sets `route`'s behaviour at run time (laid over its base), until the schedule moves to another phase.
    pub fn set_override(
        &mut self,
        route: usize,
        set: &PhaseRoute,
        now: Instant,
    ) -> Result<(), ConfigError> {
        crate::limits::check_size(set)?;
        let name = &self.plan.routes[route].name;
        let base: Behaviour = self
            .plan
            .config
            .routes
            .get(name)
            .map(|r| r.base())
            .unwrap_or_default();
        let recorder = &self.plan.routes[route].recorder;
        let compiled = CompiledBehaviour::compile_with(&set.resolve(&base), None, &|entry| {
            recorder.entry_tally(entry)
        })
        .map_err(ConfigError::from)?;
        let phase = self.position(now).and_then(|p| p.phase);
        let set_on = Some(Override {
            behaviour: Arc::new(compiled),
            phase,
        });
        let instances = &mut self.instance_overrides[route];
        match set {
            PhaseRoute::Instance(n, _) => {
                let count = instances.len();
                let slot = (*n as usize)
                    .checked_sub(1)
                    .and_then(|i| instances.get_mut(i))
                    .ok_or_else(|| {
                        ConfigError::from(crate::invalid::Invalid::new(
                            "instance",
                            format!("route {name:?} has {count} instance(s), numbered from 1"),
                        ))
                    })?;
                *slot = set_on;
            }
            _ => {
                instances.iter_mut().for_each(|o| *o = set_on.clone());
                self.overrides[route] = set_on;
            }
        }
        Ok(())
    }

    /// The phases entered so far, at their scheduled times, and the reset to healthy if there was one.
    pub fn phases_entered(&self, now: Instant) -> Vec<PhaseEntry> {
        let (reached, reset) = match self.clock {
            Clock::NotStarted => return Vec::new(),
            Clock::Running { origin } => (now.saturating_duration_since(origin), None),
            Clock::Frozen { at, .. } => (at, None),
            Clock::Healthy { reached, at } => (reached, Some(at)),
        };
        let mut entries: Vec<PhaseEntry> = self
            .plan
            .phases
            .iter()
            .filter(|p| p.at <= reached)
            .map(|p| PhaseEntry {
                name: p.name.to_string(),
                at: p.at.into(),
            })
            .collect();
        if let Some(at) = reset {
            entries.push(PhaseEntry {
                name: HEALTHY_RESET.to_string(),
                at: at.into(),
            });
        }
        entries
    }
}

#[cfg(test)]
mod tests;
