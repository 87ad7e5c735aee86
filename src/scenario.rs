//! The scenario file: what to run (the dependency's behaviour and schedule, the SUT, the load), how to observe the
//! breakers, and what to expect. Parsed from YAML with every error naming file, line, column and field, validated
//! as a whole (names resolve, hosts are loopback unless allowed), and scaled in time for CI.
//!
//! Not for running anything: `run` takes a validated `Scenario` and starts the components.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use faultline_units::Dur;
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::breaker::scrape::{Encoding, Preset, StateMapping};
use crate::breaker::BreakerState;
use crate::expect::{Expectation, ExpectationSpec, Names};

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

/// A trace to replay: rows of `seconds,p50_ms,p99_ms,error_share` (a header line, then one row per sample, as a
/// monitoring export gives them). Row 0 becomes the phase `phase` at `at` + its seconds; each later row k becomes the
/// phase `phase.k`, which ramps from the previous row's values to its own over the gap between the two rows (it
/// begins 1 ms after the previous row, as phases need strictly ascending starts). Expectations may name `phase` for
/// the whole trace (`during: incident` covers every `incident.k`).
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaySpec {
    /// The CSV file, relative to the scenario file.
    pub trace: String,
    /// The dependency route whose behaviour the trace sets.
    pub route: String,
    /// When the trace's time 0 falls in the run.
    pub at: Dur,
    /// The name of the trace's first phase (default `incident`).
    #[serde(default)]
    pub phase: Option<String>,
    /// The status of the trace's errors (default 503).
    #[serde(default)]
    pub status: Option<u16>,
}

/// One row of a replayed trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRow {
    pub at: Dur,
    pub p50: Dur,
    pub p99: Dur,
    pub errors: faultline_units::Share,
}

/// Reads a trace: a header line naming the columns (seconds, p50_ms, p99_ms, error_share, in this order), then rows.
/// Error shares may be fractions (0.3) or percentages (30%).
pub fn parse_trace(text: &str) -> Result<Vec<TraceRow>, String> {
    let mut rows = Vec::new();
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let (_, header) = lines.next().ok_or("the trace is empty")?;
    let columns: Vec<String> = header
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .collect();
    if columns != ["seconds", "p50_ms", "p99_ms", "error_share"] {
        return Err(format!(
            "line 1: expected the header `seconds,p50_ms,p99_ms,error_share`, found `{header}`"
        ));
    }
    for (i, line) in lines {
        let n = i + 1;
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != 4 {
            return Err(format!(
                "line {n}: expected 4 columns, found {}",
                cells.len()
            ));
        }
        let num = |c: &str, what: &str| -> Result<f64, String> {
            let v: f64 = c
                .parse()
                .map_err(|_| format!("line {n}: {what} {c:?} is not a number"))?;
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("line {n}: {what} must be a non-negative number"));
            }
            Ok(v)
        };
        let at = num(cells[0], "seconds")?;
        let p50 = num(cells[1], "p50_ms")?;
        let p99 = num(cells[2], "p99_ms")?;
        if p99 < p50 {
            return Err(format!("line {n}: p99_ms ({p99}) is below p50_ms ({p50})"));
        }
        let errors = if cells[3].ends_with('%') {
            cells[3]
                .parse::<faultline_units::Share>()
                .map_err(|e| format!("line {n}: {e}"))?
        } else {
            let f = num(cells[3], "error_share")?;
            if f > 1.0 {
                return Err(format!(
                    "line {n}: error_share {f} is over 1 (write 30% or 0.3)"
                ));
            }
            faultline_units::Share::from_fraction(f)
        };
        if let Some(prev) = rows.last() {
            let prev: &TraceRow = prev;
            if Dur::from_secs_f64(at) <= prev.at {
                return Err(format!("line {n}: seconds must increase from row to row"));
            }
        }
        rows.push(TraceRow {
            at: Dur::from_secs_f64(at),
            p50: Dur::from_secs_f64(p50 / 1e3),
            p99: Dur::from_secs_f64(p99 / 1e3),
            errors,
        });
    }
    if rows.is_empty() {
        return Err("the trace has a header but no rows".into());
    }
    Ok(rows)
}

