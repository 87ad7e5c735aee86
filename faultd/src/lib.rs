//! faultd: a controllable fake HTTP dependency that also measures what reaches it.
//!
//! faultd answers the calls of a service under test with the behaviour its configuration gives each route
//! (latency distributions, error shares, hangs, resets, empty or malformed answers, slow bodies, proxying to a
//! real upstream), switches behaviour on a schedule of named phases (with ramps and count rules), and records
//! arrivals, completions and calls in flight per time bucket, exactly. That last part is what later proves "the
//! pool stayed under the limit" whatever the service claims.
//!
//! This crate is a library first: the `faultd` binary and the HTTP control API are thin wiring over [`start`]
//! and the methods of [`Faultd`]. It is not a load generator and does not judge results.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = faultd::Config::from_yaml(
//!     "routes:\n  pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }\n\
//!      phases:\n  - { name: healthy, at: 0s }\n  - { name: brownout, at: 10s, routes: { pricing: { latency: { fixed: 2s } } } }\n",
//!     "inline.yaml",
//! )?;
//! let faultd = faultd::start(config, faultd::Options::default()).await?;
//! faultd.start_schedule(tokio::time::Instant::now());
//! println!("calls go to http://{}/price/1", faultd.data_addr());
//! let recording = faultd.recording();
//! println!("most calls held at once: {}", recording.routes["pricing"].max_in_flight);
//! faultd.shutdown().await;
//! # Ok(()) }
//! ```

mod api_errors;
pub mod behaviours;
pub mod config;
pub mod control;
pub mod deadlines;
pub mod dns;
pub mod draw;
mod error;
mod exposition;
pub mod files;
pub mod http;
pub mod invalid;
pub mod limits;
pub mod loops;
pub mod phased;
pub mod recorder;
pub mod schedule;
pub mod sockets;
pub mod tally;
pub mod tcp;
pub mod tls;
pub mod toxiproxy;

/// HTTP's modules and the route table at the paths they had before `http/` and `schedule/` held them.
pub use http::{grpc, http2, timeouts, unmatched};
pub use schedule::routing;

/// The data plane at the path it had before `http/` held it: its listener's binding.
pub mod server {
    pub use crate::sockets::bind;
}

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use behaviours::Behaviour;
pub use config::{Config, ConfigError, Phase, PhaseRoute, Route, TcpEndpoint};
pub use error::FaultdError;
pub use faultline_units::Dur;
pub use files::Files;
pub use recorder::{
    ConnectionBucket, MatchCounts, MergeError, PhaseEntry, Recording, RouteBucket, RouteRecording,
    StatusClasses, UnmatchedPath,
};
pub use schedule::{BEFORE_FIRST_PHASE, HEALTHY_RESET};

use http::Shared;
use schedule::{Live, Plan};

