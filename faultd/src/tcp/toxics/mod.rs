//! Toxics: what a TCP route does to the bytes of the connections it proxies, one small type per toxic, in the
//! Toxiproxy manner, with Toxiproxy's names, attributes and units.
//!
//! For: each toxic's attributes exactly as the Toxiproxy API writes them (`latency` in ms, `rate` in KB/s,
//! `average_size` in bytes, `delay` of the slicer in µs, ...), their validation, and the one list
//! ([`REGISTRY`]) that knows every toxic by its type name. Each toxic says what it does through the hooks of
//! [`Effect`]; the data plane ([`super::proxy`]) calls the hooks and owns the sockets, the timers and the share of
//! connections a toxic takes (`toxicity`, decided once per connection). Not for: sockets, or counting (the
//! recorder).
//!
//! Adding a toxic means one file with one type that implements [`Effect`] and [`Attributes`], and one line in
//! [`REGISTRY`].

pub mod bandwidth;
pub mod connect_delay;
pub mod latency;
pub mod limit_data;
pub mod reset_peer;
pub mod slicer;
pub mod slow_close;
pub mod stall;
pub mod timeout;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::behaviours::Invalid;

pub use bandwidth::Bandwidth;
pub use connect_delay::ConnectDelay;
pub use latency::Latency;
pub use limit_data::LimitData;
pub use reset_peer::ResetPeer;
pub use slicer::Slicer;
pub use slow_close::SlowClose;
pub use stall::Stall;
pub use timeout::Timeout;

/// Every toxic faultd knows, by its type name: the only place that lists them all.
pub const REGISTRY: &[Registration] = &[
    Registration::of::<Latency>(),
    Registration::of::<Bandwidth>(),
    Registration::of::<SlowClose>(),
    Registration::of::<Timeout>(),
    Registration::of::<ResetPeer>(),
    Registration::of::<LimitData>(),
    Registration::of::<Slicer>(),
    Registration::of::<Stall>(),
    Registration::of::<ConnectDelay>(),
];

/// The longest duration any toxic attribute accepts (one day): longer is a typo, not a fault.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// Which way the bytes flow, in Toxiproxy's words.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Client to server: what the service under test sends.
    Upstream,
    /// Server to client: what the dependency answers. Toxiproxy's default.
    #[default]
    Downstream,
}

impl Stream {
    /// `"upstream"` or `"downstream"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        }
    }
}

/// What a toxic does before faultd connects to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connect {
    /// Connect now.
    Now,
    /// Hold the connect this long first.
    After(Duration),
    /// Never connect: the client's connection is accepted and held.
    Never,
}

/// How a connection ends when a toxic ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Still open.
    Open,
    /// Closed with a FIN, both ways.
    Close,
    /// Reset: the client's socket is closed with SO_LINGER 0, so the client sees ECONNRESET.
    Reset,
}

/// What a toxic does to the direction it is on while it is active, from the moment the connection first sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// Nothing flows while the toxic is active (the bytes wait; they flow again when it is removed).
    pub blocks: bool,
    /// End the connection this long after the toxic was first seen.
    pub ends: Option<(Duration, Ending)>,
}

/// How one chunk of bytes is delivered; each active toxic of the direction adjusts it in turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkPlan {
    /// Hold the chunk this long after it was read.
    pub delay: Duration,
    /// Deliver at most this many bytes per second (the slowest bandwidth toxic wins).
    pub bytes_per_second: Option<f64>,
    /// Cut the chunk into slices of about this many bytes (± variation), with a pause between them.
    pub slices: Option<Slices>,
    /// End the connection once this many bytes in total have gone this way.
    pub limit: Option<u64>,
}

/// The slicer's plan for a chunk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slices {
    /// Average slice size, bytes (at least 1).
    pub average: u64,
    /// Each slice is `average ± variation` bytes, uniformly.
    pub variation: u64,
    /// The pause after each slice.
    pub pause: Duration,
}

/// A small generator for the per-chunk draws (jitter, slice sizes), seeded per connection and direction so a
/// seed replays the same sizes and delays.
#[derive(Debug, Clone)]
pub struct ChunkRng(u64);

impl ChunkRng {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> ChunkRng {
        ChunkRng(seed)
    }

    /// A uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform integer in `[-spread, +spread]`.
    pub fn symmetric(&mut self, spread: u64) -> i64 {
        if spread == 0 {
            return 0;
        }
        let width = spread.saturating_mul(2).saturating_add(1);
        ((self.unit() * width as f64) as u64).min(width - 1) as i64 - spread as i64
    }
}

