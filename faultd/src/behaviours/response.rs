//! The healthy response: status, headers and a body of a configurable size.
//!
//! For: what a call gets when no fault takes it, so payload sizes can be realistic (a 2 KiB JSON price, a 200 KiB
//! report). Not for: error answers (`errors`) or forwarding (`proxy`).

use std::collections::BTreeMap;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use bytes::Bytes;
use faultline_units::Size;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_headers, check_status, Fault, Invalid};

/// The largest body faultd will build; bodies are built once per behaviour and shared by every call.
pub const MAX_BODY: u64 = 64 << 20;

/// The healthy answer: `{status: 200, body_size: 2KiB, headers: {content-type: application/json}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Response {
    /// The status; 200 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Response headers; `content-type: application/json` when absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The body size. The body is JSON (`{"pad":"xxx…"}`) of exactly this size when it is 12 bytes or more;
    /// `{"ok":true}` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_size: Option<Size>,
}

/// The error type of response bodies (a proxied upstream body can fail).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every data-plane response: built here, trickled by `slow_body`, forwarded by `proxy`.
pub type DataBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BodyError>;

/// A response built once and cloned per call (cloning `Bytes` and a small header map is cheap).
#[derive(Debug, Clone)]
pub struct PreparedResponse {
    /// The status to send.
    pub status: StatusCode,
    /// The headers to send.
    pub headers: HeaderMap,
    /// The body to send.
    pub body: Bytes,
}

impl Fault for Response {
    /// Checks the status, the headers and the body size.
    fn validate(&self) -> Result<(), Invalid> {
        if let Some(s) = self.status {
            check_status(s).map_err(|e| e.at("status"))?;
        }
        check_headers(&self.headers).map_err(|e| e.at("headers"))?;
        if let Some(size) = self.body_size {
            if size.bytes() > MAX_BODY {
                return Err(Invalid::new(
                    "body_size",
                    format!("{size} is above the 64MiB limit"),
                ));
            }
        }
        Ok(())
    }
}

impl Response {
    /// Builds the response once; call after `validate`.
    pub fn prepare(&self) -> Result<PreparedResponse, Invalid> {
        self.validate()?;
        let status = StatusCode::from_u16(self.status.unwrap_or(200))
            .map_err(|e| Invalid::new("status", e.to_string()))?;
        let mut headers = header_map(&self.headers)?;
        if self.headers.is_empty() {
            headers.insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        let body = match self.body_size {
            None => Bytes::from_static(b"{\"ok\":true}"),
            Some(size) => json_body_of_size(size.bytes() as usize),
        };
        Ok(PreparedResponse {
            status,
            headers,
            body,
        })
    }
}

/// Converts validated header strings into a `HeaderMap`.
pub fn header_map(headers: &BTreeMap<String, String>) -> Result<HeaderMap, Invalid> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| Invalid::new(name, "is not a valid header name"))?;
        let v = HeaderValue::from_str(value)
            .map_err(|_| Invalid::new(name, "is not a valid header value"))?;
        map.append(n, v);
    }
    Ok(map)
}

/// A JSON document of exactly `size` bytes (`{"pad":"xxx…"}`), or `size` bytes of `x` when too small for one.
pub fn json_body_of_size(size: usize) -> Bytes {
    const FRAME: usize = "{\"pad\":\"\"}".len();
    if size < FRAME + 2 {
        return Bytes::from(vec![b'x'; size]);
    }
    let mut body = Vec::with_capacity(size);
    body.extend_from_slice(b"{\"pad\":\"");
    body.resize(size - 2, b'x');
    body.extend_from_slice(b"\"}");
    Bytes::from(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_size_gives_valid_json_of_exactly_that_size() {
        for size in [12, 100, 2048, 200 * 1024] {
            let body = json_body_of_size(size);
            assert_eq!(body.len(), size);
            let _: serde_json::Value = serde_json::from_slice(&body).unwrap();
        }
        assert_eq!(json_body_of_size(3).len(), 3);
    }

    #[test]
    fn default_response_is_200_json() {
        let p = Response::default().prepare().unwrap();
        assert_eq!(p.status, StatusCode::OK);
        assert_eq!(p.headers["content-type"], "application/json");
        assert_eq!(&p.body[..], b"{\"ok\":true}");
    }

    #[test]
    fn bad_status_and_header_are_refused_naming_the_field() {
        let bad = Response {
            status: Some(42),
            ..Response::default()
        };
        assert_eq!(bad.validate().unwrap_err().field, "status");
        let mut headers = BTreeMap::new();
        headers.insert("bad header".to_string(), "x".to_string());
        let bad = Response {
            headers,
            ..Response::default()
        };
        assert_eq!(bad.validate().unwrap_err().field, "headers.bad header");
    }
}
