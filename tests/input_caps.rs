//! Every file the CLIs read is capped: a device such as /dev/zero and a FIFO are refused at once (never read
//! without end, never waited on), a file over its cap is refused naming the cap and the flag that raises it, and a
//! log line over its cap names the file and the line. Each command runs with a deadline.
//!
//! Needs faultd built with the same profile (`cargo build --release -p faultd`).

use crate::hardening;

use std::path::{Path, PathBuf};
use std::time::Duration;

use hardening::{bin, run_within, Scratch};

/// The most one refusal may take on a loaded machine; a read of /dev/zero or a wait on a FIFO never ends.
const DEADLINE: Duration = Duration::from_secs(20);

const FORMATS: [&str; 6] = [
    "nginx",
    "envoy",
    "haproxy",
    "har",
    "otlp-json",
    "regex:(?P<time>\\S+) (?P<method>\\S+) (?P<path>\\S+)",
];

/// Runs `program args` to its end within [`DEADLINE`]: its exit code and stderr.
fn run(program: &Path, args: &[&str]) -> (Option<i32>, String) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    run_within(program, &args, DEADLINE)
}

fn faultline(args: &[&str]) -> (Option<i32>, String) {
    run(Path::new(env!("CARGO_BIN_EXE_faultline")), args)
}

fn fifo(scratch: &Scratch) -> PathBuf {
    let path = scratch.path("fifo");
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    path
}

fn assert_refused(what: &str, (code, stderr): (Option<i32>, String), says: &[&str]) {
    assert_eq!(code, Some(2), "{what}: {stderr}");
    for s in says {
        assert!(stderr.contains(s), "{what}: expected {s:?} in: {stderr}");
    }
}

#[test]
fn import_refuses_dev_zero_and_a_fifo_in_every_format_without_reading_or_waiting() {
    let scratch = Scratch::new("import-special");
    let fifo = fifo(&scratch);
    for format in FORMATS {
        for (file, kind) in [
            ("/dev/zero", "a device"),
            (fifo.to_str().unwrap(), "a FIFO"),
        ] {
            assert_refused(
                &format!("import --format {format} {file}"),
                faultline(&["import", "--format", format, file]),
                &[file, kind, "not a regular file"],
            );
        }
    }
}

#[test]
fn a_har_or_otlp_file_over_max_input_size_is_refused_naming_the_cap_and_the_flag() {
    let scratch = Scratch::new("import-cap");
    let har = format!(
        "{}/tests/fixtures/import/pricing.har",
        env!("CARGO_MANIFEST_DIR")
    );
    let otlp = scratch.write(
        "spans.json",
        &format!("{{\"resourceSpans\": []}}\n{}\n", " ".repeat(200)),
    );
    for (format, file) in [("har", har.as_str()), ("otlp-json", otlp.to_str().unwrap())] {
        assert_refused(
            &format!("import --format {format} over the cap"),
            faultline(&[
                "import",
                "--format",
                format,
                "--max-input-size",
                "128B",
                file,
            ]),
            &["file too large", file, "128B", "--max-input-size"],
        );
    }
}

#[test]
fn a_log_line_over_max_line_length_is_refused_naming_the_file_the_line_and_the_cap() {
    let scratch = Scratch::new("import-line");
    let short = "2026-10-10T13:55:36Z GET /price/1\n";
    let long = format!("2026-10-10T13:55:37Z GET /price/{}\n", "9".repeat(300));
    let log = scratch.write("access.log", &format!("{short}{short}{long}{short}"));
    let log = log.to_str().unwrap();
    for format in FORMATS
        .iter()
        .filter(|f| !matches!(**f, "har" | "otlp-json"))
    {
        assert_refused(
            &format!("import --format {format} with a long line"),
            faultline(&[
                "import",
                "--format",
                format,
                "--max-line-length",
                "256B",
                log,
            ]),
            &[&format!("{log}:3:"), "256B", "--max-line-length"],
        );
    }
}

#[test]
fn scenarios_and_faultd_configurations_refuse_dev_zero_a_fifo_and_a_file_over_their_cap() {
    let scratch = Scratch::new("validate");
    let fifo = fifo(&scratch);
    let huge = scratch.path("huge.yaml");
    // Sparse: the size is what is refused, before a byte is read.
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(17 << 20)
        .unwrap();
    let huge = huge.to_str().unwrap();
    let cases = [
        (
            "/dev/zero",
            vec!["/dev/zero", "a device, not a regular file"],
        ),
        (fifo.to_str().unwrap(), vec!["a FIFO, not a regular file"]),
        (huge, vec!["file too large", huge, "16MiB"]),
    ];
    for (file, says) in &cases {
        assert_refused(
            &format!("faultline validate {file}"),
            faultline(&["validate", file]),
            says,
        );
        assert_refused(
            &format!("faultline run {file}"),
            faultline(&["run", file]),
            says,
        );
        assert_refused(
            &format!("faultd validate {file}"),
            run(&bin("faultd"), &["validate", file]),
            says,
        );
        assert_refused(
            &format!("faultd --config {file}"),
            run(
                &bin("faultd"),
                &["--config", file, "--listen", "127.0.0.1:0"],
            ),
            says,
        );
    }
}
