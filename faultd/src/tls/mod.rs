//! TLS around the data plane: a listener that terminates TLS before HTTP, and faults in the handshake itself.
//!
//! For: the `tls:` section of a configuration ([`TlsConfig`]), the per-run CA and the certificates the handshake
//! faults serve (`certs`), the per-connection handshake with its seeded faults (`acceptor`), the faults' list and
//! draw ([`faults`]), and what the handshakes recorded ([`record`]). Not for: HTTP (the data plane serves the
//! stream this hands back exactly as it serves a cleartext one) or the machine's trust store, which is never
//! touched: the run's CA lives in memory and is handed out as PEM ([`crate::Faultd::ca_pem`]) for the service
//! under test to trust explicitly.
//!
//! ```yaml
//! tls:
//!   client_ca: clients.pem          # optional: require client certificates signed by this CA (mTLS)
//!   faults: { delay: { p50: 20ms, p99: 400ms } }
//!   phases:                         # handshake faults per phase of the schedule, laid over `faults`
//!     bad-certs: { expired: 30%, failure: { share: 10%, alert: internal_error } }
//! phases:
//!   - { name: healthy, at: 0s }
//!   - { name: bad-certs, at: 10s, ramp: 5s }
//! ```
//!
//! The handshake faults of a phase sit under `tls.phases.<phase>` rather than in the phase itself, so the
//! schedule's phases keep their shape; the phase's start and ramp apply to them as to its routes.
//!
//! `tls: {}` mints a CA and a leaf for 127.0.0.1, ::1 and localhost at start; `tls: { cert, key }` serves PEM
//! files instead (then the certificate faults, which need the run's CA to sign with, are refused).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod faults;
pub mod record;

#[cfg(feature = "tls")]
mod acceptor;
#[cfg(feature = "tls")]
mod certs;

#[cfg(feature = "tls")]
pub use acceptor::Terminator;
pub use faults::{
    CompiledHandshake, HandshakeAction, HandshakeDecision, HandshakeFailure, HandshakeFaults,
};
pub use record::{HandshakeOutcome, TlsBucket, TlsRecorder, TlsRecording};

use crate::draw::{route_key, CallDraws};
use crate::invalid::Invalid;
use crate::phased::{PhaseTimes, Phased, Position};

/// The protocols the listener offers in ALPN, in order of preference.
pub const ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];

/// A configuration's `tls:` section: TLS on the data plane.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain (PEM), leaf first. With `key`; without both, faultd mints a CA and a leaf for
    /// 127.0.0.1, ::1 and localhost for the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// The private key of `cert` (PEM: PKCS#8, PKCS#1 or SEC1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// Require a client certificate signed by a CA in this PEM file (mTLS); a client without one is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
    /// The handshake faults before any phase (and what `healthy` phases return to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<HandshakeFaults>,
    /// Handshake faults by phase name, laid over `faults` from the phase's start (its ramp applies).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phases: BTreeMap<String, HandshakeFaults>,
}

impl TlsConfig {
    /// True when faultd mints the run's CA and leaf (no `cert` given): the CA is then what a client must trust.
    pub fn mints_ca(&self) -> bool {
        self.cert.is_none()
    }

    /// Checks the fields that can be checked without reading files: `cert` and `key` together, the faults, and
    /// that certificate faults have the run's CA to sign with. Fields are named relative to `tls`.
    pub fn validate(&self) -> Result<(), Invalid> {
        match (&self.cert, &self.key) {
            (Some(_), None) => return Err(Invalid::new("key", "give key with cert")),
            (None, Some(_)) => return Err(Invalid::new("cert", "give cert with key")),
            _ => {}
        }
        let base = self.faults.clone().unwrap_or_default();
        base.validate().map_err(|e| e.at("faults"))?;
        self.check_minted(&base).map_err(|e| e.at("faults"))?;
        for (name, set) in &self.phases {
            let at = |e: Invalid| e.at(&format!("phases.{name}"));
            let merged = set.over(&base);
            merged.validate().map_err(at)?;
            self.check_minted(&merged).map_err(at)?;
        }
        Ok(())
    }

