//! The demo's integration tests in one test binary: one build and one link instead of one per file.

mod common;

mod cli;
mod e2e_faultd;
mod grpc;
mod https;
mod propagation;
mod resolve;
mod service;
