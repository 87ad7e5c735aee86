//! The HTTP/2 error code the stream faults carry (`rst_stream`, `goaway`): read from its name or number in a
//! scenario, written back by name.
//!
//! Not for: writing frames (`crate::http::http2` writes the GOAWAY; hyper the RST_STREAM).

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// An HTTP/2 error code (RFC 9113, 7), as RST_STREAM and GOAWAY carry it: a name (`REFUSED_STREAM`,
/// `enhance_your_calm`) or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct H2Code(pub u32);

const H2_NAMES: [&str; 14] = [
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
];

impl H2Code {
    /// NO_ERROR (0).
    pub const NO_ERROR: H2Code = H2Code(0);
    /// INTERNAL_ERROR (2).
    pub const INTERNAL_ERROR: H2Code = H2Code(2);
    /// CANCEL (8).
    pub const CANCEL: H2Code = H2Code(8);

    /// The code as h2 carries it.
    pub fn reason(self) -> h2::Reason {
        h2::Reason::from(self.0)
    }
}

impl FromStr for H2Code {
    type Err = String;

    fn from_str(input: &str) -> Result<H2Code, String> {
        let s = input.trim();
        if let Ok(n) = s.parse::<u32>() {
            return Ok(H2Code(n));
        }
        H2_NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(s))
            .map(|i| H2Code(i as u32))
            .ok_or_else(|| {
                format!(
                    "{input:?} is not an HTTP/2 error code (one of {}, or a number)",
                    H2_NAMES.join(", ")
                )
            })
    }
}

impl fmt::Display for H2Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match H2_NAMES.get(self.0 as usize) {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.0),
        }
    }
}

impl<'de> Deserialize<'de> for H2Code {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = H2Code;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "an HTTP/2 error code such as REFUSED_STREAM or 7")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<H2Code, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<H2Code, E> {
                u32::try_from(v)
                    .map(H2Code)
                    .map_err(|_| E::custom(format!("{v} is not an HTTP/2 error code")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<H2Code, E> {
                u32::try_from(v)
                    .map(H2Code)
                    .map_err(|_| E::custom(format!("{v} is not an HTTP/2 error code")))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for H2Code {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl JsonSchema for H2Code {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "H2Code".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "an HTTP/2 error code: its name (REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM, ...) or its number",
            "oneOf": [ { "type": "string", "enum": H2_NAMES }, { "type": "integer", "minimum": 0 } ],
        })
    }
}
