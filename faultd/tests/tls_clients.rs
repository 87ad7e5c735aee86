//! TLS on faultd's data plane, judged by clients that share no code with it: Debian's `curl` and `openssl`
//! (`s_client`, and `req`/`x509` to make a client CA), and Python's `ssl` module.
//!
//! The chain verifies against the run's CA, ALPN offers h2 and http/1.1, each handshake fault fails exactly as
//! configured as those clients report it, mTLS refuses a client without a certificate, and a client that sends
//! garbage is closed and counted without disturbing the others.
//!
//! Without curl, openssl or python3 these tests fail, saying what to install; they never skip:
//! `apt-get install -y curl openssl python3`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// A scratch folder for one test's files (the CA, client keys), under the system's temporary folder.
fn scratch(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "faultd-tls-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Fails the test with the install command when `tool` is missing.
async fn require(tool: &str, probe: &[&str]) {
    let ok = Command::new(tool)
        .args(probe)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "`{tool}` is required by the TLS client tests and was not found or does not run: \
         install it with `apt-get install -y curl openssl python3`"
    );
}

/// What a client printed and how it exited.
struct Ran {
    code: i32,
    text: String,
}

async fn run(tool: &str, args: &[&str]) -> Ran {
    run_with_input(tool, args, None).await
}

/// Runs `tool`, writing `input` to its standard input (then closing it), or with no input.
async fn run_with_input(tool: &str, args: &[&str], input: Option<&[u8]>) -> Ran {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {tool}: {e} (apt-get install -y curl openssl python3)")
        });
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(input).await.unwrap();
    }
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{tool} {args:?} did not finish within 30 s"))
        .unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        text: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A faultd with `tls` as its `tls:` section and one catch-all route; the run's CA is written to `dir/ca.pem`.
