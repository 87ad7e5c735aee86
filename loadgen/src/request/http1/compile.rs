//! HTTP/1.1's compile step: templates compiled once into wire bytes, then rendered per arrival (weighted pick,
//! path generators); and a replay's lines as wire bytes.
//!
//! A template without generators is rendered to its wire bytes once, at compile time: each arrival then costs a
//! reference-count increment, not a URI and a header map. A template with generators renders its path into the
//! bytes between a prefix (method) and a suffix (version, headers, body) that are themselves rendered once.
//!
//! Not for sending: rendering produces the request's bytes; the lanes decide when they go out.

use bytes::{BufMut, Bytes, BytesMut};
use hyper::Method;
use rand::Rng;

use crate::request::template::{check_renders, header, parse_path, render_path, PathPart, Weights};
use crate::request::trace::Tracing;
use crate::spec::RequestTemplate;
use crate::target::Target;
use crate::LoadError;

/// A request as it goes on the wire: the whole HTTP/1.1 message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Wire {
    /// Request line, headers and body.
    pub(crate) bytes: Bytes,
    /// A HEAD request: its response has a head and no body, whatever its content-length says.
    pub(crate) head: bool,
}

#[derive(Debug, Clone)]
struct Compiled {
    path: Vec<PathPart>,
    /// `METHOD ` (up to the path).
    prefix: Bytes,
    /// ` HTTP/1.1\r\n`, the headers, the blank line and the body.
    suffix: Bytes,
    /// The whole request when the path has no generators.
    fixed: Option<Bytes>,
    head: bool,
}

/// The compiled templates with their weights.
#[derive(Debug, Clone)]
pub(crate) struct Mix {
    templates: Vec<Compiled>,
    weights: Weights,
}

impl Mix {
    /// Compiles and checks every template: one method, a path with known generators that renders to a valid
    /// URI, valid header names and values, nothing that belongs to gRPC calls.
    pub(crate) fn compile(
        templates: &[RequestTemplate],
        target: &Target,
    ) -> Result<Mix, LoadError> {
        if let Some(i) = templates.iter().position(|r| {
            r.message.is_some()
                || r.message_file.is_some()
                || !r.proto.is_empty()
                || r.proto_set.is_some()
                || r.deadline.is_some()
                || !r.metadata.is_empty()
        }) {
            return Err(LoadError::InvalidSpec {
                field: format!("load.requests[{i}]"),
                why: "message, message_file, proto, metadata and deadline belong to gRPC calls (`grpc: /pkg.Service/Method`)"
                    .into(),
            });
        }
        let mut compiled = Vec::with_capacity(templates.len());
        for (i, t) in templates.iter().enumerate() {
            let field = format!("load.requests[{i}]");
            let bad = |field: String, why: String| LoadError::InvalidSpec { field, why };
            let (method, path) = t.method_and_path().map_err(|why| bad(field.clone(), why))?;
            let parts = parse_path(path).map_err(|why| bad(field.clone(), why))?;
            let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
            let body = t.body.clone().unwrap_or_default();
            let mut suffix = BytesMut::with_capacity(128 + body.len());
            suffix.put_slice(b" HTTP/1.1\r\n");
            let (mut has_host, mut has_length) = (false, false);
            for (name, value) in &t.headers {
                let (name, value) = header(&field, "headers", name, value)?;
                has_host |= name == hyper::header::HOST;
                has_length |= name == hyper::header::CONTENT_LENGTH;
                if name == hyper::header::TRANSFER_ENCODING {
                    return Err(bad(
                        format!("{field}.headers"),
                        "transfer-encoding cannot be set: the body is sent with its content-length"
                            .into(),
                    ));
                }
                put_header(&mut suffix, name.as_str().as_bytes(), value.as_bytes());
            }
            if !has_host {
                put_header(&mut suffix, b"host", target.authority.as_str().as_bytes());
            }
            // As hyper does: a GET or HEAD without a body says nothing about one; other methods say 0.
            let bodyless = matches!(method, Method::GET | Method::HEAD) && body.is_empty();
            if !has_length && !bodyless {
                put_header(
                    &mut suffix,
                    b"content-length",
                    body.len().to_string().as_bytes(),
                );
            }
            suffix.put_slice(b"\r\n");
            suffix.put_slice(body.as_bytes());
            let mut prefix = BytesMut::new();
            prefix.put_slice(method.as_str().as_bytes());
            prefix.put_u8(b' ');
            let mut c = Compiled {
                fixed: None,
                path: parts,
                prefix: prefix.freeze(),
                suffix: suffix.freeze(),
                head: method == Method::HEAD,
            };
            if !c.path.iter().any(|p| !matches!(p, PathPart::Literal(_))) {
                c.fixed = Some(c.assemble(&render_path(&c.path, 0, &mut |lo, _| lo)));
            }
            check_renders(&field, path, &c.path)?;
            compiled.push(c);
        }
        Ok(Mix {
            templates: compiled,
            weights: Weights::new(templates.iter().map(|t| t.weight)),
        })
    }

    /// The request for arrival `index`, with generators drawn from `rng`.
    pub(crate) fn render(&self, index: u64, rng: &mut impl Rng) -> Wire {
        let t = &self.templates[self.weights.pick(rng)];
        let bytes = match &t.fixed {
            Some(fixed) => fixed.clone(),
            None => t.assemble(&render_path(&t.path, index, &mut |lo, hi| {
                rng.random_range(lo..=hi)
            })),
        };
        Wire {
            bytes,
            head: t.head,
        }
    }

    /// The number of templates (for tests and summaries).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.templates.len()
    }
}

