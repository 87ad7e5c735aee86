//! One clock: `started_at` in result.json (and the interval log's StartTime) is the wall-clock time of t = 0, the
//! origin every time in the report counts from, however long the SUT took to become ready. A command SUT that
//! sleeps before it listens logs the wall-clock time of each request it receives; each request's logged time minus
//! `started_at` must be its intended send time (its index over the rate) within 20 ms: a loopback round trip and
//! the send lag are a few milliseconds, the SUT's start-up delay is 1.5 s.

use crate::hardening;

use std::time::{Duration, UNIX_EPOCH};

use hardening::*;

const SUT: &str = r#"
import http.server, sys, time
time.sleep(1.5)
log = open(sys.argv[2], "a")
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/work/"):
            log.write("%.3f %s\n" % (time.time() * 1000.0, self.path[len("/work/"):]))
            log.flush()
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"#;

#[test]
fn started_at_is_the_wall_clock_time_of_t_zero_whatever_the_sut_start_up_took() {
    let scratch = Scratch::new("clock");
    let sut = scratch.write("sut.py", SUT);
    let log = scratch.path("requests.log");
    let scenario = scratch.write(
        "scenario.yaml",
        &format!(
            r#"name: clock
duration: 2s
dependency:
  routes:
    pricing: {{ path: /price/* }}
sut:
  command: [ python3, "{}", "{{sut.port}}", "{}" ]
  url: http://127.0.0.1:{{sut.port}}
  ready: /health
  ready_timeout: 20s
load:
  rate: 10/s
  timeout: 1s
  requests: [ {{ get: "/work/{{seq}}" }} ]
"#,
            sut.display(),
            log.display()
        ),
    );
    let report = scratch.path("report");
    let out = run_to_end(&scenario, &report);
    assert_eq!(
        out.status.code(),
        Some(0),
        "python3 must be installed; {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = result_json(&report);
    let started_at = result["started_at"].as_str().unwrap();
    let origin = humantime::parse_rfc3339_weak(started_at)
        .unwrap()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0;
    let lines = std::fs::read_to_string(&log).unwrap();
    let mut seen = 0;
    for line in lines.lines() {
        let (at_ms, seq) = line.split_once(' ').unwrap();
        let at_ms: f64 = at_ms.parse().unwrap();
        let seq: u32 = seq.parse().unwrap();
        let intended = Duration::from_millis(100) * seq;
        let offset = at_ms - origin - intended.as_secs_f64() * 1000.0;
        // started_at has millisecond precision; the request leaves at its intended time plus the send lag.
        assert!(
            (-1.5..20.0).contains(&offset),
            "request {seq} arrived {offset:.1} ms after its intended send time (started_at {started_at})"
        );
        seen += 1;
    }
    assert_eq!(seen, 20, "{lines}");

    // The interval log starts at the same instant.
    let hlog = std::fs::read_to_string(report.join("sut.hlog")).unwrap();
    let start: f64 = hlog
        .lines()
        .find_map(|l| l.strip_prefix("#[StartTime: "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (start * 1000.0 - origin).abs() < 1.5,
        "StartTime {start} vs started_at {started_at}"
    );
}
