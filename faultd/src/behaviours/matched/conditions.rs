//! The conditions of a matched entry (`match: { method, path, header, query, grpc_metadata }`) and the compiled
//! test of a call against them.
//!
//! For: reading and checking the conditions (regular expressions compiled once, header names parsed once) and
//! [`Matcher::matches`], which borrows everything from the call and allocates only to percent-decode a query
//! value that holds escapes. Not for: counting the calls that match (the entry's trigger, `super`) or routing
//! (a route's method and path pattern choose the route first; conditions only narrow its calls).

use std::borrow::Cow;
use std::collections::BTreeMap;

use axum::http::{HeaderMap, HeaderName, Method, Uri};
use regex::{Regex, RegexBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::invalid::Invalid;

/// The most memory one compiled regular expression may take: far above any condition a scenario writes, and a
/// bound on what a configuration can make faultd build.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// What a call must carry for an entry to see it; every condition given must hold, and an empty `match` holds
/// for every call. Values are regular expressions searched anywhere in the value (`^acme$` for the whole value).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// The HTTP method, e.g. `POST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// A regular expression on the path, without the query, e.g. `^/orders/9`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Headers by name, each a regular expression one of the header's values must match, e.g.
    /// `{x-tenant: "^acme$"}`. A call without the header does not match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub header: BTreeMap<String, String>,
    /// Query parameters by name (percent-decoded), each a regular expression one of its values must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query: BTreeMap<String, String>,
    /// gRPC metadata by key, each a regular expression: only gRPC calls match. Text keys only (`-bin` keys carry
    /// bytes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grpc_metadata: BTreeMap<String, String>,
}

impl Match {
    /// Whether no condition is given (every call matches).
    pub fn is_empty(&self) -> bool {
        self == &Match::default()
    }

    /// Checks every condition; fields are named relative to `match` (`header.x-tenant`).
    pub fn validate(&self) -> Result<(), Invalid> {
        self.compile().map(|_| ())
    }

    /// The conditions compiled for the hot path.
    pub fn compile(&self) -> Result<Matcher, Invalid> {
        let method = self
            .method
            .as_deref()
            .map(|m| {
                Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                    .map_err(|_| Invalid::new("method", format!("{m:?} is not an HTTP method")))
            })
            .transpose()?;
        let path = self
            .path
            .as_deref()
            .map(|p| regex(p).map_err(|e| e.at("path")))
            .transpose()?;
        let headers = |map: &BTreeMap<String, String>, field: &str| {
            map.iter()
                .map(|(name, pattern)| {
                    let at = |e: Invalid| e.at(&format!("{field}.{name}"));
                    let parsed = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
                        .map_err(|_| {
                            at(Invalid::new("", format!("{name:?} is not a header name")))
                        })?;
                    Ok((parsed, regex(pattern).map_err(at)?))
                })
                .collect::<Result<Vec<_>, Invalid>>()
        };
        if let Some(key) = self.grpc_metadata.keys().find(|k| k.ends_with("-bin")) {
            return Err(Invalid::new(
                format!("grpc_metadata.{key}"),
                "a -bin key carries bytes; match a text key",
            ));
        }
        let query = self
            .query
            .iter()
            .map(|(name, pattern)| {
                regex(pattern)
                    .map(|r| (name.clone(), r))
                    .map_err(|e| e.at(&format!("query.{name}")))
            })
            .collect::<Result<Vec<_>, Invalid>>()?;
        Ok(Matcher {
            method,
            path,
            headers: headers(&self.header, "header")?.into(),
            query: query.into(),
            grpc_metadata: headers(&self.grpc_metadata, "grpc_metadata")?.into(),
        })
    }
}

/// A regular expression, bounded in size.
fn regex(pattern: &str) -> Result<Regex, Invalid> {
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| Invalid::new("", format!("{pattern:?} is not a regular expression: {e}")))
}

/// What of a call its conditions look at, borrowed from the request.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The request's path and query.
    pub uri: &'a Uri,
    /// The request's headers (on gRPC, its metadata).
    pub headers: &'a HeaderMap,
}

/// The conditions of an entry, compiled.
#[derive(Debug, Clone)]
pub struct Matcher {
    method: Option<Method>,
    path: Option<Regex>,
    headers: Box<[(HeaderName, Regex)]>,
    query: Box<[(String, Regex)]>,
    grpc_metadata: Box<[(HeaderName, Regex)]>,
}

impl Matcher {
    /// Whether the call meets every condition.
    pub fn matches(&self, call: &CallFacts<'_>) -> bool {
        self.method.as_ref().is_none_or(|m| m == call.method)
            && self
                .path
                .as_ref()
                .is_none_or(|p| p.is_match(call.uri.path()))
            && self
                .headers
                .iter()
                .all(|(n, r)| header_matches(call.headers, n, r))
            && (self.grpc_metadata.is_empty() || is_grpc(call.headers))
            && self
                .grpc_metadata
                .iter()
                .all(|(n, r)| header_matches(call.headers, n, r))
            && self
                .query
                .iter()
                .all(|(n, r)| query_matches(call.uri.query(), n, r))
    }
}

fn header_matches(headers: &HeaderMap, name: &HeaderName, pattern: &Regex) -> bool {
    headers
        .get_all(name)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| pattern.is_match(v)))
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

fn query_matches(query: Option<&str>, name: &str, pattern: &Regex) -> bool {
    query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .any(|(k, v)| decode(k) == name && pattern.is_match(&decode(v)))
}

/// A query component percent-decoded, `+` read as a space; borrowed when it holds neither. An escape that is not
/// two hex digits stays as written.
fn decode(text: &str) -> Cow<'_, str> {
    if !text.contains(['%', '+']) {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        let escaped = (bytes[i] == b'%')
            .then(|| Some((hex(*bytes.get(i + 1)?)?, hex(*bytes.get(i + 2)?)?)))
            .flatten();
        match (bytes[i], escaped) {
            (b'%', Some((hi, lo))) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}
