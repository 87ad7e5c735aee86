//! The Kubernetes manifests of a distributed run (`faultline k8s`), written from the scenario alone: the runner is a
//! Job whose pod waits for N agents to dial its Service, the agents are an Indexed Job of N pods each running
//! `loadgen agent` with its index from `JOB_COMPLETION_INDEX`, the scenario and the files it names travel in a
//! ConfigMap, and the report lands on a volume claim that outlives the pods.
//!
//! Not a Kubernetes client: nothing here talks to a cluster (`kubectl apply` does), and nothing here runs a
//! scenario (the runner in its pod does, as `faultline run --agents N` does locally). Each concern has its file:
//! `names` (names that stay DNS labels), `quantity` (CPU and memory amounts), `files` (what the ConfigMap carries),
//! `objects` (the typed objects, serialised to YAML).

mod files;
mod layout;
mod names;
mod objects;
mod quantity;

use layout::*;

pub use files::{CONFIG_MAP_LIMIT, SCENARIO_MOUNT};
pub use names::{check_namespace, InstanceName, NameError};
pub use quantity::Quantity;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use faultline_units::Dur;

use crate::scenario::{check_host, locate, referenced_variables, ScenarioError, Validated};
use files::ScenarioFiles;
use objects::{
    ClaimResources, ClaimSpec, ClaimVolume, ConfigMap, ConfigMapVolume, Container, ContainerPort,
    EnvVar, Job, JobSpec, KeyToPath, LabelSelector, Object, ObjectMeta, OnExitCodes,
    PersistentVolumeClaim, PodFailurePolicy, PodFailurePolicyRule, PodSpec, PodTemplate, Resources,
    Service, ServicePort, ServiceSpec, TemplateMeta, TopologySpreadConstraint, Volume, VolumeMount,
};

/// The port the runner listens on for its agents, in its pod and on its Service.
pub const AGENTS_PORT: u16 = 7070;

/// The most agents one runner takes: it merges every agent's histograms bucket by bucket in one process, and a
/// thousand agents is far past the load one service under test needs.
pub const MAX_AGENTS: u32 = 1000;

/// Where the report volume is mounted in the runner's pod.
pub const REPORTS_MOUNT: &str = "/reports";

/// The runner's pod name, in its own environment: each run's report folder is named after it, so that runs sharing
/// the volume never write over each other.
pub const RUN_ID_VAR: &str = "FAULTLINE_RUN_ID";

/// The variable an agent reads its index from. Kubernetes sets it in an Indexed Job's pods; the manifests set it as
/// well, from the pod's completion-index annotation, so that the agents do not rest on that default.
pub const INDEX_VAR: &str = "JOB_COMPLETION_INDEX";

/// The annotation an Indexed Job gives each pod: its index, from 0.
const INDEX_FIELD: &str = "metadata.annotations['batch.kubernetes.io/job-completion-index']";

/// The `app.kubernetes.io/component` of each part.
const RUNNER: &str = "runner";
const AGENT: &str = "agent";

/// What one container is scheduled with (requests) and may use at most (limits).
#[derive(Debug, Clone)]
pub struct ContainerResources {
    /// CPUs the container is scheduled with.
    pub cpu: Quantity,
    /// Memory the container is scheduled with.
    pub memory: Quantity,
    /// CPUs it may use at most; beyond them it is throttled.
    pub cpu_limit: Quantity,
    /// Memory it may use at most; beyond it the container is killed.
    pub memory_limit: Quantity,
}

impl ContainerResources {
    /// Limits equal to the requests (Kubernetes' Guaranteed class): the container gets what it was scheduled for,
    /// and is the last to be evicted when its node runs short.
    pub fn guaranteed(cpu: Quantity, memory: Quantity) -> ContainerResources {
        ContainerResources {
            cpu_limit: cpu.clone(),
            memory_limit: memory.clone(),
            cpu,
            memory,
        }
    }

    /// Refuses a limit below its request, which the API server would refuse at `kubectl apply`.
    fn check(&self, flags: &'static str) -> Result<(), K8sError> {
        for (what, request, limit) in [
            ("cpu", &self.cpu, &self.cpu_limit),
            ("memory", &self.memory, &self.memory_limit),
        ] {
            if limit.value() < request.value() {
                return Err(K8sError::LimitBelowRequest {
                    flag: format!("{flags}-{what}-limit"),
                    limit: limit.to_string(),
                    request: format!("{flags}-{what} {request}"),
                });
            }
        }
        Ok(())
    }