/// Where faultd listens and how it limits itself.
#[derive(Debug, Clone)]
pub struct Options {
    /// The data plane's address (the one the service under test calls). Port 0 picks a free port.
    pub listen: SocketAddr,
    /// The control API's address; no control API when `None`.
    pub control: Option<SocketAddr>,
    /// A bearer token every control call must carry, if set.
    pub token: Option<String>,
    /// The most connections served at once; a connection over it is shed (503, `connection: close`) and counted
    /// in the recording's `connections[].shed`, so overload is visible instead of queued silently.
    pub max_connections: Option<usize>,
    /// The listen backlog (pending connects the kernel queues).
    pub backlog: u32,
    /// End delays at their instant with a timerfd ([`deadlines`]: sub-millisecond delay error instead of
    /// tokio's ~1-4 ms lateness, with no spinning). Turn off under paused tokio time, which only tokio's timer
    /// follows.
    pub precise_delays: bool,
    /// The Toxiproxy-compatible API's address ([`toxiproxy`]); none when `None`. Port 0 picks a free port.
    pub toxiproxy_api: Option<SocketAddr>,
    /// Hosts other than loopback a TCP route's upstream may name; loopback only when empty.
    pub allow_hosts: Vec<String>,
    /// Addresses other than loopback a proxy created through the Toxiproxy API (or [`tcp::TcpRoutes`]) may
    /// listen on, such as `0.0.0.0` in a container; loopback only when empty. A configuration's TCP routes stay on
    /// loopback.
    pub allow_listen: Vec<std::net::IpAddr>,
    /// Where to write the run's CA certificate (PEM) when the data plane speaks TLS with a minted CA
    /// (`tls: {}`), for the service under test to trust; the machine's trust store is never touched.
    pub ca_out: Option<std::path::PathBuf>,
    /// How long a connection to the data plane, the control API or the Toxiproxy API may carry no call (a slow
    /// request head, an idle keep-alive connection); TCP routes have none.
    pub timeouts: http::timeouts::Timeouts,
    /// The folder inside which a configuration sent to the control API may name files (a gRPC answer's
    /// `message_file`); with `None` it may name none and gives messages inline.
    pub files: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            control: None,
            token: None,
            max_connections: None,
            backlog: 8192,
            precise_delays: true,
            toxiproxy_api: None,
            allow_hosts: Vec::new(),
            allow_listen: Vec::new(),
            ca_out: None,
            timeouts: http::timeouts::Timeouts::default(),
            files: None,
        }
    }
}

/// A running faultd.
pub struct Faultd {
    shared: Arc<Shared>,
    tcp: Arc<tcp::TcpRoutes>,
    data_addr: SocketAddr,
    control_addr: Option<SocketAddr>,
    toxiproxy_addr: Option<SocketAddr>,
    dns_addr: Option<SocketAddr>,
    /// The listeners of each route served by instances, by route name, in instance order.
    instances: std::collections::BTreeMap<String, Vec<SocketAddr>>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// The schedule of the TCP routes' toxics, once started.
    tcp_schedule: std::sync::Mutex<Option<JoinHandle<()>>>,
}

/// The seed used when the configuration sets none: the clock's nanoseconds, so runs differ unless pinned.
fn fresh_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5EED)
}

