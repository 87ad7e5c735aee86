//! The demo's `dns:` section: the DNS server its HTTP dependency's name is resolved through, and how long a stale
//! answer may serve. Not for resolving (`layers::resolve`).

use std::net::SocketAddr;

use faultline_units::Dur;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The demo's `dns:` section: resolve the dependency's host through this server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveConfig {
    /// The DNS server (`host:port`, UDP), e.g. faultd's resolver: `"{faultd.dns}"`.
    pub resolver: String,
    /// The name to call the dependency by, in place of the dependency URL's host (whose port and path are kept),
    /// e.g. `pricing.internal`. Without it, the URL's own host is the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// How long the last answer is still served after its TTL when resolution fails.
    #[serde(default = "stale_for")]
    pub stale_for: Dur,
    /// How long one query waits for its answer.
    #[serde(default = "query_timeout")]
    pub timeout: Dur,
}

fn stale_for() -> Dur {
    Dur::from_millis(60_000)
}

fn query_timeout() -> Dur {
    Dur::from_millis(1_000)
}

impl ResolveConfig {
    /// The server's address, or why it is not one.
    pub fn server(&self) -> Result<SocketAddr, String> {
        self.resolver.trim().parse().map_err(|_| {
            format!(
                "{:?} is not an address such as 127.0.0.1:5300",
                self.resolver
            )
        })
    }

    /// Multiplies every duration by `factor`.
    pub fn scale_time(&mut self, factor: f64) {
        self.stale_for = self.stale_for.scaled(factor);
        self.timeout = self.timeout.scaled(factor);
    }
}
