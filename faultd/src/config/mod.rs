//! The configuration faultd runs: routes with their base behaviour, and a schedule of phases.
//!
//! For: the types a scenario's `dependency:` section deserialises into (the HTTP sections in `http_sections`, TLS's
//! in `crate::tls`), `--time-scale`, the files a configuration names, and each TCP route's toxics over the phases.
//! Not for: reading and validating one (`Config::from_yaml`, `from_json` and `validate` are `crate::schedule`'s,
//! whose plan holds the rules) or running anything.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use faultline_units::Dur;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

// Every type the fault list names, for the fields of `Route`.
use crate::behaviours::*;
use crate::files::Files;
use crate::invalid::Invalid;
use crate::phased::Phased;

pub use crate::recorder::DEFAULT_BUCKET;
pub use http_sections::{Forward, Http2Settings, Unmatched};

mod http_sections;
mod wire;

pub use wire::{OnGarbage, Ssl, TcpEndpoint, TcpProtocol};

/// A whole faultd configuration (a scenario's `dependency:` section).
///
/// ```yaml
/// seed: 7
/// routes:
///   pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }
/// phases:
///   - { name: healthy,   at: 0s }
///   - { name: brownout,  at: 20s, routes: { pricing: { latency: { fixed: 2s } } } }
///   - { name: recovered, at: 60s, routes: { pricing: healthy } }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Seed of every random choice; the same seed and request order give the same faults. Random when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The recorder's time step; 100ms when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<Dur>,
    /// The routes, by name. Scenarios and phases refer to routes by these names.
    pub routes: BTreeMap<String, Route>,
    /// The schedule: phases in ascending start time. Without phases every route keeps its base behaviour.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<Phase>,
    /// TLS on the data plane, with its handshake faults; cleartext when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::tls::TlsConfig>,
    /// HTTP/2 settings announced on each new connection, e.g. `{max_concurrent_streams: 8}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2: Option<Http2Settings>,
    /// The data plane's address, e.g. `127.0.0.1:9000`: where a service that is already running (or was started
    /// with its dependency's URL fixed) sends its calls. Read when faultd starts (`faultd --listen` wins over it;
    /// a scenario's embedded faultd takes a free loopback port without it); a running faultd's data plane cannot
    /// move, so the control API refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// What faultd does with a call that matches no route: `404` (the default) answers it so, `{ proxy: URL }`
    /// forwards it, e.g. to the real dependency, so that only the routes named here are faulted. Either way it is
    /// counted as unmatched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmatched: Option<Unmatched>,
    /// Record each call one by one with the trace id its caller propagated, e.g. `{ header: traceparent,
    /// deadline_header: x-request-timeout }`: its parent span, arrival, end, outcome and the deadline it was
    /// given, read back with the control API's `GET /recording/calls`. Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlate: Option<faultline_units::trace::Correlate>,
    /// A resolver for the service under test, e.g. `{ names: { pricing.internal: { a: [127.0.0.1], ttl: 30s } }
    /// }`: the names it answers, with their records and faults per phase (`crate::dns`). None when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<crate::dns::DnsConfig>,
}

