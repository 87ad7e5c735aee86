//! The scenario format: what to run (the dependency's behaviour and schedule, the SUT, the load), how to observe the
//! breakers, and what to expect. `Scenario::load` parses the YAML (every error names file, line, column and field),
//! applies a replayed trace and the command line's overrides (seed, mistakes, time scale), and validates the whole.
//!
//! Not for running anything: `run` takes a `Validated` scenario and starts the components. Each concern of reading
//! a scenario has its own file: `validate` (the scenario as a whole), `replay` (a trace becoming phases),
//! `placeholders` (the `{...}` in a SUT command), `ready` (what a command SUT offers for readiness), `hosts` (the
//! loopback guard), `locate` (where in the YAML an error is) and `schema` (the JSON Schema).

mod env;
mod hosts;
mod locate;
mod parse_error;
mod placeholders;
mod ready;
mod replay;
mod schema;
mod validate;

pub use env::referenced_variables;
pub use hosts::check_host;
pub use locate::locate;
pub use placeholders::Placeholders;
pub use ready::Readiness;
pub use replay::{parse_trace, ReplaySpec, TraceRow};
pub use schema::json_schema;

use std::collections::BTreeMap;
use std::path::Path;

use faultline_units::Dur;
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::breaker::scrape::{Preset, StateMapping};
use crate::expect::{Expectation, ExpectationSpec};

/// A scenario as written in its YAML file.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A short name; reports are written under `reports/<name>/`.
    pub name: String,
    /// What the scenario reproduces and where its numbers come from.
    #[serde(default)]
    pub description: Option<String>,
    /// How long the load runs.
    pub duration: Dur,
    /// Seeds every random choice (faultd's faults, loadgen's arrivals and request mix).
    #[serde(default)]
    pub seed: Option<u64>,
    /// The recording step every time series shares (default 100ms).
    #[serde(default)]
    pub bucket: Option<Dur>,
    /// Hosts other than loopback that this scenario may send traffic to. Empty: loopback only.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// The fake dependency: routes, behaviours and the schedule of phases (an embedded faultd).
    pub dependency: faultd::Config,
    /// Use a faultd started elsewhere instead of the embedded one: the configuration above is pushed to it.
    #[serde(default)]
    pub faultd: Option<ExternalFaultd>,
    /// The service under test.
    pub sut: SutSpec,
    /// Follow each request through the SUT by trace id: which header carries a request's identity to the
    /// dependency (`traceparent` by default) and which one its deadline. Correlation is on with this section or
    /// with any expectation of the requests family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlate: Option<faultline_units::trace::Correlate>,
    /// The load offered to the SUT.
    pub load: loadgen::LoadSpec,
    /// How each breaker of the SUT is observed, by name.
    #[serde(default)]
    pub breakers: BTreeMap<String, BreakerSpec>,
    /// What must hold for the run to pass.
    #[serde(default)]
    #[schemars(with = "Vec<ExpectationSpec>")]
    pub expect: Vec<Spanned<ExpectationSpec>>,
    /// Report options.
    #[serde(default)]
    pub report: ReportSpec,
    /// Replays a recorded incident: a CSV trace of the dependency's behaviour over time becomes phases of the
    /// `dependency` schedule, ramped between rows.
    #[serde(default)]
    pub replay: Option<ReplaySpec>,
    /// The scenario's own proof: the demo's mistake switch that reproduces the incident, and the expectations it
    /// must fail (`faultline prove` runs both configurations).
    #[serde(default)]
    pub proof: Option<ProofSpec>,
}

/// What a scenario proves about the demo service: with its recommended configuration every expectation holds; with
/// `mistake` switched on, the expectations named in `fails` fail (and only those are required to).
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProofSpec {
    /// The demo mistake switch(es) to turn on.
    #[serde(default)]
    pub mistake: Vec<demo::Mistake>,
    /// Other changes that make the configuration wrong, merged into the scenario, e.g.
    /// `{ sut: { demo: { shared_counters: false } } }`.
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Value>")]
    pub patch: Option<serde_json::Value>,
    /// The ids of the expectations that must fail with the mistake.
    pub fails: Vec<String>,
}