    fn object(&self) -> Resources {
        Resources {
            requests: BTreeMap::from([("cpu", self.cpu.clone()), ("memory", self.memory.clone())]),
            limits: BTreeMap::from([
                ("cpu", self.cpu_limit.clone()),
                ("memory", self.memory_limit.clone()),
            ]),
        }
    }
}

/// What the command line chose for a cluster run.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// How many agents share the load (`--agents`).
    pub agents: u32,
    /// The image holding `faultline`, `faultd` and `loadgen` (`--image`).
    pub image: String,
    /// The instance name every object is named after (`--name`); derived from the scenario's name when absent.
    pub name: Option<String>,
    /// The namespace of every object (`--namespace`); kubectl's current one when absent.
    pub namespace: Option<String>,
    /// Each agent's container.
    pub agent: ContainerResources,
    /// The runner's container.
    pub runner: ContainerResources,
    /// The size of the report volume.
    pub storage: Quantity,
    /// The report volume's storage class; the cluster's default when absent.
    pub storage_class: Option<String>,
    /// Time allowed beyond the scenario's duration and load timeout: see [`Deadline`].
    pub deadline_margin: Duration,
    /// How long a finished Job (and its pods, with their logs and exit codes) is kept.
    pub ttl: Duration,
}

/// Why manifests could not be written. Every one is bad input: exit 2.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("--agents 0: a distributed run needs at least one agent")]
    NoAgents,
    #[error("--agents {0}: one runner takes at most {MAX_AGENTS} agents (it merges all their histograms, bucket by bucket); give each agent a larger share instead, as one agent sends thousands of requests a second")]
    TooManyAgents(u32),
    #[error("--image {0:?}: name an image reference such as registry.example.com/faultline:0.1.0")]
    Image(String),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("--storage-class {0:?}: a storage class name is lowercase letters, digits, `-` and `.`, starting and ending with a letter or digit")]
    StorageClass(String),
    #[error("{flag} {limit} is below {request}: Kubernetes refuses a limit below its request")]
    LimitBelowRequest {
        flag: String,
        limit: String,
        request: String,
    },
    #[error("{file}: cannot read: {source}")]
    ReadScenario {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: {first} and {second} both need {path:?} under {SCENARIO_MOUNT}, but they are different files; rename one of them")]
    FileConflict {
        file: String,
        path: String,
        first: String,
        second: String,
    },
    #[error("{file}: the scenario and the files it names total {total} bytes, and a ConfigMap holds at most {CONFIG_MAP_LIMIT} (1 MiB); the largest: {listing}. Shorten them (a replayed timetable can be cut, or played with `rate:` instead)")]
    TooLarge {
        file: String,
        total: usize,
        listing: String,
    },
    #[error("cannot write the manifests as YAML: {0}")]
    Yaml(String),
}

impl K8sError {
    /// The process exit code for this error: always 2, bad input.
    pub fn exit_code(&self) -> i32 {
        2
    }
}

/// How long both Jobs may run (`activeDeadlineSeconds`): the scenario's duration, plus the load's timeout (the
/// last requests' answers), plus a margin for the pods to be scheduled and pull the image, for the agents to dial
/// the runner and register, and for the runner to end (it gives in-flight requests the load's timeout and 30 s
/// more at most) and write its report. Past it, Kubernetes stops whatever is still running.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Deadline {
    /// The scenario's `duration`.
    pub duration: Duration,
    /// The load's `timeout`.
    pub load_timeout: Duration,
    /// `--deadline-margin`.
    pub margin: Duration,
}

impl Deadline {
    /// The deadline in whole seconds, rounded up.
    pub fn seconds(&self) -> u64 {
        let total = self
            .duration
            .saturating_add(self.load_timeout)
            .saturating_add(self.margin);
        total.as_secs() + u64::from(total.subsec_nanos() > 0)
    }
}

impl fmt::Display for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} s = the scenario's {} + the load's timeout {} + a margin of {}",
            self.seconds(),
            Dur(self.duration),
            Dur(self.load_timeout),
            Dur(self.margin)
        )
    }
}

