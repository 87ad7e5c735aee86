//! The `faultline` command: parses the command line and hands each command to `faultline::commands`, which does the
//! work and returns the exit code. Not for any command's logic: that lives in the library, where it is tested.
//! Exit codes: 0 every expectation held, 1 an expectation failed, 2 the scenario or the command was wrong, 3 the run
//! itself broke (the SUT would not start or died, a port was taken, requests were not conserved), 4 nothing failed
//! but an expectation could not be judged, 130 interrupted.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use faultline::commands;
use faultline::scenario::Overrides;
use faultline_units::Scale;

#[derive(Parser)]
#[command(
    name = "faultline",
    version,
    about = "Chaos-testing harness for the resilience of HTTP services",
    long_about = "faultline runs an incident against a service: a fake dependency (faultd) slows, fails or browns out \
on a schedule while an open-model load generator drives the service under test through it. It records HDR latency, \
the calls in flight at the dependency and the service's circuit-breaker transitions, and checks them against the \
scenario's expectations.",
    after_help = "Examples:\n  faultline run scenarios/slow-dependency.yaml\n  faultline run scenarios/slow-dependency.yaml --time-scale 0.2 --report-dir /tmp/run1\n  faultline sweep scenarios/slow-dependency.yaml --vary timeout=250ms,5s --time-scale 0.5\n  faultline init --command \"python3 app.py\" --dependency-env PRICING_URL -o my-service.yaml\n  faultline validate scenarios/*.yaml\n  faultline schema > scenario.schema.json\n  faultline compare reports/x/run-a reports/x/run-b --threshold 10%\n  faultline k8s tests/fixtures/k8s/slow-dependency.yaml --agents 4 --image registry.example.com/faultline:0.1.0\n\nExit codes: 0 all expectations held, 1 an expectation failed, 2 bad scenario or usage, 3 the run broke, 4 nothing failed but an expectation could not be judged (inconclusive), 130 interrupted."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario and judge it.
    Run {
        /// The scenario file (YAML).
        scenario: PathBuf,
        /// Where to write the report (default reports/<scenario>/<UTC timestamp>/).
        #[arg(long)]
        report_dir: Option<PathBuf>,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Multiply every duration by this factor and divide every rate by it (0.2 runs five times faster with the
        /// same counts: calls per breaker window, calls in flight, probes). From 0.001 to 1000.
        #[arg(long, default_value = "1")]
        time_scale: Scale,
        /// Turn on one of the demo service's mistake switches (repeatable), e.g. --mistake no_timeout.
        #[arg(long, value_enum)]
        mistake: Vec<demo::Mistake>,
        /// Print result.json to stdout instead of the summary.
        #[arg(long)]
        json: bool,
        /// Serve live Prometheus metrics (faultline_*) at http://ADDR/metrics while the run goes on, e.g.
        /// 127.0.0.1:9464. An address that is taken is reported, and the run goes on.
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<std::net::SocketAddr>,
        /// Allow --metrics-listen on an address that is not loopback.
        #[arg(long)]
        metrics_allow_remote: bool,
        /// After the run, keep serving --metrics-listen until a scrape has read the final values (every verdict,
        /// the last requests counted) or this long has passed, e.g. 20s for a 15 s scrape interval. With 0s the
        /// endpoint closes as the run ends and a scraper may never see the final values.
        #[arg(long, value_name = "DURATION", default_value = "0s")]
        metrics_linger: faultline_units::Dur,
        /// Push the final metrics to this Prometheus Pushgateway when the run ends, e.g. http://127.0.0.1:9091.
        #[arg(long, value_name = "URL")]
        push: Option<String>,
        /// Spread the load over N agents, each sending every N-th arrival of the timetable from one shared t = 0;
        /// their histograms are added up and the whole is judged. Without --agents-listen, N agent processes
        /// start on this machine.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(faultline::agents::MAX_AGENTS)))]
        agents: Option<u32>,
        /// Wait for N agents started elsewhere (`loadgen agent --runner HOST:PORT`, a Kubernetes Indexed Job)
        /// to dial this address, e.g. 0.0.0.0:7070, instead of starting them here.
        #[arg(long, value_name = "ADDR", requires = "agents")]
        agents_listen: Option<std::net::SocketAddr>,
        /// Allow --agents-listen on an address that is not loopback.
        #[arg(long, requires = "agents_listen")]
        agents_allow_remote: bool,
        /// How long to wait for every agent to register, e.g. 5m on a cluster that pulls images first.
        #[arg(
            long,
            value_name = "DURATION",
            default_value = "30s",
            requires = "agents"
        )]
        agents_wait: faultline_units::Dur,
    },
    /// One share of a distributed run, as `loadgen agent` (which see); `faultline run --agents N` starts these.
    #[command(hide = true)]
    Agent {
        /// The runner's agent listener, HOST:PORT.
        #[arg(long, env = "FAULTLINE_RUNNER")]
        runner: String,
        /// This agent's index (0 to N-1).
        #[arg(long, env = "JOB_COMPLETION_INDEX")]
        index: Option<u32>,
        /// How long to keep dialling a runner that is not listening yet.
        #[arg(long, default_value = "2m")]
        connect_for: faultline_units::Dur,
    },
    /// Run a scenario twice against the demo service: with its recommended configuration every expectation must
    /// hold; with the scenario's `proof.mistake` switched on, the expectations in `proof.fails` must fail.
    Prove {
        /// The scenario files, each with a `proof:` (the library's: scenarios/*.yaml).
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// Where to write the reports (default reports/<scenario>/<UTC timestamp>-{recommended,mistake}/).
        #[arg(long)]
        report_dir: Option<PathBuf>,
        /// As `run --time-scale`, for both runs.
        #[arg(long, default_value = "1")]
        time_scale: Scale,
        /// Override each scenario's seed, for both runs.
        #[arg(long)]
        seed: Option<u64>,
        /// Spread both runs' load over N local agents (see `run --agents`).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(faultline::agents::MAX_AGENTS)))]
        agents: Option<u32>,
        /// Print one JSON array instead of the text, an object per scenario that ran: `scenario`, `file`, `proven`,
        /// `problems`, `mistake`, and `recommended` and `with_mistake` with each run's `exit_code` and `report`
        /// (and the sentences of the expectations that `failed` with the mistake).
        #[arg(long)]
        json: bool,
    },
    /// Run a scenario once per combination of the varied parameters and compare which combinations pass which
    /// expectations, and by how much.
    #[command(
        long_about = "Run a scenario once per combination of the values given with --vary (their cartesian product, \
the first --vary changing slowest), one run after another, each time-scaled and with the same seed, and compare \
them: a table of which combinations pass which expectations, each cell with its margin (how far the measured figure \
was from its bound: + room left, - shortfall, also relative to the bound).\n\n\
For the bundled demo, NAME is a field of an operation's config, [OPERATION.]FIELD (timeout, pool, fallback, \
open_for, failure_rate, window, min_calls, retries.max, ...; the operation may be left out when the scenario's demo \
calls one). For a command or URL SUT, any NAME, read by the SUT as the placeholder {param.NAME} (the value as \
written) and, for a duration, {param.NAME.ms}, {param.NAME.secs} and {param.NAME.dur}, scaled by --time-scale; a \
NAME the SUT never reads is refused. Every combination is loaded before the first run, so a value the scenario \
refuses stops the sweep before anything runs.\n\n\
The number of runs and the real time they take at least are printed first; more than 20 runs are confirmed on the \
terminal, or by --yes. Each run's report goes into a folder of the sweep's named after its combination, and after \
each run the sweep's folder gets sweep.md, sweep.json and sweep.html (one page comparing the combinations). Ctrl-C \
ends the run in progress and keeps the table of the runs done, that run marked interrupted. docs/sweep.md has the \
whole story.",
        after_help = "Examples:\n  faultline sweep scenarios/slow-dependency.yaml --vary timeout=250ms,5s --time-scale 0.5\n  \
faultline sweep scenarios/slow-dependency.yaml --vary timeout=100ms,250ms,1s --vary open_for=5s,30s --time-scale 0.2\n  \
faultline sweep my-service.yaml --vary timeout=100ms,500ms --json > sweep.json\n\n\
Exit codes: 0 at least one combination passed every expectation, 1 none did, 2 bad scenario, --vary or usage \
(nothing ran), 3 a run broke or the table could not be written, 130 interrupted (the table of the runs done is kept)."
    )]
    Sweep(SweepArgs),
    /// Write a commented first scenario for a service faultline did not build, validated as written.
    #[command(
        long_about = "Write a commented first scenario for a service faultline did not build: its dependency (faultd) \
fails every call for 10 s, and the service's breaker must open, keep the service fast, and close after the recovery. \
The scenario is validated before it is written; edit it from there (docs/your-service.md).",
        after_help = "Examples:\n  faultline init --command \"python3 app.py\" --dependency-env PRICING_URL -o my-service.yaml\n  \
faultline init --url http://127.0.0.1:8080 --listen 127.0.0.1:9000 --get /quote/1 --breaker-metric pricing_breaker_state\n  \
faultline init --command \"./prices --port {sut.port}\" --grpc shop.Prices/Get --message 0a023432",
        group(clap::ArgGroup::new("service").required(true).args(["command", "url"]))
    )]
    Init {
        #[command(flatten)]
        service: commands::InitOptions,
        /// Where to write the scenario; stdout when left out or `-`.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Replace the output file if it exists.
        #[arg(long, requires = "output")]
        force: bool,
    },
    /// Check scenario files without running them.
    Validate {
        /// The scenario files; `-` reads one from standard input.
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// Print one JSON array, an object per file: `valid`, with `expectations` and `phases`, or `errors`
        /// (`line`, `column`, `field`, `message`).
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON Schema of the scenario format (for editor completion).
    Schema,
    /// Print the shell completion script of faultline (bash, zsh, fish, elvish or powershell).
    #[command(
        after_help = "Examples:\n  faultline completions bash > ~/.local/share/bash-completion/completions/faultline\n  faultline completions zsh > ~/.zfunc/_faultline     # with fpath+=~/.zfunc before compinit\n  faultline completions fish > ~/.config/fish/completions/faultline.fish"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: commands::Shell,
    },
    /// Print faultline's man page, or write it and one page per command into a folder.
    #[command(
        after_help = "Examples:\n  faultline man | man -l -\n  faultline man --dir ~/.local/share/man/man1     # faultline.1, faultline-run.1, ..."
    )]
    Man {
        /// Write faultline.1 and faultline-COMMAND.1 for each command into DIR (made if missing) instead of
        /// printing faultline.1.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Render a run's report files again from its saved data (result.json, load.json, dependency.json).
    Report {
        /// The run directory, e.g. reports/slow-dependency/2026-11-30T09-00-00Z.
        run_dir: PathBuf,
        /// How to print the summary: text, markdown (as a CI job's summary page shows it), or json (result.json).
        #[arg(long, value_enum, default_value_t = commands::Format::Text)]
        format: commands::Format,
        /// The same as `--format json`.
        #[arg(long, conflicts_with = "format")]
        json: bool,
    },
    /// Compare two runs phase by phase; exit 1 if any percentile of B is slower than A by more than the threshold.
    Compare {
        run_a: PathBuf,
        run_b: PathBuf,
        /// The allowed slowdown, relative: "10%" or "0.1".
        #[arg(long, default_value = "10%")]
        threshold: String,
        /// Print one JSON object instead of the table: `a`, `b`, `threshold`, `phases` (each with its
        /// `percentiles`: `a_ms`, `b_ms`, `diff_ms`, `relative`, `regressed`), `only_in_a`, `only_in_b`, `verdicts`
        /// and `regressed`.
        #[arg(long)]
        json: bool,
    },
    /// Turn the record of an incident (access logs, HAR files, OTLP/JSON traces) into a scenario: the load as it arrived, each dependency's
    /// latency histogram and status mix phase by phase (or bucket by bucket), and phases found from change points.
    Import {
        /// The record's files, read in order (e.g. access.log.1 access.log); `-` reads standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The record's format: nginx, envoy, haproxy, har, otlp-json, or regex:PATTERN with named groups (time,
        /// method, path or request, status, duration, upstream, upstream_duration, upstream_status).
        #[arg(long, value_parser = |s: &str| s.parse::<faultline::import::Format>())]
        format: faultline::import::Format,
        /// nginx: the log_format the log was written with (default: combined), e.g.
        /// '$remote_addr [$time_local] "$request" $status $request_time $upstream_addr $upstream_response_time'.
        #[arg(long)]
        log_format: Option<String>,
        /// Where to write the scenario (validated once written); stdout when left out or `-`.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// The step of the rate curve and of the dependency's timeline, e.g. 1s, 500ms.
        #[arg(long, default_value = "1s")]
        bucket: faultline_units::Dur,
        /// Play the record this many times faster (every time and latency divided by it, every rate multiplied),
        /// from 0.001 to 1000.
        #[arg(long, default_value = "1")]
        speed: Scale,
        /// Offer this many times the recorded traffic, from 0.001 to 1000.
        #[arg(long, default_value = "1")]
        scale_rate: Scale,
        /// Drop query strings from the request templates.
        #[arg(long)]
        redact: bool,
        /// The scenario's name (default: the first file's name).
        #[arg(long)]
        name: Option<String>,
        /// Replay the load exactly: write every recorded request (time, method, path) to NAME.timetable beside the
        /// scenario (-o) and play it with load.replay, instead of a rate per bucket.
        #[arg(long)]
        replay_load: bool,
        /// How the dependency changes: `found`, one phase per phase found from change points (healthy,
        /// degraded-1, ..., recovered), each playing all its buckets' latency and status mix; `buckets`, one phase
        /// per bucket, each playing its own.
        #[arg(long, default_value = "found", value_parser = |s: &str| s.parse::<faultline::import::PhaseMode>())]
        phases: faultline::import::PhaseMode,
        /// The most one HAR or OTLP/JSON file may hold (each is read whole or a document at a time), e.g. 1GiB.
        #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = at_least_a_byte)]
        max_input_size: faultline_units::Size,
        /// The longest line an access log may hold (logs are streamed a line at a time, whatever their length).
        #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = at_least_a_byte)]
        max_line_length: faultline_units::Size,
        /// Print what was read as one JSON object on stdout instead of lines on stderr: `format`, `lines`,
        /// `requests`, `bad_lines`, `first_bad_lines`, `dependencies`, `phases` (`name`, `degraded`, `buckets`,
        /// `from_s`, `to_s`), `scenario` (the file written), `timetable`, and `yaml` (the scenario, without -o).
        #[arg(long)]
        json: bool,
    },
    /// Size a breaker from real numbers: the timeout, the calls in flight against the pool, the failure-rate
    /// threshold against the calls per window, the open window against the fallback, and the half-open rule, each
    /// with its reason; optionally a scenario that proves them.
    #[command(
        long_about = "Size a breaker from real numbers, by the arithmetic of the seeds (docs/sizing.md): the timeout \
(about 3x the healthy p99, and the share of healthy calls it cuts off the recorded distribution), the calls in flight \
when the dependency degrades with and without it against the pool (Little's law), the failure-rate threshold against \
the calls each instance sees per window (with a warning when the floor can never be met), the open window against \
the fallback, and the half-open rule.\n\nThe numbers come from a record (a run's folder, or what `faultline import` \
reads) or from the flags; a flag overrides the record. With -o it writes a scenario that encodes the settings and \
the expectations they must meet, replaying the recorded degradation when there is one.",
        after_help = "Examples:\n  faultline size --p99 60ms --rate 400/s --pool 200 --degraded 3s\n  faultline size --rate 6/s --instances 60 --p99 100ms\n  faultline size reports/slow-dependency/2026-12-07T09-00-00Z --pool 200\n  faultline size access.log --format nginx --rate 400/s -o sized.yaml\n\nExit codes: 0 sized (and written), 2 the record or a flag was wrong."
    )]
    Size(Box<commands::SizeOptions>),
    /// Write the Kubernetes manifests of a distributed run: the runner as a Job that N agents (an Indexed Job of
    /// `loadgen agent` pods) dial through its Service, the scenario in a ConfigMap, the report on a volume claim.
    #[command(
        long_about = "Write the Kubernetes manifests of a distributed run of SCENARIO, for `kubectl apply`.\n\n\
The runner is a Job of one pod (`faultline run --agents N --agents-listen 0.0.0.0:7070`) whose exit code is the \
verdict; a Service gives it the name the agents dial. The agents are an Indexed Job of N pods running \
`loadgen agent`, each taking its index from JOB_COMPLETION_INDEX and its share of the load from the runner. The \
scenario, and every file it names by a relative path (a replayed trace, a timetable, gRPC message files, \
certificates), travel in a ConfigMap mounted at /scenario; the report is written to a ReadWriteOnce volume claim, \
in a folder named after the runner's pod. Both Jobs run once (backoffLimit 0) and end by a deadline: the \
scenario's duration + the load's timeout + --deadline-margin.\n\n\
The scenario is validated first. Its SUT must be a `url:` of a service running in the cluster, listed under \
`allow_hosts`: the bundled demo and a `command` run inside the runner's pod, where the agents cannot reach them.\n\n\
Everything goes into one multi-document file, DIR/faultline.yaml, in the order kubectl must meet the objects: one \
run is applied, inspected and deleted as one (`kubectl apply -f` / `kubectl delete -f`), and one file is easy to \
review, keep beside the scenario, or hand to kustomize. docs/distributed.md has the whole procedure.",
        after_help = "Example:\n  faultline k8s tests/fixtures/k8s/slow-dependency.yaml --agents 4 --image registry.example.com/faultline:0.1.0 -n shop\n  kubectl apply -f k8s/slow-dependency/faultline.yaml\n\nExit codes: 0 the manifests were written, 2 the scenario, an option or a file the scenario names was wrong (nothing is written)."
    )]
    K8s(Box<K8sArgs>),
    /// List the scenarios in a folder with their descriptions.
    List {
        /// The folder of scenarios.
        #[arg(default_value = "scenarios")]
        dir: PathBuf,
        /// Print one JSON array, an object per file: `file`, `name`, `duration_s`, `description`, or `error`.
        #[arg(long)]
        json: bool,
    },
}

