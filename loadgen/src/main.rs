//! The `loadgen` command: thin wiring over the library. It parses flags, starts the load, shows a live line,
//! and prints the summary, the JSON recording or the `.hgrm` distribution. Exit codes: 0 done, 2 bad input,
//! 3 the run itself broke.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use faultline_units::{Dur, Rate};
use loadgen::{
    hgrm, summary, Arrivals, Bucket, LoadSpec, Measure, Outcome, RateSpec, RequestTemplate,
    RunOptions, Series,
};

const EXAMPLES: &str = "\
Examples:
  # 500 requests per second for 30 s, latency from the intended send time (wrk2-style table)
  loadgen --url http://127.0.0.1:8080/product/1 --rate 500/s --duration 30s

  # Poisson arrivals, random product ids, 2 s timeout, percentile distribution in milliseconds to a file
  loadgen --url 'http://127.0.0.1:8080/product/{rand:1..1000}' --rate 200/s --arrivals poisson \\
          --duration 1m --timeout 2s --hgrm product.hgrm

  # A POST with a body and a header, machine-readable output
  loadgen --url http://127.0.0.1:8080/checkout --method POST --body '{\"amount\": 10}' \\
          -H 'content-type: application/json' --rate 50/s --duration 10s --json > run.json

  # The scenario's load section (steps, ramps, weighted mix) against a base URL
  loadgen --spec load.yaml --url http://127.0.0.1:8080 --duration 60s

  # A soak run: an hour at 200/s, the 100 ms time series streamed to a file (flat memory)
  loadgen --url http://127.0.0.1:8080/product/1 --rate 200/s --duration 1h --series soak.jsonl

  # The same incident seen by a closed model (8 users waiting for their answers): compare the tables
  loadgen --url http://127.0.0.1:8080/product/1 --users 8 --duration 30s

  # One share of a distributed run: dial the faultline runner, which sends the plan
  loadgen agent --runner 127.0.0.1:7070

Only loopback targets are allowed unless the host is named with --allow-host.
Exit codes: 0 done, 2 bad input, 3 the run itself broke.";

/// Open-model HTTP load generator: sends on a timetable, measures latency from the intended send time.
#[derive(Debug, Parser)]
#[command(
    name = "loadgen",
    version,
    after_help = EXAMPLES,
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Target URL; its path (with {seq} and {rand:1..1000} generators) is the request unless --spec is given.
    #[arg(long, required = true)]
    url: Option<String>,
    /// Arrival rate, e.g. 500/s, 6/min, 0.1/s.
    #[arg(long, required_unless_present_any = ["users", "spec"], value_parser = faster_than_zero)]
    rate: Option<Rate>,
    /// How long to run, e.g. 30s, 2m.
    #[arg(long, required = true, value_parser = longer_than_zero)]
    duration: Option<Dur>,
    /// Client timeout per request, from dispatch (default 5s).
    #[arg(long, value_parser = longer_than_zero)]
    timeout: Option<Dur>,
    /// Cap on requests in flight; arrivals over it are counted as dropped (default 10000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_in_flight: Option<u64>,
    /// Keep-alive connections to the target, 1 to 100000 (default 1000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=MAX_CONNECTIONS))]
    connections: Option<u32>,
    /// Send arrivals due within this much of each other in one wake-up: less CPU for a send lag of up to this
    /// much, reported as the generator's own lateness. Default 100us; 0s sends every arrival at its own instant;
    /// at most 10ms (1ms: at most one wake-up per millisecond).
    #[arg(long, value_name = "DURATION", value_parser = coalesce)]
    coalesce: Option<Dur>,
    /// Arrival spacing (default uniform).
    #[arg(long, value_enum)]
    arrivals: Option<ArrivalsArg>,
    /// Seed for Poisson arrivals and random path values.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// HTTP method of the request built from --url.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Extra request header, "name: value" (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Request body.
    #[arg(long)]
    body: Option<String>,
    /// A response with this header counts as a fallback (e.g. X-Fallback).
    #[arg(long)]
    fallback_header: Option<String>,
    /// Closed model for comparison: N users, each waiting for its answer (ignores --rate), 1 to 100000.
    #[arg(long, value_name = "N", conflicts_with = "rate", value_parser = clap::value_parser!(u32).range(1..=MAX_CONNECTIONS))]
    users: Option<u32>,
    /// A YAML load spec (the scenario's `load:` section); --url then gives only the base.
    #[arg(long)]
    spec: Option<PathBuf>,
    /// Write the corrected latency's percentile distribution (.hgrm, milliseconds) to FILE.
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
    /// Print the recording as JSON instead of the table, with its time series unless --series takes it.
    #[arg(long)]
    json: bool,
    /// Write the time series to FILE as it goes: one JSON object per bucket, one per line. Memory then stays
    /// flat however long the run (without it, --json keeps every bucket until the end).
    #[arg(long, value_name = "FILE")]
    series: Option<PathBuf>,
    /// Allow a non-loopback target host (repeatable).
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Threads that run the timetable and the connections. 1 (the default) runs them all on one core; at most
    /// 1024.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=MAX_THREADS))]
    threads: u16,
    /// Time-series bucket width.
    #[arg(long, default_value = "100ms", value_parser = longer_than_zero)]
    bucket: Dur,
    /// For an https:// target: trust the CAs of this PEM file (such as the run's CA faultd writes with
    /// --ca-out) instead of the system's roots.
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    ca: Option<PathBuf>,
    /// For an https:// target: accept any certificate without verifying it.
    #[arg(long)]
    insecure: bool,
    /// Give every request a fresh W3C traceparent and the deadline header `x-request-timeout` (the timeout in
    /// whole milliseconds; grpc-timeout on gRPC), and keep each request's trace id and times (`requests` in
    /// --json): the runner's `correlate:`.
    #[arg(long)]
    correlate: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Run one share of a distributed load: dial the faultline runner (`faultline run --agents N
    /// --agents-listen ADDR`), have the clock compared, receive the plan (the load, this agent's share of the
    /// timetable, the shared t = 0), run it, and stream the buckets back. Exits 0 once the runner has the
    /// recording.
    Agent(AgentArgs),
}

