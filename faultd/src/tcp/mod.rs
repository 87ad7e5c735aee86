//! TCP routes: faultd as a fault-injecting TCP proxy in front of a real database, cache or queue, with
//! Toxiproxy's toxics per direction.
//!
//! For: the route itself (a loopback listener that forwards each connection to an upstream `host:port`), its
//! toxics and their per-connection share (`toxicity`), the route being down (Toxiproxy's `enabled: false`: new
//! connects refused, open connections closed), and a recorder per route. A call here is a connection. The
//! registry ([`TcpRoutes`]) is the library API; the Toxiproxy-compatible HTTP API (`crate::toxiproxy`) is a thin
//! layer over it. Routes declared in the configuration (`tcp: { listen, upstream }`) are created at start and their
//! toxics follow the schedule of phases ([`schedule`]). Not for: HTTP (the HTTP data plane is `crate::http`).
//!
//! Modules: [`toxics`] (one file per toxic and the one list), [`proxy`] (listener and connection tasks),
//! [`routes`] (the registry), [`record`] (the per-bucket recorder), [`schedule`] (toxics over the phases).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = faultd::Config::from_yaml("routes:\n  any: { path: /* }\n", "inline.yaml")?;
//! let faultd = faultd::start(config, faultd::Options::default()).await?;
//! let tcp = faultd.tcp();
//! let route = tcp.create(faultd::tcp::ProxySpec::new("redis", "127.0.0.1:0", "127.0.0.1:6379"))?;
//! tcp.add_toxic("redis", serde_json::from_str(r#"{"type": "latency", "attributes": {"latency": 300}}"#)?)?;
//! println!("point the client at {}", route.listen);
//! # Ok(()) }
//! ```

pub mod protocol;
pub mod proxy;
pub mod record;
pub mod routes;
pub mod schedule;
pub mod toxics;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::behaviours::Invalid;
use crate::draw::route_key;

pub use protocol::{OnGarbage, Ssl, TcpProtocol};
pub use record::{TcpBucket, TcpRecorder, TcpRouteRecording};
pub use routes::{TcpRoutes, TcpSettings};
pub use toxics::{Effect, Registration, Stream, REGISTRY};

