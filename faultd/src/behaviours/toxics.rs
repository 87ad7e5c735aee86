//! Toxics: what a TCP route does to the bytes of its connections, written in a scenario as Toxiproxy writes them.
//!
//! For: the `toxics:` list of a TCP route and of a phase that names one (`{type: latency, stream: downstream,
//! attributes: {latency: 2000}}`), checked against the toxic list of `crate::tcp::toxics`, and `--time-scale` of
//! the attributes that are durations or rates. A phase's list replaces the route's whole list; `[]` clears it.
//! Not for: HTTP routes (validation refuses toxics there), or moving bytes (`crate::tcp::proxy` does, with the
//! toxics the TCP schedule hands it).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Fault, Invalid};
use crate::tcp::{TcpError, Toxic, ToxicSpec};

/// One toxic of a TCP route, with Toxiproxy's field names, units and defaults (`name` = `type_stream`, `stream`
/// downstream, `toxicity` 1.0, attributes at their defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TcpToxic {
    /// The toxic type: latency, bandwidth, slow_close, timeout, reset_peer, limit_data, slicer, stall,
    /// connect_delay.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its name, unique within the route; `type_stream` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `upstream` (client to server) or `downstream` (server to client, the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
    /// The share of connections it takes, 0.0..=1.0 (default 1.0), drawn once per connection from the seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toxicity: Option<f64>,
    /// The type's attributes in Toxiproxy's units (`latency` and `jitter` in ms, `rate` in KB/s, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<Value>,
}

/// Attributes that are durations, per toxic type: `--time-scale` multiplies them.
const DURATIONS: &[(&str, &[&str])] = &[
    ("latency", &["latency", "jitter"]),
    ("slow_close", &["delay"]),
    ("timeout", &["timeout"]),
    ("reset_peer", &["timeout"]),
    ("slicer", &["delay"]),
    ("connect_delay", &["delay"]),
];

/// Attributes that are rates, per toxic type: `--time-scale` divides them.
const RATES: &[(&str, &[&str])] = &[("bandwidth", &["rate"])];

impl TcpToxic {
    /// The Toxiproxy API's form of this toxic.
    pub fn spec(&self) -> ToxicSpec {
        ToxicSpec {
            name: self.name.clone(),
            kind: Some(self.kind.clone()),
            stream: self.stream.clone(),
            toxicity: self.toxicity,
            attributes: self.attributes.clone(),
        }
    }

    /// The toxic in force, as the data plane runs it.
    pub fn build(&self) -> Result<Toxic, TcpError> {
        Toxic::from_spec(self.spec())
    }

    /// The toxic's name as it will run (its own, or `type_stream`).
    pub fn run_name(&self) -> String {
        match &self.name {
            Some(n) if !n.is_empty() => n.clone(),
            _ => format!(
                "{}_{}",
                self.kind,
                self.stream.as_deref().unwrap_or("downstream")
            ),
        }
    }

    fn scale_attributes(&mut self, table: &[(&str, &[&str])], factor: f64) {
        let Some(names) = table.iter().find(|(k, _)| *k == self.kind).map(|(_, n)| *n) else {
            return;
        };
        let Some(Value::Object(map)) = &mut self.attributes else {
            return;
        };
        for name in names {
            if let Some(v) = map.get_mut(*name).and_then(|v| v.as_f64()) {
                map.insert(name.to_string(), Value::from((v * factor).round() as u64));
            }
        }
    }
}

impl Fault for TcpToxic {
    fn validate(&self) -> Result<(), Invalid> {
        self.build().map(|_| ()).map_err(|e| match e {
            TcpError::Invalid { field, message } => Invalid::new(field, message),
            TcpError::InvalidToxicType(t) => Invalid::new(
                "type",
                TcpError::InvalidToxicType(t).to_string(),
            ),
            TcpError::InvalidStream(s) => Invalid::new(
                "stream",
                format!("{s:?}: expected upstream or downstream"),
            ),
            other => Invalid::new("", other.to_string()),
        })
    }

    fn scale_time(&mut self, factor: f64) {
        self.scale_attributes(DURATIONS, factor);
        if factor > 0.0 {
            self.scale_attributes(RATES, 1.0 / factor);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn toxic(v: Value) -> TcpToxic {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_toxic_is_checked_against_the_toxic_list_with_its_field_named() {
        assert!(toxic(json!({"type": "latency", "attributes": {"latency": 2000}}))
            .validate()
            .is_ok());
        let e = toxic(json!({"type": "latency", "attributes": {"latency": -1}}))
            .validate()
            .unwrap_err();
        assert!(e.field.starts_with("attributes"), "{e:?}");
        let e = toxic(json!({"type": "latenzy"})).validate().unwrap_err();
        assert_eq!(e.field, "type");
        let e = toxic(json!({"type": "latency", "stream": "up"}))
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "stream");
    }

    #[test]
    fn time_scale_multiplies_durations_and_divides_rates() {
        let mut l = toxic(json!({"type": "latency", "attributes": {"latency": 2000, "jitter": 100}}));
        l.scale_time(0.1);
        assert_eq!(l.attributes, Some(json!({"latency": 200, "jitter": 10})));
        let mut b = toxic(json!({"type": "bandwidth", "attributes": {"rate": 100}}));
        b.scale_time(0.1);
        assert_eq!(b.attributes, Some(json!({"rate": 1000})));
    }
}
