//! `faultline import`: turns the record of an incident (access logs, HAR files, trace exports: the formats of
//! [`Format`]) into a
//! scenario that validates and runs: the load that arrived (a rate per bucket), each dependency's behaviour bucket
//! by bucket (a latency histogram and the share of each status), phases found from change points in the
//! dependency's latency and error share, and commented-out expectations that describe what the SUT did.
//!
//! One file per format turns text into [`Record`]s; everything after that is shared and format-blind: `timeline`
//! adds records into buckets as they stream by (memory grows with the record's duration and number of request
//! templates, not with its number of lines), `templates` groups paths into request templates, `phases` finds
//! change points, `writer` writes the scenario's YAML. Not for running anything: the scenario it writes is run
//! like any other.

mod envoy;
mod expectations;
mod gather;
mod haproxy;
mod har;
mod nginx;
mod otlp;
mod pattern;
mod phases;
mod progress;
mod read;
mod templates;
mod time;
mod timeline;
pub mod timetable;
mod writer;
mod yaml_text;

use gather::{check, gather};
use read::*;

pub use gather::{read_record, ReadRecord};
pub use phases::{departs, find_phases, PhaseSpan};
pub use templates::{Template, Templates};
pub use time::{parse_duration, parse_time};
pub use timeline::{bin_of, lower_edge_us, DepBucket, Histogram, Source, Timeline, BIN_EDGES_US};
pub use writer::{behaviour, route_name};
pub use yaml_text::yaml_quoted;

use std::fmt;
use std::io::{BufRead, Read as _};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use faultline_units::input::{open_capped, open_regular, Cap, InputError};
use faultline_units::Size;

/// One request the record shows, whatever the format.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// When the request arrived at the SUT, Unix seconds with a fraction.
    pub arrival: f64,
    /// Its method, upper case.
    pub method: String,
    /// Its path and query.
    pub target: String,
    /// The status the SUT answered, when the record has it.
    pub status: Option<u16>,
    /// How long the SUT took, seconds.
    pub duration: Option<f64>,
    /// The calls the SUT made to its dependencies for this request, as the record shows them.
    pub calls: Vec<DependencyCall>,
}

/// What a record's line (or entry, or span) holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A request that arrived at the SUT, with the calls it made when the record joins them.
    Request(Record),
    /// A call to a dependency recorded apart from its request (a trace's CLIENT span).
    Call(DependencyCall),
}

/// One call to a dependency.
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyCall {
    /// The dependency, as the record names it (an upstream address, a peer).
    pub peer: String,
    /// When the call began, Unix seconds.
    pub at: f64,
    /// How long it took, seconds.
    pub duration: Option<f64>,
    /// How it ended.
    pub outcome: CallOutcome,
}

/// How a call to a dependency ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CallOutcome {
    /// An answer with this status.
    Status(u16),
    /// No answer before the caller gave up (played as `hang`).
    Timeout,
    /// The connection failed or was reset (played as `reset`).
    Reset,
}

/// The record formats `faultline import` reads.
#[derive(Debug, Clone)]
pub enum Format {
    /// nginx's access log: the default `combined` format, or the `log_format` given with `--log-format`.
    Nginx,
    /// Envoy's default access log format.
    Envoy,
    /// HAProxy's default HTTP log (`option httplog`).
    Haproxy,
    /// A HAR file (HTTP Archive 1.2): each entry an arrival and a call to its host.
    Har,
    /// OTLP/JSON trace exports: SERVER spans are arrivals, CLIENT spans calls to their peer.
    OtlpJson,
    /// A regular expression with named groups: `time`, `method`, `path` (or `request`), `status`, `duration`,
    /// `upstream`, `upstream_duration`, `upstream_status`.
    Regex(String),
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "nginx" => Ok(Format::Nginx),
            "envoy" => Ok(Format::Envoy),
            "haproxy" => Ok(Format::Haproxy),
            "har" => Ok(Format::Har),
            "otlp-json" => Ok(Format::OtlpJson),
            _ => match s.strip_prefix("regex:") {
                Some(p) if !p.is_empty() => Ok(Format::Regex(p.to_string())),
                Some(_) => Err("`regex:` needs a pattern after the colon, e.g. regex:'(?P<time>\\S+) (?P<method>\\S+) (?P<path>\\S+)'".into()),
                None => Err(format!(
                    "unknown format `{s}`; known: nginx, envoy, haproxy, har, otlp-json, regex:PATTERN"
                )),
            },
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Format::Nginx => write!(f, "nginx"),
            Format::Envoy => write!(f, "envoy"),
            Format::Haproxy => write!(f, "haproxy"),
            Format::Har => write!(f, "har"),
            Format::OtlpJson => write!(f, "otlp-json"),
            Format::Regex(_) => write!(f, "regex"),
        }
    }
}

