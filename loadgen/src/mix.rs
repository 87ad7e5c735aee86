//! The request mix: templates compiled once, then rendered per arrival (weighted pick, path generators).
//!
//! Not for sending: rendering produces a plain `hyper` request; the dispatcher decides when it goes out.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use rand::Rng;

use crate::spec::RequestTemplate;
use crate::target::Target;
use crate::LoadError;

/// One piece of a path: literal text or a generator.
#[derive(Debug, Clone, PartialEq)]
enum PathPart {
    Literal(String),
    /// `{seq}`: the arrival's index in the timetable, from 0.
    Seq,
    /// `{rand:lo..hi}`: a uniform integer, both ends included.
    Rand(u64, u64),
}

#[derive(Debug, Clone)]
struct Compiled {
    method: Method,
    path: Vec<PathPart>,
    headers: HeaderMap,
    body: Bytes,
}

/// The compiled templates with their cumulative weights.
#[derive(Debug, Clone)]
pub(crate) struct Mix {
    templates: Vec<Compiled>,
    cumulative: Vec<u64>,
}

fn parse_path(path: &str) -> Result<Vec<PathPart>, String> {
    if !path.starts_with('/') {
        return Err(format!("the path {path:?} must start with /"));
    }
    let mut parts = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            parts.push(PathPart::Literal(rest[..open].to_string()));
        }
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("unclosed {{ in {path:?}"))?
            + open;
        let generator = &rest[open + 1..close];
        parts.push(match generator {
            "seq" => PathPart::Seq,
            g if g.starts_with("rand:") => {
                let range = &g["rand:".len()..];
                let (lo, hi) = range
                    .split_once("..")
                    .and_then(|(lo, hi)| {
                        Some((
                            lo.trim().parse::<u64>().ok()?,
                            hi.trim().parse::<u64>().ok()?,
                        ))
                    })
                    .ok_or_else(|| {
                        format!("{{{g}}} needs a range of whole numbers such as {{rand:1..1000}}")
                    })?;
                if lo > hi {
                    return Err(format!("{{{g}}} has its bounds the wrong way round"));
                }
                PathPart::Rand(lo, hi)
            }
            other => {
                return Err(format!(
                    "unknown generator {{{other}}} (known: {{seq}}, {{rand:1..1000}})"
                ))
            }
        });
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(PathPart::Literal(rest.to_string()));
    }
    Ok(parts)
}

impl Mix {
    /// Compiles and checks every template: one method, a path with known generators that renders to a valid
    /// URI, valid header names and values.
    pub(crate) fn compile(templates: &[RequestTemplate]) -> Result<Mix, LoadError> {
        let mut compiled = Vec::with_capacity(templates.len());
        let mut cumulative = Vec::with_capacity(templates.len());
        let mut total = 0u64;
        for (i, t) in templates.iter().enumerate() {
            let field = format!("load.requests[{i}]");
            let bad = |field: String, why: String| LoadError::InvalidSpec { field, why };
            let (method, path) = t.method_and_path().map_err(|why| bad(field.clone(), why))?;
            let parts = parse_path(path).map_err(|why| bad(field.clone(), why))?;
            let mut headers = HeaderMap::new();
            for (name, value) in &t.headers {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    bad(
                        format!("{field}.headers"),
                        format!("{name:?} is not a valid header name"),
                    )
                })?;
                let value = HeaderValue::from_str(value).map_err(|_| {
                    bad(
                        format!("{field}.headers"),
                        format!("{value:?} is not a valid header value"),
                    )
                })?;
                headers.insert(name, value);
            }
            let c = Compiled {
                method: Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET),
                path: parts,
                headers,
                body: Bytes::from(t.body.clone().unwrap_or_default()),
            };
            // Render with the generators' largest values: if that is a valid path, every other value is too.
            let sample = render_path(&c.path, u64::MAX, &mut |_, hi| hi);
            if sample.parse::<hyper::http::uri::PathAndQuery>().is_err() {
                return Err(bad(
                    field,
                    format!("the path {path:?} is not a valid URL path"),
                ));
            }
            total += u64::from(t.weight);
            cumulative.push(total);
            compiled.push(c);
        }
        Ok(Mix {
            templates: compiled,
            cumulative,
        })
    }

    /// The request for arrival `index` to `target`, with generators drawn from `rng`.
    pub(crate) fn render(
        &self,
        index: u64,
        target: &Target,
        rng: &mut impl Rng,
    ) -> Request<Full<Bytes>> {
        let total = self.cumulative.last().copied().unwrap_or(0);
        let pick = if self.templates.len() == 1 || total == 0 {
            0
        } else {
            rng.random_range(0..total)
        };
        let which = self
            .cumulative
            .partition_point(|&c| c <= pick)
            .min(self.templates.len() - 1);
        let t = &self.templates[which];
        let path = render_path(&t.path, index, &mut |lo, hi| rng.random_range(lo..=hi));
        let uri = Uri::builder()
            .scheme(target.scheme.clone())
            .authority(target.authority.clone())
            .path_and_query(path)
            .build()
            .unwrap_or_else(|_| target.root_uri());
        let mut request = Request::new(Full::new(t.body.clone()));
        *request.method_mut() = t.method.clone();
        *request.uri_mut() = uri;
        if !t.headers.is_empty() {
            *request.headers_mut() = t.headers.clone();
        }
        request
    }

    /// The number of templates (for tests and summaries).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.templates.len()
    }
}

fn render_path(parts: &[PathPart], index: u64, draw: &mut impl FnMut(u64, u64) -> u64) -> String {
    let mut out = String::with_capacity(32);
    for part in parts {
        match part {
            PathPart::Literal(s) => out.push_str(s),
            PathPart::Seq => out.push_str(&index.to_string()),
            PathPart::Rand(lo, hi) => out.push_str(&draw(*lo, *hi).to_string()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn target() -> Target {
        Target::parse("http://127.0.0.1:9", &[]).unwrap()
    }

    #[test]
    fn generators_fill_the_sequence_number_and_bounded_random_integers() {
        let t = RequestTemplate::get("/product/{rand:1..3}/n/{seq}?x=1");
        let mix = Mix::compile(&[t]).unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..200 {
            let r = mix.render(i, &target(), &mut rng);
            let path = r.uri().path().to_string();
            let pieces: Vec<&str> = path.split('/').collect();
            assert_eq!(pieces[1], "product");
            assert_eq!(pieces[4], i.to_string());
            seen.insert(pieces[2].parse::<u64>().unwrap());
            assert_eq!(r.uri().query(), Some("x=1"));
            assert_eq!(r.uri().authority().unwrap().as_str(), "127.0.0.1:9");
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
        let mix = Mix::compile(&[get, post]).unwrap();
        assert_eq!(mix.len(), 2);
        let mut rng = StdRng::seed_from_u64(7);
        let n = 20_000;
        let posts: Vec<Request<Full<Bytes>>> = (0..n)
            .map(|i| mix.render(i, &target(), &mut rng))
            .filter(|r| r.method() == Method::POST)
            .collect();
        // Binomial(20000, 0.1): mean 2000, sd 42; five sd is a bound that a fixed seed keeps deterministic.
        assert!((posts.len() as i64 - 2000).abs() < 210, "{}", posts.len());
        assert_eq!(posts[0].uri().path(), "/b");
        assert_eq!(posts[0].headers()["content-type"], "application/json");
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
            let e = Mix::compile(&[RequestTemplate::get(path)])
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{path}: {e}");
        }
    }
}