#[derive(Debug, clap::Args)]
struct AgentArgs {
    /// The runner's agent listener, HOST:PORT.
    #[arg(long, env = "FAULTLINE_RUNNER")]
    runner: String,
    /// This agent's index (0 to N-1). A Kubernetes Indexed Job gives it in JOB_COMPLETION_INDEX; without one the
    /// runner assigns the next free index.
    #[arg(long, env = "JOB_COMPLETION_INDEX")]
    index: Option<u32>,
    /// How long to keep dialling a runner that is not listening yet, e.g. 2m.
    #[arg(long, default_value = "2m")]
    connect_for: Dur,
    /// Threads that run the share's timetable and connections, at most 1024.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=MAX_THREADS))]
    threads: u16,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ArrivalsArg {
    Uniform,
    Poisson,
}

/// The most connections (or closed-model users) one loadgen opens: past this the machine runs out of ports and
/// file descriptors long before the target sees the load.
const MAX_CONNECTIONS: i64 = 100_000;
/// The most worker threads: each lane runs on one, and no machine has more cores than this.
const MAX_THREADS: i64 = 1024;

/// A duration flag that must be longer than zero (a timeout, a bucket).
fn longer_than_zero(s: &str) -> Result<Dur, String> {
    let d: Dur = s
        .parse()
        .map_err(|e: faultline_units::UnitError| e.to_string())?;
    if d.get().is_zero() {
        return Err("it must be longer than 0s".into());
    }
    Ok(d)
}

/// A rate flag that must be above zero: at 0/s no request would ever be sent.
fn faster_than_zero(s: &str) -> Result<Rate, String> {
    let r: Rate = s
        .parse()
        .map_err(|e: faultline_units::UnitError| e.to_string())?;
    if r.per_sec() <= 0.0 {
        return Err("it must be above 0/s".into());
    }
    Ok(r)
}

/// `--coalesce`: from 0s to the widest window the dispatcher holds arrivals for.
fn coalesce(s: &str) -> Result<Dur, String> {
    let d: Dur = s
        .parse()
        .map_err(|e: faultline_units::UnitError| e.to_string())?;
    if d.get() > loadgen::MAX_COALESCE {
        return Err(format!("it must be at most {}", Dur(loadgen::MAX_COALESCE)));
    }
    Ok(d)
}

/// A failure with its exit code: 2 for bad input, 3 for a broken run.
struct Failure(u8, anyhow::Error);

fn bad_input(e: impl Into<anyhow::Error>) -> Failure {
    Failure(2, e.into())
}

fn broken(e: impl Into<anyhow::Error>) -> Failure {
    Failure(3, e.into())
}

/// One thread by default: a current-thread runtime measured 18-36% less CPU per request than a multi-thread one
/// here (no wake-ups of sibling workers to steal work). `--threads N` spreads the lanes over N workers when one
/// core is not enough.
fn runtime(threads: u16) -> Result<tokio::runtime::Runtime, Failure> {
    let mut builder = match threads {
        0 | 1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(usize::from(n));
            b
        }
    };
    builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(broken)
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    let result = match args.command.take() {
        Some(Command::Agent(agent)) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "warn".into()),
                )
                .with_writer(std::io::stderr)
                .init();
            runtime(agent.threads).and_then(|rt| rt.block_on(run_agent(agent)))
        }
        None => runtime(args.threads).and_then(|rt| rt.block_on(run(args))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, error)) => {
            eprintln!("loadgen: error: {error:#}");
            ExitCode::from(code)
        }
    }
}