/// Starts faultd: validates `config`, binds the data plane (at the configuration's `listen`, else
/// `options.listen`; and the control API if asked), and serves. The
/// schedule waits for [`Faultd::start_schedule`]; until then routes behave as at t = 0.
pub async fn start(config: Config, mut options: Options) -> Result<Faultd, FaultdError> {
    let recorder = Arc::new(recorder::Recorder::new(config.bucket()));
    let seed = config.seed.unwrap_or_else(fresh_seed);
    // Compiling the plan is validating the configuration, so it comes before anything is bound.
    let mut plan = Plan::compile(config, seed, &recorder)?;
    // A configuration that fixes the data plane's address wins over the caller's default; it is kept out of the
    // configuration in force, which the control API replaces at will while the address stays.
    if let Some(listen) = plan.config.listen_addr()? {
        options.listen = listen;
    }
    plan.config.listen = None;
    let config = &plan.config;
    let deadlines = options
        .precise_delays
        .then(deadlines::Deadlines::start)
        .flatten();
    // Every listener is bound before any upstream is checked: an upstream naming one of them (its port known
    // only now when 0 was asked for) would send faultd's calls back to itself.
    let data = bind(options.listen, options.backlog)?;
    // Each instance of a route listens on the data plane's host, on a port of its own.
    let mut instance_listeners = Vec::new();
    for (name, route) in config.http_routes() {
        for number in 1..=route.instances.unwrap_or(0) {
            let (listener, addr) = bind(SocketAddr::new(data.1.ip(), 0), options.backlog)?;
            let of = http::InstanceOf {
                route: name.clone(),
                number,
            };
            instance_listeners.push((listener, addr, of));
        }
    }
    let control = options.control.map(|a| bind(a, 1024)).transpose()?;
    let toxiproxy = options.toxiproxy_api.map(|a| bind(a, 1024)).transpose()?;
    let data_addr = data.1;
    let (control_addr, toxiproxy_addr) = (
        control.as_ref().map(|c| c.1),
        toxiproxy.as_ref().map(|t| t.1),
    );
    let tcp = Arc::new(tcp::TcpRoutes::new(tcp::TcpSettings {
        seed,
        allow_hosts: options.allow_hosts.clone(),
        allow_listen: options.allow_listen.clone(),
        backlog: options.backlog,
        bucket: config.bucket(),
        deadlines: deadlines.clone(),
        faultd_listeners: [Some(data_addr), control_addr, toxiproxy_addr]
            .into_iter()
            .flatten()
            .chain(instance_listeners.iter().map(|(_, a, _)| *a))
            .collect(),
    }));
    let tls = match &config.tls {
        Some(tls) => Some(Arc::new(
            tls::Terminator::new(tls, config.bucket()).map_err(FaultdError::Tls)?,
        )),
        None => None,
    };
    let tcp_instances = create_tcp_routes(config, &tcp)?;
    config.check_not_own(&tcp.own_listeners())?;
    let dns = match &config.dns {
        Some(dns) => Some(bind_dns(dns, &options, config.bucket())?),
        None => None,
    };
    let shared = Arc::new(Shared {
        live: std::sync::RwLock::new(Live::new(Arc::new(plan))),
        recorder,
        proxy: behaviours::proxy::proxy_client(),
        deadlines,
        tls,
        timeouts: options.timeouts,
        tcp: tcp.clone(),
        files: Files::for_control_api(options.files.as_deref()),
        dns: dns.as_ref().map(|(_, _, recorder)| recorder.clone()),
    });
    // Written once the port is ours, so a faultd that cannot listen leaves another's CA file alone.
    if let (Some(path), Some(ca)) = (
        &options.ca_out,
        shared.tls.as_ref().and_then(|t| t.ca_pem()),
    ) {
        std::fs::write(path, ca).map_err(|source| FaultdError::WriteCa {
            path: path.clone(),
            source,
        })?;
    }
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = vec![tokio::spawn(http::serve(
        data.0,
        shared.clone(),
        None,
        options.max_connections,
        shutdown_rx.clone(),
    ))];
    let mut instances = tcp_instances;
    for (listener, addr, of) in instance_listeners {
        instances.entry(of.route.clone()).or_default().push(addr);
        tasks.push(tokio::spawn(http::serve(
            listener,
            shared.clone(),
            Some(Arc::new(of)),
            options.max_connections,
            shutdown_rx.clone(),
        )));
    }
    let dns_addr = dns.and_then(|bound| serve_dns(bound, &shared, &mut tasks, &shutdown_rx));
    if let Some((listener, _)) = control {
        let router = control::router(shared.clone(), options.token.clone())
            .layer(axum::Extension(tcp.clone()));
        tasks.push(tokio::spawn(http::timeouts::serve_api(
            listener,
            router,
            options.timeouts,
            shutdown_rx.clone(),
        )));
    }
    if let Some((listener, _)) = toxiproxy {
        tasks.push(tokio::spawn(http::timeouts::serve_api(
            listener,
            toxiproxy::router(tcp.clone()),
            options.timeouts,
            shutdown_rx.clone(),
        )));
    }
    Ok(Faultd {
        shared,
        tcp,
        data_addr,
        control_addr,
        toxiproxy_addr,
        dns_addr,
        instances,
        shutdown,
        tasks,
        tcp_schedule: std::sync::Mutex::new(None),
    })
}

