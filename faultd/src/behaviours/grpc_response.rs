//! The healthy gRPC answer: a configured response message (protobuf bytes as hex or from a file, or JSON against
//! the team's `.proto` files) or the request's own message echoed, with `grpc-status: 0` and optional metadata;
//! for a server-streaming method, the message a number of times at an interval (`stream`).
//!
//! For: gRPC calls (content type `application/grpc`) that no fault takes. A message written as JSON is encoded
//! once, when the configuration's files are read; what is served is bytes either way. Not for: plain HTTP calls,
//! which get `response`, nor failures (`grpc_errors`).

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use bytes::Bytes;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use faultline_units::Dur;

use super::{check_headers, header_map, Fault, Invalid};
use crate::files::Files;

/// The healthy gRPC answer, written `grpc_response: {message: 0a05...}`, `{message_file: product.bin}`,
/// `{proto: [shop.proto], message: {json: {id: 7, name: lamp}}}` or `{echo: true}`, with `stream: {messages: 10,
/// interval: 100ms}` for a server-streaming method; an empty message (every field at its default) when none is
/// given. Hex is decoded when the configuration is parsed; a file, or `.proto` files, are read once after, by
/// [`GrpcResponse::read_file`], by whoever knows where the configuration came from and so which files it may name
/// ([`Files`]).
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
    /// The response message: its bytes as hex, e.g. `0a0568656c6c6f` (spaces allowed), or written as JSON against
    /// its type in `proto`, e.g. `{json: {id: 7, name: lamp}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<faultline_proto::MessageSpec>,
    /// The `.proto` files that define the message written as JSON (their imports are found beside them or in the
    /// folders above): read as `message_file` is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proto: Vec<String>,
    /// The message type of a message written as JSON, e.g. `shop.Product`; by default the output type of the
    /// route's method, when the route's path is one method (`/shop.Catalog/GetProduct`).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
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
        use faultline_proto::MessageSpec;
        let message = match (&spec.message, &spec.message_file, spec.echo) {
            (None, None, _) => Some(Bytes::new()),
            (Some(MessageSpec::Hex(hex)), None, false) => Some(Bytes::from(
                faultline_units::decode_hex(hex).map_err(|why| format!("message {why}"))?,
            )),
            (Some(MessageSpec::Json(_)), None, false) if spec.proto.is_empty() => {
                return Err("a message written as JSON needs the .proto files that define its type: \
                            `proto: [path/to/service.proto]`"
                    .to_string())
            }
            (Some(MessageSpec::Json(_)), None, false) | (None, Some(_), false) => None,
            _ => {
                return Err(
                    "give at most one of message, message_file and echo: true".to_string(),
                )
            }
        };
        if let Some(len) = message.as_ref().map(Bytes::len) {
            check_size(len)?;
        }
        Ok(GrpcResponse { spec, message })
    }
}

/// The largest message a gRPC answer may hold, and the largest request message read for an echo: gRPC's default
/// receive limit.
pub const MAX_MESSAGE: usize = 4 << 20;

