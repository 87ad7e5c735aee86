//! Routing: which configured route a call belongs to, by method and path pattern.
//!
//! For: patterns such as `/price/*` (`*` or `{name}` matches one segment, a final `**` matches the rest) and the
//! rule for overlaps: the pattern with more literal segments wins, then the one with a method, then the route
//! name. Not for: query strings (ignored), hosts, or headers.

use axum::http::Method;

use crate::invalid::Invalid;

/// One segment of a path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// `*` or `{id}`: any one non-empty segment.
    One,
    /// A final `**`: zero or more segments.
    Rest,
}

/// A parsed path pattern such as `/price/*` or `/accounts/{id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    segments: Vec<Segment>,
    /// The literal segments before the first wildcard, joined by `/` without the leading one (`price` for
    /// `/price/*`, `a/b` for `/a/b`): every path the pattern matches starts with it, so most paths that do not
    /// match are told apart by one comparison instead of a walk over their segments.
    head: String,
    /// No wildcard at all: a path matches exactly when it is the head.
    exact: bool,
}

impl PathPattern {
    /// Parses a pattern; it must start with `/`, and `**` may only end it.
    pub fn parse(pattern: &str) -> Result<PathPattern, Invalid> {
        let rest = pattern
            .strip_prefix('/')
            .ok_or_else(|| Invalid::new("", format!("{pattern:?} must start with /")))?;
        let parts: Vec<&str> = if rest.is_empty() {
            Vec::new()
        } else {
            rest.split('/').collect()
        };
        let mut segments = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let segment = match *part {
                "**" if i + 1 == parts.len() => Segment::Rest,
                "**" => {
                    return Err(Invalid::new(
                        "",
                        format!("{pattern:?}: ** may only end a pattern"),
                    ))
                }
                "*" => Segment::One,
                p if p.starts_with('{') && p.ends_with('}') && p.len() > 2 => Segment::One,
                p if p.contains('*') || p.contains('{') || p.contains('}') => {
                    return Err(Invalid::new(
                        "",
                        format!("{pattern:?}: a wildcard must be a whole segment (*, {{id}}, **)"),
                    ))
                }
                p => Segment::Literal(p.to_string()),
            };
            segments.push(segment);
        }
        fn literal(segment: &Segment) -> Option<&str> {
            match segment {
                Segment::Literal(l) => Some(l),
                _ => None,
            }
        }
        let head = segments
            .iter()
            .map_while(literal)
            .collect::<Vec<_>>()
            .join("/");
        let exact = segments.iter().all(|s| literal(s).is_some());
        Ok(PathPattern {
            segments,
            head,
            exact,
        })
    }

    /// Whether `path` (without the query) matches.
    pub fn matches(&self, path: &str) -> bool {
        let rest = path.strip_prefix('/').unwrap_or(path);
        if self.exact {
            return rest == self.head;
        }
        rest.starts_with(self.head.as_str()) && self.walk(path)
    }

    /// Whether `path` matches, segment by segment.
    fn walk(&self, path: &str) -> bool {
        let mut parts = path.strip_prefix('/').unwrap_or(path).split('/');
        let trailing_empty = path == "/" || path.is_empty();
        for segment in &self.segments {
            match segment {
                Segment::Rest => return true,
                Segment::One => match parts.next() {
                    Some(p) if !p.is_empty() => {}
                    _ => return false,
                },
                Segment::Literal(l) => match parts.next() {
                    Some(p) if p == l => {}
                    _ => return false,
                },
            }
        }
        match parts.next() {
            None => true,
            Some("") => self.segments.is_empty() && trailing_empty,
            Some(_) => false,
        }
    }

    fn literals(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| matches!(s, Segment::Literal(_)))
            .count()
    }
}

/// Parses an optional method name (`GET`, `post`, ...); `None` means any method.
pub fn parse_method(method: Option<&str>) -> Result<Option<Method>, Invalid> {
    match method {
        None => Ok(None),
        Some(m) => {
            let upper = m.to_ascii_uppercase();
            const KNOWN: [&str; 9] = [
                "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT",
            ];
            if !KNOWN.contains(&upper.as_str()) {
                return Err(Invalid::new(
                    "",
                    format!("{m:?} is not an HTTP method (one of {})", KNOWN.join(", ")),
                ));
            }
            Method::from_bytes(upper.as_bytes())
                .map(Some)
                .map_err(|e| Invalid::new("", e.to_string()))
        }
    }
}