/// The manifests of one cluster run, and what the command says about them.
#[derive(Debug, Clone)]
pub struct Manifests {
    /// The name every object derives from.
    pub instance: InstanceName,
    /// Where the agents dial the runner: its Service's DNS name and port.
    pub runner_address: String,
    /// How many agents the run has.
    pub agents: u32,
    /// How long the Jobs may run.
    pub deadline: Deadline,
    /// What the user should know about this run in a cluster (printed, not refused).
    pub notes: Vec<String>,
    objects: Vec<Object>,
}

impl Manifests {
    /// The name of the runner's Job and Service, e.g. `slow-dependency-runner`.
    pub fn runner_name(&self) -> String {
        self.instance.object(RUNNER)
    }

    /// Each object's kind and name, in the order they are written.
    pub fn objects(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.objects
            .iter()
            .map(|o| (o.kind(), o.metadata().name.as_str()))
    }

    /// One multi-document YAML file, the objects in the order `kubectl apply` should meet them (what the pods mount
    /// before the pods), after a comment saying what it holds.
    pub fn to_yaml(&self) -> Result<String, K8sError> {
        let header = format!(
            "# A distributed faultline run, written by `faultline k8s`:\n\
             #   runner    Job {runner}, which the agents dial at {address}\n\
             #   agents    Indexed Job {agents_job}, {agents} pods\n\
             #   scenario  ConfigMap {scenario}, mounted at {SCENARIO_MOUNT}\n\
             #   report    PersistentVolumeClaim {reports}, mounted at {REPORTS_MOUNT} in the runner's pod\n\
             #   deadline  {deadline}\n",
            runner = self.runner_name(),
            address = self.runner_address,
            agents = self.agents,
            agents_job = self.instance.object("agents"),
            scenario = self.instance.object("scenario"),
            reports = self.instance.object("reports"),
            deadline = self.deadline,
        );
        let body = serde_saphyr::to_string_multiple(&self.objects)
            .map_err(|e| K8sError::Yaml(e.to_string()))?;
        Ok(header + &body)
    }
}

