//! The control API: an HTTP listener of its own (loopback by default) to read and change faultd while it runs,
//! and the same operations as plain functions for the library API.
//!
//! For: reading and replacing the whole configuration, setting one route's behaviour, starting, stopping and
//! resetting the schedule, reading the phase and the origin, the recorder as JSON, and `/metrics` in Prometheus
//! text format. A bad body gets 400 with the path of the field that failed; every error, an unknown path (404), a
//! method the path does not take (405) and a body too large (413) included, is JSON `{"error", "field"?}`. Every
//! handler takes the live-state lock only to swap small values, so control calls never stall the data plane. Not
//! for: the data plane.
//!
//! | method | path | body | answer |
//! | --- | --- | --- | --- |
//! | GET | /config | | the configuration (JSON) |
//! | PUT | /config | a configuration (JSON) | 204, or 400 naming the field |
//! | PUT | /routes/{name} | `"healthy"` or a behaviour (JSON) | 204, 400, or 404 for an unknown route |
//! | POST | /schedule/start | | 204: t = 0 is now |
//! | POST | /schedule/stop | | 204: frozen at the current phase |
//! | POST | /schedule/reset | | 204: every route back to its base behaviour |
//! | GET | /schedule | | state, phase, origin (Unix ms), phases |
//! | GET | /recording | | the [`Recording`] (JSON) |
//! | GET | /metrics | | Prometheus text |

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use serde::Serialize;
use tokio::time::Instant;

use crate::api_errors;
pub use crate::config::parse_json;
use crate::config::{Config, ConfigError, PhaseRoute};
use crate::error::FaultdError;
use crate::http::Shared;
use crate::recorder::Recording;
use crate::schedule::{Clock, Plan};

/// Starts the schedule at `origin`.
pub fn start_schedule(shared: &Shared, origin: Instant) {
    let ago = Instant::now().saturating_duration_since(origin);
    let ahead = origin.saturating_duration_since(Instant::now());
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let unix_ms = (unix.as_millis() as i128 - ago.as_millis() as i128 + ahead.as_millis() as i128)
        .max(1) as u64;
    let mut live = shared.live_mut();
    shared.recorder.set_origin(origin, unix_ms);
    live.start(origin);
}

/// A snapshot of the recorder with the schedule's phases entered and, under TLS, the handshakes.
pub fn recording(shared: &Shared) -> Recording {
    recording_since(shared, 0)
}

/// [`recording`] with every series from bucket `from` on (`GET /recording?since=N`): a reader that holds the
/// earlier buckets reads only the new ones, and the run-wide figures whole.
pub fn recording_since(shared: &Shared, from: usize) -> Recording {
    let entered = shared.live().phases_entered(Instant::now());
    shared.recorder.set_phases_entered(entered);
    let mut recording = shared.recorder.snapshot_since(from);
    recording.tls = shared.tls.as_ref().map(|t| {
        let mut tls = t.recorder().snapshot();
        tls.buckets.drain(..from.min(tls.buckets.len()));
        tls
    });
    recording.dns = shared.dns.as_ref().map(|d| {
        let plan = shared.live().plan.clone();
        d.snapshot(plan.dns.names())
    });
    recording
}

/// Replaces the configuration, keeping the clock and the seed unless the new configuration sets one. Its files
/// must be read already ([`Config::read_files`]); a route proxying to one of faultd's own listeners is refused.
pub fn replace_config(shared: &Shared, config: Config) -> Result<(), ConfigError> {
    if config.listen.is_some() {
        return Err(crate::behaviours::Invalid::new(
            "listen",
            "the data plane's address is fixed when faultd starts (faultd --listen, or a scenario's \
             dependency.listen); a running faultd cannot move it",
        )
        .into());
    }
    config.check_not_own(&shared.tcp.own_listeners())?;
    let seed = config.seed.unwrap_or_else(|| shared.live().plan.seed);
    let plan = Arc::new(Plan::compile(config, seed, &shared.recorder)?);
    shared.live_mut().replace_plan(plan);
    Ok(())
}

/// Sets one route's behaviour until the schedule enters another phase.
pub fn set_route(shared: &Shared, route: &str, set: &PhaseRoute) -> Result<(), FaultdError> {
    set.check_not_own(&shared.tcp.own_listeners())
        .map_err(|e| ConfigError::from(e.at(&format!("routes.{route}"))))?;
    let mut live = shared.live_mut();
    let index = live
        .plan
        .route_index(route)
        .ok_or_else(|| FaultdError::UnknownRoute(route.to_string()))?;
    live.set_override(index, set, Instant::now()).map_err(|e| {
        FaultdError::Config(ConfigError {
            field: prefix(&format!("routes.{route}"), &e.field),
            ..e
        })
    })
}

