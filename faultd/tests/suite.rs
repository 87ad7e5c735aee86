//! faultd's integration tests in one test binary: one build and one link instead of one per file, the files'
//! tests side by side. `held_call_memory` is a test binary of its own: it counts every heap byte the process holds.

mod common;
mod servers;
mod tcp;

mod config_errors;
mod config_limits;
mod control_api;
mod correlation;
mod data_plane;
mod dns;
mod dns_clients;
mod files;
mod grpc_clients;
mod hang;
mod http2;
mod http2_bad_input;
mod instances;
mod loops;
mod matched;
mod postgres_protocol;
mod real_postgres;
mod real_redis;
mod redis_route;
mod tcp_instances;
mod tcp_toxics;
mod threads;
mod timeouts;
mod tls_clients;
mod tls_config;
mod toxic_removal;
mod toxiproxy_api;
mod toxiproxy_clients;
mod toxiproxy_start;
mod unmatched;