/// Why a TCP route or toxic change was refused. Each maps to the status Toxiproxy answers with.
#[derive(Debug, thiserror::Error)]
pub enum TcpError {
    /// No proxy has this name (404).
    #[error("proxy not found")]
    ProxyNotFound(String),
    /// A proxy already has this name (409).
    #[error("proxy already exists")]
    ProxyExists(String),
    /// The proxy has no toxic of this name (404).
    #[error("toxic not found")]
    ToxicNotFound(String),
    /// The proxy already has a toxic of this name (409).
    #[error("toxic already exists")]
    ToxicExists(String),
    /// A field Toxiproxy requires is missing (400).
    #[error("missing required field: {0}")]
    MissingField(&'static str),
    /// `stream` is neither `upstream` nor `downstream` (400).
    #[error("stream was invalid, can be either upstream or downstream")]
    InvalidStream(String),
    /// faultd knows no toxic of this type (400).
    #[error("invalid toxic type: {0:?} (faultd knows {known})", known = known_types())]
    InvalidToxicType(String),
    /// A field's value is wrong (400).
    #[error("bad request body: {field}: {message}")]
    Invalid {
        /// The field, dotted (`attributes.latency`).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// Taking this would hold more than faultd's limits allow ([`crate::limits`]) (400).
    #[error("{field}: {message}")]
    OverLimit {
        /// What would overflow: `proxies`, `toxics`.
        field: String,
        /// How many, and the limit.
        message: String,
    },
    /// The listen address is taken (409).
    #[error("listen address {addr} is already in use: {source}")]
    ListenTaken {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The listen address could not be bound for another reason (500).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

fn known_types() -> String {
    REGISTRY
        .iter()
        .map(|r| r.name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl TcpError {
    /// The HTTP status Toxiproxy answers this error with.
    pub fn status(&self) -> u16 {
        match self {
            TcpError::ProxyNotFound(_) | TcpError::ToxicNotFound(_) => 404,
            TcpError::ProxyExists(_) | TcpError::ToxicExists(_) | TcpError::ListenTaken { .. } => {
                409
            }
            TcpError::MissingField(_)
            | TcpError::InvalidStream(_)
            | TcpError::InvalidToxicType(_)
            | TcpError::Invalid { .. }
            | TcpError::OverLimit { .. } => 400,
            TcpError::Bind { .. } => 500,
        }
    }

    fn invalid(field: impl Into<String>, message: impl Into<String>) -> TcpError {
        TcpError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl TcpError {
    /// Refuses holding `count` of `what` (`proxies`, `toxics`) when that is over `limit`.
    pub(crate) fn at_most(count: usize, limit: usize, what: &str) -> Result<(), TcpError> {
        crate::limits::at_most(what, count, limit, what).map_err(|e| TcpError::OverLimit {
            field: e.field,
            message: e.message,
        })
    }
}

impl From<Invalid> for TcpError {
    fn from(e: Invalid) -> TcpError {
        TcpError::invalid(e.field, e.message)
    }
}

/// A proxy to create, with Toxiproxy's field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxySpec {
    /// Its name, unique.
    #[serde(default)]
    pub name: String,
    /// `host:port` to listen on; loopback only, port 0 picks a free one. Default `127.0.0.1:0`.
    #[serde(default)]
    pub listen: String,
    /// `host:port` to forward to; loopback unless the host is in `allow_hosts`.
    #[serde(default)]
    pub upstream: String,
    /// Listening or down. Default true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// What the connections carry: `bytes` (the default), `redis`, whose commands the route frames, or
    /// `postgres`, whose statements it reads.
    #[serde(default, skip_serializing_if = "TcpProtocol::is_bytes")]
    pub protocol: TcpProtocol,
    /// What a protocol route does with bytes it cannot frame: `pass` (the default) or `close`.
    #[serde(default, skip_serializing_if = "OnGarbage::is_pass")]
    pub on_garbage: OnGarbage,
    /// What a `postgres` route answers to an encryption request: `refuse` (the default) or `pass`.
    #[serde(default, skip_serializing_if = "Ssl::is_refuse")]
    pub ssl: Ssl,
}

fn yes() -> bool {
    true
}

impl ProxySpec {
    /// An enabled proxy.
    pub fn new(name: &str, listen: &str, upstream: &str) -> ProxySpec {
        ProxySpec {
            name: name.into(),
            listen: listen.into(),
            upstream: upstream.into(),
            enabled: true,
            protocol: TcpProtocol::Bytes,
            on_garbage: OnGarbage::Pass,
            ssl: Ssl::Refuse,
        }
    }
}

/// Changes to a proxy; what is left out stays.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyUpdate {
    /// A new listen address (the route rebinds; open connections close).
    #[serde(default)]
    pub listen: Option<String>,
    /// A new upstream (the route rebinds; open connections close).
    #[serde(default)]
    pub upstream: Option<String>,
    /// Up or down.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// A proxy as the API shows it: Toxiproxy's JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyView {
    /// Its name.
    pub name: String,
    /// The address bound (the real port when 0 was asked for).
    pub listen: String,
    /// The upstream.
    pub upstream: String,
    /// Listening or down.
    pub enabled: bool,
    /// Its toxics, in the order they apply.
    pub toxics: Vec<ToxicView>,
}

/// A toxic to add, with Toxiproxy's field names; `type` is required, the rest has Toxiproxy's defaults
/// (`name` = `type_stream`, `stream` downstream, `toxicity` 1.0, attributes at their defaults).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToxicSpec {
    /// Its name, unique within the proxy.
    #[serde(default)]
    pub name: Option<String>,
    /// The toxic type (`latency`, `reset_peer`, ...).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// `upstream` or `downstream`.
    #[serde(default)]
    pub stream: Option<String>,
    /// The share of connections it takes, 0.0..=1.0.
    #[serde(default)]
    pub toxicity: Option<f64>,
    /// The type's attributes.
    #[serde(default)]
    pub attributes: Option<Value>,
}

/// Changes to a toxic: its toxicity, and attributes merged over the current ones (as Toxiproxy does).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToxicUpdate {
    /// A new share of connections.
    #[serde(default)]
    pub toxicity: Option<f64>,
    /// Attributes to change; the others keep their values.
    #[serde(default)]
    pub attributes: Option<Value>,
}

/// A toxic as the API shows it: Toxiproxy's JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToxicView {
    /// Its name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: String,
    /// `upstream` or `downstream`.
    pub stream: Stream,
    /// The share of connections it takes.
    pub toxicity: f64,
    /// Its attributes, defaults filled in.
    pub attributes: Map<String, Value>,
}

/// A toxic in force on a route.
#[derive(Debug, Clone)]
pub struct Toxic {
    /// Its name, unique within the route.
    pub name: String,
    /// Its type name, from the registry.
    pub kind: &'static str,
    /// The direction it acts on.
    pub stream: Stream,
    /// The share of connections it takes.
    pub toxicity: f64,
    /// Its attributes as they read back.
    pub attributes: Map<String, Value>,
    /// What it does.
    pub effect: Arc<dyn Effect>,
    /// The key of its name in the draws, so a toxic's share of connections does not depend on the others.
    pub key: u64,
}

impl Toxic {
    /// Builds a toxic from the API's fields, with Toxiproxy's defaults.
    pub fn from_spec(spec: ToxicSpec) -> Result<Toxic, TcpError> {
        let kind = spec.kind.ok_or(TcpError::MissingField("type"))?;
        let registration =
            Registration::find(&kind).ok_or_else(|| TcpError::InvalidToxicType(kind.clone()))?;
        let stream = match spec.stream.as_deref() {
            None | Some("") | Some("downstream") => Stream::Downstream,
            Some("upstream") => Stream::Upstream,
            Some(other) => return Err(TcpError::InvalidStream(other.to_string())),
        };
        let toxicity = check_toxicity(spec.toxicity.unwrap_or(1.0))?;
        let (effect, attributes) = registration.build(spec.attributes.unwrap_or(Value::Null))?;
        let name = match spec.name {
            Some(n) if !n.is_empty() => n,
            _ => format!("{}_{}", registration.name, stream.as_str()),
        };
        crate::limits::check_name("name", &name)?;
        Ok(Toxic {
            key: route_key(&name),
            name,
            kind: registration.name,
            stream,
            toxicity,
            attributes,
            effect,
        })
    }

    /// This toxic with `update` applied: attributes merged over the current ones, then checked again.
    pub fn updated(&self, update: ToxicUpdate) -> Result<Toxic, TcpError> {
        let mut attributes = self.attributes.clone();
        match update.attributes {
            None | Some(Value::Null) => {}
            Some(Value::Object(changes)) => attributes.extend(changes),
            Some(_) => return Err(TcpError::invalid("attributes", "must be an object")),
        }
        let registration = Registration::find(self.kind)
            .ok_or_else(|| TcpError::InvalidToxicType(self.kind.to_string()))?;
        let (effect, attributes) = registration.build(Value::Object(attributes))?;
        Ok(Toxic {
            toxicity: check_toxicity(update.toxicity.unwrap_or(self.toxicity))?,
            attributes,
            effect,
            ..self.clone()
        })
    }

    /// How the API shows it.
    pub fn view(&self) -> ToxicView {
        ToxicView {
            name: self.name.clone(),
            kind: self.kind.to_string(),
            stream: self.stream,
            toxicity: self.toxicity,
            attributes: self.attributes.clone(),
        }
    }
}

fn check_toxicity(t: f64) -> Result<f64, TcpError> {
    if (0.0..=1.0).contains(&t) {
        Ok(t)
    } else {
        Err(TcpError::invalid(
            "toxicity",
            format!("{t} is outside 0.0..=1.0 (the share of connections the toxic takes)"),
        ))
    }
}

/// Splits `host:port` (IPv6 in brackets), refusing anything else.
fn split_host_port(field: &str, text: &str) -> Result<(String, u16), TcpError> {
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| TcpError::invalid(field, format!("{text:?} is not host:port")))?;
    let port = port
        .parse::<u16>()
        .map_err(|_| TcpError::invalid(field, format!("{text:?}: {port:?} is not a port")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(TcpError::invalid(field, format!("{text:?} has no host")));
    }
    Ok((host.to_string(), port))
}

/// The listen address: loopback only (`localhost`, `127.x.y.z`, `[::1]`), default `127.0.0.1:0`.
pub fn listen_addr(text: &str) -> Result<SocketAddr, TcpError> {
    listen_addr_allowing(text, &[])
}

/// The listen address: loopback, or one of `allowed` (faultd's `--allow-listen`, such as `0.0.0.0` in a
/// container), default `127.0.0.1:0`.
pub fn listen_addr_allowing(text: &str, allowed: &[IpAddr]) -> Result<SocketAddr, TcpError> {
    if text.is_empty() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], 0)));
    }
    let (host, port) = split_host_port("listen", text)?;
    let ip: IpAddr = if host.eq_ignore_ascii_case("localhost") {
        IpAddr::from([127, 0, 0, 1])
    } else {
        host.parse().map_err(|_| {
            TcpError::invalid(
                "listen",
                format!("{text:?}: faultd listens on an IP address (localhost, 127.0.0.1, [::1], or one given to --allow-listen), not a name"),
            )
        })?
    };
    if !ip.is_loopback() && !allowed.contains(&ip) {
        return Err(TcpError::invalid(
            "listen",
            format!("{text:?} is not loopback: faultd listens on loopback only unless started with --allow-listen {ip}, so nothing outside this machine reaches it"),
        ));
    }
    Ok(SocketAddr::new(ip, port))
}

