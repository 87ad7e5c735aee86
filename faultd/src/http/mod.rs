//! HTTP on the data plane: HTTP/1.1, HTTP/2 and gRPC on one port, and what every fault does to a call.
//!
//! For: the listener (accepting, shedding, the TLS handshake first when asked, HTTP/1.1 or HTTP/2 per
//! connection), one call from its route to its answer (`call`, then the one arm of `actions` its decision names),
//! the answers' bodies, HTTP/2's per-connection state and frames, gRPC framing, calls that match no route, and
//! how long a connection may carry no call. Not for: deciding a call's fate (`crate::behaviours`), the schedule
//! and its route table (`crate::schedule`, which the configuration compiles to), the handshake itself
//! (`crate::tls`) or TCP routes (`crate::tcp`).

mod actions;
mod body;
mod call;
pub mod grpc;
pub mod http2;
mod io;
mod listener;
mod shared;
mod takeover;
pub mod timeouts;
pub mod unmatched;

pub use listener::serve;
pub use shared::{InstanceOf, Shared};
