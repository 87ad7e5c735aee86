//! gRPC errors: a share of gRPC calls answered with a status, its message, trailing metadata (such as a retry
//! pushback) and the details of gRPC's richer error model (`google.rpc.RetryInfo`, ...), in the trailers as gRPC
//! servers send them.
//!
//! For: the `grpc_errors` list of a behaviour, each entry with its share. A plain HTTP call taken by one gets
//! the HTTP status gRPC gateways map the code to (UNAVAILABLE -> 503, RESOURCE_EXHAUSTED -> 429, ...).
//! Not for: HTTP statuses on gRPC calls (`errors` does that, and gRPC clients map them themselves).

use std::collections::BTreeMap;

use faultline_units::{GrpcCode, Share};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{check_headers, CallAction, Fault, Invalid};

/// Answers `share` of the calls with gRPC status `code`, e.g.
/// `{share: 30%, code: UNAVAILABLE, message: overloaded, metadata: {grpc-retry-pushback-ms: "500"}}`, with
/// details: `details: [{type: google.rpc.RetryInfo, json: {retry_delay: 1.5s}}]`, or a stream that breaks after 3
/// messages: `{share: 10%, code: UNAVAILABLE, after_messages: 3}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcError {
    /// The share of calls answered with this status, e.g. `30%`.
    pub share: Share,
    /// The status: a name (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL, INVALID_ARGUMENT, ...)
    /// or a number.
    pub code: GrpcCode,
    /// The status message (`grpc-message`); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Trailing metadata sent with the status, e.g. `{grpc-retry-pushback-ms: "500"}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// For a streaming method: the status comes after this many of the healthy answer's messages (sent at its
    /// `stream.interval`), as a stream that breaks partway; 0 (the default) answers with the status alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub after_messages: u32,
    /// Details of gRPC's richer error model, sent in `grpc-status-details-bin` as a `google.rpc.Status` holding
    /// the code, the message and each detail, e.g. `[{type: google.rpc.RetryInfo, json: {retry_delay: 1.5s}}]`.
    /// The `google.rpc` error details (RetryInfo, ErrorInfo, QuotaFailure, BadRequest, ...) come built in; a type
    /// of the team's own is defined by `proto`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<GrpcDetail>,
    /// The `.proto` files that define the details' own types: read as a `grpc_response`'s are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proto: Vec<String>,
    /// The details encoded (one per detail) and the `grpc-status-details-bin` value, once the files are read.
    #[serde(skip)]
    #[schemars(skip)]
    encoded: Option<(Vec<Vec<u8>>, String)>,
}

/// One detail of a gRPC error: its message type and the message, as JSON or as hex, e.g.
/// `{type: google.rpc.ErrorInfo, json: {reason: STOCKOUT, domain: shop.example}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcDetail {
    /// The message type's full name, e.g. `google.rpc.RetryInfo`.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The message in protobuf's JSON mapping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<serde_json::Value>,
    /// The message's bytes as hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hex: Option<String>,
}

impl GrpcError {
    /// Encodes the details, reading the `.proto` files their types need through `files`: done once, before the
    /// configuration is served.
    pub fn read_files(&mut self, files: &crate::files::Files) -> Result<(), Invalid> {
        if self.details.is_empty() || self.encoded.is_some() {
            return Ok(());
        }
        let protos = if self.proto.is_empty() {
            faultline_proto::Protos::builtin()
        } else {
            let reader = files.clone();
            faultline_proto::Protos::compile(&self.proto, move |f| reader.read(f))
                .map_err(|e| Invalid::new("proto", e.to_string()))?
        };
        let mut encoded = Vec::with_capacity(self.details.len());
        for (i, d) in self.details.iter().enumerate() {
            let at = |more: &str| format!("details[{i}]{more}");
            let bytes = match (&d.json, &d.hex) {
                (Some(json), None) => {
                    let desc = protos
                        .message(&d.type_name)
                        .map_err(|e| Invalid::new(at(".type"), e.to_string()))?;
                    faultline_proto::Protos::encode(&desc, json).map_err(|e| match e {
                        faultline_proto::ProtoError::Field(f) if !f.path.is_empty() => {
                            let sep = if f.path.starts_with('[') { "" } else { "." };
                            Invalid::new(at(&format!(".json{sep}{}", f.path)), f.why)
                        }
                        other => Invalid::new(at(".json"), other.to_string()),
                    })?
                }
                (None, Some(hex)) => faultline_units::decode_hex(hex)
                    .map_err(|why| Invalid::new(at(".hex"), why))?,
                _ => return Err(Invalid::new(at(""), "give the detail as `json` or as `hex`, one of them")),
            };
            encoded.push(bytes);
        }
        let typed: Vec<(String, Vec<u8>)> = self
            .details
            .iter()
            .map(|d| d.type_name.trim_start_matches('.').to_string())
            .zip(encoded.iter().cloned())
            .collect();
        let header = faultline_proto::Protos::status_details_base64(
            i32::from(self.code.number()),
            self.message.as_deref().unwrap_or(""),
            &typed,
        );
        self.encoded = Some((encoded, header));
        Ok(())
    }

