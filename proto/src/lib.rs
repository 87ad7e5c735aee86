//! gRPC messages written as JSON against the team's own `.proto` files, compiled when the scenario is read (no
//! `protoc`), and answers read back as JSON.
//!
//! For: loadgen's request messages, faultd's `grpc_response` and the details of its `grpc_errors`, and the
//! answers shown in a report. A message is written in protobuf's canonical JSON mapping, field names as in the
//! `.proto` file or in their lowerCamelCase JSON form; [`Protos::encode`] checks it field by field first, so a wrong
//! name or a value of the wrong type is refused naming the message type and the field. Not for: streaming many
//! messages, or reflection against a live server (the `.proto` files are the source of truth).

mod check;
mod compile;
mod rpc;
mod spec;

use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage};

pub use prost_reflect::{MessageDescriptor, MethodDescriptor};

pub use check::FieldError;
pub use spec::{JsonMessage, MessageSpec};

/// The largest `.proto` file read: far above any real one, so a file named by mistake cannot flood the reader.
pub const MAX_PROTO_FILE: usize = 2 << 20;

/// Why `.proto` files could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// A listed file could not be read.
    #[error("{file}: {why}")]
    Read { file: String, why: String },
    /// The files do not compile: the file, line and protox's reason.
    #[error("{at}: {why}")]
    Compile { at: String, why: String },
    /// No method of that name in the files.
    #[error("{0}")]
    NoMethod(String),
    /// No message type of that name in the files.
    #[error("{0}")]
    NoMessage(String),
    /// The message written does not fit its type.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// Bytes that are not a message of the type.
    #[error("{0}")]
    Decode(String),
}

/// The message types and services of a set of `.proto` files (with the files they import, protobuf's well-known
/// types and the `google.rpc` error details), ready to encode and decode.
#[derive(Debug, Clone)]
pub struct Protos {
    pool: DescriptorPool,
}

impl Protos {
    /// Compiles `files` (as written, e.g. `protos/shop.proto`), reading each through `read`. An import is looked
    /// for beside the file that names it and in the folders above, up to where `read` starts.
    pub fn compile<R>(files: &[String], read: R) -> Result<Protos, ProtoError>
    where
        R: Fn(&str) -> Result<Vec<u8>, String> + 'static,
    {
        compile::compile(files, read).map(|pool| Protos { pool })
    }

    /// Only the types that come with every set: protobuf's well-known types and `google.rpc`'s error details.
    pub fn builtin() -> Protos {
        let files: [String; 0] = [];
        compile::compile(&files, |name| {
            Err(format!("{name:?} is not one of the built-in files"))
        })
        .map(|pool| Protos { pool })
        .unwrap_or_else(|_| Protos {
            pool: DescriptorPool::global(),
        })
    }

    /// The compiled files as an encoded `FileDescriptorSet`, imports included (what `protoc --include_imports
    /// --descriptor_set_out` writes): how they travel to a process that has not the files.
    pub fn descriptor_set(&self) -> Vec<u8> {
        self.pool.encode_to_vec()
    }

    /// The files of an encoded `FileDescriptorSet`, as [`Protos::descriptor_set`] or protoc writes it.
    pub fn from_descriptor_set(bytes: &[u8]) -> Result<Protos, ProtoError> {
        DescriptorPool::decode(bytes)
            .map(|pool| Protos { pool })
            .map_err(|e| ProtoError::Decode(format!("not a FileDescriptorSet: {e}")))
    }

