//! The Kubernetes objects a cluster run needs, as small typed structs with exactly the fields faultline writes,
//! serialised with the API's field names. Not a Kubernetes client or a full model of the API (that is what
//! `k8s-openapi` would be, at minutes of compile for a handful of fields): what these write is checked against the
//! API's own schemas by `tests/k8s_manifests.rs`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Quantity;

/// One object of the manifests, in the order `kubectl apply` should meet them.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Object {
    ConfigMap(ConfigMap),
    PersistentVolumeClaim(PersistentVolumeClaim),
    Service(Service),
    Job(Job),
}

impl Object {
    /// The object's kind, as the API names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Object::ConfigMap(o) => o.kind,
            Object::PersistentVolumeClaim(o) => o.kind,
            Object::Service(o) => o.kind,
            Object::Job(o) => o.kind,
        }
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::ConfigMap(o) => &o.metadata,
            Object::PersistentVolumeClaim(o) => &o.metadata,
            Object::Service(o) => &o.metadata,
            Object::Job(o) => &o.metadata,
        }
    }
}

/// An object's name, namespace (the current one of `kubectl` when absent) and labels.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectMeta {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// Files by key: text under `data`, anything else base64-encoded under `binaryData`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMap {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: ObjectMeta,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub data: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub binary_data: BTreeMap<String, String>,
}

/// An object described by a spec: its API version, kind and metadata, then the spec.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Specified<S> {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: ObjectMeta,
    pub spec: S,
}

/// A volume claim: where the runner's report outlives its pod.
pub type PersistentVolumeClaim = Specified<ClaimSpec>;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSpec {
    pub access_modes: Vec<&'static str>,
    pub resources: ClaimResources,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClaimResources {
    pub requests: BTreeMap<&'static str, Quantity>,
}

/// A Service: the stable name the agents dial.
pub type Service = Specified<ServiceSpec>;

#[derive(Debug, Clone, Serialize)]
pub struct ServiceSpec {
    pub selector: BTreeMap<String, String>,
    pub ports: Vec<ServicePort>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    pub name: &'static str,
    pub protocol: &'static str,
    pub port: u16,
    /// The container port's name, so that the number is written once.
    pub target_port: &'static str,
}

/// A Job: pods that run to an exit code, never restarted.
pub type Job = Specified<JobSpec>;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completions: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    pub backoff_limit: u32,
    pub active_deadline_seconds: u64,
    pub ttl_seconds_after_finished: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_failure_policy: Option<PodFailurePolicy>,
    pub template: PodTemplate,
}

/// Rules for a failed pod; faultline's one rule fails the Job on any non-zero exit of the named container, which
/// puts the exit code in the Job's `Failed` condition.
#[derive(Debug, Clone, Serialize)]
pub struct PodFailurePolicy {
    pub rules: Vec<PodFailurePolicyRule>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodFailurePolicyRule {
    pub action: &'static str,
    pub on_exit_codes: OnExitCodes,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OnExitCodes {
    pub container_name: &'static str,
    pub operator: &'static str,
    pub values: Vec<i32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PodTemplate {
    pub metadata: TemplateMeta,
    pub spec: PodSpec,
}

#[derive(Debug, Clone, Serialize)]
pub struct TemplateMeta {
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    pub restart_policy: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    pub containers: Vec<Container>,
    pub volumes: Vec<Volume>,
}

/// Spreads pods that match `label_selector` over the values of `topology_key` (one node each, where it can).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpreadConstraint {
    pub max_skew: u32,
    pub topology_key: &'static str,
    pub when_unsatisfiable: &'static str,
    pub label_selector: LabelSelector,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub name: &'static str,
    pub image: String,
    /// Always set: the image's entrypoint is `faultline`, and an agent runs `loadgen`.
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub working_dir: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
    pub resources: Resources,
    pub volume_mounts: Vec<VolumeMount>,
}

/// An environment variable: a value, or a field of the pod's own object (the downward API).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
}

impl EnvVar {
    /// A variable with a fixed value.
    pub fn value(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.to_string(),
            value: Some(value.to_string()),
            value_from: None,
        }
    }

    /// A variable read from a field of the pod, e.g. `metadata.name`.
    pub fn field(name: &str, field_path: &str) -> EnvVar {
        EnvVar {
            name: name.to_string(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: FieldRef {
                    field_path: field_path.to_string(),
                },
            }),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarSource {
    pub field_ref: FieldRef,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldRef {
    pub field_path: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    pub name: &'static str,
    pub container_port: u16,
    pub protocol: &'static str,
}

/// What a container is scheduled with (`requests`) and may not exceed (`limits`).
#[derive(Debug, Clone, Serialize)]
pub struct Resources {
    pub requests: BTreeMap<&'static str, Quantity>,
    pub limits: BTreeMap<&'static str, Quantity>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMount {
    pub name: &'static str,
    pub mount_path: &'static str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

/// A pod volume: a ConfigMap's keys as files, or a claim.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub name: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapVolume>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<ClaimVolume>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigMapVolume {
    pub name: String,
    /// Each key at its path under the mount, so that a scenario's relative paths resolve as on the machine that
    /// wrote the manifests.
    pub items: Vec<KeyToPath>,
}

#[derive(Debug, Clone, Serialize)]
pub struct KeyToPath {
    pub key: String,
    pub path: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimVolume {
    pub claim_name: String,
}