/// Builds [`Route`] from the fault list: its method and path, then every field of a behaviour as its base.
macro_rules! route_from_list {
    ($( $(#[$doc:meta])* $module:ident.rs => $field:ident: $ty:ty, )*) => {
        /// A route: which calls it takes (method and path pattern) and its base ("healthy") behaviour, whose
        /// fields sit beside `method` and `path`.
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct Route {
            /// The HTTP method; any method when absent.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub method: Option<String>,
            /// The path pattern: `*` or `{id}` match one segment, a final `**` the rest, e.g. `/price/*`. HTTP
            /// routes only.
            #[serde(default, skip_serializing_if = "String::is_empty")]
            pub path: String,
            /// Makes this a TCP route (a database, a cache): a loopback listener forwarding each connection to
            /// an upstream through the route's `toxics`. A TCP route has no `path`, `method` or HTTP behaviour.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub tcp: Option<TcpEndpoint>,
            /// How many instances serve the route, each on a listener of its own (`instances: 3`); the data
            /// plane's address (a TCP route's `listen`) serves the route too. A phase changes one instance with
            /// `instance: N` (numbered from 1) or all of them without. A TCP route's instances forward to its
            /// upstream, each with toxics of its own.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub instances: Option<u32>,
            $(
                /// Base behaviour:
                $(#[$doc])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $field: Option<$ty>,
            )*
            /// Base behaviour: behaviours for the calls that carry something (a method, a header, a query
            /// parameter, gRPC metadata), each laid over the base for the calls it takes.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub matched: Option<Vec<Matched>>,
        }

        impl Route {
            /// The route's base behaviour, what `healthy` restores.
            pub fn base(&self) -> Behaviour {
                Behaviour {
                    $( $field: self.$field.clone(), )*
                    matched: self.matched.clone(),
                }
            }

            /// Replaces the route's base behaviour, keeping its method and path.
            pub fn set_base(&mut self, base: Behaviour) {
                $( self.$field = base.$field; )*
                self.matched = base.matched;
            }
        }
    };
}

crate::behaviours::fault_list!(route_from_list);

impl Route {
    /// A route on `path` with an empty (healthy, immediate) base behaviour.
    pub fn new(path: &str) -> Route {
        Route {
            path: path.to_string(),
            ..Route::default()
        }
    }

    /// A TCP route listening on `listen` (port 0 picks a free one) and forwarding to `upstream`, with no toxics.
    pub fn tcp(listen: &str, upstream: &str) -> Route {
        Route {
            tcp: Some(TcpEndpoint {
                listen: listen.to_string(),
                upstream: upstream.to_string(),
                ..TcpEndpoint::default()
            }),
            ..Route::default()
        }
    }

    /// Whether this is a TCP route.
    pub fn is_tcp(&self) -> bool {
        self.tcp.is_some()
    }
}

/// A named phase of the schedule. From `at` on, each route it names gets the behaviour it sets (laid over the
/// route's base); routes it does not name keep what they had.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// The phase's name; expectations refer to it.
    pub name: String,
    /// When the phase begins, from the run's t = 0.
    pub at: Dur,
    /// Optional: move every delay quantile and fault share linearly from the previous phase's values to this
    /// phase's over this span, starting at `at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<Dur>,
    /// Behaviour per route name: a behaviour, or `healthy` for the route's own base behaviour.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub routes: BTreeMap<String, PhaseRoute>,
}

/// What a phase does to one route.
#[derive(Debug, Clone, PartialEq)]
pub enum PhaseRoute {
    /// Back to the route's base behaviour; written `healthy`.
    Healthy,
    /// This behaviour laid over the route's base.
    Set(Box<Behaviour>),
    /// This behaviour laid over the route's base on one of its instances (numbered from 1), the others keeping
    /// what they had; written `{ instance: 2, errors: [...] }`.
    Instance(u32, Box<Behaviour>),
}

impl PhaseRoute {
    /// The behaviour this gives a route whose base is `base`.
    pub fn resolve(&self, base: &Behaviour) -> Behaviour {
        match self {
            PhaseRoute::Healthy => base.clone(),
            PhaseRoute::Set(b) | PhaseRoute::Instance(_, b) => b.over(base),
        }
    }

    /// The behaviour it sets, on the whole route or one instance; none for `healthy`.
    pub fn set(&self) -> Option<&Behaviour> {
        match self {
            PhaseRoute::Healthy => None,
            PhaseRoute::Set(b) | PhaseRoute::Instance(_, b) => Some(b),
        }
    }

    /// [`PhaseRoute::set`], to change.
    pub fn set_mut(&mut self) -> Option<&mut Behaviour> {
        match self {
            PhaseRoute::Healthy => None,
            PhaseRoute::Set(b) | PhaseRoute::Instance(_, b) => Some(b),
        }
    }

    /// Whether it acts on instance `instance` (numbered from 1) of a route: every instance but for an
    /// [`PhaseRoute::Instance`] naming another.
    pub fn acts_on(&self, instance: u32) -> bool {
        !matches!(self, PhaseRoute::Instance(n, _) if *n != instance)
    }
}

/// What a phase sets on one instance, as written (the schema's and the serialiser's shape).
#[derive(Serialize, JsonSchema)]
struct InstanceSet<'a> {
    /// The instance, numbered from 1.
    instance: u32,
    #[serde(flatten)]
    behaviour: std::borrow::Cow<'a, Behaviour>,
}

impl Serialize for PhaseRoute {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PhaseRoute::Healthy => s.serialize_str("healthy"),
            PhaseRoute::Set(b) => b.serialize(s),
            PhaseRoute::Instance(n, b) => InstanceSet {
                instance: *n,
                behaviour: std::borrow::Cow::Borrowed(b),
            }
            .serialize(s),
        }
    }
}

/// A key of a phase route's map: `instance`, or one of the behaviour's.
enum Key<T> {
    Instance,
    Other(T),
}

/// Reads a key, handing every key but `instance` to the behaviour's seed (kept until then).
struct KeySeed<'s, K>(&'s mut Option<K>);

