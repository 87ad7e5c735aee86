//! `google.rpc.Status`, the value of gRPC's `grpc-status-details-bin` trailer: a code, a message and details
//! packed as `google.protobuf.Any`.

use prost::Message;

/// `google.rpc.Status` (google/rpc/status.proto).
#[derive(Clone, PartialEq, Message)]
struct Status {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

/// The prefix gRPC's libraries give the type URL of a packed detail.
const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// The encoded status: `details` are (message type's full name, encoded message).
pub(crate) fn status(code: i32, message: &str, details: &[(String, Vec<u8>)]) -> Vec<u8> {
    Status {
        code,
        message: message.to_string(),
        details: details
            .iter()
            .map(|(name, value)| prost_types::Any {
                type_url: format!("{TYPE_URL_PREFIX}{name}"),
                value: value.clone(),
            })
            .collect(),
    }
    .encode_to_vec()
}