/// Creates the TCP routes of `config` (with their instances, and the entries of protocol routes) with their toxics
/// of time 0; gives the listeners of each route's instances.
fn create_tcp_routes(
    config: &Config,
    tcp: &tcp::TcpRoutes,
) -> Result<std::collections::BTreeMap<String, Vec<SocketAddr>>, FaultdError> {
    let mut tcp_instances = std::collections::BTreeMap::<String, Vec<SocketAddr>>::new();
    for (name, route) in config.tcp_routes() {
        let endpoint = route.tcp.as_ref().expect("a TCP route has its endpoint");
        let failed = |source| FaultdError::TcpRoute {
            route: name.clone(),
            source,
        };
        tcp.create(tcp::ProxySpec {
            protocol: endpoint.protocol,
            on_garbage: endpoint.on_garbage.unwrap_or_default(),
            ssl: endpoint.ssl.unwrap_or_default(),
            ..tcp::ProxySpec::new(name, &endpoint.listen, &endpoint.upstream)
        })
        .map_err(failed)?;
        if let Some(n) = route.instances {
            let addrs = tcp.add_instances(name, n).map_err(failed)?;
            tcp_instances.insert(name.clone(), addrs);
        }
        if endpoint.protocol == tcp::TcpProtocol::Redis {
            let schedule = tcp::schedule::RedisSchedule::of(config, name);
            let (entries, phase) = schedule.at(std::time::Duration::ZERO);
            tcp.set_redis(name, &entries, phase).map_err(failed)?;
        }
        if let Some(entries) = &route.postgres {
            tcp.set_postgres_entries(name, entries, "healthy")
                .map_err(failed)?;
        }
    }
    tcp::schedule::apply(
        tcp,
        &config.tcp_schedules(),
        &tcp::schedule::redis_schedules(config),
        // A postgres route's own entries are in force (under `healthy`) until the schedule starts.
        &[],
        std::time::Duration::ZERO,
    );
    Ok(tcp_instances)
}

/// Binds the resolver's UDP socket and TCP listener (on loopback, or an address `options` allows) with its
/// recorder.
fn bind_dns(
    dns: &dns::DnsConfig,
    options: &Options,
    bucket: std::time::Duration,
) -> Result<
    (
        tokio::net::UdpSocket,
        tokio::net::TcpListener,
        Arc<dns::DnsRecorder>,
    ),
    FaultdError,
> {
    let addr = dns
        .listen_addr()
        .map_err(|e| FaultdError::Config(e.at("dns").into()))?;
    if !addr.ip().is_loopback() && !options.allow_listen.contains(&addr.ip()) {
        return Err(FaultdError::Config(
            invalid::Invalid::new(
                "dns.listen",
                format!(
                    "{addr} is not on loopback; allow it with --allow-listen {}",
                    addr.ip()
                ),
            )
            .into(),
        ));
    }
    let (udp, tcp) = dns::serve::bind(addr).map_err(|source| FaultdError::Bind { addr, source })?;
    let bound = udp
        .local_addr()
        .map_err(|source| FaultdError::Bind { addr, source })?;
    let recorder = Arc::new(dns::DnsRecorder::new(bucket, bound.to_string()));
    Ok((udp, tcp, recorder))
}

/// Serves the resolver bound by [`bind_dns`] until shutdown; its address.
fn serve_dns(
    (udp, tcp, recorder): (
        tokio::net::UdpSocket,
        tokio::net::TcpListener,
        Arc<dns::DnsRecorder>,
    ),
    shared: &Arc<Shared>,
    tasks: &mut Vec<JoinHandle<()>>,
    shutdown: &watch::Receiver<bool>,
) -> Option<SocketAddr> {
    let addr = udp.local_addr().ok();
    let names: Arc<dyn dns::serve::Names> = Arc::new(ScheduleNames(shared.clone()));
    let resolver = Arc::new(dns::serve::Resolver::new(names, recorder));
    tasks.push(tokio::spawn(dns::serve::serve(
        udp,
        tcp,
        resolver,
        shutdown.clone(),
    )));
    addr
}

/// The resolver's view of the schedule: each name's entry at the current position, the plan's upstream, and the
/// recorder's clock.
struct ScheduleNames(Arc<Shared>);

impl dns::serve::Names for ScheduleNames {
    fn decide(&self, name: &str) -> Option<dns::NameDecision> {
        let live = self.0.live();
        live.plan
            .dns
            .draw(name, live.position(Instant::now()), live.plan.seed)
    }

    fn forward(&self) -> Option<SocketAddr> {
        self.0.live().plan.dns.forward
    }

    fn time_ns(&self, at: Instant) -> u64 {
        self.0.recorder.time_ns(at)
    }
}

