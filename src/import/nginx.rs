//! nginx access logs: the default `combined` format, or any `log_format` given as its pattern, e.g.
//! `'$remote_addr [$time_local] "$request" $status $request_time $upstream_addr $upstream_response_time $upstream_status'`.
//!
//! Each `$variable` becomes a group of the line pattern; the ones import uses are named (time from `$time_local`,
//! `$time_iso8601` or `$msec`; `$request`, or `$request_method` with `$request_uri`/`$uri`; `$status`;
//! `$request_time`; `$upstream_addr`, `$upstream_response_time`, `$upstream_status`), every other one matches
//! anything. nginx writes a line when a request ends, so the arrival is the logged time minus `$request_time` when
//! the format has it. An upstream status 504 is nginx's own answer to an upstream that did not answer in time: it
//! is read as a timeout (played as `hang`); 502 as a failed connection (`reset`).

use regex::Regex;

use super::pattern::Pattern;
use super::{CallOutcome, ImportError, LineFormat, Record};

/// nginx's predefined `combined` format.
pub const COMBINED: &str = r#"$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent""#;

/// The nginx reader: a line pattern built from a `log_format`.
#[derive(Debug)]
pub struct Nginx {
    pattern: Pattern,
}

/// The group a variable fills, and what it may match.
fn variable(name: &str) -> (Option<&'static str>, &'static str) {
    match name {
        "time_local" => (Some("time"), r"[^\]]+"),
        "time_iso8601" => (Some("time"), r"\S+"),
        "msec" => (Some("time"), r"[0-9.]+"),
        "request" => (Some("request"), r#"[^"]*"#),
        "request_method" => (Some("method"), r"[A-Za-z]+"),
        "request_uri" | "uri" => (Some("path"), r"\S+"),
        "status" => (Some("status"), r"\d{3}"),
        "request_time" => (Some("duration"), r"[0-9.]+"),
        "upstream_addr" => (Some("upstream"), r".*?"),
        "upstream_response_time" => (Some("upstream_duration"), r".*?"),
        "upstream_status" => (Some("upstream_status"), r".*?"),
        _ => (None, r".*?"),
    }
}

/// Turns a `log_format` into a line pattern, or says why it cannot.
pub fn pattern_of(log_format: &str) -> Result<String, ImportError> {
    let var = Regex::new(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?").expect("a fixed pattern");
    // The finest time the format has: $msec (milliseconds), else $time_iso8601 or $time_local (seconds).
    let names: Vec<&str> = var
        .captures_iter(log_format)
        .filter_map(|c| c.get(1).map(|m| m.as_str()))
        .collect();
    let time = ["msec", "time_iso8601", "time_local"]
        .into_iter()
        .find(|t| names.contains(t));
    let mut out = String::from("^");
    let mut last = 0;
    let mut used: Vec<&str> = Vec::new();
    for m in var.captures_iter(log_format) {
        let whole = m.get(0).expect("group 0 always matches");
        out.push_str(&regex::escape(&log_format[last..whole.start()]));
        let (mut group, body) = variable(&m[1]);
        if group == Some("time") && time != Some(&m[1]) {
            group = None;
        }
        match group {
            Some(g) if !used.contains(&g) => {
                used.push(g);
                out.push_str(&format!("(?P<{g}>{body})"));
            }
            _ => out.push_str(&format!("(?:{body})")),
        }
        last = whole.end();
    }
    out.push_str(&regex::escape(&log_format[last..]));
    out.push('$');
    if !used.contains(&"time") {
        return Err(ImportError::Format(
            "the log_format has no time: add $time_local, $time_iso8601 or $msec".into(),
        ));
    }
    if !used.contains(&"request") && !used.contains(&"path") {
        return Err(ImportError::Format(
            "the log_format has no request: add $request (or $request_method and $request_uri)"
                .into(),
        ));
    }
    Ok(out)
}

impl Nginx {
    /// The reader for `log_format` (default `combined`).
    pub fn new(log_format: Option<&str>) -> Result<Nginx, ImportError> {
        let text = log_format.unwrap_or(COMBINED);
        let mut pattern = Pattern::new(&pattern_of(text.trim().trim_matches('\''))?)?;
        pattern.time_is_end = true;
        Ok(Nginx { pattern })
    }
}

impl LineFormat for Nginx {
    fn parse(&self, line: &str) -> Result<Option<Record>, String> {
        let c = self.pattern.captures(line)?;
        let mut record = self.pattern.record(&c)?;
        for call in &mut record.calls {
            call.outcome = match call.outcome {
                CallOutcome::Status(504) => CallOutcome::Timeout,
                CallOutcome::Status(502) => CallOutcome::Reset,
                o => o,
            };
        }
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format the round-trip test and the docs use.
    pub const TIMED: &str = r#"$remote_addr - [$time_local] $msec "$request" $status $request_time "$upstream_addr" "$upstream_response_time" "$upstream_status""#;

    #[test]
    fn the_combined_format_reads_arrival_method_path_and_status() {
        let n = Nginx::new(None).unwrap();
        let r = n
            .parse(r#"127.0.0.1 - - [10/Oct/2026:13:55:36 +0000] "GET /product/42?x=1 HTTP/1.1" 200 512 "-" "curl/8.0""#)
            .unwrap()
            .unwrap();
        assert_eq!(r.arrival, 1_791_640_536.0);
        assert_eq!(r.method, "GET");
        assert_eq!(r.target, "/product/42?x=1");
        assert_eq!(r.status, Some(200));
        assert!(r.calls.is_empty());
    }

    #[test]
    fn a_timed_format_takes_the_arrival_back_by_the_request_time_and_reads_the_upstream() {
        let n = Nginx::new(Some(TIMED)).unwrap();
        // $msec is finer than $time_local: it is the time read.
        let r = n
            .parse(r#"127.0.0.1 - [10/Oct/2026:13:55:37 +0000] 1791640537.100 "GET /product/7 HTTP/1.1" 200 0.250 "127.0.0.1:9000" "0.248" "200""#)
            .unwrap()
            .unwrap();
        assert!((r.arrival - 1_791_640_536.85).abs() < 1e-6, "{}", r.arrival);
        assert_eq!(r.calls[0].peer, "127.0.0.1:9000");
        assert_eq!(r.calls[0].duration, Some(0.248));
        let t = n
            .parse(r#"127.0.0.1 - [10/Oct/2026:13:55:37 +0000] 1791640537.000 "GET /product/7 HTTP/1.1" 504 1.000 "127.0.0.1:9000" "1.000" "504""#)
            .unwrap()
            .unwrap();
        assert_eq!(t.calls[0].outcome, CallOutcome::Timeout);
    }

    #[test]
    fn a_log_format_without_time_is_refused() {
        let e = Nginx::new(Some(r#""$request" $status"#))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no time"), "{e}");
    }
}