fn build_spec(args: &Args, path: String) -> Result<LoadSpec, Failure> {
    let mut spec = match &args.spec {
        Some(file) => {
            let text = faultline_units::input::read_capped_text(
                file,
                faultline_units::input::MAX_CONFIG_SIZE,
            )
            .map_err(bad_input)?;
            let mut spec = serde_saphyr::from_str::<LoadSpec>(&text)
                .with_context(|| format!("{} is not a valid load spec", file.display()))
                .map_err(bad_input)?;
            // A timetable is named relative to the spec that names it, as a scenario's is.
            if let (Some(r), Some(dir)) = (spec.replay.as_mut(), file.parent()) {
                r.file = dir.join(&r.file).display().to_string();
            }
            spec
        }
        None => {
            let mut template = RequestTemplate {
                body: args.body.clone(),
                ..Default::default()
            };
            let slot = match args.method.to_ascii_uppercase().as_str() {
                "GET" => &mut template.get,
                "POST" => &mut template.post,
                "PUT" => &mut template.put,
                "PATCH" => &mut template.patch,
                "DELETE" => &mut template.delete,
                "HEAD" => &mut template.head,
                other => {
                    return Err(bad_input(anyhow::anyhow!(
                        "--method {other}: use GET, POST, PUT, PATCH, DELETE or HEAD"
                    )))
                }
            };
            *slot = Some(path);
            for h in &args.headers {
                let (name, value) = h.split_once(':').ok_or_else(|| {
                    bad_input(anyhow::anyhow!(
                        "--header {h:?}: write it as \"name: value\""
                    ))
                })?;
                template
                    .headers
                    .insert(name.trim().to_string(), value.trim().to_string());
            }
            let mut spec = LoadSpec::constant(Rate::per_second(1.0), "/");
            spec.requests = vec![template];
            spec
        }
    };
    if let Some(rate) = args.rate {
        spec.rate = Some(RateSpec::Constant(rate));
        spec.replay = None;
    }
    if let Some(t) = args.timeout {
        spec.timeout = t;
    }
    if let Some(n) = args.max_in_flight {
        spec.max_in_flight = n;
    }
    if let Some(n) = args.connections {
        spec.connections = n;
    }
    if let Some(c) = args.coalesce {
        spec.coalesce = c;
    }
    if let Some(a) = args.arrivals {
        spec.arrivals = match a {
            ArrivalsArg::Uniform => Arrivals::Uniform,
            ArrivalsArg::Poisson => Arrivals::Poisson,
        };
    }
    if args.fallback_header.is_some() {
        spec.fallback_header = args.fallback_header.clone();
    }
    if args.ca.is_some() || args.insecure {
        let tls = spec.tls.get_or_insert_with(Default::default);
        if args.ca.is_some() {
            tls.ca = args.ca.clone();
            tls.insecure = false;
        }
        tls.insecure |= args.insecure;
    }
    spec.validate().map_err(bad_input)?;
    Ok(spec)
}

async fn run_agent(args: AgentArgs) -> Result<(), Failure> {
    let options = loadgen::agent::AgentOptions {
        runner: args.runner,
        index: args.index,
        connect_for: args.connect_for.get(),
    };
    match loadgen::agent::run(options).await {
        Ok(report) => {
            eprintln!(
                "loadgen agent: share {} of {} done, {} arrivals{}",
                report.share.index,
                report.share.of,
                report.intended,
                if report.stopped_early {
                    " (stopped early by the runner)"
                } else {
                    ""
                }
            );
            Ok(())
        }
        Err(e) => Err(Failure(e.exit_code(), e.into())),
    }
}

