//! Fuzzes each of `faultline import`'s format readers alone, one reader per run: the environment variable
//! `IMPORT_READER` names it (`nginx`, `nginx-timed`, `envoy`, `haproxy`, `har`, `otlp-json`, `regex`; `fuzz/run.sh`
//! runs each for its own 1,000,000 executions). A reader must never panic, whatever the record, and never count
//! more bad lines than it read.
//!
//! Not for what comes after the readers (phases, the scenario writer): `import_formats` drives the whole import.

#![no_main]

use std::sync::OnceLock;

use faultline::import::{read_text, Format, ImportOptions};
use libfuzzer_sys::fuzz_target;

const TIMED: &str = r#"$remote_addr - [$time_local] $msec "$request" $status $request_time "$upstream_addr" "$upstream_response_time" "$upstream_status""#;
const CUSTOM: &str = r"^ts=(?P<time>\S+) method=(?P<method>\S+) path=(?P<path>\S+) status=(?P<status>\d+) took=(?P<duration>\S+) dep=(?P<upstream>\S+) dep_took=(?P<upstream_duration>\S+)$";

fn options() -> &'static ImportOptions {
    static OPTIONS: OnceLock<ImportOptions> = OnceLock::new();
    OPTIONS.get_or_init(|| {
        let reader = std::env::var("IMPORT_READER").unwrap_or_else(|_| {
            panic!("set IMPORT_READER to nginx, nginx-timed, envoy, haproxy, har, otlp-json or regex")
        });
        let (format, log_format) = match reader.as_str() {
            "nginx" => (Format::Nginx, None),
            "nginx-timed" => (Format::Nginx, Some(TIMED.to_string())),
            "envoy" => (Format::Envoy, None),
            "haproxy" => (Format::Haproxy, None),
            "har" => (Format::Har, None),
            "otlp-json" => (Format::OtlpJson, None),
            "regex" => (Format::Regex(CUSTOM.to_string()), None),
            other => panic!("IMPORT_READER={other}: not a reader this target knows"),
        };
        ImportOptions {
            format,
            log_format,
            // Wide buckets: the readers are under test, and a record whose times span hours would otherwise
            // spend its execution allocating the timeline's buckets.
            bucket: 60.0,
            ..ImportOptions::default()
        }
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok(read) = read_text("fuzz.log", data, options()) {
        assert!(
            read.bad <= read.lines,
            "{} bad of {} lines",
            read.bad,
            read.lines
        );
    }
});
