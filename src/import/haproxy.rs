//! HAProxy's default HTTP log (`option httplog`), with or without the syslog prefix:
//! `haproxy[14389]: 10.0.1.2:33317 [06/Feb/2026:12:14:14.655] http-in static/srv1 10/0/30/69/109 200 2750 - - ----
//! 1/1/1/1/0 0/0 {1wt.eu} {} "GET /index.html HTTP/1.1"`.
//!
//! The accept date is the arrival; the backend is the dependency (the server in it is one of its replicas), its
//! response time `Tr` the call's duration and `Tt` the request's. The termination state's first letter says how
//! the call failed: `s` (the server timed out) is played as `hang`, `S` (the server refused or aborted) as `reset`.
//! A request HAProxy answered itself (`<NOSRV>`) made no call.

use super::pattern::Pattern;
use super::{CallOutcome, LineFormat, Record};

const DEFAULT: &str = r#"\S+ \[(?P<time>[^\]]+)\] \S+ (?P<upstream>[^/\s]+)/(?P<server>\S+) -?\d+/-?\d+/-?\d+/(?P<upstream_duration>-?\d+)/\+?(?P<duration>-?\d+) (?:(?P<status>\d{3})|-1) \S+ \S+ \S+ (?P<term>\S+) \S+ \S+ (?:\{[^}]*\} )*"(?P<request>[^"]*)"\s*$"#;

/// The HAProxy reader.
#[derive(Debug)]
pub struct Haproxy {
    pattern: Pattern,
}

impl Haproxy {
    pub fn new() -> Haproxy {
        Haproxy {
            pattern: Pattern::built(DEFAULT, true),
        }
    }
}

impl LineFormat for Haproxy {
    fn parse(&self, line: &str) -> Result<Option<Record>, String> {
        let c = self.pattern.captures(line)?;
        let mut record = self.pattern.record(&c)?;
        if c.name("server").is_some_and(|s| s.as_str() == "<NOSRV>") {
            record.calls.clear();
        }
        let term = c.name("term").map_or("-", |m| m.as_str());
        let outcome = match term.chars().next() {
            Some('s') => CallOutcome::Timeout,
            Some('S') => CallOutcome::Reset,
            _ => CallOutcome::Status(record.status.unwrap_or(200)),
        };
        for call in &mut record.calls {
            call.outcome = outcome;
        }
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_httplog_line_reads_backend_timers_and_termination() {
        let h = Haproxy::new();
        let r = h
            .parse(r#"Feb  6 12:14:14 localhost haproxy[14389]: 10.0.1.2:33317 [06/Feb/2026:12:14:14.655] http-in static/srv1 10/0/30/69/109 200 2750 - - ---- 1/1/1/1/0 0/0 {1wt.eu} {} "GET /index.html HTTP/1.1""#)
            .unwrap()
            .unwrap();
        assert_eq!(r.target, "/index.html");
        assert_eq!((r.status, r.duration), (Some(200), Some(0.109)));
        assert_eq!(r.calls[0].peer, "static");
        assert_eq!(r.calls[0].duration, Some(0.069));
        let t = h
            .parse(r#"haproxy[1]: 10.0.1.2:33317 [06/Feb/2026:12:14:15.000] http-in static/srv1 0/0/0/-1/5000 504 194 - - sH-- 1/1/1/1/0 0/0 "GET /slow HTTP/1.1""#)
            .unwrap()
            .unwrap();
        assert_eq!(t.calls[0].outcome, CallOutcome::Timeout);
        let n = h
            .parse(r#"haproxy[1]: 10.0.1.2:33317 [06/Feb/2026:12:14:15.000] http-in http-in/<NOSRV> 0/-1/-1/-1/0 403 0 - - PR-- 1/1/1/1/0 0/0 "GET /x HTTP/1.1""#)
            .unwrap()
            .unwrap();
        assert!(n.calls.is_empty());
    }
}