impl Wire {
    /// The request with a correlated run's headers for arrival `index` (its trace id, and the deadline from the
    /// load's timeout) put right after its request line, and that trace id.
    pub(crate) fn traced(&self, tracing: &Tracing, index: u64) -> (Wire, u128) {
        let (value, trace) = tracing.value(index);
        let line = self
            .bytes
            .windows(2)
            .position(|w| w == b"\r\n")
            .map_or(self.bytes.len(), |p| p + 2);
        let mut out = BytesMut::with_capacity(self.bytes.len() + 128);
        out.put_slice(&self.bytes[..line]);
        put_header(&mut out, tracing.header().as_bytes(), value.as_bytes());
        put_header(
            &mut out,
            tracing.deadline_header().as_bytes(),
            tracing.deadline_ms.to_string().as_bytes(),
        );
        out.put_slice(&self.bytes[line..]);
        (
            Wire {
                bytes: out.freeze(),
                head: self.head,
            },
            trace,
        )
    }
}

impl Compiled {
    fn assemble(&self, path: &str) -> Bytes {
        let mut out = BytesMut::with_capacity(self.prefix.len() + path.len() + self.suffix.len());
        out.put_slice(&self.prefix);
        out.put_slice(path.as_bytes());
        out.put_slice(&self.suffix);
        out.freeze()
    }
}

fn put_header(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.put_slice(name);
    out.put_slice(b": ");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

/// A replay's line as wire bytes, `METHOD PATH` with no body and the target as host: what
/// `replay::Player` hands the dispatcher for each of its arrivals.
pub(crate) fn replayed(target: &Target) -> impl Fn(&str, &str) -> Wire + Send + 'static {
    let authority = Bytes::copy_from_slice(target.authority.as_str().as_bytes());
    move |method, path| {
        let mut out = BytesMut::with_capacity(64 + path.len());
        out.put_slice(method.as_bytes());
        out.put_u8(b' ');
        out.put_slice(path.as_bytes());
        out.put_slice(b" HTTP/1.1\r\nhost: ");
        out.put_slice(&authority);
        out.put_slice(b"\r\n");
        // As hyper does: a GET, HEAD or OPTIONS without a body says nothing about one; other methods say 0.
        if !matches!(method, "GET" | "HEAD" | "OPTIONS") {
            out.put_slice(b"content-length: 0\r\n");
        }
        out.put_slice(b"\r\n");
        Wire {
            bytes: out.freeze(),
            head: method == Method::HEAD.as_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn target() -> Target {
        Target::parse("http://127.0.0.1:9", &[]).unwrap()
    }

    /// A rendered request read back as a server would: method, path, headers (lowercase names) and body.
    struct Parsed {
        method: String,
        path: String,
        headers: std::collections::BTreeMap<String, String>,
        body: Vec<u8>,
    }

    fn parse(wire: &Wire) -> Parsed {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Request::new(&mut headers);
        let httparse::Status::Complete(len) = r.parse(&wire.bytes).unwrap() else {
            panic!("incomplete request")
        };
        Parsed {
            method: r.method.unwrap().to_string(),
            path: r.path.unwrap().to_string(),
            headers: r
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8(h.value.to_vec()).unwrap(),
                    )
                })
                .collect(),
            body: wire.bytes[len..].to_vec(),
        }
    }

    #[test]
    fn generators_fill_the_sequence_number_and_bounded_random_integers() {
        let t = RequestTemplate::get("/product/{rand:1..3}/n/{seq}?x=1");
        let mix = Mix::compile(&[t], &target()).unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..200 {
            let r = parse(&mix.render(i, &mut rng));
            let (path, query) = r.path.split_once('?').unwrap();
            let pieces: Vec<&str> = path.split('/').collect();
            assert_eq!(pieces[1], "product");
            assert_eq!(pieces[4], i.to_string());
            seen.insert(pieces[2].parse::<u64>().unwrap());
            assert_eq!(query, "x=1");
            assert_eq!(r.headers["host"], "127.0.0.1:9");
            assert!(
                !r.headers.contains_key("content-length"),
                "a GET has no body"
            );
        }
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            vec![1, 2, 3],
            "both ends are included"
        );
    }

    #[test]
    fn weights_set_the_share_of_each_template() {
        let mut get = RequestTemplate::get("/a");
        get.weight = 9;
        let post = RequestTemplate {
            post: Some("/b".into()),
            body: Some("{}".into()),
            headers: [("content-type".to_string(), "application/json".to_string())].into(),
            weight: 1,
            ..Default::default()
        };
        let mix = Mix::compile(&[get, post], &target()).unwrap();
        assert_eq!(mix.len(), 2);
        let mut rng = StdRng::seed_from_u64(7);
        let n = 20_000;
        let posts: Vec<Parsed> = (0..n)
            .map(|i| parse(&mix.render(i, &mut rng)))
            .filter(|r| r.method == "POST")
            .collect();
        // Binomial(20000, 0.1): mean 2000, sd 42; five sd is a bound that a fixed seed keeps deterministic.
        assert!((posts.len() as i64 - 2000).abs() < 210, "{}", posts.len());
        assert_eq!(posts[0].path, "/b");
        assert_eq!(posts[0].headers["content-type"], "application/json");
        assert_eq!(posts[0].headers["content-length"], "2");
        assert_eq!(posts[0].body, b"{}");
    }

    #[test]
    fn unknown_generators_and_bad_ranges_are_refused() {
        for (path, why) in [
            ("/p/{uuid}", "unknown generator"),
            ("/p/{rand:a..b}", "whole numbers"),
            ("/p/{rand:5..1}", "wrong way round"),
            ("/p/{seq", "unclosed"),
            ("p", "must start with /"),
            ("/p q", "not a valid URL path"),
        ] {
            let e = Mix::compile(&[RequestTemplate::get(path)], &target())
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{path}: {e}");
        }
    }
}
