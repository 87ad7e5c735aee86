//! HTTP/1.1's part of the request pipeline, loadgen's hot path: templates compiled to wire bytes (`compile`),
//! sending lanes that each own one keep-alive connection (`lanes`), and loadgen's own client on `httparse`
//! (`client`, `conn`, `held`, `response`) behind the [`Transport`] the lanes ask of it.
//!
//! Not for HTTP/2 or gRPC (`http2`), nor for when arrivals go out (`dispatch`).

pub(crate) mod client;
pub(crate) mod compile;
mod conn;
mod held;
pub(crate) mod lanes;
mod response;
pub(crate) mod transport;

pub(crate) use client::HttpTransport;
pub(crate) use compile::{replayed, Mix};
pub(crate) use lanes::{Exchanges, Lanes};
pub(crate) use transport::Transport;