/// Binds a listener, with the address it got (the real port when 0 was asked for).
fn bind(
    addr: SocketAddr,
    backlog: u32,
) -> Result<(tokio::net::TcpListener, SocketAddr), FaultdError> {
    let failed = |source| FaultdError::Bind { addr, source };
    let listener = sockets::bind(addr, backlog).map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    Ok((listener, bound))
}

impl Faultd {
    /// The data plane's address.
    pub fn data_addr(&self) -> SocketAddr {
        self.data_addr
    }

    /// Where each instance of route `route` listens, in instance order (the first is instance 1); empty for a
    /// route without `instances`.
    pub fn instance_addrs(&self, route: &str) -> &[SocketAddr] {
        self.instances.get(route).map_or(&[], Vec::as_slice)
    }

    /// The base URL of each instance of HTTP route `route` (`https://` when the data plane speaks TLS), in order;
    /// a TCP route's instances have addresses only ([`Faultd::instance_addrs`]).
    pub fn instance_urls(&self, route: &str) -> Vec<String> {
        let scheme = if self.shared.tls.is_some() {
            "https"
        } else {
            "http"
        };
        self.instance_addrs(route)
            .iter()
            .map(|a| format!("{scheme}://{a}"))
            .collect()
    }

    /// The resolver's address (UDP and TCP on the same port), when the configuration has `dns:`.
    pub fn dns_addr(&self) -> Option<SocketAddr> {
        self.dns_addr
    }

    /// The control API's address, if it was asked for.
    pub fn control_addr(&self) -> Option<SocketAddr> {
        self.control_addr
    }

    /// Starts the schedule with `origin` as the run's t = 0 (phase `at` is relative to it); calls before this
    /// were recorded in bucket 0. Drops run-time route overrides.
    pub fn start_schedule(&self, origin: Instant) {
        control::start_schedule(&self.shared, origin);
        self.tcp.set_origin(origin);
        let config = self.config();
        if config.tcp_routes().next().is_some() {
            let bucket = config.bucket();
            let task = tokio::spawn(tcp::schedule::run(
                self.tcp.clone(),
                config.tcp_schedules(),
                tcp::schedule::redis_schedules(&config),
                tcp::schedule::postgres_schedules(&config),
                origin,
                bucket,
                self.shutdown.subscribe(),
            ));
            if let Some(old) = self.tcp_schedule_slot().replace(task) {
                old.abort();
            }
        }
    }

    fn tcp_schedule_slot(&self) -> std::sync::MutexGuard<'_, Option<JoinHandle<()>>> {
        self.tcp_schedule.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where TCP route `name` listens (the real port when 0 was asked for).
    pub fn tcp_addr(&self, name: &str) -> Option<SocketAddr> {
        self.tcp.get(name).ok().and_then(|v| v.listen.parse().ok())
    }

    /// The TCP routes: create, change and delete them and their toxics (the library side of the Toxiproxy API).
    pub fn tcp(&self) -> &Arc<tcp::TcpRoutes> {
        &self.tcp
    }

    /// The Toxiproxy-compatible API's address, if it was asked for.
    pub fn toxiproxy_addr(&self) -> Option<SocketAddr> {
        self.toxiproxy_addr
    }

    /// What every TCP route recorded, by name (the `tcp_routes` of `/recording`).
    pub fn tcp_recording(&self) -> std::collections::BTreeMap<String, tcp::TcpRouteRecording> {
        self.tcp.recording()
    }

    /// The run's CA certificate (PEM) when the data plane terminates TLS with a minted CA (`tls: {}`): what the
    /// service under test must trust to reach faultd. `None` in cleartext or with certificate files.
    pub fn ca_pem(&self) -> Option<String> {
        self.shared
            .tls
            .as_ref()
            .and_then(|t| t.ca_pem().map(str::to_string))
    }

