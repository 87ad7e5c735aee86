//! HTTP/2's compile step: templates (REST over HTTP/2, or gRPC calls) compiled once into a request head, a body
//! and a deadline, then rendered per arrival (weighted pick, path generators, a message with generators).
//!
//! Not for sending (`streams`) nor for reading the answer (`answer`).

use std::time::Duration;

use bytes::Bytes;
use faultline_proto::MessageDescriptor;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request};
use rand::rngs::StdRng;
use rand::Rng;

use super::grpc_message::{self, Body};
use crate::request::template::{check_renders, header, parse_path, render_path, PathPart, Weights};
use crate::request::trace::Tracing;
use crate::spec::RequestTemplate;
use crate::target::Target;
use crate::LoadError;

/// One template, ready to render: the head without its path, the body, the client deadline.
#[derive(Debug, Clone)]
pub(super) struct Template {
    method: Method,
    path: Vec<PathPart>,
    headers: HeaderMap,
    body: Body,
    grpc: bool,
    deadline: Option<Duration>,
    /// What the sample of its answers is called in the report: `grpc /pkg.Service/Method`, `GET /path`.
    pub(super) name: String,
    /// The type a gRPC answer decodes as, when the template names its `.proto` files.
    pub(super) answer: Option<MessageDescriptor>,
}

/// The compiled HTTP/2 mix.
#[derive(Debug, Clone)]
pub(crate) struct Mix {
    scheme_authority: String,
    templates: Vec<Template>,
    weights: Weights,
}

/// One rendered request.
pub(super) struct Call {
    pub(super) request: Request<()>,
    pub(super) body: Bytes,
    pub(super) grpc: bool,
    pub(super) deadline: Option<Duration>,
    /// The template's index in the mix.
    pub(super) template: usize,
}

impl Mix {
    /// Compiles and checks every template: one method (or `grpc`), a valid path, valid metadata and headers, a
    /// message in hex, from a readable file, or as JSON that fits its type in the template's `.proto` files.
    pub(crate) fn compile(
        templates: &[RequestTemplate],
        target: &Target,
    ) -> Result<Mix, LoadError> {
        let mut compiled = Vec::with_capacity(templates.len());
        let mut protos = grpc_message::ProtoCache::default();
        for (i, t) in templates.iter().enumerate() {
            let field = format!("load.requests[{i}]");
            let bad = |field: String, why: String| LoadError::InvalidSpec { field, why };
            let (method, path) = t.method_and_path().map_err(|why| bad(field.clone(), why))?;
            let grpc = t.grpc.is_some();
            if let Some(m) = &t.grpc {
                let segments: Vec<&str> = m.trim_start_matches('/').split('/').collect();
                if !m.starts_with('/')
                    || segments.len() != 2
                    || segments.iter().any(|s| s.is_empty())
                {
                    return Err(bad(
                        format!("{field}.grpc"),
                        format!(
                            "{m:?} is not a gRPC method; write it like /shop.Catalog/GetProduct"
                        ),
                    ));
                }
            }
            let parts = parse_path(path).map_err(|why| bad(field.clone(), why))?;
            if !grpc
                && (t.message.is_some()
                    || t.message_file.is_some()
                    || t.deadline.is_some()
                    || !t.proto.is_empty()
                    || t.proto_set.is_some())
            {
                return Err(bad(
                    field,
                    "message, message_file, proto and deadline belong to gRPC calls (`grpc: /pkg.Service/Method`)"
                        .into(),
                ));
            }
            let mut headers = HeaderMap::new();
            for (group, map) in [("headers", &t.headers), ("metadata", &t.metadata)] {
                for (name, value) in map {
                    let (n, v) = header(&field, group, name, value)?;
                    headers.append(n, v);
                }
            }
            let (body, answer) = if let Some(m) = &t.grpc {
                let message = grpc_message::compile(t, m, &field, &mut protos)?;
                headers.insert(
                    hyper::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/grpc"),
                );
                headers.insert(hyper::header::TE, HeaderValue::from_static("trailers"));
                if let Some(d) = t.deadline {
                    if d.get().is_zero() {
                        return Err(bad(
                            format!("{field}.deadline"),
                            "a deadline must be longer than 0s".into(),
                        ));
                    }
                    headers.insert(
                        HeaderName::from_static("grpc-timeout"),
                        grpc_timeout(d.get()),
                    );
                }
                (message.body, message.answer)
            } else {
                let body = Bytes::from(t.body.clone().unwrap_or_default());
                (Body::Fixed(body), None)
            };
            check_renders(&field, path, &parts)?;
            compiled.push(Template {
                method: Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET),
                path: parts,
                headers,
                body,
                grpc,
                deadline: t.deadline.map(|d| d.get()),
                name: match &t.grpc {
                    Some(m) => format!("grpc {m}"),
                    None => format!("{method} {path}"),
                },
                answer,
            });
        }
        Ok(Mix {
            scheme_authority: format!("http://{}", target.authority),
            templates: compiled,
            weights: Weights::new(templates.iter().map(|t| t.weight)),
        })
    }

    /// The request for arrival `index`, with generators drawn from `rng`.
    pub(super) fn render(&self, index: u64, rng: &mut StdRng) -> Call {
        let which = self.weights.pick(rng);
        let t = &self.templates[which];
        let path = render_path(&t.path, index, &mut |lo, hi| rng.random_range(lo..=hi));
        let mut request = Request::new(());
        *request.method_mut() = t.method.clone();
        *request.uri_mut() = format!("{}{path}", self.scheme_authority)
            .parse()
            .unwrap_or_default();
        *request.headers_mut() = t.headers.clone();
        Call {
            request,
            body: t.body.render(index, rng),
            grpc: t.grpc,
            deadline: t.deadline,
            template: which,
        }
    }
}

