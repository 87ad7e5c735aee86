//! In a GitHub Actions job (`GITHUB_ACTIONS=true`), `faultline run` appends the Markdown summary to the file
//! `$GITHUB_STEP_SUMMARY` and prints an `::error` annotation per failed expectation and a `::warning` per
//! inconclusive one, at the expectation's line in the scenario; the exit code is the one the verdicts deserve.
//! `faultline report --format markdown` prints the same summary from the saved run. Outside Actions, none of it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Three expectations: one holds (the pool), one fails (a p99 bound no service meets), one cannot be judged
/// (probes of a breaker that never opens), at lines 23, 24 and 25 of tests/fixtures/ci-summary.yaml.
const SCENARIO: &str = include_str!("fixtures/ci-summary.yaml");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("faultline-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(dir: &Path, actions: bool) -> Output {
    let file = dir.join("scenario.yaml");
    std::fs::write(&file, SCENARIO).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_faultline"));
    cmd.arg("run")
        .arg(&file)
        .arg("--report-dir")
        .arg(dir.join("report"))
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY");
    if actions {
        cmd.env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", dir.join("step-summary.md"));
    }
    cmd.output().unwrap()
}

#[test]
fn a_run_in_actions_writes_the_step_summary_and_annotates_the_failed_lines() {
    let dir = scratch("actions");
    // Something already in the summary file stays: the run appends.
    std::fs::write(dir.join("step-summary.md"), "# earlier step\n").unwrap();
    let out = run(&dir, true);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");

    let md = std::fs::read_to_string(dir.join("step-summary.md")).unwrap();
    assert!(
        md.starts_with("# earlier step\n### faultline: `ci-summary` FAILED (exit code 1)"),
        "{md}"
    );
    assert!(md.contains("#### Expectations: 1 of 3 held"), "{md}");
    assert!(md.contains("| ✅ PASS | "), "{md}");
    assert!(md.contains("| ❌ FAIL | "), "{md}");
    assert!(md.contains("| ⚠️ INCONCLUSIVE | "), "{md}");
    assert!(md.contains("| healthy | 0.0 | 2.0 |"), "{md}");
    assert!(md.contains("| later | 2.0 | 3.0 |"), "{md}");
    let report = dir.join("report");
    assert!(
        md.contains(&format!("Report folder: `{}`", report.display())),
        "{md}"
    );

    let file = dir.join("scenario.yaml").display().to_string();
    let errors: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("::error "))
        .collect();
    let warnings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("::warning "))
        .collect();
    assert_eq!(errors.len(), 1, "{stdout}");
    assert!(
        errors[0].starts_with(&format!(
            "::error file={file},line=24,title=FAIL too-fast::"
        )),
        "{}",
        errors[0]
    );
    assert_eq!(warnings.len(), 1, "{stdout}");
    assert!(
        warnings[0].starts_with(&format!(
            "::warning file={file},line=25,title=INCONCLUSIVE probes::"
        )),
        "{}",
        warnings[0]
    );

    // The same summary from the saved run, anywhere.
    let again = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(["report", "--format", "markdown"])
        .arg(&report)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        md.trim_start_matches("# earlier step\n")
    );
    // And result.json itself, as `run --json` prints it.
    let json = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(["report", "--json"])
        .arg(&report)
        .output()
        .unwrap();
    assert_eq!(json.status.code(), Some(0));
    let printed: serde_json::Value =
        serde_json::from_slice(&json.stdout).expect("report --json prints JSON");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("result.json")).unwrap())
            .unwrap();
    assert_eq!(printed, saved);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn outside_actions_there_is_no_summary_file_and_no_annotation() {
    let dir = scratch("no-actions");
    let out = run(&dir, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(!dir.join("step-summary.md").exists());
    assert!(!stdout.contains("::error"), "{stdout}");
    assert!(stdout.contains("FAIL"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