    /// Checks that every phase named under `phases` exists in the schedule, whose phases are `schedule`.
    pub fn check_phase_names(&self, schedule: &[&str]) -> Result<(), Invalid> {
        for name in self.phases.keys() {
            if !schedule.contains(&name.as_str()) {
                return Err(Invalid::new(
                    format!("phases.{name}"),
                    format!("no phase named {name:?} (phases: {})", schedule.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// Refuses certificate faults when the certificate comes from files: faultd has no key of their CA to sign
    /// an expired or misnamed certificate with, and one from another issuer would fail as untrusted instead.
    pub fn check_minted(&self, faults: &HandshakeFaults) -> Result<(), Invalid> {
        if self.cert.is_some() {
            if let Some(name) = faults.needs_minted_certificates() {
                return Err(Invalid::new(
                    name,
                    "this fault serves a certificate signed by the run's CA, so it needs `tls: {}` (a minted CA) \
                     rather than cert and key files",
                ));
            }
        }
        Ok(())
    }
}

/// The handshake faults of every phase, compiled: what the accept path looks up per connection. Part of the
/// schedule's plan, so it changes with the configuration and follows the same clock.
#[derive(Debug)]
pub struct TlsPlan {
    /// The faults before the first phase, and those in force once each phase began.
    faults: Phased<Arc<CompiledHandshake>>,
    /// The key of the handshakes' seeded draws.
    pub key: u64,
    /// Connections accepted under this plan: the draw number of the next one.
    pub connections: AtomicU64,
}

impl TlsPlan {
    /// Compiles the faults of a `tls:` section (none: no faults) over the schedule's `phases`.
    pub fn compile(tls: Option<&TlsConfig>, phases: &[PhaseTimes<'_>]) -> Result<TlsPlan, Invalid> {
        let tls = tls.cloned().unwrap_or_default();
        let base_faults = tls.faults.clone().unwrap_or_default();
        let base =
            Arc::new(CompiledHandshake::compile(&base_faults).map_err(|e| e.at("tls.faults"))?);
        let mut faults = Phased::new(base);
        for &(name, at, ramp) in phases {
            let set = match tls.phases.get(name) {
                Some(set) => Some(Arc::new(
                    CompiledHandshake::compile(&set.over(&base_faults))
                        .map_err(|e| e.at(&format!("tls.phases.{name}")))?,
                )),
                None => None,
            };
            faults.push(at, ramp, set);
        }
        Ok(TlsPlan {
            faults,
            key: route_key("tls:data"),
            connections: AtomicU64::new(0),
        })
    }

    /// The faults at a position of the schedule (`None`: reset to healthy): `(from, to, weight)`.
    pub fn resolve(
        &self,
        position: Option<Position>,
    ) -> (Option<Arc<CompiledHandshake>>, Arc<CompiledHandshake>, f64) {
        let at = self.faults.at(position);
        (at.from.cloned(), at.to.clone(), at.weight)
    }

    /// The fault of the next connection accepted at `position`, drawn with the run's `seed`.
    pub fn draw(&self, position: Option<Position>, seed: u64) -> HandshakeDecision {
        let (from, to, weight) = self.resolve(position);
        let n = self
            .connections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        faults::decide(
            from.as_deref(),
            &to,
            weight,
            CallDraws::new(seed, self.key, n),
        )
    }
}

/// What one handshake needs from the listener it runs under: its limits, its clocks and the schedule's draw.
pub struct HandshakeContext<'a> {
    /// How long a client may take to send its hello, and again to finish after faultd answers it.
    pub header_timeout: std::time::Duration,
    /// The waker of precise delays; tokio's timer without one.
    pub deadlines: Option<&'a crate::deadlines::Deadlines>,
    /// Draws the connection's fault from the schedule in force now; called once, when the hello is in, so a
    /// client that sends none takes no draw.
    pub draw: &'a (dyn Fn() -> HandshakeDecision + Sync),
    /// The recording time of an instant (the data plane's recorder's clock), for the handshake's bucket.
    pub time_ns: &'a (dyn Fn(tokio::time::Instant) -> u64 + Sync),
}

/// Why TLS could not be set up at start: a file that is missing, unreadable, not PEM, or a key that does not
/// match its certificate. Bad input (exit 2 in the binary).
#[derive(Debug, thiserror::Error)]
pub struct TlsSetupError {
    /// The configuration field (`cert`, `key`, `client_ca`).
    pub field: &'static str,
    /// The file as given.
    pub file: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for TlsSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.field.is_empty() {
            write!(f, "tls.{}: ", self.field)?;
        }
        if !self.file.is_empty() {
            write!(f, "{}: ", self.file)?;
        }
        write!(f, "{}", self.message)
    }
}

/// The client side of TLS for proxy mode's `https://` upstreams: verified against the CAs of `ca` (PEM), or the
/// system's roots. An error names the file and what is wrong with it.
#[cfg(feature = "tls")]
pub(crate) fn upstream_client_config(
    ca: Option<&std::path::Path>,
) -> Result<rustls::ClientConfig, String> {
    let roots = match ca {
        Some(path) => {
            certs::read_roots("ca", path).map_err(|e| format!("{}: {}", e.file, e.message))?
        }
        None => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            roots
        }
    };
    Ok(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

#[cfg(not(feature = "tls"))]
/// Stands in for the TLS terminator in a build without the `tls` feature: a configuration with `tls:` is refused.
#[derive(Debug)]
pub struct Terminator {
    _never: std::convert::Infallible,
}

#[cfg(not(feature = "tls"))]
impl Terminator {
    /// Always refuses: this faultd was built without TLS.
    pub fn new(
        _config: &TlsConfig,
        _bucket: std::time::Duration,
    ) -> Result<Terminator, TlsSetupError> {
        Err(TlsSetupError {
            field: "",
            file: String::new(),
            message: "this faultd was built without the `tls` feature".into(),
        })
    }

    /// The run's CA; never reached.
    pub fn ca_pem(&self) -> Option<&str> {
        match self._never {}
    }

    /// The recorder; never reached.
    pub fn recorder(&self) -> &TlsRecorder {
        match self._never {}
    }

    /// The handshake; never reached.
    pub(crate) async fn accept<IO>(
        &self,
        _io: IO,
        _tcp: &tokio::net::TcpStream,
        _context: &HandshakeContext<'_>,
    ) -> Option<(IO, bool)> {
        match self._never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::draw::CallDraws;
    use std::time::Duration;

    #[test]
    fn phase_faults_follow_the_schedule_and_ramp_from_the_previous_phase() {
        let config = Config::from_yaml(
            "routes:\n  any: { path: /** }\n\
             phases:\n  - { name: healthy, at: 0s }\n  - { name: bad, at: 10s, ramp: 10s }\n  - { name: calm, at: 30s }\n\
             tls: { faults: { delay: { fixed: 10ms } }, phases: { bad: { expired: 80% } } }\n",
            "t.yaml",
        )
        .unwrap();
        let plan = crate::schedule::Plan::compile(
            config,
            1,
            &crate::recorder::Recorder::new(Duration::from_millis(100)),
        )
        .unwrap();
        let at = |s: u64| {
            plan.tls
                .resolve(Some(plan.position(Duration::from_secs(s))))
        };
        let expired_share = |s: u64| {
            let (from, to, w) = at(s);
            (0..20_000)
                .filter(|&n| {
                    faults::decide(from.as_deref(), &to, w, CallDraws::new(1, 2, n)).action
                        == HandshakeAction::Expired
                })
                .count() as f64
                / 20_000.0
        };
        assert_eq!(expired_share(5), 0.0);
        assert!(
            (expired_share(15) - 0.4).abs() < 0.03,
            "{}",
            expired_share(15)
        );
        assert!((expired_share(25) - 0.8).abs() < 0.03);
        // A phase that does not name tls keeps what the previous one set; the base delay stays throughout.
        assert!((expired_share(35) - 0.8).abs() < 0.03);
        let (_, to, _) = at(35);
        assert_eq!(
            to.faults.delay,
            Some(crate::behaviours::Latency::fixed(Duration::from_millis(10)))
        );
        // Reset to healthy: the base faults only.
        let (_, base, _) = plan.tls.resolve(None);
        assert_eq!(base.faults.expired, None);
    }
}
