//! `faultline size`: reads the numbers (a run's folder, a record `faultline import` reads, the command line), sizes
//! the breaker (`crate::size`), prints the arithmetic or its JSON, and writes the scenario with `-o`. Not for the
//! arithmetic itself.

use std::path::{Path, PathBuf};

use faultline_units::{Dur, Rate, Share, Size};

use crate::import::{Format, ImportOptions, PhaseMode};
use crate::size::{self, CommandSut, Evidence, Fallback, Given, Target};

/// `faultline size`'s flags.
#[derive(Debug, Clone, clap::Args)]
#[group(skip)]
pub struct SizeOptions {
    /// The record: a run's folder (reports/<scenario>/<stamp>), or the files of an access log, a HAR file or a
    /// trace export read with --format as `faultline import` reads them. Numbers given as flags override it.
    #[arg(value_name = "RECORD")]
    pub record: Vec<PathBuf>,
    /// The record's format, for files (as `faultline import --format`): nginx, envoy, haproxy, har, otlp-json, or
    /// regex:PATTERN.
    #[arg(long, value_parser = |s: &str| s.parse::<Format>())]
    pub format: Option<Format>,
    /// nginx: the log_format the log was written with (as `faultline import --log-format`).
    #[arg(long, requires = "format")]
    pub log_format: Option<String>,
    /// The step the record is read in, e.g. 1s, 500ms (a run's folder: its own buckets added up to it).
    #[arg(long, default_value = "1s")]
    pub bucket: Dur,
    /// The most one HAR or OTLP/JSON file of the record may hold.
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub max_input_size: Size,
    /// The longest line an access log of the record may hold.
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    pub max_line_length: Size,
    /// Which dependency of the record to size (a route of the run, a peer of the record); default: the busiest.
    #[arg(long, value_name = "NAME")]
    pub dependency: Option<String>,
    /// The dependency's healthy p99, e.g. 80ms.
    #[arg(long, value_name = "DURATION")]
    pub p99: Option<Dur>,
    /// Calls per second to the dependency over all instances, e.g. 500/s.
    #[arg(long, value_name = "RATE")]
    pub rate: Option<Rate>,
    /// Instances of the calling service sharing that rate, each with its own breaker and pool.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub instances: u32,
    /// Connections (or the bulkhead's size) per instance; default: recommended from the timeout.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub pool: Option<u32>,
    /// The dependency's latency when degraded, e.g. 2s; read from the record's degradation if it has one.
    #[arg(long, value_name = "DURATION")]
    pub degraded: Option<Dur>,
    /// The failure rate that trips the breaker.
    #[arg(long, value_name = "SHARE", default_value = "50%")]
    pub failure_rate: Share,
    /// The breaker's rolling window.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub window: Dur,
    /// Calls the window must hold before the failure rate counts.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub min_calls: u32,
    /// How long the breaker stays open; default 30s with a fallback, 5s without one (seed 000).
    #[arg(long, value_name = "DURATION")]
    pub open_for: Option<Dur>,
    /// What serves requests while the breaker is open.
    #[arg(long, value_enum, default_value_t = Fallback::Stale)]
    pub fallback: Fallback,
    /// Probes let through at once when half-open.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub half_open_calls: u32,
    /// Successful probes that close the breaker.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub close_after: u32,
    /// Write a scenario that encodes the settings and the expectations they must meet (replaying the recorded
    /// degradation when there is one), validated as written; `-` prints it.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Replace the output file if it exists.
    #[arg(long, requires = "output")]
    pub force: bool,
    /// The scenario's name (default: sized-<dependency> or sized).
    #[arg(long, requires = "output")]
    pub name: Option<String>,
    /// The scenario drives this command instead of the bundled demo, the settings in its environment
    /// (BREAKER_TIMEOUT_MS, BREAKER_WINDOW_MS, ...).
    #[arg(long, value_name = "CMD", requires = "output")]
    pub command: Option<String>,
    /// With --command: the variable through which the service finds its dependency's base URL.
    #[arg(long, value_name = "NAME", default_value = "DEPENDENCY_URL")]
    pub dependency_env: String,
    /// With --command: the variable the service reads its port from.
    #[arg(long, value_name = "NAME", default_value = "PORT")]
    pub port_env: String,
    /// With --command: the path the load GETs, one that makes the service call its dependency.
    #[arg(long, value_name = "PATH", default_value = "/")]
    pub get: String,
    /// Print the figures as one JSON object instead of the text: `numbers`, `timeout`, `in_flight`, `breaker`,
    /// `open_window`, `half_open`, `warnings`.
    #[arg(long)]
    pub json: bool,
}

