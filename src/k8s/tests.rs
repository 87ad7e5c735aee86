//! The manifests of `faultline k8s` checked on their own: objects, names, quantities, deadlines and the errors
//! that place a wrong option or scenario.

use super::files::CarriedFile;
use super::*;
use crate::scenario::{Overrides, Scenario};

const CLUSTER_SCENARIO: &str = "name: checkout\nduration: 90s\nallow_hosts: [checkout.shop.svc]\n\
    dependency: { listen: 127.0.0.1:9000, routes: { pricing: { path: /price/* } } }\n\
    sut: { url: \"http://checkout.shop.svc:8080\" }\n\
    load: { rate: 100/s, timeout: 5s, requests: [ { get: / } ] }\n";

fn q(s: &str) -> Quantity {
    s.parse().unwrap()
}

fn options() -> ClusterOptions {
    ClusterOptions {
        agents: 4,
        image: "registry.example.com/faultline:0.1.0".into(),
        name: None,
        namespace: Some("shop".into()),
        agent: ContainerResources::guaranteed(q("1"), q("512Mi")),
        runner: ContainerResources::guaranteed(q("1"), q("1Gi")),
        storage: q("1Gi"),
        storage_class: None,
        deadline_margin: Duration::from_secs(300),
        ttl: Duration::from_secs(3600),
    }
}

fn files(scenario: &[u8]) -> ScenarioFiles {
    ScenarioFiles {
        files: vec![
            CarriedFile {
                key: "checkout.yaml".into(),
                path: "checkout.yaml".into(),
                bytes: scenario.to_vec(),
                named_by: "the scenario itself".into(),
            },
            CarriedFile {
                key: "grpc_product.bin".into(),
                path: "grpc/product.bin".into(),
                bytes: vec![0x0a, 0xff, 0x00, 0x80],
                named_by: "load.requests[0].message_file".into(),
            },
        ],
    }
}

fn with_layout<T>(options: &ClusterOptions, f: impl FnOnce(&Layout) -> T) -> T {
    let instance = InstanceName::from_scenario("checkout");
    f(&Layout {
        instance: &instance,
        options,
        deadline: 395,
    })
}

fn container(job: &Job) -> &Container {
    &job.spec.template.spec.containers[0]
}

#[test]
fn the_deadline_is_duration_plus_load_timeout_plus_margin_rounded_up_to_a_second() {
    let d = Deadline {
        duration: Duration::from_secs(90),
        load_timeout: Duration::from_secs(5),
        margin: Duration::from_secs(300),
    };
    assert_eq!(d.seconds(), 395);
    assert!(
        d.to_string().starts_with("395 s = the scenario's 90s"),
        "{d}"
    );
    let fractional = Deadline {
        duration: Duration::from_millis(90_200),
        ..d
    };
    assert_eq!(fractional.seconds(), 396);
}

#[test]
fn the_runner_listens_for_n_agents_on_every_address_and_reports_into_a_folder_per_pod() {
    assert_eq!(
        runner_args("/scenario/checkout.yaml", 4),
        [
            "run",
            "/scenario/checkout.yaml",
            "--agents",
            "4",
            "--agents-listen",
            "0.0.0.0:7070",
            "--agents-allow-remote",
            "--report-dir",
            "/reports/$(FAULTLINE_RUN_ID)"
        ]
    );
    let o = options();
    let job = with_layout(&o, |l| {
        l.runner_job(&files(b"x"), vec![EnvVar::value("REDIS_PORT", "6390")])
    });
    let c = container(&job);
    assert_eq!(c.command, ["faultline"]);
    assert_eq!(c.args, runner_args("/scenario/checkout.yaml", 4));
    assert_eq!(c.env[0].name, RUN_ID_VAR);
    assert_eq!(
        c.env[0].value_from.as_ref().unwrap().field_ref.field_path,
        "metadata.name"
    );
    assert_eq!(c.env[1].value.as_deref(), Some("6390"));
    assert_eq!(c.ports[0].container_port, AGENTS_PORT);
}

#[test]
fn an_agent_dials_the_runner_service_and_takes_its_index_from_the_indexed_job() {
    let o = options();
    let address = runner_address(&InstanceName::from_scenario("checkout"), Some("shop"));
    assert_eq!(address, "checkout-runner.shop.svc:7070");
    let job = with_layout(&o, |l| l.agents_job(&files(b"x"), &address));
    let c = container(&job);
    assert_eq!(c.command, ["loadgen"]);
    assert_eq!(
        c.args,
        ["agent", "--runner", "checkout-runner.shop.svc:7070"]
    );
    assert_eq!(c.env.len(), 1);
    assert_eq!(c.env[0].name, "JOB_COMPLETION_INDEX");
    assert_eq!(
        c.env[0].value_from.as_ref().unwrap().field_ref.field_path,
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );
    assert_eq!(c.working_dir, SCENARIO_MOUNT);
}

#[test]
fn without_a_namespace_the_agents_dial_the_service_in_their_own() {
    assert_eq!(
        runner_address(&InstanceName::from_scenario("checkout"), None),
        "checkout-runner:7070"
    );
}

#[test]
fn the_agents_are_an_indexed_job_of_n_pods_at_once_and_both_jobs_run_once() {
    let o = options();
    let (agents, runner) = with_layout(&o, |l| {
        (
            l.agents_job(&files(b"x"), "a:7070"),
            l.runner_job(&files(b"x"), Vec::new()),
        )
    });
    assert_eq!(agents.spec.completion_mode, Some("Indexed"));
    assert_eq!(agents.spec.completions, Some(4));
    assert_eq!(agents.spec.parallelism, Some(4));
    assert_eq!(runner.spec.completion_mode, None);
    for job in [&agents, &runner] {
        assert_eq!(job.spec.backoff_limit, 0);
        assert_eq!(job.spec.template.spec.restart_policy, "Never");
        assert_eq!(job.spec.active_deadline_seconds, 395);
        assert_eq!(job.spec.ttl_seconds_after_finished, 3600);
    }
    let rule = &runner.spec.pod_failure_policy.as_ref().unwrap().rules[0];
    assert_eq!(
        (
            rule.action,
            rule.on_exit_codes.operator,
            &rule.on_exit_codes.values
        ),
        ("FailJob", "NotIn", &vec![0])
    );
}

