//! A dependency reached over TLS, end to end through `faultline run`: the embedded faultd with `tls: {}` mints the
//! run's CA, `{faultd.url}` is `https://`, and a command SUT (Python's `ssl` module) that trusts only
//! `{faultd.ca}` calls it. The report folder keeps the CA as `ca.pem`, named in result.json.

use crate::hardening;

use hardening::*;

/// A SUT in Python: /health answers; /work/N calls the dependency over HTTPS, trusting only the CA file it was
/// given, and answers 200 when the dependency did, 502 otherwise.
const SUT: &str = r#"
import ssl, sys, urllib.request
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

port, dependency, ca, record = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
with open(record, "w") as f:
    f.write(ca)
if not dependency.startswith("https://"):
    sys.exit("the dependency's URL is not https: " + dependency)
context = ssl.create_default_context(cafile=ca)

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        status = 200
        if self.path.startswith("/work/"):
            try:
                with urllib.request.urlopen(dependency + "/price/1", context=context, timeout=2) as r:
                    status = 200 if r.status == 200 else 502
            except Exception as e:
                print("dependency call failed:", e, file=sys.stderr, flush=True)
                status = 502
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"#;

#[test]
fn a_command_sut_trusting_the_run_ca_calls_faultd_over_https_and_the_report_keeps_the_ca() {
    let scratch = Scratch::new("tls-dependency");
    let sut = scratch.write("sut.py", SUT);
    let scenario = scratch.write(
        "scenario.yaml",
        &format!(
            r#"name: tls-dependency
duration: 1s
seed: 3
dependency:
  routes:
    pricing: {{ path: /price/*, latency: {{ fixed: 2ms }} }}
  tls: {{}}
sut:
  command: [ python3, "{}", "{{sut.port}}", "{{faultd.url}}", "{{faultd.ca}}", "{}" ]
  url: http://127.0.0.1:{{sut.port}}
  ready: /health
  ready_timeout: 20s
load:
  rate: 20/s
  timeout: 3s
  requests: [ {{ get: "/work/{{seq}}" }} ]
"#,
            sut.display(),
            scratch.path("ca-path.txt").display()
        ),
    );
    let report = scratch.path("report");
    let out = run_to_end(&scenario, &report);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "python3 must be installed (apt-get install -y python3); {stderr}"
    );
    let result = result_json(&report);
    let sent = result["totals"]["sent"].as_u64().unwrap();
    assert_eq!(sent, 20, "20/s for 1 s");
    assert_eq!(
        result["totals"]["outcomes"]["ok"].as_u64().unwrap_or(0),
        sent,
        "every call reached the dependency over TLS: {} {stderr}",
        result["totals"]
    );
    assert_eq!(result["dependency"]["pricing"]["arrivals"], sent);
    assert_eq!(result["ca"], "ca.pem");
    let ca = std::fs::read_to_string(report.join("ca.pem")).unwrap();
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    // The SUT was given a file of the run's own, removed when the run ended: nothing stays behind.
    let given = std::fs::read_to_string(scratch.path("ca-path.txt")).unwrap();
    assert!(given.ends_with("ca.pem"), "{given}");
    assert!(
        !std::path::Path::new(&given).exists(),
        "{given} is left behind"
    );
}
