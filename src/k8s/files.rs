//! The files a cluster run carries in its ConfigMap: the scenario, byte for byte, and every file it names by a
//! relative path that the run reads (a replayed trace, a `load.replay` timetable, gRPC message files, TLS
//! certificates and CAs). In the pods the ConfigMap is mounted at [`SCENARIO_MOUNT`], the working folder, with each
//! file at the path the scenario gives it, so that every path resolves there as it does where the manifests were
//! written. Not for building the ConfigMap object (`manifests` does) nor for checking the scenario (it was loaded and
//! validated before).

use std::path::{Component, Path, PathBuf};

use crate::scenario::Validated;

use super::{at, K8sError};

/// Where the scenario's ConfigMap is mounted in every pod, and the pods' working folder.
pub const SCENARIO_MOUNT: &str = "/scenario";

/// The most a ConfigMap may hold: the API server refuses values that total more than 1 MiB.
pub const CONFIG_MAP_LIMIT: usize = 1024 * 1024;

/// The longest ConfigMap key the API server accepts.
const KEY_MAX: usize = 253;

/// One file for the ConfigMap: its key, its path under the mount, its bytes, and the field that names it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct CarriedFile {
    pub key: String,
    pub path: String,
    pub bytes: Vec<u8>,
    pub named_by: String,
}

/// The scenario and the files it names, ready for the ConfigMap; the scenario comes first.
#[derive(Debug, Clone)]
pub(super) struct ScenarioFiles {
    pub files: Vec<CarriedFile>,
}

impl ScenarioFiles {
    /// The scenario's path in the pods, e.g. `/scenario/slow-dependency.yaml`.
    pub fn scenario_in_pod(&self) -> String {
        format!("{SCENARIO_MOUNT}/{}", self.files[0].path)
    }

    /// The scenario's text as read.
    pub fn scenario_text(&self) -> String {
        String::from_utf8_lossy(&self.files[0].bytes).into_owned()
    }
}

/// What a relative path in a scenario is relative to, where `faultline run` reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Base {
    /// The scenario file's folder (a replayed trace, a timetable).
    Scenario,
    /// The working folder of the process (gRPC message files, certificates): the mount, in the pods.
    WorkingDir,
}

/// A path the scenario names, with its field for errors.
#[derive(Debug, Clone, PartialEq)]
struct Reference {
    field: String,
    written: String,
    base: Base,
}