/// A faultd that runs as its own process (`control`), or several faultd replicas behind one address
/// (`replicas`), as a dependency that needs more than one faultd is deployed behind a Kubernetes Service or a load
/// balancer. The runner drives every replica alike and merges their recordings (see docs/faultd.md, "faultd
/// replicas").
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExternalFaultd {
    /// Its control API, e.g. http://127.0.0.1:9001 (one faultd; for several, `replicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<String>,
    /// The control APIs of several faultd replicas that serve the dependency together behind `url`, e.g.
    /// [http://127.0.0.1:9101, http://127.0.0.1:9102]. Each gets the same configuration and seed; their
    /// recordings are merged, and the calls in flight become an upper bound (the sum of the replicas' peaks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<String>,
    /// The URL the SUT calls, e.g. http://127.0.0.1:9000: the faultd's data port, or the Service (the load
    /// balancer) in front of the replicas.
    pub url: String,
    /// The bearer token of its control API (of every replica's), if it has one.
    #[serde(default)]
    pub token: Option<String>,
}

impl ExternalFaultd {
    /// The control API of every faultd the scenario names: `control`, or each of `replicas`, in order.
    pub fn controls(&self) -> Vec<&str> {
        self.control
            .iter()
            .chain(&self.replicas)
            .map(String::as_str)
            .collect()
    }
}

/// The service under test: the bundled demo, a command faultline starts, or a URL of a service already running.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SutSpec {
    /// The bundled demo service, started in-process.
    #[serde(default)]
    pub demo: Option<demo::DemoConfig>,
    /// A command to start, with placeholders such as {faultd.url}, {sut.port}, {webhook.url}, {ms:250ms}.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Environment for the command (placeholders allowed).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Where the SUT listens: for a command, usually http://127.0.0.1:{sut.port}; alone, a running service.
    #[serde(default)]
    pub url: Option<String>,
    /// How a command SUT says it is ready: a path polled until it answers 2xx (default /health), or
    /// `{ http: PATH }`, `{ tcp: true }`, `{ grpc: SERVICE }`, `{ log: REGEX }`.
    #[serde(default)]
    pub ready: Option<Readiness>,
    /// How long to wait for readiness (default 30s; not scaled).
    #[serde(default)]
    pub ready_timeout: Option<Dur>,
    /// `faultline sweep`'s parameters of this run by name, for `{param.NAME}` in the command, its environment and
    /// its URL: given on the command line (`--vary`), never written in the file.
    #[serde(skip)]
    pub params: BTreeMap<String, String>,
    /// The `--time-scale` the scenario was loaded with (`None`: 1), which the scaled placeholders (`{ms:250ms}`,
    /// `{param.NAME.ms}`) follow.
    #[serde(skip)]
    pub time_scale: Option<f64>,
}

/// How one breaker is observed: one or more of `metrics`, `webhook`, `log`, `inferred`. With several, every
/// verdict uses the finest evidence, and the sources are cross-checked against each other and against inference.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BreakerSpec {
    /// The dependency route this breaker guards (for inference and probe counting). Default: the route of the
    /// same name, if there is one.
    #[serde(default)]
    pub route: Option<String>,
    /// Scrape the SUT's Prometheus metrics.
    #[serde(default)]
    pub metrics: Option<MetricsSpec>,
    /// Transitions pushed by the SUT as JSON to {webhook.url}.
    #[serde(default)]
    pub webhook: Option<WebhookSpec>,
    /// A regex over the SUT's output lines (command SUTs only).
    #[serde(default)]
    pub log: Option<LogSpec>,
    /// Inferred from traffic: calls stop reaching the route while the SUT keeps its load.
    #[serde(default)]
    pub inferred: Option<bool>,
}

