//! gRPC status codes, parsed at the edge from a name (`UNAVAILABLE`, `deadline_exceeded`) or a number (`14`).
//!
//! For: the codes faultd answers with and loadgen and the demo classify, so all three read a scenario the same
//! way. Not for the wire: a code goes on the wire as its number in the `grpc-status` trailer.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::{Serialize, Serializer};

/// A gRPC status code (0..=16), as the gRPC specification names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GrpcCode(u8);

/// The names of the codes, indexed by number.
const NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

impl GrpcCode {
    pub const OK: GrpcCode = GrpcCode(0);
    pub const CANCELLED: GrpcCode = GrpcCode(1);
    pub const UNKNOWN: GrpcCode = GrpcCode(2);
    pub const INVALID_ARGUMENT: GrpcCode = GrpcCode(3);
    pub const DEADLINE_EXCEEDED: GrpcCode = GrpcCode(4);
    pub const NOT_FOUND: GrpcCode = GrpcCode(5);
    pub const ALREADY_EXISTS: GrpcCode = GrpcCode(6);
    pub const PERMISSION_DENIED: GrpcCode = GrpcCode(7);
    pub const RESOURCE_EXHAUSTED: GrpcCode = GrpcCode(8);
    pub const FAILED_PRECONDITION: GrpcCode = GrpcCode(9);
    pub const ABORTED: GrpcCode = GrpcCode(10);
    pub const OUT_OF_RANGE: GrpcCode = GrpcCode(11);
    pub const UNIMPLEMENTED: GrpcCode = GrpcCode(12);
    pub const INTERNAL: GrpcCode = GrpcCode(13);
    pub const UNAVAILABLE: GrpcCode = GrpcCode(14);
    pub const DATA_LOSS: GrpcCode = GrpcCode(15);
    pub const UNAUTHENTICATED: GrpcCode = GrpcCode(16);

    /// Every code, in numeric order.
    pub fn all() -> impl Iterator<Item = GrpcCode> {
        (0..NAMES.len() as u8).map(GrpcCode)
    }

    /// The code with this number, if it is one of the 17.
    pub fn from_number(n: u32) -> Option<GrpcCode> {
        (n < NAMES.len() as u32).then_some(GrpcCode(n as u8))
    }

    /// The code a `grpc-status` value carries. A value that is not a known number is `UNKNOWN`, as gRPC clients
    /// read it.
    pub fn from_wire(value: &[u8]) -> GrpcCode {
        std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .and_then(GrpcCode::from_number)
            .unwrap_or(GrpcCode::UNKNOWN)
    }

    /// The code's number, as written in `grpc-status`.
    pub fn number(self) -> u8 {
        self.0
    }

    /// The code's name, e.g. `UNAVAILABLE`.
    pub fn name(self) -> &'static str {
        NAMES[self.0 as usize]
    }

    /// Whether the code says the caller's request was at fault (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
    /// PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION, OUT_OF_RANGE): gRPC's words for a 4xx, which
    /// says nothing about the health of the server that answered it.
    pub fn is_client_error(self) -> bool {
        matches!(
            self,
            GrpcCode::INVALID_ARGUMENT
                | GrpcCode::NOT_FOUND
                | GrpcCode::ALREADY_EXISTS
                | GrpcCode::PERMISSION_DENIED
                | GrpcCode::UNAUTHENTICATED
                | GrpcCode::FAILED_PRECONDITION
                | GrpcCode::OUT_OF_RANGE
        )
    }

    /// The code a gRPC client reads from an HTTP status other than 200 (gRPC's HTTP-to-gRPC mapping: a proxy or
    /// a plain HTTP server answered instead of a gRPC server).
    pub fn from_http_status(status: u16) -> GrpcCode {
        match status {
            400 => GrpcCode::INTERNAL,
            401 => GrpcCode::UNAUTHENTICATED,
            403 => GrpcCode::PERMISSION_DENIED,
            404 => GrpcCode::UNIMPLEMENTED,
            429 | 502 | 503 | 504 => GrpcCode::UNAVAILABLE,
            _ => GrpcCode::UNKNOWN,
        }
    }
}

