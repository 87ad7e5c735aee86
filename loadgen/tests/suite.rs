//! loadgen's integration tests in one test binary: one build and one link instead of one per file.

mod common;

mod cli;
mod grpc;
mod grpcio_sut;
mod https;
mod network;
