//! The innermost service: one HTTP call to the dependency with reqwest, its answer read in full, over cleartext or
//! TLS (an `https://` dependency, trusted through the CA the demo is given).
//!
//! Each call carries the caller's trace id in a `traceparent` of its own (a new span id) and, when the caller's
//! deadline is propagated, the attempt's remaining budget in `x-request-timeout` (see `context`).
//!
//! With a [`NameResolver`], each call first resolves the dependency's name (from its cache, usually) and goes to
//! the address it gives, with the name in `Host`.
//!
//! Not a limit of any kind: the connection pool is unbounded (idle connections kept per host without a cap), so
//! the bulkhead is the only bound on calls in flight, as the seeds' arithmetic assumes.
//!
//! TLS is rustls on the `ring` provider, handed to reqwest as a finished configuration: reqwest's own rustls
//! setup would need a process-wide default provider (or aws-lc-rs, a C build), and a library must not install
//! process-wide state. A handshake that fails is a [`CallError::Handshake`], so the layers above can tell it from
//! a connection that broke after it was set up.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::header::{CONTENT_TYPE, HOST};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tower::Service;

use super::resolve::NameResolver;
use super::{CallError, DepRequest, Reply};
use crate::context::{deadline_header, DEADLINE_HEADER, TRACEPARENT};
use crate::DemoError;

/// A reqwest client sized for the demo: no proxy (the dependency is on loopback), no cap on connections per
/// host, idle connections kept 90 s, TLS trusting the CAs of `ca_pem` only (or the system's roots without it).
/// Shared by every operation and instance.
pub fn http_client(ca_pem: Option<&str>) -> Result<reqwest::Client, DemoError> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(usize::MAX)
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true)
        .tls_backend_preconfigured(tls_config(ca_pem)?)
        .build()?)
}

/// The client side of TLS: rustls on `ring`, TLS 1.2 and 1.3, ALPN `http/1.1`, session resumption on (rustls'
/// in-memory cache), the roots of `ca_pem` (PEM, one or more certificates) or, without it, the system's.
pub fn tls_config(ca_pem: Option<&str>) -> Result<rustls::ClientConfig, DemoError> {
    let bad_ca = |message: String| DemoError::Invalid {
        field: "dependency CA".into(),
        message,
    };
    let mut roots = rustls::RootCertStore::empty();
    match ca_pem {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| bad_ca(format!("not a PEM certificate: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| bad_ca(format!("not a usable CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(bad_ca("holds no PEM certificate".into()));
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad_ca(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    // The demo's reqwest speaks HTTP/1.1 only; saying so in ALPN keeps a server that offers h2 from choosing it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Sends [`DepRequest`]s to the dependency at `base` (e.g. `http://127.0.0.1:9000`).
#[derive(Debug, Clone)]
pub struct DependencyClient {
    client: reqwest::Client,
    base: String,
    resolve: Option<Arc<NameResolver>>,
}

impl DependencyClient {
    /// Calls go to `base` followed by the request's path.
    pub fn new(client: reqwest::Client, base: &str) -> Self {
        DependencyClient {
            client,
            base: base.trim_end_matches('/').to_string(),
            resolve: None,
        }
    }

    /// Calls resolve `resolver`'s name first and go to the address it gives (the base URL's port and path kept).
    pub fn resolving(mut self, resolver: Option<Arc<NameResolver>>) -> Self {
        self.resolve = resolver;
        self
    }

    /// The base URL with `ip` in place of its host, and the `Host` the name gives.
    fn at(&self, ip: std::net::IpAddr, name: &str) -> Result<(String, String), CallError> {
        let mut url = reqwest::Url::parse(&self.base)
            .map_err(|e| CallError::Transport(format!("dependency URL: {e}")))?;
        let port = url.port_or_known_default().unwrap_or(80);
        url.set_ip_host(ip)
            .map_err(|_| CallError::Transport("dependency URL: no host to replace".into()))?;
        let host = if url.port().is_some() {
            format!("{name}:{port}")
        } else {
            name.to_string()
        };
        Ok((url.as_str().trim_end_matches('/').to_string(), host))
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
        let Some(resolver) = self.resolve.clone() else {
            return self.send(req, self.base.clone(), None);
        };
        let this = self.clone();
        Box::pin(async move {
            let ip = resolver
                .lookup()
                .await
                .map_err(|e| CallError::Transport(e.to_string()))?;
            let (base, host) = this.at(ip, resolver.name())?;
            this.send(req, base, Some(host)).await
        })
    }
}

impl DependencyClient {
    fn send(
        &self,
        req: DepRequest,
        base: String,
        host: Option<String>,
    ) -> Pin<Box<dyn Future<Output = Result<Reply, CallError>> + Send>> {
        let mut builder = self
            .client
            .request(req.method.clone(), format!("{base}{}", req.path));
        if let Some(host) = host {
            builder = builder.header(HOST, host);
        }
        if !req.body.is_empty() {
            builder = builder
                .header(CONTENT_TYPE, "application/json")
                .body(req.body.clone());
        }
        if let Some(key) = &req.idempotency_key {
            builder = builder.header("Idempotency-Key", key.as_str());
        }
        if let Some(parent) = req.context.child_traceparent() {
            builder = builder.header(TRACEPARENT, parent);
        }
        if let Some(budget) = req.context.call_budget(tokio::time::Instant::now()) {
            builder = builder.header(DEADLINE_HEADER, deadline_header(budget));
        }
        Box::pin(async move {
            let response = builder
                .send()
                .await
                .map_err(|e| match handshake_failure(&e) {
                    Some(reason) => CallError::Handshake(reason),
                    None => CallError::Transport(error_chain(&e)),
                })?;
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

/// The TLS error of a handshake that failed (`invalid peer certificate: Expired`), found in the error's causes.
/// rustls' error travels inside an `io::Error` (two, nested, through hyper-rustls), whose `source` skips what it
/// wraps, so each I/O cause is opened down to what it holds.
fn handshake_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let inner = e.downcast_ref::<std::io::Error>()?.get_ref()?;
        rustls_error(inner)
    }
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(tls) = rustls_error(c) {
            return Some(tls.to_string());
        }
        cause = c.source();
    }
    None
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
