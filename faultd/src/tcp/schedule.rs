//! The schedule of TCP routes: which toxics each TCP route of a configuration has at time t of the run, and the
//! task that hands them to the routes at the phase times.
//!
//! For: the same phases as HTTP routes (a phase naming a TCP route replaces its toxics; `healthy` restores the
//! route's own `toxics`; routes a phase does not name keep theirs) with ramps where a toxic has a magnitude to
//! move: `latency` and `jitter` of a latency toxic, and `rate` of a bandwidth toxic, move linearly from the
//! previous phase's value (a latency toxic new in the phase starts from 0 ms) over the phase's `ramp`, in steps of
//! the recording bucket. Every other toxic switches at the phase's start. Not for: the toxics themselves
//! (`super::toxics`) or the registry (`super::routes`); [`toxics_at`] is pure, so the timing is tested without
//! sockets. Which toxics a phase gives a route is the configuration's to say (`Config::tcp_toxics`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{TcpRoutes, Toxic};
use crate::behaviours::{PostgresFault, RedisEntry, TcpToxic};
use crate::phased::Phased;

/// A TCP route's toxics over the run's phases (`Config::tcp_toxics` builds it from a configuration).
pub type TcpSchedule = Phased<Vec<TcpToxic>>;

/// A Redis route's entries over the run's phases, with the phases' names: the commands answered in a phase count
/// under its name.
#[derive(Debug, Clone)]
pub struct RedisSchedule {
    /// The entries (`Config::redis_entries`).
    pub entries: Phased<Vec<RedisEntry>>,
    /// The phases' names, in order.
    pub phases: Vec<String>,
}

impl RedisSchedule {
    /// Redis route `route`'s schedule in `config`.
    pub fn of(config: &crate::Config, route: &str) -> RedisSchedule {
        RedisSchedule {
            entries: config.redis_entries(route),
            phases: config.phases.iter().map(|p| p.name.clone()).collect(),
        }
    }

    /// The entries at `t` (a ramp moves each entry's `share` from the same-named entry of the phase before, from
    /// 0% for an entry new in the phase), and the name of the phase in force.
    pub fn at(&self, t: Duration) -> (Vec<RedisEntry>, &str) {
        let position = self.entries.position(t);
        let name = position
            .phase
            .and_then(|i| self.phases.get(i))
            .map_or(crate::phased::BEFORE_FIRST_PHASE, String::as_str);
        let at = self.entries.at(Some(position));
        let entries = match at.from {
            None => at.to.clone(),
            Some(from) => at
                .to
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let mut e = e.clone();
                    if let Some(share) = e.share {
                        let before = from
                            .iter()
                            .enumerate()
                            .find(|(j, f)| f.label(*j) == e.label(i))
                            .and_then(|(_, f)| f.share)
                            .map_or(0.0, faultline_units::Share::fraction);
                        let now = before + (share.fraction() - before) * at.weight;
                        e.share = Some(faultline_units::Share::from_fraction(now));
                    }
                    e
                })
                .collect(),
        };
        (entries, name)
    }
}

/// The toxics of a TCP route `t` from the run's origin (before the schedule starts, `t` = 0).
pub fn toxics_at(toxics: &TcpSchedule, t: Duration) -> Vec<TcpToxic> {
    let at = toxics.at_time(t);
    match at.from {
        Some(from) => at
            .to
            .iter()
            .map(|toxic| blend(from, toxic, at.weight))
            .collect(),
        None => at.to.clone(),
    }
}

/// Ramps the magnitudes of `to` from the toxic of the same name in `from` by `w` (0..1).
fn blend(from: &[TcpToxic], to: &TcpToxic, w: f64) -> TcpToxic {
    let fields: &[&str] = match to.kind.as_str() {
        "latency" => &["latency", "jitter"],
        "bandwidth" => &["rate"],
        _ => return to.clone(),
    };
    let before = from
        .iter()
        .find(|f| f.kind == to.kind && f.run_name() == to.run_name());
    if before.is_none() && to.kind == "bandwidth" {
        // From unlimited there is no line to follow: the limit applies at the phase's start.
        return to.clone();
    }
    let value = |t: &TcpToxic, f: &str| {
        t.attributes
            .as_ref()
            .and_then(|a| a.get(f))
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
    };
    let mut out = to.clone();
    let mut attributes = match &to.attributes {
        Some(Value::Object(m)) => m.clone(),
        _ => Default::default(),
    };
    for f in fields {
        let a = before.map_or(0.0, |b| value(b, f));
        let b = value(to, f);
        attributes.insert(f.to_string(), Value::from((a + (b - a) * w).round() as i64));
    }
    out.attributes = Some(Value::Object(attributes));
    out
}

