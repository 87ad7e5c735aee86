//! The `tls:` section and the TLS flags as a person meets them: a certificate or key file that is missing,
//! unreadable or does not match is refused with the file and the field named, exit code 2; so are handshake
//! faults for a phase that does not exist, or certificate faults that need the run's CA when files are given.
//!
//! The certificates are made with `openssl` (`apt-get install -y openssl`); without it these tests fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("faultd-tls-config-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl").args(args).output().unwrap_or_else(|e| {
        panic!("`openssl` is required by these tests: {e}; install it with `apt-get install -y openssl`")
    });
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A self-signed certificate for 127.0.0.1 and its key, as `name.pem` and `name.key`.
fn self_signed(dir: &Path, name: &str) -> (String, String) {
    let cert = dir
        .join(format!("{name}.pem"))
        .to_str()
        .unwrap()
        .to_string();
    let key = dir
        .join(format!("{name}.key"))
        .to_str()
        .unwrap()
        .to_string();
    openssl(&[
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
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-keyout",
        &key,
        "-out",
        &cert,
    ]);
    (cert, key)
}

fn faultd(dir: &Path, config: &str, args: &[&str]) -> Output {
    let file = dir.join("faultd.yaml");
    std::fs::write(&file, config).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_faultd"));
    command
        .args([
            "--config",
            file.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .args(args);
    // A faultd that starts would serve until stopped: every case here must be refused before it listens.
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let id = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    for _ in 0..200 {
        if waiter.is_finished() {
            return waiter.join().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = Command::new("kill").arg(id.to_string()).status();
    panic!("faultd {args:?} started instead of refusing the configuration");
}

fn refused(out: &Output, needles: &[&str]) {
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    for n in needles {
        assert!(text.contains(n), "{n:?} not in: {text}");
    }
}

const ROUTES: &str = "routes:\n  any: { path: /** }\n";

#[test]
fn a_missing_certificate_file_is_refused_naming_the_file_and_field() {
    let dir = scratch("missing");
    let out = faultd(
        &dir,
        ROUTES,
        &[
            "--tls-cert",
            "/nonexistent/cert.pem",
            "--tls-key",
            "/nonexistent/key.pem",
        ],
    );
    refused(&out, &["tls.cert", "/nonexistent/cert.pem", "cannot read"]);
}

#[test]
fn a_key_that_does_not_match_the_certificate_is_refused() {
    let dir = scratch("mismatch");
    let (cert, _) = self_signed(&dir, "one");
    let (_, other_key) = self_signed(&dir, "two");
    let out = faultd(
        &dir,
        &format!("{ROUTES}tls: {{ cert: {cert:?}, key: {other_key:?} }}\n"),
        &[],
    );
    refused(&out, &["tls.key", "two.key", "does not match"]);
}

#[test]
fn a_file_that_is_not_pem_is_refused() {
    let dir = scratch("not-pem");
    let (cert, _) = self_signed(&dir, "one");
    let garbage = dir.join("garbage.key");
    std::fs::write(&garbage, "not a key\n").unwrap();
    let out = faultd(
        &dir,
        ROUTES,
        &["--tls-cert", &cert, "--tls-key", garbage.to_str().unwrap()],
    );
    refused(&out, &["tls.key", "garbage.key", "no PEM private key"]);
}

#[test]
fn handshake_faults_for_an_unknown_phase_or_needing_the_run_ca_are_refused() {
    let dir = scratch("faults");
    let out = faultd(
        &dir,
        &format!(
            "{ROUTES}phases:\n  - {{ name: healthy, at: 0s }}\ntls: {{ phases: {{ brownout: {{ expired: 5% }} }} }}\n"
        ),
        &[],
    );
    refused(&out, &["tls.phases.brownout", "no phase named"]);
    let (cert, key) = self_signed(&dir, "one");
    let out = faultd(
        &dir,
        &format!("{ROUTES}tls: {{ cert: {cert:?}, key: {key:?}, faults: {{ expired: 5% }} }}\n"),
        &[],
    );
    refused(&out, &["tls.faults.expired", "minted CA"]);
}

#[test]
fn ca_out_without_tls_is_refused() {
    let dir = scratch("ca-out");
    let out = faultd(&dir, ROUTES, &["--ca-out", "/tmp/never.pem"]);
    refused(&out, &["--ca-out", "no TLS"]);
}
