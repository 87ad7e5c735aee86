//! The plan: a configuration compiled for the data plane, at start and whenever the control API replaces it.
//!
//! For: each HTTP route's method and path in the route table, its behaviour before the first phase and after each
//! ([`Phased`]), the phase labels calls are recorded under, and the TLS handshake faults and the resolver's names
//! of every phase. Not for:
//! the run's clock or overrides (`super`), TCP routes' toxics (`crate::tcp::schedule`, from
//! `Config::tcp_toxics`), or the rules (`rules`).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use super::routing::{parse_method, PathPattern, RouteTable};
use super::rules;
use super::{BEFORE_FIRST_PHASE, HEALTHY_RESET};
use crate::behaviours::CompiledBehaviour;
use crate::config::{Config, ConfigError};
use crate::dns::DnsPlan;
use crate::draw::route_key;
use crate::invalid::Invalid;
use crate::phased::{PhaseTimes, Phased, Position};
use crate::recorder::{CallKeys, Recorder, RouteRecorder};
use crate::tls::TlsPlan;

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
    /// Its behaviour before the first phase and once each phase (and any ramp) is complete.
    pub behaviour: Phased<Arc<CompiledBehaviour>>,
    /// Its instances (`instances: N`), in order; none for a route of one listener.
    pub instances: Vec<PlanInstance>,
}

/// One instance of a route: its own recorder, draws and behaviour over the phases.
pub struct PlanInstance {
    /// Where its calls are recorded (they are the route's too).
    pub recorder: Arc<RouteRecorder>,
    /// The key of its random draws.
    pub key: u64,
    /// Calls that arrived on this instance under this plan.
    pub calls: AtomicU64,
    /// Its behaviour: the route's, but for the phases that set one on this instance alone.
    pub behaviour: Phased<Arc<CompiledBehaviour>>,
}