fn check_size(len: usize) -> Result<(), String> {
    if len > MAX_MESSAGE {
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
    /// Reads the `message_file`, or the `.proto` files of a message written as JSON and encodes it, if not done
    /// yet, from where `files` allows. `route_path` is the path of the route it answers, whose method gives the
    /// message's type when `type` is not given.
    pub fn read_file(&mut self, files: &Files, route_path: Option<&str>) -> Result<(), Invalid> {
        if self.message.is_some() {
            return Ok(());
        }
        if let Some(written) = &self.spec.message_file {
            let bytes = files
                .read(written)
                .and_then(|b| check_size(b.len()).map(|()| b))
                .map_err(|why| Invalid::new("message_file", why))?;
            self.message = Some(Bytes::from(bytes));
        }
        if let Some(json) = self.spec.message.as_ref().and_then(|m| m.json()) {
            let bytes = encode_json(&self.spec, json, files, route_path)?;
            check_size(bytes.len()).map_err(|why| Invalid::new("message", why))?;
            self.message = Some(Bytes::from(bytes));
        }
        Ok(())
    }

    /// Whether a `message_file` is named but not read yet (the answer would otherwise go out empty).
    pub fn file_unread(&self) -> bool {
        self.message.is_none()
    }

    /// The same answer with a file's bytes, or a message written as JSON, written inline as hex, for a faultd that
    /// cannot read the files (another machine's, or a control API without `--files`).
    pub fn inlined(&self) -> GrpcResponse {
        let mut spec = self.spec.clone();
        let from_files = spec.message_file.is_some() || !spec.proto.is_empty();
        if let (Some(message), true) = (&self.message, from_files) {
            spec.message_file = None;
            spec.proto.clear();
            spec.message_type = None;
            spec.message = Some(faultline_proto::MessageSpec::Hex(
                message.iter().map(|b| format!("{b:02x}")).collect(),
            ));
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

/// A message written as JSON, encoded against its type in the `.proto` files read through `files`.
fn encode_json(
    spec: &GrpcResponseSpec,
    json: &serde_json::Value,
    files: &Files,
    route_path: Option<&str>,
) -> Result<Vec<u8>, Invalid> {
    let reader = files.clone();
    let protos = faultline_proto::Protos::compile(&spec.proto, move |f| reader.read(f))
        .map_err(|e| Invalid::new("proto", e.to_string()))?;
    let desc = match (&spec.message_type, route_path) {
        (Some(name), _) => protos
            .message(name)
            .map_err(|e| Invalid::new("type", e.to_string()))?,
        (None, Some(path)) if is_one_method(path) => protos
            .method(path)
            .map_err(|e| Invalid::new("message", format!("{e}; or give the message's `type`")))?
            .output(),
        (None, path) => {
            return Err(Invalid::new(
                "type",
                format!(
                    "give the message's type (e.g. `type: shop.Product`): {} one gRPC method",
                    match path {
                        Some(p) => format!("the route's path {p:?} is not"),
                        None => "there is no route path naming".to_string(),
                    }
                ),
            ))
        }
    };
    faultline_proto::Protos::encode(&desc, json).map_err(|e| match e {
        faultline_proto::ProtoError::Field(f) if !f.path.is_empty() => {
            let at = if f.path.starts_with('[') {
                format!("message.json{}", f.path)
            } else {
                format!("message.json.{}", f.path)
            };
            Invalid::new(at, f.why)
        }
        other => Invalid::new("message.json", other.to_string()),
    })
}

/// Whether a route's path is exactly one gRPC method, `/package.Service/Method`, with no pattern in it.
fn is_one_method(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    path.starts_with('/')
        && segments.len() == 2
        && segments.iter().all(|s| !s.is_empty() && !s.contains(['*', '{']))
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
        r.read_file(&Files::Beside(dir.clone()), None).unwrap();
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
    fn a_message_written_as_json_is_encoded_against_its_proto_and_inlined_as_hex() {
        let dir = std::env::temp_dir().join(format!("faultd-proto-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("shop.proto"),
            "syntax = \"proto3\";\npackage shop;\nmessage Req {}\nmessage Product { int64 id = 1; string name = 2; }\n\
             service Catalog { rpc Get(Req) returns (Product); }\n",
        )
        .unwrap();
        let parse = |json: serde_json::Value| serde_json::from_value::<GrpcResponse>(json).unwrap();
        let written = serde_json::json!({"proto": ["shop.proto"], "message": {"json": {"id": 7, "name": "lamp"}}});
        // The route's method gives the type.
        let mut r = parse(written.clone());
        assert!(r.file_unread());
        r.read_file(&Files::Beside(dir.clone()), Some("/shop.Catalog/Get")).unwrap();
        assert_eq!(&r.message()[..], b"\x08\x07\x12\x04lamp");
        let inline = serde_json::to_value(r.inlined()).unwrap();
        assert_eq!(inline, serde_json::json!({"message": "08071204" .to_string() + "6c616d70"}));
        // A route of several methods needs the type named.
        let mut r = parse(written.clone());
        let e = r.read_file(&Files::Beside(dir.clone()), Some("/shop.Catalog/*")).unwrap_err();
        assert_eq!(e.field, "type", "{e:?}");
        let mut typed = written.clone();
        typed["type"] = "shop.Product".into();
        let mut r = parse(typed);
        r.read_file(&Files::Beside(dir.clone()), Some("/shop.Catalog/*")).unwrap();
        assert_eq!(&r.message()[..], b"\x08\x07\x12\x04lamp");
        // A wrong field names itself; a control API without --files reads no .proto.
        let mut wrong = written.clone();
        wrong["message"]["json"]["nme"] = "x".into();
        let e = parse(wrong)
            .read_file(&Files::Beside(dir.clone()), Some("/shop.Catalog/Get"))
            .unwrap_err();
        assert_eq!(e.field, "message.json.nme", "{e:?}");
        assert!(e.message.contains("shop.Product has no field"), "{e:?}");
        let e = parse(written.clone())
            .read_file(&Files::Refused, Some("/shop.Catalog/Get"))
            .unwrap_err();
        assert_eq!(e.field, "proto", "{e:?}");
        assert!(e.message.contains("--files"), "{e:?}");
        // JSON without its .proto is refused as it is parsed.
        let e = serde_json::from_value::<GrpcResponse>(serde_json::json!({"message": {"json": {}}}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs the .proto files"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
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
