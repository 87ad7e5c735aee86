//! Why faultd could not start, or why a change asked of it at run time was refused.
//!
//! For: the one error type of faultd's library API and of its control functions. Not for: what is wrong inside a
//! configuration (that is [`ConfigError`], which this wraps).

use std::net::SocketAddr;

use crate::config::ConfigError;

/// Why faultd could not start or a run-time change was refused.
#[derive(Debug, thiserror::Error)]
pub enum FaultdError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// A TLS certificate, key or CA file is missing, unreadable, not PEM, or does not match.
    #[error(transparent)]
    Tls(crate::tls::TlsSetupError),
    /// The run's CA could not be written where it was asked.
    #[error("cannot write the run's CA to {}: {source}", path.display())]
    WriteCa {
        /// The path asked for.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// No route has this name.
    #[error("no route named {0:?}")]
    UnknownRoute(String),
    /// A TCP route of the configuration could not be created (its listen address taken, say).
    #[error("TCP route {route:?}: {source}")]
    TcpRoute {
        /// The route.
        route: String,
        /// Why.
        source: crate::tcp::TcpError,
    },
}