fn prefix(p: &str, field: &str) -> String {
    if field.is_empty() {
        p.to_string()
    } else {
        format!("{p}.{field}")
    }
}

/// A 4xx answer with a JSON body `{"error": ..., "field": ...}`.
#[derive(Debug, Serialize)]
struct Problem {
    error: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    field: String,
    #[serde(skip)]
    status: StatusCode,
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        (self.status, Json(&self)).into_response()
    }
}

fn bad_request(field: String, error: String) -> Problem {
    Problem {
        error,
        field,
        status: StatusCode::BAD_REQUEST,
    }
}

impl From<ConfigError> for Problem {
    fn from(e: ConfigError) -> Problem {
        bad_request(e.field, e.message)
    }
}

/// The control API's router.
pub fn router(shared: Arc<Shared>, token: Option<String>) -> Router {
    let routes = Router::new()
        .route("/config", get(get_config).put(put_config))
        .route("/routes/{name}", put(put_route))
        .route("/schedule", get(get_schedule))
        .route("/schedule/start", post(post_start))
        .route("/schedule/stop", post(post_stop))
        .route("/schedule/reset", post(post_reset))
        .route("/recording", get(get_recording))
        .route("/recording/calls", get(get_traced_calls))
        .route("/metrics", get(get_metrics))
        // The files a configuration names are capped at the same size, so a file never carries more than a body.
        .layer(DefaultBodyLimit::max(crate::files::MAX_FILE))
        .with_state(shared);
    let routes = match token {
        Some(token) => routes.layer(middleware::from_fn_with_state(
            Arc::new(token),
            require_token,
        )),
        None => routes,
    };
    routes.layer(middleware::from_fn_with_state(
        problem as api_errors::Shape,
        api_errors::in_json,
    ))
}

/// The answer to an error axum gives by itself (unknown path, method, body too large), in the API's shape.
fn problem(status: StatusCode, error: String) -> Response {
    Problem {
        error,
        field: String::new(),
        status,
    }
    .into_response()
}

async fn require_token(State(token): State<Arc<String>>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let expected = format!("Bearer {token}");
    if given.map(str::as_bytes) == Some(expected.as_bytes()) {
        next.run(request).await
    } else {
        Problem {
            error: "missing or wrong bearer token".into(),
            field: String::new(),
            status: StatusCode::UNAUTHORIZED,
        }
        .into_response()
    }
}

async fn get_config(State(shared): State<Arc<Shared>>) -> Json<Config> {
    Json(shared.live().plan.config.clone())
}

/// Runs a control call off the runtime's workers: reading a file a configuration names, or resolving an upstream's
/// name, may wait on the disk or the network, and the data plane shares those workers.
async fn off_the_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Problem> + Send + 'static,
) -> Result<T, Problem> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Problem {
            error: format!("the control call failed: {e}"),
            field: String::new(),
            status: StatusCode::INTERNAL_SERVER_ERROR,
        })?
}

