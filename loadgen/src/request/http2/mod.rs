//! HTTP/2's and gRPC's part of the request pipeline, on hyper's `h2` client: templates compiled to a head, a body
//! and a deadline (`compile`, with gRPC messages in `grpc_message`), a stream per call on a few connections
//! (`streams`), and each answer read and classified (`answer`).
//!
//! h2 directly rather than hyper's client, because a stream limit must be seen (the server's
//! SETTINGS_MAX_CONCURRENT_STREAMS) to count an arrival `dropped` instead of queueing it unseen, and a
//! RST_STREAM's code must be read.
//!
//! Not for HTTP/1.1, whose hot path (`http1`) this leaves untouched.

mod answer;
pub(crate) mod compile;
mod grpc_message;
pub(crate) mod streams;

pub(crate) use compile::Mix;
pub(crate) use streams::Streams;