/// Why a gRPC code could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a gRPC status code (a name such as UNAVAILABLE or DEADLINE_EXCEEDED, or a number 0-16)")]
pub struct GrpcCodeError {
    input: String,
}

impl FromStr for GrpcCode {
    type Err = GrpcCodeError;

    fn from_str(input: &str) -> Result<GrpcCode, GrpcCodeError> {
        let s = input.trim();
        let err = || GrpcCodeError {
            input: input.to_string(),
        };
        if let Ok(n) = s.parse::<u32>() {
            return GrpcCode::from_number(n).ok_or_else(err);
        }
        NAMES
            .iter()
            .position(|name| name.eq_ignore_ascii_case(s))
            .map(|i| GrpcCode(i as u8))
            .ok_or_else(err)
    }
}

impl fmt::Display for GrpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for GrpcCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = GrpcCode;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a gRPC status code such as UNAVAILABLE or 14")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<GrpcCode, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<GrpcCode, E> {
                v.to_string().parse().map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<GrpcCode, E> {
                v.to_string().parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for GrpcCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl schemars::JsonSchema for GrpcCode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GrpcCode".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "a gRPC status code: its name (UNAVAILABLE, DEADLINE_EXCEEDED, ...) or its number 0-16",
            "oneOf": [
                { "type": "string", "enum": NAMES },
                { "type": "integer", "minimum": 0, "maximum": 16 },
            ],
        })
    }
}

/// Bytes written as hex digits (`0a05`, whitespace allowed between them), as scenarios give a gRPC message inline.
pub fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("{hex:?} has an odd number of hex digits"));
    }
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| format!("{hex:?} is not hex (write bytes like 0a05)"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_parse_from_names_in_any_case_and_from_numbers() {
        assert_eq!("UNAVAILABLE".parse(), Ok(GrpcCode::UNAVAILABLE));
        assert_eq!("deadline_exceeded".parse(), Ok(GrpcCode::DEADLINE_EXCEEDED));
        assert_eq!("8".parse(), Ok(GrpcCode::RESOURCE_EXHAUSTED));
        assert!("17".parse::<GrpcCode>().is_err());
        let e = "UNAVAILABL".parse::<GrpcCode>().unwrap_err().to_string();
        assert!(e.contains("UNAVAILABLE or DEADLINE_EXCEEDED"), "{e}");
        assert_eq!(GrpcCode::all().count(), 17);
        assert_eq!(GrpcCode::from_wire(b"14"), GrpcCode::UNAVAILABLE);
        assert_eq!(GrpcCode::from_wire(b"99"), GrpcCode::UNKNOWN);
    }

    #[test]
    fn codes_read_from_numbers_and_write_as_names() {
        let c: GrpcCode = serde_json::from_str("4").unwrap();
        assert_eq!(c, GrpcCode::DEADLINE_EXCEEDED);
        assert_eq!(serde_json::to_string(&c).unwrap(), "\"DEADLINE_EXCEEDED\"");
    }

    #[test]
    fn exactly_the_seven_caller_codes_are_client_errors() {
        let client: Vec<&str> = GrpcCode::all()
            .filter(|c| c.is_client_error())
            .map(|c| c.name())
            .collect();
        assert_eq!(
            client,
            [
                "INVALID_ARGUMENT",
                "NOT_FOUND",
                "ALREADY_EXISTS",
                "PERMISSION_DENIED",
                "FAILED_PRECONDITION",
                "OUT_OF_RANGE",
                "UNAUTHENTICATED"
            ]
        );
    }

    #[test]
    fn http_statuses_map_as_grpc_clients_read_them() {
        assert_eq!(GrpcCode::from_http_status(503), GrpcCode::UNAVAILABLE);
        assert_eq!(GrpcCode::from_http_status(429), GrpcCode::UNAVAILABLE);
        assert_eq!(GrpcCode::from_http_status(404), GrpcCode::UNIMPLEMENTED);
        assert_eq!(GrpcCode::from_http_status(400), GrpcCode::INTERNAL);
        assert_eq!(GrpcCode::from_http_status(500), GrpcCode::UNKNOWN);
    }
}
