//! The `faultline` command: runs scenarios, validates them, prints their schema, lists the bundled ones.
//! Exit codes: 0 every expectation held, 1 an expectation failed, 2 the scenario or the command was wrong, 3 the run
//! itself broke (the SUT would not start or died, a port was taken, requests were not conserved), 130 interrupted.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use clap::{Parser, Subcommand};
use faultline::report;
use faultline::run::{self, Ending};
use faultline::scenario::{self, Overrides, Scenario};

#[derive(Parser)]
#[command(
    name = "faultline",
    version,
    about = "Chaos-testing harness for the resilience of HTTP services",
    long_about = "faultline runs an incident against a service: a fake dependency (faultd) slows, fails or browns out \
on a schedule while an open-model load generator drives the service under test through it. It records HDR latency, \
the calls in flight at the dependency and the service's circuit-breaker transitions, and checks them against the \
scenario's expectations.",
    after_help = "Examples:\n  faultline run scenarios/slow-dependency.yaml\n  faultline run scenarios/slow-dependency.yaml --time-scale 0.2 --report-dir /tmp/run1\n  faultline validate scenarios/*.yaml\n  faultline schema > scenario.schema.json\n  faultline compare reports/x/run-a reports/x/run-b --threshold 10%\n\nExit codes: 0 all expectations held, 1 an expectation failed, 2 bad scenario or usage, 3 the run broke, 130 interrupted."
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
        /// same counts: calls per breaker window, calls in flight, probes).
        #[arg(long, default_value_t = 1.0)]
        time_scale: f64,
        /// Turn on one of the demo service's mistake switches (repeatable), e.g. --mistake no_timeout.
        #[arg(long, value_enum)]
        mistake: Vec<demo::Mistake>,
        /// Print result.json to stdout instead of the summary.
        #[arg(long)]
        json: bool,
    },
    /// Run a scenario twice against the demo service: with its recommended configuration every expectation must
    /// hold; with the scenario's `proof.mistake` switched on, the expectations in `proof.fails` must fail.
    Prove {
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// Where to write the reports (default reports/<scenario>/<UTC timestamp>-{recommended,mistake}/).
        #[arg(long)]
        report_dir: Option<PathBuf>,
        #[arg(long, default_value_t = 1.0)]
        time_scale: f64,
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Check scenario files without running them.
    Validate {
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
    },
    /// Print the JSON Schema of the scenario format (for editor completion).
    Schema,
    /// Render a run's report files again from its saved data (result.json, load.json, dependency.json).
    Report {
        /// The run directory, e.g. reports/slow-dependency/2026-11-30T09-00-00Z.
        run_dir: PathBuf,
    },
    /// Compare two runs phase by phase; exit 1 if any percentile of B is slower than A by more than the threshold.
    Compare {
        run_a: PathBuf,
        run_b: PathBuf,
        /// The allowed slowdown, relative: "10%" or "0.1".
        #[arg(long, default_value = "10%")]
        threshold: String,
    },
    /// List the scenarios in a folder with their descriptions.
    List {
        #[arg(default_value = "scenarios")]
        dir: PathBuf,
    },
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
        } => run_command(
            &scenario,
            report_dir,
            &Overrides {
                seed,
                time_scale: Some(time_scale),
                mistakes: mistake,
                patch: None,
            },
            json,
        ),
        Command::Prove {
            scenarios,
            report_dir,
            time_scale,
            seed,
        } => prove(&scenarios, report_dir, time_scale, seed),
        Command::Validate { scenarios } => validate(&scenarios),
        Command::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&scenario::json_schema()).unwrap_or_default()
            );
            0
        }
        Command::List { dir } => list(&dir),
        Command::Report { run_dir } => match report::rerender(&run_dir) {
            Ok(r) => {
                print!("{}", report::summary::text(&r));
                println!("report: {}", run_dir.display());
                0
            }
            Err(e) => {
                eprintln!("error: {e}");
                2
            }
        },
        Command::Compare {
            run_a,
            run_b,
            threshold,
        } => compare(&run_a, &run_b, &threshold),
    };
    ExitCode::from(code as u8)
}

fn run_command(path: &Path, report_dir: Option<PathBuf>, overrides: &Overrides, json: bool) -> i32 {
    let v = match Scenario::load(path, overrides) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return e.exit_code();
        }
    };
    match execute(&v, report_dir, overrides.time_scale.unwrap_or(1.0)) {
        Ok((code, dir, result)) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&result).unwrap_or_default()
                );
            } else {
                print!("{}", report::summary::text(&result));
                println!("report: {}", dir.display());
            }
            code
        }
        Err(code) => code,
    }
}

