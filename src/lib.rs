//! faultline: the runner. It reads a scenario, starts faultd, the SUT and loadgen on one clock, observes the SUT's
//! breakers, and judges the recordings against the scenario's expectations.
//!
//! The components are libraries of their own (`faultd`, `loadgen`, `demo`); this crate only talks to them through
//! their public APIs. Data flows one way: scenario -> components -> recordings -> verdict -> reports.

pub mod agents;
pub mod breaker;
pub mod commands;
pub mod correlate;
pub mod expect;
pub mod http;
pub mod import;
pub mod k8s;
pub mod metrics;
pub mod observe;
pub mod output;
pub mod record;
pub mod report;
pub mod run;
pub mod scenario;
pub mod size;
pub mod sweep;
