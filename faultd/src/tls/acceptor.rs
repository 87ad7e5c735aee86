//! The handshake: one accepted connection in, a TLS stream (or nothing) out, with the faults of the schedule.
//!
//! For: reading the client's hello (anything else closes the connection and is counted as `not_tls`), drawing
//! the connection's handshake fault with faultd's seeded draws, carrying it out (a delay before the answer, a
//! fatal alert, a bad certificate, a drop without close_notify), and counting how the handshake ended. Not for:
//! HTTP; the data plane serves the stream this returns as it serves a cleartext one.
//!
//! The alert of the `failure` fault is written as a raw TLS record on the socket, right after the hello: rustls
//! only sends the alerts its own errors call for, and a record of seven bytes is what any server that refuses a
//! hello sends.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::{Acceptor, WebPkiClientVerifier};
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};
use tokio_rustls::server::TlsStream;
use tokio_rustls::LazyConfigAcceptor;

use super::certs::{self, Identity};
use super::faults::HandshakeAction;
use super::record::{HandshakeOutcome, TlsRecorder};
use super::{HandshakeContext, TlsConfig, TlsSetupError, ALPN};
use crate::deadlines;
use crate::sockets::write_raw;

/// How long a refused or truncated connection may take to close after faultd is done with it.
const LINGER: Duration = Duration::from_millis(500);

/// TLS on the data plane: the listener's certificates and what its handshakes recorded.
#[derive(Debug)]
pub struct Terminator {
    ca_pem: Option<String>,
    serve: Arc<ServerConfig>,
    expired: Option<Arc<ServerConfig>>,
    wrong_name: Option<Arc<ServerConfig>>,
    untrusted: Option<Arc<ServerConfig>>,
    mtls: bool,
    recorder: TlsRecorder,
}

fn server_config(
    identity: Identity,
    client_roots: Option<&Arc<rustls::RootCertStore>>,
    cert_file: &str,
) -> Result<Arc<ServerConfig>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let setup = |field, message: String| TlsSetupError {
        field,
        file: cert_file.to_string(),
        message,
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| setup("", e.to_string()))?;
    let builder = match client_roots {
        Some(roots) => builder.with_client_cert_verifier(
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider)
                .build()
                .map_err(|e| setup("client_ca", e.to_string()))?,
        ),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(identity.chain, identity.key)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => setup(
                "key",
                "the key does not match the certificate's public key".into(),
            ),
            other => setup(
                "key",
                format!("cannot be used with the certificate: {other}"),
            ),
        })?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

impl Terminator {
    /// Reads or mints the certificates of `config` and builds the listener's TLS configurations. `bucket` is the
    /// recording step.
    pub fn new(config: &TlsConfig, bucket: Duration) -> Result<Terminator, TlsSetupError> {
        config.validate().map_err(|e| TlsSetupError {
            field: "",
            file: String::new(),
            message: format!("tls.{}: {}", e.field, e.message),
        })?;
        let client_roots = match &config.client_ca {
            Some(path) => Some(Arc::new(certs::read_roots("client_ca", path)?)),
            None => None,
        };
        let roots = client_roots.as_ref();
        Ok(match (&config.cert, &config.key) {
            (Some(cert), Some(key)) => {
                let file = key.display().to_string();
                Terminator {
                    ca_pem: None,
                    serve: server_config(certs::read_identity(cert, key)?, roots, &file)?,
                    expired: None,
                    wrong_name: None,
                    untrusted: None,
                    mtls: roots.is_some(),
                    recorder: TlsRecorder::new(bucket),
                }
            }
            _ => {
                let minted = certs::mint()?;
                let file = "(minted)";
                Terminator {
                    ca_pem: Some(minted.ca_pem),
                    serve: server_config(minted.good, roots, file)?,
                    expired: Some(server_config(minted.expired, roots, file)?),
                    wrong_name: Some(server_config(minted.wrong_name, roots, file)?),
                    untrusted: Some(server_config(minted.untrusted, roots, file)?),
                    mtls: roots.is_some(),
                    recorder: TlsRecorder::new(bucket),
                }
            }
        })
    }

    /// The run's CA as PEM, when faultd minted it (`tls: {}`); `None` with certificate files.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// What the handshakes recorded.
    pub fn recorder(&self) -> &TlsRecorder {
        &self.recorder
    }