/// The hooks through which a toxic acts; each has a no-op default so a toxic implements only what it does.
pub trait Effect: Debug + Send + Sync {
    /// Before the upstream connect (connection-level toxics: stall, connect delay).
    fn before_connect(&self) -> Connect {
        Connect::Now
    }
    /// While active on its direction (timeout, reset_peer).
    fn hold(&self) -> Option<Hold> {
        None
    }
    /// For each chunk of its direction (latency, bandwidth, slicer, limit_data).
    fn shape(&self, _plan: &mut ChunkPlan, _rng: &mut ChunkRng) {}
    /// How long to hold the close once the sender has finished (slow_close).
    fn close_delay(&self) -> Duration {
        Duration::ZERO
    }
}

/// A toxic's attributes as the API reads and writes them: a type name, serde with Toxiproxy's field names and
/// defaults, and a check of the values.
pub trait Attributes: Effect + Serialize + DeserializeOwned + Sized + 'static {
    /// The Toxiproxy type name (`latency`, `reset_peer`, ...).
    const TYPE: &'static str;
    /// Refuses negative or absurd values, naming the attribute.
    fn validate(&self) -> Result<(), Invalid>;
}

/// One line of [`REGISTRY`]: a type name and how to build the toxic from its attributes.
#[derive(Clone, Copy)]
pub struct Registration {
    /// The type name.
    pub name: &'static str,
    build: fn(Value) -> Result<Built, Invalid>,
}

impl Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// A toxic built from its attributes: the effect, and its attributes as they read back (defaults filled in).
pub type Built = (Arc<dyn Effect>, Map<String, Value>);

fn build<T: Attributes>(attributes: Value) -> Result<Built, Invalid> {
    let toxic: T = serde_path_to_error::deserialize(attributes).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { String::new() } else { path };
        Invalid::new(field, e.into_inner().to_string())
    })?;
    toxic.validate()?;
    let back = match serde_json::to_value(&toxic) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    Ok((Arc::new(toxic), back))
}

impl Registration {
    /// The registration of toxic type `T`.
    pub const fn of<T: Attributes>() -> Registration {
        Registration {
            name: T::TYPE,
            build: build::<T>,
        }
    }

    /// The registration of type `name`, if faultd knows it.
    pub fn find(name: &str) -> Option<&'static Registration> {
        REGISTRY.iter().find(|r| r.name == name)
    }

    /// Builds the toxic from its attributes (`null` means all defaults).
    pub fn build(&self, attributes: Value) -> Result<Built, Invalid> {
        let attributes = match attributes {
            Value::Null => Value::Object(Map::new()),
            other => other,
        };
        (self.build)(attributes).map_err(|e| e.at("attributes"))
    }
}

/// A whole number of milliseconds (or microseconds) that must be within 0..=[`MAX_DURATION`]: Toxiproxy's units
/// are bare integers, so the check of sign and size lives in one place.
pub(crate) fn check_duration(field: &str, value: i64, unit: Duration) -> Result<Duration, Invalid> {
    if value < 0 {
        return Err(Invalid::new(field, format!("{value} is negative")));
    }
    let d = unit.saturating_mul(u32::try_from(value).unwrap_or(u32::MAX));
    if d > MAX_DURATION {
        return Err(Invalid::new(
            field,
            format!("{value} is more than a day; faultd refuses it as a likely typo"),
        ));
    }
    Ok(d)
}

/// A count that must not be negative.
pub(crate) fn check_count(field: &str, value: i64) -> Result<u64, Invalid> {
    u64::try_from(value).map_err(|_| Invalid::new(field, format!("{value} is negative")))
}

/// Resolves when a connection is ending (or its signal is gone).
pub(crate) async fn ended(rx: &mut tokio::sync::watch::Receiver<Ending>) {
    let _ = rx.wait_for(|e| *e != Ending::Open).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_registered_type_builds_from_empty_attributes_or_says_what_is_missing() {
        for r in REGISTRY {
            match r.build(Value::Null) {
                Ok((_, back)) => assert!(back.values().all(|v| !v.is_null()), "{}", r.name),
                Err(e) => assert!(e.field.starts_with("attributes"), "{}: {e:?}", r.name),
            }
        }
        let names: Vec<_> = REGISTRY.iter().map(|r| r.name).collect();
        let mut unique = names.clone();
        unique.dedup();
        assert_eq!(names, unique);
    }

    #[test]
    fn negative_and_absurd_attributes_are_refused_with_their_name() {
        let latency = Registration::find("latency").unwrap();
        let e = latency.build(json!({"latency": -5})).unwrap_err();
        assert_eq!(e.field, "attributes.latency");
        let e = latency
            .build(json!({"latency": 1_000_000_000i64}))
            .unwrap_err();
        assert!(e.message.contains("more than a day"), "{e:?}");
        let e = latency.build(json!({"latency": "soon"})).unwrap_err();
        assert_eq!(e.field, "attributes.latency");
    }

    #[test]
    fn chunk_rng_symmetric_stays_within_its_spread() {
        let mut rng = ChunkRng::new(9);
        for _ in 0..10_000 {
            let v = rng.symmetric(3);
            assert!((-3..=3).contains(&v));
        }
        assert_eq!(ChunkRng::new(1).symmetric(0), 0);
    }
}