    /// [`Protos::descriptor_set`] as base64 text, for a JSON or YAML document.
    pub fn descriptor_set_base64(&self) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(self.descriptor_set())
    }

    /// The files of a `FileDescriptorSet` written as base64 text.
    pub fn from_descriptor_set_base64(text: &str) -> Result<Protos, ProtoError> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| ProtoError::Decode(format!("not base64: {e}")))?;
        Protos::from_descriptor_set(&bytes)
    }

    /// The method written `/package.Service/Method`.
    pub fn method(&self, path: &str) -> Result<MethodDescriptor, ProtoError> {
        let (service, method) = path
            .trim_start_matches('/')
            .split_once('/')
            .ok_or_else(|| {
                ProtoError::NoMethod(format!(
                    "{path:?} is not a gRPC method such as /shop.Catalog/GetProduct"
                ))
            })?;
        let Some(s) = self.pool.get_service_by_name(service) else {
            let known: Vec<String> = self
                .pool
                .services()
                .map(|s| s.full_name().to_string())
                .collect();
            return Err(ProtoError::NoMethod(format!(
                "the .proto files define no service {service} (they define: {})",
                list_or_none(&known)
            )));
        };
        let found = s.methods().find(|m| m.name() == method);
        found.ok_or_else(|| {
            let known: Vec<String> = s.methods().map(|m| m.name().to_string()).collect();
            ProtoError::NoMethod(format!(
                "the service {service} has no method {method} (its methods: {})",
                list_or_none(&known)
            ))
        })
    }

    /// The message type of this full name, e.g. `shop.Product` (a leading `.` is allowed).
    pub fn message(&self, name: &str) -> Result<MessageDescriptor, ProtoError> {
        let name = name.trim_start_matches('.');
        self.pool.get_message_by_name(name).ok_or_else(|| {
            let mut known: Vec<String> = self
                .pool
                .all_messages()
                .filter(|m| !m.is_map_entry())
                .map(|m| m.full_name().to_string())
                .filter(|n| !n.starts_with("google."))
                .collect();
            known.sort();
            ProtoError::NoMessage(format!(
                "the .proto files define no message type {name} (they define: {})",
                list_or_none(&known)
            ))
        })
    }

    /// `json` as a message of type `desc`, encoded. Checked field by field first: the error names the type, the
    /// field (as a path below the message, e.g. `items[2].sku`) and what was wrong.
    pub fn encode(
        desc: &MessageDescriptor,
        json: &serde_json::Value,
    ) -> Result<Vec<u8>, ProtoError> {
        check::message(desc, json)?;
        Protos::encode_unchecked(desc, json)
    }

    /// `json` encoded as a message of type `desc` without the field-by-field check: for a message of a shape
    /// [`Protos::encode`] has checked, whose values alone differ (a request rendered from a template).
    pub fn encode_unchecked(
        desc: &MessageDescriptor,
        json: &serde_json::Value,
    ) -> Result<Vec<u8>, ProtoError> {
        let message = DynamicMessage::deserialize(desc.clone(), json).map_err(|e| FieldError {
            path: String::new(),
            why: format!("{}: {e}", desc.full_name()),
        })?;
        Ok(message.encode_to_vec())
    }

    /// `bytes`, a message of type `desc`, as JSON text with the field names of the `.proto` file, in its order
    /// (fields at their default left out, 64-bit integers as strings, as protobuf's JSON mapping writes them).
    pub fn decode(desc: &MessageDescriptor, bytes: &[u8]) -> Result<String, ProtoError> {
        let message = DynamicMessage::decode(desc.clone(), bytes)
            .map_err(|e| ProtoError::Decode(format!("not a {}: {e}", desc.full_name())))?;
        let options = prost_reflect::SerializeOptions::new().use_proto_field_name(true);
        let mut out = serde_json::Serializer::new(Vec::new());
        message
            .serialize_with_options(&mut out, &options)
            .map_err(|e| ProtoError::Decode(format!("{}: {e}", desc.full_name())))?;
        String::from_utf8(out.into_inner()).map_err(|e| ProtoError::Decode(e.to_string()))
    }

    /// The `grpc-status-details-bin` value for a status with these details: a `google.rpc.Status` carrying
    /// `code`, `message` and each detail packed as `google.protobuf.Any`.
    pub fn status_details(code: i32, message: &str, details: &[(String, Vec<u8>)]) -> Vec<u8> {
        rpc::status(code, message, details)
    }

    /// [`Protos::status_details`] as a `-bin` metadata value carries it: base64 without padding.
    pub fn status_details_base64(
        code: i32,
        message: &str,
        details: &[(String, Vec<u8>)],
    ) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(rpc::status(code, message, details))
    }
}

/// `items` joined with commas, or "none".
fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests;
