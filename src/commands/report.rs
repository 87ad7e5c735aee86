//! `faultline report`: renders a finished run's report files again from its saved data. Not for writing a report
//! during a run (`run_command` does, through `report::write`).

use std::path::Path;

use crate::report;

/// Re-renders the report in `run_dir` and prints its summary; exits 2 if the saved data cannot be read.
pub fn report(run_dir: &Path) -> i32 {
    match report::rerender(run_dir) {
        Ok(r) => {
            print!("{}", report::summary::text(&r));
            println!("report: {}", run_dir.display());
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}