/// Runs a validated scenario and writes its report; `Err(exit code)` when the run could not happen at all.
fn execute(
    v: &scenario::Validated,
    report_dir: Option<PathBuf>,
    time_scale: f64,
) -> Result<(i32, PathBuf, report::ResultFile), i32> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the runtime: {e}");
            3
        })?;
    eprintln!(
        "faultline: running {} ({:.1} s{})",
        v.scenario.name,
        v.scenario.duration.as_secs_f64(),
        if time_scale != 1.0 {
            format!(", time scale {time_scale}")
        } else {
            String::new()
        }
    );
    // A signal that arrives after the run has handed back its recording (while the reports are written) is not
    // seen by the run itself: this listener catches it, so the report is still marked aborted and the exit is 130.
    let late_signal: Arc<OnceLock<&'static str>> = Arc::default();
    {
        let late_signal = late_signal.clone();
        let _guard = runtime.enter();
        let mut signals = run::Signals::new();
        runtime.spawn(async move {
            let _ = late_signal.set(signals.recv().await);
        });
    }
    let mut out = runtime.block_on(run::run(v)).map_err(|e| {
        eprintln!("error: the run broke: {e}");
        3
    })?;
    let dir = report_dir
        .or_else(|| v.scenario.report.dir.as_ref().map(PathBuf::from))
        .unwrap_or_else(|| {
            report::default_dir(Path::new("reports"), &v.scenario.name, out.started)
        });
    loop {
        if let (Ending::Completed, Some(signal)) = (&out.ending, late_signal.get()) {
            out.ending = Ending::Aborted {
                signal: signal.to_string(),
            };
        }
        let code = exit_code(&out);
        let result = report::write(&dir, v, &out, time_scale, code).map_err(|e| {
            eprintln!("error: {e}");
            3
        })?;
        // Written as completed, but a signal came while writing: write it again, marked aborted.
        if out.ending == Ending::Completed && late_signal.get().is_some() {
            continue;
        }
        return Ok((code, dir, result));
    }
}

/// The exit code a run deserves: 130 interrupted, 3 the run broke, 1 an expectation failed, 0 all held.
fn exit_code(out: &run::RunOutput) -> i32 {
    code_for(
        &out.ending,
        !out.run_errors.is_empty(),
        out.verdicts.iter().any(|v| !v.passed),
    )
}

/// The exit code of an ending: the run's own failures (broken conservation, say) outrank failed expectations.
fn code_for(ending: &Ending, run_failed: bool, expectation_failed: bool) -> i32 {
    match ending {
        Ending::Aborted { .. } => 130,
        Ending::SutDied { .. } | Ending::Deadline => 3,
        Ending::StoppedOnFailure { .. } => 1,
        Ending::Completed if run_failed => 3,
        Ending::Completed if expectation_failed => 1,
        Ending::Completed => 0,
    }
}

fn prove(
    paths: &[PathBuf],
    report_dir: Option<PathBuf>,
    time_scale: f64,
    seed: Option<u64>,
) -> i32 {
    let mut worst = 0;
    for path in paths {
        let base = Overrides {
            seed,
            time_scale: Some(time_scale),
            mistakes: Vec::new(),
            patch: None,
        };
        let v = match Scenario::load(path, &base) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("error: {e}");
                worst = worst.max(2);
                continue;
            }
        };
        let Some(proof) = v.scenario.proof.clone() else {
            eprintln!("error: {}: the scenario has no `proof:` section (the mistake to switch on and the expectations it must fail)", path.display());
            worst = worst.max(2);
            continue;
        };
        let dir_for = |suffix: &str| {
            report_dir
                .as_ref()
                .map(|d| d.join(&v.scenario.name).join(suffix))
        };
        let recommended = match execute(&v, dir_for("recommended"), time_scale) {
            Ok(r) => r,
            Err(code) => {
                worst = worst.max(code);
                continue;
            }
        };
        let with_mistake = Overrides {
            mistakes: proof.mistake.clone(),
            patch: proof.patch.clone(),
            ..base
        };
        let vm = match Scenario::load(path, &with_mistake) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("error: {e}");
                worst = worst.max(2);
                continue;
            }
        };
        let mistaken = match execute(&vm, dir_for("mistake"), time_scale) {
            Ok(r) => r,
            Err(code) => {
                worst = worst.max(code);
                continue;
            }
        };
        let mut mistake_names: Vec<String> = proof
            .mistake
            .iter()
            .map(|m| {
                serde_json::to_value(m)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default()
            })
            .collect();
        if let Some(p) = &proof.patch {
            mistake_names.push(format!("the patch {p}"));
        }
        let mut problems = Vec::new();
        if recommended.0 != 0 {
            problems.push(format!(
                "the recommended configuration exited {} instead of 0:",
                recommended.0
            ));
            for vd in recommended.2.verdicts.iter().filter(|vd| !vd.passed) {
                problems.push(format!("    {}", vd.sentence));
            }
        }
        if mistaken.0 != 1 {
            problems.push(format!(
                "with the mistake ({}) the run exited {} instead of 1",
                mistake_names.join(", "),
                mistaken.0
            ));
        }
        for id in &proof.fails {
            match mistaken
                .2
                .verdicts
                .iter()
                .find(|vd| vd.id.as_deref() == Some(id))
            {
                Some(vd) if !vd.passed => {}
                Some(vd) => problems.push(format!(
                    "with the mistake, expectation `{id}` held: {}",
                    vd.sentence
                )),
                None => problems.push(format!("no verdict for expectation `{id}`")),
            }
        }
        let failed_with_mistake: Vec<&str> = mistaken
            .2
            .verdicts
            .iter()
            .filter(|vd| !vd.passed)
            .map(|vd| vd.sentence.as_str())
            .collect();
        if problems.is_empty() {
            println!(
                "PROVEN {}: recommended configuration passes; with {} it fails:",
                v.scenario.name,
                mistake_names.join(", ")
            );
            for s in failed_with_mistake {
                println!("    {s}");
            }
        } else {
            println!("NOT PROVEN {}:", v.scenario.name);
            for p in &problems {
                println!("    {p}");
            }
            worst = worst.max(1);
        }
        println!(
            "    reports: {} and {}",
            recommended.1.display(),
            mistaken.1.display()
        );
    }
    worst
}

