//! The product, end to end, at full length: the README's main job, `faultline run scenarios/slow-dependency.yaml`
//! against the bundled demo service with an embedded faultd, 90 s as written (the library's proof of the same file,
//! in tests/scenario_library.rs, runs it at half length with and without the no-timeout mistake).
//!
//! The recommended breaker passes with every report file written, the pool stays within Little's law, and the
//! breaker timeline inferred from traffic agrees with the one the demo reported, within the inference's stated
//! resolution.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn run(dir: &Path) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "scenarios/slow-dependency.yaml", "--report-dir"])
        .arg(dir)
        .output()
        .expect("faultline runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("result.json")).expect("result.json written"),
    )
    .expect("result.json parses");
    (out.status.code().unwrap_or(-1), result, stdout)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("faultline-e2e-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn verdict<'a>(result: &'a Value, id: &str) -> &'a Value {
    result["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == id)
        .unwrap_or_else(|| panic!("no verdict {id}"))
}

#[test]
fn the_main_scenario_at_full_length_passes_and_its_inferred_timeline_agrees_with_the_demo() {
    let dir = tmp("recommended");
    let (code, result, stdout) = run(&dir);
    let sentences: Vec<&str> = result["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["sentence"].as_str().unwrap())
        .collect();
    assert_eq!(
        code, 0,
        "recommended configuration: {sentences:#?}\n{stdout}"
    );
    assert_eq!(result["totals"]["conserved"], true);
    for f in [
        "summary.txt",
        "junit.xml",
        "result.json",
        "load.json",
        "dependency.json",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }

    // Little's law while closed: 500 rps x 250 ms = 125 calls in flight at most, the pool is 200.
    let pool = verdict(&result, "pool");
    let peak = pool["measured"].as_f64().unwrap();
    assert!(peak > 20.0 && peak < 200.0, "{}", pool["sentence"]);

    // Inference from traffic alone agrees with the demo's own reports (scraped metrics) on when it opened.
    let b = &result["breakers"]["pricing"];
    let first_open = |t: &Value| {
        t["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|tr| tr["to"] == "open")
            .map(|tr| {
                (
                    tr["at"].as_f64().unwrap(),
                    tr["resolution"].as_f64().unwrap(),
                )
            })
    };
    let (observed, observed_res) = first_open(&b["observed"]).expect("the breaker opened");
    let (inferred, inferred_res) = first_open(&b["inferred"]).expect("inference saw it open");
    assert!(
        (observed - inferred).abs() <= observed_res + inferred_res,
        "observed open at {observed} s (±{observed_res}), inferred at {inferred} s (±{inferred_res})"
    );

    let _ = std::fs::remove_dir_all(&dir);
}
