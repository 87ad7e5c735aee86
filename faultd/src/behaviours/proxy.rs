//! Proxy: forward the call to a real upstream, so faultd can sit in front of a real dependency with its faults
//! (delays, errors, hangs, ...) applied in the path.
//!
//! For: `http://` and `https://` upstreams (the latter verified against the system's roots, or only against the CA
//! file given with `ca`), the path and query appended to the upstream URL. Not for: rewriting what the upstream
//! answers (the faults replace the answer, they do not edit it).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use axum::http::{header, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Behaviour, Fault, Invalid};
use crate::loops::{own_listener, HopId};

/// Forwards healthy calls to an upstream: `proxy: http://127.0.0.1:8080`, `proxy: https://api.example.com`
/// (verified against the system's roots), or `proxy: { url: https://127.0.0.1:8443, ca: upstream-ca.pem }`
/// (verified against that CA file only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Proxy {
    /// The upstream's URL.
    Url(String),
    /// An `https://` upstream and the CA (PEM) its certificate must chain to.
    WithCa {
        /// The upstream's URL.
        url: String,
        /// The CA file (PEM) to verify the upstream against, instead of the system's roots.
        ca: PathBuf,
    },
}

#[cfg(feature = "tls")]
type Connector = hyper_rustls::HttpsConnector<HttpConnector>;
#[cfg(not(feature = "tls"))]
type Connector = HttpConnector;

type Upstreams = Client<Connector, Incoming>;

/// The HTTP clients proxied calls share: one connection pool for upstreams verified against the system's roots
/// (and plain ones), and one per CA file given, built on its first call.
pub struct ProxyClient {
    system: Upstreams,
    by_ca: Mutex<HashMap<PathBuf, Upstreams>>,
    /// This faultd's mark on the calls it forwards, so that one that comes back is not forwarded again.
    pub hop: HopId,
}

/// A client for forwarding calls.
pub fn proxy_client() -> ProxyClient {
    ProxyClient {
        // The system's roots are read once; on a machine without any, an https:// upstream fails its handshake
        // (answered 502 with the reason) and http:// ones work as ever.
        system: client(None).expect("a client without a CA file reads no file and cannot fail"),
        by_ca: Mutex::default(),
        hop: HopId::new(),
    }
}

