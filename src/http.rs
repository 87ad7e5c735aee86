//! The runner's own HTTP calls (breaker scrapes, a command SUT's readiness, the Pushgateway, an external faultd's
//! control API): reqwest over rustls on the `ring` provider, trusting the system's roots.
//!
//! reqwest's rustls backend without aws-lc-rs needs either a process-wide default provider or a finished
//! configuration; this hands it the configuration, so no library in the process installs global state. Not for the
//! load (loadgen has its own client) nor for the demo's calls to its dependency (the demo builds its own).

use std::sync::Arc;

/// A client builder with the runner's TLS; callers add their timeouts.
pub fn client_builder() -> reqwest::ClientBuilder {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    let builder = reqwest::Client::builder();
    match rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    {
        Ok(config) => builder
            .tls_backend_preconfigured(config.with_root_certificates(roots).with_no_client_auth()),
        // ring's provider supports the safe default versions; were it ever not to, the client refuses https://
        // when it is built rather than a whole run failing here.
        Err(_) => builder,
    }
}
