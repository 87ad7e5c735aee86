//! `--format regex:PATTERN`: a line is a record when the pattern matches it, its fields taken from named groups
//! (`time`, `method`, `path` or `request`, `status`, `duration`, `upstream`, `upstream_duration`,
//! `upstream_status`). The nginx, Envoy and HAProxy readers build such a pattern for their formats and read their
//! lines through it. Not for knowing any format: what a group means beyond its name is the caller's.

use regex::{Captures, Regex};

use super::time::{parse_duration, parse_time};
use super::{CallOutcome, DependencyCall, ImportError, LineFormat, Record};

/// The group names a pattern may use.
pub const GROUPS: &[&str] = &[
    "time",
    "method",
    "path",
    "request",
    "status",
    "duration",
    "upstream",
    "upstream_duration",
    "upstream_status",
];

/// A compiled line pattern and how to read its groups.
#[derive(Debug)]
pub struct Pattern {
    regex: Regex,
    /// Durations written as whole milliseconds (Envoy, HAProxy) rather than seconds.
    pub millis: bool,
    /// The time is when the request ended (nginx logs at completion): the arrival is `time - duration`.
    pub time_is_end: bool,
}

impl Pattern {
    /// A user's pattern: it must name `time` and either `path` or `request`, and no group outside [`GROUPS`].
    pub fn new(pattern: &str) -> Result<Pattern, ImportError> {
        let regex = Regex::new(pattern).map_err(|e| {
            ImportError::Format(format!("the regex: pattern does not compile: {e}"))
        })?;
        let names: Vec<&str> = regex.capture_names().flatten().collect();
        for n in &names {
            if !GROUPS.contains(n) {
                return Err(ImportError::Format(format!(
                    "the regex: pattern names a group `{n}` that import does not know; known: {}",
                    GROUPS.join(", ")
                )));
            }
        }
        if !names.contains(&"time") {
            return Err(ImportError::Format(
                "the regex: pattern needs a group (?P<time>...) for when each request arrived"
                    .into(),
            ));
        }
        if !names.contains(&"path") && !names.contains(&"request") {
            return Err(ImportError::Format(
                "the regex: pattern needs a group (?P<path>...) or (?P<request>...) (\"GET /x HTTP/1.1\")"
                    .into(),
            ));
        }
        Ok(Pattern {
            regex,
            millis: false,
            time_is_end: false,
        })
    }

    /// A pattern a format's reader wrote: it may use groups of its own beside [`GROUPS`], which it reads itself.
    pub fn built(pattern: &str, millis: bool) -> Pattern {
        Pattern {
            regex: Regex::new(pattern).expect("a format's own pattern compiles"),
            millis,
            time_is_end: false,
        }
    }

    /// Matches a line; the captures, or why the line is not a record.
    pub fn captures<'l>(&self, line: &'l str) -> Result<Captures<'l>, String> {
        self.regex
            .captures(line)
            .ok_or_else(|| "the line does not match the format".to_string())
    }

    fn duration(&self, text: &str) -> Result<Option<f64>, String> {
        if self.millis {
            let t = text.trim();
            if t.is_empty() || t == "-" {
                return Ok(None);
            }
            return match t.parse::<f64>() {
                Ok(v) if v >= 0.0 => Ok(Some(v / 1e3)),
                // HAProxy writes -1 for a timer that never ran.
                Ok(_) => Ok(None),
                Err(_) => Err(format!("`{t}` is not a number of milliseconds")),
            };
        }
        parse_duration(text)
    }

    /// The record a match holds; `outcome` may turn a dependency call's status into a timeout or a reset.
    pub fn record(&self, c: &Captures) -> Result<Record, String> {
        let get = |n: &str| c.name(n).map(|m| m.as_str());
        let time = parse_time(get("time").unwrap_or(""))?;
        let (method, target) = match (get("method"), get("path"), get("request")) {
            (Some(m), Some(p), _) => (m.to_string(), p.to_string()),
            (_, _, Some(r)) => {
                let mut parts = r.split_whitespace();
                match (parts.next(), parts.next()) {
                    (Some(m), Some(p)) => (m.to_string(), p.to_string()),
                    _ => return Err(format!("the request `{r}` is not `METHOD PATH [PROTOCOL]`")),
                }
            }
            (None, Some(p), None) => ("GET".to_string(), p.to_string()),
            _ => return Err("the line has no path".into()),
        };
        if !method.bytes().all(|b| b.is_ascii_alphabetic()) || method.is_empty() {
            return Err(format!("`{method}` is not an HTTP method"));
        }
        if !target.starts_with('/') {
            return Err(format!(
                "`{target}` is not a path (it does not start with /)"
            ));
        }
        let status = match get("status") {
            Some(s) if s != "-" => Some(
                s.parse::<u16>()
                    .map_err(|_| format!("`{s}` is not a status"))?,
            ),
            _ => None,
        };
        let duration = match get("duration") {
            Some(d) => self.duration(d)?,
            None => None,
        };
        let arrival = match (self.time_is_end, duration) {
            (true, Some(d)) => time - d,
            _ => time,
        };
        let calls = match get("upstream") {
            Some(up) => self.calls(
                arrival,
                up,
                get("upstream_duration").unwrap_or(""),
                get("upstream_status").unwrap_or(""),
            )?,
            None => Vec::new(),
        };
        Ok(Record {
            arrival,
            method: method.to_ascii_uppercase(),
            target,
            status,
            duration,
            calls,
        })
    }

    /// The calls in upstream fields: nginx lists every attempt (`a:80, b:80`, and ` : ` across internal
    /// redirects), with the times and statuses in the same order.
    fn calls(
        &self,
        at: f64,
        upstreams: &str,
        durations: &str,
        statuses: &str,
    ) -> Result<Vec<DependencyCall>, String> {
        let split = |s: &str| -> Vec<String> {
            s.split([',', ' '])
                .map(str::trim)
                .filter(|p| !p.is_empty() && *p != ":")
                .map(str::to_string)
                .collect()
        };
        let peers: Vec<String> = split_peers(upstreams);
        let durations = split(durations);
        let statuses = split(statuses);
        let mut calls = Vec::new();
        let mut start = at;
        for (i, peer) in peers.iter().enumerate() {
            if peer == "-" {
                continue;
            }
            let duration = match durations.get(i) {
                Some(d) => self.duration(d)?,
                None => None,
            };
            let outcome = match statuses.get(i).map(String::as_str) {
                None | Some("-") => CallOutcome::Status(200),
                Some(s) => CallOutcome::Status(
                    s.parse::<u16>()
                        .map_err(|_| format!("`{s}` is not an upstream status"))?,
                ),
            };
            calls.push(DependencyCall {
                peer: peer.clone(),
                at: start,
                duration,
                outcome,
            });
            start += duration.unwrap_or(0.0);
        }
        Ok(calls)
    }
}

