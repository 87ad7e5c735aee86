//! The load a run offers, as the scenario writes it: the `load:` section deserialises straight into [`LoadSpec`].
//!
//! This module is for the shape of the configuration, its validation and its time scaling. It is not for turning
//! rates into send times (that is `schedule`) nor for building requests (that is the request pipeline, `request`).

pub use faultline_proto::MessageSpec;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use faultline_units::{Dur, GrpcCode, Rate};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::LoadError;

/// How far apart arrivals may be and still go out in one wake-up of the dispatcher, by default (`load.coalesce`,
/// `--coalesce`): each is stamped with its own intended time, and the batch goes at its last arrival's time. A
/// wake-up costs about as much CPU as a request on a virtual machine (bench/loadgen.md, part d); 0.1 ms bounds
/// them at 10,000/s for a send lag of at most that much, so arrivals further apart (every one below 10,000/s,
/// uniform) are sent each at its own instant.
pub const DEFAULT_COALESCE: Duration = Duration::from_micros(100);

/// The widest `coalesce` accepted: wider would turn the timetable into bursts the service sees as such.
pub const MAX_COALESCE: Duration = Duration::from_millis(10);

/// The open-model load of a run: an arrival schedule, a request mix and the client's limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// The arrival rate: one rate (`500/s`) or a list of segments with steps and ramps. Either this or `replay`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateSpec>,
    /// An exact timetable instead of a rate: each recorded request at its own time, with its method and path
    /// (see [`crate::replay`]). Either this or `rate`; its requests replace `requests`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::replay::Replay>,
    /// How arrivals are spaced: evenly (`uniform`) or with exponential gaps (`poisson`, seeded by the run).
    #[serde(default)]
    pub arrivals: Arrivals,
    /// Client timeout, counted from the moment the request is dispatched (waiting for a connection included).
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
    /// Cap on requests in flight; a request due while the cap is reached is counted `dropped`, never delayed.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: u64,
    /// Keep-alive connections to the target: requests beyond this many wait for a free connection.
    #[serde(default = "default_connections")]
    pub connections: u32,
    /// Arrivals due within this much of each other go out in one wake-up of the sender, at the last one's time:
    /// fewer wake-ups (less CPU) for a send lag of up to this much, which counts as the generator's own lateness
    /// (kept apart, left out of the corrected latency). `100us` by default (each arrival at its own instant below
    /// 10,000/s), `0s` for every arrival at its own instant, at most `10ms`.
    #[serde(default = "default_coalesce")]
    pub coalesce: Dur,
    /// Weighted request templates; each arrival picks one at random by weight. Not with `replay`.
    #[serde(default)]
    pub requests: Vec<RequestTemplate>,
    /// A response carrying this header is outcome `fallback` (the demo service sets `X-Fallback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_header: Option<String>,
    /// Response statuses that mean the service answered with a fallback (e.g. a 503 with Retry-After).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_status: Vec<u16>,
    /// How an `https://` target is trusted: `{ ca: FILE }` (such as the run's CA faultd writes), or
    /// `{ insecure: true }`. The system's roots when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::tls::TlsSpec>,
    /// gRPC statuses that mean the service answered with a fallback (`fallback_header` is looked for in the
    /// metadata, initial and trailing, of gRPC answers too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback_grpc_status: Vec<GrpcCode>,
    /// HTTP/2 and gRPC: the most streams in flight on one of the `connections`; an arrival that finds every
    /// connection at this limit (or at the server's SETTINGS_MAX_CONCURRENT_STREAMS, if lower) is `dropped`.
    #[serde(default = "default_streams_per_connection")]
    pub streams_per_connection: u32,
}

fn default_timeout() -> Dur {
    Dur::from_millis(5000)
}
fn default_max_in_flight() -> u64 {
    10_000
}
fn default_connections() -> u32 {
    1000
}
fn default_coalesce() -> Dur {
    Dur(DEFAULT_COALESCE)
}
fn default_streams_per_connection() -> u32 {
    100
}

/// How inter-arrival gaps are drawn. Both follow the same rate curve; Poisson adds the burstiness of
/// independent users and is reproducible from the run's seed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Evenly spaced: the i-th arrival is where the expected count reaches i (t0 + i/R at a constant rate).
    #[default]
    Uniform,
    /// Exponential gaps (a Poisson process with the same rate curve), drawn from a seeded generator.
    Poisson,
}

