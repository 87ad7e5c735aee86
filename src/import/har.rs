//! HAR files (HTTP Archive 1.2, as browsers and proxies save them): each entry of `log.entries` is a request that
//! arrived at `startedDateTime`, took `time` ms and got `response.status`. The entry's host is the dependency, and
//! the entry its call: a HAR captured in front of a dependency (by a proxy, or by a browser calling it) records
//! what that dependency did. Status 0 (no response: the call was aborted or its connection failed) is a failed
//! connection, played as `reset`.
//!
//! A HAR is one JSON document, so it is read whole, unlike the line formats.

use serde_json::Value;

use super::{CallOutcome, DependencyCall, Record};

/// The records of a HAR document; an entry that is not a request is reported by its index.
pub fn records(text: &str) -> Result<Vec<Result<Record, String>>, String> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| format!("not a HAR file (JSON): {e}"))?;
    let entries = doc["log"]["entries"]
        .as_array()
        .ok_or("not a HAR file: it has no log.entries")?;
    Ok(entries.iter().map(entry).collect())
}

fn entry(e: &Value) -> Result<Record, String> {
    let started = e["startedDateTime"]
        .as_str()
        .ok_or("the entry has no startedDateTime")?;
    let arrival = super::time::parse_time(started)?;
    let method = e["request"]["method"]
        .as_str()
        .ok_or("the entry has no request.method")?
        .to_ascii_uppercase();
    let url = e["request"]["url"]
        .as_str()
        .ok_or("the entry has no request.url")?;
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| format!("`{url}` is not an absolute URL"))?;
    let (host, target) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    let status = e["response"]["status"].as_u64().unwrap_or(0);
    let duration = e["time"].as_f64().filter(|t| *t >= 0.0).map(|ms| ms / 1e3);
    let outcome = match u16::try_from(status) {
        Ok(0) | Err(_) => CallOutcome::Reset,
        Ok(s) => CallOutcome::Status(s),
    };
    Ok(Record {
        arrival,
        method,
        target,
        status: (status > 0).then_some(status as u16),
        duration,
        calls: vec![DependencyCall {
            peer: host.to_string(),
            at: arrival,
            duration,
            outcome,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_entry_is_an_arrival_and_a_call_to_its_host() {
        let har = r#"{"log": {"version": "1.2", "entries": [
            {"startedDateTime": "2026-10-10T13:55:36.120Z", "time": 45.5,
             "request": {"method": "GET", "url": "http://pricing.local:8080/price/42?x=1"},
             "response": {"status": 200}},
            {"startedDateTime": "2026-10-10T13:55:37.000Z", "time": 3000,
             "request": {"method": "GET", "url": "http://pricing.local:8080/price/7"},
             "response": {"status": 0}},
            {"request": {"method": "GET"}}
        ]}}"#;
        let r = records(har).unwrap();
        let first = r[0].as_ref().unwrap();
        assert!((first.arrival - 1_791_640_536.12).abs() < 1e-6);
        assert_eq!(first.target, "/price/42?x=1");
        assert_eq!(first.calls[0].peer, "pricing.local:8080");
        assert_eq!(first.calls[0].duration, Some(0.0455));
        assert_eq!(r[1].as_ref().unwrap().calls[0].outcome, CallOutcome::Reset);
        assert!(r[2].as_ref().unwrap_err().contains("startedDateTime"));
        assert!(records("{}").unwrap_err().contains("log.entries"));
    }
}
