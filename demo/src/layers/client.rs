//! The innermost service: one HTTP call to the dependency with reqwest, its answer read in full.
//!
//! Not a limit of any kind: the connection pool is unbounded (idle connections kept per host without a cap), so
//! the bulkhead is the only bound on calls in flight, as the seeds' arithmetic assumes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::header::CONTENT_TYPE;
use tower::Service;

use super::{CallError, DepRequest, Reply};

/// A reqwest client sized for the demo: no proxy (the dependency is on loopback), no cap on connections per
/// host, idle connections kept 90 s. Shared by every operation and instance.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(usize::MAX)
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true)
        .build()
}

/// Sends [`DepRequest`]s to the dependency at `base` (e.g. `http://127.0.0.1:9000`).
#[derive(Debug, Clone)]
pub struct DependencyClient {
    client: reqwest::Client,
    base: String,
}

impl DependencyClient {
    /// Calls go to `base` followed by the request's path.
    pub fn new(client: reqwest::Client, base: &str) -> Self {
        DependencyClient {
            client,
            base: base.trim_end_matches('/').to_string(),
        }
    }
}

impl Service<DepRequest> for DependencyClient {
    type Response = Reply;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<Reply, CallError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: DepRequest) -> Self::Future {
        let mut builder = self
            .client
            .request(req.method.clone(), format!("{}{}", self.base, req.path));
        if !req.body.is_empty() {
            builder = builder
                .header(CONTENT_TYPE, "application/json")
                .body(req.body.clone());
        }
        if let Some(key) = &req.idempotency_key {
            builder = builder.header("Idempotency-Key", key.as_str());
        }
        Box::pin(async move {
            let response = builder
                .send()
                .await
                .map_err(|e| CallError::Transport(error_chain(&e)))?;
            let status = response.status();
            let content_type = response.headers().get(CONTENT_TYPE).cloned();
            let body = response
                .bytes()
                .await
                .map_err(|e| CallError::Transport(error_chain(&e)))?;
            if status.is_server_error() {
                return Err(CallError::Status(status));
            }
            Ok(Reply {
                status,
                body,
                content_type,
            })
        })
    }
}

/// The error and its causes on one line ("error sending request: connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
