//! `faultline prove`: runs a scenario twice against the demo service and judges the pair. With the recommended
//! configuration every expectation must hold (exit 0); with the scenario's `proof.mistake` and `proof.patch` the run
//! must exit 1 and every expectation in `proof.fails` must fail. Not for running (`execute_with` of the run command does) nor for
//! checking the `proof:` section (`Scenario::load` does).

use std::path::{Path, PathBuf};

use super::run::{execute_with, Exports};
use crate::agents::AgentsOptions;
use crate::report;
use crate::scenario::{Overrides, ProofSpec, Scenario};

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
    let mut worst = 0;
    for path in paths {
        let base = Overrides {
            seed,
            time_scale: Some(time_scale),
            ..Overrides::default()
        };
        let pair = match Pair::run(path, base, report_dir.as_deref(), time_scale, &exports) {
            Ok(p) => p,
            Err(code) => {
                worst = worst.max(code);
                continue;
            }
        };
        let problems = pair.problems();
        if !problems.is_empty() {
            worst = worst.max(1);
        }
        if json {
            proofs.push(pair.json(path, &problems));
        } else {
            pair.print(&problems);
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&proofs).unwrap_or_default()
        );
    }
    worst
}

/// One run's exit code, report folder and result.
type Ran = (i32, PathBuf, report::ResultFile);

/// A scenario run twice: with the recommended configuration and with its proof's mistake.
struct Pair {
    name: String,
    proof: ProofSpec,
    /// The mistake as its switches' names and the patch, for sentences.
    mistake_names: Vec<String>,
    recommended: Ran,
    mistaken: Ran,
}

impl Pair {
    /// Loads the scenario and runs it both ways; the exit code to report when it cannot.
    fn run(
        path: &Path,
        base: Overrides,
        report_dir: Option<&Path>,
        time_scale: f64,
        exports: &Exports,
    ) -> Result<Pair, i32> {
        let load = |overrides: &Overrides| {
            Scenario::load(path, overrides).map_err(|e| {
                eprintln!("{}", e.render());
                2
            })
        };
        let v = load(&base)?;
        let Some(proof) = v.scenario.proof.clone() else {
            eprintln!("error: {}: the scenario has no `proof:` section (the mistake to switch on and the expectations it must fail)", path.display());
            return Err(2);
        };
        let dir_for = |suffix: &str| report_dir.map(|d| d.join(&v.scenario.name).join(suffix));
        let recommended = execute_with(&v, dir_for("recommended"), time_scale, exports)?;
        let with_mistake = Overrides {
            mistakes: proof.mistake.clone(),
            patch: proof.patch.clone(),
            ..base
        };
        let vm = load(&with_mistake)?;
        let mistaken = execute_with(&vm, dir_for("mistake"), time_scale, exports)?;
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
        Ok(Pair {
            name: v.scenario.name.clone(),
            proof,
            mistake_names,
            recommended,
            mistaken,
        })
    }

    /// Why the pair does not prove the scenario: the recommended run did not pass, the mistaken one did not exit 1,
    /// or an expectation the proof names did not fail.
    fn problems(&self) -> Vec<String> {
        let (recommended, mistaken) = (&self.recommended, &self.mistaken);
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
                self.mistake_names.join(", "),
                mistaken.0
            ));
        }
        for id in &self.proof.fails {
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
        problems
    }

    /// The sentences of the expectations that failed with the mistake.
    fn failed_with_mistake(&self) -> Vec<&str> {
        self.mistaken
            .2
            .verdicts
            .iter()
            .filter(|vd| vd.failed())
            .map(|vd| vd.sentence.as_str())
            .collect()
    }

    fn json(&self, path: &Path, problems: &[String]) -> serde_json::Value {
        let (recommended, mistaken) = (&self.recommended, &self.mistaken);
        serde_json::json!({
            "scenario": self.name,
            "file": path.display().to_string(),
            "proven": problems.is_empty(),
            "problems": problems.iter().map(|p| p.trim()).collect::<Vec<_>>(),
            "mistake": self.mistake_names,
            "recommended": { "exit_code": recommended.0, "report": recommended.1.display().to_string() },
            "with_mistake": {
                "exit_code": mistaken.0,
                "report": mistaken.1.display().to_string(),
                "failed": self.failed_with_mistake(),
            },
        })
    }

    fn print(&self, problems: &[String]) {
        if problems.is_empty() {
            println!(
                "PROVEN {}: recommended configuration passes; with {} it fails:",
                self.name,
                self.mistake_names.join(", ")
            );
            for s in self.failed_with_mistake() {
                println!("    {s}");
            }
        } else {
            println!("NOT PROVEN {}:", self.name);
            for p in problems {
                println!("    {p}");
            }
        }
        println!(
            "    reports: {} and {}",
            self.recommended.1.display(),
            self.mistaken.1.display()
        );
    }
}