async fn run(args: Args) -> Result<(), Failure> {
    // clap requires both without a subcommand.
    let (Some(url), Some(duration)) = (args.url.clone(), args.duration) else {
        return Err(bad_input(anyhow::anyhow!(
            "--url and --duration are required"
        )));
    };
    let (base, path) = loadgen::split_url(&url, &args.allow_hosts).map_err(bad_input)?;
    let spec = build_spec(&args, path)?;
    // The table needs no time series; JSON carries it unless a file takes it as it goes.
    let (series, writer) = match &args.series {
        Some(file) => {
            let (series, writer) = SeriesWriter::create(file).map_err(bad_input)?;
            (series, Some(writer))
        }
        None if args.json => (Series::Keep, None),
        None => (Series::Discard, None),
    };
    let options = RunOptions {
        seed: args.seed,
        bucket: args.bucket.get(),
        allow_hosts: args.allow_hosts.clone(),
        series,
        correlate: args
            .correlate
            .then(faultline_units::trace::Correlate::default),
        ..RunOptions::new(base, duration.get())
    };
    let origin = tokio::time::Instant::now();
    let run = match args.users {
        Some(users) => loadgen::start_closed(spec, options, users, origin),
        None => loadgen::start(spec, options, origin),
    }
    .map_err(bad_input)?;
    let live = std::io::stderr().is_terminal() && !args.json;
    let watch = run.watch();
    let watcher = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick(), if live => progress_line(&watch.progress()),
                _ = tokio::signal::ctrl_c() => {
                    watch.stop();
                    eprintln!("\n  stopping: waiting for requests in flight to finish");
                    break;
                }
            }
        }
    });
    let recording = run.finish().await;
    watcher.abort();
    if let Some(writer) = writer {
        writer.finish().map_err(broken)?;
    }
    if live {
        eprintln!();
    }

    if let Some(file) = &args.hgrm {
        let corrected = recording.histogram(Measure::Corrected, None, |o| o != Outcome::Dropped);
        let text = hgrm::write(
            &corrected,
            hgrm::MILLISECONDS,
            hgrm::DEFAULT_TICKS_PER_HALF_DISTANCE,
        );
        std::fs::write(file, text)
            .with_context(|| format!("cannot write {}", file.display()))
            .map_err(broken)?;
    }
    if args.json {
        let json = serde_json::to_string_pretty(&recording)
            .context("cannot serialise the recording")
            .map_err(broken)?;
        println!("{json}");
    } else {
        print!("{}", summary::render(&recording, &url));
    }
    if !recording.conservation.holds {
        return Err(broken(anyhow::anyhow!(
            "request conservation failed: {:?}",
            recording.conservation
        )));
    }
    Ok(())
}

fn progress_line(p: &loadgen::Progress) {
    let c = &p.by_class;
    let errors = c.client_error + c.server_error + c.timeout + c.connect_error;
    let p99 = p
        .p99_last_second
        .map(|d| summary::human(d.get().as_nanos() as u64))
        .unwrap_or_else(|| "-".into());
    eprint!(
        "\r  {:>6.1}s  sent {}  in flight {}  dropped {}  errors {}  fallback {}  p99 (last 1s) {}    ",
        p.elapsed.as_secs_f64(),
        p.sent,
        p.in_flight,
        p.dropped,
        errors,
        c.fallback,
        p99
    );
    let _ = std::io::stderr().flush();
}

/// Writes a streamed time series as JSON lines on a thread of its own, so that file I/O never holds up the
/// recorder's lock or the sending thread.
struct SeriesWriter {
    file: PathBuf,
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

impl SeriesWriter {
    fn create(file: &PathBuf) -> anyhow::Result<(Series, SeriesWriter)> {
        let out = std::fs::File::create(file)
            .with_context(|| format!("--series: cannot create {}", file.display()))?;
        let (sender, receiver) = std::sync::mpsc::channel::<Bucket>();
        let thread = std::thread::Builder::new()
            .name("loadgen-series".into())
            .spawn(move || {
                let mut out = std::io::BufWriter::new(out);
                // Ends when the recording is taken: the recorder drops its sender then.
                for bucket in receiver {
                    serde_json::to_writer(&mut out, &bucket)?;
                    out.write_all(b"\n")?;
                }
                out.flush()
            })
            .context("cannot start the series writer")?;
        let writer = SeriesWriter {
            file: file.clone(),
            thread,
        };
        Ok((Series::Stream(sender), writer))
    }

    fn finish(self) -> anyhow::Result<()> {
        match self.thread.join() {
            Ok(result) => result
                .with_context(|| format!("cannot write the series to {}", self.file.display())),
            Err(_) => Err(anyhow::anyhow!("the series writer panicked")),
        }
    }
}
