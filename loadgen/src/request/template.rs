//! What compiling a request template means whatever the protocol: its path with generators (`{seq}`,
//! `{rand:lo..hi}`), its share of the mix by weight, its headers checked.
//!
//! Not for the request each protocol builds from them (`http1::compile`, `http2::compile`).

use hyper::header::{HeaderName, HeaderValue};
use rand::Rng;

use crate::LoadError;

/// One piece of a path: literal text or a generator.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PathPart {
    Literal(String),
    /// `{seq}`: the arrival's index in the timetable, from 0.
    Seq,
    /// `{rand:lo..hi}`: a uniform integer, both ends included.
    Rand(u64, u64),
}

/// A template's path split into literals and generators; it must start with `/`.
pub(crate) fn parse_path(path: &str) -> Result<Vec<PathPart>, String> {
    if !path.starts_with('/') {
        return Err(format!("the path {path:?} must start with /"));
    }
    parse_generators(path, true)
}

/// `text` split into literals and generators (`{seq}`, `{rand:lo..hi}`). `strict` refuses any other `{...}` (a
/// path); otherwise it stays literal text (a string in a message, which may hold braces of its own).
pub(crate) fn parse_generators(text: &str, strict: bool) -> Result<Vec<PathPart>, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        literal.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}').map(|c| c + open) else {
            if strict {
                return Err(format!("unclosed {{ in {text:?}"));
            }
            break;
        };
        let generator = &rest[open + 1..close];
        let part = match generator {
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
            other if strict => {
                return Err(format!(
                    "unknown generator {{{other}}} (known: {{seq}}, {{rand:1..1000}})"
                ))
            }
            _ => {
                literal.push_str(&rest[open..=close]);
                rest = &rest[close + 1..];
                continue;
            }
        };
        if !literal.is_empty() {
            parts.push(PathPart::Literal(std::mem::take(&mut literal)));
        }
        parts.push(part);
        rest = &rest[close + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(PathPart::Literal(literal));
    }
    Ok(parts)
}

/// The path (or string) of arrival `index`: literals as they are, `{seq}` as the index, each `{rand:lo..hi}` as
/// `draw(lo, hi)`.
pub(crate) fn render_path(
    parts: &[PathPart],
    index: u64,
    draw: &mut impl FnMut(u64, u64) -> u64,
) -> String {
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

/// Checks that `parts` (from `path`) render to a valid URL path whatever their generators draw: rendered with
/// every generator at its largest value, which is valid only if every other value is too.
pub(crate) fn check_renders(field: &str, path: &str, parts: &[PathPart]) -> Result<(), LoadError> {
    let sample = render_path(parts, u64::MAX, &mut |_, hi| hi);
    if sample.parse::<hyper::http::uri::PathAndQuery>().is_err() {
        return Err(LoadError::InvalidSpec {
            field: field.to_string(),
            why: format!("the path {path:?} is not a valid URL path"),
        });
    }
    Ok(())
}

/// One header of template `field` (`load.requests[i]`) from its `group` (`headers`, `metadata`), checked.
pub(crate) fn header(
    field: &str,
    group: &str,
    name: &str,
    value: &str,
) -> Result<(HeaderName, HeaderValue), LoadError> {
    let bad = |why: String| LoadError::InvalidSpec {
        field: format!("{field}.{group}"),
        why,
    };
    let n = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| bad(format!("{name:?} is not a valid header name")))?;
    let v = HeaderValue::from_str(value)
        .map_err(|_| bad(format!("{value:?} is not a valid header value")))?;
    Ok((n, v))
}

/// The templates' cumulative weights: an arrival picks template `i` with the odds `weight_i / total`.
#[derive(Debug, Clone)]
pub(crate) struct Weights(Vec<u64>);

impl Weights {
    /// The weights of the templates in order.
    pub(crate) fn new(weights: impl IntoIterator<Item = u32>) -> Weights {
        let mut total = 0u64;
        Weights(
            weights
                .into_iter()
                .map(|w| {
                    total += u64::from(w);
                    total
                })
                .collect(),
        )
    }

    /// The index of the template an arrival sends, drawn from `rng` (not drawn for a mix of one).
    pub(crate) fn pick(&self, rng: &mut impl Rng) -> usize {
        let total = self.0.last().copied().unwrap_or(0);
        let pick = if self.0.len() == 1 || total == 0 {
            0
        } else {
            rng.random_range(0..total)
        };
        self.0.partition_point(|&c| c <= pick).min(self.0.len() - 1)
    }
}