#[test]
fn the_service_selects_the_runner_pod_and_nothing_else() {
    let o = options();
    let (service, runner, agents) = with_layout(&o, |l| {
        (
            l.runner_service(),
            l.runner_job(&files(b"x"), Vec::new()),
            l.agents_job(&files(b"x"), "a:7070"),
        )
    });
    let selects = |labels: &BTreeMap<String, String>| {
        service
            .spec
            .selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    };
    assert!(selects(&runner.spec.template.metadata.labels));
    assert!(!selects(&agents.spec.template.metadata.labels));
    assert_eq!(service.spec.ports[0].port, AGENTS_PORT);
    assert_eq!(service.metadata.name, "checkout-runner");
}

#[test]
fn text_files_are_carried_as_they_are_and_others_in_base64() {
    let o = options();
    let cm = with_layout(&o, |l| l.scenario_config_map(&files(b"name: x\n")));
    assert_eq!(cm.data["checkout.yaml"], "name: x\n");
    assert_eq!(cm.binary_data["grpc_product.bin"], "Cv8AgA==");
    let volume = with_layout(&o, |l| l.scenario_volume(&files(b"x")));
    let items = volume.config_map.unwrap().items;
    assert_eq!(
        (items[1].key.as_str(), items[1].path.as_str()),
        ("grpc_product.bin", "grpc/product.bin")
    );
}

#[test]
fn the_yaml_gives_back_the_scenario_byte_for_byte() {
    let tricky = "  leading: spaces\nname: x   \n\ttab: 1\n# 'quotes' \"and\" : colons\n\n\n";
    let o = options();
    let objects = with_layout(&o, |l| {
        vec![Object::ConfigMap(
            l.scenario_config_map(&files(tricky.as_bytes())),
        )]
    });
    let m = Manifests {
        instance: InstanceName::from_scenario("checkout"),
        runner_address: "checkout-runner.shop.svc:7070".into(),
        agents: 4,
        deadline: Deadline {
            duration: Duration::from_secs(1),
            load_timeout: Duration::from_secs(1),
            margin: Duration::from_secs(1),
        },
        notes: Vec::new(),
        objects,
    };
    let yaml = m.to_yaml().unwrap();
    let back: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(back["data"]["checkout.yaml"], tricky, "{yaml}");
    assert_eq!(back["kind"], "ConfigMap");
}

#[test]
fn agent_counts_outside_one_to_the_maximum_are_refused() {
    let mut o = options();
    o.agents = 0;
    assert!(matches!(check_options(&o), Err(K8sError::NoAgents)));
    o.agents = MAX_AGENTS + 1;
    let e = check_options(&o).unwrap_err().to_string();
    assert!(
        e.contains("--agents 1001") && e.contains("at most 1000"),
        "{e}"
    );
    o.agents = MAX_AGENTS;
    assert!(check_options(&o).is_ok());
}

#[test]
fn options_kubernetes_would_refuse_are_refused_here() {
    let mut o = options();
    o.agent.cpu_limit = q("500m");
    let e = check_options(&o).unwrap_err().to_string();
    assert!(
        e.contains("--agent-cpu-limit 500m is below --agent-cpu 1"),
        "{e}"
    );
    let mut o = options();
    o.image = "reg/faultline:1 --privileged".into();
    assert!(matches!(check_options(&o), Err(K8sError::Image(_))));
    let mut o = options();
    o.storage_class = Some("Fast_SSD".into());
    assert!(matches!(check_options(&o), Err(K8sError::StorageClass(_))));
    let mut o = options();
    o.namespace = Some("Shop".into());
    assert!(matches!(check_options(&o), Err(K8sError::Name(_))));
}

fn validated(text: &str) -> Validated {
    Scenario::parse(text, "checkout.yaml", &Overrides::default()).unwrap()
}

#[test]
fn a_sut_in_the_cluster_passes() {
    let text = CLUSTER_SCENARIO;
    assert!(check_sut(&validated(text), text).is_ok());
}

#[test]
fn a_sut_the_agents_cannot_reach_is_refused_with_what_to_write_instead() {
    let cases = [
        (
            CLUSTER_SCENARIO.replace(
                "sut: { url: \"http://checkout.shop.svc:8080\" }",
                "sut: { demo: {} }",
            ),
            "sut.demo",
        ),
        (
            CLUSTER_SCENARIO.replace(
                "sut: { url: \"http://checkout.shop.svc:8080\" }",
                "sut: { command: [ ./svc, \"{sut.port}\" ], url: \"http://127.0.0.1:{sut.port}\" }",
            ),
            "sut.command",
        ),
        (
            CLUSTER_SCENARIO.replace("checkout.shop.svc:8080", "127.0.0.1:8080"),
            "sut.url",
        ),
    ];
    for (text, field) in cases {
        let e = check_sut(&validated(&text), &text).unwrap_err().to_string();
        assert!(e.starts_with("checkout.yaml:5:"), "{e}");
        assert!(e.contains(field), "{e}");
        assert!(
            e.contains("sut: { url: http://SERVICE.NAMESPACE.svc:PORT }"),
            "{e}"
        );
        assert!(e.contains("allow_hosts"), "{e}");
    }
}