fn validate(paths: &[PathBuf]) -> i32 {
    let mut code = 0;
    for p in paths {
        match Scenario::load(p, &Overrides::default()) {
            Ok(v) => println!(
                "{}: ok ({} expectations, {} phases)",
                p.display(),
                v.expectations.len(),
                v.scenario.dependency.phase_names().len()
            ),
            Err(e) => {
                eprintln!("error: {e}");
                code = 2;
            }
        }
    }
    code
}

fn compare(a: &Path, b: &Path, threshold: &str) -> i32 {
    let Some(t) = report::compare::parse_threshold(threshold) else {
        eprintln!("error: --threshold {threshold:?} is not a share such as 10% or 0.1");
        return 2;
    };
    let (ra, rb) = match (report::read(a), report::read(b)) {
        (Ok(ra), Ok(rb)) => (ra, rb),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let c = report::compare(&ra, &rb, t);
    print!("{}", c.text());
    if c.regressed() {
        1
    } else {
        0
    }
}

fn list(dir: &Path) -> i32 {
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect(),
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", dir.display());
            return 2;
        }
    };
    entries.sort();
    let width = entries
        .iter()
        .map(|p| p.display().to_string().len())
        .max()
        .unwrap_or(0);
    for p in entries {
        let name = p.display().to_string();
        match Scenario::load(&p, &Overrides::default()) {
            Ok(v) => {
                let desc = v
                    .scenario
                    .description
                    .as_deref()
                    .unwrap_or("")
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                let short: String = desc.chars().take(100).collect();
                let more = if desc.chars().count() > 100 {
                    "…"
                } else {
                    ""
                };
                println!(
                    "{name:<width$}  {:>5}s  {short}{more}",
                    v.scenario.duration.as_secs_f64().round()
                );
            }
            Err(e) => println!("{name:<width$}  invalid: {e}"),
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_whose_requests_were_not_conserved_exits_3_even_when_every_expectation_held() {
        assert_eq!(code_for(&Ending::Completed, true, false), 3);
        assert_eq!(code_for(&Ending::Completed, true, true), 3);
        assert_eq!(code_for(&Ending::Completed, false, true), 1);
        assert_eq!(code_for(&Ending::Completed, false, false), 0);
    }

    #[test]
    fn an_interrupted_run_exits_130_and_a_broken_one_3_whatever_the_expectations() {
        let aborted = Ending::Aborted {
            signal: "SIGINT".into(),
        };
        let died = Ending::SutDied {
            status: "signal: 9".into(),
            last_lines: String::new(),
        };
        for (run_failed, expectation_failed) in [(false, false), (true, true)] {
            assert_eq!(code_for(&aborted, run_failed, expectation_failed), 130);
            assert_eq!(code_for(&died, run_failed, expectation_failed), 3);
            assert_eq!(
                code_for(&Ending::Deadline, run_failed, expectation_failed),
                3
            );
        }
    }
}