/// Upstream peers: `a:80, b:80 : c:80` holds three; a peer itself holds a colon before its port.
fn split_peers(s: &str) -> Vec<String> {
    s.split(',')
        .flat_map(|p| p.split(" : "))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

impl LineFormat for Pattern {
    fn parse(&self, line: &str) -> Result<Option<Record>, String> {
        let c = self.captures(line)?;
        self.record(&c).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_groups_make_a_record() {
        let p = Pattern::new(
            r"^(?P<time>\S+) (?P<method>\S+) (?P<path>\S+) (?P<status>\d+) (?P<duration>\S+) (?P<upstream>\S+) (?P<upstream_duration>\S+)$",
        )
        .unwrap();
        let r = p
            .parse("2026-10-10T13:55:36Z GET /a/1 200 12ms pricing 0.010")
            .unwrap()
            .unwrap();
        assert_eq!(r.arrival, 1_791_640_536.0);
        assert_eq!((r.method.as_str(), r.target.as_str()), ("GET", "/a/1"));
        assert_eq!((r.status, r.duration), (Some(200), Some(0.012)));
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.calls[0].peer, "pricing");
        assert_eq!(r.calls[0].duration, Some(0.01));
        assert_eq!(r.calls[0].outcome, CallOutcome::Status(200));
    }

    #[test]
    fn a_pattern_without_time_or_with_an_unknown_group_is_refused() {
        let e = Pattern::new(r"(?P<path>\S+)").unwrap_err().to_string();
        assert!(e.contains("(?P<time>"), "{e}");
        let e = Pattern::new(r"(?P<time>\S+) (?P<uri>\S+)")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`uri`"), "{e}");
        let e = Pattern::new(r"(?P<time>\S+").unwrap_err().to_string();
        assert!(e.contains("does not compile"), "{e}");
    }

    #[test]
    fn retried_upstreams_are_several_calls_in_order() {
        let p = Pattern::new(r"^(?P<time>\S+) (?P<path>\S+) (?P<upstream>[^|]+)\|(?P<upstream_duration>[^|]+)\|(?P<upstream_status>.+)$").unwrap();
        let r = p
            .parse("100.5 /x 127.0.0.1:81, 127.0.0.1:82|0.500, 0.020|504, 200")
            .unwrap()
            .unwrap();
        let got: Vec<(String, f64, Option<f64>, CallOutcome)> = r
            .calls
            .iter()
            .map(|c| (c.peer.clone(), c.at, c.duration, c.outcome))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "127.0.0.1:81".into(),
                    100.5,
                    Some(0.5),
                    CallOutcome::Status(504)
                ),
                (
                    "127.0.0.1:82".into(),
                    101.0,
                    Some(0.02),
                    CallOutcome::Status(200)
                ),
            ]
        );
    }
}
