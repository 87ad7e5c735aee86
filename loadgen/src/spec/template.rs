//! One kind of request in the mix as the scenario writes it (`load.requests[i]`): an HTTP method and path, or a
//! gRPC call with its message and `.proto` files, and the readers of those files.
//!
//! Not for compiling a template into requests (that is the request pipeline, `request`).

use std::collections::BTreeMap;

use faultline_units::Dur;
use serde::{Deserialize, Serialize};

/// One kind of request in the mix. Exactly one of the method keys (`get`, `post`, ...) holds the path, which may
/// contain generators: `{seq}` (the arrival's index, from 0) and `{rand:1..1000}` (uniform, both ends included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestTemplate {
    /// The path of a GET request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub get: Option<String>,
    /// The path of a POST request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post: Option<String>,
    /// The path of a PUT request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub put: Option<String>,
    /// The path of a PATCH request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// The path of a DELETE request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete: Option<String>,
    /// The path of a HEAD request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The request body, sent as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Relative weight in the mix (default 1).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// A gRPC call of this method, e.g. `/shop.Catalog/GetProduct` (sent over HTTP/2 as a POST).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<String>,
    /// The gRPC request message: its bytes as hex, e.g. `0a0568656c6c6f`, or written as JSON against its type in
    /// `proto`, e.g. `{json: {id: "{rand:1..1000}", tags: [new]}}` (`{seq}` and `{rand:lo..hi}` in its strings
    /// are rendered per request); empty when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<faultline_proto::MessageSpec>,
    /// The `.proto` files that define the method (their imports are found beside them or in the folders above),
    /// e.g. `[protos/shop.proto]`: needed for a message written as JSON, and they let the report show answers
    /// decoded. Relative to the scenario file (to the working folder for loadgen alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proto: Vec<String>,
    /// The `proto` files compiled, as a base64 `FileDescriptorSet` (what `protoc --include_imports
    /// --descriptor_set_out` writes): what the runner sends an agent in place of the files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto_set: Option<String>,
    /// A file holding the gRPC request message's bytes: a regular file of at most 4 MiB (gRPC's default message
    /// limit), relative to the working folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_file: Option<String>,
    /// gRPC metadata (request headers), e.g. `{authorization: Bearer x}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// The gRPC deadline, sent as `grpc-timeout`; the call also ends as `timeout` when it passes (or at the
    /// load's `timeout`, if sooner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Dur>,
    /// Send this (REST) request over HTTP/2 with prior knowledge instead of HTTP/1.1.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub http2: bool,
}

fn default_weight() -> u32 {
    1
}

/// Compiles a request's `proto` files (as written: relative to the working folder, or absolute), each read as a
/// regular file of at most [`faultline_proto::MAX_PROTO_FILE`] bytes.
pub fn read_protos(
    files: &[String],
) -> Result<faultline_proto::Protos, faultline_proto::ProtoError> {
    use faultline_units::input::{read_capped, Cap};
    faultline_proto::Protos::compile(files, |file| {
        let cap = Cap::limit(
            faultline_units::Size(faultline_proto::MAX_PROTO_FILE as u64),
            "far above any real .proto file",
        );
        read_capped(std::path::Path::new(file), cap).map_err(|e| e.to_string())
    })
}

/// The largest gRPC request message a `message_file` may hold: gRPC's default message limit.
pub const MAX_MESSAGE_FILE: usize = 4 << 20;

/// Reads a request's `message_file` (relative to the working folder): a regular file of at most
/// [`MAX_MESSAGE_FILE`] bytes, so that a FIFO or a device named by mistake cannot stall or flood the load.
pub fn read_message_file(file: &str) -> Result<Vec<u8>, String> {
    use faultline_units::input::{read_capped, Cap};
    read_capped(
        std::path::Path::new(file),
        Cap::limit(
            faultline_units::Size(MAX_MESSAGE_FILE as u64),
            "gRPC's default message limit",
        ),
    )
    .map_err(|e| e.to_string())
}

impl Default for RequestTemplate {
    /// No method yet, weight 1 (as a template without `weight` in a scenario).
    fn default() -> Self {
        RequestTemplate {
            get: None,
            post: None,
            put: None,
            patch: None,
            delete: None,
            head: None,
            body: None,
            headers: BTreeMap::new(),
            weight: default_weight(),
            grpc: None,
            message: None,
            proto: Vec::new(),
            proto_set: None,
            message_file: None,
            metadata: BTreeMap::new(),
            deadline: None,
            http2: false,
        }
    }
}

impl RequestTemplate {
    /// A GET of `path` with weight 1 (what the CLI builds from `--url`).
    pub fn get(path: impl Into<String>) -> Self {
        RequestTemplate {
            get: Some(path.into()),
            ..Default::default()
        }
    }

    /// Whether this template goes over HTTP/2 (a gRPC call, or `http2: true`).
    pub fn is_http2(&self) -> bool {
        self.http2 || self.grpc.is_some()
    }

    /// The method and path this template names, or an error if it names none or several. A gRPC call is a POST.
    pub fn method_and_path(&self) -> Result<(&'static str, &str), String> {
        let named: Vec<(&'static str, &str)> = [
            ("POST", &self.grpc),
            ("GET", &self.get),
            ("POST", &self.post),
            ("PUT", &self.put),
            ("PATCH", &self.patch),
            ("DELETE", &self.delete),
            ("HEAD", &self.head),
        ]
        .into_iter()
        .filter_map(|(m, p)| p.as_deref().map(|p| (m, p)))
        .collect();
        match named.as_slice() {
            [one] => Ok(*one),
            [] => Err(
                "names no method: write one of get, post, put, patch, delete, head with the path, \
                 or grpc with the method"
                    .into(),
            ),
            _ => Err(format!(
                "names {} methods ({}); a template has exactly one",
                named.len(),
                named
                    .iter()
                    .map(|(m, _)| m.to_lowercase())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
}