/// Reads the scenario at `path` and every file it names, refusing a file that is missing, lies outside the
/// mount (absolute, or through `..`), would sit where another does, or makes the whole exceed [`CONFIG_MAP_LIMIT`].
pub(super) fn collect(v: &Validated, path: &Path) -> Result<ScenarioFiles, K8sError> {
    let file = path.display().to_string();
    let scenario_dir = path.parent().unwrap_or(Path::new("."));
    let bytes = std::fs::read(path).map_err(|source| K8sError::ReadScenario {
        file: file.clone(),
        source,
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "scenario.yaml".into());
    let mut files = vec![CarriedFile {
        key: key_for(&name, &[]),
        path: name,
        bytes,
        named_by: "the scenario itself".into(),
    }];
    let text = String::from_utf8_lossy(&files[0].bytes).into_owned();
    for r in references(v, scenario_dir) {
        let in_mount = mount_path(&r.written)
            .map_err(|why| at(&text, &file, &r.field, format!("{:?} {why}", r.written)))?;
        let local: PathBuf = match r.base {
            Base::Scenario => scenario_dir.join(&r.written),
            Base::WorkingDir => PathBuf::from(&r.written),
        };
        let bytes = faultline_units::input::read_capped(
            &local,
            faultline_units::input::Cap::limit(
                faultline_units::Size(CONFIG_MAP_LIMIT as u64),
                "a ConfigMap's limit",
            ),
        )
            .map_err(|e| {
            at(
                &text,
                &file,
                &r.field,
                format!(
                    "cannot read {}: {e}; the run reads it, so the scenario's ConfigMap must carry it",
                    local.display()
                ),
            )
        })?;
        if let Some(first) = files.iter().find(|f| f.path == in_mount) {
            if first.bytes == bytes {
                continue;
            }
            return Err(K8sError::FileConflict {
                file: file.clone(),
                path: in_mount,
                first: first.named_by.clone(),
                second: r.field,
            });
        }
        let keys: Vec<&str> = files.iter().map(|f| f.key.as_str()).collect();
        let key = key_for(&in_mount, &keys);
        files.push(CarriedFile {
            key,
            path: in_mount,
            bytes,
            named_by: r.field,
        });
    }
    let total: usize = files.iter().map(|f| f.bytes.len()).sum();
    if total > CONFIG_MAP_LIMIT {
        let mut sizes: Vec<(&str, usize)> = files
            .iter()
            .map(|f| (f.path.as_str(), f.bytes.len()))
            .collect();
        sizes.sort_by_key(|s| std::cmp::Reverse(s.1));
        let listing = sizes
            .iter()
            .take(3)
            .map(|(p, n)| format!("{p}: {n} bytes"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(K8sError::TooLarge {
            file,
            total,
            listing,
        });
    }
    Ok(ScenarioFiles { files })
}

/// Every path the scenario names that the run reads, with the field that names it. The embedded faultd's files
/// only: an external faultd (`faultd:`) reads its own.
fn references(v: &Validated, scenario_dir: &Path) -> Vec<Reference> {
    let s = &v.scenario;
    let mut refs = Vec::new();
    let mut add = |field: String, written: String, base: Base| {
        refs.push(Reference {
            field,
            written,
            base,
        })
    };
    if let Some(r) = &s.replay {
        add("replay.trace".into(), r.trace.clone(), Base::Scenario);
    }
    if let Some(r) = &s.load.replay {
        // `Scenario::load` joined the timetable to the scenario's folder; what was written is what follows it.
        let joined = Path::new(&r.file);
        let written = joined.strip_prefix(scenario_dir).unwrap_or(joined);
        add(
            "load.replay".into(),
            written.to_string_lossy().into_owned(),
            Base::Scenario,
        );
    }
    for (i, t) in s.load.requests.iter().enumerate() {
        // `Scenario::load` joined the .proto files to the scenario's folder, as the timetable.
        for (j, joined) in t.proto.iter().enumerate() {
            let joined = Path::new(joined);
            let written = joined.strip_prefix(scenario_dir).unwrap_or(joined);
            add(
                format!("load.requests[{i}].proto[{j}]"),
                written.to_string_lossy().into_owned(),
                Base::Scenario,
            );
        }
        if let Some(f) = &t.message_file {
            add(
                format!("load.requests[{i}].message_file"),
                f.clone(),
                Base::WorkingDir,
            );
        }
    }
    if let Some(ca) = s.load.tls.as_ref().and_then(|t| t.ca.as_ref()) {
        add(
            "load.tls.ca".into(),
            ca.to_string_lossy().into_owned(),
            Base::WorkingDir,
        );
    }
    if s.faultd.is_none() {
        if let Some(tls) = &s.dependency.tls {
            for (name, p) in [
                ("cert", &tls.cert),
                ("key", &tls.key),
                ("client_ca", &tls.client_ca),
            ] {
                if let Some(p) = p {
                    add(
                        format!("dependency.tls.{name}"),
                        p.to_string_lossy().into_owned(),
                        Base::WorkingDir,
                    );
                }
            }
        }
        // A gRPC answer may name its message file wherever a behaviour stands (a route's base, a phase's layer),
        // and the list of behaviours grows: look for the field wherever it is.
        if let Ok(value) = serde_json::to_value(&s.dependency) {
            let mut found = Vec::new();
            message_files("dependency", &value, &mut found);
            for (field, written) in found {
                add(field, written, Base::Scenario);
            }
        }
    }
    refs
}

/// Every string under a `message_file` key in `value`, and every item of a `proto` list (a gRPC answer's or
/// error's `.proto` files), with its dotted path.
fn message_files(at: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, child) in map {
                let here = format!("{at}.{k}");
                match (k.as_str(), child) {
                    ("message_file", serde_json::Value::String(s)) => out.push((here, s.clone())),
                    ("proto", serde_json::Value::Array(files)) => {
                        for (i, f) in files.iter().enumerate() {
                            if let serde_json::Value::String(s) = f {
                                out.push((format!("{here}[{i}]"), s.clone()));
                            }
                        }
                    }
                    _ => message_files(&here, child, out),
                }
            }
        }
        serde_json::Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                message_files(&format!("{at}[{i}]"), child, out);
            }
        }
        _ => {}
    }
}

