//! Proxy: forward the call to a real upstream, so faultd can sit in front of a real dependency with its faults
//! (delays, errors, hangs, ...) applied in the path.
//!
//! For: plain-HTTP upstreams, the path and query appended to the upstream URL. Not for: TLS upstreams, or
//! rewriting what the upstream answers (the faults replace the answer, they do not edit it).

use axum::http::{header, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Behaviour, Fault, Invalid};

/// Forwards healthy calls to this upstream URL, written `proxy: http://127.0.0.1:8080`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Proxy(pub String);

/// The HTTP client every proxied call shares (one connection pool per faultd).
pub type ProxyClient = Client<HttpConnector, Incoming>;

/// A client for forwarding calls.
pub fn proxy_client() -> ProxyClient {
    Client::builder(TokioExecutor::new()).build_http()
}

impl Fault for Proxy {
    /// Accepts `http://host[:port][/prefix]` only.
    fn validate(&self) -> Result<(), Invalid> {
        let uri: Uri = self
            .0
            .parse()
            .map_err(|e| Invalid::new("", format!("{:?} is not a URL: {e}", self.0)))?;
        if uri.scheme_str() != Some("http") {
            return Err(Invalid::new(
                "",
                format!("{:?}: only http:// upstreams are supported", self.0),
            ));
        }
        if uri.authority().is_none() {
            return Err(Invalid::new("", format!("{:?} has no host", self.0)));
        }
        if uri.query().is_some() {
            return Err(Invalid::new(
                "",
                format!("{:?}: the upstream URL cannot have a query", self.0),
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
    /// Sends `request` to the upstream: its path and query appended to the upstream URL, its Host header
    /// replaced by the upstream's. An unreachable upstream is answered 502 with the reason.
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
        let target = format!("{}{}", self.0.trim_end_matches('/'), path);
        let uri: Uri = target.parse().map_err(|e| {
            (
                StatusCode::BAD_GATEWAY,
                format!("bad upstream URL {target}: {e}"),
            )
        })?;
        *request.uri_mut() = uri;
        request.headers_mut().remove(header::HOST);
        client.request(request).await.map_err(|e| {
            (
                StatusCode::BAD_GATEWAY,
                format!("upstream {} failed: {e}", self.0),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_upstreams_with_a_host_are_accepted() {
        assert!(Proxy("http://127.0.0.1:8080".into()).validate().is_ok());
        assert!(Proxy("http://127.0.0.1:8080/prefix".into())
            .validate()
            .is_ok());
        assert!(Proxy("https://example.com".into())
            .validate()
            .unwrap_err()
            .message
            .contains("only http://"));
        assert!(Proxy("not a url".into())
            .validate()
            .unwrap_err()
            .message
            .contains("is not a URL"));
        assert!(Proxy("http://h/?q=1".into())
            .validate()
            .unwrap_err()
            .message
            .contains("query"));
    }
}
