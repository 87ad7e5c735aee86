//! `faultline run`: loads a scenario, runs it on a runtime of its own, writes the report and prints the summary, and
//! turns the run's ending and verdicts into the exit code. Not the run itself (`run::run` starts and stops the
//! components) nor the judging (`expect` gives the verdicts); `prove` runs scenarios through `execute` too.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::report;
pub use crate::run::INCONCLUSIVE;
use crate::run::{self, Ending};
use crate::scenario::{Overrides, Scenario, Validated};

/// Runs the scenario at `path` with `overrides` and prints the summary (or result.json with `json`); returns the
/// exit code: 0 every expectation held, 1 one failed, 2 the scenario is invalid, 3 the run broke, 4 nothing failed but
/// at least one expectation could not be judged, 130 interrupted.
pub fn run_command(
    path: &Path,
    report_dir: Option<PathBuf>,
    overrides: &Overrides,
    json: bool,
    exports: &Exports,
) -> i32 {
    if let Some(a) = &exports.agents {
        if let Some(addr) = a
            .listen
            .filter(|addr| !addr.ip().is_loopback() && !a.allow_remote)
        {
            eprintln!("error: {}", crate::agents::AgentsError::Remote(addr));
            return 2;
        }
    }
    let v = match Scenario::load(path, overrides) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{}", e.render());
            return e.exit_code();
        }
    };
    match execute_with(&v, report_dir, overrides.time_scale.unwrap_or(1.0), exports) {
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
            if let Some(w) = result.unmatched.warning() {
                eprintln!("{w}");
            }
            if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true") {
                github_actions(&v, &dir, &result, json);
            }
            code
        }
        Err(code) => code,
    }
}

/// In a GitHub Actions job: appends the Markdown summary to `$GITHUB_STEP_SUMMARY` and prints an annotation per
/// failed or inconclusive expectation, at its line in the scenario (on stderr when stdout carries result.json).
/// Neither changes the exit code: a summary file that cannot be written is said on stderr.
fn github_actions(v: &Validated, dir: &Path, result: &report::ResultFile, json: bool) {
    if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
        let md = report::markdown::markdown(result, dir);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, md.as_bytes()));
        if let Err(e) = written {
            eprintln!(
                "warning: cannot append the summary to {}: {e}",
                Path::new(&path).display()
            );
        }
    }
    let lines: Vec<u64> = v
        .scenario
        .expect
        .iter()
        .map(|e| e.referenced.line())
        .collect();
    for a in report::markdown::annotations(result, &v.file, &lines) {
        if json {
            eprintln!("{a}");
        } else {
            println!("{a}");
        }
    }
}

/// How a run goes beyond its report: where its figures go besides it (a live Prometheus endpoint, a Pushgateway
/// at the end), and which agents send its load.
#[derive(Debug, Clone, Default)]
pub struct Exports {
    /// Serve `/metrics` here while the run goes on.
    pub metrics_listen: Option<SocketAddr>,
    /// Serve it on an address that is not loopback too.
    pub allow_remote: bool,
    /// Push the final values to this Pushgateway when the run ends.
    pub push: Option<String>,
    /// After the run, keep serving `/metrics` until a scrape has read the final values, at most this long.
    pub linger: std::time::Duration,
    /// Spread the load over agents (`--agents N`) instead of sending it from this process.
    pub agents: Option<crate::agents::AgentsOptions>,
}