/// The path of a file under the mount: the path as written, without `./`. A ConfigMap volume cannot place a file
/// outside its mount, so an absolute path or one through `..` is refused with why.
fn mount_path(written: &str) -> Result<String, &'static str> {
    let mut parts = Vec::new();
    for c in Path::new(written).components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err("leads out of the scenario's folder with `..`; copy the file beside the scenario (or below it) and name it from there")
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err("is absolute, a file of this machine only; copy it beside the scenario (or below it) and name it by a relative path")
            }
        }
    }
    if parts.is_empty() {
        return Err("names no file");
    }
    Ok(parts.join("/"))
}

/// A ConfigMap key for a file at `path`: the path with every character a key cannot hold turned into `_`, made
/// unique among `taken`.
fn key_for(path: &str, taken: &[&str]) -> String {
    let base: String = path
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let base = if base.len() > KEY_MAX - 8 || base.chars().all(|c| c == '.') {
        "file".to_string()
    } else {
        base
    };
    let mut key = base.clone();
    let mut n = 2;
    while taken.contains(&key.as_str()) {
        key = format!("{base}-{n}");
        n += 1;
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_path_keeps_its_place_under_the_mount() {
        assert_eq!(
            mount_path("traces/x.timetable").unwrap(),
            "traces/x.timetable"
        );
        assert_eq!(mount_path("./a/./b.bin").unwrap(), "a/b.bin");
    }

    #[test]
    fn a_path_outside_the_mount_is_refused_with_why() {
        assert!(mount_path("../x.csv").unwrap_err().contains(".."));
        assert!(mount_path("a/../../x.csv").is_err());
        assert!(mount_path("/etc/x.pem").unwrap_err().contains("absolute"));
        assert!(mount_path(".").is_err());
    }

    #[test]
    fn keys_hold_only_what_a_configmap_key_may_and_never_repeat() {
        assert_eq!(key_for("slow-dependency.yaml", &[]), "slow-dependency.yaml");
        assert_eq!(key_for("traces/a b.csv", &[]), "traces_a_b.csv");
        assert_eq!(key_for("a/b", &["a_b"]), "a_b-2");
        assert_eq!(key_for("a/b", &["a_b", "a_b-2"]), "a_b-3");
        assert_eq!(key_for(&"x/".repeat(200), &[]), "file");
    }

    #[test]
    fn message_files_are_found_wherever_they_stand() {
        let value = serde_json::json!({
            "routes": { "catalog": { "grpc_response": { "message_file": "product.bin" } } },
            "phases": [ { "routes": { "catalog": { "grpc_response": { "message_file": "other.bin" } } } } ],
        });
        let mut found = Vec::new();
        message_files(
            "dependency",
            &serde_json::json!({"routes": {"inventory": {"grpc_errors": [{"proto": ["errors.proto"]}]}}}),
            &mut found,
        );
        assert_eq!(
            found,
            [(
                "dependency.routes.inventory.grpc_errors[0].proto[0]".to_string(),
                "errors.proto".to_string()
            )]
        );
        let mut found = Vec::new();
        message_files("dependency", &value, &mut found);
        found.sort();
        assert_eq!(
            found,
            [
                (
                    "dependency.phases[0].routes.catalog.grpc_response.message_file".to_string(),
                    "other.bin".to_string()
                ),
                (
                    "dependency.routes.catalog.grpc_response.message_file".to_string(),
                    "product.bin".to_string()
                ),
            ]
        );
    }
}
