//! The schedule: which behaviour each route has at each instant of the run.
//!
//! For: compiling a validated [`Config`] into per-phase behaviours ([`Plan`]), the run's clock (not started,
//! running, frozen, reset to healthy), run-time route overrides, and the pure lookup "at time t, route r behaves
//! like this, blended this far along a ramp". Not for: waiting or sockets; nothing here sleeps, so paused tokio
//! time tests every switch and ramp to the nanosecond.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::behaviours::{Behaviour, CompiledBehaviour};
use crate::config::{Config, ConfigError, PhaseRoute};
use crate::draw::route_key;
use crate::invalid::Invalid;
use crate::recorder::{PhaseEntry, Recorder, RouteRecorder};
use crate::routing::{parse_method, PathPattern, RouteTable};

/// The phase label of calls before the first phase begins (and of every call when there are no phases).
pub const BEFORE_FIRST_PHASE: &str = "before-start";
/// The phase label once the routes were reset to their base behaviour (Ctrl-C, or the control API).
pub const HEALTHY_RESET: &str = "healthy-reset";

/// A route as the data plane needs it.
pub struct PlanRoute {
    /// The route's name.
    pub name: String,
    /// The key of the route's random draws.
    pub key: u64,
    /// Where its calls are recorded.
    pub recorder: Arc<RouteRecorder>,
    /// Calls that arrived on this route under this plan: the call number of the seeded draws.
    pub calls: AtomicU64,
}

/// A phase as the data plane needs it: each route's behaviour once the phase (and any ramp) is complete.
pub struct PlanPhase {
    /// The phase's name.
    pub name: Arc<str>,
    /// Its start from the origin.
    pub at: Duration,
    /// Its ramp, if any.
    pub ramp: Option<Duration>,
    effective: Vec<Arc<CompiledBehaviour>>,
    named: Vec<bool>,
}

/// A compiled configuration: routes, their base behaviours, and what every phase makes of them.
pub struct Plan {
    /// The configuration this plan was compiled from.
    pub config: Config,
    /// The seed of the random draws.
    pub seed: u64,
    /// Routes in configuration (name) order.
    pub routes: Vec<PlanRoute>,
    /// Method and path lookup.
    pub table: RouteTable,
    /// The phases in time order.
    pub phases: Vec<PlanPhase>,
    /// The handshake faults of every phase (used only when the data plane speaks TLS).
    pub tls: crate::tls::TlsPlan,
    base: Vec<Arc<CompiledBehaviour>>,
    before_first: Arc<str>,
    healthy_reset: Arc<str>,
}

/// Where the schedule is at some instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Position {
    /// The phase in force, `None` before the first one.
    pub phase: Option<usize>,
    /// How far that phase's ramp has gone (1.0 once it is complete, or without a ramp).
    pub weight: f64,
}

/// The behaviour one call gets: `to`, blended from `from` by `weight` during a ramp.
pub struct Resolved {
    /// The previous phase's behaviour during a ramp.
    pub from: Option<Arc<CompiledBehaviour>>,
    /// The behaviour in force.
    pub to: Arc<CompiledBehaviour>,
    /// How far the ramp has gone.
    pub weight: f64,
    /// The phase label recorded with the call.
    pub phase: Arc<str>,
}

