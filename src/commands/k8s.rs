//! `faultline k8s`: loads and validates a scenario, then writes the Kubernetes manifests of a distributed run of it
//! to one file and says what to do next. Not where the manifests are made: `crate::k8s` makes them.

use std::path::{Path, PathBuf};

use crate::k8s::{self, ClusterOptions};
use crate::scenario::{Overrides, Scenario};

/// The file the manifests are written to, in the output folder.
pub const MANIFESTS_FILE: &str = "faultline.yaml";

/// Writes `DIR/faultline.yaml` (`DIR` is `out`, or `k8s/NAME`) for `scenario` as `options` say, and prints the
/// objects and the commands that run it. Exit 0, or 2 with the reason (a bad scenario, an option Kubernetes would
/// refuse, a SUT the agents cannot reach, a missing file, a file that cannot be written).
pub fn k8s(scenario: &Path, options: &ClusterOptions, out: Option<&Path>) -> i32 {
    let v = match Scenario::load(scenario, &Overrides::default()) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return e.exit_code();
        }
    };
    let manifests = match k8s::manifests(&v, scenario, options, |name| std::env::var(name).ok()) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return e.exit_code();
        }
    };
    let yaml = match manifests.to_yaml() {
        Ok(y) => y,
        Err(e) => {
            eprintln!("error: {e}");
            return e.exit_code();
        }
    };
    let dir: PathBuf = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| Path::new("k8s").join(manifests.instance.as_str()));
    let path = dir.join(MANIFESTS_FILE);
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, yaml)) {
        eprintln!("error: cannot write {}: {e}", path.display());
        return 2;
    }
    for note in &manifests.notes {
        eprintln!("note: {note}");
    }
    println!("wrote {}:", path.display());
    for (kind, name) in manifests.objects() {
        println!("  {kind:<22} {name}");
    }
    println!("agents dial {}", manifests.runner_address);
    println!("deadline {}", manifests.deadline);
    let runner = manifests.runner_name();
    let ns = options
        .namespace
        .as_deref()
        .map(|n| format!(" -n {n}"))
        .unwrap_or_default();
    println!("run it:");
    println!("  kubectl apply -f {}", path.display());
    println!("  kubectl{ns} logs -f job/{runner}    # once its pod has started");
    println!("docs/distributed.md reads the verdict (the runner's exit code) and the report out of the cluster");
    0
}