/// `faultline sweep`'s arguments.
#[derive(clap::Args)]
struct SweepArgs {
    /// The scenario file (YAML).
    scenario: PathBuf,
    /// A parameter and its values, NAME=V1,V2,... (repeatable): timeout=100ms,250ms,1s, pricing.open_for=5s,30s,
    /// retries.max=0,2. A value with commas of its own is written in braces, brackets or quotes.
    #[arg(long, value_name = "NAME=V1,V2,...", required = true, value_parser = |s: &str| s.parse::<faultline::sweep::Vary>())]
    vary: Vec<faultline::sweep::Vary>,
    /// As `run --time-scale`, for every run.
    #[arg(long, default_value = "1")]
    time_scale: Scale,
    /// Override the scenario's seed, for every run.
    #[arg(long)]
    seed: Option<u64>,
    /// The sweep's folder (default reports/<scenario>/sweep-<UTC timestamp>/), each run's report in a folder of
    /// its own named after its combination.
    #[arg(long)]
    report_dir: Option<PathBuf>,
    /// Make more than 20 runs without asking.
    #[arg(long, short)]
    yes: bool,
    /// Print sweep.json instead of the table: `scenario`, `file`, `time_scale`, `seed`, `parameters` (`name`,
    /// `reaches`, `values`), `planned`, `expectations` (`key`, `name`), `runs` (`label`, `combination`,
    /// `status`, `exit_code`, `report`, `cells`: `expectation`, `outcome`, `measured`, `bound`, `margin`,
    /// `relative_margin`, `sentence`) and `interrupted`.
    #[arg(long)]
    json: bool,
}

