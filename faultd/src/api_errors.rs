//! The error answers axum gives by itself on faultd's HTTP APIs, in each API's JSON error shape.
//!
//! For: an unknown path (404, an empty body), a method the path does not take (405, empty), a body over the limit
//! (413, plain text), a path segment that does not decode (400, plain text): rewritten as JSON with their status
//! and headers (a 405's `allow`) kept and the method and path named, so a client reads every error the same way.
//! Not for: the errors the handlers give, which are already in their API's shape; nor the data plane, whose
//! answers are the behaviours'.

use axum::extract::{Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;

/// Builds an API's error answer from a status and a message.
pub(crate) type Shape = fn(StatusCode, String) -> Response;

/// The most of a plain-text error body read to quote it: axum's own are one line.
const QUOTED: usize = 4096;

/// Middleware (`middleware::from_fn_with_state(shape, in_json)`): any error answer that is not JSON is given in
/// `shape`.
pub(crate) async fn in_json(State(shape): State<Shape>, request: Request, next: Next) -> Response {
    let asked = format!("{} {}", request.method(), request.uri().path());
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, QUOTED)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let detail = match (status, parts.headers.get(axum::http::header::ALLOW)) {
        (StatusCode::NOT_FOUND, _) if text.is_empty() => "no such path".to_string(),
        (StatusCode::METHOD_NOT_ALLOWED, Some(allow)) => format!(
            "method not allowed (this path takes {})",
            allow.to_str().unwrap_or("other methods")
        ),
        _ if !text.is_empty() => text,
        _ => status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase(),
    };
    let mut answer = shape(status, format!("{asked}: {detail}"));
    for (name, value) in &parts.headers {
        if name != CONTENT_TYPE && name != CONTENT_LENGTH {
            answer.headers_mut().insert(name.clone(), value.clone());
        }
    }
    answer
}
