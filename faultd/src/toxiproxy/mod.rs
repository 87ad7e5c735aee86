//! The Toxiproxy 2.x HTTP API, on a listener of its own (`faultd --toxiproxy-api 127.0.0.1:8474`), so existing
//! Toxiproxy clients and suites drive faultd's TCP routes unchanged.
//!
//! For: Toxiproxy's paths, JSON field names, defaults (toxicity 1.0, stream downstream, enabled true), status
//! codes and error shape (`{"error": ..., "status": N}`, for axum's own 405 and 413 too), as a thin layer over [`crate::tcp::TcpRoutes`]. A bad
//! body, an unknown toxic type, a negative attribute, a taken or non-loopback listen address: a 4xx in that shape,
//! and the other proxies keep forwarding. Not for: faultd's own control API (HTTP routes, schedules, the
//! recorder), which lives in `crate::control`.
//!
//! | method | path | answer |
//! | --- | --- | --- |
//! | GET | /version | the version, text |
//! | GET | /proxies | every proxy by name, with its toxics |
//! | POST | /proxies | 201 and the proxy; 409 if the name or port is taken; 400 on a bad body |
//! | POST | /populate | 201 and `{"proxies": [...]}`: creates what is missing, recreates what changed |
//! | GET, POST, DELETE | /proxies/{proxy} | the proxy; update it (`enabled: false` takes it down); 204 |
//! | GET, POST | /proxies/{proxy}/toxics | its toxics; add one (200 and the toxic) |
//! | GET, POST, DELETE | /proxies/{proxy}/toxics/{toxic} | one toxic; update it (attributes merged); 204 |
//! | POST | /reset | 204: every proxy enabled, every toxic removed |
//!
//! Proxies can also be given at start, in Toxiproxy's config file form with their toxics beside them
//! ([`load`], `faultd --toxics FILE`), which Toxiproxy itself cannot load.
//!
//! Differences from Toxiproxy: listen addresses are loopback unless faultd was started with `--allow-listen`
//! naming the address (`0.0.0.0` in a container), upstreams loopback unless in faultd's allow list, attributes outside their range (negative, more than a day) are refused rather than clamped,
//! unknown attribute names are refused, and faultd adds two toxic types (`stall`, `connect_delay`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api_errors;
use crate::tcp::{
    ProxySpec, ProxyUpdate, ProxyView, TcpError, TcpRoutes, ToxicSpec, ToxicUpdate, ToxicView,
};

/// The Toxiproxy version faultd's API follows, reported by `GET /version` beside faultd's own.
pub const API_VERSION: &str = "2.12.0";

/// An error in Toxiproxy's shape: `{"error": "...", "status": N}` with that status.
#[derive(Debug, Serialize)]
pub struct ApiError {
    /// What went wrong.
    pub error: String,
    /// The HTTP status, repeated in the body as Toxiproxy does.
    pub status: u16,
}

impl From<TcpError> for ApiError {
    fn from(e: TcpError) -> ApiError {
        ApiError {
            status: e.status(),
            error: e.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self)).into_response()
    }
}

/// Reads a JSON body; an empty body reads as `{}`, as Go's decoder leaves the defaults when nothing is sent.
fn body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        bytes
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            String::new()
        } else {
            format!("{path}: ")
        };
        ApiError {
            error: format!("bad request body: {at}{}", e.into_inner()),
            status: 400,
        }
    })
}

/// A proxy of a `--toxics` file: Toxiproxy's config entry (`name`, `listen`, `upstream`, `enabled`) and the
/// toxics to add to it, as `POST /proxies/{proxy}/toxics` takes them.
#[derive(Debug, serde::Deserialize)]
struct FileProxy {
    #[serde(flatten)]
    proxy: ProxySpec,
    #[serde(default)]
    toxics: Vec<ToxicSpec>,
}

/// Why a `--toxics` file was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not a JSON list of proxies.
    #[error("not a list of proxies in Toxiproxy's form ({0})")]
    Json(String),
    /// A proxy or one of its toxics was refused, as the API would refuse it.
    #[error("proxies[{index}] ({name:?}){at}: {error}")]
    Refused {
        /// Its place in the list.
        index: usize,
        /// Its name.
        name: String,
        /// `, toxics[N]` when a toxic was refused.
        at: String,
        /// Why.
        error: TcpError,
    },
}