impl SweepArgs {
    /// The sweep these arguments ask for.
    fn options(self) -> commands::SweepOptions {
        commands::SweepOptions {
            varies: self.vary,
            time_scale: self.time_scale.get(),
            seed: self.seed,
            report_dir: self.report_dir,
            yes: self.yes,
            json: self.json,
        }
    }
}

/// `faultline k8s`'s arguments, boxed in [`Command`]: they outweigh every other command's.
#[derive(clap::Args)]
struct K8sArgs {
    /// The scenario file (YAML); its SUT must be a `url:` reachable in the cluster.
    scenario: PathBuf,
    /// How many agents share the load, 1 to 1000.
    #[arg(long, value_name = "N", value_parser = faultline::k8s::parse_agents)]
    agents: u32,
    /// The image holding faultline, faultd and loadgen (built from the Containerfile), e.g.
    /// registry.example.com/faultline:0.1.0.
    #[arg(long)]
    image: String,
    /// The folder to write faultline.yaml in (default k8s/NAME).
    #[arg(short, long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// The namespace of every object (default: kubectl's current namespace).
    #[arg(short, long)]
    namespace: Option<String>,
    /// The name every object is named after (NAME-runner, NAME-agents, ...); default: the scenario's name made
    /// a DNS label.
    #[arg(long)]
    name: Option<String>,
    /// CPU each agent requests. Limits default to the requests (the Guaranteed class): an agent squeezed by
    /// its neighbours sends late, and the lateness would count against the SUT.
    #[arg(long, value_name = "QUANTITY", default_value = "1", value_parser = quantity)]
    agent_cpu: faultline::k8s::Quantity,
    /// Memory each agent requests.
    #[arg(long, value_name = "QUANTITY", default_value = "512Mi", value_parser = quantity)]
    agent_memory: faultline::k8s::Quantity,
    /// CPU limit of each agent (default: --agent-cpu).
    #[arg(long, value_name = "QUANTITY", value_parser = quantity)]
    agent_cpu_limit: Option<faultline::k8s::Quantity>,
    /// Memory limit of each agent (default: --agent-memory).
    #[arg(long, value_name = "QUANTITY", value_parser = quantity)]
    agent_memory_limit: Option<faultline::k8s::Quantity>,
    /// CPU of the runner (request and limit): it merges the agents' histograms and judges the run.
    #[arg(long, value_name = "QUANTITY", default_value = "1", value_parser = quantity)]
    runner_cpu: faultline::k8s::Quantity,
    /// Memory of the runner (request and limit).
    #[arg(long, value_name = "QUANTITY", default_value = "1Gi", value_parser = quantity)]
    runner_memory: faultline::k8s::Quantity,
    /// Size of the report volume.
    #[arg(long, value_name = "QUANTITY", default_value = "1Gi", value_parser = quantity)]
    storage: faultline::k8s::Quantity,
    /// Storage class of the report volume (default: the cluster's default class).
    #[arg(long)]
    storage_class: Option<String>,
    /// Time both Jobs get beyond the scenario's duration and the load's timeout: for pods to be scheduled and
    /// pull the image, for the agents to register, and for the runner to write its report.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    deadline_margin: faultline_units::Dur,
    /// How long finished Jobs (and their pods' logs and exit codes) are kept before Kubernetes deletes them.
    #[arg(long, value_name = "DURATION", default_value = "24h")]
    ttl: faultline_units::Dur,
}

