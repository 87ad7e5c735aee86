//! `demo`: the reference service under test for faultline. An HTTP service whose every call to its dependency
//! goes through separate, composable layers (timeout, bulkhead, circuit breaker, retry budget, fallback), with the
//! seeds' classic mistakes as one switch each, so a scenario can show that the harness passes the right breaker
//! and fails the wrong one.
//!
//! The runner starts it in-process with [`start`]; the `demo` binary is thin wiring over the same call. Not a
//! general resilience library: the layers are shaped for this service's endpoints and its metric names.
//!
//! ```no_run
//! # async fn run() -> Result<(), demo::DemoError> {
//! let config = demo::DemoConfig::from_yaml("operations: { pricing: { timeout: 250ms } }", "demo.yaml")?;
//! let options = demo::Options { dependency_url: "http://127.0.0.1:9000".into(), ..Default::default() };
//! let demo = demo::start(config, options).await?;
//! println!("listening on {}", demo.addr());
//! demo.shutdown().await;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod admission;
pub mod breaker;
pub mod config;
pub mod context;
pub mod layers;
pub mod observe;
pub mod operation;
pub mod service;
pub mod settings;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;

/// How long the demo waits for a request head, and on a keep-alive connection for the next one.
const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

pub use breaker::BreakerState;
pub use config::{DemoConfig, Mistake, Operations, Protocol};
pub use observe::Transition;
pub use operation::Operation;
pub use settings::{
    BreakerConfig, Fallback, HedgeAfter, HedgeConfig, OperationConfig, RetryConfig,
};

/// Why the demo could not be configured or started.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A configuration file could not be read as YAML, or failed validation; the message carries the location.
    #[error("{file}: {message}")]
    Parse {
        /// The file (or the name given for an inline text).
        file: String,
        /// What is wrong, with line and column when known.
        message: String,
    },
    /// A configuration value is out of range; `field` is its path (`operations.pricing.breaker.window`).
    #[error("{field}: {message}")]
    Invalid {
        /// The field's path.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The dependency or webhook URL is not usable (not http:// or https://, no host).
    #[error("{what} {url:?} is not usable: {message}")]
    Url {
        /// Which URL (dependency or webhook).
        what: &'static str,
        /// The URL as given.
        url: String,
        /// Why it is refused.
        message: String,
    },
    /// The listener could not be bound (port taken, bad address).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

impl DemoError {
    /// Whether the error is the user's input (exit code 2) rather than the run breaking (exit code 3).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            DemoError::Parse { .. } | DemoError::Invalid { .. } | DemoError::Url { .. }
        )
    }
}

/// Where the demo listens and what it calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The address to serve on; port 0 picks a free one (read it back with [`Demo::addr`]).
    pub listen: SocketAddr,
    /// The dependency's base URL, e.g. `http://127.0.0.1:9000` (faultd's data port), or `https://` for a
    /// dependency that speaks TLS.
    pub dependency_url: String,
    /// The CA certificates (PEM) an `https://` dependency is trusted through, such as the run's CA that faultd
    /// minted; the system's roots when `None`. Only these are trusted: the machine's trust store is never touched.
    pub dependency_ca: Option<String>,
    /// If set, each breaker transition is POSTed there as JSON.
    pub webhook: Option<String>,
}

impl Default for Options {
    /// Loopback on a free port, calling `http://127.0.0.1:9000`, no webhook.
    fn default() -> Self {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            dependency_url: "http://127.0.0.1:9000".into(),
            dependency_ca: None,
            webhook: None,
        }
    }
}

/// A running demo service.
pub struct Demo {
    addr: SocketAddr,
    app: Arc<service::App>,
    journal: Arc<observe::Journal>,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
    webhook: Option<JoinHandle<()>>,
}

/// How long open connections get to finish after shutdown is asked before they are cut (a call with the
/// `no_timeout` mistake may otherwise hold one forever).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// The listen backlog: tokio's default of 1,024 drops connects in bursts at the rates scenarios use.
const BACKLOG: i32 = 8_192;

fn check_url(what: &'static str, url: &str) -> Result<(), DemoError> {
    let bad = |message: &str| {
        Err(DemoError::Url {
            what,
            url: url.to_string(),
            message: message.to_string(),
        })
    };
    match reqwest::Url::parse(url) {
        Err(e) => bad(&e.to_string()),
        Ok(u) if u.scheme() != "http" && u.scheme() != "https" => {
            bad("only http:// and https:// are supported")
        }
        Ok(u) if u.host().is_none() => bad("it has no host"),
        Ok(_) => Ok(()),
    }
}

fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, DemoError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let fail = |source| DemoError::Bind { addr, source };
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(fail)?;
    socket.set_reuse_address(true).map_err(fail)?;
    socket.set_nonblocking(true).map_err(fail)?;
    socket.bind(&addr.into()).map_err(fail)?;
    socket.listen(BACKLOG).map_err(fail)?;
    tokio::net::TcpListener::from_std(socket.into()).map_err(fail)
}

/// Validates `config`, binds the listener and starts serving. Returns once the service accepts connections.
pub async fn start(config: DemoConfig, options: Options) -> Result<Demo, DemoError> {
    config.validate()?;
    check_url("dependency URL", &options.dependency_url)?;
    if config.protocol == Protocol::Grpc && options.dependency_url.starts_with("https://") {
        return Err(DemoError::Url {
            what: "dependency URL",
            url: options.dependency_url.clone(),
            message: "the demo's gRPC calls speak HTTP/2 in cleartext only; use http://".into(),
        });
    }
    if let Some(url) = &options.webhook {
        check_url("webhook URL", url)?;
    }
    let client = layers::client::http_client(options.dependency_ca.as_deref())?;
    let metrics = Arc::new(observe::Metrics::new());
    let (webhook_tx, webhook) = match &options.webhook {
        Some(url) => {
            let (tx, task) = observe::spawn_webhook(url.clone(), client.clone());
            (Some(tx), Some(task))
        }
        None => (None, None),
    };
    let journal = Arc::new(observe::Journal::new(metrics, webhook_tx));
    let app = Arc::new(service::App::new(
        &config,
        client,
        &options.dependency_url,
        journal.clone(),
    )?);
    let listener = bind(options.listen)?;
    let addr = listener.local_addr().map_err(|source| DemoError::Bind {
        addr: options.listen,
        source,
    })?;
    let (stop, stopped) = watch::channel(false);
    let server = tokio::spawn(serve(listener, service::router(app.clone()), stopped));
    tracing::info!(target: "demo", %addr, dependency = %options.dependency_url, instances = config.instances,
        mistakes = ?config.mistakes.iter().map(|m| m.name()).collect::<Vec<_>>(), "demo listening");
    Ok(Demo {
        addr,
        app,
        journal,
        stop,
        server,
        webhook,
    })
}

/// Accepts connections until asked to stop; then lets open ones finish for [`SHUTDOWN_GRACE`] and cuts the rest,
/// so nothing the demo started outlives [`Demo::shutdown`].
async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    mut stopped: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let service = TowerToHyperService::new(router.clone());
                    let mut stop = stopped.clone();
                    connections.spawn(async move {
                        // hyper's head timer (30 s): a request head that stalls, or a keep-alive
                        // connection idle that long, is closed; a call in progress never is.
                        let conn = hyper::server::conn::http1::Builder::new()
                            .timer(hyper_util::rt::TokioTimer::new())
                            .header_read_timeout(HEADER_TIMEOUT)
                            .serve_connection(TokioIo::new(stream), service);
                        tokio::pin!(conn);
                        tokio::select! {
                            _ = conn.as_mut() => {}
                            _ = async { stop.wait_for(|s| *s).await.is_ok() } => {
                                conn.as_mut().graceful_shutdown();
                                let _ = conn.await;
                            }
                        }
                    });
                }
                // Out of file descriptors or a connection reset before accept: wait a little, keep serving.
                Err(e) => {
                    tracing::warn!(target: "demo", error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = async { stopped.wait_for(|s| *s).await.is_ok() } => break,
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

impl Demo {
    /// The address the demo serves on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every breaker transition so far, in order (one per observed breaker: see [`Transition`]).
    pub fn transitions(&self) -> Vec<Transition> {
        self.journal.transitions()
    }

    /// The state of the breaker guarding `op` on instance `instance` (None if not configured).
    pub fn breaker_state(&self, op: Operation, instance: usize) -> Option<BreakerState> {
        self.app.breaker_state(op, instance)
    }

    /// The `/metrics` page, without going through HTTP.
    pub fn metrics_text(&self) -> String {
        self.app.metrics().encode()
    }

    /// Stops accepting, gives open connections [`SHUTDOWN_GRACE`] to finish, cuts the rest, and flushes the
    /// webhook queue (for at most two seconds).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
        // The webhook task ends when the last sender (inside the journal) is dropped.
        drop(self.app);
        drop(self.journal);
        if let Some(mut task) = self.webhook {
            if tokio::time::timeout(Duration::from_secs(2), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}