async fn faultd(tls: &str, dir: &Path) -> (faultd::Faultd, String) {
    require("curl", &["--version"]).await;
    require("openssl", &["version"]).await;
    let config = faultd::Config::from_yaml(
        &format!("seed: 3\nroutes:\n  any: {{ path: /** }}\ntls: {tls}\n"),
        "tls-test.yaml",
    )
    .unwrap();
    let f = faultd::start(
        config,
        faultd::Options {
            ca_out: Some(dir.join("ca.pem")),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    f.start_schedule(tokio::time::Instant::now());
    let port = f.data_addr().port().to_string();
    (f, port)
}

/// `curl` over HTTP/1.1 (`extra` may ask for `--http2` instead: the later flag wins).
async fn curl(dir: &Path, url: &str, extra: &[&str]) -> Ran {
    let ca = dir.join("ca.pem");
    let mut args = vec![
        "-sS",
        "--http1.1",
        "--max-time",
        "20",
        "--cacert",
        ca.to_str().unwrap(),
        "-o",
        "/dev/null",
        "-w",
        "status=%{http_code} connect=%{time_connect} tls=%{time_appconnect}\n",
    ];
    args.extend_from_slice(extra);
    args.push(url);
    run("curl", &args).await
}

async fn s_client(dir: &Path, port: &str, extra: &[&str]) -> Ran {
    let ca = dir.join("ca.pem");
    let connect = format!("127.0.0.1:{port}");
    let mut args = vec![
        "s_client",
        "-connect",
        connect.as_str(),
        "-CAfile",
        ca.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run("openssl", &args).await
}

fn handshakes(f: &faultd::Faultd, outcome: &str) -> u64 {
    f.tls_recording()
        .unwrap()
        .totals
        .handshakes
        .get(outcome)
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn the_chain_verifies_against_the_run_ca_for_every_loopback_name() {
    let dir = scratch("chain");
    let (f, port) = faultd("{}", &dir).await;
    for host in ["127.0.0.1", "localhost"] {
        let r = curl(&dir, &format!("https://{host}:{port}/x"), &[]).await;
        assert_eq!(r.code, 0, "curl to {host}: {}", r.text);
        assert!(r.text.contains("status=200"), "{}", r.text);
    }
    let r = s_client(
        &dir,
        &port,
        &["-verify_return_error", "-verify_ip", "127.0.0.1"],
    )
    .await;
    assert!(r.text.contains("Verify return code: 0 (ok)"), "{}", r.text);
    // Python's ssl module with its default context: hostname checking on, the run's CA as the only root.
    require("python3", &["--version"]).await;
    let script = format!(
        "import socket, ssl\n\
         ctx = ssl.create_default_context(cafile={ca:?})\n\
         with socket.create_connection(('localhost', {port})) as s:\n\
         \x20   with ctx.wrap_socket(s, server_hostname='localhost') as t:\n\
         \x20       t.sendall(b'GET /x HTTP/1.1\\r\\nhost: localhost\\r\\nconnection: close\\r\\n\\r\\n')\n\
         \x20       print(t.version(), t.recv(64).split(b'\\r\\n')[0].decode())\n",
        ca = dir.join("ca.pem").to_str().unwrap()
    );
    let r = run("python3", &["-c", &script]).await;
    assert_eq!(r.code, 0, "{}", r.text);
    assert!(r.text.contains("HTTP/1.1 200"), "{}", r.text);
    // No client was told to trust anything but the file: without it, curl refuses the certificate.
    let r = run(
        "curl",
        &[
            "-sS",
            "--max-time",
            "20",
            &format!("https://127.0.0.1:{port}/x"),
        ],
    )
    .await;
    assert_eq!(r.code, 60, "curl without --cacert: {}", r.text);
    assert_eq!(handshakes(&f, "ok") + handshakes(&f, "resumed"), 4);
    f.shutdown().await;
}

#[tokio::test]
async fn alpn_negotiates_h2_and_http_1_1() {
    let dir = scratch("alpn");
    let (f, port) = faultd("{}", &dir).await;
    for proto in ["h2", "http/1.1"] {
        let r = s_client(&dir, &port, &["-alpn", proto]).await;
        assert!(
            r.text.contains(&format!("ALPN protocol: {proto}")),
            "{proto}: {}",
            r.text
        );
    }
    f.shutdown().await;
}

#[tokio::test]
async fn curl_negotiates_h2_over_tls_and_gets_the_answer_over_http2() {
    let dir = scratch("h2");
    let (f, port) = faultd("{}", &dir).await;
    let url = format!("https://localhost:{port}/x");
    let answer = "status=%{http_code} version=%{http_version}\n";
    let r = curl(&dir, &url, &["--http2", "-w", answer]).await;
    assert_eq!(r.code, 0, "{}", r.text);
    assert!(r.text.contains("status=200 version=2"), "{}", r.text);
    // The same port still serves HTTP/1.1 to a client that offers only it.
    let r = curl(&dir, &url, &["-w", answer]).await;
    assert!(r.text.contains("status=200 version=1.1"), "{}", r.text);
    let http2: u64 = f
        .recording()
        .connections
        .iter()
        .map(|c| c.http2_opened)
        .sum();
    assert_eq!(http2, 1);
    f.shutdown().await;
}

#[tokio::test]
async fn an_abrupt_goaway_over_tls_reaches_the_http2_client_inside_tls() {
    let dir = scratch("goaway");
    let config = faultd::Config::from_yaml(
        "routes:\n  r: { path: /r, goaway: { after: 1, mode: abrupt, code: ENHANCE_YOUR_CALM } }\ntls: {}\n",
        "tls-goaway.yaml",
    )
    .unwrap();
    require("curl", &["--version"]).await;
    let f = faultd::start(
        config,
        faultd::Options {
            ca_out: Some(dir.join("ca.pem")),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    f.start_schedule(tokio::time::Instant::now());
    let url = format!("https://localhost:{}/r", f.data_addr().port());
    let r = curl(&dir, &url, &["--http2", "-v"]).await;
    // curl reads the GOAWAY (ENHANCE_YOUR_CALM = 11) as HTTP/2, inside TLS, and loses its stream.
    assert_ne!(r.code, 0, "{}", r.text);
    assert!(r.text.contains("GOAWAY, error=11"), "{}", r.text);
    f.shutdown().await;
}

#[tokio::test]
async fn a_failure_fault_refuses_the_handshake_with_the_chosen_alert() {
    let dir = scratch("alert");
    let (f, port) = faultd(
        "{ faults: { failure: { share: 100%, alert: internal_error } } }",
        &dir,
    )
    .await;
    let r = curl(&dir, &format!("https://127.0.0.1:{port}/x"), &[]).await;
    assert_eq!(r.code, 35, "curl: {}", r.text);
    assert!(r.text.contains("internal error"), "{}", r.text);
    let r = s_client(&dir, &port, &[]).await;
    assert!(r.text.contains("alert internal error"), "{}", r.text);
    assert_eq!(handshakes(&f, "alert"), 2);
    f.shutdown().await;
}

#[tokio::test]
async fn an_expired_certificate_is_reported_as_expired() {
    let dir = scratch("expired");
    let (f, port) = faultd("{ faults: { expired: 100% } }", &dir).await;
    let r = curl(&dir, &format!("https://127.0.0.1:{port}/x"), &[]).await;
    assert_eq!(r.code, 60, "curl: {}", r.text);
    assert!(r.text.contains("certificate has expired"), "{}", r.text);
    let r = s_client(&dir, &port, &[]).await;
    assert!(
        r.text
            .contains("Verify return code: 10 (certificate has expired)"),
        "{}",
        r.text
    );
    assert_eq!(handshakes(&f, "expired"), 2);
    f.shutdown().await;
}

#[tokio::test]
async fn a_certificate_for_another_name_is_a_hostname_mismatch() {
    let dir = scratch("wrong-name");
    let (f, port) = faultd("{ faults: { wrong_name: 100% } }", &dir).await;
    let r = curl(&dir, &format!("https://localhost:{port}/x"), &[]).await;
    assert_eq!(r.code, 60, "curl: {}", r.text);
    assert!(r.text.contains("localhost"), "{}", r.text);
    let r = s_client(&dir, &port, &["-verify_hostname", "localhost"]).await;
    assert!(
        r.text
            .contains("Verify return code: 62 (hostname mismatch)"),
        "{}",
        r.text
    );
    assert_eq!(handshakes(&f, "wrong_name"), 2);
    f.shutdown().await;
}

#[tokio::test]
async fn a_certificate_from_an_untrusted_issuer_is_an_unknown_ca() {
    let dir = scratch("untrusted");
    let (f, port) = faultd("{ faults: { untrusted: 100% } }", &dir).await;
    let r = curl(&dir, &format!("https://127.0.0.1:{port}/x"), &[]).await;
    assert_eq!(r.code, 60, "curl: {}", r.text);
    assert!(r.text.contains("unable to get local issuer"), "{}", r.text);
    let r = s_client(&dir, &port, &[]).await;
    assert!(
        r.text
            .contains("verify error:num=20:unable to get local issuer certificate"),
        "{}",
        r.text
    );
    assert_eq!(handshakes(&f, "untrusted"), 2);
    f.shutdown().await;
}

#[tokio::test]
async fn a_truncated_connection_ends_without_close_notify_after_the_request() {
    let dir = scratch("truncate");
    let (f, port) = faultd("{ faults: { truncate: 100% } }", &dir).await;
    // curl ignores a missing close_notify by design, so to it the request simply got no answer.
    let r = curl(&dir, &format!("https://127.0.0.1:{port}/x"), &[]).await;
    assert_eq!(r.code, 52, "curl: {}", r.text);
    assert!(r.text.contains("Empty reply"), "{}", r.text);
    // openssl tells a truncation from a clean close: EOF with no close_notify before it.
    let ca = dir.join("ca.pem");
    let connect = format!("127.0.0.1:{port}");
    let r = run_with_input(
        "openssl",
        &[
            "s_client",
            "-quiet",
            "-connect",
            &connect,
            "-CAfile",
            ca.to_str().unwrap(),
        ],
        Some(b"GET /x HTTP/1.1\r\nhost: x\r\n\r\n"),
    )
    .await;
    assert!(
        r.text.contains("unexpected eof while reading"),
        "{}",
        r.text
    );
    assert_eq!(handshakes(&f, "truncated"), 2);
    f.shutdown().await;
}

#[tokio::test]
async fn a_handshake_delay_holds_the_answer_to_the_hello() {
    let dir = scratch("delay");
    let (f, port) = faultd("{ faults: { delay: { fixed: 400ms } } }", &dir).await;
    let r = curl(&dir, &format!("https://127.0.0.1:{port}/x"), &[]).await;
    assert_eq!(r.code, 0, "curl: {}", r.text);
    let field = |name: &str| -> f64 {
        r.text
            .split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {}", r.text))
    };
    let tls = field("tls=") - field("connect=");
    assert!(
        (0.4..2.0).contains(&tls),
        "handshake took {tls} s: {}",
        r.text
    );
    let recording = f.tls_recording().unwrap();
    assert_eq!(recording.totals.delayed, 1);
    f.shutdown().await;
}

#[tokio::test]
async fn mtls_refuses_a_client_without_a_certificate_and_serves_one_with() {
    let dir = scratch("mtls");
    require("openssl", &["version"]).await;
    let p = |f: &str| dir.join(f).to_str().unwrap().to_string();
    // A client CA and a client certificate it signs, made with openssl alone (an X.509 v3 certificate for client
    // authentication: webpki refuses v1 certificates).
    std::fs::write(
        dir.join("client.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    for args in [
        vec![
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=test clients",
            "-keyout",
            &p("client-ca.key"),
            "-out",
            &p("client-ca.pem"),
        ],
        vec![
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=client",
            "-keyout",
            &p("client.key"),
            "-out",
            &p("client.csr"),
        ],
        vec![
            "x509",
            "-req",
            "-in",
            &p("client.csr"),
            "-CA",
            &p("client-ca.pem"),
            "-CAkey",
            &p("client-ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &p("client.ext"),
            "-out",
            &p("client.pem"),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(|s| &**s).collect();
        let r = run("openssl", &args).await;
        assert_eq!(r.code, 0, "openssl {args:?}: {}", r.text);
    }
    let (f, port) = faultd(&format!("{{ client_ca: {:?} }}", p("client-ca.pem")), &dir).await;
    let url = format!("https://127.0.0.1:{port}/x");
    let r = curl(&dir, &url, &[]).await;
    assert_ne!(r.code, 0, "curl without a client certificate: {}", r.text);
    assert!(r.text.contains("certificate required"), "{}", r.text);
    let (cert, key) = (p("client.pem"), p("client.key"));
    let r = curl(&dir, &url, &["--cert", &cert, "--key", &key]).await;
    assert_eq!(r.code, 0, "curl with a client certificate: {}", r.text);
    assert!(r.text.contains("status=200"), "{}", r.text);
    assert_eq!(handshakes(&f, "client_refused"), 1);
    f.shutdown().await;
}

#[tokio::test]
async fn garbage_instead_of_a_hello_is_closed_and_counted_and_disturbs_nothing() {
    let dir = scratch("garbage");
    let (f, port) = faultd("{}", &dir).await;
    let addr = f.data_addr();
    let mut held = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut garbage = tokio::net::TcpStream::connect(addr).await.unwrap();
    garbage
        .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), garbage.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "faultd kept the garbage connection open");
    // A proper client on another connection is served, before and after.
    let r = curl(&dir, &format!("https://127.0.0.1:{port}/x"), &[]).await;
    assert!(r.text.contains("status=200"), "{}", r.text);
    assert_eq!(handshakes(&f, "not_tls"), 1);
    held.write_all(b"\x16").await.unwrap();
    drop(held);
    f.shutdown().await;
}
