//! The `demo` binary: thin wiring over the library. Parses flags and an optional YAML file, starts the service,
//! serves until Ctrl-C. Exit codes: 0 stopped cleanly, 2 bad flags or configuration, 3 the service could not start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use demo::{DemoConfig, Mistake, Options};
use faultline_units::input::{read_capped_text, MAX_CONFIG_SIZE};
use faultline_units::Scale;

const EXAMPLES: &str = "\
Examples:
  # The recommended breaker (docs/seeds/000) in front of a dependency on port 9000
  demo --listen 127.0.0.1:8080 --dependency http://127.0.0.1:9000

  # The same service without timeouts and counting 4xx: two classic mistakes
  demo --dependency http://127.0.0.1:9000 --mistake no_timeout --mistake count_4xx

  # The volume floor of docs/seeds/000: 60 instances, each with its own breakers; then the fix
  demo --dependency http://127.0.0.1:9000 --instances 60
  demo --dependency http://127.0.0.1:9000 --instances 60 --shared-counters

  # A dependency over TLS, trusted through the CA faultd wrote (faultd --tls --ca-out ca.pem) and nothing else
  demo --dependency https://127.0.0.1:9000 --dependency-ca ca.pem

  # From a file, posting every breaker transition to a webhook
  demo --config demo.yaml --webhook http://127.0.0.1:7000/events

  # Print the effective configuration (every default filled in) and exit
  demo --config demo.yaml --print-config

A configuration file (every field optional; omitted operations are not called once `operations` is given):
  instances: 1
  shared_counters: false
  operations:
    pricing:  { timeout: 250ms, pool: 200, fallback: stale,
                breaker: { failure_rate: 50%, window: 10s, min_calls: 20, open_for: 30s, half_open_calls: 1,
                           close_after: 1, slow_call_duration: 1s, slow_call_rate: 100% } }
    reviews:  { timeout: 800ms, pool: 80, fallback: default }
    payments: { timeout: 2s, pool: 50, fallback: { unavailable: { retry_after: 5s } },
                retries: { max: 2, backoff: 50ms, budget: 10% } }
    account-read: { hedge: { after: p95, max: 1 } }
  mistakes: [ no_timeout ]

Endpoints: GET /product/{id}, POST /checkout, GET /admin/report, GET|POST /account/{id}, GET /health, GET /metrics.
Each dependency call carries the caller's traceparent (a new span id) and its remaining budget (x-request-timeout).
Mistakes: no_timeout, count_4xx, bare_count, no_min_calls, unlimited_half_open, slowness_ignored, shared_breaker,
unbudgeted_retries, close_on_first_success, instant_reconnect, no_backoff, no_jitter, no_deadline_propagation,
uncancelled_hedges (see docs/demo.md).";

/// A reference service under test: timeout, bulkhead, circuit breaker, retry budget and fallback per dependency
/// call, with the classic breaker mistakes as switches.
#[derive(Debug, Parser)]
#[command(name = "demo", version, after_help = EXAMPLES)]
struct Cli {
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Base URL of the dependency (faultd's data port): http:// or https://.
    #[arg(long, default_value = "http://127.0.0.1:9000")]
    dependency: String,
    /// Trust an https:// dependency through the CA certificates of this PEM file only (such as the run's CA that
    /// faultd writes with --ca-out); without it, the system's roots.
    #[arg(long, value_name = "FILE")]
    dependency_ca: Option<PathBuf>,
    /// YAML configuration file (the scenario's `sut: { demo: ... }` section).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Independent copies in this process, requests spread round-robin (overrides the file), 1 to 1000.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=demo::config::MAX_INSTANCES as i64))]
    instances: Option<u16>,
    /// Share each operation's breaker state across instances (the fix for the volume floor in docs/seeds/000).
    #[arg(long)]
    shared_counters: bool,
    /// Switch on a classic mistake; repeat the flag or separate names with commas.
    #[arg(long = "mistake", value_enum, value_delimiter = ',')]
    mistakes: Vec<Mistake>,
    /// POST every breaker transition as JSON to this URL.
    #[arg(long)]
    webhook: Option<String>,
    /// Multiply every duration in the configuration by this factor (e.g. 0.1 runs ten times faster), from 0.001
    /// to 1000.
    #[arg(long)]
    time_scale: Option<Scale>,
    /// Print the effective configuration as YAML and exit.
    #[arg(long)]
    print_config: bool,
}

fn configure(cli: &Cli) -> anyhow::Result<DemoConfig> {
    let mut config = match &cli.config {
        Some(path) => {
            let text = read_capped_text(path, MAX_CONFIG_SIZE)?;
            DemoConfig::from_yaml(&text, &path.display().to_string())?
        }
        None => DemoConfig::default(),
    };
    if let Some(n) = cli.instances {
        config.instances = usize::from(n);
    }
    config.shared_counters |= cli.shared_counters;
    config.mistakes.extend(cli.mistakes.iter().copied());
    if let Some(factor) = cli.time_scale {
        config.scale_time(factor.get());
    }
    config.validate()?;
    Ok(config)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        // Plain text when piped, so a runner can match the transition lines without colour codes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let config = match configure(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("demo: {e:#}");
            return ExitCode::from(2);
        }
    };
    if cli.print_config {
        return match serde_saphyr::to_string(&config) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("demo: cannot print the configuration: {e}");
                ExitCode::from(3)
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("demo: cannot start the runtime: {e}");
            return ExitCode::from(3);
        }
    };
    let dependency_ca = match &cli.dependency_ca {
        Some(path) => match read_capped_text(path, MAX_CONFIG_SIZE) {
            Ok(pem) => Some(pem),
            Err(e) => {
                eprintln!("demo: --dependency-ca {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    runtime.block_on(async {
        let options = Options {
            listen: cli.listen,
            dependency_url: cli.dependency.clone(),
            dependency_ca,
            webhook: cli.webhook.clone(),
        };
        let demo = match demo::start(config, options).await {
            Ok(d) => d,
            Err(e) => {
                eprintln!("demo: {e}");
                return ExitCode::from(if e.is_bad_input() { 2 } else { 3 });
            }
        };
        eprintln!("demo: serving on http://{} (Ctrl-C to stop)", demo.addr());
        stop_signal().await;
        demo.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// Ctrl-C, or SIGTERM (what a runner or a process manager sends).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