impl ReplaySpec {
    /// The phases this trace adds to the schedule.
    pub fn phases(&self, rows: &[TraceRow]) -> Result<Vec<faultd::Phase>, String> {
        let name = self.phase.clone().unwrap_or_else(|| "incident".into());
        let status = self.status.unwrap_or(503);
        let mut phases = Vec::new();
        for (k, row) in rows.iter().enumerate() {
            let mut behaviour = serde_json::json!({ "latency": { "p50": row.p50.to_string(), "p99": row.p99.to_string() } });
            behaviour["errors"] = if row.errors.fraction() > 0.0 {
                serde_json::json!([ { "share": row.errors.to_string(), "status": status } ])
            } else {
                serde_json::json!([])
            };
            let set: faultd::PhaseRoute =
                serde_json::from_value(behaviour).map_err(|e| format!("row {}: {e}", k + 1))?;
            let (phase_name, at, ramp) = if k == 0 {
                (name.clone(), self.at.get() + row.at.get(), None)
            } else {
                let prev = rows[k - 1].at.get();
                let start = self.at.get() + prev + std::time::Duration::from_millis(1);
                (
                    format!("{name}.{k}"),
                    start,
                    Some(Dur(row.at.get()
                        - prev
                        - std::time::Duration::from_millis(1))),
                )
            };
            phases.push(faultd::Phase {
                name: phase_name,
                at: Dur(at),
                ramp,
                routes: BTreeMap::from([(self.route.clone(), set)]),
            });
        }
        Ok(phases)
    }
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

/// A faultd that runs as its own process.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExternalFaultd {
    /// Its control API, e.g. http://127.0.0.1:9001.
    pub control: String,
    /// Its data port, the URL the SUT calls, e.g. http://127.0.0.1:9000.
    pub url: String,
    /// The bearer token of its control API, if it has one.
    #[serde(default)]
    pub token: Option<String>,
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
    /// The readiness path, polled until it answers 2xx (default /health).
    #[serde(default)]
    pub ready: Option<String>,
    /// How long to wait for readiness (default 30s; not scaled).
    #[serde(default)]
    pub ready_timeout: Option<Dur>,
}

/// How one breaker is observed. Exactly one of `metrics`, `webhook`, `log`, `inferred`.
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

/// A scenario error: the file, where in it, and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
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
}

/// What the command line changes in a scenario before it is validated.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub seed: Option<u64>,
    /// `--time-scale`: see `Scenario::scale_time`.
    pub time_scale: Option<f64>,
    /// `--mistake`: demo mistake switches to turn on.
    pub mistakes: Vec<demo::Mistake>,
    /// Merged into the scenario before it is read (a proof's `patch`).
    pub patch: Option<serde_json::Value>,
}

