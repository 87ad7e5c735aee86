//! `faultline list`: the scenarios in a folder, one line each with its length and the start of its description.
//! Not a validator: an invalid scenario is listed with its error, and the command still exits 0.

use std::path::{Path, PathBuf};

use crate::scenario::{Overrides, Scenario};

/// Prints every `.yaml`/`.yml` scenario in `dir`, sorted by path (with `json`, one JSON array of `{ file, name,
/// duration_s, description }`, or `{ file, error }` for an invalid one); exits 2 only if the folder cannot be read.
pub fn list(dir: &Path, as_json: bool) -> i32 {
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
    let mut results = Vec::new();
    for p in entries {
        let name = p.display().to_string();
        match Scenario::load(&p, &Overrides::default()) {
            Ok(v) if as_json => results.push(serde_json::json!({
                "file": name,
                "name": v.scenario.name,
                "duration_s": v.scenario.duration.as_secs_f64(),
                "description": v.scenario.description.as_deref().unwrap_or("").trim(),
            })),
            Err(e) if as_json => {
                results.push(serde_json::json!({ "file": name, "error": e.to_string() }))
            }
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
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&results).unwrap_or_default()
        );
    }
    0
}
