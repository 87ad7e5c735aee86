//! HAR files (HTTP Archive 1.2, as browsers and proxies save them): each entry of `log.entries` is a request that
//! arrived at `startedDateTime`, took `time` ms and got `response.status`. The entry's host is the dependency, and
//! the entry its call: a HAR captured in front of a dependency (by a proxy, or by a browser calling it) records
//! what that dependency did. Status 0 (no response: the call was aborted or its connection failed) is a failed
//! connection, played as `reset`.
//!
//! A HAR is one JSON document, so it is read whole, unlike the line formats.
//!
//! Only the fields read below are kept: a HAR carries every response body and header, which a generic JSON tree
//! holds at many times the file's size. Each field is loose (a value of another type reads as missing), so that a
//! malformed entry is reported by its index as before, rather than failing the whole file.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, value::MapAccessDeserializer, IgnoredAny, IntoDeserializer};
use serde::{Deserialize, Deserializer};

use super::{CallOutcome, DependencyCall, Record};

#[derive(Deserialize)]
struct Har {
    #[serde(default)]
    log: Loose<Log>,
}

#[derive(Deserialize)]
struct Log {
    entries: Loose<Vec<Loose<Entry>>>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "startedDateTime", default)]
    started: Loose<String>,
    #[serde(default)]
    time: Loose<f64>,
    #[serde(default)]
    request: Loose<Request>,
    #[serde(default)]
    response: Loose<Response>,
}

#[derive(Deserialize, Default)]
struct Request {
    #[serde(default)]
    method: Loose<String>,
    #[serde(default)]
    url: Loose<String>,
}

#[derive(Deserialize, Default)]
struct Response {
    #[serde(default)]
    status: Loose<u64>,
}

/// A value of type `T`, or `None` when the document holds a value of another type there (as a JSON tree's
/// `as_str()` or `as_u64()` would say). A mismatched object or list is skipped without being held.
struct Loose<T>(Option<T>);

impl<T> Default for Loose<T> {
    fn default() -> Self {
        Loose(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Loose<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LooseVisitor(PhantomData))
    }
}

struct LooseVisitor<T>(PhantomData<T>);

impl<T> LooseVisitor<T> {
    fn scalar<'de, V>(v: V) -> Loose<T>
    where
        T: Deserialize<'de>,
        V: IntoDeserializer<'de, de::value::Error>,
    {
        Loose(T::deserialize(v.into_deserializer()).ok())
    }
}

impl<'de, T: Deserialize<'de>> de::Visitor<'de> for LooseVisitor<T> {
    type Value = Loose<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Loose<T>, E> {
        Ok(Self::scalar(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Loose<T>, E> {
        Ok(Self::scalar(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Loose<T>, E> {
        Ok(Self::scalar(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Loose<T>, E> {
        Ok(Self::scalar(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Loose<T>, E> {
        Ok(Self::scalar(v.to_string()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Loose<T>, E> {
        Ok(Loose(None))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Loose<T>, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(|t| Loose(Some(t)))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Loose<T>, A::Error> {
        // Only a list of entries is wanted as a list; it is read element by element, each loose in turn.
        T::deserialize(de::value::SeqAccessDeserializer::new(&mut seq))
            .map(|t| Loose(Some(t)))
            .or_else(|_: A::Error| {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Loose(None))
            })
    }
}

/// The records of a HAR document; an entry that is not a request is reported by its index.
pub fn records(text: &str) -> Result<Vec<Result<Record, String>>, String> {
    let doc: Har = serde_json::from_str(text).map_err(|e| format!("not a HAR file (JSON): {e}"))?;
    let entries = doc
        .log
        .0
        .and_then(|l| l.entries.0)
        .ok_or("not a HAR file: it has no log.entries")?;
    Ok(entries.into_iter().map(|e| entry(e.0)).collect())
}

fn entry(e: Option<Entry>) -> Result<Record, String> {
    let e = e.ok_or("the entry has no startedDateTime")?;
    let started = e.started.0.ok_or("the entry has no startedDateTime")?;
    let arrival = super::time::parse_time(&started)?;
    let request = e.request.0.unwrap_or_default();
    let method = request
        .method
        .0
        .ok_or("the entry has no request.method")?
        .to_ascii_uppercase();
    let url = request.url.0.ok_or("the entry has no request.url")?;
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| format!("`{url}` is not an absolute URL"))?;
    let (host, target) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    let status = e.response.0.and_then(|r| r.status.0).unwrap_or(0);
    let duration = e.time.0.filter(|t| *t >= 0.0).map(|ms| ms / 1e3);
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