/// Builds the toxics of a list (validated with the configuration, so a failure here is a bug: it is logged and
/// the toxic left out rather than the run stopped).
pub fn build(toxics: &[TcpToxic]) -> Vec<Toxic> {
    toxics
        .iter()
        .filter_map(|t| match t.build() {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!("toxic {:?} left out: {e}", t.run_name());
                None
            }
        })
        .collect()
}

/// Every Redis route's entries over the phases, by name.
pub fn redis_schedules(config: &crate::Config) -> Vec<(String, RedisSchedule)> {
    config
        .tcp_routes()
        .filter(|(_, r)| {
            r.tcp
                .as_ref()
                .is_some_and(|t| t.protocol == super::TcpProtocol::Redis)
        })
        .map(|(name, _)| (name.clone(), RedisSchedule::of(config, name)))
        .collect()
}

/// A postgres route's entries over the phases, each with the name of its phase (`Config::tcp_postgres`).
pub type PostgresSchedule = Phased<(String, Vec<PostgresFault>)>;

/// Every postgres route's entries over the phases, by name.
pub fn postgres_schedules(config: &crate::Config) -> Vec<(String, PostgresSchedule)> {
    config
        .tcp_routes()
        .filter(|(_, r)| {
            r.tcp
                .as_ref()
                .is_some_and(|t| t.protocol == super::TcpProtocol::Postgres)
        })
        .map(|(name, _)| (name.clone(), config.tcp_postgres(name)))
        .collect()
}

/// Every TCP route's toxics over the phases, by route name and instance (`None`: the route's own listener).
pub type TcpSchedules = Vec<(String, Option<u32>, TcpSchedule)>;

/// Gives every TCP route (and instance) of `schedules` its toxics at `t`, and every Redis and postgres route its
/// entries.
pub fn apply(
    routes: &TcpRoutes,
    schedules: &TcpSchedules,
    redis: &[(String, RedisSchedule)],
    postgres: &[(String, PostgresSchedule)],
    t: Duration,
) {
    for (name, instance, toxics) in schedules {
        let toxics = build(&toxics_at(toxics, t));
        let _ = match instance {
            None => routes.set_toxics(name, toxics),
            Some(n) => routes.set_instance_toxics(name, *n, toxics),
        };
    }
    for (name, schedule) in redis {
        let (entries, phase) = schedule.at(t);
        let _ = routes.set_redis(name, &entries, phase);
    }
    for (name, entries) in postgres {
        let (phase, list) = entries.at_time(t).to;
        let _ = routes.set_postgres_entries(name, list, phase);
    }
}

