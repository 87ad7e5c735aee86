//! Request templates: paths grouped by shape. A segment that is a number becomes `{rand:MIN..MAX}` over the
//! numbers seen in it; one that looks like an identifier (a UUID, a long hex or alphanumeric token with digits)
//! becomes `{seq}`; the rest is kept. `/product/42` and `/product/7` are one template `/product/{rand:7..42}`.
//! With `redact`, query strings are dropped; otherwise their values are grouped the same way.
//!
//! Not for choosing which templates a scenario keeps: the writer does, by count.

use std::collections::BTreeMap;

/// The most distinct templates kept while reading; requests of further shapes are counted apart.
pub const MAX_TEMPLATES: usize = 10_000;

/// One piece of a template: text kept as it is, a number range, or an identifier.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Piece {
    Text(String),
    Number,
    Id,
}

/// One template: its method, shape, the range of each number in it, and how many requests it stands for.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub method: String,
    pieces: Vec<Piece>,
    ranges: Vec<(u64, u64)>,
    pub count: u64,
}

impl Template {
    /// The path with generators, as loadgen reads it: `/product/{rand:7..42}`.
    pub fn path(&self) -> String {
        let mut out = String::new();
        let mut n = 0;
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Number => {
                    let (lo, hi) = self.ranges[n];
                    n += 1;
                    if lo == hi {
                        out.push_str(&lo.to_string());
                    } else {
                        out.push_str(&format!("{{rand:{lo}..{hi}}}"));
                    }
                }
                Piece::Id => out.push_str("{seq}"),
            }
        }
        out
    }
}

/// Templates by shape.
#[derive(Debug, Clone)]
pub struct Templates {
    redact: bool,
    by_shape: BTreeMap<(String, Vec<Piece>), Template>,
    /// Requests left out: their shape came after [`MAX_TEMPLATES`] others, or loadgen could not send their target.
    pub overflow: u64,
}

fn is_id(token: &str) -> bool {
    let digits = token.bytes().filter(u8::is_ascii_digit).count();
    let alnum = token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    alnum && digits > 0 && token.len() >= 8
}

/// Splits a path (and query) into pieces: separators `/ ? & = ;` kept as text, tokens classified.
fn pieces(target: &str, numbers: &mut Vec<u64>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    let push_text = |out: &mut Vec<Piece>, t: &str| match out.last_mut() {
        Some(Piece::Text(prev)) => prev.push_str(t),
        _ => out.push(Piece::Text(t.to_string())),
    };
    let mut token = String::new();
    let mut flush = |out: &mut Vec<Piece>, token: &mut String| {
        if token.is_empty() {
            return;
        }
        if token.len() <= 18 && token.bytes().all(|b| b.is_ascii_digit()) {
            match token.parse::<u64>() {
                Ok(v) => {
                    numbers.push(v);
                    out.push(Piece::Number);
                }
                Err(_) => push_text(out, token),
            }
        } else if is_id(token) {
            out.push(Piece::Id);
        } else {
            push_text(out, token);
        }
        token.clear();
    };
    for c in target.chars() {
        if matches!(c, '/' | '?' | '&' | '=' | ';' | '.' | ',') {
            flush(&mut out, &mut token);
            push_text(&mut out, &c.to_string());
        } else {
            token.push(c);
        }
    }
    flush(&mut out, &mut token);
    out
}

impl Templates {
    pub fn new(redact: bool) -> Templates {
        Templates {
            redact,
            by_shape: BTreeMap::new(),
            overflow: 0,
        }
    }

    pub fn add(&mut self, method: &str, target: &str) {
        let target = if self.redact {
            target.split(['?', '#']).next().unwrap_or(target)
        } else {
            target.split('#').next().unwrap_or(target)
        };
        // A target loadgen could not send as it is (not a URL path, or braces it would read as generators) is
        // left out of the mix with the rarer shapes.
        let sendable = !target.contains(['{', '}'])
            && matches!(
                loadgen::replay::parse_line(&format!("0 GET {target}")),
                Ok(Some(_))
            );
        if !sendable {
            self.overflow += 1;
            return;
        }
        let mut numbers = Vec::new();
        let shape = pieces(target, &mut numbers);
        let key = (method.to_string(), shape);
        if !self.by_shape.contains_key(&key) && self.by_shape.len() >= MAX_TEMPLATES {
            self.overflow += 1;
            return;
        }
        let t = self
            .by_shape
            .entry(key.clone())
            .or_insert_with(|| Template {
                method: key.0.clone(),
                pieces: key.1.clone(),
                ranges: numbers.iter().map(|v| (*v, *v)).collect(),
                count: 0,
            });
        t.count += 1;
        for (r, v) in t.ranges.iter_mut().zip(&numbers) {
            r.0 = r.0.min(*v);
            r.1 = r.1.max(*v);
        }
    }

    /// The templates, most requests first (ties by path, so the order is deterministic).
    pub fn by_count(&self) -> Vec<Template> {
        let mut all: Vec<Template> = self.by_shape.values().cloned().collect();
        all.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.path().cmp(&b.path())));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_loadgen_could_not_send_is_left_out_and_counted() {
        let mut t = Templates::new(false);
        for target in ["/price/\u{11}", "/a b", "/x/{seq}", "/ok/1"] {
            t.add("GET", target);
        }
        let kept: Vec<String> = t.by_count().iter().map(Template::path).collect();
        assert_eq!(kept, vec!["/ok/1".to_string()]);
        assert_eq!(t.overflow, 3);
    }

    fn group(redact: bool, paths: &[(&str, &str)]) -> Vec<(String, String, u64)> {
        let mut t = Templates::new(redact);
        for (m, p) in paths {
            t.add(m, p);
        }
        t.by_count()
            .into_iter()
            .map(|t| (t.method.clone(), t.path(), t.count))
            .collect()
    }

    #[test]
    fn numbers_become_a_range_and_identifiers_a_sequence() {
        let got = group(
            false,
            &[
                ("GET", "/product/42"),
                ("GET", "/product/7"),
                ("GET", "/product/1000"),
                ("GET", "/order/3f2b9c1e-5d7a-4c11-9d2e-0a1b2c3d4e5f/items"),
                ("GET", "/order/9a8b7c6d5e4f/items"),
                ("POST", "/checkout"),
                ("GET", "/static/app.js"),
            ],
        );
        assert_eq!(
            got,
            vec![
                ("GET".into(), "/product/{rand:7..1000}".into(), 3),
                ("GET".into(), "/order/{seq}/items".into(), 2),
                ("POST".into(), "/checkout".into(), 1),
                ("GET".into(), "/static/app.js".into(), 1),
            ]
        );
    }

    #[test]
    fn query_values_are_grouped_or_dropped_with_redact() {
        let paths = [
            ("GET", "/search?q=shoes&page=2"),
            ("GET", "/search?q=shoes&page=5"),
        ];
        assert_eq!(
            group(false, &paths),
            vec![("GET".into(), "/search?q=shoes&page={rand:2..5}".into(), 2)]
        );
        assert_eq!(
            group(true, &paths),
            vec![("GET".into(), "/search".into(), 2)]
        );
    }
}