/// How to import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    pub format: Format,
    /// nginx: the `log_format` the log was written with (default `combined`).
    pub log_format: Option<String>,
    /// The bucket: the step of the load's rate curve and of the dependency's timeline.
    pub bucket: f64,
    /// Time compression: 2 plays the record twice as fast (every time and latency halved, every rate doubled).
    pub speed: f64,
    /// More or less traffic than recorded: every rate multiplied by this.
    pub scale_rate: f64,
    /// Drop query strings (and header values) from the request templates.
    pub redact: bool,
    /// The scenario's name (default: the first file's stem).
    pub name: Option<String>,
    /// Draw a progress bar on stderr while reading (hidden when stderr is not a terminal).
    pub progress: bool,
    /// The most one HAR or OTLP/JSON file may hold: each is read whole, or one document at a time.
    pub max_input_size: Size,
    /// The longest line a log may hold: logs are read a line at a time, whatever their length.
    pub max_line_length: Size,
    /// How the dependency's behaviour changes over the scenario: phase by phase, or bucket by bucket.
    pub phases: PhaseMode,
}

/// How finely an imported scenario replays the dependency (`--phases`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PhaseMode {
    /// One faultd phase per phase found from change points (`healthy`, `degraded-1`, ..., `recovered`), each
    /// playing the latency histogram and status mix of all its buckets together: the few phases a person would
    /// name, each one behaviour.
    #[default]
    Found,
    /// One faultd phase per bucket (`healthy`, `healthy.1`, ...), each playing that bucket's own histogram and mix:
    /// the record's changes inside a phase too, at the cost of a phase per bucket.
    Buckets,
}

impl std::str::FromStr for PhaseMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "found" => Ok(PhaseMode::Found),
            "buckets" => Ok(PhaseMode::Buckets),
            _ => Err(format!("{s:?} is not a phase mode: found or buckets")),
        }
    }
}

impl fmt::Display for PhaseMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PhaseMode::Found => "found",
            PhaseMode::Buckets => "buckets",
        })
    }
}

/// The default of `--max-input-size`: a HAR or a trace export larger than this is rarely the record of one incident.
pub const MAX_INPUT_SIZE: Size = Size(256 << 20);
/// The default of `--max-line-length`: access log lines are under a few KiB, even with long URLs and user agents.
pub const MAX_LINE_LENGTH: Size = Size(1 << 20);

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            format: Format::Nginx,
            log_format: None,
            bucket: 1.0,
            speed: 1.0,
            scale_rate: 1.0,
            redact: false,
            name: None,
            progress: false,
            max_input_size: MAX_INPUT_SIZE,
            max_line_length: MAX_LINE_LENGTH,
            phases: PhaseMode::Found,
        }
    }
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} is empty")]
    Empty(PathBuf),
    #[error("{0}")]
    Format(String),
    /// `text` is the line, and what to try when the lines are of another format.
    #[error("{path}:{line}: not a {format} log line: {why}\n  {text}")]
    TooManyBad {
        path: PathBuf,
        line: usize,
        format: String,
        why: String,
        text: String,
        bad: usize,
        total: usize,
    },
    #[error("no line of {files} could be read as a {format} log{first}{hint}")]
    NothingParsed {
        files: String,
        format: String,
        first: String,
        hint: String,
    },
    #[error("the times of {files} jump from {from:.3} to {to:.3} (Unix seconds) with no request between: a clock jump, or records of different times; import them apart")]
    ClockJump { files: String, from: f64, to: f64 },
    #[error("the record spans {buckets} buckets of {bucket} s, a scenario larger than a scenario file may be ({limit}); import it with a larger --bucket, or in parts")]
    TooLarge {
        buckets: usize,
        bucket: f64,
        limit: String,
    },
    #[error("bad option: {0}")]
    Option(String),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{path}:{line}: the line is longer than the cap of {cap} (raise the cap with --max-line-length)")]
    LineTooLong {
        path: PathBuf,
        line: usize,
        cap: Size,
    },
}

/// A line that did not parse: where, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct BadLine {
    pub path: PathBuf,
    pub line: usize,
    pub why: String,
}

/// What an import produced.
#[derive(Debug)]
pub struct Imported {
    /// The scenario, as YAML text with comments.
    pub yaml: String,
    /// Lines read, records parsed, and the first bad lines.
    pub lines: usize,
    pub records: usize,
    pub bad: usize,
    pub first_bad: Vec<BadLine>,
    /// The phases found.
    pub phases: Vec<PhaseSpan>,
    /// The dependencies seen.
    pub dependencies: Vec<String>,
    /// The timetable written, when one was.
    pub replay: Option<timetable::Written>,
}

/// Reads one line into a record: `Ok(None)` for a line that holds no request (a blank line, a comment).
pub(crate) trait LineFormat {
    fn parse(&self, line: &str) -> Result<Option<Record>, String>;
}