impl K8sArgs {
    /// The cluster options these arguments choose; limits left out follow the requests.
    fn options(self) -> faultline::k8s::ClusterOptions {
        faultline::k8s::ClusterOptions {
            agents: self.agents,
            image: self.image,
            name: self.name,
            namespace: self.namespace,
            agent: faultline::k8s::ContainerResources {
                cpu_limit: self
                    .agent_cpu_limit
                    .unwrap_or_else(|| self.agent_cpu.clone()),
                memory_limit: self
                    .agent_memory_limit
                    .unwrap_or_else(|| self.agent_memory.clone()),
                cpu: self.agent_cpu,
                memory: self.agent_memory,
            },
            runner: faultline::k8s::ContainerResources::guaranteed(
                self.runner_cpu,
                self.runner_memory,
            ),
            storage: self.storage,
            storage_class: self.storage_class,
            deadline_margin: self.deadline_margin.get(),
            ttl: self.ttl.get(),
        }
    }
}

/// Parses a cap on an input's size for clap: a cap of nothing would refuse every input.
fn at_least_a_byte(s: &str) -> Result<faultline_units::Size, String> {
    let size: faultline_units::Size = s.parse().map_err(|e| format!("{e}"))?;
    if size.bytes() == 0 {
        return Err("a cap must be at least 1B".into());
    }
    Ok(size)
}

