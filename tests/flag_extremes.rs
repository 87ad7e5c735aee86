//! Every numeric flag of every binary (faultline, faultd, loadgen, demo) given extreme values: zero, negative, NaN,
//! infinity, 1e300, 1e-300, integers past 64 bits, the empty string. Each must end with exit 2 and a message naming
//! the flag: never a panic (101), never a run. The other arguments name a file that does not exist, so that a value
//! let through ends in a different error, one that does not name the flag. Each invocation has a deadline.
//!
//! Needs faultd, loadgen and demo built with the same profile (`cargo build --release -p faultd -p loadgen -p
//! demo`).

use crate::hardening;

use std::path::Path;
use std::time::Duration;

use hardening::{bin, run_within, Scratch};

const DEADLINE: Duration = Duration::from_secs(20);
const MISSING: &str = "/nonexistent/faultline-flag-extremes.yaml";

/// Values no factor accepts (`--time-scale`, `--speed`, `--scale-rate`).
const FACTORS: &[&str] = &["0", "-1", "NaN", "inf", "-inf", "1e300", "1e-300", "", "x"];
/// Values no count accepts, where 0 is not a count either.
const COUNTS: &[&str] = &[
    "0",
    "-1",
    "NaN",
    "inf",
    "1e300",
    "1e-300",
    "99999999999999999999999",
    "",
];
/// Values no integer accepts (a seed, an index: 0 is one).
const INTEGERS: &[&str] = &[
    "-1",
    "NaN",
    "inf",
    "1e300",
    "99999999999999999999999",
    "",
    "1.5",
];
/// Values no duration accepts.
const DURATIONS: &[&str] = &[
    "-1s",
    "NaNs",
    "infs",
    "1e300s",
    "1e-300s",
    "99999999999999999999999h",
    "",
    "10",
];
/// Values no duration that must be longer than 0 accepts.
const POSITIVE_DURATIONS: &[&str] = &[
    "0s",
    "-1s",
    "NaNs",
    "infs",
    "1e300s",
    "99999999999999999999999h",
    "",
];
/// Values no size accepts.
const SIZES: &[&str] = &[
    "0B",
    "-1B",
    "NaNB",
    "1e300B",
    "99999999999999999999999GiB",
    "",
    "12",
];

/// Runs `program` with `base`, then `--flag=value`, within the deadline; asserts exit 2 and the flag named.
fn assert_each_refused(program: &Path, base: &[&str], flag: &str, values: &[&str]) {
    for value in values {
        let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        args.push(format!("{flag}={value}"));
        let (code, stderr) = run_within(program, &args, DEADLINE);
        let name = program.file_name().unwrap().to_string_lossy();
        assert_eq!(code, Some(2), "{name} {args:?}: {stderr}");
        assert!(
            stderr.contains(flag),
            "{name} {args:?}: the message does not name {flag}: {stderr}"
        );
    }
}

#[test]
fn faultlines_numeric_flags_refuse_extreme_values_with_exit_2_naming_the_flag() {
    let faultline = Path::new(env!("CARGO_BIN_EXE_faultline"));
    let run = ["run", MISSING];
    assert_each_refused(faultline, &run, "--time-scale", FACTORS);
    assert_each_refused(faultline, &run, "--seed", INTEGERS);
    assert_each_refused(faultline, &run, "--agents", COUNTS);
    assert_each_refused(faultline, &run, "--metrics-linger", DURATIONS);
    let prove = ["prove", MISSING];
    assert_each_refused(faultline, &prove, "--time-scale", FACTORS);
    assert_each_refused(faultline, &prove, "--seed", INTEGERS);
    assert_each_refused(faultline, &prove, "--agents", COUNTS);
    let import = ["import", "--format", "nginx", MISSING];
    assert_each_refused(faultline, &import, "--speed", FACTORS);
    assert_each_refused(faultline, &import, "--scale-rate", FACTORS);
    assert_each_refused(faultline, &import, "--bucket", POSITIVE_DURATIONS);
    assert_each_refused(faultline, &import, "--max-input-size", SIZES);
    assert_each_refused(faultline, &import, "--max-line-length", SIZES);
    let k8s = ["k8s", MISSING, "--image", "faultline:0"];
    assert_each_refused(
        faultline,
        &[&k8s[..], &["--agents=2"]].concat(),
        "--ttl",
        DURATIONS,
    );
    assert_each_refused(faultline, &k8s, "--agents", COUNTS);
    let agent = ["agent", "--runner", "127.0.0.1:1", "--connect-for=1ms"];
    assert_each_refused(faultline, &agent, "--index", INTEGERS);
}