/// The most bad lines an import goes on with: 1% of the lines read.
const BAD_SHARE: f64 = 0.01;
/// How many bad lines are listed by place.
const LISTED_BAD: usize = 5;
/// A stretch without any request longer than this is a jump of the clock, not a quiet hour of the service: the
/// scenario would play every empty bucket of it.
const CLOCK_JUMP: f64 = 3600.0;

/// The line reader of a line format; `None` for a format of JSON documents (HAR, OTLP/JSON).
fn line_format(options: &ImportOptions) -> Result<Option<Box<dyn LineFormat>>, ImportError> {
    Ok(Some(match &options.format {
        Format::Har | Format::OtlpJson => return Ok(None),
        Format::Nginx => Box::new(nginx::Nginx::new(options.log_format.as_deref())?),
        Format::Envoy => Box::new(envoy::Envoy::new()),
        Format::Haproxy => Box::new(haproxy::Haproxy::new()),
        Format::Regex(p) => Box::new(pattern::Pattern::new(p)?),
    }))
}

/// Where what is read goes: the timeline (and the timetable, when one is written), and the count of lines and
/// bad lines.
struct Sink<'a> {
    timeline: Timeline,
    timetable: Option<&'a mut timetable::Writer>,
    lines: usize,
    bad: usize,
    first_bad: Vec<BadLine>,
}

impl Sink<'_> {
    /// One entry read at `path:line` (a line, a HAR entry, a span), or why it is not one.
    fn add(&mut self, path: &Path, line: usize, entry: Result<Option<Entry>, String>) {
        match entry.and_then(plausible) {
            Ok(Some(Entry::Request(record))) => {
                if let Some(t) = self.timetable.as_deref_mut() {
                    t.push(&record);
                }
                self.timeline.add(&record);
            }
            Ok(Some(Entry::Call(call))) => self.timeline.call(&call),
            Ok(None) => {}
            Err(why) => note_bad(&mut self.bad, &mut self.first_bad, path, line, why),
        }
    }
}

/// Reads every file line by line (or document by document) into a timeline and writes the scenario; with
/// `timetable`, also writes every request to it, in arrival order.
pub fn import(paths: &[PathBuf], options: &ImportOptions) -> Result<Imported, ImportError> {
    import_with(paths, options, None)
}

/// As [`import`], writing the exact timetable of the requests to `timetable` as well (`--replay-load`).
pub fn import_with(
    paths: &[PathBuf],
    options: &ImportOptions,
    timetable: Option<&mut timetable::Writer>,
) -> Result<Imported, ImportError> {
    let mut progress = gather::progress_over(paths, options);
    let imported = pipeline(paths, options, timetable, |path, reader, sink| {
        read_file(path, reader, options, &mut progress, sink)
    });
    progress.finish();
    imported
}

/// As [`import`], from a record held in memory and named `name` in messages (what the fuzz targets drive).
pub fn import_text(
    name: &str,
    text: &[u8],
    options: &ImportOptions,
) -> Result<Imported, ImportError> {
    pipeline(
        &[PathBuf::from(name)],
        options,
        None,
        |path, reader, sink| read_from(path, text, reader, options, sink),
    )
}

/// What a format's reader made of a record, before any phase is found or scenario written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// Lines read (entries for HAR, spans for OTLP/JSON).
    pub lines: usize,
    /// Requests and dependency calls taken into the timeline.
    pub records: usize,
    /// Lines that are not an entry of the format, or not a plausible one.
    pub bad: usize,
}

/// The reading half of [`import_text`]: the format's reader over a record held in memory, into a timeline, and no
/// further (the readers' fuzz target drives it, so that its executions go to the readers rather than the writer).
pub fn read_text(name: &str, text: &[u8], options: &ImportOptions) -> Result<Read, ImportError> {
    check(options)?;
    let reader = line_format(options)?;
    let mut sink = Sink {
        timeline: Timeline::new(options.bucket, options.redact),
        timetable: None,
        lines: 0,
        bad: 0,
        first_bad: Vec::new(),
    };
    read_from(Path::new(name), text, reader.as_deref(), options, &mut sink)?;
    Ok(Read {
        lines: sink.lines,
        records: sink.timeline.records(),
        bad: sink.bad,
    })
}

