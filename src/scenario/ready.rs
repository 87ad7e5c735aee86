//! `sut.ready`: what a command SUT offers to say it is ready, since a service faultline did not build may have no
//! HTTP health path at all. One variant per kind, read from a plain path (`ready: /health`, the HTTP form) or a
//! one-key map (`{ http: PATH }`, `{ tcp: true }`, `{ grpc: SERVICE }`, `{ log: REGEX }`).
//!
//! Not for waiting: `run::ready` probes each kind against the started SUT.

use std::fmt;

use regex::Regex;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// How the runner knows a command SUT is ready to take load.
#[derive(Debug, Clone)]
pub enum Readiness {
    /// `GET PATH` on the SUT's URL answers 2xx.
    Http(String),
    /// The SUT's port (from its URL) accepts a TCP connection.
    Tcp,
    /// `grpc.health.v1.Health/Check` for this service answers SERVING (`""`: the server as a whole).
    Grpc(String),
    /// A line of the SUT's stdout or stderr matches this regex.
    Log(Regex),
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness::Http("/health".into())
    }
}

const EXPECTED: &str =
    "a path such as /health, or one of { http: PATH }, { tcp: true }, { grpc: SERVICE }, { log: REGEX }";

/// The map form as written, before each value is checked.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Written {
    Http(String),
    Tcp(bool),
    Grpc(String),
    Log(String),
}

impl Readiness {
    fn http<E: de::Error>(path: &str) -> Result<Readiness, E> {
        if path.starts_with('/') {
            Ok(Readiness::Http(path.to_string()))
        } else {
            Err(E::custom(format!(
                "{path:?}: the readiness path is on the SUT's URL and starts with /, e.g. /health"
            )))
        }
    }

    fn from_written<E: de::Error>(w: Written) -> Result<Readiness, E> {
        match w {
            Written::Http(path) => Readiness::http(&path),
            Written::Tcp(true) => Ok(Readiness::Tcp),
            Written::Tcp(false) => Err(E::custom(
                "`tcp: false` waits for nothing: write `tcp: true`, or another kind of readiness",
            )),
            Written::Grpc(service) => Ok(Readiness::Grpc(service)),
            Written::Log(pattern) => Regex::new(&pattern)
                .map(Readiness::Log)
                .map_err(|e| E::custom(format!("`log` is not a valid regex: {e}"))),
        }
    }
}

impl<'de> Deserialize<'de> for Readiness {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Readiness;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Readiness, E> {
                Readiness::http(v)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Readiness, A::Error> {
                let written = Written::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Readiness::from_written(written)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Readiness {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(1))?;
        match self {
            Readiness::Http(path) => map.serialize_entry("http", path)?,
            Readiness::Tcp => map.serialize_entry("tcp", &true)?,
            Readiness::Grpc(service) => map.serialize_entry("grpc", service)?,
            Readiness::Log(pattern) => map.serialize_entry("log", pattern.as_str())?,
        }
        map.end()
    }
}

impl schemars::JsonSchema for Readiness {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Readiness".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let one = |key: &str, value: serde_json::Value, description: &str| {
            serde_json::json!({
                "type": "object",
                "description": description,
                "properties": { key: value },
                "required": [key],
                "additionalProperties": false,
            })
        };
        schemars::json_schema!({
            "description": "How the runner knows a command SUT is ready (default /health): a path polled until it answers 2xx, or one of { http: PATH }, { tcp: true }, { grpc: SERVICE }, { log: REGEX }",
            "oneOf": [
                { "type": "string", "pattern": "^/", "description": "a path on the SUT's URL, polled until GET answers 2xx" },
                one("http", serde_json::json!({ "type": "string", "pattern": "^/" }), "GET this path on the SUT's URL answers 2xx"),
                one("tcp", serde_json::json!({ "const": true }), "the SUT's port accepts a TCP connection"),
                one("grpc", serde_json::json!({ "type": "string" }), "grpc.health.v1.Health/Check for this service answers SERVING (\"\" for the server as a whole)"),
                one("log", serde_json::json!({ "type": "string", "format": "regex" }), "a line of the SUT's stdout or stderr matches this regex"),
            ],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<Readiness, String> {
        serde_saphyr::from_str::<Readiness>(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn a_plain_path_means_http_readiness_on_that_path() {
        assert!(matches!(read("/ready"), Ok(Readiness::Http(p)) if p == "/ready"));
        assert!(matches!(read("{ http: /live }"), Ok(Readiness::Http(p)) if p == "/live"));
    }

    #[test]
    fn each_map_form_reads_as_its_own_kind() {
        assert!(matches!(read("{ tcp: true }"), Ok(Readiness::Tcp)));
        assert!(
            matches!(read("{ grpc: shop.Prices }"), Ok(Readiness::Grpc(s)) if s == "shop.Prices")
        );
        assert!(matches!(read("{ grpc: \"\" }"), Ok(Readiness::Grpc(s)) if s.is_empty()));
        assert!(
            matches!(read("{ log: 'Serving on \\d+' }"), Ok(Readiness::Log(r)) if r.is_match("Serving on 8080"))
        );
    }

    #[test]
    fn a_form_that_cannot_mean_readiness_is_refused_saying_what_is_expected() {
        for (yaml, words) in [
            ("{ tcp: false }", "waits for nothing"),
            ("{ log: '(unclosed' }", "not a valid regex"),
            ("{ htp: /health }", "htp"),
            ("health", "starts with /"),
            ("{ http: /a, tcp: true }", "tcp"),
        ] {
            let message = read(yaml).expect_err(yaml);
            assert!(message.contains(words), "{yaml}: {message}");
        }
    }

    #[test]
    fn every_kind_survives_a_round_trip_through_its_written_form() {
        for yaml in [
            "{ http: /health }",
            "{ tcp: true }",
            "{ grpc: \"\" }",
            "{ log: ready }",
        ] {
            let written = serde_saphyr::to_string(&read(yaml).unwrap()).unwrap();
            let again = read(&written).unwrap();
            assert_eq!(serde_saphyr::to_string(&again).unwrap(), written, "{yaml}");
        }
    }
}
