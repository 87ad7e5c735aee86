//! `faultline list`: the scenarios in a folder, one line each with its length and the start of its description.
//! Not a validator: an invalid scenario is listed with its error, and the command still exits 0.

use std::path::{Path, PathBuf};

use crate::scenario::{Overrides, Scenario};

/// Prints every `.yaml`/`.yml` scenario in `dir`, sorted by path; exits 2 only if the folder cannot be read.
pub fn list(dir: &Path) -> i32 {
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
