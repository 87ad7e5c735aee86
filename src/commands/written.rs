//! A scenario a command wrote (`faultline init`, `faultline size -o`), checked as `faultline run` will take it and
//! written to its file or printed. Not for making the scenario: each command makes its own.

use std::io::Write;
use std::path::Path;

use crate::scenario::{Overrides, Scenario};

/// Validates `text` as a scenario in the folder of `out`, then writes it there (refusing to replace a file unless
/// `force`), or prints it when `out` is `None`. `label` names the text in errors when there is no file; `made` says
/// what made it ("these flags make"). Returns the exit code: 0 written, 2 invalid or not written.
pub(super) fn deliver(text: &str, out: Option<&Path>, force: bool, label: &str, made: &str) -> i32 {
    let label = out.map_or(label.to_string(), |p| p.display().to_string());
    let base = out
        .and_then(Path::parent)
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // What is written is what `faultline run` takes: checked with the environment it will run in.
    if let Err(e) = Scenario::parse_in(text, &label, base, &Overrides::default()) {
        eprintln!(
            "error: the scenario {made} is not valid; check the flags:\n{}",
            e.render()
        );
        return 2;
    }
    let Some(out) = out else {
        print!("{text}");
        return 0;
    };
    if out.exists() && !force {
        eprintln!(
            "error: {} exists; choose another file or give --force to replace it",
            out.display()
        );
        return 2;
    }
    match std::fs::File::create(out).and_then(|mut f| f.write_all(text.as_bytes())) {
        Ok(()) => {
            eprintln!(
                "wrote {0}: check it with `faultline validate {0}`, run it with `faultline run {0}`",
                out.display()
            );
            0
        }
        Err(e) => {
            eprintln!("error: cannot write {}: {e}", out.display());
            2
        }
    }
}
