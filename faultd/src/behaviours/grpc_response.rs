//! The healthy gRPC answer: a configured response message (protobuf bytes, as hex or from a file) or the
//! request's own message echoed, with `grpc-status: 0` and optional metadata; for a server-streaming method, the
//! message a number of times at an interval (`stream`).
//!
//! For: gRPC calls (content type `application/grpc`) that no fault takes; faultd needs no `.proto`, the bytes are
//! sent as they are. Not for: plain HTTP calls, which get `response`, nor failures (`grpc_errors`).

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use bytes::Bytes;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use faultline_units::Dur;

use super::{check_headers, header_map, Fault, Invalid};
use crate::files::Files;

/// The healthy gRPC answer, written `grpc_response: {message: 0a05...}`, `{message_file: product.bin}` or
/// `{echo: true}`, with `stream: {messages: 10, interval: 100ms}` for a server-streaming method; an empty message (every field at its default) when none is given. Hex is decoded
/// when the configuration is parsed; a file is read once after, by [`GrpcResponse::read_file`], by whoever knows
/// where the configuration came from and so which files it may name ([`Files`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "GrpcResponseSpec", into = "GrpcResponseSpec")]
pub struct GrpcResponse {
    spec: GrpcResponseSpec,
    /// `None` while the `message_file` is not read.
    message: Option<Bytes>,
}

/// [`GrpcResponse`] as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcResponseSpec {
    /// The response message's bytes as hex, e.g. `0a0568656c6c6f` (spaces allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A file holding the response message's bytes: relative to the configuration file's folder, or inside the
    /// folder given with `faultd --files DIR` for a configuration sent to the control API. A regular file of at
    /// most 2 MiB.
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
    /// A server-streaming answer: the message sent this many times, at this interval, before the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<GrpcStream>,
}

/// The replies of a server-streaming method, e.g. `{messages: 10, interval: 100ms}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcStream {
    /// How many messages the answer carries (at least 1).
    pub messages: u32,
    /// The pause between two messages; none by default.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub interval: Dur,
}

fn is_zero(d: &Dur) -> bool {
    d.get().is_zero()
}

impl TryFrom<GrpcResponseSpec> for GrpcResponse {
    type Error = String;

    fn try_from(spec: GrpcResponseSpec) -> Result<GrpcResponse, String> {
        let message = match (&spec.message, &spec.message_file, spec.echo) {
            (None, None, _) => Some(Bytes::new()),
            (Some(hex), None, false) => Some(Bytes::from(faultline_units::decode_hex(hex).map_err(|why| format!("message {why}"))?)),
            (None, Some(_), false) => None,
            _ => {
                return Err(
                    "give at most one of message (hex), message_file and echo: true".to_string(),
                )
            }
        };
        if let Some(len) = message.as_ref().map(Bytes::len) {
            check_size(len)?;
        }
        Ok(GrpcResponse { spec, message })
    }
}

fn check_size(len: usize) -> Result<(), String> {
    if len > crate::grpc::MAX_MESSAGE {
        return Err(format!(
            "the message is {len} bytes, above gRPC's 4MiB default limit"
        ));
    }
    Ok(())
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
    /// Checks the metadata names and values, and that a stream carries a message.
    fn validate(&self) -> Result<(), Invalid> {
        check_headers(&self.spec.metadata).map_err(|e| e.at("metadata"))?;
        check_headers(&self.spec.trailers).map_err(|e| e.at("trailers"))?;
        if self.spec.stream.is_some_and(|s| s.messages == 0) {
            return Err(Invalid::new(
                "stream.messages",
                "a stream carries at least 1 message (a status-only answer is `grpc_errors`)",
            ));
        }
        Ok(())
    }

    fn scale_time(&mut self, factor: f64) {
        if let Some(stream) = &mut self.spec.stream {
            stream.interval = stream.interval.scaled(factor);
        }
    }
}

