//! `faultline prove`: runs a scenario twice against the demo service and judges the pair. With the recommended
//! configuration every expectation must hold (exit 0); with the scenario's `proof.mistake` and `proof.patch` the run
//! must exit 1 and every expectation in `proof.fails` must fail. Not for running (`execute_with` of the run command does) nor for
//! checking the `proof:` section (`Scenario::load` does).

use std::path::PathBuf;

use super::run::{execute_with, Exports};
use crate::agents::AgentsOptions;
use crate::scenario::{Overrides, Scenario};

/// Proves each scenario in turn, printing `PROVEN` or `NOT PROVEN` with the reasons (with `json`, one JSON array
/// at the end instead, an object per scenario that ran); returns the worst exit code: 1 a scenario is not proven,
/// 2 one is invalid or has no `proof:`, 3 a run broke. With `agents`, both runs spread their load over that many
/// local agents.
pub fn prove(
    paths: &[PathBuf],
    report_dir: Option<PathBuf>,
    time_scale: f64,
    seed: Option<u64>,
    agents: Option<u32>,
    json: bool,
) -> i32 {
    let mut proofs = Vec::new();
    let exports = Exports {
        agents: agents.map(AgentsOptions::local),
        ..Exports::default()
    };
    let execute =
        |v: &crate::scenario::Validated, dir, scale| execute_with(v, dir, scale, &exports);
    let mut worst = 0;
    for path in paths {
        let base = Overrides {
            seed,
            time_scale: Some(time_scale),
            mistakes: Vec::new(),
            patch: None,
        };
        let v = match Scenario::load(path, &base) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("{}", e.render());
                worst = worst.max(2);
                continue;
            }
        };
        let Some(proof) = v.scenario.proof.clone() else {
            eprintln!("error: {}: the scenario has no `proof:` section (the mistake to switch on and the expectations it must fail)", path.display());
            worst = worst.max(2);
            continue;
        };
        let dir_for = |suffix: &str| {
            report_dir
                .as_ref()
                .map(|d| d.join(&v.scenario.name).join(suffix))
        };
        let recommended = match execute(&v, dir_for("recommended"), time_scale) {
            Ok(r) => r,
            Err(code) => {
                worst = worst.max(code);
                continue;
            }
        };
        let with_mistake = Overrides {
            mistakes: proof.mistake.clone(),
            patch: proof.patch.clone(),
            ..base
        };
        let vm = match Scenario::load(path, &with_mistake) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("{}", e.render());
                worst = worst.max(2);
                continue;
            }
        };
        let mistaken = match execute(&vm, dir_for("mistake"), time_scale) {
            Ok(r) => r,
            Err(code) => {
                worst = worst.max(code);
                continue;
            }
        };
        let mut mistake_names: Vec<String> = proof
            .mistake
            .iter()
            .map(|m| {
                serde_json::to_value(m)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default()
            })
            .collect();
        if let Some(p) = &proof.patch {
            mistake_names.push(format!("the patch {p}"));
        }
        let mut problems = Vec::new();
        if recommended.0 != 0 {
            problems.push(format!(
                "the recommended configuration exited {} instead of 0:",
                recommended.0
            ));
            for vd in recommended.2.verdicts.iter().filter(|vd| !vd.passed) {
                problems.push(format!("    {}", vd.sentence));
            }
        }
        if mistaken.0 != 1 {
            problems.push(format!(
                "with the mistake ({}) the run exited {} instead of 1",
                mistake_names.join(", "),
                mistaken.0
            ));
        }
        for id in &proof.fails {
            match mistaken
                .2
                .verdicts
                .iter()
                .find(|vd| vd.id.as_deref() == Some(id))
            {
                Some(vd) if vd.failed() => {}
                Some(vd) if vd.inconclusive() => problems.push(format!(
                    "with the mistake, expectation `{id}` could not be judged: {}",
                    vd.sentence
                )),
                Some(vd) => problems.push(format!(
                    "with the mistake, expectation `{id}` held: {}",
                    vd.sentence
                )),
                None => problems.push(format!("no verdict for expectation `{id}`")),
            }
        }
        let failed_with_mistake: Vec<&str> = mistaken
            .2
            .verdicts
            .iter()
            .filter(|vd| vd.failed())
            .map(|vd| vd.sentence.as_str())
            .collect();
        if !problems.is_empty() {
            worst = worst.max(1);
        }
        if json {
            proofs.push(serde_json::json!({
                "scenario": v.scenario.name,
                "file": path.display().to_string(),
                "proven": problems.is_empty(),
                "problems": problems.iter().map(|p| p.trim()).collect::<Vec<_>>(),
                "mistake": mistake_names,
                "recommended": { "exit_code": recommended.0, "report": recommended.1.display().to_string() },
                "with_mistake": {
                    "exit_code": mistaken.0,
                    "report": mistaken.1.display().to_string(),
                    "failed": failed_with_mistake,
                },
            }));
            continue;
        }
        if problems.is_empty() {
            println!(
                "PROVEN {}: recommended configuration passes; with {} it fails:",
                v.scenario.name,
                mistake_names.join(", ")
            );
            for s in failed_with_mistake {
                println!("    {s}");
            }
        } else {
            println!("NOT PROVEN {}:", v.scenario.name);
            for p in &problems {
                println!("    {p}");
            }
        }
        println!(
            "    reports: {} and {}",
            recommended.1.display(),
            mistaken.1.display()
        );
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&proofs).unwrap_or_default()
        );
    }
    worst
}
