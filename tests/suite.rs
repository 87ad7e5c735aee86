//! faultline's integration tests in one test binary: one build and one link instead of one per file, and libtest
//! runs the files' tests side by side (`RUST_TEST_THREADS` in .cargo/config.toml). Most of them are end-to-end runs
//! that wait on real time, not the CPU: a scenario at a few hundred requests per second keeps a core a third busy.
//! A file whose tolerances hold only alone is a test binary of its own instead (`import_records`, run one test at
//! a time after this one), and `every_test_file_is_in_a_test_binary` below keeps a new file from being left out.

mod hardening;
mod peers;
// The real servers faultd's tests start (PostgreSQL in a temporary folder, ...), started the same way here.
#[path = "../faultd/tests/servers/mod.rs"]
mod servers;

// The longest runs first: libtest starts a binary's tests in the order of their names and the binary ends with its
// last test, so the full-length main scenario (90 s), the library's proofs (20-90 s each) and the sweep of the main
// scenario (two runs of 45 s) begin at once and the shorter tests fill the threads beside them.
#[path = "run_slow_dependency.rs"]
mod a1_run_slow_dependency;
#[path = "scenario_library.rs"]
mod a2_scenario_library;
#[path = "size.rs"]
mod a3_size;
#[path = "sweep.rs"]
mod a4_sweep;

mod abort_on_fail;
mod agents;
mod bad_scenarios;
mod ci_action;
mod clock;
mod coarse_scrape;
mod correlation;
mod docs;
mod faultd_replicas;
mod flag_extremes;
mod github_actions;
mod grafana_dashboard;
mod grpc_proto;
mod import;
mod init;
mod input_caps;
mod interrupts;
mod k8s_manifests;
mod metrics_endpoint;
mod outlier_peers;
mod overload;
mod own_service_grpc;
mod own_service_node;
mod real_prometheus;
mod real_pushgateway;
mod report_files;
mod structure_script;
mod sut_metrics;
mod sut_misbehaving;
mod tls_dependency;

/// Each crate that lists its integration tests (`autotests = false`) has every file of its tests/ folder either as
/// a module of its tests/suite.rs or as a `[[test]]` target of its own, never both and never neither: a test file
/// left out would pass by never running.
#[test]
fn every_test_file_is_in_a_test_binary() {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let mut crates_checked = 0;
    for krate in [
        ".",
        "faultd",
        "loadgen",
        "demo",
        "units",
        "alarm",
        "hdr",
        "bench/floor",
    ] {
        let manifest = read(&workspace.join(krate).join("Cargo.toml"));
        if !manifest.contains("\nautotests = false\n") {
            continue;
        }
        crates_checked += 1;
        let tests = workspace.join(krate).join("tests");
        let suite = read(&tests.join("suite.rs"));
        for entry in std::fs::read_dir(&tests).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().to_string();
            let Some(stem) = name.strip_suffix(".rs") else {
                continue;
            };
            if stem == "suite" {
                continue;
            }
            let in_suite = suite
                .lines()
                .any(|l| l == format!("mod {stem};") || l == format!("#[path = \"{stem}.rs\"]"));
            let own = manifest.contains(&format!("path = \"tests/{stem}.rs\""));
            assert!(
                in_suite != own,
                "{krate}/tests/{name}: in the suite {in_suite}, a test target of its own {own}"
            );
        }
    }
    assert_eq!(
        crates_checked, 4,
        "faultline, faultd, loadgen and demo list their tests"
    );
}
