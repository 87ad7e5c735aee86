//! Envoy's default access log format:
//! `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS%
//! %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%"
//! "%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"`.
//!
//! `%START_TIME%` is when the request began, so it is the arrival. The call to the upstream host took
//! `x-envoy-upstream-service-time` (ms); the response flags say how it failed: `UT` (upstream timeout) is played as
//! `hang`, `UF`, `UC`, `UH`, `URX` and `UR` (no healthy host, connection failure, reset) as `reset`.

use super::pattern::Pattern;
use super::{CallOutcome, LineFormat, Record};

const DEFAULT: &str = r#"^\[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" (?P<status>\d{3}|0) (?P<flags>\S+) \S+ \S+ (?P<duration>\d+|-) (?P<upstream_duration>\d+|-) "[^"]*" "[^"]*" "[^"]*" "[^"]*" "(?P<upstream>[^"]*)"\s*$"#;

/// The Envoy reader.
#[derive(Debug)]
pub struct Envoy {
    pattern: Pattern,
}

impl Envoy {
    pub fn new() -> Envoy {
        Envoy {
            pattern: Pattern::built(DEFAULT, true),
        }
    }
}

impl LineFormat for Envoy {
    fn parse(&self, line: &str) -> Result<Option<Record>, String> {
        let c = self.pattern.captures(line)?;
        let mut record = self.pattern.record(&c)?;
        let flags = c.name("flags").map_or("-", |m| m.as_str());
        let outcome = if flags.split(',').any(|f| f == "UT") {
            CallOutcome::Timeout
        } else if flags
            .split(',')
            .any(|f| matches!(f, "UF" | "UC" | "UH" | "URX" | "UR"))
        {
            CallOutcome::Reset
        } else {
            CallOutcome::Status(record.status.unwrap_or(200))
        };
        for call in &mut record.calls {
            call.peer = call.peer.trim_start_matches("tcp://").to_string();
            call.outcome = outcome;
        }
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_envoy_line_reads_start_time_durations_and_flags() {
        let e = Envoy::new();
        let r = e
            .parse(r#"[2026-10-10T13:55:36.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" "nsq2http" "cc21d9b0" "locations" "tcp://10.0.2.1:80""#)
            .unwrap()
            .unwrap();
        assert!((r.arrival - 1_791_640_536.31).abs() < 1e-6);
        assert_eq!(
            (r.method.as_str(), r.status, r.duration),
            ("POST", Some(204), Some(0.226))
        );
        assert_eq!(r.calls[0].peer, "10.0.2.1:80");
        assert_eq!(r.calls[0].duration, Some(0.1));
        assert_eq!(r.calls[0].outcome, CallOutcome::Status(204));
        let t = e
            .parse(r#"[2026-10-10T13:55:36.310Z] "GET /x HTTP/1.1" 504 UT 0 24 1000 - "-" "curl" "id" "svc" "10.0.2.1:80""#)
            .unwrap()
            .unwrap();
        assert_eq!(t.calls[0].outcome, CallOutcome::Timeout);
        assert_eq!(t.calls[0].duration, None);
    }
}