#[cfg(feature = "tls")]
fn client(ca: Option<&Path>) -> Result<Upstreams, String> {
    let config = crate::tls::upstream_client_config(ca)?;
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

#[cfg(not(feature = "tls"))]
fn client(_ca: Option<&Path>) -> Result<Upstreams, String> {
    Ok(Client::builder(TokioExecutor::new()).build_http())
}

impl ProxyClient {
    /// The client for an upstream verified against `ca`, or the system's roots.
    fn for_ca(&self, ca: Option<&Path>) -> Result<Upstreams, String> {
        let Some(ca) = ca else {
            return Ok(self.system.clone());
        };
        let mut by_ca = self.by_ca.lock().map_err(|_| "the client cache is poisoned")?;
        if let Some(c) = by_ca.get(ca) {
            return Ok(c.clone());
        }
        let c = client(Some(ca))?;
        by_ca.insert(ca.to_path_buf(), c.clone());
        Ok(c)
    }
}

impl Fault for Proxy {
    /// Accepts `http://host[:port][/prefix]` and `https://...` (in a build with TLS); a `ca` only with
    /// `https://`, and it must be a readable PEM file of CA certificates.
    fn validate(&self) -> Result<(), Invalid> {
        let url = self.url();
        let uri: Uri = url
            .parse()
            .map_err(|e| Invalid::new("", format!("{url:?} is not a URL: {e}")))?;
        match (uri.scheme_str(), self.ca()) {
            (Some("http"), None) => {}
            (Some("http"), Some(_)) => {
                return Err(Invalid::new(
                    "ca",
                    format!("{url:?} is plain http://: a CA applies to https:// upstreams only"),
                ))
            }
            (Some("https"), ca) if cfg!(feature = "tls") => {
                if let Some(ca) = ca {
                    client(Some(ca)).map_err(|e| Invalid::new("ca", e))?;
                }
            }
            _ => {
                return Err(Invalid::new(
                    "",
                    format!("{url:?}: only http:// and https:// upstreams are supported"),
                ))
            }
        }
        if uri.authority().is_none() {
            return Err(Invalid::new("", format!("{url:?} has no host")));
        }
        if uri.query().is_some() {
            return Err(Invalid::new(
                "",
                format!("{url:?}: the upstream URL cannot have a query"),
            ));
        }
        Ok(())
    }

    /// A proxied call gets the upstream's answer, so faultd's own healthy response and its trickle do not apply.
    fn fits(&self, behaviour: &Behaviour) -> Result<(), Invalid> {
        if behaviour.response.is_some() {
            return Err(Invalid::new(
                "response",
                "give either proxy or response: a proxied call gets the upstream's answer",
            ));
        }
        if behaviour.slow_body.is_some() {
            return Err(Invalid::new(
                "slow_body",
                "slow_body applies to faultd's own responses, not to proxied ones",
            ));
        }
        Ok(())
    }
}

impl Proxy {
    /// The upstream's URL.
    pub fn url(&self) -> &str {
        match self {
            Proxy::Url(url) | Proxy::WithCa { url, .. } => url,
        }
    }

    /// The CA file the upstream is verified against, instead of the system's roots.
    pub fn ca(&self) -> Option<&Path> {
        match self {
            Proxy::Url(_) => None,
            Proxy::WithCa { ca, .. } => Some(ca),
        }
    }

    /// Refuses an upstream that is one of faultd's own listeners (`own`): every call would come back.
    pub fn check_not_own(&self, own: &[SocketAddr]) -> Result<(), Invalid> {
        let Ok(uri) = self.url().parse::<Uri>() else {
            return Ok(());
        };
        let Some(host) = uri.host() else {
            return Ok(());
        };
        let default_port = if uri.scheme_str() == Some("https") { 443 } else { 80 };
        let port = uri.port_u16().unwrap_or(default_port);
        match own_listener(host, port, own) {
            Some(listener) => Err(Invalid::new(
                "",
                format!(
                    "{:?} is faultd's own listener {listener}: every call would come back to faultd and be \
                     forwarded again, without end",
                    self.url()
                ),
            )),
            None => Ok(()),
        }
    }

    /// Sends `request` to the upstream: its path and query appended to the upstream URL, its Host header
    /// replaced by the upstream's, this faultd's id added to its `faultd-hop` header. An unreachable upstream is
    /// answered 502 with the reason; a call that already went through this faultd is not sent (508, see
    /// [`crate::loops`]).
    pub async fn forward(
        &self,
        client: &ProxyClient,
        mut request: Request<Incoming>,
    ) -> Result<Response<Incoming>, (StatusCode, String)> {
        let path = request
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let target = format!("{}{}", self.url().trim_end_matches('/'), path);
        let uri: Uri = target.parse().map_err(|e| {
            (
                StatusCode::BAD_GATEWAY,
                format!("bad upstream URL {target}: {e}"),
            )
        })?;
        if client.hop.came_back(request.headers()) {
            return Err((StatusCode::LOOP_DETECTED, self.url().to_string()));
        }
        *request.uri_mut() = uri;
        request.headers_mut().remove(header::HOST);
        client.hop.stamp(request.headers_mut());
        let client = client
            .for_ca(self.ca())
            .map_err(|e| (StatusCode::BAD_GATEWAY, e))?;
        client.request(request).await.map_err(|e| {
            // The handshake's reason (an unknown issuer, an expired certificate) is in the error's sources.
            let mut reason = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                reason = format!("{reason}: {s}");
                source = s.source();
            }
            (
                StatusCode::BAD_GATEWAY,
                format!("upstream {} failed: {reason}", self.url()),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_and_https_upstreams_with_a_host_are_accepted_and_a_ca_only_with_https() {
        assert!(Proxy::Url("http://127.0.0.1:8080".into()).validate().is_ok());
        assert!(Proxy::Url("http://127.0.0.1:8080/prefix".into())
            .validate()
            .is_ok());
        assert!(Proxy::Url("https://example.com".into()).validate().is_ok());
        assert!(Proxy::Url("ftp://example.com".into())
            .validate()
            .unwrap_err()
            .message
            .contains("only http:// and https://"));
        let with_ca = |url: &str, ca: &str| Proxy::WithCa {
            url: url.into(),
            ca: ca.into(),
        };
        let e = with_ca("http://127.0.0.1:8080", "ca.pem").validate().unwrap_err();
        assert_eq!(e.field, "ca");
        let e = with_ca("https://127.0.0.1:8443", "/nonexistent/ca.pem")
            .validate()
            .unwrap_err();
        assert!(e.message.contains("/nonexistent/ca.pem"), "{}", e.message);
        assert!(Proxy::Url("not a url".into())
            .validate()
            .unwrap_err()
            .message
            .contains("is not a URL"));
        assert!(Proxy::Url("http://h/?q=1".into())
            .validate()
            .unwrap_err()
            .message
            .contains("query"));
    }
}