/// Checks the options, reads each of `paths` with `read`, and writes the scenario of what was read.
fn pipeline(
    paths: &[PathBuf],
    options: &ImportOptions,
    timetable: Option<&mut timetable::Writer>,
    read: impl FnMut(&Path, Option<&dyn LineFormat>, &mut Sink) -> Result<(), ImportError>,
) -> Result<Imported, ImportError> {
    let Sink {
        timeline,
        lines,
        bad,
        first_bad,
        timetable,
    } = gather(paths, options, timetable, read)?;
    let records = timeline.records();
    let name = options.name.clone().unwrap_or_else(|| {
        paths
            .first()
            .and_then(|p| p.file_stem())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "imported".into())
    });
    // The scenario loader parses YAML within a budget of nodes (what keeps a hostile file from exhausting
    // memory), and faultd holds a configuration within limits (phases, behaviours, bytes); a long record in fine
    // buckets can write more than either.
    let too_large = |limit: String| ImportError::TooLarge {
        buckets: timeline.buckets(),
        bucket: options.bucket,
        limit,
    };
    // With a phase per bucket, and a behaviour per route and phase, the counts are known before a line is written.
    let (buckets, routes) = (timeline.buckets(), timeline.dependencies().len().max(1));
    let per_bucket = options.phases == PhaseMode::Buckets;
    if per_bucket && buckets > faultd::limits::MAX_PHASES {
        return Err(too_large(format!(
            "dependency.phases: a phase per bucket, over faultd's limit of {}",
            faultd::limits::MAX_PHASES
        )));
    }
    if per_bucket && buckets * routes > faultd::limits::MAX_SCHEDULE_CELLS {
        return Err(too_large(format!(
            "dependency.phases: {buckets} phases x {routes} routes, over faultd's limit of {} behaviours",
            faultd::limits::MAX_SCHEDULE_CELLS
        )));
    }
    let phases = find_phases(&timeline);
    let replay = match timetable {
        Some(t) => Some(
            t.finish(timeline.origin())
                .map_err(|source| ImportError::Read {
                    path: t.path().to_path_buf(),
                    source,
                })?,
        ),
        None => None,
    };
    let read = writer::Read {
        name: &name,
        paths,
        lines,
        bad,
    };
    let yaml = writer::write(&timeline, &phases, options, &read, replay.as_ref());
    match serde_saphyr::from_str::<serde_json::Value>(&yaml) {
        Err(e) if e.to_string().contains("budget") => {
            return Err(too_large("the YAML loader's budget of nodes".into()))
        }
        Err(_) => {}
        Ok(mut written) => {
            if let Ok(dependency) =
                serde_json::from_value::<faultd::Config>(written["dependency"].take())
            {
                if let Err(e) = faultd::limits::check_config(&dependency) {
                    let field = match e.field.as_str() {
                        "" => "dependency".to_string(),
                        f => format!("dependency.{f}"),
                    };
                    return Err(too_large(format!("{field}: {}", e.message)));
                }
            }
        }
    }
    Ok(Imported {
        yaml,
        lines,
        records,
        bad,
        first_bad,
        dependencies: timeline.dependencies(),
        phases,
        replay,
    })
}

/// The latest time a record may carry, Unix seconds (the year 5138): beyond it a time is a misread field, and
/// bucket indices would overflow.
const LATEST: f64 = 1e11;

/// An entry whose times, durations and statuses a scenario can hold, or why not.
fn plausible(entry: Option<Entry>) -> Result<Option<Entry>, String> {
    let time = |t: f64| {
        if (0.0..=LATEST).contains(&t) {
            Ok(())
        } else {
            Err(format!(
                "the time {t} is not a Unix time (seconds since 1970)"
            ))
        }
    };
    let duration = |d: Option<f64>| match d {
        Some(d) if !(0.0..=LATEST).contains(&d) => Err(format!("the duration {d} s is not one")),
        _ => Ok(()),
    };
    let status = |s: Option<u16>| match s {
        Some(s) if !(100..=599).contains(&s) => Err(format!("{s} is not an HTTP status")),
        _ => Ok(()),
    };
    let call = |c: &DependencyCall| {
        time(c.at)?;
        duration(c.duration)?;
        match c.outcome {
            CallOutcome::Status(s) => status(Some(s)),
            _ => Ok(()),
        }
    };
    match &entry {
        Some(Entry::Request(r)) => {
            time(r.arrival)?;
            duration(r.duration)?;
            status(r.status)?;
            for c in &r.calls {
                call(c)?;
            }
        }
        Some(Entry::Call(c)) => call(c)?,
        None => {}
    }
    Ok(entry)
}

/// Counts a bad line (or entry) and keeps its place while fewer than [`LISTED_BAD`] are kept.
fn note_bad(bad: &mut usize, first: &mut Vec<BadLine>, path: &Path, line: usize, why: String) {
    *bad += 1;
    if first.len() < LISTED_BAD {
        first.push(BadLine {
            path: path.to_path_buf(),
            line,
            why,
        });
    }
}

fn clip(line: &str) -> String {
    if line.chars().count() > 160 {
        format!("{}...", line.chars().take(160).collect::<String>())
    } else {
        line.to_string()
    }
}

/// A file name for messages.
pub(crate) fn display(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| Path::new(p).display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
