//! `faultline report`: renders a finished run's report files again from its saved data. Not for writing a report
//! during a run (`run_command` does, through `report::write`).

use std::path::Path;

use crate::report;

/// How `faultline report` prints the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// The plain-text summary, as `faultline run` prints it.
    #[default]
    Text,
    /// GitHub-flavoured Markdown, as appended to a CI job's summary.
    Markdown,
    /// result.json, as `faultline run --json` prints it.
    Json,
}

/// Re-renders the report in `run_dir` and prints its summary in `format`; exits 2 if the saved data cannot be read.
pub fn report(run_dir: &Path, format: Format) -> i32 {
    match report::rerender(run_dir) {
        Ok(r) => {
            match format {
                Format::Text => {
                    print!("{}", report::summary::text(&r));
                    println!("report: {}", run_dir.display());
                }
                Format::Markdown => print!("{}", report::markdown::markdown(&r, run_dir)),
                Format::Json => {
                    println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default())
                }
            }
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}