impl GrpcResponse {
    /// Reads the `message_file`, if one is named and not read yet, from where `files` allows.
    pub fn read_file(&mut self, files: &Files) -> Result<(), Invalid> {
        if let (None, Some(written)) = (&self.message, &self.spec.message_file) {
            let bytes = files
                .read(written)
                .and_then(|b| check_size(b.len()).map(|()| b))
                .map_err(|why| Invalid::new("message_file", why))?;
            self.message = Some(Bytes::from(bytes));
        }
        Ok(())
    }

    /// Whether a `message_file` is named but not read yet (the answer would otherwise go out empty).
    pub fn file_unread(&self) -> bool {
        self.message.is_none()
    }

    /// The same answer with a file's bytes written inline as hex, for a faultd that cannot read the file (another
    /// machine's, or a control API without `--files`).
    pub fn inlined(&self) -> GrpcResponse {
        let mut spec = self.spec.clone();
        if let (Some(message), Some(_)) = (&self.message, spec.message_file.take()) {
            spec.message = Some(message.iter().map(|b| format!("{b:02x}")).collect());
        }
        GrpcResponse {
            spec,
            message: self.message.clone(),
        }
    }

    /// Whether each call is answered with its own message.
    pub fn echo(&self) -> bool {
        self.spec.echo
    }

    /// The configured message (empty for an echo).
    pub fn message(&self) -> Bytes {
        self.message.clone().unwrap_or_default()
    }

    /// The initial metadata.
    pub fn metadata(&self) -> HeaderMap {
        header_map(&self.spec.metadata).unwrap_or_default()
    }

    /// The trailing metadata.
    pub fn trailers(&self) -> HeaderMap {
        header_map(&self.spec.trailers).unwrap_or_default()
    }

    /// How many messages an answer carries (1 for a unary method) and the pause between two of them.
    pub fn stream(&self) -> (u32, std::time::Duration) {
        self.spec
            .stream
            .map_or((1, std::time::Duration::ZERO), |s| (s.messages, s.interval.get()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_hex_a_file_or_an_echo_and_never_two_of_them() {
        let r: GrpcResponse = serde_json::from_str(r#"{"message": "0a 03 61 62 63"}"#).unwrap();
        assert_eq!(&r.message()[..], b"\x0a\x03abc");
        let dir = std::env::temp_dir();
        let name = format!("faultd-grpc-{}", std::process::id());
        std::fs::write(dir.join(&name), b"\x08\x01").unwrap();
        let mut r: GrpcResponse =
            serde_json::from_value(serde_json::json!({"message_file": name})).unwrap();
        assert!(r.file_unread());
        r.read_file(&Files::Beside(dir.clone())).unwrap();
        assert_eq!(&r.message()[..], b"\x08\x01");
        let inline = serde_json::to_value(r.inlined()).unwrap();
        assert_eq!(inline, serde_json::json!({"message": "0801"}));
        std::fs::remove_file(dir.join(&name)).unwrap();
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

    #[test]
    fn a_stream_sends_its_messages_at_an_interval_that_the_time_scale_shortens() {
        let mut r: GrpcResponse =
            serde_json::from_str(r#"{"message": "08", "stream": {"messages": 4, "interval": "200ms"}}"#)
                .unwrap();
        assert_eq!(r.stream(), (4, std::time::Duration::from_millis(200)));
        Fault::scale_time(&mut r, 0.5);
        assert_eq!(r.stream(), (4, std::time::Duration::from_millis(100)));
        let unary: GrpcResponse = serde_json::from_str(r#"{"message": "08"}"#).unwrap();
        assert_eq!(unary.stream(), (1, std::time::Duration::ZERO));
        let none: GrpcResponse =
            serde_json::from_str(r#"{"stream": {"messages": 0}}"#).unwrap();
        let e = Fault::validate(&none).unwrap_err();
        assert!(format!("{e:?}").contains("stream.messages"), "{e:?}");
    }
}