/// Creates the proxies of a `--toxics` file (`text`) with their toxics, in order: a JSON list in the form of
/// Toxiproxy's own config file, each entry with a `toxics` list of its own. Each proxy takes connections only once
/// its toxics are in, so they are in force from its first connection.
pub fn load(routes: &TcpRoutes, text: &str) -> Result<Vec<ProxyView>, LoadError> {
    let proxies: Vec<FileProxy> = {
        let mut de = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut de).map_err(|e| LoadError::Json(e.to_string()))?
    };
    let mut views = Vec::new();
    for (index, p) in proxies.into_iter().enumerate() {
        let name = p.proxy.name.clone();
        let enabled = p.proxy.enabled;
        let refused = |at: String, error| LoadError::Refused {
            index,
            name: name.clone(),
            at,
            error,
        };
        routes
            .create(ProxySpec {
                enabled: false,
                ..p.proxy
            })
            .map_err(|e| refused(String::new(), e))?;
        for (i, toxic) in p.toxics.into_iter().enumerate() {
            routes
                .add_toxic(&name, toxic)
                .map_err(|e| refused(format!(", toxics[{i}]"), e))?;
        }
        let update = ProxyUpdate {
            enabled: Some(enabled),
            ..ProxyUpdate::default()
        };
        views.push(
            routes
                .update(&name, update)
                .map_err(|e| refused(String::new(), e))?,
        );
    }
    Ok(views)
}

type Routes = Arc<TcpRoutes>;

/// The API's router over `routes`.
pub fn router(routes: Routes) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/reset", post(reset))
        .route("/populate", post(populate))
        .route("/proxies", get(list).post(create))
        .route("/proxies/{proxy}", get(show).post(update).delete(delete))
        .route("/proxies/{proxy}/toxics", get(toxics).post(add_toxic))
        .route(
            "/proxies/{proxy}/toxics/{toxic}",
            get(show_toxic).post(update_toxic).delete(remove_toxic),
        )
        .fallback(|| async {
            ApiError {
                error: "not found".into(),
                status: 404,
            }
        })
        .with_state(routes)
        .layer(axum::middleware::from_fn_with_state(
            api_error as api_errors::Shape,
            api_errors::in_json,
        ))
}

/// The answer to an error axum gives by itself (a method the path does not take, a body too large), in
/// Toxiproxy's shape.
fn api_error(status: StatusCode, error: String) -> Response {
    ApiError {
        error,
        status: status.as_u16(),
    }
    .into_response()
}

async fn version() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain;charset=utf-8")],
        format!("{API_VERSION} (faultd {})", env!("CARGO_PKG_VERSION")),
    )
        .into_response()
}

async fn reset(State(routes): State<Routes>) -> Result<StatusCode, ApiError> {
    routes.reset()?;
    Ok(StatusCode::NO_CONTENT)
}

async fn populate(State(routes): State<Routes>, bytes: Bytes) -> Response {
    let specs: Vec<ProxySpec> = match body(&bytes) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    match routes.populate(specs) {
        Ok(proxies) => (
            StatusCode::CREATED,
            Json(serde_json::json!({ "proxies": proxies })),
        )
            .into_response(),
        Err((e, proxies)) => {
            let e = ApiError::from(e);
            let status =
                StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (
                status,
                Json(
                    serde_json::json!({ "error": e.error, "status": e.status, "proxies": proxies }),
                ),
            )
                .into_response()
        }
    }
}

async fn list(State(routes): State<Routes>) -> Response {
    Json(routes.list()).into_response()
}

async fn create(State(routes): State<Routes>, bytes: Bytes) -> Result<Response, ApiError> {
    let spec: ProxySpec = body(&bytes)?;
    let view = routes.create(spec)?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

async fn show(
    State(routes): State<Routes>,
    Path(proxy): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(routes.get(&proxy)?).into_response())
}

async fn update(
    State(routes): State<Routes>,
    Path(proxy): Path<String>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    routes.get(&proxy)?;
    let update: ProxyUpdate = body(&bytes)?;
    Ok(Json(routes.update(&proxy, update)?).into_response())
}

async fn delete(
    State(routes): State<Routes>,
    Path(proxy): Path<String>,
) -> Result<StatusCode, ApiError> {
    routes.delete(&proxy)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn toxics(
    State(routes): State<Routes>,
    Path(proxy): Path<String>,
) -> Result<Json<Vec<ToxicView>>, ApiError> {
    Ok(Json(routes.toxics(&proxy)?))
}

async fn add_toxic(
    State(routes): State<Routes>,
    Path(proxy): Path<String>,
    bytes: Bytes,
) -> Result<Json<ToxicView>, ApiError> {
    routes.get(&proxy)?;
    let spec: ToxicSpec = body(&bytes)?;
    Ok(Json(routes.add_toxic(&proxy, spec)?))
}

async fn show_toxic(
    State(routes): State<Routes>,
    Path((proxy, toxic)): Path<(String, String)>,
) -> Result<Json<ToxicView>, ApiError> {
    Ok(Json(routes.toxic(&proxy, &toxic)?))
}

async fn update_toxic(
    State(routes): State<Routes>,
    Path((proxy, toxic)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<Json<ToxicView>, ApiError> {
    routes.toxic(&proxy, &toxic)?;
    let update: ToxicUpdate = body(&bytes)?;
    Ok(Json(routes.update_toxic(&proxy, &toxic, update)?))
}

async fn remove_toxic(
    State(routes): State<Routes>,
    Path((proxy, toxic)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    routes.remove_toxic(&proxy, &toxic)?;
    Ok(StatusCode::NO_CONTENT)
}