#[test]
fn faultds_numeric_flags_refuse_extreme_values_with_exit_2_naming_the_flag() {
    let faultd = bin("faultd");
    let base = ["--config", MISSING, "--listen", "127.0.0.1:0"];
    assert_each_refused(&faultd, &base, "--time-scale", FACTORS);
    assert_each_refused(&faultd, &base, "--seed", INTEGERS);
    assert_each_refused(&faultd, &base, "--max-connections", COUNTS);
    assert_each_refused(&faultd, &base, "--backlog", INTEGERS);
    assert_each_refused(&faultd, &base, "--threads", COUNTS);
}

#[test]
fn loadgens_numeric_flags_refuse_extreme_values_with_exit_2_naming_the_flag() {
    let loadgen = bin("loadgen");
    let base = [
        "--url",
        "http://127.0.0.1:1/",
        "--duration",
        "1s",
        "--spec",
        MISSING,
    ];
    let rates = ["0/s", "-1/s", "NaN/s", "inf/s", "1e300/s", "", "5"];
    assert_each_refused(&loadgen, &base, "--rate", &rates);
    assert_each_refused(
        &loadgen,
        &["--url", "http://127.0.0.1:1/", "--spec", MISSING],
        "--duration",
        POSITIVE_DURATIONS,
    );
    assert_each_refused(&loadgen, &base, "--timeout", POSITIVE_DURATIONS);
    assert_each_refused(&loadgen, &base, "--bucket", POSITIVE_DURATIONS);
    assert_each_refused(&loadgen, &base, "--coalesce", &["1h", "-1s", "NaNs", ""]);
    assert_each_refused(&loadgen, &base, "--max-in-flight", COUNTS);
    assert_each_refused(&loadgen, &base, "--connections", COUNTS);
    assert_each_refused(&loadgen, &base, "--users", COUNTS);
    assert_each_refused(&loadgen, &base, "--threads", COUNTS);
    assert_each_refused(&loadgen, &base, "--seed", INTEGERS);
    let agent = ["agent", "--runner", "127.0.0.1:1", "--connect-for=1ms"];
    assert_each_refused(&loadgen, &agent, "--threads", COUNTS);
    assert_each_refused(&loadgen, &agent, "--index", INTEGERS);
}

#[test]
fn the_demos_numeric_flags_refuse_extreme_values_with_exit_2_naming_the_flag() {
    let demo = bin("demo");
    let base = ["--config", MISSING, "--listen", "127.0.0.1:0"];
    assert_each_refused(&demo, &base, "--time-scale", FACTORS);
    assert_each_refused(&demo, &base, "--instances", COUNTS);
}

/// The reported panic: a time scale that makes a configured duration overflow `Duration`.
#[test]
fn faultd_with_a_valid_configuration_refuses_time_scale_1e300_with_exit_2_not_a_panic() {
    let scratch = Scratch::new("flag-extremes");
    let config = scratch.write(
        "faultd.yaml",
        "routes:\n  pricing: { path: /price/*, latency: { fixed: 40ms } }\n",
    );
    assert_each_refused(
        &bin("faultd"),
        &[
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        "--time-scale",
        &["1e300", "1e-300"],
    );
}
