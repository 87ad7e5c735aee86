//! The load a run offers, as the scenario writes it: the `load:` section deserialises straight into [`LoadSpec`].
//!
//! This module is for the shape of the configuration (the rate in `rate`, the request templates in `template`),
//! its validation and its time scaling. It is not for turning rates into send times (that is `schedule`) nor for
//! building requests (that is the request pipeline, `request`, which also holds [`LoadSpec::validate`]: checking
//! the templates means compiling them).

use std::time::Duration;

use faultline_units::{Dur, GrpcCode, Rate};
use serde::{Deserialize, Serialize};

use crate::LoadError;

mod rate;
mod template;

pub use faultline_proto::MessageSpec;
pub use rate::{Arrivals, RateSegment, RateSpec};
pub use template::{read_message_file, read_protos, RequestTemplate, MAX_MESSAGE_FILE};

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
        if let Some(rate) = &self.rate {
            rate.check()?;
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
mod tests;
