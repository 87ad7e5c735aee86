//! HTTPS to the service under test: the client side of TLS for loadgen's own HTTP/1.1 client and for its HTTP/2
//! and gRPC client (`request::http2`), which asks for `h2` by ALPN.
//!
//! For: which CA to trust (`load.tls.ca`, `--ca FILE`; or nothing at all with `--insecure`, by that name only),
//! the handshake on a new connection (with session resumption across the run's connections, rustls' in-memory
//! cache shared by one client configuration), the reason a handshake failed (kept per reason in the recording's
//! `connect_errors`), and how many handshakes the run made. Not for: HTTP, which `request::http1` speaks the same over
//! either kind of [`Stream`].
//!
//! A connection is an enum, not a boxed trait object: the cleartext path pays one predictable branch per read and
//! write and no indirect call, and a TLS connection's larger state is boxed once per connection, not per read.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::LoadError;

/// `load.tls`: how an `https://` target is trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsSpec {
    /// Trust the CAs of this PEM file (such as the run's CA that faultd writes) instead of the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// Accept any certificate, unverified. Only for a target whose certificate cannot be trusted otherwise; the
    /// recording still counts every handshake.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
}

/// The handshakes of a run, in the recording's `tls` field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsCounts {
    /// Handshakes completed in full.
    pub handshakes: u64,
    /// Handshakes completed by resuming an earlier session (cheaper: no certificate, fewer round trips).
    pub resumed: u64,
    /// Handshakes that failed (each also a `connect_error`, with its reason in `connect_errors`).
    pub failed: u64,
}

/// Counted by the connecting lanes, read once by the recording.
#[derive(Debug, Default)]
pub(crate) struct TlsCounters {
    handshakes: AtomicU64,
    resumed: AtomicU64,
    failed: AtomicU64,
}

impl TlsCounters {
    pub(crate) fn snapshot(&self) -> TlsCounts {
        TlsCounts {
            handshakes: self.handshakes.load(Ordering::Relaxed),
            resumed: self.resumed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// One connection to the target, cleartext or TLS.
pub(crate) enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// The protocol ALPN chose on a TLS connection; `None` in cleartext or when the server chose none.
    pub(crate) fn alpn(&self) -> Option<&[u8]> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(s) => s.get_ref().1.alpn_protocol(),
        }
    }
}

impl AsyncRead for Stream {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The TLS side of a transport: one client configuration (and so one session cache) for the whole run.
pub(crate) struct TlsClient {
    connector: TlsConnector,
    name: ServerName<'static>,
    pub(crate) counters: Arc<TlsCounters>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The CAs of a PEM file.
fn read_roots(path: &Path) -> Result<RootCertStore, LoadError> {
    let bad = |why: String| LoadError::InvalidSpec {
        field: "load.tls.ca".into(),
        why: format!("{}: {why}", path.display()),
    };
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert.map_err(|e| bad(format!("not a PEM certificate file: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("holds no PEM CERTIFICATE block".into()));
    }
    Ok(roots)
}

/// The system's roots, from the usual PEM bundle locations (Debian's, Fedora's, Alpine's); empty when none.
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for path in [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/cert.pem",
    ] {
        if let Ok(bytes) = std::fs::read(path) {
            for cert in CertificateDer::pem_slice_iter(&bytes).flatten() {
                let _ = roots.add(cert);
            }
            if !roots.is_empty() {
                break;
            }
        }
    }
    roots
}

impl TlsClient {
    /// A client for `host` trusting what `spec` says, offering `alpn` (`http/1.1` for loadgen's own client, `h2`
    /// for the HTTP/2 and gRPC one).
    pub(crate) fn new(spec: &TlsSpec, host: &str, alpn: &[u8]) -> Result<TlsClient, LoadError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| LoadError::InvalidOptions(format!("TLS: {e}")))?;
        let mut config = if spec.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unverified(provider())))
                .with_no_client_auth()
        } else {
            let roots = match &spec.ca {
                Some(path) => read_roots(path)?,
                None => system_roots(),
            };
            builder.with_root_certificates(roots).with_no_client_auth()
        };
        // One protocol: a server that cannot speak it fails the handshake (no_application_protocol) instead of
        // answering in a protocol the client would misread.
        config.alpn_protocols = vec![alpn.to_vec()];
        let name = ServerName::try_from(host.to_string()).map_err(|e| LoadError::BadUrl {
            url: host.to_string(),
            why: format!("not a name TLS can verify: {e}"),
        })?;
        Ok(TlsClient {
            connector: TlsConnector::from(Arc::new(config)),
            name,
            counters: Arc::default(),
        })
    }

    /// The handshake on a new TCP connection; an error carries the reason kept in `connect_errors`.
    pub(crate) async fn handshake(&self, tcp: TcpStream) -> Result<Stream, String> {
        match self.connector.connect(self.name.clone(), tcp).await {
            Ok(stream) => {
                let counter = if stream.get_ref().1.handshake_kind()
                    == Some(rustls::HandshakeKind::Resumed)
                {
                    &self.counters.resumed
                } else {
                    &self.counters.handshakes
                };
                counter.fetch_add(1, Ordering::Relaxed);
                Ok(Stream::Tls(Box::new(stream)))
            }
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                Err(handshake_reason(&e))
            }
        }
    }
}

/// A short, stable reason for a failed handshake, one key of `connect_errors` per kind of failure.
pub(crate) fn handshake_reason(e: &io::Error) -> String {
    use rustls::CertificateError as C;
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(c)) => match c {
            C::Expired | C::ExpiredContext { .. } => "tls: certificate expired".into(),
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                "tls: certificate for another name".into()
            }
            C::UnknownIssuer => "tls: unknown issuer".into(),
            other => format!("tls: bad certificate ({other:?})"),
        },
        Some(rustls::Error::AlertReceived(alert)) => format!("tls: alert {alert:?}"),
        Some(other) => format!("tls: {other}"),
        None => match e.kind() {
            io::ErrorKind::UnexpectedEof => "tls: closed during the handshake".into(),
            io::ErrorKind::ConnectionReset => "tls: reset during the handshake".into(),
            _ => format!("tls: {e}"),
        },
    }
}

/// `--insecure`: accepts any certificate, but still checks that the server holds its key (the signatures), so
/// the handshake is a real one.
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