/// The routes of a configuration, ordered so the first match is the most specific.
#[derive(Debug, Clone)]
pub struct RouteTable {
    /// (route index in the configuration, method, pattern), most specific first.
    entries: Vec<(usize, Option<Method>, PathPattern)>,
}

impl RouteTable {
    /// Builds the table from `(method, pattern)` per route, in configuration (name) order.
    pub fn new(routes: Vec<(Option<Method>, PathPattern)>) -> RouteTable {
        let mut entries: Vec<_> = routes
            .into_iter()
            .enumerate()
            .map(|(i, (m, p))| (i, m, p))
            .collect();
        entries.sort_by_key(|(i, m, p)| {
            (
                std::cmp::Reverse(p.literals()),
                std::cmp::Reverse(p.segments.len()),
                m.is_none(),
                *i,
            )
        });
        RouteTable { entries }
    }

    /// The index of the route a call belongs to, if any.
    pub fn find(&self, method: &Method, path: &str) -> Option<usize> {
        self.entries
            .iter()
            .find(|(_, m, p)| m.as_ref().is_none_or(|m| m == method) && p.matches(path))
            .map(|(i, _, _)| *i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(p: &str) -> PathPattern {
        PathPattern::parse(p).unwrap()
    }

    #[test]
    fn star_and_braces_match_exactly_one_segment() {
        assert!(pattern("/price/*").matches("/price/42"));
        assert!(pattern("/accounts/{id}").matches("/accounts/7"));
        assert!(!pattern("/price/*").matches("/price"));
        assert!(!pattern("/price/*").matches("/price/"));
        assert!(!pattern("/price/*").matches("/price/42/x"));
        assert!(pattern("/report").matches("/report"));
        assert!(!pattern("/report").matches("/reports"));
        assert!(pattern("/").matches("/"));
        assert!(!pattern("/").matches("/x"));
    }

    #[test]
    fn the_comparison_with_the_literal_head_agrees_with_the_walk_over_segments() {
        let patterns = [
            "/",
            "/ok",
            "/a/b",
            "/a//b",
            "/price/*",
            "/price/{id}/history",
            "/*",
            "/*/x",
            "/api/**",
            "/**",
            "/a/*/c/**",
            "/price",
        ];
        let paths = [
            "",
            "/",
            "//",
            "/ok",
            "/ok/",
            "/oks",
            "ok",
            "/a/b",
            "/a/b/",
            "/a//b",
            "/a/bb",
            "/ab",
            "/price",
            "/price/",
            "/price/42",
            "/price/42/",
            "/price/42/history",
            "/price/42/history/x",
            "/prices/42",
            "/x",
            "/y/x",
            "//x",
            "/api",
            "/api/",
            "/api/v1/users",
            "/apis",
            "/a/1/c",
            "/a/1/c/d/e",
            "/a//c",
            "*",
        ];
        for pattern in patterns {
            let p = PathPattern::parse(pattern).unwrap();
            for path in paths {
                assert_eq!(p.matches(path), p.walk(path), "{pattern} against {path:?}");
            }
        }
    }

    #[test]
    fn double_star_matches_the_rest() {
        assert!(pattern("/api/**").matches("/api/a/b/c"));
        assert!(pattern("/api/**").matches("/api"));
        assert!(pattern("/**").matches("/anything/at/all"));
        assert!(PathPattern::parse("/a/**/b").is_err());
    }

    #[test]
    fn bad_patterns_and_methods_are_refused() {
        assert!(PathPattern::parse("price/*")
            .unwrap_err()
            .message
            .contains("must start with /"));
        assert!(PathPattern::parse("/price/x*")
            .unwrap_err()
            .message
            .contains("whole segment"));
        assert!(parse_method(Some("FETCH"))
            .unwrap_err()
            .message
            .contains("not an HTTP method"));
        assert_eq!(parse_method(Some("post")).unwrap(), Some(Method::POST));
    }

    #[test]
    fn the_most_specific_route_wins() {
        let table = RouteTable::new(vec![
            (None, pattern("/accounts/*")),
            (Some(Method::POST), pattern("/accounts/*")),
            (None, pattern("/accounts/me")),
            (None, pattern("/**")),
        ]);
        assert_eq!(table.find(&Method::GET, "/accounts/me"), Some(2));
        assert_eq!(table.find(&Method::POST, "/accounts/7"), Some(1));
        assert_eq!(table.find(&Method::GET, "/accounts/7"), Some(0));
        assert_eq!(table.find(&Method::GET, "/other"), Some(3));
    }
}