async fn put_config(State(shared): State<Arc<Shared>>, body: Bytes) -> Result<StatusCode, Problem> {
    off_the_runtime(move || {
        let mut config = Config::from_json(&body, "control API body")?;
        config.read_files(&shared.files)?;
        replace_config(&shared, config)?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}

async fn put_route(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<StatusCode, Problem> {
    off_the_runtime(move || set_route_from_json(&shared, &name, &body)).await
}

fn set_route_from_json(shared: &Shared, name: &str, body: &[u8]) -> Result<StatusCode, Problem> {
    let mut set: PhaseRoute =
        parse_json(body).map_err(|(field, error)| bad_request(field, error))?;
    let path = shared
        .live()
        .plan
        .config
        .routes
        .get(name)
        .map(|r| r.path.clone());
    set.read_files(&shared.files, path.as_deref())
        .map_err(|e| ConfigError::from(e.at(&format!("routes.{name}"))))?;
    match set_route(shared, name, &set) {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(FaultdError::UnknownRoute(r)) => Err(Problem {
            error: format!("no route named {r:?}"),
            field: String::new(),
            status: StatusCode::NOT_FOUND,
        }),
        Err(FaultdError::Config(e)) => Err(e.into()),
        Err(other) => Err(bad_request(String::new(), other.to_string())),
    }
}

/// The schedule as the control API reports it.
#[derive(Debug, Serialize)]
struct ScheduleView {
    state: &'static str,
    phase: Option<String>,
    schedule_started_unix_ms: Option<u64>,
    phases: Vec<crate::recorder::PhaseEntry>,
    phases_entered: Vec<crate::recorder::PhaseEntry>,
}

async fn get_schedule(State(shared): State<Arc<Shared>>) -> Json<ScheduleView> {
    let now = Instant::now();
    let live = shared.live();
    let state = match live.clock {
        Clock::NotStarted => "not-started",
        Clock::Running { .. } => "running",
        Clock::Frozen { .. } => "stopped",
        Clock::Healthy { .. } => "healthy-reset",
    };
    let phases = live
        .plan
        .config
        .phase_names()
        .into_iter()
        .map(|(name, at)| crate::recorder::PhaseEntry {
            name,
            at: at.into(),
        })
        .collect();
    let view = ScheduleView {
        state,
        phase: live.current_phase(now),
        schedule_started_unix_ms: None,
        phases,
        phases_entered: live.phases_entered(now),
    };
    drop(live);
    Json(ScheduleView {
        schedule_started_unix_ms: shared.recorder.snapshot_started_unix_ms(),
        ..view
    })
}

async fn post_start(State(shared): State<Arc<Shared>>) -> StatusCode {
    start_schedule(&shared, Instant::now());
    StatusCode::NO_CONTENT
}

async fn post_stop(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.live_mut().stop(Instant::now());
    StatusCode::NO_CONTENT
}

async fn post_reset(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.live_mut().reset_to_healthy(Instant::now());
    StatusCode::NO_CONTENT
}

/// `GET /recording`'s query: `since=N` serves every series from bucket N on.
#[derive(Debug, Default, serde::Deserialize)]
struct RecordingQuery {
    #[serde(default)]
    since: usize,
}

async fn get_recording(
    State(shared): State<Arc<Shared>>,
    tcp: Option<axum::Extension<Arc<crate::tcp::TcpRoutes>>>,
    axum::extract::Query(query): axum::extract::Query<RecordingQuery>,
) -> Response {
    let from = query.since;
    let mut json = match serde_json::to_value(recording_since(&shared, from)) {
        Ok(v) => v,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    // TCP routes ride beside the HTTP ones, only when there are some, so the HTTP shape is unchanged.
    let mut tcp_routes = tcp.map(|t| t.recording()).unwrap_or_default();
    for route in tcp_routes.values_mut() {
        route.drop_buckets_before(from);
    }
    if let (false, Some(map)) = (tcp_routes.is_empty(), json.as_object_mut()) {
        map.insert(
            "tcp_routes".into(),
            serde_json::to_value(tcp_routes).unwrap_or_default(),
        );
    }
    Json(json).into_response()
}

/// Each call one by one, when the configuration correlates (`correlate:`); an empty list otherwise.
async fn get_traced_calls(
    State(shared): State<Arc<Shared>>,
) -> Json<Vec<crate::recorder::TracedCall>> {
    Json(shared.recorder.traced_calls())
}

/// A recording as `GET /recording` serves it, its TCP routes (`tcp_routes`) read as calls: what a runner reads
/// from a faultd it did not start.
pub fn recording_from_json(mut json: serde_json::Value) -> Result<Recording, serde_json::Error> {
    let tcp = json
        .as_object_mut()
        .and_then(|m| m.remove("tcp_routes"))
        .map(serde_json::from_value)
        .transpose()?
        .unwrap_or_default();
    let recording: Recording = serde_json::from_value(json)?;
    Ok(crate::tcp::record::with_tcp_routes(recording, tcp))
}

async fn get_metrics(
    State(shared): State<Arc<Shared>>,
    tcp: Option<axum::Extension<Arc<crate::tcp::TcpRoutes>>>,
) -> Response {
    let recorded = recording(&shared);
    let snapshot_dns = recorded.dns.clone();
    let snapshot = MetricsSnapshot {
        recording: recorded,
        open_connections: shared.recorder.open_connections(),
    };
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(snapshot));
    if let Some(axum::Extension(tcp)) = tcp {
        let routes = tcp.recording();
        let redis = routes
            .iter()
            .filter_map(|(name, r)| r.redis.clone().map(|x| (name.clone(), x)))
            .collect();
        registry.register_collector(Box::new(crate::tcp::record::TcpMetrics(routes)));
        registry.register_collector(Box::new(crate::tcp::protocol::redis::record::RedisMetrics(
            redis,
        )));
    }
    if let Some(dns) = &snapshot_dns {
        registry.register_collector(Box::new(crate::dns::record::DnsMetrics(dns.clone())));
    }
    if let Some(tls) = &shared.tls {
        registry.register_collector(Box::new(crate::tls::record::TlsMetrics(
            tls.recorder().snapshot(),
        )));
    }
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The recorder's totals, encoded at scrape time (nothing is counted twice on the hot path).
#[derive(Debug)]
struct MetricsSnapshot {
    recording: Recording,
    open_connections: u64,
}

impl prometheus_client::collector::Collector for MetricsSnapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let routes = &self.recording.routes;
        let gauge = |encoder: &mut DescriptorEncoder,
                     name: &str,
                     help: &str,
                     values: Vec<(Vec<(&str, &str)>, i64)>| {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (labels, v) in values {
                ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
            }
            Ok::<(), std::fmt::Error>(())
        };
        let counter = |encoder: &mut DescriptorEncoder,
                       name: &str,
                       help: &str,
                       values: Vec<(Vec<(&str, &str)>, u64)>| {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (labels, v) in values {
                ConstCounter::new(v).encode(family.encode_family(&labels)?)?;
            }
            Ok::<(), std::fmt::Error>(())
        };
        gauge(
            &mut encoder,
            "faultd_in_flight",
            "Calls faultd holds now",
            routes
                .iter()
                .map(|(r, v)| (vec![("route", r.as_str())], v.in_flight as i64))
                .collect(),
        )?;
        gauge(
            &mut encoder,
            "faultd_max_in_flight",
            "The most calls held at once since start",
            routes
                .iter()
                .map(|(r, v)| (vec![("route", r.as_str())], v.max_in_flight as i64))
                .collect(),
        )?;
        counter(
            &mut encoder,
            "faultd_arrivals",
            "Calls that arrived",
            routes
                .iter()
                .map(|(r, v)| (vec![("route", r.as_str())], v.totals.arrivals))
                .collect(),
        )?;
        let mut completed = Vec::new();
        let mut faults = Vec::new();
        for (r, v) in routes {
            let t = &v.totals;
            for (class, n) in [
                ("2xx", t.completed.c2xx),
                ("3xx", t.completed.c3xx),
                ("4xx", t.completed.c4xx),
                ("5xx", t.completed.c5xx),
            ] {
                completed.push((vec![("route", r.as_str()), ("class", class)], n));
            }
            for (kind, n) in [
                ("reset", t.resets),
                ("hang", t.hangs),
                ("empty", t.empty),
                ("malformed", t.malformed),
                ("truncated", t.truncated),
                ("abandoned", t.abandoned),
            ] {
                faults.push((vec![("route", r.as_str()), ("kind", kind)], n));
            }
        }
        counter(
            &mut encoder,
            "faultd_completed",
            "Calls answered in full, by status class",
            completed,
        )?;
        counter(
            &mut encoder,
            "faultd_ended_without_answer",
            "Calls that ended without a full answer, by kind",
            faults,
        )?;
        let entries = |count: fn(&crate::recorder::MatchCounts) -> u64| {
            routes
                .iter()
                .flat_map(|(r, v)| {
                    v.matched.iter().map(move |(entry, c)| {
                        (
                            vec![("route", r.as_str()), ("entry", entry.as_str())],
                            count(c),
                        )
                    })
                })
                .collect::<Vec<_>>()
        };
        counter(
            &mut encoder,
            "faultd_matched_calls",
            "Calls that met a matched entry's conditions and reached it, by route and entry",
            entries(|c| c.matched),
        )?;
        counter(
            &mut encoder,
            "faultd_matched_taken",
            "Calls a matched entry took, which got its behaviour, by route and entry",
            entries(|c| c.taken),
        )?;
        counter(
            &mut encoder,
            "faultd_unmatched",
            "Calls no route matched (answered 404)",
            vec![(vec![], self.recording.unmatched)],
        )?;
        counter(
            &mut encoder,
            "faultd_loops_detected",
            "Proxied calls that came back to this faultd (answered 508 Loop Detected, not forwarded again)",
            vec![(vec![], self.recording.loops_detected)],
        )?;
        counter(
            &mut encoder,
            "faultd_shed_connections",
            "Connections shed over the connection limit (answered 503)",
            vec![(
                vec![],
                self.recording.connections.iter().map(|c| c.shed).sum(),
            )],
        )?;
        gauge(
            &mut encoder,
            "faultd_open_connections",
            "Connections open now",
            vec![(vec![], self.open_connections as i64)],
        )?;
        let phase = self
            .recording
            .phases_entered
            .last()
            .map(|p| p.name.as_str())
            .unwrap_or("");
        gauge(
            &mut encoder,
            "faultd_phase",
            "The phase in force (value 1, phase as label)",
            vec![(vec![("phase", phase)], 1)],
        )?;
        Ok(())
    }
}