/// The arrival rate over the run: one constant rate, or segments that step or ramp between rates.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(untagged)]
#[serde(untagged)]
pub enum RateSpec {
    /// One rate for the whole run.
    Constant(Rate),
    /// Segments in time order; the rate before the first segment is zero.
    Segments(Vec<RateSegment>),
}

/// One change of the arrival rate: from `at` on, either a new constant `rate`, or a linear ramp from the rate in
/// effect at `at` to `ramp_to` over `over` (held after the ramp).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateSegment {
    /// When this segment begins, from the run's origin.
    pub at: Dur,
    /// The constant rate from `at` on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// The rate a ramp reaches at `at + over`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_to: Option<Rate>,
    /// The length of the ramp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<Dur>,
}

// A hand-written Deserialize instead of `untagged`: serde's untagged errors say only "did not match any variant",
// which names neither the field nor what was expected.
impl<'de> Deserialize<'de> for RateSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RateSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a rate such as \"500/s\" or a list of segments such as [{{at: 0s, rate: 100/s}}]")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RateSpec, E> {
                v.parse().map(RateSpec::Constant).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RateSpec, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RateSpec, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RateSpec, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RateSpec, A::Error> {
                let mut segments = Vec::new();
                while let Some(segment) = seq.next_element::<RateSegment>()? {
                    segments.push(segment);
                }
                Ok(RateSpec::Segments(segments))
            }
        }
        d.deserialize_any(V)
    }
}

/// One kind of request in the mix. Exactly one of the method keys (`get`, `post`, ...) holds the path, which may
/// contain generators: `{seq}` (the arrival's index, from 0) and `{rand:1..1000}` (uniform, both ends included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestTemplate {
    /// The path of a GET request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub get: Option<String>,
    /// The path of a POST request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post: Option<String>,
    /// The path of a PUT request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub put: Option<String>,
    /// The path of a PATCH request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// The path of a DELETE request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete: Option<String>,
    /// The path of a HEAD request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The request body, sent as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Relative weight in the mix (default 1).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// A gRPC call of this method, e.g. `/shop.Catalog/GetProduct` (sent over HTTP/2 as a POST).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<String>,
    /// The gRPC request message: its bytes as hex, e.g. `0a0568656c6c6f`, or written as JSON against its type in
    /// `proto`, e.g. `{json: {id: "{rand:1..1000}", tags: [new]}}` (`{seq}` and `{rand:lo..hi}` in its strings
    /// are rendered per request); empty when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<faultline_proto::MessageSpec>,
    /// The `.proto` files that define the method (their imports are found beside them or in the folders above),
    /// e.g. `[protos/shop.proto]`: needed for a message written as JSON, and they let the report show answers
    /// decoded. Relative to the scenario file (to the working folder for loadgen alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proto: Vec<String>,
    /// The `proto` files compiled, as a base64 `FileDescriptorSet` (what `protoc --include_imports
    /// --descriptor_set_out` writes): what the runner sends an agent in place of the files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto_set: Option<String>,
    /// A file holding the gRPC request message's bytes: a regular file of at most 4 MiB (gRPC's default message
    /// limit), relative to the working folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_file: Option<String>,
    /// gRPC metadata (request headers), e.g. `{authorization: Bearer x}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// The gRPC deadline, sent as `grpc-timeout`; the call also ends as `timeout` when it passes (or at the
    /// load's `timeout`, if sooner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Dur>,
    /// Send this (REST) request over HTTP/2 with prior knowledge instead of HTTP/1.1.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub http2: bool,
}

fn default_weight() -> u32 {
    1
}

/// Compiles a request's `proto` files (as written: relative to the working folder, or absolute), each read as a
/// regular file of at most [`faultline_proto::MAX_PROTO_FILE`] bytes.
pub fn read_protos(
    files: &[String],
) -> Result<faultline_proto::Protos, faultline_proto::ProtoError> {
    use faultline_units::input::{read_capped, Cap};
    faultline_proto::Protos::compile(files, |file| {
        let cap = Cap::limit(
            faultline_units::Size(faultline_proto::MAX_PROTO_FILE as u64),
            "far above any real .proto file",
        );
        read_capped(std::path::Path::new(file), cap).map_err(|e| e.to_string())
    })
}