impl Call {
    /// Puts a correlated run's headers for arrival `index` on the call: its trace id, and its deadline from the
    /// load's timeout (`grpc-timeout` on a gRPC call, unless its template's own deadline is shorter). Returns the
    /// trace id.
    pub(super) fn trace(&mut self, tracing: &Tracing, index: u64) -> u128 {
        let (value, trace) = tracing.value(index);
        let headers = self.request.headers_mut();
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(tracing.header()),
            HeaderValue::try_from(value),
        ) {
            headers.insert(name, value);
        }
        let timeout = Duration::from_millis(tracing.deadline_ms);
        if self.grpc {
            if self.deadline.is_none_or(|d| d > timeout) {
                headers.insert(
                    HeaderName::from_static("grpc-timeout"),
                    grpc_timeout(timeout),
                );
            }
        } else if let Ok(name) = HeaderName::try_from(tracing.deadline_header()) {
            headers.insert(name, HeaderValue::from(tracing.deadline_ms));
        }
        trace
    }
}

impl Mix {
    /// Template `index` of the mix.
    pub(super) fn template(&self, index: usize) -> &Template {
        &self.templates[index.min(self.templates.len() - 1)]
    }
}

/// `grpc-timeout` for a deadline: the coarsest unit that keeps it exact within 8 digits.
fn grpc_timeout(d: Duration) -> HeaderValue {
    let micros = d.as_micros();
    let value = if micros < 100_000_000 {
        format!("{micros}u")
    } else {
        format!("{}m", d.as_millis().min(99_999_999))
    };
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("1S"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_templates_parse_and_mistakes_name_their_field() {
        let spec: crate::LoadSpec = serde_saphyr::from_str(
            "rate: 10/s\nrequests:\n  - { grpc: /shop.Catalog/GetProduct, message: 0a02, metadata: { x-a: b }, deadline: 250ms }\n",
        )
        .unwrap();
        spec.validate().unwrap();
        assert!(spec.is_http2());
        let cases = [
            ("{ grpc: shop.Catalog/Get }", "load.requests[0].grpc"),
            (
                "{ grpc: /shop.Catalog/Get, message: 0g }",
                "load.requests[0].message",
            ),
            ("{ get: /x, deadline: 1s }", "load.requests[0]"),
            ("{ grpc: /a.B/C, get: /x }", "load.requests[0]"),
        ];
        for (template, field) in cases {
            let spec: crate::LoadSpec =
                serde_saphyr::from_str(&format!("rate: 10/s\nrequests: [ {template} ]")).unwrap();
            let e = spec.validate().unwrap_err().to_string();
            assert!(e.starts_with(field), "{template}: {e}");
        }
        let mixed: crate::LoadSpec =
            serde_saphyr::from_str("rate: 10/s\nrequests: [ { grpc: /a.B/C }, { get: /x } ]")
                .unwrap();
        let e = mixed.validate().unwrap_err().to_string();
        assert!(e.contains("all HTTP/1.1 or all HTTP/2"), "{e}");
    }

    #[test]
    fn grpc_timeouts_keep_the_deadline_within_eight_digits() {
        assert_eq!(grpc_timeout(Duration::from_millis(250)), "250000u");
        assert_eq!(grpc_timeout(Duration::from_secs(300)), "300000m");
    }
}