    /// Whether details are given but not encoded yet (their files not read).
    pub fn unread(&self) -> bool {
        !self.details.is_empty() && self.encoded.is_none()
    }

    /// The `grpc-status-details-bin` value (base64), when the error has details.
    pub fn status_details(&self) -> Option<&str> {
        self.encoded.as_ref().map(|(_, h)| h.as_str())
    }

    /// The same error with its details written as hex, for a faultd that cannot read the `.proto` files.
    pub fn inlined(&self) -> GrpcError {
        let mut e = self.clone();
        if let Some((bytes, _)) = &self.encoded {
            for (d, b) in e.details.iter_mut().zip(bytes) {
                d.json = None;
                d.hex = Some(b.iter().map(|b| format!("{b:02x}")).collect());
            }
            e.proto.clear();
        }
        e
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Fault for GrpcError {
    const TAKES_A_SHARE: bool = true;

    fn share(&self) -> Share {
        self.share
    }

    fn action(&self) -> CallAction<'_> {
        CallAction::GrpcError(self)
    }

    /// Refuses OK (the healthy answer is `grpc_response`) and metadata that would overwrite the status.
    fn validate(&self) -> Result<(), Invalid> {
        if self.code == GrpcCode::OK {
            return Err(Invalid::new(
                "code",
                "OK is not an error; the healthy answer is `grpc_response`",
            ));
        }
        check_headers(&self.metadata).map_err(|e| e.at("metadata"))?;
        for name in self.metadata.keys() {
            if name.eq_ignore_ascii_case("grpc-status") || name.eq_ignore_ascii_case("grpc-message")
            {
                return Err(Invalid::new(
                    format!("metadata.{name}"),
                    "is set from `code` and `message`",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::Files;

    fn parse(json: serde_json::Value) -> GrpcError {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn details_written_as_json_become_the_status_details_trailer_and_inline_as_hex() {
        let written = serde_json::json!({"share": "100%", "code": "UNAVAILABLE", "message": "busy",
            "details": [{"type": "google.rpc.RetryInfo", "json": {"retry_delay": "1s"}}]});
        let mut e = parse(written.clone());
        assert!(e.unread());
        // The google.rpc types are built in: no file is read, even where none may be.
        e.read_files(&Files::Refused).unwrap();
        // RetryInfo { retry_delay: Duration { seconds: 1 } }: field 1 (2 bytes), holding field 1 = 1.
        let retry = vec![0x0a, 0x02, 0x08, 0x01];
        let expected = faultline_proto::Protos::status_details_base64(
            14,
            "busy",
            &[("google.rpc.RetryInfo".to_string(), retry)],
        );
        assert_eq!(e.status_details(), Some(expected.as_str()));
        let inline = serde_json::to_value(e.inlined()).unwrap();
        assert_eq!(
            inline["details"],
            serde_json::json!([{"type": "google.rpc.RetryInfo", "hex": "0a020801"}])
        );
        let mut again = parse(inline);
        again.read_files(&Files::Refused).unwrap();
        assert_eq!(again.status_details(), Some(expected.as_str()));
        // No details, no trailer.
        let mut plain = parse(serde_json::json!({"share": "1%", "code": "INTERNAL"}));
        plain.read_files(&Files::Refused).unwrap();
        assert_eq!(plain.status_details(), None);
    }

    #[test]
    fn a_detail_that_does_not_fit_its_type_names_the_field() {
        let cases = [
            (
                serde_json::json!({"type": "google.rpc.RetryInfo", "json": {"delay": "1s"}}),
                "details[0].json.delay",
                "google.rpc.RetryInfo has no field",
            ),
            (
                serde_json::json!({"type": "google.rpc.Nope", "json": {}}),
                "details[0].type",
                "no message type google.rpc.Nope",
            ),
            (
                serde_json::json!({"type": "google.rpc.RetryInfo", "json": {}, "hex": "00"}),
                "details[0]",
                "one of them",
            ),
        ];
        for (detail, field, words) in cases {
            let mut e = parse(serde_json::json!({"share": "1%", "code": "INTERNAL", "details": [detail]}));
            let why = e.read_files(&Files::Refused).unwrap_err();
            assert_eq!(why.field, field, "{why:?}");
            assert!(why.message.contains(words), "{why:?}");
        }
    }
}