/// A metrics scrape. A preset names the metric; `metric`, `labels`, `values` and `state_label` describe others.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsSpec {
    /// The path on the SUT (default /metrics).
    #[serde(default)]
    pub path: Option<String>,
    /// A full URL instead of a path on the SUT.
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub preset: Option<Preset>,
    /// A custom metric name.
    #[serde(default)]
    pub metric: Option<String>,
    /// Labels a series must carry to belong to this breaker (defaults from the preset).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// For a gauge: the value of each state, e.g. { closed: 0, open: 1, half_open: 2 }.
    #[serde(default)]
    pub values: BTreeMap<String, f64>,
    /// For one series per state: the label holding the state name.
    #[serde(default)]
    pub state_label: Option<String>,
    /// The scrape interval (default 100ms).
    #[serde(default)]
    pub interval: Option<Dur>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookSpec {
    /// The breaker's name in the events, if not this one's.
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogSpec {
    /// A regex with the named groups `state` and optionally `breaker` (this breaker's name must match it).
    pub pattern: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportSpec {
    /// Where reports go (default reports/<name>/<UTC timestamp>/; `--report-dir` wins).
    #[serde(default)]
    pub dir: Option<String>,
}

/// What the command line changes in a scenario before it is validated.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub seed: Option<u64>,
    /// `--time-scale`: see `Scenario::scale_time`.
    pub time_scale: Option<f64>,
    /// `--mistake`: demo mistake switches to turn on.
    pub mistakes: Vec<demo::Mistake>,
    /// Merged into the scenario before it is read (a proof's `patch`, a sweep's combination for the demo).
    pub patch: Option<serde_json::Value>,
    /// `faultline sweep`'s parameters for a command or URL SUT, by name: `{param.NAME}` (see [`SutSpec::params`]).
    /// The bundled demo reads none: a sweep merges its values into the demo's config as `patch`.
    pub params: BTreeMap<String, String>,
}

/// A scenario error: the file, where in it, and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Input(#[from] faultline_units::input::InputError),
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}:{line}:{column}: {field}: {message}")]
    Invalid {
        file: String,
        line: u64,
        column: u64,
        field: String,
        message: String,
    },
    #[error("{file}: {field}: {message}")]
    InvalidNoLine {
        file: String,
        field: String,
        message: String,
    },
    /// Several errors of one file, in the order of their lines: at most [`MAX_ERRORS`] of `total`.
    #[error("{}", errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Many {
        errors: Vec<ScenarioError>,
        total: usize,
    },
}

/// The most errors one file reports at once.
pub const MAX_ERRORS: usize = 20;

impl ScenarioError {
    /// The process exit code for this error: always 2, bad input.
    pub fn exit_code(&self) -> i32 {
        2
    }

    /// `errors` as one: by line, each said once, at most [`MAX_ERRORS`]; a single one as itself.
    pub fn many(errors: Vec<ScenarioError>) -> ScenarioError {
        let mut errors: Vec<ScenarioError> = errors
            .into_iter()
            .flat_map(|e| match e {
                ScenarioError::Many { errors, .. } => errors,
                one => vec![one],
            })
            .collect();
        errors.sort_by_key(|e| match e {
            ScenarioError::Invalid { line, column, .. } => (*line, *column),
            _ => (0, 0),
        });
        let mut said = std::collections::HashSet::new();
        errors.retain(|e| said.insert(e.to_string()));
        let total = errors.len();
        errors.truncate(MAX_ERRORS);
        if errors.len() == 1 {
            errors.remove(0)
        } else {
            ScenarioError::Many { errors, total }
        }
    }

    /// Each error as data, `Many` flattened: `{ line, column, field, message }`, where line, column and field are
    /// left out when the error has none (a file that cannot be read, YAML that does not parse).
    pub fn entries(&self) -> Vec<serde_json::Value> {
        match self {
            ScenarioError::Many { errors, .. } => errors.iter().flat_map(|e| e.entries()).collect(),
            ScenarioError::Invalid {
                line,
                column,
                field,
                message,
                ..
            } => vec![serde_json::json!({
                "line": line, "column": column, "field": field, "message": message,
            })],
            ScenarioError::InvalidNoLine { field, message, .. } => {
                vec![serde_json::json!({ "field": field, "message": message })]
            }
            ScenarioError::Parse { message, .. } => vec![serde_json::json!({ "message": message })],
            other => vec![serde_json::json!({ "message": other.to_string() })],
        }
    }

