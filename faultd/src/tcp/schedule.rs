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
use crate::behaviours::{PostgresFault, TcpToxic};
use crate::config::{Config, Route, TcpProtocol};
use crate::phased::Phased;

/// A TCP route's toxics over the run's phases (`Config::tcp_toxics` builds it from a configuration).
pub type TcpSchedule = Phased<Vec<TcpToxic>>;

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

/// A postgres route's entries over the phases, each with the name of its phase (`Config::tcp_postgres`).
pub type PostgresSchedule = Phased<(String, Vec<PostgresFault>)>;

/// Every TCP route's schedules, by route name.
#[derive(Debug, Clone, Default)]
pub struct Schedules {
    /// Each route's toxics.
    pub toxics: Vec<(String, TcpSchedule)>,
    /// Each postgres route's entries.
    pub postgres: Vec<(String, PostgresSchedule)>,
}

impl Schedules {
    /// Every TCP route's toxics over the phases of `config`, and every postgres route's entries, by name.
    pub fn of(config: &Config) -> Schedules {
        let postgres = |r: &Route| {
            r.tcp
                .as_ref()
                .is_some_and(|t| t.protocol == TcpProtocol::Postgres)
        };
        Schedules {
            toxics: config
                .tcp_routes()
                .map(|(name, _)| (name.clone(), config.tcp_toxics(name)))
                .collect(),
            postgres: config
                .tcp_routes()
                .filter(|(_, r)| postgres(r))
                .map(|(name, _)| (name.clone(), config.tcp_postgres(name)))
                .collect(),
        }
    }
}

/// Gives every TCP route of `schedules` (by name) its toxics, and every postgres route its entries, at `t`.
pub fn apply(routes: &TcpRoutes, schedules: &Schedules, t: Duration) {
    for (name, toxics) in &schedules.toxics {
        let _ = routes.set_toxics(name, build(&toxics_at(toxics, t)));
    }
    for (name, entries) in &schedules.postgres {
        let (phase, list) = entries.at_time(t).to;
        let _ = routes.set_postgres_entries(name, list, phase);
    }
}

/// Runs the schedules from `origin` until `stop` changes: each change of toxics at its time, a ramp's in steps
/// of `step`.
pub async fn run(
    routes: Arc<TcpRoutes>,
    schedules: Schedules,
    origin: Instant,
    step: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let step = step.max(Duration::from_millis(10));
    loop {
        let t = Instant::now().saturating_duration_since(origin);
        apply(&routes, &schedules, t);
        let toxics = schedules
            .toxics
            .iter()
            .filter_map(|(_, s)| s.next_change(t, step));
        let postgres = schedules
            .postgres
            .iter()
            .filter_map(|(_, s)| s.next_change(t, step));
        let next = toxics.chain(postgres).min();
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