/// Runs the schedules from `origin` until `stop` changes: each change of toxics at its time, a ramp's in steps
/// of `step`.
pub async fn run(
    routes: Arc<TcpRoutes>,
    schedules: TcpSchedules,
    redis: Vec<(String, RedisSchedule)>,
    postgres: Vec<(String, PostgresSchedule)>,
    origin: Instant,
    step: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let step = step.max(Duration::from_millis(10));
    loop {
        let t = Instant::now().saturating_duration_since(origin);
        apply(&routes, &schedules, &redis, &postgres, t);
        let next = schedules
            .iter()
            .filter_map(|(_, _, toxics)| toxics.next_change(t, step))
            .chain(
                redis
                    .iter()
                    .filter_map(|(_, r)| r.entries.next_change(t, step)),
            )
            .chain(postgres.iter().filter_map(|(_, s)| s.next_change(t, step)))
            .min();
        let Some(next) = next else {
            return;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(origin + next) => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    const YAML: &str = r#"
routes:
  db: { tcp: { upstream: 127.0.0.1:6379 }, toxics: [ { type: latency, attributes: { latency: 10 } } ] }
  api: { path: /x }
phases:
  - { name: healthy, at: 0s }
  - { name: brownout, at: 10s, routes: { db: { toxics: [ { type: latency, attributes: { latency: 2000 } }, { type: slicer, attributes: { average_size: 64 } } ] } } }
  - { name: worse, at: 20s, ramp: 10s, routes: { db: { toxics: [ { type: latency, attributes: { latency: 4000, jitter: 100 } } ] } } }
  - { name: other, at: 40s, routes: { api: { latency: { fixed: 1s } } } }
  - { name: recovered, at: 50s, routes: { db: healthy } }
"#;

    fn latency(ts: &[TcpToxic]) -> Vec<i64> {
        ts.iter()
            .filter(|t| t.kind == "latency")
            .map(|t| t.attributes.as_ref().unwrap()["latency"].as_i64().unwrap())
            .collect()
    }

    #[test]
    fn a_phase_replaces_the_route_toxics_and_healthy_restores_them() {
        let c = Config::from_yaml(YAML, "t.yaml").unwrap();
        let s = |t: f64| toxics_at(&c.tcp_toxics("db"), Duration::from_secs_f64(t));
        assert_eq!(latency(&s(0.0)), vec![10]);
        assert_eq!(latency(&s(9.9)), vec![10]);
        assert_eq!(latency(&s(10.0)), vec![2000]);
        assert_eq!(s(10.0).len(), 2);
        assert_eq!(
            latency(&s(45.0)),
            vec![4000],
            "a phase not naming db keeps its toxics"
        );
        assert_eq!(latency(&s(50.0)), vec![10]);
    }

    #[test]
    fn a_ramp_moves_latency_linearly_and_switches_the_rest_at_once() {
        let c = Config::from_yaml(YAML, "t.yaml").unwrap();
        let s = |t: f64| toxics_at(&c.tcp_toxics("db"), Duration::from_secs_f64(t));
        assert_eq!(latency(&s(20.0)), vec![2000]);
        assert_eq!(latency(&s(25.0)), vec![3000]);
        assert_eq!(s(25.0).len(), 1, "the slicer left at the start of the ramp");
        assert_eq!(s(25.0)[0].attributes.as_ref().unwrap()["jitter"], 50);
        assert_eq!(latency(&s(30.0)), vec![4000]);
    }

    #[test]
    fn postgres_entries_follow_the_phases_and_every_phase_names_its_statements() {
        let yaml = r#"
routes:
  db: { tcp: { upstream: 127.0.0.1:5432, protocol: postgres }, postgres: [ { name: a, terminate: true } ] }
  api: { path: /x }
phases:
  - { name: warm, at: 0s }
  - { name: storm, at: 10s, routes: { db: { postgres: [ { name: b, delay: 1s } ] } } }
  - { name: other, at: 20s, routes: { api: { latency: { fixed: 1s } } } }
  - { name: recovered, at: 30s, routes: { db: healthy } }
"#;
        let c = Config::from_yaml(yaml, "t.yaml").unwrap();
        let s = c.tcp_postgres("db");
        let at = |t: u64| {
            let (phase, list) = s.at_time(Duration::from_secs(t)).to;
            (
                phase.clone(),
                list.iter().map(|e| e.label(0)).collect::<Vec<_>>(),
            )
        };
        assert_eq!(at(5), ("warm".to_string(), vec!["a".to_string()]));
        assert_eq!(at(15), ("storm".to_string(), vec!["b".to_string()]));
        assert_eq!(
            at(25),
            ("other".to_string(), vec!["b".to_string()]),
            "a phase not naming db keeps its entries"
        );
        assert_eq!(at(35), ("recovered".to_string(), vec!["a".to_string()]));
        let bad = yaml.replace("protocol: postgres", "protocol: bytes");
        let e = Config::from_yaml(&bad, "t.yaml").unwrap_err().to_string();
        assert!(e.contains("postgres"), "{e}");
    }

    #[test]
    fn changes_come_at_phase_starts_and_every_step_of_a_ramp() {
        let c = Config::from_yaml(YAML, "t.yaml").unwrap();
        let step = Duration::from_millis(100);
        let db = c.tcp_toxics("db");
        let n = |t: f64| {
            db.next_change(Duration::from_secs_f64(t), step)
                .map(|d| d.as_secs_f64())
        };
        assert_eq!(n(0.0), Some(10.0));
        assert_eq!(n(20.0), Some(20.1));
        assert_eq!(n(29.95), Some(30.0));
        assert_eq!(n(30.0), Some(40.0));
        assert_eq!(n(50.0), None);
    }
}