/// Runs a validated scenario and writes its report: the exit code, the report folder and the result; `Err(exit code)`
/// when the run could not happen at all or its report could not be written. The run's figures are exported as
/// `exports` asks, and its load spread over agents if it says so. What could not be exported goes into the result
/// (result.json's `not_exported`, summary.txt) and never changes the exit code.
pub(crate) fn execute_with(
    v: &Validated,
    report_dir: Option<PathBuf>,
    time_scale: f64,
    exports: &Exports,
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
    let metrics = (exports.metrics_listen.is_some() || exports.push.is_some())
        .then(|| crate::metrics::Metrics::new(v));
    let mut server = None;
    if let (Some(m), Some(addr)) = (&metrics, exports.metrics_listen) {
        match runtime.block_on(m.serve(addr, exports.allow_remote)) {
            Ok(endpoint) => {
                eprintln!("faultline: metrics on http://{}/metrics", endpoint.addr);
                server = Some(endpoint);
            }
            Err(p) => m.problem(p),
        }
    }
    let on_tick = metrics.clone().map(|m| move |t: &run::Tick<'_>| m.tick(t));
    let mut out = runtime
        .block_on(run::run_with(
            v,
            on_tick.as_ref().map(|f| f as run::OnTick),
            exports.agents.as_ref(),
        ))
        .map_err(|e| {
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
        let mut result = report::write(&dir, v, &out, time_scale, code).map_err(|e| {
            eprintln!("error: {e}");
            3
        })?;
        // Written as completed, but a signal came while writing: write it again, marked aborted.
        if out.ending == Ending::Completed && late_signal.get().is_some() {
            continue;
        }
        if let Some(m) = &metrics {
            m.finish(&result, &out.load.buckets);
            if let Some(url) = &exports.push {
                if let Err(p) = runtime.block_on(m.push(url, &v.scenario.name)) {
                    m.problem(p);
                }
            }
            if let Some(endpoint) = server.take() {
                if !exports.linger.is_zero() {
                    // Said on stderr (stdout may be --json): why the run has not ended yet.
                    eprintln!(
                        "metrics: the final values wait at http://{}/metrics for a scrape, at most {} \
                         (--metrics-linger; Ctrl-C ends the wait)",
                        endpoint.addr,
                        humantime::format_duration(exports.linger)
                    );
                }
                runtime.block_on(endpoint.close(m, exports.linger, || late_signal.get().is_some()));
            }
            result.not_exported = m.problems();
            if !result.not_exported.is_empty() {
                if let Err(e) = report::write_result(&dir, &result) {
                    eprintln!("warning: {e}");
                }
            }
        }
        return Ok((code, dir, result));
    }
}

/// The exit code a run deserves: 130 interrupted, 3 the run broke, 1 an expectation failed, 0 all held.
fn exit_code(out: &run::RunOutput) -> i32 {
    code_for(
        &out.ending,
        !out.run_errors.is_empty(),
        out.verdicts.iter().any(|v| v.failed()),
        out.verdicts.iter().any(|v| v.inconclusive()),
    )
}

/// The exit code of an ending: the run's own failures (broken conservation, say) outrank failed expectations,
/// which outrank expectations that could not be judged.
fn code_for(
    ending: &Ending,
    run_failed: bool,
    expectation_failed: bool,
    inconclusive: bool,
) -> i32 {
    match ending {
        Ending::Aborted { .. } => 130,
        Ending::SutDied { .. } | Ending::Deadline | Ending::AgentLost { .. } => 3,
        Ending::StoppedOnFailure { .. } => 1,
        Ending::Completed if run_failed => 3,
        Ending::Completed if expectation_failed => 1,
        Ending::Completed if inconclusive => INCONCLUSIVE,
        Ending::Completed => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_whose_requests_were_not_conserved_exits_3_even_when_every_expectation_held() {
        assert_eq!(code_for(&Ending::Completed, true, false, false), 3);
        assert_eq!(code_for(&Ending::Completed, true, true, false), 3);
        assert_eq!(code_for(&Ending::Completed, false, true, false), 1);
        assert_eq!(code_for(&Ending::Completed, false, false, false), 0);
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
            assert_eq!(
                code_for(&aborted, run_failed, expectation_failed, true),
                130
            );
            assert_eq!(code_for(&died, run_failed, expectation_failed, true), 3);
            assert_eq!(
                code_for(&Ending::Deadline, run_failed, expectation_failed, true),
                3
            );
        }
    }

    #[test]
    fn an_inconclusive_verdict_exits_4_only_when_nothing_failed() {
        assert_eq!(
            code_for(&Ending::Completed, false, false, true),
            INCONCLUSIVE
        );
        assert_eq!(code_for(&Ending::Completed, false, true, true), 1);
        assert_eq!(code_for(&Ending::Completed, true, false, true), 3);
        let stopped = Ending::StoppedOnFailure {
            expectation: "pool".into(),
        };
        assert_eq!(code_for(&stopped, false, false, true), 1);
    }
}
