//! `faultline validate`: checks scenario files without running them. Not where the checks are: `Scenario::load`
//! makes them all.

use std::path::PathBuf;

use crate::scenario::{Overrides, Scenario};

/// Loads each scenario as written (no overrides) and prints `ok` or its error; exits 2 if any is invalid.
pub fn validate(paths: &[PathBuf]) -> i32 {
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
                eprintln!("{}", e.render());
                code = 2;
            }
        }
    }
    code
}
