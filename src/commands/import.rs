//! `faultline import`: reads the record of an incident and writes a scenario (to a file or stdout), then prints
//! what it read to stderr. Not where the reading is: `crate::import` does it all.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::import::timetable::Writer;
use crate::import::{import_with as read_record, ImportOptions, Imported};
use crate::scenario::{Overrides, Scenario};

/// Imports `paths` (`-`: standard input) and writes the scenario to `out` (stdout when `None` or `-`); with
/// `replay_load`, the exact timetable too, beside it (`NAME.timetable`). A scenario written to a file is loaded
/// back and validated, so what import writes is what `faultline run` accepts. What was read is told on stderr, or,
/// with `as_json`, as one JSON object on stdout (the scenario in its `yaml` field when there is no file to hold
/// it). Exit 0, or 2 with the reason.
pub fn import(
    paths: &[PathBuf],
    options: &ImportOptions,
    out: Option<&Path>,
    replay_load: bool,
    as_json: bool,
) -> i32 {
    let stdin = Path::new(faultline_units::input::STDIN);
    let out = out.filter(|p| *p != stdin);
    if paths.iter().filter(|p| *p == stdin).count() > 1 {
        eprintln!("error: standard input (`-`) can be read once: name it once");
        return 2;
    }
    let mut timetable = None;
    if replay_load {
        let Some(out) = out else {
            eprintln!(
                "error: --replay-load writes the timetable beside the scenario: give -o FILE (not standard output)"
            );
            return 2;
        };
        let path = out.with_extension("timetable");
        match Writer::create(&path, options.redact) {
            Ok(w) => timetable = Some(w),
            Err(e) => {
                eprintln!("error: cannot write {}: {e}", path.display());
                return 2;
            }
        }
    }
    let imported = match read_record(paths, options, timetable.as_mut()) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    if let Some(path) = out {
        if let Err(e) = std::fs::write(path, &imported.yaml) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return 2;
        }
        if let Err(e) = Scenario::load(path, &Overrides::default()) {
            eprintln!(
                "error: the scenario written to {} does not validate: {e}",
                path.display()
            );
            return 2;
        }
    }
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary(&imported, options, out)).unwrap_or_default()
        );
    } else {
        tell(&imported, options, out);
    }
    0
}

/// What was read and written, on stderr; the scenario on stdout when there is no file for it.
fn tell(imported: &Imported, options: &ImportOptions, out: Option<&Path>) {
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
    if let Some(r) = &imported.replay {
        eprintln!(
            "wrote {}: {} requests{}{}",
            r.path.display(),
            r.requests,
            if r.left_out > 0 {
                format!(", {} left out (methods loadgen does not send)", r.left_out)
            } else {
                String::new()
            },
            if r.late > 0 {
                format!(", {} over 300 s out of order", r.late)
            } else {
                String::new()
            }
        );
    }
    match out {
        None => print!("{}", imported.yaml),
        Some(path) => eprintln!("wrote {} (validated)", path.display()),
    }
}

/// The JSON form of what was read and written. Phases are given in buckets and in seconds of the scenario (the
/// record's seconds divided by `--speed`).
fn summary(imported: &Imported, options: &ImportOptions, out: Option<&Path>) -> serde_json::Value {
    let seconds = |bucket: usize| bucket as f64 * options.bucket / options.speed;
    let mut value = json!({
        "format": options.format.to_string(),
        "lines": imported.lines,
        "requests": imported.records,
        "bad_lines": imported.bad,
        "first_bad_lines": imported.first_bad.iter().map(|b| json!({
            "file": b.path.display().to_string(), "line": b.line, "why": b.why,
        })).collect::<Vec<_>>(),
        "dependencies": imported.dependencies,
        "phases": imported.phases.iter().map(|p| json!({
            "name": p.name, "degraded": p.degraded,
            "buckets": [p.start, p.end], "from_s": seconds(p.start), "to_s": seconds(p.end),
        })).collect::<Vec<_>>(),
        "scenario": out.map(|p| p.display().to_string()),
    });
    if let Some(r) = &imported.replay {
        value["timetable"] = json!({
            "file": r.path.display().to_string(), "requests": r.requests, "left_out": r.left_out,
            "late": r.late,
        });
    }
    if out.is_none() {
        value["yaml"] = imported.yaml.clone().into();
    }
    value
}
