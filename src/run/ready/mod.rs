//! Whether a command SUT is ready, by whatever it offers (`scenario::Readiness`): an HTTP path answering 2xx, its
//! port accepting a connection, the gRPC health service answering SERVING, or a line of its output. One file per
//! kind; each attempt says what it saw, so that the error after the deadline names the kind and the last answer.
//!
//! Not for the waiting (`child::ChildSut::wait_ready` polls a probe until it passes, the deadline comes or the SUT
//! exits) nor for reading the output (`child` offers every line to a log probe's watch).

mod grpc;
mod http;
mod log;
mod tcp;

use std::sync::Arc;

use faultline_units::Dur;

pub use log::OutputWatch;

use crate::scenario::Readiness;

/// One kind of readiness, aimed at one started SUT.
pub enum Probe {
    Http(http::HttpProbe),
    Tcp(tcp::TcpProbe),
    Grpc(grpc::GrpcProbe),
    Log(Arc<OutputWatch>),
}

impl Probe {
    /// The probe of `readiness` for the SUT at `url` (its base URL); `Err` says why the URL cannot be probed.
    pub fn new(readiness: &Readiness, url: &str) -> Result<Probe, String> {
        Ok(match readiness {
            Readiness::Http(path) => Probe::Http(http::HttpProbe::new(format!("{url}{path}"))),
            Readiness::Tcp => Probe::Tcp(tcp::TcpProbe {
                address: address(url)?,
            }),
            Readiness::Grpc(service) => Probe::Grpc(grpc::GrpcProbe {
                address: address(url)?,
                service: service.clone(),
            }),
            Readiness::Log(pattern) => Probe::Log(Arc::new(OutputWatch::new(pattern.clone()))),
        })
    }

    /// The watch a log probe needs every output line offered to.
    pub fn output_watch(&self) -> Option<Arc<OutputWatch>> {
        match self {
            Probe::Log(watch) => Some(watch.clone()),
            _ => None,
        }
    }

    /// One attempt: `Err` says what the SUT answered instead, or why nothing answered.
    pub async fn attempt(&self) -> Result<(), String> {
        match self {
            Probe::Http(p) => p.attempt().await,
            Probe::Tcp(p) => p.attempt().await,
            Probe::Grpc(p) => p.attempt().await,
            Probe::Log(w) => w.attempt(),
        }
    }

    /// Why the SUT is not ready after `timeout`, naming the kind; `last` is what the last attempt saw.
    pub fn not_ready(&self, timeout: Dur, last: &str) -> String {
        let last = format!(" (last attempt: {last})");
        match self {
            Probe::Http(p) => format!("the SUT was not ready at {} within {timeout}{last}", p.url),
            Probe::Tcp(p) => format!(
                "the SUT's port {} did not accept a connection within {timeout}{last}",
                p.address
            ),
            Probe::Grpc(p) => format!(
                "the SUT's gRPC health check ({}) at {} did not answer SERVING within {timeout}{last}",
                p.subject(),
                p.address
            ),
            Probe::Log(w) => format!(
                "no line of the SUT's output matched `{}` within {timeout}",
                w.pattern()
            ),
        }
    }
}

/// `host:port` of a base URL, the port defaulting to the scheme's.
fn address(url: &str) -> Result<String, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| format!("{url:?} names no host"))?;
    let port = parsed
        .port_or_known_default()
        .ok_or_else(|| format!("{url:?} names no port"))?;
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests;
