//! What faultd does with a call that matches no route: answer it 404 (the default), or forward it to an upstream
//! (`unmatched: { proxy: URL }`), so that the routes a scenario names are faulted and every other call of the
//! service still reaches the real dependency. Either way the call is counted as unmatched ([`crate::recorder`]).
//! Not for: the `unmatched:` section itself (`crate::config::Unmatched`), routing (`crate::schedule::routing`) or
//! the forwarding (`crate::behaviours::proxy`).

use axum::http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::actions::forwarded;
use super::body::plain;
use super::shared::Shared;
use crate::behaviours::DataBody;
use crate::schedule::Plan;

pub use crate::config::{Forward, Unmatched};

/// Counts a call that matched no route of `plan`, and answers it: forwarded to `unmatched.proxy`, or 404.
pub(super) async fn answer(
    shared: &Shared,
    plan: &Plan,
    request: Request<Incoming>,
) -> Response<DataBody> {
    shared
        .recorder
        .unmatched(request.method().as_str(), request.uri().path());
    if let Some(upstream) = plan.config.unmatched.as_ref().and_then(|u| u.proxy()) {
        return forwarded(shared, upstream, request).await;
    }
    let body = format!(
        "faultd: no route matches {} {}\n",
        request.method(),
        request.uri().path()
    );
    plain(StatusCode::NOT_FOUND, body)
}
