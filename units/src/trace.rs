//! Following one request through a service: the W3C Trace Context `traceparent` header that loadgen writes and
//! faultd reads, the scenario's `correlate:` section that names the headers, and the deadline a call carries.
//!
//! For: the few bytes both sides must agree on, so that the runner can join loadgen's requests with faultd's
//! calls by trace id. Not for tracing itself: no span is exported anywhere; a trace id is only a key.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The header W3C Trace Context propagates.
pub const TRACEPARENT: &str = "traceparent";

/// The deadline header when a scenario names none: the caller's remaining budget in whole milliseconds.
pub const DEFAULT_DEADLINE_HEADER: &str = "x-request-timeout";

/// The scenario's `correlate:` section: which header carries a request's identity to the dependency, and which
/// one its deadline.
///
/// ```yaml
/// correlate:
///   header: traceparent
///   deadline_header: x-request-timeout
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Correlate {
    /// `traceparent` (the default): loadgen sends `00-<trace id>-<span id>-01` with a fresh trace id per
    /// request. Any other name (such as `x-request-id`): loadgen sends a random 32-digit hex id in it, and faultd
    /// keys each call by that header's value.
    #[serde(default = "default_header")]
    pub header: String,
    /// The header that carries the remaining budget in whole milliseconds (`x-request-timeout` by default); gRPC
    /// calls carry `grpc-timeout` instead.
    #[serde(default = "default_deadline_header")]
    pub deadline_header: String,
}

fn default_header() -> String {
    TRACEPARENT.to_string()
}

fn default_deadline_header() -> String {
    DEFAULT_DEADLINE_HEADER.to_string()
}

impl Default for Correlate {
    fn default() -> Self {
        Correlate {
            header: default_header(),
            deadline_header: default_deadline_header(),
        }
    }
}

impl Correlate {
    /// Whether the identity travels in `traceparent` (rather than a bare id in a header of another name).
    pub fn is_traceparent(&self) -> bool {
        self.header.eq_ignore_ascii_case(TRACEPARENT)
    }

    /// The header's value for a request with `trace` and, for `traceparent`, the span id `span`.
    pub fn value(&self, trace: u128, span: u64) -> String {
        if self.is_traceparent() {
            traceparent(trace, span)
        } else {
            format!("{trace:032x}")
        }
    }

    /// The trace id and parent span a call's header value carries: `traceparent`'s two ids, or a header of
    /// another name read as 1 to 32 hex digits (no span). `None` for anything else.
    pub fn parse(&self, value: &[u8]) -> Option<(u128, Option<u64>)> {
        if self.is_traceparent() {
            parse_traceparent(value).map(|(t, s)| (t, Some(s)))
        } else {
            parse_hex_id(value).map(|t| (t, None))
        }
    }
}

/// `00-<32 hex trace id>-<16 hex span id>-01` (version 00, sampled).
pub fn traceparent(trace: u128, span: u64) -> String {
    format!("00-{trace:032x}-{span:016x}-01")
}

/// The trace id and parent span of a `traceparent` value, as the W3C Trace Context specification reads one:
/// a two-digit version (not `ff`), 32 and 16 lowercase hex digits that are not all zero, and two flag digits;
/// a version above 00 may carry more after a dash.
pub fn parse_traceparent(value: &[u8]) -> Option<(u128, u64)> {
    let value = trim(value);
    if value.len() < 55 || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let version = hex(&value[..2])?;
    if version == 0xff
        || (version == 0 && value.len() != 55)
        || (value.len() > 55 && value[55] != b'-')
    {
        return None;
    }
    let trace = hex(&value[3..35])?;
    let span = u64::try_from(hex(&value[36..52])?).ok()?;
    hex(&value[53..55])?;
    (trace != 0 && span != 0).then_some((trace, span))
}

/// A bare id of 1 to 32 hex digits (either case), as loadgen writes in a header other than `traceparent`.
pub fn parse_hex_id(value: &[u8]) -> Option<u128> {
    let value = trim(value);
    if value.is_empty() || value.len() > 32 {
        return None;
    }
    u128::from_str_radix(std::str::from_utf8(value).ok()?, 16).ok()
}

/// A deadline header's value: a whole number of milliseconds.
pub fn parse_deadline_ms(value: &[u8]) -> Option<Duration> {
    let value = trim(value);
    if value.is_empty() || value.len() > 12 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value)
        .ok()?
        .parse()
        .ok()
        .map(Duration::from_millis)
}

/// Serialises a trace id as its 32 hex digits (JSON numbers cannot hold 128 bits): `#[serde(with = "hex_id")]`.
pub mod hex_id {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{id:032x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_hex_id(text.as_bytes()).ok_or_else(|| {
            serde::de::Error::custom(format!("{text:?} is not a trace id of 32 hex digits"))
        })
    }
}

fn trim(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &value[start..end]
}

/// Lowercase hex digits only, as Trace Context requires.
fn hex(digits: &[u8]) -> Option<u128> {
    if !digits
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    u128::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_written_is_read_back_with_its_ids() {
        let value = traceparent(0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7);
        assert_eq!(
            value,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(
            parse_traceparent(value.as_bytes()),
            Some((0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7))
        );
    }

    #[test]
    fn traceparents_the_specification_refuses_carry_no_trace_id() {
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736",
            "",
        ] {
            assert_eq!(parse_traceparent(bad.as_bytes()), None, "{bad}");
        }
        // A later version may append fields.
        assert!(
            parse_traceparent(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
                .is_some()
        );
    }

    #[test]
    fn another_header_carries_a_bare_hex_id_and_no_span() {
        let c = Correlate {
            header: "x-request-id".into(),
            ..Correlate::default()
        };
        let v = c.value(0xabc, 7);
        assert_eq!(v, "00000000000000000000000000000abc");
        assert_eq!(c.parse(v.as_bytes()), Some((0xabc, None)));
        assert_eq!(c.parse(b"not-hex"), None);
        let t = Correlate::default();
        assert_eq!(t.parse(t.value(5, 9).as_bytes()), Some((5, Some(9))));
    }

    #[test]
    fn a_deadline_is_whole_milliseconds() {
        assert_eq!(parse_deadline_ms(b"250"), Some(Duration::from_millis(250)));
        assert_eq!(parse_deadline_ms(b" 0 "), Some(Duration::ZERO));
        assert_eq!(parse_deadline_ms(b"2.5"), None);
        assert_eq!(parse_deadline_ms(b"-1"), None);
        assert_eq!(parse_deadline_ms(b""), None);
    }
}
