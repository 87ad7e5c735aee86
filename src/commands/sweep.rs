//! `faultline sweep`: runs a scenario once per combination of the varied parameters, one after another, each with
//! the same seed and time scale, and compares them: after every run the table of the runs done is written into the
//! sweep's folder (sweep.md, sweep.json, sweep.html), so that Ctrl-C, which ends the run in progress as it ends
//! `faultline run`, keeps it. A sweep says how many runs it makes and how long they take before the first, and
//! asks first past [`CONFIRM_ABOVE`] runs.
//!
//! Not for planning (`sweep::Plan` loads every combination first), the table and its files (`sweep`), nor for
//! running one scenario (`execute_with` of the run command).

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use super::run::{execute_with, Exports};
use crate::report;
use crate::run::Signals;
use crate::scenario::Overrides;
use crate::sweep::{self, Plan, Status, SweepError, Vary};

/// A sweep of more runs than this is confirmed first: on the terminal, or by `--yes`.
pub const CONFIRM_ABOVE: usize = 20;

/// What `faultline sweep` was asked for.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// The `--vary` options, in the order given.
    pub varies: Vec<Vary>,
    /// Every run's time scale.
    pub time_scale: f64,
    /// Every run's seed, instead of the scenario's.
    pub seed: Option<u64>,
    /// The sweep's folder (default `reports/<scenario>/sweep-<UTC timestamp>/`).
    pub report_dir: Option<PathBuf>,
    /// Runs more than [`CONFIRM_ABOVE`] without asking.
    pub yes: bool,
    /// Prints sweep.json instead of the table.
    pub json: bool,
}

/// Plans the sweep of the scenario at `path`, runs it and prints the table (or sweep.json); returns the exit code:
/// 0 at least one combination passed every expectation, 1 none did, 2 the scenario or the options were wrong
/// (nothing ran), 3 a run broke or the table could not be written, 130 interrupted.
pub fn sweep(path: &Path, o: &SweepOptions) -> i32 {
    let base = Overrides {
        seed: o.seed,
        time_scale: Some(o.time_scale),
        ..Overrides::default()
    };
    let plan = match Plan::new(path, &o.varies, &base) {
        Ok(p) => p,
        Err(SweepError::Scenario(e)) => {
            eprintln!("{}", e.render());
            return e.exit_code();
        }
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let runs = plan.runs.len();
    eprintln!(
        "faultline: sweep of {} over {}: {runs} run{}, at least {} of real time",
        plan.base.scenario.name,
        o.varies
            .iter()
            .map(|v| v.name.as_str())
            .collect::<Vec<_>>()
            .join(" x "),
        if runs == 1 { "" } else { "s" },
        humantime::format_duration(whole_seconds(plan.load_time())),
    );
    if runs > CONFIRM_ABOVE && !o.yes {
        match confirm(runs) {
            Ok(true) => {}
            Ok(false) => {
                eprintln!("faultline: not confirmed; nothing ran");
                return 2;
            }
            Err(why) => {
                eprintln!("error: {why}");
                return 2;
            }
        }
    }
    let dir = o.report_dir.clone().unwrap_or_else(|| {
        Path::new("reports")
            .join(&plan.base.scenario.name)
            .join(format!("sweep-{}", report::stamp(SystemTime::now())))
    });
    let heard = hear_signals();
    let mut table = plan.table(o.time_scale);
    for (i, (combination, v)) in plan.runs.iter().enumerate() {
        if heard.get().is_none() {
            eprintln!(
                "faultline: sweep run {} of {runs}: {}",
                i + 1,
                combination.label()
            );
            let run_dir = dir.join(combination.folder(i));
            match execute_with(v, Some(run_dir), o.time_scale, &Exports::default()) {
                Ok((code, report, result)) => table.add(combination, code, &report, &result),
                Err(code) => table.add_broken(combination, code),
            }
        }
        // A signal during a run ends that run (exit 130); one between two runs, or in the instant before a run
        // listens, is heard here: either way the sweep stops before the next run.
        table.interrupted = heard.get().is_some()
            || table
                .runs
                .last()
                .is_some_and(|r| r.status == Status::Interrupted);
        if let Err(e) = sweep::write(&dir, &table) {
            eprintln!("error: {e}");
            return 3;
        }
        if table.interrupted {
            break;
        }
    }
    if o.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&table).unwrap_or_default()
        );
    } else {
        print!("{}", sweep::text(&table));
        println!("sweep: {}", dir.join("sweep.html").display());
    }
    table.exit_code()
}

/// `d` without its fraction of a second, for people.
fn whole_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs().max(1))
}

/// Asks on the terminal whether to make `runs` runs; an error when there is no terminal to ask on.
fn confirm(runs: usize) -> Result<bool, String> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(format!(
            "a sweep of {runs} runs (more than {CONFIRM_ABOVE}) is confirmed first, and there is no terminal to ask \
             on: pass --yes"
        ));
    }
    eprint!("faultline: make all {runs} runs? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| format!("cannot read the answer: {e}"))?;
    Ok(matches!(answer.trim().to_lowercase().as_str(), "y" | "yes"))
}

/// Hears Ctrl-C and SIGTERM for the whole sweep, from before its first run: a signal between two runs (which no
/// run hears) stops the sweep there as one during a run does. The handlers are installed when this returns.
fn hear_signals() -> Arc<OnceLock<&'static str>> {
    let heard: Arc<OnceLock<&'static str>> = Arc::default();
    let (installed, wait) = std::sync::mpsc::channel();
    let set = heard.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        let Ok(runtime) = runtime else {
            let _ = installed.send(());
            return;
        };
        runtime.block_on(async move {
            let mut signals = Signals::new();
            let _ = installed.send(());
            let _ = set.set(signals.recv().await);
        });
    });
    let _ = wait.recv();
    heard
}
