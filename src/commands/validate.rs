//! `faultline validate`: checks scenario files without running them. Not where the checks are: `Scenario::load`
//! makes them all.

use std::path::PathBuf;

use serde_json::json;

use crate::scenario::{Overrides, Scenario};

/// Loads each scenario as written (no overrides) and prints `ok` or its error; with `json`, one JSON array on
/// stdout instead, an object per file (`valid`, and its counts or its `errors`). Exits 2 if any is invalid.
pub fn validate(paths: &[PathBuf], as_json: bool) -> i32 {
    let mut code = 0;
    let mut results = Vec::new();
    for p in paths {
        let file = p.display().to_string();
        match Scenario::load(p, &Overrides::default()) {
            Ok(v) => {
                let (expectations, phases) = (
                    v.expectations.len(),
                    v.scenario.dependency.phase_names().len(),
                );
                if as_json {
                    results.push(json!({
                        "file": file, "valid": true, "name": v.scenario.name,
                        "expectations": expectations, "phases": phases,
                    }));
                } else {
                    println!("{file}: ok ({expectations} expectations, {phases} phases)");
                }
            }
            Err(e) => {
                if as_json {
                    results.push(json!({ "file": file, "valid": false, "errors": e.entries() }));
                } else {
                    eprintln!("{}", e.render());
                }
                code = 2;
            }
        }
    }
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&results).unwrap_or_default()
        );
    }
    code
}
