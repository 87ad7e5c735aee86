//! `faultline import`: reads the record of an incident and writes a scenario (to a file or stdout), then prints
//! what it read to stderr. Not where the reading is: `crate::import` does it all.

use std::path::{Path, PathBuf};

use crate::import::{import as read_record, ImportOptions};
use crate::scenario::{Overrides, Scenario};

/// Imports `paths` and writes the scenario to `out` (stdout when `None`). A scenario written to a file is loaded
/// back and validated, so what import writes is what `faultline run` accepts. Exit 0, or 2 with the reason.
pub fn import(paths: &[PathBuf], options: &ImportOptions, out: Option<&Path>) -> i32 {
    let imported = match read_record(paths, options) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    if imported.bad > 0 {
        eprintln!(
            "warning: skipped {} of {} lines that are not {} log lines:",
            imported.bad, imported.lines, options.format
        );
        for b in &imported.first_bad {
            eprintln!("  {}:{}: {}", b.path.display(), b.line, b.why);
        }
    }
    let phases: Vec<String> = imported
        .phases
        .iter()
        .map(|p| format!("{} ({}..{})", p.name, p.start, p.end))
        .collect();
    eprintln!(
        "read {} requests from {} lines; dependencies: {}; phases (in buckets): {}",
        imported.records,
        imported.lines,
        if imported.dependencies.is_empty() {
            "none in the record".to_string()
        } else {
            imported.dependencies.join(", ")
        },
        phases.join(", ")
    );
    match out {
        None => {
            print!("{}", imported.yaml);
            0
        }
        Some(path) => {
            if let Err(e) = std::fs::write(path, &imported.yaml) {
                eprintln!("error: cannot write {}: {e}", path.display());
                return 2;
            }
            match Scenario::load(path, &Overrides::default()) {
                Ok(_) => {
                    eprintln!("wrote {} (validated)", path.display());
                    0
                }
                Err(e) => {
                    eprintln!(
                        "error: the scenario written to {} does not validate: {e}",
                        path.display()
                    );
                    2
                }
            }
        }
    }
}
