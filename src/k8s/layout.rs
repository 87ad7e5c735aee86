//! One run's objects laid out: their names and labels, the runner's Job and Service, the agents' Indexed Job, the
//! ConfigMap that carries the scenario and its files, and the report's volume claim.

use super::*;

/// Names, labels and shared parts of one run's objects.
pub(super) struct Layout<'a> {
    pub(super) instance: &'a InstanceName,
    pub(super) options: &'a ClusterOptions,
    pub(super) deadline: u64,
}

impl Layout<'_> {
    /// The labels of one part: `app.kubernetes.io/name` (faultline), `instance` (this run), `component` (the part).
    pub(super) fn labels(&self, component: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".into(), "faultline".into()),
            (
                "app.kubernetes.io/instance".into(),
                self.instance.to_string(),
            ),
            ("app.kubernetes.io/component".into(), component.into()),
        ])
    }

    pub(super) fn meta(&self, part: &str, component: &str) -> ObjectMeta {
        ObjectMeta {
            name: self.instance.object(part),
            namespace: self.options.namespace.clone(),
            labels: self.labels(component),
        }
    }

    /// The scenario and its files: text as it is under `data`, anything else base64-encoded under `binaryData`.
    pub(super) fn scenario_config_map(&self, files: &ScenarioFiles) -> ConfigMap {
        let mut data = BTreeMap::new();
        let mut binary_data = BTreeMap::new();
        for f in &files.files {
            match std::str::from_utf8(&f.bytes) {
                Ok(text) => data.insert(f.key.clone(), text.to_string()),
                Err(_) => binary_data.insert(
                    f.key.clone(),
                    base64::engine::general_purpose::STANDARD.encode(&f.bytes),
                ),
            };
        }
        ConfigMap {
            api_version: "v1",
            kind: "ConfigMap",
            metadata: self.meta("scenario", "scenario"),
            data,
            binary_data,
        }
    }

    /// The report volume: one pod writes it at a time, so `ReadWriteOnce`, which every storage class offers.
    pub(super) fn reports_claim(&self) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            api_version: "v1",
            kind: "PersistentVolumeClaim",
            metadata: self.meta("reports", "reports"),
            spec: ClaimSpec {
                access_modes: vec!["ReadWriteOnce"],
                resources: ClaimResources {
                    requests: BTreeMap::from([("storage", self.options.storage.clone())]),
                },
                storage_class_name: self.options.storage_class.clone(),
            },
        }
    }

    /// The name the agents dial: the runner's pod, port 7070.
    pub(super) fn runner_service(&self) -> Service {
        Service {
            api_version: "v1",
            kind: "Service",
            metadata: self.meta(RUNNER, RUNNER),
            spec: ServiceSpec {
                selector: self.labels(RUNNER),
                ports: vec![ServicePort {
                    name: "agents",
                    protocol: "TCP",
                    port: AGENTS_PORT,
                    target_port: "agents",
                }],
            },
        }
    }

    /// The runner: one pod, never retried (a second run would judge a different load), whose exit code is the
    /// verdict. The pod failure rule puts that code in the Job's `Failed` condition.
    pub(super) fn runner_job(&self, files: &ScenarioFiles, variables: Vec<EnvVar>) -> Job {
        let mut env = vec![EnvVar::field(RUN_ID_VAR, "metadata.name")];
        env.extend(variables);
        let container = Container {
            name: "runner",
            image: self.options.image.clone(),
            command: vec!["faultline".into()],
            args: runner_args(&files.scenario_in_pod(), self.options.agents),
            working_dir: SCENARIO_MOUNT,
            env,
            ports: vec![ContainerPort {
                name: "agents",
                container_port: AGENTS_PORT,
                protocol: "TCP",
            }],
            resources: self.options.runner.object(),
            volume_mounts: vec![
                scenario_mount(),
                VolumeMount {
                    name: "reports",
                    mount_path: REPORTS_MOUNT,
                    read_only: false,
                },
            ],
        };
        let reports = Volume {
            name: "reports",
            config_map: None,
            persistent_volume_claim: Some(ClaimVolume {
                claim_name: self.instance.object("reports"),
            }),
        };
        self.job(
            RUNNER,
            RUNNER,
            None,
            Some(PodFailurePolicy {
                rules: vec![PodFailurePolicyRule {
                    action: "FailJob",
                    on_exit_codes: OnExitCodes {
                        container_name: "runner",
                        operator: "NotIn",
                        values: vec![0],
                    },
                }],
            }),
            PodSpec {
                restart_policy: "Never",
                topology_spread_constraints: Vec::new(),
                containers: vec![container],
                volumes: vec![self.scenario_volume(files), reports],
            },
        )
    }

    /// The agents: an Indexed Job of N pods started together, none retried (the runner expects each index once),
    /// spread over the nodes where the cluster can, as the point of agents is more machines.
    pub(super) fn agents_job(&self, files: &ScenarioFiles, runner_address: &str) -> Job {
        let container = Container {
            name: AGENT,
            image: self.options.image.clone(),
            command: vec!["loadgen".into()],
            args: agent_args(runner_address),
            working_dir: SCENARIO_MOUNT,
            env: vec![EnvVar::field(INDEX_VAR, INDEX_FIELD)],
            ports: Vec::new(),
            resources: self.options.agent.object(),
            volume_mounts: vec![scenario_mount()],
        };
        self.job(
            "agents",
            AGENT,
            Some(self.options.agents),
            None,
            PodSpec {
                restart_policy: "Never",
                topology_spread_constraints: vec![TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: "kubernetes.io/hostname",
                    when_unsatisfiable: "ScheduleAnyway",
                    label_selector: LabelSelector {
                        match_labels: self.labels(AGENT),
                    },
                }],
                containers: vec![container],
                volumes: vec![self.scenario_volume(files)],
            },
        )
    }

    /// A Job that runs its pods once: `backoffLimit: 0`, the run's deadline and time to live; with `indexed`, an
    /// Indexed Job of that many pods, all at once.
    pub(super) fn job(
        &self,
        part: &str,
        component: &str,
        indexed: Option<u32>,
        pod_failure_policy: Option<PodFailurePolicy>,
        pod: PodSpec,
    ) -> Job {
        Job {
            api_version: "batch/v1",
            kind: "Job",
            metadata: self.meta(part, component),
            spec: JobSpec {
                completion_mode: indexed.map(|_| "Indexed"),
                completions: indexed,
                parallelism: indexed,
                backoff_limit: 0,
                active_deadline_seconds: self.deadline,
                ttl_seconds_after_finished: self.options.ttl.as_secs(),
                pod_failure_policy,
                template: PodTemplate {
                    metadata: TemplateMeta {
                        labels: self.labels(component),
                    },
                    spec: pod,
                },
            },
        }
    }

    /// The ConfigMap as files, each at the path the scenario names it by. The agents mount it too, so that a path
    /// in the plan the runner hands them (a timetable, a message file) names the same file in every pod.
    pub(super) fn scenario_volume(&self, files: &ScenarioFiles) -> Volume {
        Volume {
            name: "scenario",
            config_map: Some(ConfigMapVolume {
                name: self.instance.object("scenario"),
                items: files
                    .files
                    .iter()
                    .map(|f| KeyToPath {
                        key: f.key.clone(),
                        path: f.path.clone(),
                    })
                    .collect(),
            }),
            persistent_volume_claim: None,
        }
    }
}

pub(super) fn scenario_mount() -> VolumeMount {
    VolumeMount {
        name: "scenario",
        mount_path: SCENARIO_MOUNT,
        read_only: true,
    }
}
