//! The healthy gRPC answer: a configured response message (protobuf bytes, as hex or from a file) or the
//! request's own message echoed, with `grpc-status: 0` and optional metadata.
//!
//! For: gRPC calls (content type `application/grpc`) that no fault takes; faultd needs no `.proto`, the bytes are
//! sent as they are. Not for: plain HTTP calls, which get `response`, nor failures (`grpc_errors`).

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use bytes::Bytes;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_headers, header_map, Fault, Invalid};

/// The healthy gRPC answer, written `grpc_response: {message: 0a05...}`, `{message_file: product.bin}` or
/// `{echo: true}`; an empty message (every field at its default) when none is given. The message is read (and a
/// file loaded) when the configuration is, once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "GrpcResponseSpec", into = "GrpcResponseSpec")]
pub struct GrpcResponse {
    spec: GrpcResponseSpec,
    message: Bytes,
}

/// [`GrpcResponse`] as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcResponseSpec {
    /// The response message's bytes as hex, e.g. `0a0568656c6c6f` (spaces allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A file holding the response message's bytes (relative to faultd's working directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_file: Option<String>,
    /// Answer each call with its own request message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub echo: bool,
    /// Initial metadata (response headers), e.g. `{x-served-by: faultd}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Trailing metadata sent beside `grpc-status: 0`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub trailers: BTreeMap<String, String>,
}

impl TryFrom<GrpcResponseSpec> for GrpcResponse {
    type Error = String;

    fn try_from(spec: GrpcResponseSpec) -> Result<GrpcResponse, String> {
        let message = match (&spec.message, &spec.message_file, spec.echo) {
            (None, None, _) => Bytes::new(),
            (Some(hex), None, false) => Bytes::from(faultline_units::decode_hex(hex).map_err(|why| format!("message {why}"))?),
            (None, Some(path), false) => Bytes::from(
                std::fs::read(path).map_err(|e| format!("message_file {path:?}: {e}"))?,
            ),
            _ => {
                return Err(
                    "give at most one of message (hex), message_file and echo: true".to_string(),
                )
            }
        };
        if message.len() > crate::grpc::MAX_MESSAGE {
            return Err(format!(
                "the message is {} bytes, above gRPC's 4MiB default limit",
                message.len()
            ));
        }
        Ok(GrpcResponse { spec, message })
    }
}

impl From<GrpcResponse> for GrpcResponseSpec {
    fn from(r: GrpcResponse) -> GrpcResponseSpec {
        r.spec
    }
}

impl JsonSchema for GrpcResponse {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GrpcResponse".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        GrpcResponseSpec::json_schema(generator)
    }
}

impl Fault for GrpcResponse {
    /// Checks the metadata names and values.
    fn validate(&self) -> Result<(), Invalid> {
        check_headers(&self.spec.metadata).map_err(|e| e.at("metadata"))?;
        check_headers(&self.spec.trailers).map_err(|e| e.at("trailers"))
    }
}

impl GrpcResponse {
    /// Whether each call is answered with its own message.
    pub fn echo(&self) -> bool {
        self.spec.echo
    }

    /// The configured message (empty for an echo).
    pub fn message(&self) -> Bytes {
        self.message.clone()
    }

    /// The initial metadata.
    pub fn metadata(&self) -> HeaderMap {
        header_map(&self.spec.metadata).unwrap_or_default()
    }

    /// The trailing metadata.
    pub fn trailers(&self) -> HeaderMap {
        header_map(&self.spec.trailers).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_hex_a_file_or_an_echo_and_never_two_of_them() {
        let r: GrpcResponse = serde_json::from_str(r#"{"message": "0a 03 61 62 63"}"#).unwrap();
        assert_eq!(&r.message()[..], b"\x0a\x03abc");
        let dir = std::env::temp_dir().join(format!("faultd-grpc-{}", std::process::id()));
        std::fs::write(&dir, b"\x08\x01").unwrap();
        let r: GrpcResponse =
            serde_json::from_value(serde_json::json!({"message_file": dir})).unwrap();
        assert_eq!(&r.message()[..], b"\x08\x01");
        std::fs::remove_file(&dir).unwrap();
        let e = serde_json::from_str::<GrpcResponse>(r#"{"message": "0a", "echo": true}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most one"), "{e}");
        let e = serde_json::from_str::<GrpcResponse>(r#"{"message": "0g"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not hex"), "{e}");
        // Written back as configured.
        let r: GrpcResponse = serde_json::from_str(r#"{"echo": true}"#).unwrap();
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"echo":true}"#);
    }
}
