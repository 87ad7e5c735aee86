//! The `faultd` binary: thin wiring over the library. It owns argument parsing, error reporting and exit codes
//! (0 ok, 2 bad input, 3 the run broke); everything else is `faultd::start` and the control API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use faultline_units::input::{read_capped_text, MAX_CONFIG_SIZE};
use faultline_units::Scale;

const EXAMPLE: &str = r#"EXAMPLE

  A pricing route that answers in ~40 ms, slows to 2 s after 10 s, and recovers after 40 s:

    cat > faultd.yaml <<'YAML'
    seed: 7
    routes:
      pricing: { path: /price/*, latency: { p50: 40ms, p99: 80ms } }
      payments: { method: POST, path: /payments/charge, latency: { fixed: 100ms },
                  response: { status: 200, body_size: 2KiB, headers: { content-type: application/json } } }
    phases:
      - { name: healthy,   at: 0s }
      - { name: brownout,  at: 10s, routes: { pricing: { latency: { fixed: 2s } } } }
      - { name: degrading, at: 20s, ramp: 10s,
          routes: { pricing: { latency: { fixed: 5s }, errors: [ { share: 70%, status: 503, headers: { retry-after: "5" } } ] } } }
      - { name: recovered, at: 40s, routes: { pricing: healthy } }
      - { name: flaky,     at: 50s, routes: { pricing: { fail_first: { calls: 20, status: 503 } } } }
    YAML
    faultd validate faultd.yaml
    faultd --config faultd.yaml --listen 127.0.0.1:9000 --control 127.0.0.1:9001

    curl -s http://127.0.0.1:9000/price/42                      # the data plane
    curl -s http://127.0.0.1:9001/schedule                      # phase in force, origin
    curl -s http://127.0.0.1:9001/metrics | grep in_flight      # calls held now and at most
    curl -s http://127.0.0.1:9001/recording > recording.json    # everything, per 100 ms bucket

BEHAVIOURS (per route, or set by a phase)
  latency     {fixed: 100ms} | {uniform: [10ms, 50ms]} | {normal: {mean: 50ms, stddev: 10ms}}
              | {lognormal: {median: 40ms, sigma: 0.5}} | {p50: 40ms, p90: 50ms, p99: 80ms, p999: 200ms}
  errors      [{share: 30%, status: 503, body: "...", headers: {retry-after: "5"}}, ...]
  hang        20%       held until the caller gives up
  reset       5%        connection reset (RST)
  empty       5%        connection closed, no response
  malformed   5%        bytes that are not HTTP
  slow_body   {rate: 1KiB/s}
  proxy       http://127.0.0.1:8080   forward healthy calls to a real upstream
  response    {status: 200, headers: {...}, body_size: 2KiB}
  fail_first  {calls: 20, status: 503}   the first N calls of the phase fail

TCP ROUTES (the Toxiproxy 2.x API, with --toxiproxy-api 127.0.0.1:8474)
  curl -s -XPOST 127.0.0.1:8474/proxies -d '{"name":"redis","listen":"127.0.0.1:26379","upstream":"127.0.0.1:6379"}'
  curl -s -XPOST 127.0.0.1:8474/proxies/redis/toxics -d '{"type":"latency","attributes":{"latency":300}}'
  toxics: latency {latency, jitter ms}  bandwidth {rate KB/s}  slow_close {delay ms}  timeout {timeout ms}
          reset_peer {timeout ms}  limit_data {bytes}  slicer {average_size, size_variation, delay us}
          stall {}  connect_delay {delay ms};  down: POST /proxies/redis {"enabled": false}
  In a container, where Toxiproxy stood (proxies on every interface, and toxics in force from the start):
    faultd --toxiproxy-api 0.0.0.0:8474 --allow-listen 0.0.0.0 --toxics toxics.json
    toxics.json: [{"name":"redis","listen":"0.0.0.0:26379","upstream":"127.0.0.1:6379",
                   "toxics":[{"type":"latency","attributes":{"latency":300}}]}]

TLS (a `tls:` section, or --tls / --tls-cert FILE --tls-key FILE [--tls-client-ca FILE]; --ca-out FILE)
  tls: {}                                  mint a CA and a certificate for 127.0.0.1, ::1, localhost
  tls: { cert: c.pem, key: k.pem, client_ca: clients.pem }
  tls: { faults: { delay: {fixed: 1s} }, phases: { bad-certs: { expired: 30% } } }
  handshake faults: delay {latency}  failure {share, alert}  expired %  wrong_name %  untrusted %  truncate %
  curl --cacert ca.pem https://127.0.0.1:9000/price/42     (nothing is added to the machine's trust store)

TIMEOUTS (every listener but TCP routes; held calls are never cut)
  --header-timeout 10s   a request head or TLS handshake slower than this after its first byte: closed
  --idle-timeout 60s     a connection waiting this long for its next request: closed (HTTP/2: GOAWAY)

CONTROL API
  GET/PUT /config   PUT /routes/{name}   POST /schedule/start|stop|reset   GET /schedule   GET /recording   GET /metrics
  A configuration sent here names no file (give grpc_response.message as hex) unless faultd was started with
  --files DIR; then only regular files inside DIR, at most 2 MiB. A --config file names files beside it.

LOOPS
  A route whose upstream is one of faultd's own listeners is refused. Every proxied call carries faultd's id in
  a `faultd-hop` header; one that comes back (through another proxy) is answered 508 Loop Detected, counted in
  /recording's loops_detected and /metrics' faultd_loops_detected.

EXIT CODES
  0 stopped cleanly   2 bad configuration or flags   3 could not listen or run"#;

/// A controllable fake HTTP dependency: latency, errors, hangs and resets on a schedule, and a recorder of the
/// calls it holds.
#[derive(Debug, Parser)]
#[command(name = "faultd", version, after_long_help = EXAMPLE, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The configuration file (YAML or JSON).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The data plane's address: where the service under test sends its calls [default: the configuration's
    /// `listen`, else 127.0.0.1:9000].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// The control API's address (loopback unless you mean otherwise).
    #[arg(long)]
    control: Option<SocketAddr>,
    /// A bearer token the control API requires.
    #[arg(long, env = "FAULTD_TOKEN")]
    token: Option<String>,
    /// Serve at most this many connections at once; more are shed with 503 and counted.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
    /// The listen backlog.
    #[arg(long, default_value_t = 8192)]
    backlog: u32,
    /// Worker threads (default: one per CPU). With 1, faultd runs on a single-threaded runtime: the calls of an
    /// HTTP/2 connection that arrive together are then answered together, in one write, where a work-stealing
    /// worker answers each as it is ready.
    #[arg(long, value_name = "N", env = "TOKIO_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Run the schedule F times as long (durations x F, rates / F), F from 0.001 to 1000.
    #[arg(long, value_name = "F")]
    time_scale: Option<Scale>,
    /// Override the configuration's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Do not start the schedule at launch; wait for POST /schedule/start.
    #[arg(long)]
    no_start: bool,
    /// Serve the Toxiproxy 2.x API here (TCP routes and their toxics); without an address, on Toxiproxy's own
    /// 127.0.0.1:8474 (0.0.0.0:8474 in a container, for other containers to reach it). Without --config, faultd
    /// then runs with one catch-all HTTP route.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8474")]
    toxiproxy_api: Option<SocketAddr>,
    /// Create these proxies and their toxics at start, before anything connects: a JSON list in the form of
    /// Toxiproxy's config file (`name`, `listen`, `upstream`, `enabled`), each with a `toxics` list as
    /// POST /proxies/{proxy}/toxics takes them.
    #[arg(long, value_name = "FILE")]
    toxics: Option<PathBuf>,
    /// An address other than loopback that proxies (made through the Toxiproxy API or --toxics) may listen on,
    /// such as 0.0.0.0 in a container, where other containers connect to them (repeat for several). Without it
    /// they listen on loopback only.
    #[arg(long = "allow-listen", value_name = "IP")]
    allow_listen: Vec<std::net::IpAddr>,
    /// A folder whose files a configuration sent to the control API may name (a gRPC answer's `message_file`,
    /// resolved inside DIR; `..` and links that lead out are refused). Without it the control API reads no file
    /// and such a configuration gives its message inline (`message`, hex). Files named by --config are read
    /// beside that file, whatever this says.
    #[arg(long, value_name = "DIR")]
    files: Option<PathBuf>,
    /// A host other than loopback that TCP routes may forward to (repeat for several).
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Terminate TLS on the data plane with a CA and a certificate minted for this run (127.0.0.1, ::1,
    /// localhost), as `tls: {}` in the configuration does. See --ca-out.
    #[arg(long)]
    tls: bool,
    /// Terminate TLS with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by a CA of this PEM file (mTLS); implies TLS.
    #[arg(long, value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Write the run's CA certificate (PEM) here, for the service under test to trust (it is never added to the
    /// machine's trust store).
    #[arg(long, value_name = "FILE")]
    ca_out: Option<PathBuf>,
    /// Close a connection whose request head (or TLS handshake) is not in this long after its first byte, on the
    /// data plane, the control API and the Toxiproxy API. Calls faultd holds (hang, delays, slow bodies) are
    /// never cut.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    header_timeout: faultd::Dur,
    /// Close a connection that waits this long for its next request without a byte of it (HTTP/2: with no stream
    /// waiting for its answer, by a graceful GOAWAY). TCP routes have no idle timeout.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    idle_timeout: faultd::Dur,
}

/// The data plane's address when neither --listen nor the configuration names one.
const DEFAULT_LISTEN: &str = "127.0.0.1:9000";

/// The configuration of a faultd started only for its TCP routes: one catch-all HTTP route, healthy.
const TCP_ONLY_CONFIG: &str = "routes:\n  any: { path: /* }\n";

#[derive(Debug, Subcommand)]
enum Command {
    /// Check a configuration file and exit (0 valid, 2 invalid).
    Validate {
        /// The file.
        file: PathBuf,
    },
    /// Print the JSON Schema of the configuration.
    Schema,
}

/// An error with the exit code it deserves.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

fn bad_input(error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code: 2,
        error: error.into(),
    }
}

fn load(path: &std::path::Path, time_scale: Option<Scale>) -> Result<faultd::Config, Failure> {
    let text = read_capped_text(path, MAX_CONFIG_SIZE).map_err(bad_input)?;
    let mut config =
        faultd::Config::from_yaml(&text, &path.display().to_string()).map_err(bad_input)?;
    // The file's author names files beside it, as the file's own folder is where they keep them.
    let folder = path.parent().unwrap_or(std::path::Path::new(""));
    config
        .read_files(&faultd::Files::Beside(folder.to_path_buf()))
        .map_err(|mut e| {
            e.file = Some(path.display().to_string());
            bad_input(e)
        })?;
    if let Some(f) = time_scale {
        config.scale_time(f.get());
    }
    Ok(config)
}

/// The configuration to serve: the file's, or a built-in one, with the flags laid over it.
fn configuration(cli: &Cli) -> Result<faultd::Config, Failure> {
    let mut config = match &cli.config {
        Some(path) => load(path, cli.time_scale)?,
        None if cli.toxiproxy_api.is_some() || cli.toxics.is_some() => {
            faultd::Config::from_yaml(TCP_ONLY_CONFIG, "built-in").map_err(bad_input)?
        }
        None if cli.control.is_some() => faultd::Config::default(),
        None => {
            return Err(bad_input(anyhow::anyhow!(
                "give --config FILE, or --control ADDR for a runner or the control API to configure it \
                 (or --toxiproxy-api [ADDR] or --toxics FILE for TCP routes; see faultd --help)"
            )))
        }
    };
    if let Some(listen) = cli.listen {
        config.listen = Some(listen.to_string());
    }
    config
        .listen
        .get_or_insert_with(|| DEFAULT_LISTEN.to_string());
    if cli.seed.is_some() {
        config.seed = cli.seed;
    }
    if cli.tls || cli.tls_cert.is_some() || cli.tls_client_ca.is_some() {
        let tls = config.tls.get_or_insert_with(Default::default);
        if cli.tls_cert.is_some() {
            tls.cert = cli.tls_cert.clone();
            tls.key = cli.tls_key.clone();
        }
        if cli.tls_client_ca.is_some() {
            tls.client_ca = cli.tls_client_ca.clone();
        }
        config.validate().map_err(bad_input)?;
    }
    if cli.ca_out.is_some() && config.tls.is_none() {
        return Err(bad_input(anyhow::anyhow!(
            "--ca-out: the data plane has no TLS (give --tls or a `tls:` section)"
        )));
    }
    Ok(config)
}

/// faultd's options from the flags (the data plane's address travels in the configuration).
fn options(cli: &Cli) -> Result<faultd::Options, Failure> {
    for (flag, value) in [
        ("--header-timeout", cli.header_timeout),
        ("--idle-timeout", cli.idle_timeout),
    ] {
        if value.0.is_zero() {
            return Err(bad_input(anyhow::anyhow!(
                "{flag} {value}: must be above 0 (a connection could never send a request)"
            )));
        }
    }
    if let Some(dir) = cli.files.as_ref().filter(|d| !d.is_dir()) {
        return Err(bad_input(anyhow::anyhow!(
            "--files {}: not a folder",
            dir.display()
        )));
    }
    Ok(faultd::Options {
        control: cli.control,
        token: cli.token.clone(),
        max_connections: cli.max_connections.map(|n| n as usize),
        backlog: cli.backlog,
        precise_delays: true,
        toxiproxy_api: cli.toxiproxy_api,
        allow_hosts: cli.allow_hosts.clone(),
        allow_listen: cli.allow_listen.clone(),
        ca_out: cli.ca_out.clone(),
        timeouts: faultd::timeouts::Timeouts {
            header: cli.header_timeout.0,
            idle: cli.idle_timeout.0,
        },
        files: cli.files.clone(),
        // The data plane's address travels in the configuration (`listen`), set above.
        ..Default::default()
    })
}

async fn run(cli: Cli) -> Result<(), Failure> {
    match &cli.command {
        Some(Command::Validate { file }) => validate(file),
        Some(Command::Schema) => schema(),
        None => serve(cli).await,
    }
}

/// `faultd validate FILE`: the file's routes and phases, or why it is refused.
fn validate(file: &std::path::Path) -> Result<(), Failure> {
    let config = load(file, None)?;
    println!(
        "{}: ok ({} routes, {} phases: {})",
        file.display(),
        config.routes.len(),
        config.phases.len(),
        config
            .phase_names()
            .iter()
            .map(|(n, at)| format!("{n}@{}", faultd::Dur(*at)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// `faultd schema`: the JSON Schema of a configuration file.
fn schema() -> Result<(), Failure> {
    let schema = schemars::schema_for!(faultd::Config);
    println!(
        "{}",
        serde_json::to_string_pretty(&schema).map_err(|e| Failure {
            code: 3,
            error: e.into()
        })?
    );
    Ok(())
}

/// Serves until SIGINT or SIGTERM, then returns every route to healthy and prints what each route saw.
async fn serve(cli: Cli) -> Result<(), Failure> {
    let toxics = match &cli.toxics {
        Some(path) => Some(read_capped_text(path, MAX_CONFIG_SIZE).map_err(bad_input)?),
        None => None,
    };
    let config = configuration(&cli)?;
    let options = options(&cli)?;
    let faultd = faultd::start(config, options).await.map_err(|e| match e {
        faultd::FaultdError::Config(_)
        | faultd::FaultdError::Tls(_)
        | faultd::FaultdError::WriteCa { .. } => bad_input(e),
        other => Failure {
            code: 3,
            error: other.into(),
        },
    })?;
    if let (Some(path), Some(text)) = (&cli.toxics, &toxics) {
        let proxies = faultd::toxiproxy::load(faultd.tcp(), text)
            .map_err(|e| bad_input(anyhow::anyhow!("{}: {e}", path.display())))?;
        for p in &proxies {
            let n = p.toxics.len();
            eprintln!(
                "faultd: proxy {} on {} -> {} ({n} {}{}), from {}",
                p.name,
                p.listen,
                p.upstream,
                if n == 1 { "toxic" } else { "toxics" },
                if p.enabled { "" } else { ", disabled" },
                path.display()
            );
        }
    }
    if !cli.no_start {
        faultd.start_schedule(tokio::time::Instant::now());
    }
    announce(&faultd, &cli);
    wait_for_stop().await;
    faultd.reset_to_healthy();
    let recording = faultd.recording();
    for (name, route) in &recording.routes {
        eprintln!(
            "faultd: {name}: {} calls, at most {} in flight, {} completed, {} hung, {} reset",
            route.totals.arrivals,
            route.max_in_flight,
            route.totals.completed.total(),
            route.totals.hangs,
            route.totals.resets
        );
    }
    faultd.shutdown().await;
    Ok(())
}

/// Says where faultd listens, where the run's CA went, and what is reachable from other machines.
fn announce(faultd: &faultd::Faultd, cli: &Cli) {
    let scheme = if faultd.config().tls.is_some() {
        "https"
    } else {
        "http"
    };
    eprintln!(
        "faultd: data plane on {scheme}://{} (seed {})",
        faultd.data_addr(),
        faultd.seed()
    );
    for (route, _) in faultd.config().http_routes() {
        let urls = faultd.instance_urls(route);
        if !urls.is_empty() {
            eprintln!("faultd: route {route}'s instances on {}", urls.join(", "));
        }
    }
    for (route, _) in faultd.config().tcp_routes() {
        let addrs = faultd.instance_addrs(route);
        if !addrs.is_empty() {
            let addrs: Vec<String> = addrs.iter().map(ToString::to_string).collect();
            eprintln!(
                "faultd: TCP route {route}'s instances on {}",
                addrs.join(", ")
            );
        }
    }
    if let Some(path) = &cli.ca_out {
        if faultd.ca_pem().is_some() {
            eprintln!("faultd: the run's CA is in {}", path.display());
        }
    }
    if let Some(d) = faultd.dns_addr() {
        eprintln!(
            "faultd: resolver on {d}, UDP and TCP (dig @{} -p {} NAME)",
            d.ip(),
            d.port()
        );
    }
    if let Some(c) = faultd.control_addr() {
        eprintln!("faultd: control API on http://{c} (GET /schedule, /recording, /metrics)");
    }
    if let Some(t) = faultd.toxiproxy_addr() {
        eprintln!("faultd: Toxiproxy API on http://{t} (GET /proxies, POST /proxies, POST /reset)");
    }
    let beyond: Vec<String> = [
        ("the data plane", Some(faultd.data_addr())),
        ("the control API", faultd.control_addr()),
        ("the Toxiproxy API", faultd.toxiproxy_addr()),
    ]
    .into_iter()
    .filter_map(|(what, a)| {
        a.filter(|a| !a.ip().is_loopback())
            .map(|a| format!("{what} on {a}"))
    })
    .chain(
        cli.allow_listen
            .iter()
            .map(|ip| format!("proxies allowed on {ip} (--allow-listen)")),
    )
    .collect();
    if !beyond.is_empty() {
        eprintln!(
            "faultd: listening beyond loopback, reachable from other machines: {}",
            beyond.join("; ")
        );
    }
}

async fn wait_for_stop() {
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut builder = match cli.threads {
        // A woken task runs next on a work-stealing worker (its LIFO slot): an HTTP/2 connection woken by its
        // first answered stream would write that answer alone, before the connection's other streams had run.
        // The single-threaded runtime queues it behind them: at 10 streams per connection (h2load over TLS) this
        // took faultd from about 0.6 writes per answer to 0.11.
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(usize::from(n));
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("faultd: cannot start the runtime: {e}");
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure { code, error }) => {
            eprintln!("faultd: error: {error:#}");
            ExitCode::from(code)
        }
    }
}