/// The largest gRPC request message a `message_file` may hold: gRPC's default message limit.
pub const MAX_MESSAGE_FILE: usize = 4 << 20;

/// Reads a request's `message_file` (relative to the working folder): a regular file of at most
/// [`MAX_MESSAGE_FILE`] bytes, so that a FIFO or a device named by mistake cannot stall or flood the load.
pub fn read_message_file(file: &str) -> Result<Vec<u8>, String> {
    use faultline_units::input::{read_capped, Cap};
    read_capped(
        std::path::Path::new(file),
        Cap::limit(
            faultline_units::Size(MAX_MESSAGE_FILE as u64),
            "gRPC's default message limit",
        ),
    )
    .map_err(|e| e.to_string())
}

impl Default for RequestTemplate {
    /// No method yet, weight 1 (as a template without `weight` in a scenario).
    fn default() -> Self {
        RequestTemplate {
            get: None,
            post: None,
            put: None,
            patch: None,
            delete: None,
            head: None,
            body: None,
            headers: BTreeMap::new(),
            weight: default_weight(),
            grpc: None,
            message: None,
            proto: Vec::new(),
            proto_set: None,
            message_file: None,
            metadata: BTreeMap::new(),
            deadline: None,
            http2: false,
        }
    }
}

impl RequestTemplate {
    /// A GET of `path` with weight 1 (what the CLI builds from `--url`).
    pub fn get(path: impl Into<String>) -> Self {
        RequestTemplate {
            get: Some(path.into()),
            ..Default::default()
        }
    }

    /// Whether this template goes over HTTP/2 (a gRPC call, or `http2: true`).
    pub fn is_http2(&self) -> bool {
        self.http2 || self.grpc.is_some()
    }