/// A scenario checked as a whole, with its expectations resolved and its breaker sources ready to use.
#[derive(Debug, Clone)]
pub struct Validated {
    pub scenario: Scenario,
    pub file: String,
    pub expectations: Vec<Expectation>,
    pub breakers: BTreeMap<String, Observation>,
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
    /// Reads and validates a scenario file.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Validated, ScenarioError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            file: file.clone(),
            source,
        })?;
        Scenario::parse_in(
            &text,
            &file,
            path.parent().unwrap_or(Path::new(".")),
            overrides,
        )
    }

    /// Parses, adjusts (seed, time scale) and validates scenario text; `file` is the name used in errors.
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
        let parse_error = |e: serde_saphyr::Error| ScenarioError::Parse {
            file: file.to_string(),
            message: e.to_string().trim_start_matches("error: ").to_string(),
        };
        let patched;
        let text = match &overrides.patch {
            None => text,
            Some(patch) => {
                let mut value: serde_json::Value =
                    serde_saphyr::from_str(text).map_err(parse_error)?;
                merge(&mut value, patch);
                patched = serde_saphyr::to_string(&value).map_err(|e| ScenarioError::Parse {
                    file: file.to_string(),
                    message: format!("cannot apply the proof's patch: {e}"),
                })?;
                patched.as_str()
            }
        };
        let mut scenario: Scenario = serde_saphyr::from_str(text).map_err(parse_error)?;
        if let Some(replay) = scenario.replay.clone() {
            let at = |m: String| locate(text, file, "replay.trace", "trace:", m);
            let path = base.join(&replay.trace);
            let csv = std::fs::read_to_string(&path)
                .map_err(|e| at(format!("cannot read {}: {e}", path.display())))?;
            let rows = parse_trace(&csv).map_err(|m| at(format!("{}: {m}", path.display())))?;
            let phases = replay
                .phases(&rows)
                .map_err(|m| at(format!("{}: {m}", path.display())))?;
            if !scenario.dependency.routes.contains_key(&replay.route) {
                return Err(locate(
                    text,
                    file,
                    "replay.route",
                    "route:",
                    format!("`{}` is not under `dependency.routes`", replay.route),
                ));
            }
            scenario.dependency.phases.extend(phases);
            scenario.dependency.phases.sort_by_key(|p| p.at);
        }
        if let Some(seed) = overrides.seed {
            scenario.seed = Some(seed);
        }
        if !overrides.mistakes.is_empty() {
            match scenario.sut.demo.as_mut() {
                Some(d) => d.mistakes.extend(overrides.mistakes.iter().cloned()),
                None => return Err(ScenarioError::InvalidNoLine { file: file.to_string(), field: "--mistake".into(), message: "mistake switches apply to the bundled demo service only; this scenario's SUT is not `demo`".into() }),
            }
        }
        if let Some(f) = overrides.time_scale {
            if !(f.is_finite() && f > 0.0) {
                return Err(ScenarioError::InvalidNoLine {
                    file: file.to_string(),
                    field: "--time-scale".into(),
                    message: format!("{f} is not a positive factor"),
                });
            }
            if f != 1.0 {
                scenario.scale_time(f);
            }
        }
        scenario.validate(text, file)
    }

    fn validate(self, text: &str, file: &str) -> Result<Validated, ScenarioError> {
        let at =
            |field: &str, needle: &str, message: String| locate(text, file, field, needle, message);
        if self.name.trim().is_empty() || self.name.contains(['/', '\\']) {
            return Err(at(
                "name",
                "name:",
                "the name must be non-empty and contain no slashes (it names a folder)".into(),
            ));
        }
        if self.duration.get().is_zero() {
            return Err(at(
                "duration",
                "duration:",
                "the run needs a duration above zero".into(),
            ));
        }
        if let Some(b) = self.bucket {
            if b.get() < std::time::Duration::from_millis(1) {
                return Err(at(
                    "bucket",
                    "bucket:",
                    "the bucket must be at least 1ms".into(),
                ));
            }
        }
        self.dependency.validate().map_err(|e| {
            let field = if e.field.is_empty() {
                "dependency".to_string()
            } else {
                format!("dependency.{}", e.field)
            };
            at(&field, "dependency:", e.message.clone())
        })?;
        self.load
            .validate()
            .map_err(|e| at("load", "load:", e.to_string()))?;

        // The SUT: exactly one kind.
        let sut = &self.sut;
        match (&sut.demo, &sut.command, &sut.url) {
            (Some(d), None, None) => d.validate().map_err(|e| at("sut.demo", "demo:", e.to_string()))?,
            (None, Some(cmd), Some(_)) if !cmd.is_empty() => {}
            (None, Some(_), None) => return Err(at("sut.command", "command:", "a command SUT needs `url:` (e.g. http://127.0.0.1:{sut.port})".into())),
            (None, None, Some(_)) => {}
            (None, None, None) => return Err(at("sut", "sut:", "name the service under test: `demo: {}`, `command: [...]` with `url:`, or `url:` of a running service".into())),
            _ => return Err(at("sut", "sut:", "choose one: `demo`, or `command` with `url`, or `url` alone".into())),
        }

        // Placeholders and hosts.
        let known = Placeholders::names();
        for (field, value) in sut
            .command
            .iter()
            .flatten()
            .map(|v| ("sut.command", v))
            .chain(sut.env.values().map(|v| ("sut.env", v)))
            .chain(sut.url.iter().map(|v| ("sut.url", v)))
        {
            if let Err(name) = Placeholders::check(value, &known) {
                return Err(at(field, &format!("{{{name}}}"), format!("unknown placeholder {{{name}}}; known: {}, and {{ms:250ms}}, {{secs:30s}}, {{dur:250ms}} for scaled durations", known.join(", "))));
            }
        }
        let mut urls: Vec<(&str, String)> = Vec::new();
        if let Some(u) = &sut.url {
            urls.push(("sut.url", u.replace("{sut.port}", "1")));
        }
        if let Some(f) = &self.faultd {
            urls.push(("faultd.control", f.control.clone()));
            urls.push(("faultd.url", f.url.clone()));
        }
        for (name, b) in &self.breakers {
            if let Some(u) = b.metrics.as_ref().and_then(|m| m.url.clone()) {
                urls.push((
                    if name.is_empty() {
                        "breakers"
                    } else {
                        "breakers.metrics.url"
                    },
                    u,
                ));
            }
        }
        for (field, url) in urls {
            check_host(&url, &self.allow_hosts).map_err(|m| at(field, &url, m))?;
        }

        // Phases, routes and breakers, for names in expectations.
        let phases: Vec<String> = self
            .dependency
            .phase_names()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        let routes: Vec<String> = self.dependency.routes.keys().cloned().collect();
        let breaker_names: Vec<String> = self.breakers.keys().cloned().collect();
        let mut observations = BTreeMap::new();
        for (name, spec) in &self.breakers {
            let obs = resolve_breaker(name, spec, &self.sut, &routes)
                .map_err(|m| at(&format!("breakers.{name}"), &format!("{name}:"), m))?;
            observations.insert(name.clone(), obs);
        }
        let breaker_routes = |b: &str| -> Option<String> {
            let spec = self.breakers.get(b)?;
            spec.route
                .clone()
                .or_else(|| routes.contains(&b.to_string()).then(|| b.to_string()))
        };
        let names = Names {
            phases: &phases,
            breakers: &breaker_names,
            routes: &routes,
            breaker_routes: &breaker_routes,
        };
        let mut expectations = Vec::new();
        for (i, spec) in self.expect.iter().enumerate() {
            let e = spec
                .value
                .resolve(&names)
                .map_err(|message| ScenarioError::Invalid {
                    file: file.to_string(),
                    line: spec.referenced.line(),
                    column: spec.referenced.column(),
                    field: format!("expect[{i}]"),
                    message,
                })?;
            expectations.push(e);
        }
        let mut ids: Vec<&str> = Vec::new();
        for (i, spec) in self.expect.iter().enumerate() {
            if let Some(id) = &spec.value.id {
                if ids.contains(&id.as_str()) {
                    return Err(ScenarioError::Invalid {
                        file: file.to_string(),
                        line: spec.referenced.line(),
                        column: spec.referenced.column(),
                        field: format!("expect[{i}].id"),
                        message: format!("the id `{id}` is used twice"),
                    });
                }
                ids.push(id);
            }
        }
        if let Some(proof) = &self.proof {
            if self.sut.demo.is_none() {
                return Err(at(
                    "proof",
                    "proof:",
                    "a proof switches the demo's mistakes, so it needs `sut: { demo: ... }`".into(),
                ));
            }
            if proof.fails.is_empty() {
                return Err(at(
                    "proof.fails",
                    "fails:",
                    "name at least one expectation id the mistake must fail".into(),
                ));
            }
            for f in &proof.fails {
                if !ids.contains(&f.as_str()) {
                    return Err(at(
                        "proof.fails",
                        "fails:",
                        format!(
                            "`{f}` is not the id of an expectation (ids: {})",
                            if ids.is_empty() {
                                "none".to_string()
                            } else {
                                ids.join(", ")
                            }
                        ),
                    ));
                }
            }
        }
        Ok(Validated {
            scenario: self,
            file: file.to_string(),
            expectations,
            breakers: observations,
        })
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
            let e = &mut e.value;
            for d in [&mut e.opens_within, &mut e.closes_within]
                .into_iter()
                .flatten()
            {
                *d = d.scaled(factor);
            }
            if let Some(r) = e.rate_while_open_below.as_mut() {
                *r = faultline_units::Rate::per_second(r.per_sec() / factor);
            }
            if e.sut_latency.is_some() {
                if let Some(b) = e.below.as_mut() {
                    if let Ok(d) = b.parse::<Dur>() {
                        *b = d.scaled(factor).to_string();
                    }
                }
            }
        }
    }
}