/// A phase as the schedule names it: its name, start and ramp (what it makes of each route is the route's).
pub struct PlanPhase {
    /// The phase's name.
    pub name: Arc<str>,
    /// Its start from the origin.
    pub at: Duration,
    /// Its ramp, if any.
    pub ramp: Option<Duration>,
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
    pub tls: TlsPlan,
    /// The resolver's names over the phases (empty without `dns:`).
    pub dns: DnsPlan,
    /// The headers each call is keyed by when the configuration correlates: every call is then recorded one by
    /// one.
    pub keys: Option<CallKeys>,
    /// The phase label of a call: [`BEFORE_FIRST_PHASE`], then each phase's name.
    labels: Phased<Arc<str>>,
    pub(super) healthy_reset: Arc<str>,
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
    /// Compiles `config`, holding it to every rule first ([`rules::check`], the same rules [`Config::validate`]
    /// runs alone).
    pub fn compile(config: Config, seed: u64, recorder: &Recorder) -> Result<Plan, ConfigError> {
        rules::check(&config)?;
        let mut routes = Vec::new();
        let mut patterns = Vec::new();
        for (name, route) in config.http_routes() {
            let at = |e: Invalid| ConfigError::from(e.at(&format!("routes.{name}")));
            let method = parse_method(route.method.as_deref()).map_err(|e| at(e.at("method")))?;
            patterns.push((
                method,
                PathPattern::parse(&route.path).map_err(|e| at(e.at("path")))?,
            ));
            let route_recorder = recorder.route(name);
            let base = CompiledBehaviour::compile_with(&route.base(), None, &|entry| {
                route_recorder.entry_tally(entry)
            })
            .map_err(at)?;
            let base = Arc::new(base);
            let instances = (1..=route.instances.unwrap_or(0))
                .map(|n| PlanInstance {
                    recorder: route_recorder.instance(n),
                    key: route_key(&format!("{name}#{n}")),
                    calls: AtomicU64::new(0),
                    behaviour: Phased::new(base.clone()),
                })
                .collect();
            routes.push(PlanRoute {
                name: name.clone(),
                key: route_key(name),
                recorder: route_recorder,
                calls: AtomicU64::new(0),
                behaviour: Phased::new(base),
                instances,
            });
        }
        let mut phases = Vec::new();
        let mut labels = Phased::new(Arc::from(BEFORE_FIRST_PHASE));
        for (i, phase) in config.phases.iter().enumerate() {
            let (at, ramp) = (phase.at.get(), phase.ramp.map(|r| r.get()));
            for (r, (name, route)) in config.http_routes().enumerate() {
                let tallies = |entry: &str| routes[r].recorder.entry_tally(entry);
                let set = match phase.routes.get(name) {
                    Some(set) => Some((
                        set,
                        Arc::new(
                            CompiledBehaviour::compile_with(
                                &set.resolve(&route.base()),
                                None,
                                &tallies,
                            )
                            .map_err(|e| {
                                ConfigError::from(e.at(&format!("phases[{i}].routes.{name}")))
                            })?,
                        ),
                    )),
                    None => None,
                };
                // A phase that sets one instance leaves the route's own listener (and the other instances) as
                // they were.
                let whole = set.as_ref().filter(|(s, _)| s.acts_on(0));
                routes[r]
                    .behaviour
                    .push(at, ramp, whole.map(|(_, b)| b.clone()));
                for (n, instance) in (1..).zip(routes[r].instances.iter_mut()) {
                    let own = set.as_ref().filter(|(s, _)| s.acts_on(n));
                    instance
                        .behaviour
                        .push(at, ramp, own.map(|(_, b)| b.clone()));
                }
            }
            let name: Arc<str> = Arc::from(phase.name.as_str());
            labels.push(at, ramp, Some(name.clone()));
            phases.push(PlanPhase { name, at, ramp });
        }
        let times: Vec<PhaseTimes<'_>> = phases.iter().map(|p| (&*p.name, p.at, p.ramp)).collect();
        let tls = TlsPlan::compile(config.tls.as_ref(), &times).map_err(ConfigError::from)?;
        let dns = DnsPlan::compile(config.dns.as_ref(), &times).map_err(ConfigError::from)?;
        let keys = config
            .correlate
            .as_ref()
            .map(CallKeys::compile)
            .transpose()
            .map_err(|e| ConfigError::from(e.at("correlate")))?;
        Ok(Plan {
            tls,
            dns,
            keys,
            table: RouteTable::new(patterns),
            config,
            seed,
            routes,
            phases,
            labels,
            healthy_reset: Arc::from(HEALTHY_RESET),
        })
    }

    /// Where the schedule is `t` after the origin.
    pub fn position(&self, t: Duration) -> Position {
        self.labels.position(t)
    }

    /// The phase label at a position.
    pub fn label(&self, position: Position) -> Arc<str> {
        self.labels.at(Some(position)).to.clone()
    }

    /// The behaviour of `route` at `position`.
    pub fn resolve(&self, route: usize, position: Position) -> Resolved {
        let at = self.routes[route].behaviour.at(Some(position));
        Resolved {
            from: at.from.cloned(),
            to: at.to.clone(),
            weight: at.weight,
            phase: self.label(position),
        }
    }

    /// The behaviour of instance `instance` (index from 0) of `route` at `position`.
    pub fn resolve_instance(&self, route: usize, instance: usize, position: Position) -> Resolved {
        let at = self.routes[route].instances[instance]
            .behaviour
            .at(Some(position));
        Resolved {
            from: at.from.cloned(),
            to: at.to.clone(),
            weight: at.weight,
            phase: self.label(position),
        }
    }

    /// A route's base behaviour.
    pub fn base(&self, route: usize) -> Arc<CompiledBehaviour> {
        self.routes[route].behaviour.base().clone()
    }

    /// The index of a route by name.
    pub fn route_index(&self, name: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.name == name)
    }
}
