//! Fuzzes `faultline import`'s format readers and everything after them (the timeline, the phases, the scenario
//! writer) and loadgen's reader of timetable lines with arbitrary records: the first byte picks the
//! format (nginx combined, nginx with a timed `log_format`, Envoy, HAProxy, HAR, OTLP/JSON, a `regex:` pattern)
//! and, by its eighth bit, a phase per found phase or per bucket; the rest is the record. It must never panic; a record it accepts must give a scenario that validates, since
//! what import writes is what `faultline run` accepts.
//!
//! Not for the files around a record (reading from disk, the progress line): `import_text` reads from memory.

#![no_main]

use faultline::import::{import_text, Format, ImportOptions, PhaseMode};
use faultline::scenario::{Overrides, Scenario};
use libfuzzer_sys::fuzz_target;

const TIMED: &str = r#"$remote_addr - [$time_local] $msec "$request" $status $request_time "$upstream_addr" "$upstream_response_time" "$upstream_status""#;
const CUSTOM: &str = r"^ts=(?P<time>\S+) method=(?P<method>\S+) path=(?P<path>\S+) status=(?P<status>\d+) took=(?P<duration>\S+) dep=(?P<upstream>\S+) dep_took=(?P<upstream_duration>\S+)$";

fuzz_target!(|data: &[u8]| {
    let Some((&pick, record)) = data.split_first() else {
        return;
    };
    let (format, log_format) = match pick % 7 {
        0 => (Format::Nginx, None),
        1 => (Format::Nginx, Some(TIMED.to_string())),
        2 => (Format::Envoy, None),
        3 => (Format::Haproxy, None),
        4 => (Format::Har, None),
        5 => (Format::OtlpJson, None),
        _ => (Format::Regex(CUSTOM.to_string()), None),
    };
    let options = ImportOptions {
        format,
        log_format,
        // Fine buckets, so that a few seconds of record make many phases.
        bucket: 0.1,
        phases: if pick & 0x80 == 0 {
            PhaseMode::Found
        } else {
            PhaseMode::Buckets
        },
        ..ImportOptions::default()
    };
    for line in String::from_utf8_lossy(record).lines() {
        let _ = loadgen::replay::parse_line(line);
    }
    if let Ok(imported) = import_text("fuzz.log", record, &options) {
        if let Err(e) = Scenario::parse(&imported.yaml, "fuzz.yaml", &Overrides::default()) {
            panic!(
                "import wrote a scenario that does not validate: {e}\n{}",
                imported.yaml
            );
        }
    }
});
