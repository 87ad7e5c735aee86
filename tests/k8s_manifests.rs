//! `faultline k8s` end to end, offline: the binary writes the manifests of scenarios adapted to a cluster
//! (`tests/fixtures/k8s/`), every object is validated against the API schemas of the last three Kubernetes versions
//! that `kubernetes-validate` bundles (strictly: an unknown field fails), and what no schema can check is asserted on
//! the objects as PyYAML reads them (the agents' Job is Indexed with N pods, the runner listens for N agents, the
//! agents dial the runner's Service, the deadline outlasts the scenario, the ConfigMap holds the scenario byte for
//! byte). Bad input exits 2 with the reason.
//!
//! Needs a Python with kubernetes-validate: `python3 -m venv VENV && VENV/bin/pip install kubernetes-validate`,
//! then `FAULTLINE_PYTHON=VENV/bin/python` (default `python3`). No network: nothing here talks to a cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine as _;
use serde_json::Value;

const SLOW_DEPENDENCY: &str = "tests/fixtures/k8s/slow-dependency.yaml";
const REPLAY: &str = "tests/fixtures/k8s/replay.yaml";

/// A folder of its own under the system's temporary directory, removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("faultline-k8s-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `faultline k8s ARGS` from the repository's root, as a user would.
fn k8s(args: &[&str]) -> Output {
    k8s_with(args, &[])
}

/// As `k8s`, with environment variables set.
fn k8s_with(args: &[&str], vars: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(repo())
        .arg("k8s")
        .args(args)
        .envs(vars.iter().copied())
        .output()
        .unwrap()
}