    /// The error as the CLI prints it: its one line, and for an error at a line of a file that can still be read,
    /// that line with a caret under the column. Several errors are printed one after another, then counted.
    pub fn render(&self) -> String {
        if let ScenarioError::Many { errors, total } = self {
            let each: Vec<String> = errors.iter().map(ScenarioError::render).collect();
            let shown = if errors.len() < *total {
                format!("; the first {} are shown", errors.len())
            } else {
                String::new()
            };
            return format!("{}\n{total} errors{shown}", each.join("\n"));
        }
        let mut out = format!("error: {self}");
        if let ScenarioError::Invalid {
            file, line, column, ..
        } = self
        {
            let text = faultline_units::input::read_capped_text_or_stdin(
                Path::new(file),
                faultline_units::input::MAX_CONFIG_SIZE,
            );
            let shown = text.ok().and_then(|t| {
                t.lines()
                    .nth((*line as usize).checked_sub(1)?)
                    .map(str::to_string)
            });
            if let Some(shown) = shown {
                let number = line.to_string();
                let pad = " ".repeat(number.len());
                let caret: String = shown
                    .chars()
                    .take((*column as usize).saturating_sub(1))
                    .map(|c| if c == '\t' { '\t' } else { ' ' })
                    .collect();
                out.push_str(&format!(
                    "\n {pad} |\n {number} | {shown}\n {pad} | {caret}^"
                ));
            }
        }
        out
    }
}

/// A scenario checked as a whole, with its expectations resolved and its breaker sources ready to use.
#[derive(Debug, Clone)]
pub struct Validated {
    pub scenario: Scenario,
    pub file: String,
    pub expectations: Vec<Expectation>,
    /// Each breaker's sources, in the order metrics, webhook, log, inferred.
    pub breakers: BTreeMap<String, Vec<Observation>>,
}

impl Validated {
    /// How the run follows each request through the SUT, if it does: the scenario's `correlate:` section, or the
    /// default headers when an expectation of the requests family needs the join.
    pub fn correlation(&self) -> Option<faultline_units::trace::Correlate> {
        self.scenario.correlate.clone().or_else(|| {
            self.expectations
                .iter()
                .any(|e| matches!(e.check, crate::expect::Check::Requests(_)))
                .then(Default::default)
        })
    }

    /// The route a breaker guards, if known.
    pub fn breaker_route(&self, breaker: &str) -> Option<String> {
        let spec = self.scenario.breakers.get(breaker)?;
        spec.route.clone().or_else(|| {
            self.scenario
                .dependency
                .routes
                .contains_key(breaker)
                .then(|| breaker.to_string())
        })
    }
}

/// How a breaker is observed, resolved.
#[derive(Debug, Clone)]
pub enum Observation {
    Metrics {
        url_or_path: String,
        mapping: StateMapping,
        interval: Dur,
    },
    Webhook {
        name: String,
    },
    Log {
        pattern: regex::Regex,
    },
    Inferred,
}

impl Scenario {
    /// Reads and validates a scenario file; `-` reads standard input (files it names relative to the current
    /// folder).
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Validated, ScenarioError> {
        let file = path.display().to_string();
        let text = faultline_units::input::read_capped_text_or_stdin(
            path,
            faultline_units::input::MAX_CONFIG_SIZE,
        )?;
        Scenario::parse_in(
            &text,
            &file,
            path.parent().unwrap_or(Path::new(".")),
            overrides,
        )
    }

    /// Parses scenario text (with the overrides' patch merged in first), adds a replayed trace's phases, applies the
    /// overrides' seed, mistakes and time scale, and validates the whole; `file` is the name used in errors. A trace
    /// is read relative to the current folder.
    pub fn parse(
        text: &str,
        file: &str,
        overrides: &Overrides,
    ) -> Result<Validated, ScenarioError> {
        Scenario::parse_in(text, file, Path::new("."), overrides)
    }