impl Validated {
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

fn resolve_breaker(
    name: &str,
    spec: &BreakerSpec,
    sut: &SutSpec,
    routes: &[String],
) -> Result<Observation, String> {
    if let Some(r) = &spec.route {
        if !routes.contains(r) {
            return Err(format!(
                "`route` names `{r}`, which is not under `dependency.routes` (routes: {})",
                routes.join(", ")
            ));
        }
    }
    let sources = [
        spec.metrics.is_some(),
        spec.webhook.is_some(),
        spec.log.is_some(),
        spec.inferred == Some(true),
    ];
    if sources.iter().filter(|s| **s).count() != 1 {
        return Err(
            "choose exactly one source: `metrics`, `webhook`, `log` or `inferred: true`".into(),
        );
    }
    if let Some(m) = &spec.metrics {
        let mapping = match (m.preset, &m.metric) {
            (Some(p), None) => StateMapping::preset(p, name, &m.labels),
            (None, Some(metric)) => {
                let encoding = match (&m.state_label, m.values.is_empty()) {
                    (Some(label), true) => Encoding::StateLabel(label.clone()),
                    (None, false) => {
                        let mut values = Vec::new();
                        for (state, v) in &m.values {
                            let s = BreakerState::parse(state).ok_or_else(|| format!("`values` has {state:?}; expected closed, open, half_open"))?;
                            values.push((*v, s));
                        }
                        Encoding::Gauge(values)
                    }
                    _ => return Err("a custom metric needs either `values` (a gauge) or `state_label` (one series per state)".into()),
                };
                StateMapping {
                    metric: metric.clone(),
                    labels: m.labels.clone(),
                    encoding,
                }
            }
            (Some(_), Some(_)) => return Err("give `preset` or `metric`, not both".into()),
            (None, None) => StateMapping::preset(Preset::Seed, name, &m.labels),
        };
        let url_or_path = m
            .url
            .clone()
            .unwrap_or_else(|| m.path.clone().unwrap_or_else(|| "/metrics".into()));
        return Ok(Observation::Metrics {
            url_or_path,
            mapping,
            interval: m.interval.unwrap_or(Dur::from_millis(100)),
        });
    }
    if let Some(w) = &spec.webhook {
        return Ok(Observation::Webhook {
            name: w.name.clone().unwrap_or_else(|| name.to_string()),
        });
    }
    if let Some(l) = &spec.log {
        if sut.command.is_none() {
            return Err("`log` observes a SUT's output, so it needs a `command` SUT".into());
        }
        let pattern = regex::Regex::new(&l.pattern)
            .map_err(|e| format!("`log.pattern` is not a valid regex: {e}"))?;
        if !pattern.capture_names().any(|n| n == Some("state")) {
            return Err(
                "`log.pattern` needs a named group `state`, e.g. (?P<state>open|closed|half_open)"
                    .into(),
            );
        }
        return Ok(Observation::Log { pattern });
    }
    let has_route = spec.route.is_some() || routes.contains(&name.to_string());
    if !has_route {
        return Err(
            "`inferred` needs the dependency route the breaker guards: add `route:`".into(),
        );
    }
    Ok(Observation::Inferred)
}

/// The placeholders a SUT command, its environment and its URL may use.
pub struct Placeholders {
    pub values: BTreeMap<String, String>,
    pub scale: f64,
}

impl Placeholders {
    pub fn names() -> Vec<String> {
        [
            "faultd.url",
            "faultd.host",
            "faultd.port",
            "faultd.control",
            "sut.port",
            "sut.url",
            "webhook.url",
            "seed",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Checks every `{...}` in `text`; returns the first unknown name.
    fn check(text: &str, known: &[String]) -> Result<(), String> {
        for name in braces(text) {
            let scaled = ["ms:", "secs:", "dur:"]
                .iter()
                .find_map(|p| name.strip_prefix(p));
            match scaled {
                Some(d) if d.parse::<Dur>().is_ok() => {}
                Some(_) => return Err(name.to_string()),
                None if known.iter().any(|k| k == name) => {}
                None => return Err(name.to_string()),
            }
        }
        Ok(())
    }

    /// Replaces every placeholder; durations in `{ms:..}`, `{secs:..}`, `{dur:..}` are scaled.
    pub fn render(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else {
                break;
            };
            let name = &rest[open + 1..open + close];
            out.push_str(&rest[..open]);
            let value =
                if let Some(d) = name.strip_prefix("ms:").and_then(|d| d.parse::<Dur>().ok()) {
                    format!("{}", d.scaled(self.scale).get().as_millis())
                } else if let Some(d) = name
                    .strip_prefix("secs:")
                    .and_then(|d| d.parse::<Dur>().ok())
                {
                    let s = d.scaled(self.scale).as_secs_f64();
                    if s.fract() == 0.0 {
                        format!("{s:.0}")
                    } else {
                        format!("{s}")
                    }
                } else if let Some(d) = name
                    .strip_prefix("dur:")
                    .and_then(|d| d.parse::<Dur>().ok())
                {
                    d.scaled(self.scale).to_string()
                } else if let Some(v) = self.values.get(name) {
                    v.clone()
                } else {
                    rest[open..open + close + 1].to_string()
                };
            out.push_str(&value);
            rest = &rest[open + close + 1..];
        }
        out.push_str(rest);
        out
    }
}

/// Merges `patch` into `value`: objects key by key, anything else replaced.
fn merge(value: &mut serde_json::Value, patch: &serde_json::Value) {
    match (value, patch) {
        (serde_json::Value::Object(v), serde_json::Value::Object(p)) => {
            for (k, pv) in p {
                merge(v.entry(k.clone()).or_insert(serde_json::Value::Null), pv);
            }
        }
        (v, p) => *v = p.clone(),
    }
}

fn braces(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices('{')
        .filter_map(move |(i, _)| text[i + 1..].find('}').map(|j| &text[i + 1..i + 1 + j]))
}

/// Refuses a URL whose host is not loopback and not in `allow`.
pub fn check_host(url: &str, allow: &[String]) -> Result<(), String> {
    let after_scheme = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| format!("{url:?} is not a URL (expected http://HOST:PORT)"))?;
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        authority
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(authority)
    };
    if is_loopback(host) || allow.iter().any(|a| a.eq_ignore_ascii_case(host)) {
        Ok(())
    } else {
        Err(format!("{host} is not a loopback address; faultline sends traffic to 127.0.0.1 / ::1 only unless the scenario lists the host under `allow_hosts`"))
    }
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<IpAddr>()
            .map(|ip| ip.is_loopback())
            .unwrap_or(false)
}