/// Writes the manifests of `v` (loaded from `scenario_path`) for a cluster: refuses a SUT the agents cannot reach
/// and options Kubernetes would refuse, carries the scenario's files, and hands the runner the environment
/// variables the scenario reads as `env` gives them (the values it was validated with).
pub fn manifests(
    v: &Validated,
    scenario_path: &Path,
    options: &ClusterOptions,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Manifests, K8sError> {
    check_options(options)?;
    let files = files::collect(v, scenario_path)?;
    let text = files.scenario_text();
    check_sut(v, &text)?;
    let instance = match &options.name {
        Some(n) => InstanceName::parse(n)?,
        None => InstanceName::from_scenario(&v.scenario.name),
    };
    let deadline = Deadline {
        duration: v.scenario.duration.get(),
        load_timeout: v.scenario.load.timeout.get(),
        margin: options.deadline_margin,
    };
    let variables: Vec<EnvVar> = referenced_variables(&text)
        .into_iter()
        .filter_map(|name| {
            env(&name)
                .filter(|value| !value.is_empty())
                .map(|value| EnvVar::value(&name, &value))
        })
        .collect();
    let mut notes = Vec::new();
    if !variables.is_empty() {
        let names: Vec<&str> = variables.iter().map(|e| e.name.as_str()).collect();
        notes.push(format!(
            "the runner's environment carries {} as set here, so that the cluster reads the scenario as it was \
             validated; the values are written into the manifests in clear",
            names.join(", ")
        ));
    }
    if v.scenario.faultd.is_none() {
        notes.push(
            "the dependency is the runner's embedded faultd, which listens on the runner pod's loopback, where a \
             service in the cluster cannot call it: run faultd as a Deployment behind a Service and name it under \
             `faultd: { control: URL, url: URL }` for the service to meet the scenario's faults"
                .into(),
        );
    }
    let layout = Layout {
        instance: &instance,
        options,
        deadline: deadline.seconds(),
    };
    let runner_address = runner_address(&instance, options.namespace.as_deref());
    let objects = vec![
        Object::ConfigMap(layout.scenario_config_map(&files)),
        Object::PersistentVolumeClaim(layout.reports_claim()),
        Object::Service(layout.runner_service()),
        Object::Job(layout.runner_job(&files, variables)),
        Object::Job(layout.agents_job(&files, &runner_address)),
    ];
    Ok(Manifests {
        instance,
        runner_address,
        agents: options.agents,
        deadline,
        notes,
        objects,
    })
}

/// The runner's arguments: the scenario from the mount, N agents that dial it on every address of its pod, and the
/// report in a folder of the volume named after the pod (Kubernetes expands `$(FAULTLINE_RUN_ID)`).
pub fn runner_args(scenario_in_pod: &str, agents: u32) -> Vec<String> {
    [
        "run",
        scenario_in_pod,
        "--agents",
        &agents.to_string(),
        "--agents-listen",
        &format!("0.0.0.0:{AGENTS_PORT}"),
        "--agents-allow-remote",
        "--report-dir",
        &format!("{REPORTS_MOUNT}/$({RUN_ID_VAR})"),
    ]
    .map(String::from)
    .to_vec()
}

/// An agent's arguments: the runner's address; its index comes from [`INDEX_VAR`] and its plan from the runner.
pub fn agent_args(runner_address: &str) -> Vec<String> {
    ["agent", "--runner", runner_address]
        .map(String::from)
        .to_vec()
}

/// The runner Service's DNS name and port: `NAME-runner.NAMESPACE.svc:7070`, or `NAME-runner:7070` (resolved in
/// the agents' own namespace, which is the runner's) when no namespace is given.
pub fn runner_address(instance: &InstanceName, namespace: Option<&str>) -> String {
    let service = instance.object(RUNNER);
    match namespace {
        Some(ns) => format!("{service}.{ns}.svc:{AGENTS_PORT}"),
        None => format!("{service}:{AGENTS_PORT}"),
    }
}

/// A scenario error at `field` of `text`, with its line when the field can be found.
fn at(text: &str, file: &str, field: &str, message: String) -> K8sError {
    let needle = format!("{}:", field.rsplit('.').next().unwrap_or(field));
    K8sError::Scenario(locate(text, file, field, &needle, message))
}

/// Parses `--agents` and holds it to 1..=[`MAX_AGENTS`], for the command line to refuse before any file is read.
pub fn parse_agents(text: &str) -> Result<u32, String> {
    let agents: u32 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number of agents (1 to {MAX_AGENTS})"))?;
    match agents {
        0 => Err(K8sError::NoAgents.to_string()),
        n if n > MAX_AGENTS => Err(K8sError::TooManyAgents(n).to_string()),
        n => Ok(n),
    }
}

fn check_options(o: &ClusterOptions) -> Result<(), K8sError> {
    if o.agents == 0 {
        return Err(K8sError::NoAgents);
    }
    if o.agents > MAX_AGENTS {
        return Err(K8sError::TooManyAgents(o.agents));
    }
    if o.image.is_empty() || o.image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(K8sError::Image(o.image.clone()));
    }
    if let Some(ns) = &o.namespace {
        check_namespace(ns)?;
    }
    if let Some(class) = &o.storage_class {
        let ok = !class.is_empty()
            && class.len() <= 253
            && class
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && class.starts_with(|c: char| c.is_ascii_alphanumeric())
            && class.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return Err(K8sError::StorageClass(class.clone()));
        }
    }
    o.agent.check("--agent")?;
    o.runner.check("--runner")
}

/// Refuses a SUT that agents in other pods cannot reach: the demo and a command run in the runner's process or
/// pod, on its loopback, and a loopback URL is, in each agent's pod, that agent itself.
fn check_sut(v: &Validated, text: &str) -> Result<(), K8sError> {
    let instead = "in a cluster, run the service under test as a Deployment behind a Service and write \
                   `sut: { url: http://SERVICE.NAMESPACE.svc:PORT }`, with SERVICE.NAMESPACE.svc under `allow_hosts`";
    let sut = &v.scenario.sut;
    let refused = if sut.demo.is_some() {
        Some((
            "sut.demo",
            "the bundled demo runs inside the runner's process, on the loopback of the runner's pod, where the \
             agents (pods of their own) cannot reach it",
        ))
    } else if sut.command.is_some() {
        Some((
            "sut.command",
            "a command SUT is a child process of the runner, listening on the loopback of the runner's pod, where \
             the agents (pods of their own) cannot reach it",
        ))
    } else if sut
        .url
        .as_deref()
        .is_some_and(|u| check_host(u, &[]).is_ok())
    {
        Some((
            "sut.url",
            "a loopback address means, in each agent's pod, the agent itself",
        ))
    } else {
        None
    };
    match refused {
        Some((field, why)) => Err(at(text, &v.file, field, format!("{why}; {instead}"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