/// Checks an upstream `host:port` before any connect: loopback, `localhost`, or a host in `allow_hosts`.
pub fn check_upstream(text: &str, allow_hosts: &[String]) -> Result<(), TcpError> {
    let (host, _) = split_host_port("upstream", text)?;
    if faultline_units::hosts::host_allowed(&host, allow_hosts) {
        Ok(())
    } else {
        Err(TcpError::invalid(
            "upstream",
            format!(
                "{text:?} is not loopback; add {host:?} to faultd's allow_hosts to forward there"
            ),
        ))
    }
}

/// Refuses an upstream that is one of faultd's own listeners (`own`): each connection would come back to faultd.
pub fn check_not_own(upstream: &str, own: &[SocketAddr]) -> Result<(), TcpError> {
    let (host, port) = split_host_port("upstream", upstream)?;
    match crate::loops::own_listener(&host, port, own) {
        Some(listener) => Err(TcpError::invalid(
            "upstream",
            format!(
                "{upstream:?} is faultd's own listener {listener}: each connection would come back to faultd \
                 and be forwarded again, without end"
            ),
        )),
        None => Ok(()),
    }
}

/// Whether a resolved upstream address may be connected to: loopback, or the upstream's host is allowed.
pub fn upstream_allowed(upstream: &str, ip: IpAddr, allow_hosts: &[String]) -> bool {
    if ip.is_loopback() {
        return true;
    }
    let host = upstream
        .rsplit_once(':')
        .map_or(upstream, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    allow_hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> ToxicSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_toxic_gets_toxiproxys_defaults() {
        let t = Toxic::from_spec(spec(json!({"type": "latency"}))).unwrap();
        assert_eq!(t.name, "latency_downstream");
        assert_eq!(t.stream, Stream::Downstream);
        assert_eq!(t.toxicity, 1.0);
        assert_eq!(t.attributes["latency"], json!(0));
        assert_eq!(t.attributes["jitter"], json!(0));
    }

    #[test]
    fn unknown_types_bad_streams_and_toxicity_out_of_range_are_refused() {
        let e = Toxic::from_spec(spec(json!({"type": "nope"}))).unwrap_err();
        assert_eq!(e.status(), 400);
        assert!(e.to_string().contains("invalid toxic type"), "{e}");
        let e =
            Toxic::from_spec(spec(json!({"type": "latency", "stream": "sideways"}))).unwrap_err();
        assert!(matches!(e, TcpError::InvalidStream(_)));
        let e = Toxic::from_spec(spec(json!({"type": "latency", "toxicity": 1.5}))).unwrap_err();
        assert_eq!(e.status(), 400);
        let e = Toxic::from_spec(spec(json!({}))).unwrap_err();
        assert!(matches!(e, TcpError::MissingField("type")));
    }

    #[test]
    fn an_update_merges_attributes_and_keeps_the_rest() {
        let t = Toxic::from_spec(spec(
            json!({"type": "latency", "attributes": {"latency": 100, "jitter": 5}}),
        ))
        .unwrap();
        let u = t
            .updated(ToxicUpdate {
                toxicity: Some(0.5),
                attributes: Some(json!({"latency": 300})),
            })
            .unwrap();
        assert_eq!(u.attributes["latency"], json!(300));
        assert_eq!(u.attributes["jitter"], json!(5));
        assert_eq!(u.toxicity, 0.5);
        assert!(t
            .updated(ToxicUpdate {
                toxicity: None,
                attributes: Some(json!({"latency": -1}))
            })
            .is_err());
    }

    #[test]
    fn listen_is_loopback_only_and_upstream_loopback_unless_allowed() {
        assert_eq!(
            listen_addr("localhost:0").unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert_eq!(
            listen_addr("[::1]:80").unwrap(),
            "[::1]:80".parse().unwrap()
        );
        assert!(listen_addr("0.0.0.0:8000").is_err());
        let any = [IpAddr::from([0, 0, 0, 0])];
        assert_eq!(
            listen_addr_allowing("0.0.0.0:8000", &any).unwrap(),
            SocketAddr::from(([0, 0, 0, 0], 8000))
        );
        assert!(listen_addr_allowing("[::]:8000", &any).is_err());
        assert!(listen_addr_allowing("10.0.0.1:8000", &any).is_err());
        assert!(listen_addr("[::]:8000").is_err());
        assert!(listen_addr("nonsense").is_err());
        assert!(check_upstream("127.0.0.1:6379", &[]).is_ok());
        assert!(check_upstream("localhost:6379", &[]).is_ok());
        assert!(check_upstream("db.internal:5432", &[]).is_err());
        assert!(check_upstream("db.internal:5432", &["db.internal".into()]).is_ok());
        assert!(check_upstream("10.0.0.1:5432", &[]).is_err());
        assert!(upstream_allowed(
            "db:1",
            "10.0.0.1".parse().unwrap(),
            &["db".into()]
        ));
        assert!(!upstream_allowed("db:1", "10.0.0.1".parse().unwrap(), &[]));
    }
}