/// Builds an error for `field`, placing it at the line of the YAML key path `path` (each key searched below the
/// previous one, in block or flow style), or failing that at the first line containing `needle`.
fn locate(text: &str, file: &str, field: &str, needle: &str, message: String) -> ScenarioError {
    let path: Vec<&str> = field.split('.').collect();
    let by_path = locate_path(text, &path);
    let by_needle = || {
        text.lines()
            .enumerate()
            .find_map(|(i, l)| l.find(needle).map(|c| (i + 1, c + 1)))
    };
    match by_path.or_else(by_needle) {
        Some((line, column)) => ScenarioError::Invalid {
            file: file.to_string(),
            line: line as u64,
            column: column as u64,
            field: field.to_string(),
            message,
        },
        None => ScenarioError::InvalidNoLine {
            file: file.to_string(),
            field: field.to_string(),
            message,
        },
    }
}

/// The 1-based line and column of a key path such as `breakers.pricing.metrics`: each key is looked for after the
/// line of the previous one. List indices (`phases[1]`) step over that many list items.
pub fn locate_path(text: &str, path: &[&str]) -> Option<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut from = 0;
    let mut found = None;
    for segment in path {
        let (key, index) = match segment.split_once('[') {
            Some((k, rest)) => (k, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (*segment, None),
        };
        if key.is_empty() {
            continue;
        }
        let hit = lines.iter().enumerate().skip(from).find_map(|(i, l)| {
            let trimmed = l.trim_start();
            let block = trimmed.starts_with(&format!("{key}:"))
                || trimmed.starts_with(&format!("- {key}:"));
            let flow = [
                format!("{{ {key}:"),
                format!("{{{key}:"),
                format!(", {key}:"),
            ]
            .iter()
            .find_map(|p| l.find(p.as_str()).map(|c| c + p.len() - key.len() - 1));
            if block {
                Some((i, l.len() - trimmed.len()))
            } else {
                flow.map(|c| (i, c))
            }
        })?;
        from = hit.0;
        found = Some((hit.0 + 1, hit.1 + 1));
        if let Some(n) = index {
            let mut seen = 0;
            let item = lines.iter().enumerate().skip(from + 1).find(|(_, l)| {
                if l.trim_start().starts_with("- ") {
                    seen += 1;
                    seen == n + 1
                } else {
                    false
                }
            })?;
            from = item.0;
            found = Some((item.0 + 1, item.1.len() - item.1.trim_start().len() + 1));
        }
    }
    found
}