    /// The method and path this template names, or an error if it names none or several. A gRPC call is a POST.
    pub fn method_and_path(&self) -> Result<(&'static str, &str), String> {
        let named: Vec<(&'static str, &str)> = [
            ("POST", &self.grpc),
            ("GET", &self.get),
            ("POST", &self.post),
            ("PUT", &self.put),
            ("PATCH", &self.patch),
            ("DELETE", &self.delete),
            ("HEAD", &self.head),
        ]
        .into_iter()
        .filter_map(|(m, p)| p.as_deref().map(|p| (m, p)))
        .collect();
        match named.as_slice() {
            [one] => Ok(*one),
            [] => Err(
                "names no method: write one of get, post, put, patch, delete, head with the path, \
                 or grpc with the method"
                    .into(),
            ),
            _ => Err(format!(
                "names {} methods ({}); a template has exactly one",
                named.len(),
                named
                    .iter()
                    .map(|(m, _)| m.to_lowercase())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
}

impl LoadSpec {
    /// A constant-rate load of GET requests to `path` with the default limits (timeout 5 s, 10,000 in flight,
    /// 1,000 connections): the common case of the CLI and of tests.
    pub fn constant(rate: Rate, path: impl Into<String>) -> Self {
        LoadSpec {
            rate: Some(RateSpec::Constant(rate)),
            replay: None,
            arrivals: Arrivals::Uniform,
            timeout: default_timeout(),
            max_in_flight: default_max_in_flight(),
            connections: default_connections(),
            coalesce: default_coalesce(),
            requests: vec![RequestTemplate::get(path)],
            fallback_header: None,
            fallback_status: Vec::new(),
            tls: None,
            fallback_grpc_status: Vec::new(),
            streams_per_connection: default_streams_per_connection(),
        }
    }

    /// Whether the run speaks HTTP/2 (every template is a gRPC call or says `http2: true`).
    pub fn is_http2(&self) -> bool {
        self.requests.first().is_some_and(RequestTemplate::is_http2)
    }

    /// Checks what [`LoadSpec::validate`] checks but the templates themselves (which the request pipeline
    /// compiles): rate segments in order with one kind each, ramps that end before the next segment, positive
    /// limits, a non-empty mix of one protocol, valid fallback rules.
    pub(crate) fn check(&self) -> Result<(), LoadError> {
        let bad = |field: String, why: String| Err(LoadError::InvalidSpec { field, why });
        if let Some(replay) = &self.replay {
            if self.rate.is_some() {
                return bad(
                    "load.replay".into(),
                    "give either `rate` or `replay`, not both: a replay's timetable sets every arrival".into(),
                );
            }
            if !self.requests.is_empty() {
                return bad(
                    "load.requests".into(),
                    "a replay sends the timetable's own requests: remove `requests`".into(),
                );
            }
            replay.check()?;
        } else if self.rate.is_none() {
            return bad(
                "load.rate".into(),
                "give the arrival rate (`rate: 500/s` or segments), or a timetable with `replay: FILE`"
                    .into(),
            );
        }
        let sends = match &self.rate {
            Some(RateSpec::Constant(r)) => r.per_sec() > 0.0,
            Some(RateSpec::Segments(segments)) => segments
                .iter()
                .flat_map(|s| [s.rate, s.ramp_to])
                .flatten()
                .any(|r| r.per_sec() > 0.0),
            None => true,
        };
        if !sends && !matches!(&self.rate, Some(RateSpec::Segments(s)) if s.is_empty()) {
            return bad(
                "load.rate".into(),
                "a rate of 0/s sends no request, so there is nothing to judge: give a rate above zero \
                 (e.g. `rate: 100/s`)"
                    .into(),
            );
        }
        if let Some(RateSpec::Segments(segments)) = &self.rate {
            if segments.is_empty() {
                return bad("load.rate".into(), "the list of segments is empty".into());
            }
            for (i, s) in segments.iter().enumerate() {
                let field = format!("load.rate[{i}]");
                match (s.rate, s.ramp_to, s.over) {
                    (Some(_), None, None) => {}
                    (None, Some(_), Some(over)) if over.get().is_zero() => {
                        return bad(field, "a ramp needs `over` longer than 0s".into())
                    }
                    (None, Some(_), Some(_)) => {}
                    (None, Some(_), None) => {
                        return bad(field, "`ramp_to` needs `over` (the ramp's length)".into())
                    }
                    (None, None, Some(_)) => {
                        return bad(field, "`over` needs `ramp_to` (the rate to reach)".into())
                    }
                    (None, None, None) => {
                        return bad(field, "give either `rate` or `ramp_to` with `over`".into())
                    }
                    _ => {
                        return bad(
                            field,
                            "give either `rate` or `ramp_to` with `over`, not both".into(),
                        )
                    }
                }
                if let Some(next) = segments.get(i + 1) {
                    if next.at <= s.at {
                        return bad(
                            format!("load.rate[{}].at", i + 1),
                            format!(
                                "segments must be in time order: {} does not come after {}",
                                next.at, s.at
                            ),
                        );
                    }
                    if let Some(over) = s.over {
                        if s.at.get() + over.get() > next.at.get() {
                            return bad(
                                format!("{field}.over"),
                                format!(
                                    "the ramp from {} over {} ends after the next segment starts at {}",
                                    s.at, over, next.at
                                ),
                            );
                        }
                    }
                }
            }
        }
        if self.timeout.get().is_zero() {
            return bad(
                "load.timeout".into(),
                "the timeout must be longer than 0s".into(),
            );
        }
        if self.max_in_flight == 0 {
            return bad(
                "load.max_in_flight".into(),
                "the cap must be at least 1".into(),
            );
        }
        if self.connections == 0 {
            return bad(
                "load.connections".into(),
                "at least 1 connection is needed".into(),
            );
        }
        if self.coalesce.get() > MAX_COALESCE {
            return bad(
                "load.coalesce".into(),
                format!(
                    "{} is wider than {}: arrivals held that long go out as bursts; use a rate with bursts \
                     (`arrivals: poisson`) or a replay to send bursts on purpose",
                    self.coalesce,
                    Dur(MAX_COALESCE)
                ),
            );
        }
        if self.requests.is_empty() && self.replay.is_none() {
            return bad(
                "load.requests".into(),
                "the mix is empty: give at least one request template".into(),
            );
        }
        if !self.requests.is_empty() && self.requests.iter().all(|r| r.weight == 0) {
            return bad("load.requests".into(), "every template has weight 0".into());
        }
        if let Some(h) = &self.fallback_header {
            if hyper::header::HeaderName::from_bytes(h.as_bytes()).is_err() {
                return bad(
                    "load.fallback_header".into(),
                    format!("{h:?} is not a valid header name"),
                );
            }
        }
        for s in &self.fallback_status {
            if !(100..=599).contains(s) {
                return bad(
                    "load.fallback_status".into(),
                    format!("{s} is not an HTTP status (100..=599)"),
                );
            }
        }
        if self.streams_per_connection == 0 {
            return bad(
                "load.streams_per_connection".into(),
                "at least 1 stream per connection is needed".into(),
            );
        }
        let http2 = self.is_http2();
        if let Some(i) = self.requests.iter().position(|r| r.is_http2() != http2) {
            return bad(
                format!("load.requests[{i}]"),
                "a mix is all HTTP/1.1 or all HTTP/2: give every template `http2: true` or a `grpc` method, or none"
                    .into(),
            );
        }
        Ok(())
    }

    /// Multiplies every duration by `factor` and divides every rate by it; counts and shares are unchanged.
    pub fn scale_time(&mut self, factor: f64) {
        let rate = |r: Rate| {
            Rate::per_second(if factor > 0.0 {
                r.per_sec() / factor
            } else {
                r.per_sec()
            })
        };
        if let Some(replay) = &mut self.replay {
            replay.scale_time(factor);
        }
        match &mut self.rate {
            None => {}
            Some(RateSpec::Constant(r)) => *r = rate(*r),
            Some(RateSpec::Segments(segments)) => {
                for s in segments {
                    s.at = s.at.scaled(factor);
                    s.rate = s.rate.map(rate);
                    s.ramp_to = s.ramp_to.map(rate);
                    s.over = s.over.map(|d| d.scaled(factor));
                }
            }
        }
        self.timeout = self.timeout.scaled(factor);
        for r in &mut self.requests {
            r.deadline = r.deadline.map(|d| d.scaled(factor));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTRACT_EXAMPLE: &str = r#"
rate: [ { at: 0s, rate: 100/s }, { at: 10s, ramp_to: 500/s, over: 5s }, { at: 40s, rate: 50/s } ]
arrivals: poisson
timeout: 5s
max_in_flight: 10000
connections: 1000
requests:
  - { get: "/product/{rand:1..1000}", weight: 9 }
  - { post: "/checkout", body: '{"amount": 10}', headers: { content-type: application/json }, weight: 1 }
fallback_header: X-Fallback
fallback_status: [ ]
"#;

    #[test]
    fn the_contract_example_parses_and_validates() {
        let spec: LoadSpec = serde_saphyr::from_str(CONTRACT_EXAMPLE).unwrap();
        spec.validate().unwrap();
        assert_eq!(spec.arrivals, Arrivals::Poisson);
        assert_eq!(spec.requests.len(), 2);
        assert_eq!(
            spec.requests[1].method_and_path().unwrap(),
            ("POST", "/checkout")
        );
        let Some(RateSpec::Segments(segments)) = &spec.rate else {
            panic!("expected segments")
        };
        assert_eq!(segments[1].ramp_to.unwrap().per_sec(), 500.0);
        let single: LoadSpec =
            serde_saphyr::from_str("rate: 500/s\nrequests: [ { get: / } ]").unwrap();
        assert_eq!(
            single.rate,
            Some(RateSpec::Constant("500/s".parse().unwrap()))
        );
        assert_eq!(single.timeout, Dur::from_millis(5000));
        assert_eq!(
            single.coalesce,
            "100us".parse().unwrap(),
            "the default window"
        );
        for window in ["0s", "1ms", "10ms"] {
            let spec: LoadSpec = serde_saphyr::from_str(&format!(
                "rate: 500/s\ncoalesce: {window}\nrequests: [ {{ get: / }} ]"
            ))
            .unwrap();
            assert_eq!(spec.coalesce, window.parse().unwrap());
            spec.validate().unwrap();
        }
    }

    #[test]
    fn unknown_fields_and_unit_less_rates_are_refused_with_the_reason() {
        let e =
            serde_saphyr::from_str::<LoadSpec>("rate: 500/s\nrequests: []\nburst: 3").unwrap_err();
        assert!(e.to_string().contains("burst"), "{e}");
        let e = serde_saphyr::from_str::<LoadSpec>("rate: 500\nrequests: []").unwrap_err();
        assert!(e.to_string().contains("not a rate"), "{e}");
        let e = serde_saphyr::from_str::<LoadSpec>(
            "rate: [ { at: 0s, rate: 5/s, speed: 1 } ]\nrequests: []",
        )
        .unwrap_err();
        assert!(e.to_string().contains("speed"), "{e}");
    }

    #[test]
    fn validation_names_the_field_of_each_mistake() {
        let mut spec = LoadSpec::constant("10/s".parse().unwrap(), "/");
        type Breakage = Box<dyn Fn(&mut LoadSpec)>;
        let cases: Vec<(&str, Breakage)> = vec![
            (
                "load.rate[1].at",
                Box::new(|s| s.rate = segments("[{at: 5s, rate: 1/s}, {at: 2s, rate: 2/s}]")),
            ),
            (
                "load.rate[0].over",
                Box::new(|s| {
                    s.rate = segments("[{at: 0s, ramp_to: 9/s, over: 5s}, {at: 2s, rate: 2/s}]")
                }),
            ),
            (
                "load.rate[0]",
                Box::new(|s| s.rate = segments("[{at: 0s, rate: 1/s, ramp_to: 9/s, over: 1s}]")),
            ),
            (
                "load.rate[0]",
                Box::new(|s| s.rate = segments("[{at: 0s, ramp_to: 9/s}]")),
            ),
            ("load.timeout", Box::new(|s| s.timeout = Dur::ZERO)),
            ("load.max_in_flight", Box::new(|s| s.max_in_flight = 0)),
            ("load.connections", Box::new(|s| s.connections = 0)),
            (
                "load.coalesce",
                Box::new(|s| s.coalesce = "10.5ms".parse().unwrap()),
            ),
            ("load.requests", Box::new(|s| s.requests.clear())),
            (
                "load.requests[0]",
                Box::new(|s| s.requests[0].post = Some("/x".into())),
            ),
            (
                "load.requests[0]",
                Box::new(|s| s.requests[0].get = Some("/p/{rand:9..1}".into())),
            ),
            (
                "load.requests[0]",
                Box::new(|s| s.requests[0].get = Some("no-slash".into())),
            ),
            (
                "load.requests[0].headers",
                Box::new(|s| {
                    s.requests[0].headers.insert("bad name".into(), "v".into());
                }),
            ),
            (
                "load.fallback_status",
                Box::new(|s| s.fallback_status = vec![42]),
            ),
        ];
        for (field, break_it) in cases {
            let mut broken = spec.clone();
            break_it(&mut broken);
            let e = broken.validate().unwrap_err().to_string();
            assert!(e.contains(field), "expected {field} in {e}");
        }
        spec.requests[0].get = Some("/p/{seq}/{rand:1..1000}?q=1".into());
        spec.validate().unwrap();
    }

    fn segments(yaml: &str) -> Option<RateSpec> {
        Some(serde_saphyr::from_str(yaml).unwrap())
    }

    #[test]
    fn scaling_time_multiplies_durations_and_divides_rates() {
        let mut spec: LoadSpec = serde_saphyr::from_str(CONTRACT_EXAMPLE).unwrap();
        spec.scale_time(0.1);
        assert_eq!(spec.timeout, "500ms".parse().unwrap());
        let Some(RateSpec::Segments(s)) = &spec.rate else {
            panic!("expected segments")
        };
        assert_eq!(s[0].rate.unwrap().per_sec(), 1000.0);
        assert_eq!(s[1].at, "1s".parse().unwrap());
        assert_eq!(s[1].ramp_to.unwrap().per_sec(), 5000.0);
        assert_eq!(s[1].over.unwrap(), "500ms".parse().unwrap());
        assert_eq!(s[2].at, "4s".parse().unwrap());
        assert_eq!(spec.max_in_flight, 10_000);
        assert_eq!(spec.connections, 1000);

        let mut constant = LoadSpec::constant("500/s".parse().unwrap(), "/");
        constant.timeout = "2s".parse().unwrap();
        constant.scale_time(0.1);
        assert_eq!(
            constant.rate,
            Some(RateSpec::Constant("5000/s".parse().unwrap()))
        );
        assert_eq!(constant.timeout, "200ms".parse().unwrap());
    }
}