    /// As `parse`, with files the scenario names (a replay trace) read relative to `base`.
    pub fn parse_in(
        text: &str,
        file: &str,
        base: &Path,
        overrides: &Overrides,
    ) -> Result<Validated, ScenarioError> {
        let interpolated =
            env::interpolate(text, |name| std::env::var(name).ok()).map_err(|e| {
                ScenarioError::Invalid {
                    file: file.to_string(),
                    line: e.line,
                    column: e.column,
                    field: e.reference,
                    message: e.message,
                }
            })?;
        let text = interpolated.as_str();
        let patched;
        let text = match &overrides.patch {
            None => text,
            Some(patch) => {
                let mut value: serde_json::Value = serde_saphyr::from_str(text)
                    .map_err(|e| parse_error::from_yaml(&e, text, file))?;
                merge(&mut value, patch);
                patched = serde_saphyr::to_string(&value).map_err(|e| ScenarioError::Parse {
                    file: file.to_string(),
                    message: format!("cannot apply the proof's patch: {e}"),
                })?;
                patched.as_str()
            }
        };
        let mut scenario: Scenario = parse_error::read_all(text, file)?;
        scenario.replay_trace(text, file, base)?;
        // A gRPC answer's message file is named relative to the scenario, as a trace is, and read now, once.
        scenario
            .dependency
            .read_files(&faultd::Files::Beside(base.to_path_buf()))
            .map_err(|e| {
                let field = format!("dependency.{}", e.field);
                locate::locate(text, file, &field, "message_file", e.message)
            })?;
        if let Some(r) = scenario.load.replay.as_mut() {
            // A timetable is named relative to the scenario file, as a trace is.
            r.file = base.join(&r.file).display().to_string();
        }
        // So are a gRPC request's .proto files, as faultd's are.
        for file in scenario
            .load
            .requests
            .iter_mut()
            .flat_map(|r| r.proto.iter_mut())
        {
            *file = base.join(&*file).display().to_string();
        }
        if let Some(seed) = overrides.seed {
            scenario.seed = Some(seed);
        }
        scenario.sut.params = overrides.params.clone();
        if !overrides.mistakes.is_empty() {
            match scenario.sut.demo.as_mut() {
                Some(d) => d.mistakes.extend(overrides.mistakes.iter().cloned()),
                None => return Err(ScenarioError::InvalidNoLine { file: file.to_string(), field: "--mistake".into(), message: "mistake switches apply to the bundled demo service only; this scenario's SUT is not `demo`".into() }),
            }
        }
        if let Some(f) = overrides.time_scale {
            if let Err(e) = faultline_units::Scale::try_from(f) {
                return Err(ScenarioError::InvalidNoLine {
                    file: file.to_string(),
                    field: "--time-scale".into(),
                    message: e.to_string(),
                });
            }
            if f != 1.0 {
                scenario.scale_time(f);
            }
        }
        scenario.validate(text, file)
    }

    /// Multiplies every duration by `factor` and divides every rate by it, so that every count the scenario
    /// reasons about (calls per breaker window, calls in flight by Little's law, probes) stays the same.
    pub fn scale_time(&mut self, factor: f64) {
        self.duration = self.duration.scaled(factor);
        self.bucket = Some(
            self.bucket
                .unwrap_or(Dur::from_millis(100))
                .scaled(factor)
                .max(Dur::from_millis(10)),
        );
        self.dependency.scale_time(factor);
        self.load.scale_time(factor);
        if let Some(d) = self.sut.demo.as_mut() {
            d.scale_time(factor);
        }
        self.sut.time_scale = Some(self.sut.time_scale.unwrap_or(1.0) * factor);
        for b in self.breakers.values_mut() {
            if let Some(m) = b.metrics.as_mut() {
                m.interval = Some(
                    m.interval
                        .unwrap_or(Dur::from_millis(100))
                        .scaled(factor)
                        .max(Dur::from_millis(10)),
                );
            }
        }
        for e in &mut self.expect {
            e.value.scale_time(factor);
        }
    }
}

/// Merges `patch` into `value`: objects key by key, anything else replaced.
pub(crate) fn merge(value: &mut serde_json::Value, patch: &serde_json::Value) {
    match (value, patch) {
        (serde_json::Value::Object(v), serde_json::Value::Object(p)) => {
            for (k, pv) in p {
                merge(v.entry(k.clone()).or_insert(serde_json::Value::Null), pv);
            }
        }
        (v, p) => *v = p.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_merges_objects_key_by_key() {
        let mut v = serde_json::json!({ "sut": { "demo": { "instances": 60, "shared_counters": true } }, "name": "x" });
        merge(
            &mut v,
            &serde_json::json!({ "sut": { "demo": { "shared_counters": false } } }),
        );
        assert_eq!(
            v,
            serde_json::json!({ "sut": { "demo": { "instances": 60, "shared_counters": false } }, "name": "x" })
        );
    }
}