impl ScenarioError {
    /// The process exit code for this error: always 2, bad input.
    pub fn exit_code(&self) -> i32 {
        2
    }
}

/// The JSON Schema of the scenario format, for editor completion.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Scenario)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_pass_and_others_need_the_allow_list() {
        assert!(check_host("http://127.0.0.1:8080/x", &[]).is_ok());
        assert!(check_host("http://127.3.2.1:8080", &[]).is_ok());
        assert!(check_host("http://[::1]:8080/", &[]).is_ok());
        assert!(check_host("http://localhost:80", &[]).is_ok());
        let e = check_host("http://10.0.0.5:80", &[]).unwrap_err();
        assert!(e.contains("10.0.0.5 is not a loopback address"), "{e}");
        assert!(check_host("http://staging.internal:80", &["staging.internal".into()]).is_ok());
        assert!(check_host("not a url", &[]).is_err());
    }

    #[test]
    fn placeholders_render_ports_and_scaled_durations() {
        let p = Placeholders {
            values: BTreeMap::from([
                (
                    "faultd.url".to_string(),
                    "http://127.0.0.1:9000".to_string(),
                ),
                ("sut.port".to_string(), "8080".to_string()),
            ]),
            scale: 0.1,
        };
        assert_eq!(
            p.render("--dep={faultd.url} --port {sut.port}"),
            "--dep=http://127.0.0.1:9000 --port 8080"
        );
        assert_eq!(
            p.render("--timeout-ms={ms:250ms} --open={secs:30s} --t={dur:2s}"),
            "--timeout-ms=25 --open=3 --t=200ms"
        );
        assert!(Placeholders::check("{faultd.url}{ms:5s}", &Placeholders::names()).is_ok());
        assert_eq!(
            Placeholders::check("{faultd.uri}", &Placeholders::names()),
            Err("faultd.uri".into())
        );
        assert_eq!(
            Placeholders::check("{ms:5 sec}", &Placeholders::names()),
            Err("ms:5 sec".into())
        );
    }

    #[test]
    fn a_trace_becomes_a_step_then_ramps_between_rows() {
        let rows = parse_trace(
            "seconds,p50_ms,p99_ms,error_share\n0,120,200,0\n60,2000,14000,0\n90,14000,15000,10%\n",
        )
        .unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[2].errors.fraction(), 0.1);
        let spec = ReplaySpec {
            trace: "t.csv".into(),
            route: "reviews".into(),
            at: "10s".parse().unwrap(),
            phase: None,
            status: None,
        };
        let phases = spec.phases(&rows).unwrap();
        let summary: Vec<(String, String, Option<String>)> = phases
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    p.at.to_string(),
                    p.ramp.map(|r| r.to_string()),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("incident".to_string(), "10s".to_string(), None),
                (
                    "incident.1".to_string(),
                    "10.001s".to_string(),
                    Some("59.999s".to_string())
                ),
                (
                    "incident.2".to_string(),
                    "70.001s".to_string(),
                    Some("29.999s".to_string())
                ),
            ]
        );
    }

    #[test]
    fn a_bad_trace_names_its_line() {
        assert!(parse_trace("").unwrap_err().contains("empty"));
        assert!(parse_trace("t,p50,p99,e\n").unwrap_err().contains("header"));
        let e = parse_trace("seconds,p50_ms,p99_ms,error_share\n0,120,200,0\n5,abc,200,0\n")
            .unwrap_err();
        assert!(e.starts_with("line 3: p50_ms"), "{e}");
        let e = parse_trace("seconds,p50_ms,p99_ms,error_share\n5,120,200,0\n5,120,200,0\n")
            .unwrap_err();
        assert!(e.contains("must increase"), "{e}");
        let e = parse_trace("seconds,p50_ms,p99_ms,error_share\n0,300,200,0\n").unwrap_err();
        assert!(e.contains("below p50_ms"), "{e}");
        let e = parse_trace("seconds,p50_ms,p99_ms,error_share\n0,100,200,1.5\n").unwrap_err();
        assert!(e.contains("over 1"), "{e}");
    }

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