impl Plan {
    /// Compiles `config` (validating it again, since the control API also lands here).
    pub fn compile(config: Config, seed: u64, recorder: &Recorder) -> Result<Plan, ConfigError> {
        config.validate()?;
        let mut routes = Vec::new();
        let mut patterns = Vec::new();
        let mut base = Vec::new();
        for (name, route) in config.http_routes() {
            let at = |e: Invalid| ConfigError::from(e.at(&format!("routes.{name}")));
            let method = parse_method(route.method.as_deref()).map_err(|e| at(e.at("method")))?;
            patterns.push((
                method,
                PathPattern::parse(&route.path).map_err(|e| at(e.at("path")))?,
            ));
            base.push(Arc::new(
                CompiledBehaviour::compile(&route.base()).map_err(at)?,
            ));
            routes.push(PlanRoute {
                name: name.clone(),
                key: route_key(name),
                recorder: recorder.route(name),
                calls: AtomicU64::new(0),
            });
        }
        let mut phases = Vec::new();
        let mut current = base.clone();
        for (i, phase) in config.phases.iter().enumerate() {
            let mut named = vec![false; routes.len()];
            for (r, (name, route)) in config.http_routes().enumerate() {
                if let Some(set) = phase.routes.get(name) {
                    let b = set.resolve(&route.base());
                    let compiled = CompiledBehaviour::compile(&b).map_err(|e| {
                        ConfigError::from(e.at(&format!("phases[{i}].routes.{name}")))
                    })?;
                    current[r] = Arc::new(compiled);
                    named[r] = true;
                }
            }
            phases.push(PlanPhase {
                name: Arc::from(phase.name.as_str()),
                at: phase.at.get(),
                ramp: phase.ramp.map(|r| r.get()),
                effective: current.clone(),
                named,
            });
        }
        let tls = crate::tls::TlsPlan::compile(&config).map_err(ConfigError::from)?;
        Ok(Plan {
            tls,
            table: RouteTable::new(patterns),
            config,
            seed,
            routes,
            phases,
            base,
            before_first: Arc::from(BEFORE_FIRST_PHASE),
            healthy_reset: Arc::from(HEALTHY_RESET),
        })
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

    /// The phase label at a position.
    pub fn label(&self, position: Position) -> Arc<str> {
        position.phase.map_or_else(
            || self.before_first.clone(),
            |i| self.phases[i].name.clone(),
        )
    }

    /// The behaviour of `route` at `position`.
    pub fn resolve(&self, route: usize, position: Position) -> Resolved {
        let Some(i) = position.phase else {
            return Resolved {
                from: None,
                to: self.base[route].clone(),
                weight: 1.0,
                phase: self.before_first.clone(),
            };
        };
        let phase = &self.phases[i];
        let to = phase.effective[route].clone();
        let from = (position.weight < 1.0 && phase.named[route]).then(|| {
            if i == 0 {
                self.base[route].clone()
            } else {
                self.phases[i - 1].effective[route].clone()
            }
        });
        Resolved {
            from,
            to,
            weight: position.weight,
            phase: phase.name.clone(),
        }
    }

    /// A route's base behaviour.
    pub fn base(&self, route: usize) -> Arc<CompiledBehaviour> {
        self.base[route].clone()
    }

    /// The index of a route by name.
    pub fn route_index(&self, name: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.name == name)
    }
}

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
}

impl Live {
    /// A fresh state for `plan`, not started.
    pub fn new(plan: Arc<Plan>) -> Live {
        let overrides = vec![None; plan.routes.len()];
        Live {
            plan,
            clock: Clock::NotStarted,
            overrides,
        }
    }

    /// Swaps in a new plan (a replaced configuration), keeping the clock and dropping overrides.
    pub fn replace_plan(&mut self, plan: Arc<Plan>) {
        self.overrides = vec![None; plan.routes.len()];
        self.plan = plan;
    }

    /// The position of the schedule at `now`, or `None` once reset to healthy.
    pub fn position(&self, now: Instant) -> Option<Position> {
        self.clock.schedule_time(now).map(|t| self.plan.position(t))
    }

