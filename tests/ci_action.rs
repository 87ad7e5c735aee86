//! The GitHub Action (`action.yml`) and the container image (`Containerfile`), checked here without GitHub or a
//! container engine: the action's steps are the scripts under `scripts/ci/`, run with a fake Actions environment
//! (the summary file, the output file, `faultline` on PATH) on real scenarios; the Containerfile's build stage runs
//! the same cargo command as the action's install step, and every binary it copies is one that command builds.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("faultline-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `scripts/ci/<script>` in `dir` with `env` and a PATH that starts with the faultline binary's folder.
fn script(script: &str, dir: &Path, env: &[(&str, &str)]) -> Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_faultline")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(root().join("scripts/ci").join(script));
    cmd.current_dir(dir)
        .env("PATH", path)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", dir.join("summary.md"))
        .env("GITHUB_OUTPUT", dir.join("output"))
        .env("GITHUB_PATH", dir.join("path"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn outputs(dir: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(dir.join("output"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn output(dir: &Path, key: &str) -> String {
    outputs(dir)
        .into_iter()
        .rfind(|(k, _)| k == key)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {key} in $GITHUB_OUTPUT"))
}

#[test]
fn the_action_runs_every_scenario_summarises_annotates_and_fails_the_step_on_a_failed_expectation()
{
    let dir = scratch("action");
    std::fs::create_dir_all(dir.join("scenarios")).unwrap();
    std::fs::copy(
        root().join("tests/fixtures/ci-summary.yaml"),
        dir.join("scenarios/ci-summary.yaml"),
    )
    .unwrap();
    // The same scenario with only the expectation that holds.
    let passing: String = std::fs::read_to_string(root().join("tests/fixtures/ci-summary.yaml"))
        .unwrap()
        .replace("name: ci-summary", "name: ci-passing")
        .lines()
        .filter(|l| !l.contains("too-fast") && !l.contains("probes"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("scenarios/ci-passing.yaml"), passing).unwrap();

    let out = script(
        "run-scenarios.sh",
        &dir,
        &[
            (
                "FAULTLINE_SCENARIOS",
                "scenarios/ci-summary.yaml\nscenarios/ci-pass*.yaml",
            ),
            ("FAULTLINE_TIME_SCALE", "1"),
            ("FAULTLINE_REPORT_ROOT", "out/reports"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The run step itself succeeds, so that the reports are uploaded whatever the verdicts.
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("2 scenario(s) run; worst exit code 1"),
        "{stdout}"
    );
    assert_eq!(output(&dir, "exit-code"), "1");
    assert_eq!(output(&dir, "report-dir"), "out/reports");
    for name in ["ci-summary", "ci-passing"] {
        assert!(
            dir.join("out/reports")
                .join(name)
                .join("result.json")
                .is_file(),
            "no report for {name}: {stdout}\n{stderr}"
        );
    }
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(
        md.contains("### faultline: `ci-summary` FAILED (exit code 1)"),
        "{md}"
    );
    assert!(
        md.contains("### faultline: `ci-passing` passed (exit code 0)"),
        "{md}"
    );
    assert!(
        md.contains("Report folder: `out/reports/ci-summary`"),
        "{md}"
    );
    assert!(
        stdout.contains("::error file=scenarios/ci-summary.yaml,line=24,title=FAIL too-fast::"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "::warning file=scenarios/ci-summary.yaml,line=25,title=INCONCLUSIVE probes::"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("::group::faultline run scenarios/ci-summary.yaml"),
        "{stdout}"
    );

    // The last step turns the worst exit code into the step's failure.
    let verdict = script(
        "verdict.sh",
        &dir,
        &[("FAULTLINE_EXIT_CODE", &output(&dir, "exit-code"))],
    );
    assert_eq!(verdict.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&verdict.stdout)
        .starts_with("::error title=faultline::an expectation failed"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_scenario_is_a_bad_input_and_the_verdict_step_fails_with_it() {
    let dir = scratch("action-missing");
    let out = script(
        "run-scenarios.sh",
        &dir,
        &[("FAULTLINE_SCENARIOS", "nowhere/*.yaml")],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains("::error title=no scenario::no file matches nowhere/*.yaml"));
    assert_eq!(output(&dir, "exit-code"), "2");
    let verdict = script("verdict.sh", &dir, &[("FAULTLINE_EXIT_CODE", "2")]);
    assert_eq!(verdict.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_verdict_step_passes_held_runs_and_inconclusive_ones_unless_asked_not_to() {
    let dir = scratch("verdict");
    let code = |env: &[(&str, &str)]| script("verdict.sh", &dir, env).status.code();
    assert_eq!(code(&[("FAULTLINE_EXIT_CODE", "0")]), Some(0));
    assert_eq!(code(&[("FAULTLINE_EXIT_CODE", "4")]), Some(0));
    assert_eq!(
        code(&[
            ("FAULTLINE_EXIT_CODE", "4"),
            ("FAULTLINE_FAIL_ON_INCONCLUSIVE", "true")
        ]),
        Some(4)
    );
    assert_eq!(code(&[("FAULTLINE_EXIT_CODE", "3")]), Some(3));
    assert_eq!(code(&[("FAULTLINE_EXIT_CODE", "130")]), Some(130));
    assert_eq!(code(&[]), Some(3));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The cargo command line in a script or Containerfile line, from `cargo` on, quotes and `"${CARGO:-cargo}"` aside.
fn cargo_command(line: &str) -> Option<String> {
    let line = line.replace("\"${CARGO:-cargo}\"", "cargo");
    let at = line.find("cargo build")?;
    let cmd = &line[at..];
    let end = cmd.find([')', ';', '&', '\\']).unwrap_or(cmd.len());
    Some(cmd[..end].trim().to_string())
}

#[test]
fn the_install_step_builds_with_cargo_and_puts_the_binaries_on_the_path() {
    let dir = scratch("install");
    // A stand-in cargo that records its arguments: the real build is the Containerfile test's business.
    let fake = dir.join("fake-cargo");
    std::fs::write(&fake, "#!/bin/sh\necho \"$@\" > \"$FAKE_LOG\"\n").unwrap();
    Command::new("chmod").arg("+x").arg(&fake).status().unwrap();
    let log = dir.join("cargo-args");
    let source = root().display().to_string();
    let out = script(
        "install.sh",
        &dir,
        &[
            ("CARGO", fake.to_str().unwrap()),
            ("FAKE_LOG", log.to_str().unwrap()),
            ("FAULTLINE_SOURCE", &source),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&log).unwrap().trim(),
        "build --release --locked -p faultline -p faultd -p loadgen"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("path")).unwrap().trim(),
        root().join("target/release").display().to_string()
    );
    // `install: path` finds the binary on PATH; anything else is refused.
    let path = script("install.sh", &dir, &[("FAULTLINE_INSTALL", "path")]);
    assert_eq!(path.status.code(), Some(0));
    let bad = script("install.sh", &dir, &[("FAULTLINE_INSTALL", "brew")]);
    assert_eq!(bad.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_action_s_steps_are_the_scripts_and_it_uploads_the_reports() {
    let text = std::fs::read_to_string(root().join("action.yml")).unwrap();
    let action: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(action["runs"]["using"], "composite");
    for input in ["scenarios", "time-scale"] {
        assert!(action["inputs"][input].is_object(), "no input {input}");
    }
    let steps = action["runs"]["steps"].as_array().unwrap();
    let mut scripts = Vec::new();
    for step in steps {
        if let Some(run) = step["run"].as_str() {
            let script = run
                .trim_matches(['"', '\''])
                .strip_prefix("$GITHUB_ACTION_PATH/")
                .unwrap_or_else(|| panic!("a run step that is not a script: {run}"));
            let file = root().join(script);
            assert!(file.is_file(), "{script} missing");
            let mode = std::fs::metadata(&file).unwrap();
            assert!(
                std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o111 != 0,
                "{script} is not executable"
            );
            scripts.push(script.to_string());
        }
    }
    assert_eq!(
        scripts,
        [
            "scripts/ci/install.sh",
            "scripts/ci/run-scenarios.sh",
            "scripts/ci/verdict.sh"
        ]
    );
    let upload = steps
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/upload-artifact@"))
        })
        .expect("an upload-artifact step");
    assert_eq!(upload["if"], "always()");
    assert_eq!(upload["with"]["path"], "${{ inputs.report-dir }}");
    assert_eq!(steps.last().unwrap()["if"], "always()");
}

#[test]
fn the_containerfile_builds_with_the_install_command_and_copies_binaries_that_command_builds() {
    let containerfile = std::fs::read_to_string(root().join("Containerfile")).unwrap();
    let install = std::fs::read_to_string(root().join("scripts/ci/install.sh")).unwrap();
    let expected = install
        .lines()
        .find_map(cargo_command)
        .expect("install.sh runs cargo build");
    // The build stage: from its FROM to the next FROM.
    let stages: Vec<&str> = containerfile.split("\nFROM ").skip(1).collect();
    assert_eq!(
        stages.len(),
        4,
        "a build stage, the runtime's base, faultd as Toxiproxy, and faultline last (the default image)"
    );
    let build = stages[0];
    assert!(
        build
            .lines()
            .next()
            .is_some_and(|l| l.ends_with(" AS build")),
        "{build}"
    );
    let runs: Vec<String> = build
        .lines()
        .filter(|l| l.starts_with("RUN "))
        .filter_map(cargo_command)
        .collect();
    assert_eq!(runs, std::slice::from_ref(&expected));
    let packages: Vec<&str> = expected
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "-p")
        .map(|w| w[1])
        .collect();
    assert_eq!(packages, ["faultline", "faultd", "loadgen"]);

    let runtime = stages[1];
    assert!(
        runtime.starts_with("docker.io/library/debian:") && runtime.contains("-slim AS base"),
        "{runtime}"
    );
    assert!(
        stages[2].starts_with("base AS toxiproxy\n"),
        "{}",
        stages[2]
    );
    assert!(
        stages[2].contains("ENTRYPOINT [\"faultd\", \"--toxiproxy-api\", \"0.0.0.0:8474\""),
        "{}",
        stages[2]
    );
    assert!(stages[3].starts_with("base\n"), "{}", stages[3]);
    assert!(
        stages[3].contains("ENTRYPOINT [\"faultline\"]"),
        "{}",
        stages[3]
    );
    let copied: Vec<&str> = runtime
        .lines()
        .filter(|l| l.starts_with("COPY --from=build "))
        .flat_map(|l| l.split_whitespace().skip(2))
        .filter_map(|p| p.strip_prefix("/src/target/release/"))
        .collect();
    assert_eq!(copied, ["faultline", "faultd", "loadgen"]);
    assert!(
        runtime.contains("COPY --from=build /src/scenarios "),
        "{runtime}"
    );
    // Each binary is where that cargo command leaves it (the workspace's release build makes all three).
    let release = Path::new(env!("CARGO_BIN_EXE_faultline")).parent().unwrap();
    for bin in copied {
        assert!(
            release.join(bin).is_file(),
            "{} missing: run `cargo build --release -p faultline -p faultd -p loadgen` first",
            release.join(bin).display()
        );
    }
    // The build context leaves out what would make it huge or stale.
    let ignore = std::fs::read_to_string(root().join(".containerignore")).unwrap();
    assert!(ignore.lines().any(|l| l == "target"));
}