impl<'de, K: serde::de::DeserializeSeed<'de>> serde::de::DeserializeSeed<'de> for KeySeed<'_, K> {
    type Value = Key<K::Value>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de, K: serde::de::DeserializeSeed<'de>> serde::de::Visitor<'de> for KeySeed<'_, K> {
    type Value = Key<K::Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a field name")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if v == "instance" {
            return Ok(Key::Instance);
        }
        let seed = self.0.take().ok_or_else(|| E::custom("a key read twice"))?;
        seed.deserialize(serde::de::value::StrDeserializer::<E>::new(v))
            .map(Key::Other)
    }
}

/// A phase route's map with its `instance` key taken out as it passes, so that the behaviour reads the rest
/// straight from the input (its errors keep their place in the file).
struct WithoutInstance<'a, A> {
    map: A,
    instance: &'a mut Option<u32>,
}

impl<'de, A: serde::de::MapAccess<'de>> serde::de::MapAccess<'de> for WithoutInstance<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        // The key goes through the input's own key reading, so that a path-tracking reader (the control API's)
        // still names an unknown field; `instance` is taken out there, and the seed kept for the next key.
        let mut seed = Some(seed);
        loop {
            match self.map.next_key_seed(KeySeed(&mut seed))? {
                None => return Ok(None),
                Some(Key::Instance) => *self.instance = Some(self.map.next_value()?),
                Some(Key::Other(key)) => return Ok(Some(key)),
            }
        }
    }

    fn next_value_seed<V: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