impl SizeOptions {
    fn given(&self) -> Given {
        Given {
            p99: self.p99,
            rate: self.rate.map(Rate::per_sec),
            instances: self.instances,
            pool: self.pool,
            degraded: self.degraded,
            failure_rate: self.failure_rate,
            window: self.window,
            min_calls: self.min_calls,
            open_for: self.open_for,
            fallback: self.fallback,
            half_open_calls: self.half_open_calls,
            close_after: self.close_after,
        }
    }

    /// The record's numbers, if a record is named.
    fn evidence(&self) -> Result<Option<Evidence>, String> {
        let Some(first) = self.record.first() else {
            return Ok(None);
        };
        if first.is_dir() {
            if self.record.len() > 1 {
                return Err("a run's folder is read alone: name one".into());
            }
            if self.format.is_some() {
                return Err(format!(
                    "{} is a run's folder, read without --format",
                    first.display()
                ));
            }
            return size::from_run(first, self.dependency.as_deref(), self.bucket.as_secs_f64())
                .map(Some)
                .map_err(|e| e.to_string());
        }
        let Some(format) = self.format.clone() else {
            return Err(format!(
                "{}: give the record's --format (nginx, envoy, haproxy, har, otlp-json, regex:PATTERN), or name a \
                 run's folder",
                first.display()
            ));
        };
        let options = ImportOptions {
            format,
            log_format: self.log_format.clone(),
            bucket: self.bucket.as_secs_f64(),
            speed: 1.0,
            scale_rate: 1.0,
            redact: true,
            name: None,
            progress: false,
            max_input_size: self.max_input_size,
            max_line_length: self.max_line_length,
            phases: PhaseMode::Found,
        };
        size::from_record(&self.record, &options, self.dependency.as_deref())
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

/// Sizes, prints, and writes the scenario when asked; the exit code: 0 done, 2 the record or the flags were wrong.
pub fn size(o: &SizeOptions, invocation: &str) -> i32 {
    let evidence = match o.evidence() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let sizing = match size::sizing(&o.given(), evidence.as_ref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let to_stdout = o.output.as_deref() == Some(Path::new(faultline_units::input::STDIN));
    // With `-o -` the scenario is standard output, and what is said goes to standard error.
    let said = if o.json {
        format!(
            "{}\n",
            serde_json::to_string_pretty(&sizing).unwrap_or_default()
        )
    } else {
        size::text(&sizing)
    };
    if to_stdout {
        eprint!("{said}");
    } else {
        print!("{said}");
    }
    let Some(out) = &o.output else {
        return 0;
    };
    let target = match &o.command {
        Some(command) => Target::Command(CommandSut {
            command: match shlex::split(command).filter(|w| !w.is_empty()) {
                Some(words) => words,
                None => {
                    eprintln!("error: --command {command:?}: an unclosed quote, or nothing to run");
                    return 2;
                }
            },
            dependency_env: o.dependency_env.clone(),
            port_env: o.port_env.clone(),
            get: o.get.clone(),
        }),
        None => Target::Demo,
    };
    let name = o.name.clone().unwrap_or_else(|| {
        sizing
            .numbers
            .dependency
            .as_deref()
            .map(crate::import::route_name)
            .map_or("sized".to_string(), |d| format!("sized-{d}"))
    });
    let text = match size::scenario(&sizing, evidence.as_ref(), &target, &name, invocation) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let out = (!to_stdout).then_some(out.as_path());
    super::written::deliver(
        &text,
        out,
        o.force,
        "<faultline size>",
        "these numbers make",
    )
}
