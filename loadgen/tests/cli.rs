//! The `loadgen` binary: bad input exits 2 with a message that says what is wrong; a real run prints the
//! wrk2-style table, valid JSON and an .hgrm file that matches the recording.

use crate::common;

use std::process::{Command, Output};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use loadgen::{hgrm, Bucket, Measure, Outcome, Recording};

fn loadgen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs loadgen on a blocking thread, so the test's server keeps running on the async runtime, and checks
/// that it exited 0.
async fn run_ok(args: &[&str]) -> Output {
    let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = owned.iter().map(String::as_str).collect();
        loadgen(&args)
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn assert_bad_input(args: &[&str], says: &str) {
    let out = loadgen(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(
        stderr.contains(says),
        "{args:?}: expected {says:?} in {stderr}"
    );
}

#[test]
fn bad_rates_durations_urls_and_foreign_hosts_exit_2_with_the_reason() {
    let url = "http://127.0.0.1:9/";
    assert_bad_input(
        &["--url", url, "--rate", "500", "--duration", "1s"],
        "not a rate",
    );
    assert_bad_input(
        &["--url", url, "--rate", "fast/s", "--duration", "1s"],
        "not a rate",
    );
    assert_bad_input(
        &["--url", url, "--rate", "5/s", "--duration", "5 sec"],
        "not a duration",
    );
    assert_bad_input(
        &[
            "--url",
            url,
            "--rate",
            "5/s",
            "--duration",
            "1s",
            "--timeout",
            "2",
        ],
        "needs a unit",
    );
    assert_bad_input(
        &[
            "--url",
            "127.0.0.1:9/x",
            "--rate",
            "5/s",
            "--duration",
            "1s",
        ],
        "scheme",
    );
    // https is spoken now; a CA file it cannot read is bad input, named with its field.
    assert_bad_input(
        &[
            "--url",
            "https://127.0.0.1:9/",
            "--rate",
            "5/s",
            "--duration",
            "1s",
            "--ca",
            "/nonexistent/ca.pem",
        ],
        "load.tls.ca",
    );
    assert_bad_input(
        &[
            "--url",
            "http://127.0.0.1:9/{uuid}",
            "--rate",
            "5/s",
            "--duration",
            "1s",
        ],
        "unknown generator",
    );
    assert_bad_input(
        &[
            "--url",
            "http://10.0.0.1:80/",
            "--rate",
            "5/s",
            "--duration",
            "1s",
        ],
        "--allow-host",
    );
    assert_bad_input(
        &[
            "--url",
            url,
            "--rate",
            "5/s",
            "--duration",
            "1s",
            "--max-in-flight",
            "0",
        ],
        "--max-in-flight",
    );
    assert_bad_input(
        &[
            "--url",
            url,
            "--rate",
            "5/s",
            "--duration",
            "1s",
            "-H",
            "no colon",
        ],
        "name: value",
    );
    assert_bad_input(&["--url", url, "--duration", "1s"], "--rate");
    assert_bad_input(
        &[
            "--url",
            url,
            "--rate",
            "5/s",
            "--users",
            "3",
            "--duration",
            "1s",
        ],
        "cannot be used with",
    );
}

#[test]
fn a_spec_file_with_an_unknown_field_exits_2_naming_it() {
    let file =
        std::env::temp_dir().join(format!("loadgen-cli-bad-spec-{}.yaml", std::process::id()));
    std::fs::write(&file, "rate: 5/s\nrequests: [ { get: / } ]\nburst: 3\n").unwrap();
    let path = file.to_str().unwrap();
    assert_bad_input(
        &[
            "--spec",
            path,
            "--url",
            "http://127.0.0.1:9",
            "--duration",
            "1s",
        ],
        "burst",
    );
    std::fs::remove_file(file).unwrap();
}

#[test]
fn help_shows_examples() {
    let out = loadgen(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Examples:") && text.contains("--rate 500/s --duration 30s"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_prints_the_table_and_writes_json_and_a_matching_hgrm() {
    let base = common::serve(Router::new().route(
        "/p/{id}",
        get(|| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            "ok"
        }),
    ))
    .await;
    let url = format!("{base}/p/{{rand:1..100}}");
    let hgrm_file = std::env::temp_dir().join(format!("loadgen-cli-{}.hgrm", std::process::id()));
    let hgrm_path = hgrm_file.to_str().unwrap().to_string();

    let args = [
        "--url",
        &url,
        "--rate",
        "50/s",
        "--duration",
        "1s",
        "--json",
        "--hgrm",
        &hgrm_path,
    ];
    let out = run_ok(&args).await;
    let recording: Recording = serde_json::from_slice(&out.stdout).unwrap();
    assert!(recording.conservation.holds);
    assert_eq!(recording.totals.ok, 50);
    assert!(recording.buckets.len() >= 10, "--json carries the series");
    assert_eq!(recording.buckets.iter().map(|b| b.sent).sum::<u64>(), 50);

    let text = std::fs::read_to_string(&hgrm_file).unwrap();
    std::fs::remove_file(&hgrm_file).unwrap();
    let parsed = hgrm::parse(&text).unwrap();
    let corrected = recording.histogram(Measure::Corrected, None, |o| o != Outcome::Dropped);
    assert_eq!(parsed.total_count, 50);
    assert!((parsed.max - corrected.max() as f64 / 1e6).abs() < 0.001);

    let out = run_ok(&["--url", &url, "--rate", "20/s", "--duration", "500ms"]).await;
    let table = String::from_utf8_lossy(&out.stdout);
    for line in [
        "corrected",
        "uncorrected",
        "99.900%",
        "Send lag",
        "Conservation: holds",
        "ok 10",
    ] {
        assert!(table.contains(line), "{line:?} missing from\n{table}");
    }
    println!("{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_streams_one_json_line_per_bucket_and_json_then_leaves_it_out() {
    let base = common::serve(Router::new().route("/", get(|| async { "ok" }))).await;
    let file = std::env::temp_dir().join(format!("loadgen-cli-{}.jsonl", std::process::id()));
    let path = file.to_str().unwrap().to_string();
    let out = run_ok(&[
        "--url",
        &base,
        "--rate",
        "40/s",
        "--duration",
        "1s",
        "--bucket",
        "250ms",
        "--json",
        "--series",
        &path,
    ])
    .await;
    let recording: Recording = serde_json::from_slice(&out.stdout).unwrap();
    assert!(recording.buckets.is_empty(), "the file took the series");

    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    let buckets: Vec<Bucket> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(buckets.len() >= 4, "{text}");
    for (i, b) in buckets.iter().enumerate() {
        assert_eq!(b.start.get(), Duration::from_millis(250 * i as u64));
    }
    assert_eq!(buckets.iter().map(|b| b.sent).sum::<u64>(), 40);
    assert_eq!(
        buckets.iter().map(|b| b.completed.ok).sum::<u64>(),
        recording.totals.ok
    );
    assert_eq!(buckets[1].sent, 10);
}

#[test]
fn a_series_file_that_cannot_be_created_is_bad_input() {
    assert_bad_input(
        &[
            "--url",
            "http://127.0.0.1:9/",
            "--rate",
            "1/s",
            "--duration",
            "1s",
            "--series",
            "/nonexistent-dir/series.jsonl",
        ],
        "--series: cannot create /nonexistent-dir/series.jsonl",
    );
}