    /// Writes the run's CA certificate (PEM) to `path`; false when there is none (see [`Faultd::ca_pem`]).
    pub fn write_ca(&self, path: &std::path::Path) -> std::io::Result<bool> {
        match self.ca_pem() {
            Some(pem) => std::fs::write(path, pem).map(|()| true),
            None => Ok(false),
        }
    }

    /// What the TLS handshakes recorded (the `tls` field of `/recording`); `None` in cleartext.
    pub fn tls_recording(&self) -> Option<tls::TlsRecording> {
        self.shared.tls.as_ref().map(|t| t.recorder().snapshot())
    }

    /// Freezes the schedule at the current phase (recording goes on).
    pub fn stop_schedule(&self) {
        self.shared.live_mut().stop(Instant::now());
        if let Some(task) = self.tcp_schedule_slot().take() {
            task.abort();
        }
    }

    /// Every route back to its base behaviour (used on Ctrl-C); TCP routes get their own `toxics` back and their
    /// schedule stops.
    pub fn reset_to_healthy(&self) {
        self.shared.live_mut().reset_to_healthy(Instant::now());
        if let Some(task) = self.tcp_schedule_slot().take() {
            task.abort();
        }
        let config = self.config();
        for (name, route) in config.tcp_routes() {
            let base = route.toxics.clone().unwrap_or_default();
            let _ = self.tcp.set_toxics(name, tcp::schedule::build(&base));
            if let Some(redis) = &route.redis {
                let _ = self.tcp.set_redis(name, redis, schedule::HEALTHY_RESET);
            }
            let entries = route.postgres.clone().unwrap_or_default();
            let _ = self.tcp.set_postgres_entries(name, &entries, "healthy");
        }
    }

    /// The phase in force now: `None` before the first phase, [`HEALTHY_RESET`] after a reset.
    pub fn current_phase(&self) -> Option<String> {
        self.shared.live().current_phase(Instant::now())
    }

    /// Connections shed over `max_connections` so far.
    pub fn shed(&self) -> u64 {
        self.shared.recorder.shed_count()
    }

    /// Calls in flight now, all routes.
    pub fn in_flight(&self) -> u64 {
        self.shared.recorder.in_flight()
    }

    /// Calls so far that matched no route.
    pub fn unmatched(&self) -> u64 {
        self.shared.recorder.unmatched_count()
    }

    /// A snapshot of everything recorded; cheap enough to call once a second.
    pub fn recording(&self) -> Recording {
        control::recording(&self.shared)
    }

    /// [`Faultd::recording`] with every series from bucket `from` on (its TCP routes' too, once turned into calls
    /// with [`tcp::record::with_tcp_routes_since`]): what a reader that already holds the earlier buckets needs.
    pub fn recording_since(&self, from: usize) -> Recording {
        control::recording_since(&self.shared, from)
    }

    /// Each call one by one, with the trace id it carried, when the configuration correlates (`correlate:`);
    /// empty otherwise.
    pub fn traced_calls(&self) -> Vec<recorder::TracedCall> {
        self.shared.recorder.traced_calls()
    }

    /// The configuration in force.
    pub fn config(&self) -> Config {
        self.shared.live().plan.config.clone()
    }

    /// The seed of the random draws (the configuration's, or the one picked at start).
    pub fn seed(&self) -> u64 {
        self.shared.live().plan.seed
    }

    /// Replaces the whole configuration; the schedule keeps its clock, overrides are dropped.
    pub fn replace_config(&self, config: Config) -> Result<(), FaultdError> {
        control::replace_config(&self.shared, config).map_err(FaultdError::from)
    }

    /// Sets one route's behaviour now, until the schedule enters another phase.
    pub fn set_route(&self, route: &str, set: &PhaseRoute) -> Result<(), FaultdError> {
        control::set_route(&self.shared, route, set)
    }

    /// Stops serving: closes the listeners and drops every open connection (hung calls included).
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.tcp_schedule_slot().take() {
            task.abort();
        }
        self.tcp.clear();
        for task in self.tasks {
            let _ = task.await;
        }
        // Connection tasks see the same signal; give them a moment to drop their sockets.
        tokio::task::yield_now().await;
    }
}
