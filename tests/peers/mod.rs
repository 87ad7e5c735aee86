//! Real servers written by others (Prometheus, the Pushgateway), started by a test from their Debian packages on
//! a free loopback port with a scratch folder of their own, and killed when dropped, whatever the test's outcome.
//! A server that is not installed fails the test with the package to install.
//!
//! Not for the components of faultline itself (tests/hardening starts those).

#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::hardening::{http, result_json, Running, Scratch};

/// How long a server may take to answer its readiness check.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// A loopback port nobody listens on at the time of asking, for a process to bind later: from below the
/// ephemeral range, so no connection or `bind(0)` of another test takes it in between (`faultline_units::port`).
pub fn free_port() -> u16 {
    faultline_units::port::handed_out().expect("a free loopback port")
}

/// The path of `binary`, or a failure that says which Debian package provides it.
pub fn installed(binary: &str, package: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(binary))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{binary} is not installed: apt-get install -y {package}"))
}

/// A running server: its port and its scratch folder (the process is killed before the folder is removed).
pub struct Peer {
    pub port: u16,
    process: Running,
    pub dir: Scratch,
}

impl Peer {
    /// Starts `binary` (from Debian's `package`) with the arguments `args` makes from its scratch folder and port,
    /// and waits until `GET ready_path` answers 200. A port is free when asked, not when the server binds it:
    /// tests that start servers side by side can take it in between, so a server that exits saying its address is
    /// in use starts again on another port (three tries).
    pub fn start(
        binary: &str,
        package: &str,
        args: impl Fn(&Scratch, u16) -> Vec<OsString>,
        ready_path: &str,
    ) -> Peer {
        const ATTEMPTS: u32 = 3;
        let path = installed(binary, package);
        for attempt in 1..=ATTEMPTS {
            // Tests of one file run in one process at once: each server gets a folder of its own.
            static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = Scratch::new(&format!("{binary}-{n}"));
            let port = free_port();
            let log = std::fs::File::create(dir.path("log")).unwrap();
            let process = Running(
                Command::new(&path)
                    .args(args(&dir, port))
                    .current_dir(&dir.0)
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().unwrap())
                    .stderr(log)
                    .spawn()
                    .unwrap_or_else(|e| panic!("cannot start {}: {e}", path.display())),
            );
            let mut peer = Peer { port, process, dir };
            let end = Instant::now() + READY_WITHIN;
            loop {
                if let Some(status) = peer.process.0.try_wait().unwrap() {
                    let log = peer.log();
                    if attempt < ATTEMPTS && log.to_lowercase().contains("already in use") {
                        break;
                    }
                    panic!("{binary} exited ({status}) before it was ready:\n{log}");
                }
                if let Some((200, _)) = peer.get(ready_path) {
                    return peer;
                }
                assert!(
                    Instant::now() < end,
                    "{binary} was not ready within {READY_WITHIN:?}:\n{}",
                    peer.log()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// `GET path` on the server: status and body.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http(
            "GET",
            &format!("http://127.0.0.1:{}{path}", self.port),
            None,
            Duration::from_secs(5),
        )
    }

    /// What the server printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path("log")).unwrap_or_default()
    }
}

impl Drop for Peer {
    /// Asks the server to stop (SIGTERM) and waits for it, so that it stops its own children (nginx's master takes
    /// its workers down with it; killed outright, it would leave them running); kills it after 5 s.
    fn drop(&mut self) {
        let pid = self.process.pid();
        // SAFETY: kill only sends a signal to the server this peer started.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.process.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// nginx's arguments to run unprivileged from `dir`: one worker with `worker_connections`, its pid, logs and
/// temporary files in the scratch folder, and `http` (the directives of its `http` block) written there as
/// nginx.conf.
pub fn nginx_args(dir: &Scratch, worker_connections: u32, http: &str) -> Vec<OsString> {
    let d = dir.0.display();
    let conf = format!(
        "daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         user nobody nogroup;\nevents {{ worker_connections {worker_connections}; }}\nhttp {{\n\
         client_body_temp_path {d}/body;\nproxy_temp_path {d}/proxy;\nfastcgi_temp_path {d}/fastcgi;\n\
         uwsgi_temp_path {d}/uwsgi;\nscgi_temp_path {d}/scgi;\n{http}}}\n"
    );
    std::fs::write(dir.path("nginx.conf"), conf).unwrap();
    vec![
        OsString::from("-p"),
        dir.0.clone().into(),
        OsString::from("-c"),
        dir.path("nginx.conf").into(),
        OsString::from("-e"),
        dir.path("early.log").into(),
    ]
}

/// `text` as a URL query value: everything but the unreserved characters percent-encoded.
pub fn query_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `faultline run tests/fixtures/prometheus-breaker.yaml --time-scale 0.5 --report-dir REPORT EXTRA...` to its
/// end: exit code 1 (its `too-fast` expectation fails on purpose, so a failed status is among the series), nothing
/// left unexported; returns result.json.
pub fn run_breaker_fixture(report: &Path, extra: &[String]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "tests/fixtures/prometheus-breaker.yaml"])
        .args(["--time-scale", "0.5"])
        .arg("--report-dir")
        .arg(report)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("not exported"), "{stdout}");
    result_json(report)
}