    /// Runs the handshake of one accepted connection: `io` is the stream TLS reads and writes, `tcp` the same
    /// socket for what is written below TLS (an alert, a close). Returns the stream to serve HTTP on and whether
    /// ALPN chose HTTP/2 (`h2`) for it, or `None` when the connection is done (refused, truncated, not TLS, timed
    /// out).
    pub(crate) async fn accept<IO>(
        &self,
        io: IO,
        tcp: &TcpStream,
        context: &HandshakeContext<'_>,
    ) -> Option<(TlsStream<IO>, bool)>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        // A client may take the header timeout to send its hello, and again to finish after faultd answers it.
        let hello_by = Instant::now() + context.header_timeout;
        let mut lazy = LazyConfigAcceptor::new(Acceptor::default(), io);
        let start = match timeout_at(hello_by, &mut lazy).await {
            Ok(Ok(start)) => start,
            Ok(Err(_)) => {
                self.record(context, HandshakeOutcome::NotTls, false);
                return None;
            }
            Err(_) => {
                self.record(context, HandshakeOutcome::TimedOut, false);
                return None;
            }
        };
        // The connection's fault is drawn once its hello is in, so a client that sends none takes no draw.
        let decision = (context.draw)();
        let delayed = !decision.delay.is_zero();
        if delayed {
            deadlines::wait_until(context.deadlines, Instant::now() + decision.delay).await;
        }
        let (config, outcome) = match decision.action {
            HandshakeAction::Alert(code) => {
                drop(start);
                // Counted first: the caller may read the recording as soon as it has the alert.
                self.record(context, HandshakeOutcome::Alert, delayed);
                // A fatal alert record (type 21, TLS 1.2 record version, length 2, level 2 = fatal).
                // Written on the socket itself, under whatever TLS state there is.
                write_raw(tcp, &[21, 3, 3, 0, 2, 2, code]).await;
                close_below_tls(tcp).await;
                return None;
            }
            HandshakeAction::Expired => (self.expired.clone(), HandshakeOutcome::Expired),
            HandshakeAction::WrongName => (self.wrong_name.clone(), HandshakeOutcome::WrongName),
            HandshakeAction::Untrusted => (self.untrusted.clone(), HandshakeOutcome::Untrusted),
            HandshakeAction::Truncate => (None, HandshakeOutcome::Truncated),
            HandshakeAction::Serve => (None, HandshakeOutcome::Ok),
        };
        let config = config.unwrap_or_else(|| self.serve.clone());
        let done_by = Instant::now() + context.header_timeout;
        let mut stream = match timeout_at(done_by, start.into_stream(config)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                let outcome = match decision.action {
                    HandshakeAction::Serve | HandshakeAction::Truncate => self.classify(&e),
                    _ => outcome,
                };
                self.record(context, outcome, delayed);
                return None;
            }
            Err(_) => {
                self.record(context, HandshakeOutcome::TimedOut, delayed);
                return None;
            }
        };
        let resumed = stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
        let outcome = match outcome {
            HandshakeOutcome::Ok if resumed => HandshakeOutcome::Resumed,
            other => other,
        };
        self.record(context, outcome, delayed);
        if decision.action == HandshakeAction::Truncate {
            // Wait for the request, so the caller sees its request go unanswered rather than a refused
            // handshake, then close below TLS: a FIN with no close_notify before it.
            let mut sink = [0u8; 4096];
            let _ = timeout_at(done_by, stream.read(&mut sink)).await;
            drop(stream);
            close_below_tls(tcp).await;
            return None;
        }
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
        Some((stream, h2))
    }

    /// The outcome of a handshake that failed on its own (no fault): a refused client certificate, or any other
    /// failure.
    fn classify(&self, e: &io::Error) -> HandshakeOutcome {
        let rustls_error = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        match rustls_error {
            Some(rustls::Error::NoCertificatesPresented | rustls::Error::InvalidCertificate(_))
                if self.mtls =>
            {
                HandshakeOutcome::ClientRefused
            }
            _ => HandshakeOutcome::Failed,
        }
    }

    fn record(&self, context: &HandshakeContext<'_>, outcome: HandshakeOutcome, delayed: bool) {
        self.recorder
            .record((context.time_ns)(Instant::now()), outcome, delayed);
    }
}

/// Sends a FIN and waits (bounded) for the caller to close, discarding what it sends meanwhile: closing a socket
/// with unread bytes sends an RST, which would turn a clean refusal or truncation into a reset.
async fn close_below_tls(tcp: &TcpStream) {
    let _ = socket2::SockRef::from(tcp).shutdown(std::net::Shutdown::Write);
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = [0u8; 1024];
        loop {
            if tcp.readable().await.is_err() {
                return;
            }
            match tcp.try_read(&mut sink) {
                Ok(0) => return,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(_) => return,
            }
        }
    })
    .await;
}