impl<'de> Deserialize<'de> for PhaseRoute {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = PhaseRoute;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "`healthy` or a behaviour such as {{latency: {{fixed: 2s}}}}"
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PhaseRoute, E> {
                if v == "healthy" {
                    Ok(PhaseRoute::Healthy)
                } else {
                    Err(E::custom(format!("{v:?}: expected `healthy` or a behaviour such as {{latency: {{fixed: 2s}}}}")))
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<PhaseRoute, A::Error> {
                let mut instance = None;
                let map = WithoutInstance {
                    map,
                    instance: &mut instance,
                };
                let b = Box::new(Behaviour::deserialize(
                    serde::de::value::MapAccessDeserializer::new(map),
                )?);
                Ok(match instance {
                    Some(n) => PhaseRoute::Instance(n, b),
                    None => PhaseRoute::Set(b),
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for PhaseRoute {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PhaseRoute".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let behaviour = generator.subschema_for::<Behaviour>();
        let instance = generator.subschema_for::<InstanceSet<'static>>();
        schemars::json_schema!({
            "description": "`healthy` (the route's base behaviour), a behaviour laid over the base, or one laid over it on one instance (`instance: N`)",
            "oneOf": [ { "const": "healthy" }, behaviour, instance ],
        })
    }
}

/// A configuration problem, located as precisely as the input allows: `faultd.yaml:12:7: phases[1].routes.prcing:
/// no route named "prcing" (routes: payments, pricing)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file (or label, such as `control API body`) the configuration came from.
    pub file: Option<String>,
    /// 1-based line of the offending field, when known.
    pub line: Option<usize>,
    /// 1-based column of the offending field, when known.
    pub column: Option<usize>,
    /// Dotted path of the offending field, e.g. `routes.pricing.latency.p99`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}:")?;
            if let Some(line) = self.line {
                write!(f, "{line}:")?;
                if let Some(column) = self.column {
                    write!(f, "{column}:")?;
                }
            }
            write!(f, " ")?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}", self.message)
    }
}

impl From<Invalid> for ConfigError {
    fn from(i: Invalid) -> Self {
        ConfigError {
            file: None,
            line: None,
            column: None,
            field: i.field,
            message: i.message,
        }
    }
}

impl Config {
    /// A configuration with these routes and no phases.
    pub fn with_routes(routes: impl IntoIterator<Item = (&'static str, Route)>) -> Config {
        Config {
            seed: None,
            bucket: None,
            routes: routes
                .into_iter()
                .map(|(n, r)| (n.to_string(), r))
                .collect(),
            phases: Vec::new(),
            tls: None,
            http2: None,
            listen: None,
            unmatched: None,
            correlate: None,
            dns: None,
        }
    }

    /// The data plane's address the configuration fixes (`listen`), if it fixes one.
    pub fn listen_addr(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        match &self.listen {
            None => Ok(None),
            Some(text) => text.trim().parse().map(Some).map_err(|_| {
                Invalid::new(
                    "listen",
                    format!("{text:?} is not an address such as 127.0.0.1:9000 or [::1]:9000"),
                )
                .into()
            }),
        }
    }

    /// Multiplies every duration by `factor` (phase starts, ramps, delays, the bucket) and divides every rate by
    /// it (slow-body rates); counts and shares are unchanged.
    pub fn scale_time(&mut self, factor: f64) {
        if let Some(b) = &mut self.bucket {
            *b = Dur(b.scaled(factor).get().max(Duration::from_millis(1)));
        }
        for route in self.routes.values_mut() {
            let mut base = route.base();
            base.scale_time(factor);
            route.set_base(base);
        }
        for phase in &mut self.phases {
            phase.at = phase.at.scaled(factor);
            phase.ramp = phase.ramp.map(|r| r.scaled(factor));
            for b in phase.routes.values_mut().filter_map(PhaseRoute::set_mut) {
                b.scale_time(factor);
            }
        }
        if let Some(tls) = &mut self.tls {
            tls.faults.iter_mut().for_each(|f| f.scale_time(factor));
            tls.phases.values_mut().for_each(|f| f.scale_time(factor));
        }
        if let Some(dns) = &mut self.dns {
            dns.scale_time(factor);
        }
    }

    /// The HTTP routes, by name (the data plane's); TCP routes are left out.
    pub fn http_routes(&self) -> impl Iterator<Item = (&String, &Route)> {
        self.routes.iter().filter(|(_, r)| !r.is_tcp())
    }

    /// The TCP routes, by name.
    pub fn tcp_routes(&self) -> impl Iterator<Item = (&String, &Route)> {
        self.routes.iter().filter(|(_, r)| r.is_tcp())
    }

    /// Each phase's name and start, for the runner's expectations.
    pub fn phase_names(&self) -> Vec<(String, Duration)> {
        self.phases
            .iter()
            .map(|p| (p.name.clone(), p.at.get()))
            .collect()
    }

    /// The recording step.
    pub fn bucket(&self) -> Duration {
        self.bucket.map_or(DEFAULT_BUCKET, Dur::get)
    }

    /// Reads the files the configuration names (a gRPC answer's `message_file`, on a route or in a phase) from
    /// where `files` allows; errors name the field. A configuration is served only once they are read.
    pub fn read_files(&mut self, files: &Files) -> Result<(), ConfigError> {
        for (name, route) in &mut self.routes {
            let mut base = route.base();
            base.read_files(files, Some(&route.path))
                .map_err(|e| e.at(&format!("routes.{name}")))?;
            route.set_base(base);
        }
        for (i, phase) in self.phases.iter_mut().enumerate() {
            for (name, set) in &mut phase.routes {
                let path = self.routes.get(name).map(|r| r.path.as_str());
                set.read_files(files, path)
                    .map_err(|e| e.at(&format!("phases[{i}].routes.{name}")))?;
            }
        }
        Ok(())
    }

    /// TCP route `route`'s toxics over the phases: its own `toxics` first; a phase naming the route with
    /// `toxics` replaces them, `healthy` restores its own, and a phase that does not name it keeps what it has.
    pub fn tcp_toxics(&self, route: &str) -> Phased<Vec<TcpToxic>> {
        self.tcp_toxics_of(route, None)
    }

    /// The toxics of instance `instance` (from 1) of TCP route `route` over the phases, or of the route's own
    /// listener for `None`. A phase that names one instance (`{ instance: 2, toxics: [...] }`) sets that instance
    /// only; the route's own listener and its other instances keep what they had, as on an HTTP route.
    pub fn tcp_toxics_of(&self, route: &str, instance: Option<u32>) -> Phased<Vec<TcpToxic>> {
        let base = self
            .routes
            .get(route)
            .and_then(|r| r.toxics.clone())
            .unwrap_or_default();
        let mut toxics = Phased::new(base.clone());
        for p in &self.phases {
            let set = match p.routes.get(route) {
                Some(PhaseRoute::Healthy) => Some(base.clone()),
                Some(PhaseRoute::Instance(n, _)) if Some(*n) != instance => None,
                Some(set) => set.set().and_then(|b| b.toxics.clone()),
                None => None,
            };
            toxics.push(p.at.get(), p.ramp.map(|r| r.get()), set);
        }
        toxics
    }

    /// Redis route `route`'s entries over the phases, as [`Config::tcp_toxics`] follows toxics.
    pub fn redis_entries(&self, route: &str) -> Phased<Vec<RedisEntry>> {
        let base = self
            .routes
            .get(route)
            .and_then(|r| r.redis.clone())
            .unwrap_or_default();
        let mut entries = Phased::new(base.clone());
        for p in &self.phases {
            let set = match p.routes.get(route) {
                Some(PhaseRoute::Healthy) => Some(base.clone()),
                Some(set) => set.set().and_then(|b| b.redis.clone()),
                None => None,
            };
            entries.push(p.at.get(), p.ramp.map(|r| r.get()), set);
        }
        entries
    }

    /// Every TCP route's toxics over the phases: per route name, its own listener's (instance `None`) and then
    /// each of its instances'.
    pub fn tcp_schedules(&self) -> Vec<(String, Option<u32>, Phased<Vec<TcpToxic>>)> {
        let mut schedules = Vec::new();
        for (name, route) in self.tcp_routes() {
            schedules.push((name.clone(), None, self.tcp_toxics(name)));
            for n in 1..=route.instances.unwrap_or(0) {
                schedules.push((name.clone(), Some(n), self.tcp_toxics_of(name, Some(n))));
            }
        }
        schedules
    }

    /// TCP route `route`'s postgres entries over the phases, each with the name of its phase (`healthy` before the
    /// first): a phase naming the route with `postgres` replaces them, `healthy` restores the route's own, a phase
    /// that does not name it keeps what it has. Entries switch at a phase's
    /// start; a ramp does not move them.
    pub fn tcp_postgres(&self, route: &str) -> Phased<(String, Vec<PostgresFault>)> {
        let base = self
            .routes
            .get(route)
            .and_then(|r| r.postgres.clone())
            .unwrap_or_default();
        let mut entries = Phased::new(("healthy".to_string(), base.clone()));
        let mut current = base.clone();
        for p in &self.phases {
            match p.routes.get(route) {
                Some(PhaseRoute::Healthy) => current = base.clone(),
                Some(set) => {
                    if let Some(list) = set.set().and_then(|b| b.postgres.clone()) {
                        current = list;
                    }
                }
                None => {}
            }
            // Every phase is named, whether it changes the route or not: statements are recorded by phase.
            entries.push(p.at.get(), None, Some((p.name.clone(), current.clone())));
        }
        entries
    }

    /// Refuses a route that proxies to one of faultd's own listeners (`own`), on its base or in a phase: each
    /// call would come back to faultd and be forwarded again. TCP routes are checked as they are created.
    pub fn check_not_own(&self, own: &[std::net::SocketAddr]) -> Result<(), ConfigError> {
        if let Some(p) = self.unmatched.as_ref().and_then(|u| u.proxy()) {
            p.check_not_own(own).map_err(|e| e.at("unmatched.proxy"))?;
        }
        for (name, route) in &self.routes {
            check_proxy_not_own(&route.base(), own).map_err(|e| e.at(&format!("routes.{name}")))?;
        }
        for (i, phase) in self.phases.iter().enumerate() {
            for (name, set) in &phase.routes {
                set.check_not_own(own)
                    .map_err(|e| e.at(&format!("phases[{i}].routes.{name}")))?;
            }
        }
        Ok(())
    }

    /// The configuration with the files it names written inline (their bytes as hex), for a faultd that cannot
    /// read them: one on another machine, or a control API without `--files`.
    pub fn inlined(&self) -> Config {
        let mut config = self.clone();
        for route in config.routes.values_mut() {
            route.set_base(route.base().inlined());
        }
        for b in config
            .phases
            .iter_mut()
            .flat_map(|p| p.routes.values_mut())
            .filter_map(PhaseRoute::set_mut)
        {
            *b = b.inlined();
        }
        config
    }
}

fn check_proxy_not_own(b: &Behaviour, own: &[std::net::SocketAddr]) -> Result<(), Invalid> {
    if let Some(p) = &b.proxy {
        p.check_not_own(own).map_err(|e| e.at("proxy"))?;
    }
    for (i, entry) in b.matched.iter().flatten().enumerate() {
        check_proxy_not_own(&entry.behaviour(), own).map_err(|e| e.at(&format!("matched[{i}]")))?;
    }
    Ok(())
}

impl PhaseRoute {
    /// Refuses a behaviour that proxies to one of faultd's own listeners, as [`Config::check_not_own`] does.
    pub fn check_not_own(&self, own: &[std::net::SocketAddr]) -> Result<(), Invalid> {
        self.set().map_or(Ok(()), |b| check_proxy_not_own(b, own))
    }

    /// Reads the files a phase's behaviour names, as [`Config::read_files`] does; `route_path` is its route's path.
    pub fn read_files(&mut self, files: &Files, route_path: Option<&str>) -> Result<(), Invalid> {
        self.set_mut()
            .map_or(Ok(()), |b| b.read_files(files, route_path))
    }
}

/// Parses JSON, naming the path of the field that failed (`routes.pricing.latency.fixed`).
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, (String, String)> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { String::new() } else { path };
        (field, e.into_inner().to_string())
    })
}
