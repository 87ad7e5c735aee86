//! A tiny controllable dependency for the demo's HTTP tests: per path prefix, a status and a delay that the test
//! changes at will; it counts calls and the most calls in flight at once per prefix, and records webhook posts.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Router;

#[derive(Default)]
pub struct Route {
    pub status: Mutex<u16>,
    pub delay: Mutex<Duration>,
    pub calls: AtomicUsize,
    pub in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    pub keys: Mutex<Vec<String>>,
    /// Per call: its `traceparent` and `x-request-timeout`, as received.
    pub propagated: Mutex<Vec<(Option<String>, Option<String>)>>,
    /// Per call, once it ended: how long it lasted and whether it was answered (not abandoned by the demo).
    pub ended: Mutex<Vec<(Duration, bool)>>,
}

#[derive(Default)]
pub struct Fake {
    pub routes: HashMap<&'static str, Route>,
    pub webhook: Mutex<Vec<serde_json::Value>>,
}

pub const PREFIXES: [&str; 5] = [
    "/price/",
    "/reviews/",
    "/payments/",
    "/report",
    "/accounts/",
];

impl Fake {
    pub fn route(&self, prefix: &str) -> &Route {
        &self.routes[prefix]
    }
    pub fn set(&self, prefix: &str, status: u16, delay: Duration) {
        *self.route(prefix).status.lock().unwrap() = status;
        *self.route(prefix).delay.lock().unwrap() = delay;
    }
    pub fn calls(&self, prefix: &str) -> usize {
        self.route(prefix).calls.load(Ordering::SeqCst)
    }
    pub fn max_in_flight(&self, prefix: &str) -> usize {
        self.route(prefix).max_in_flight.load(Ordering::SeqCst)
    }
}

struct Leave<'a> {
    route: &'a Route,
    start: std::time::Instant,
    answered: bool,
}
impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.route.in_flight.fetch_sub(1, Ordering::SeqCst);
        let entry = (self.start.elapsed(), self.answered);
        self.route.ended.lock().unwrap().push(entry);
    }
}

fn header(req: &Request, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn handle(State(fake): State<Arc<Fake>>, req: Request) -> axum::response::Response {
    let path = req.uri().path().to_string();
    if path == "/webhook" {
        let body = axum::body::to_bytes(req.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        if let Ok(v) = serde_json::from_slice(&body) {
            fake.webhook.lock().unwrap().push(v);
        }
        return StatusCode::NO_CONTENT.into_response();
    }
    let Some(prefix) = PREFIXES.iter().find(|p| path.starts_with(**p)) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let route = fake.route(prefix);
    if let Some(key) = req
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
    {
        route.keys.lock().unwrap().push(key.to_string());
    }
    let propagated = (
        header(&req, "traceparent"),
        header(&req, "x-request-timeout"),
    );
    route.propagated.lock().unwrap().push(propagated);
    route.calls.fetch_add(1, Ordering::SeqCst);
    let now = route.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    route.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let mut leave = Leave {
        route,
        start: std::time::Instant::now(),
        answered: false,
    };
    let delay = *route.delay.lock().unwrap();
    let status = *route.status.lock().unwrap();
    tokio::time::sleep(delay).await;
    leave.answered = true;
    let body = Bytes::from(format!("{{\"path\":\"{path}\"}}"));
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body,
    )
        .into_response()
}

/// Starts the fake on a free loopback port; every route answers 200 at once until changed.
pub async fn start() -> (Arc<Fake>, SocketAddr) {
    let mut fake = Fake::default();
    for p in PREFIXES {
        let route = Route::default();
        *route.status.lock().unwrap() = 200;
        fake.routes.insert(p, route);
    }
    let fake = Arc::new(fake);
    let app = Router::new().fallback(handle).with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, addr)
}