/// Parses a Kubernetes quantity (`500m`, `2`, `512Mi`) for clap.
fn quantity(s: &str) -> Result<faultline::k8s::Quantity, String> {
    s.parse()
}

fn main() -> ExitCode {
    // Printing into a closed pipe (`faultline list | head`) ends the process quietly, as for any Unix tool,
    // instead of panicking on the write.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run {
            scenario,
            report_dir,
            seed,
            time_scale,
            mistake,
            json,
            metrics_listen,
            metrics_allow_remote,
            metrics_linger,
            push,
            agents,
            agents_listen,
            agents_allow_remote,
            agents_wait,
        } => commands::run_command(
            &scenario,
            report_dir,
            &Overrides {
                seed,
                time_scale: Some(time_scale.get()),
                mistakes: mistake,
                ..Overrides::default()
            },
            json,
            &commands::Exports {
                metrics_listen,
                allow_remote: metrics_allow_remote,
                push,
                linger: metrics_linger.get(),
                agents: agents.map(|count| faultline::agents::AgentsOptions {
                    count,
                    listen: agents_listen,
                    allow_remote: agents_allow_remote,
                    register_within: agents_wait.get(),
                    program: None,
                }),
            },
        ),
        Command::Agent {
            runner,
            index,
            connect_for,
        } => commands::agent(loadgen::agent::AgentOptions {
            runner,
            index,
            connect_for: connect_for.get(),
        }),
        Command::Prove {
            scenarios,
            report_dir,
            time_scale,
            seed,
            agents,
            json,
        } => commands::prove(&scenarios, report_dir, time_scale.get(), seed, agents, json),
        Command::Sweep(args) => {
            let scenario = args.scenario.clone();
            commands::sweep(&scenario, &args.options())
        }
        Command::Init {
            service,
            output,
            force,
        } => commands::init(&service, output.as_deref(), force),
        Command::Validate { scenarios, json } => commands::validate(&scenarios, json),
        Command::Schema => commands::schema(),
        Command::Completions { shell } => commands::completions(Cli::command(), shell),
        Command::Man { dir } => commands::man(Cli::command(), dir.as_deref()),
        Command::List { dir, json } => commands::list(&dir, json),
        Command::Import {
            files,
            format,
            log_format,
            output,
            bucket,
            speed,
            scale_rate,
            redact,
            name,
            replay_load,
            phases,
            max_input_size,
            max_line_length,
            json,
        } => commands::import(
            &files,
            &faultline::import::ImportOptions {
                format,
                log_format,
                bucket: bucket.as_secs_f64(),
                speed: speed.get(),
                scale_rate: scale_rate.get(),
                redact,
                name,
                progress: true,
                max_input_size,
                max_line_length,
                phases,
            },
            output.as_deref(),
            replay_load,
            json,
        ),
        Command::Size(options) => commands::size(
            &options,
            &std::iter::once("faultline".to_string())
                .chain(std::env::args().skip(1))
                .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
                .collect::<Vec<_>>()
                .join(" "),
        ),
        Command::K8s(args) => {
            let scenario = args.scenario.clone();
            let output = args.output.clone();
            commands::k8s(&scenario, &args.options(), output.as_deref())
        }
        Command::Report {
            run_dir,
            format,
            json,
        } => commands::report(&run_dir, if json { commands::Format::Json } else { format }),
        Command::Compare {
            run_a,
            run_b,
            threshold,
            json,
        } => commands::compare(&run_a, &run_b, &threshold, json),
    };
    ExitCode::from(code as u8)
}