/// Writes the manifests of `scenario` into `out` with `extra` options and returns their file; the command must
/// succeed.
fn write(scenario: &str, out: &Scratch, extra: &[&str]) -> PathBuf {
    let dir = out.0.display().to_string();
    let mut args = vec![
        scenario,
        "--image",
        "registry.example.com/faultline:0.1.0",
        "-o",
        &dir,
    ];
    args.extend_from_slice(extra);
    let o = k8s(&args);
    assert!(
        o.status.success(),
        "faultline k8s {args:?}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    out.0.join("faultline.yaml")
}

/// The Python that has kubernetes-validate, with the versions to check: the last three minor versions it bundles.
/// A missing tool fails the test with how to install it.
fn kubernetes_validate() -> (String, Vec<String>) {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args([
            "-c",
            "import kubernetes_validate.utils as u\n\
             minors = []\n\
             for v in u.all_versions():\n\
             \x20   if u.major_minor(v) not in [u.major_minor(m) for m in minors]: minors.append(v)\n\
             print(' '.join(minors[-3:]))",
        ])
        .output();
    assert!(
        matches!(&probe, Ok(o) if o.status.success()),
        "{python} cannot import kubernetes-validate ({}). scripts/test sets it up in .venv; or install it: \
         `python3 -m venv VENV && VENV/bin/pip install kubernetes-validate`, \
         then set FAULTLINE_PYTHON=VENV/bin/python",
        match &probe {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        }
    );
    let versions: Vec<String> = String::from_utf8_lossy(&probe.unwrap().stdout)
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(
        versions.len(),
        3,
        "kubernetes-validate bundles {versions:?}"
    );
    (python, versions)
}

/// The documents of a manifests file as PyYAML (the parser kubernetes-validate uses) reads them.
fn documents(python: &str, file: &Path) -> Vec<Value> {
    let o = Command::new(python)
        .args([
            "-c",
            "import json, sys, yaml\n\
             print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))",
        ])
        .arg(file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {docs:#?}"))
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

fn container(job: &Value) -> &Value {
    &job["spec"]["template"]["spec"]["containers"][0]
}

#[test]
fn every_object_validates_against_the_last_three_kubernetes_versions_strictly() {
    let (python, versions) = kubernetes_validate();
    for (scenario, extra) in [
        (SLOW_DEPENDENCY, vec!["--agents", "4", "-n", "shop"]),
        (
            REPLAY,
            vec![
                "--agents",
                "2",
                "--storage-class",
                "fast",
                "--agent-cpu-limit",
                "2",
            ],
        ),
    ] {
        let out = Scratch::new("validate");
        let file = write(scenario, &out, &extra);
        let docs = documents(&python, &file);
        assert_eq!(docs.len(), 5, "{docs:#?}");
        let mut cmd = Command::new(&python);
        cmd.args(["-m", "kubernetes_validate", "--strict"]);
        for v in &versions {
            cmd.args(["-k", v]);
        }
        let o = cmd.arg(&file).output().unwrap();
        let report =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{scenario}:\n{report}");
        // kubernetes-validate only warns, and exits 0, for a kind it has no schema for: each object must have
        // passed against each version.
        assert!(
            !report.contains("WARN") && !report.contains("ERROR"),
            "{scenario}:\n{report}"
        );
        for d in &docs {
            let resource = format!(
                "{}/{}",
                d["kind"].as_str().unwrap().to_lowercase(),
                d["metadata"]["name"].as_str().unwrap()
            );
            for v in &versions {
                let minor = v.rsplit_once('.').map(|(m, _)| m).unwrap();
                let passed = format!("passed for resource {resource} against version {minor}");
                assert!(report.contains(&passed), "{scenario}: {passed}\n{report}");
            }
        }
    }
}

#[test]
fn the_manifests_say_what_no_schema_can_check() {
    let (python, _) = kubernetes_validate();
    let out = Scratch::new("semantics");
    let file = write(
        SLOW_DEPENDENCY,
        &out,
        &["--agents", "4", "--namespace", "shop"],
    );
    let docs = documents(&python, &file);
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "PersistentVolumeClaim",
            "Service",
            "Job",
            "Job"
        ],
        "the order kubectl meets them in"
    );
    for d in &docs {
        assert_eq!(d["metadata"]["namespace"], "shop");
        assert_eq!(
            d["metadata"]["labels"]["app.kubernetes.io/name"],
            "faultline"
        );
        assert_eq!(
            d["metadata"]["labels"]["app.kubernetes.io/instance"],
            "slow-dependency"
        );
    }

    // The agents: an Indexed Job of 4 pods, all at once, run once.
    let agents = find(&docs, "Job", "slow-dependency-agents");
    assert_eq!(agents["spec"]["completionMode"], "Indexed");
    assert_eq!(agents["spec"]["completions"], 4);
    assert_eq!(agents["spec"]["parallelism"], 4);
    let runner = find(&docs, "Job", "slow-dependency-runner");
    for job in [agents, runner] {
        assert_eq!(job["spec"]["backoffLimit"], 0);
        assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
        assert!(job["spec"]["ttlSecondsAfterFinished"].as_u64().unwrap() > 0);
    }

    // The runner listens for those 4 agents, on every address of its pod.
    let args = strings(&container(runner)["args"]);
    assert_eq!(
        container(runner)["command"],
        serde_json::json!(["faultline"])
    );
    assert_eq!(args[0], "run");
    assert!(
        args.windows(4)
            .any(|w| w == ["--agents", "4", "--agents-listen", "0.0.0.0:7070"]),
        "{args:?}"
    );
    assert!(args.contains(&"--agents-allow-remote"), "{args:?}");
    let report_dir = args[args.iter().position(|a| *a == "--report-dir").unwrap() + 1];
    assert!(report_dir.starts_with("/reports/"), "{report_dir}");

    // The agents dial the runner's Service by its DNS name and port, and the Service selects the runner's pod.
    let service = find(&docs, "Service", "slow-dependency-runner");
    let port = &service["spec"]["ports"][0];
    let agent_args = strings(&container(agents)["args"]);
    assert_eq!(container(agents)["command"], serde_json::json!(["loadgen"]));
    assert_eq!(
        agent_args,
        [
            "agent",
            "--runner",
            &format!("slow-dependency-runner.shop.svc:{}", port["port"])
        ]
    );
    assert_eq!(port["port"], 7070);
    assert_eq!(
        container(runner)["ports"][0]["name"],
        port["targetPort"],
        "the Service reaches the runner's port"
    );
    let runner_labels = &runner["spec"]["template"]["metadata"]["labels"];
    for (k, v) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(
            &runner_labels[k], v,
            "the Service selects the runner's pod by {k}"
        );
    }
    assert_ne!(
        agents["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
        service["spec"]["selector"]["app.kubernetes.io/component"],
        "and not the agents"
    );
    let index = &container(agents)["env"][0];
    assert_eq!(index["name"], "JOB_COMPLETION_INDEX");
    assert_eq!(
        index["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );

    // Both Jobs outlast the scenario's 90 s and its load's 5 s timeout, by the same deadline.
    let deadline = runner["spec"]["activeDeadlineSeconds"].as_u64().unwrap();
    assert!(deadline > 95, "{deadline}");
    assert_eq!(
        agents["spec"]["activeDeadlineSeconds"].as_u64(),
        Some(deadline)
    );

    // The ConfigMap holds the scenario byte for byte, at the path the runner is given.
    let config_map = find(&docs, "ConfigMap", "slow-dependency-scenario");
    let volume = &runner["spec"]["template"]["spec"]["volumes"][0];
    assert_eq!(volume["configMap"]["name"], "slow-dependency-scenario");
    let item = &volume["configMap"]["items"][0];
    assert_eq!(
        args[1],
        format!("/scenario/{}", item["path"].as_str().unwrap())
    );
    let key = item["key"].as_str().unwrap();
    let original = std::fs::read_to_string(repo().join(SLOW_DEPENDENCY)).unwrap();
    assert_eq!(config_map["data"][key].as_str(), Some(original.as_str()));

    // The report goes to a ReadWriteOnce claim the runner mounts.
    let claim = find(&docs, "PersistentVolumeClaim", "slow-dependency-reports");
    assert_eq!(
        claim["spec"]["accessModes"],
        serde_json::json!(["ReadWriteOnce"])
    );
    let reports = &runner["spec"]["template"]["spec"]["volumes"][1];
    assert_eq!(
        reports["persistentVolumeClaim"]["claimName"],
        "slow-dependency-reports"
    );
}

#[test]
fn the_files_a_scenario_names_travel_with_it() {
    let (python, _) = kubernetes_validate();
    let out = Scratch::new("files");
    let file = write(REPLAY, &out, &["--agents", "2", "--name", "replay-eu"]);
    let docs = documents(&python, &file);
    let config_map = find(&docs, "ConfigMap", "replay-eu-scenario");
    let items = find(&docs, "Job", "replay-eu-runner")["spec"]["template"]["spec"]["volumes"][0]
        ["configMap"]["items"]
        .as_array()
        .unwrap()
        .clone();
    let key_of = |path: &str| {
        items
            .iter()
            .find(|i| i["path"] == path)
            .unwrap_or_else(|| panic!("{path} is not mounted: {items:#?}"))["key"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // The timetable, relative to the scenario, sits beside it under /scenario.
    let timetable =
        std::fs::read_to_string(repo().join("tests/fixtures/k8s/timetables/checkout.timetable"))
            .unwrap();
    assert_eq!(
        config_map["data"][key_of("timetables/checkout.timetable")].as_str(),
        Some(timetable.as_str())
    );
    // The gRPC message, relative to the scenario as well, travels in base64.
    let message = std::fs::read(repo().join("tests/fixtures/k8s/messages/product.bin")).unwrap();
    let encoded = config_map["binaryData"][key_of("messages/product.bin")]
        .as_str()
        .unwrap();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
        message
    );
    for job in ["replay-eu-runner", "replay-eu-agents"] {
        assert_eq!(
            container(find(&docs, "Job", job))["workingDir"],
            "/scenario"
        );
    }
}

#[test]
fn the_variables_a_scenario_reads_reach_the_runner_as_they_were_validated() {
    let (python, _) = kubernetes_validate();
    let dir = Scratch::new("variables");
    let scenario = dir.0.join("vars.yaml");
    let text = std::fs::read_to_string(repo().join(SLOW_DEPENDENCY))
        .unwrap()
        .replace("timeout: 5s", "timeout: ${K8S_TEST_TIMEOUT:-5s}")
        .replace("seed: 7", "seed: ${K8S_TEST_UNSET_SEED:-7}");
    std::fs::write(&scenario, &text).unwrap();
    let out = dir.0.join("out");
    let o = k8s_with(
        &[
            scenario.to_str().unwrap(),
            "--agents",
            "2",
            "--image",
            "registry.example.com/faultline:0.1.0",
            "-o",
            out.to_str().unwrap(),
        ],
        &[("K8S_TEST_TIMEOUT", "4s")],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("K8S_TEST_TIMEOUT as set here"), "{stderr}");
    let docs = documents(&python, &out.join("faultline.yaml"));
    let runner = find(&docs, "Job", "slow-dependency-runner");
    let env = container(runner)["env"].as_array().unwrap();
    assert!(
        env.iter()
            .any(|e| e["name"] == "K8S_TEST_TIMEOUT" && e["value"] == "4s"),
        "{env:#?}"
    );
    assert!(
        !env.iter().any(|e| e["name"] == "K8S_TEST_UNSET_SEED"),
        "an unset variable keeps its default in the pod too: {env:#?}"
    );
    // The deadline counts the timeout the variable gave: 90 s + 4 s + the 5 min margin.
    assert_eq!(runner["spec"]["activeDeadlineSeconds"], 394);
    let config_map = find(&docs, "ConfigMap", "slow-dependency-scenario");
    assert_eq!(
        config_map["data"]["vars.yaml"].as_str(),
        Some(text.as_str())
    );
}

/// Runs `faultline k8s` expecting exit 2 and returns its stderr; `name` names its scratch folder.
fn refused(name: &str, args: &[&str]) -> String {
    let out = Scratch::new(&format!("refused-{name}"));
    let dir = out.0.display().to_string();
    let mut all = args.to_vec();
    all.extend_from_slice(&[
        "--image",
        "registry.example.com/faultline:0.1.0",
        "-o",
        &dir,
    ]);
    let o = k8s(&all);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{all:?}: {stderr}");
    assert!(
        !out.0.join("faultline.yaml").exists(),
        "nothing is written when the input is refused"
    );
    stderr
}

#[test]
fn no_agents_or_too_many_is_refused_with_exit_2() {
    let e = refused("zero", &[SLOW_DEPENDENCY, "--agents", "0"]);
    assert!(
        e.contains("--agents 0: a distributed run needs at least one agent"),
        "{e}"
    );
    let e = refused("many", &[SLOW_DEPENDENCY, "--agents", "100000"]);
    assert!(
        e.contains("--agents 100000") && e.contains("at most 1000"),
        "{e}"
    );
}

#[test]
fn a_demo_sut_is_refused_with_exit_2_and_what_to_write_instead() {
    let e = refused("demo", &["scenarios/slow-dependency.yaml", "--agents", "4"]);
    assert!(
        e.contains("scenarios/slow-dependency.yaml:21:3: sut.demo"),
        "file and line: {e}"
    );
    assert!(e.contains("sut.demo"), "{e}");
    assert!(
        e.contains("sut: { url: http://SERVICE.NAMESPACE.svc:PORT }"),
        "{e}"
    );
    assert!(e.contains("allow_hosts"), "{e}");
}

#[test]
fn a_missing_referenced_file_is_refused_with_exit_2() {
    let dir = Scratch::new("missing");
    // A timetable, relative to the scenario: the scenario does not load without it.
    let scenario = dir.0.join("replay.yaml");
    std::fs::copy(repo().join(REPLAY), &scenario).unwrap();
    // The gRPC message beside it is there; the timetable is not.
    std::fs::create_dir_all(dir.0.join("messages")).unwrap();
    std::fs::copy(
        repo().join("tests/fixtures/k8s/messages/product.bin"),
        dir.0.join("messages/product.bin"),
    )
    .unwrap();
    let e = refused(
        "missing-timetable",
        &[scenario.to_str().unwrap(), "--agents", "2"],
    );
    assert!(e.contains("load.replay"), "the field: {e}");
    assert!(e.contains("timetables/checkout.timetable"), "the file: {e}");
    // A CA file, relative to the working folder: read only once the run connects, so `faultline k8s` looks.
    let scenario = dir.0.join("tls.yaml");
    let text = std::fs::read_to_string(repo().join(SLOW_DEPENDENCY))
        .unwrap()
        .replace(
            "  timeout: 5s\n",
            "  timeout: 5s\n  tls: { ca: tests/fixtures/k8s/no-such-ca.pem }\n",
        );
    std::fs::write(&scenario, text).unwrap();
    let e = refused("missing-ca", &[scenario.to_str().unwrap(), "--agents", "2"]);
    assert!(e.contains("tls.yaml:27:10: load.tls.ca"), "the line: {e}");
    assert!(
        e.contains("load.tls.ca: cannot read tests/fixtures/k8s/no-such-ca.pem"),
        "{e}"
    );
}

#[test]
fn a_bad_scenario_is_refused_with_exit_2_naming_file_line_and_field() {
    let dir = Scratch::new("bad");
    let scenario = dir.0.join("bad.yaml");
    let text = std::fs::read_to_string(repo().join(SLOW_DEPENDENCY))
        .unwrap()
        .replace("duration: 90s", "duration: 90 sec");
    std::fs::write(&scenario, text).unwrap();
    let e = refused("bad", &[scenario.to_str().unwrap(), "--agents", "2"]);
    assert!(
        e.contains("bad.yaml:7:11: duration: ") && e.contains("is not a duration"),
        "{e}"
    );
}