    /// The behaviour of `route` for a call arriving at `now`.
    pub fn resolve(&self, route: usize, now: Instant) -> Resolved {
        let Some(position) = self.position(now) else {
            return Resolved {
                from: None,
                to: self.plan.base(route),
                weight: 1.0,
                phase: self.plan.healthy_reset.clone(),
            };
        };
        if let Some(Some(o)) = self.overrides.get(route) {
            if o.phase == position.phase {
                return Resolved {
                    from: None,
                    to: o.behaviour.clone(),
                    weight: 1.0,
                    phase: self.plan.label(position),
                };
            }
        }
        self.plan.resolve(route, position)
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
        let compiled =
            CompiledBehaviour::compile(&set.resolve(&base)).map_err(ConfigError::from)?;
        let phase = self.position(now).and_then(|p| p.phase);
        self.overrides[route] = Some(Override {
            behaviour: Arc::new(compiled),
            phase,
        });
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
mod tests {
    use super::*;
    use crate::behaviours::{decide, CallAction};
    use crate::draw::CallDraws;

    const SCENARIO: &str = "
seed: 7
routes:
  pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }
  payments: { method: POST, path: /payments/charge, latency: { fixed: 100ms } }
phases:
  - { name: healthy,   at: 0s }
  - { name: brownout,  at: 20s, routes: { pricing: { latency: { fixed: 2s } } } }
  - { name: degrading, at: 30s, ramp: 10s, routes: { pricing: { latency: { fixed: 5s }, errors: [ { share: 70%, status: 503 } ] } } }
  - { name: recovered, at: 60s, routes: { pricing: healthy } }
  - { name: flaky,     at: 70s, routes: { pricing: { fail_first: { calls: 20, status: 503 } } } }
";

    fn live() -> Live {
        let config = Config::from_yaml(SCENARIO, "test.yaml").unwrap();
        let recorder = Recorder::new(config.bucket());
        Live::new(Arc::new(Plan::compile(config, 7, &recorder).unwrap()))
    }

    fn delay_of(live: &Live, now: Instant) -> Duration {
        let r = live.resolve(0, now);
        let pricing = live.plan.route_index("pricing").unwrap();
        let r2 = live.resolve(pricing, now);
        let _ = r;
        decide(
            r2.from.as_deref(),
            &r2.to,
            r2.weight,
            CallDraws::new(1, 1, 0),
        )
        .delay
    }

    #[tokio::test(start_paused = true)]
    async fn phases_switch_at_their_exact_start() {
        let mut live = live();
        let origin = Instant::now();
        live.start(origin);
        tokio::time::advance(Duration::from_secs(20) - Duration::from_nanos(1)).await;
        assert_eq!(
            live.current_phase(Instant::now()).as_deref(),
            Some("healthy")
        );
        assert!(delay_of(&live, Instant::now()) < Duration::from_millis(200));
        tokio::time::advance(Duration::from_nanos(1)).await;
        assert_eq!(
            live.current_phase(Instant::now()).as_deref(),
            Some("brownout")
        );
        assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(2));
        tokio::time::advance(Duration::from_secs(40)).await;
        assert_eq!(
            live.current_phase(Instant::now()).as_deref(),
            Some("recovered")
        );
        assert!(delay_of(&live, Instant::now()) < Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn a_ramp_moves_the_delay_linearly_from_the_previous_phase() {
        let mut live = live();
        live.start(Instant::now());
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(2));
        tokio::time::advance(Duration::from_millis(2500)).await;
        // A quarter of the way from 2 s to 5 s.
        assert_eq!(delay_of(&live, Instant::now()), Duration::from_millis(2750));
        tokio::time::advance(Duration::from_millis(7500)).await;
        assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(5));
        let pricing = live.plan.route_index("pricing").unwrap();
        assert_eq!(live.resolve(pricing, Instant::now()).weight, 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn fail_first_counts_from_the_start_of_its_phase() {
        let mut live = live();
        live.start(Instant::now());
        tokio::time::advance(Duration::from_secs(70)).await;
        let pricing = live.plan.route_index("pricing").unwrap();
        let actions: Vec<_> = (0..25)
            .map(|n| {
                let r = live.resolve(pricing, Instant::now());
                matches!(
                    decide(None, &r.to, 1.0, CallDraws::new(1, 1, n)).action,
                    CallAction::FailFirst(503)
                )
            })
            .collect();
        assert_eq!(actions.iter().filter(|f| **f).count(), 20);
        assert!(actions[..20].iter().all(|f| *f));
    }

    #[tokio::test(start_paused = true)]
    async fn stop_freezes_the_phase_and_reset_restores_base_behaviour() {
        let mut live = live();
        live.start(Instant::now());
        tokio::time::advance(Duration::from_secs(25)).await;
        live.stop(Instant::now());
        tokio::time::advance(Duration::from_secs(100)).await;
        assert_eq!(
            live.current_phase(Instant::now()).as_deref(),
            Some("brownout")
        );
        assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(2));
        live.reset_to_healthy(Instant::now());
        assert_eq!(
            live.current_phase(Instant::now()).as_deref(),
            Some(HEALTHY_RESET)
        );
        assert!(delay_of(&live, Instant::now()) < Duration::from_millis(200));
        let entered: Vec<_> = live
            .phases_entered(Instant::now())
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(entered, ["healthy", "brownout", HEALTHY_RESET]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_override_holds_until_the_next_phase() {
        let mut live = live();
        live.start(Instant::now());
        let pricing = live.plan.route_index("pricing").unwrap();
        let set = PhaseRoute::Set(Box::new(Behaviour {
            latency: Some(crate::behaviours::Latency::fixed(Duration::from_secs(9))),
            ..Behaviour::default()
        }));
        live.set_override(pricing, &set, Instant::now()).unwrap();
        assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(9));
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(delay_of(&live, Instant::now()), Duration::from_secs(2));
    }

    #[test]
    fn before_the_first_phase_calls_are_labelled_before_start() {
        let live = live();
        let plan = &live.plan;
        assert_eq!(
            &*plan.label(Position {
                phase: None,
                weight: 1.0
            }),
            BEFORE_FIRST_PHASE
        );
        // Not started: the routes behave as at t = 0, which is the first phase here.
        assert_eq!(
            live.current_phase(Instant::now()).as_deref(),
            Some("healthy")
        );
    }
}
