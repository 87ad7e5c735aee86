//! What the hardening tests (interrupts, a misbehaving SUT, overload) and the tests against real monitoring tools
//! share: the workspace's binaries, scratch folders, a minimal HTTP/1.1 client on std sockets, process-group
//! inspection through /proc, signals, and the Python the own-service tests need.
//!
//! Not a test itself, and not for the scenario library's tests (tests/scenario_library.rs has its own helpers).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A binary of the workspace built with the same profile as `faultline` (`cargo test --workspace` builds them all;
/// for `cargo test -p faultline`, run `cargo build --release -p faultd` first).
pub fn bin(name: &str) -> PathBuf {
    let faultline = PathBuf::from(env!("CARGO_BIN_EXE_faultline"));
    let path = faultline.with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --release -p {name}` (the hardening tests run it as a SUT)",
        path.display()
    );
    path
}

/// Runs `program args` with `input` on its standard input, to its end. A program that refuses before reading its
/// input closes the pipe first: that is no failure here.
pub fn with_stdin(program: &Path, args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(input);
    child.wait_with_output().unwrap()
}

/// Runs `program args` to its end, killing it if it has not ended within `limit` (and failing): its exit code
/// and what it printed on stderr.
pub fn run_within(program: &Path, args: &[String], limit: Duration) -> (Option<i32>, String) {
    let mut child = Running(
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let code = child.wait_for_exit(limit);
    (code, child.stderr())
}

/// A scratch folder under the system temp dir, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("faultline-hardening-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    pub fn write(&self, file: &str, text: &str) -> PathBuf {
        let p = self.path(file);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed (and reaped) when dropped, so that a failing assertion leaves nothing running.
pub struct Running(pub Child);

impl Running {
    pub fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// Waits for the exit (at most `limit`), returning the exit code (None: killed by a signal).
    pub fn wait_for_exit(&mut self, limit: Duration) -> Option<i32> {
        let end = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < end,
                "the process did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything it printed on stderr (after it exited).
    pub fn stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(e) = self.0.stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `faultline run SCENARIO --report-dir DIR`, started in the background with stdout and stderr captured to files
/// (pipes could fill up and block it).
pub fn start_run(scenario: &Path, report_dir: &Path, scratch: &Scratch) -> Running {
    let out = std::fs::File::create(scratch.path("faultline.stdout")).unwrap();
    let err = std::fs::File::create(scratch.path("faultline.stderr")).unwrap();
    Running(
        Command::new(env!("CARGO_BIN_EXE_faultline"))
            .arg("run")
            .arg(scenario)
            .arg("--report-dir")
            .arg(report_dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap(),
    )
}

/// `faultline run` to its end.
pub fn run_to_end(scenario: &Path, report_dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_faultline"))
        .arg("run")
        .arg(scenario)
        .arg("--report-dir")
        .arg(report_dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The run's result.json.
pub fn result_json(report_dir: &Path) -> Value {
    let text = std::fs::read_to_string(report_dir.join("result.json"))
        .unwrap_or_else(|e| panic!("{}/result.json: {e}", report_dir.display()));
    serde_json::from_str(&text).unwrap()
}

/// Polls `done` every 10 ms until it holds; panics with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < end,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `signal` to `pid`.
pub fn signal(pid: i32, signal: i32) {
    // SAFETY: kill only sends a signal to a process this test started.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
}

/// The processes (pid, state letter) in process group `pgid` that are not zombies, read from /proc.
pub fn live_group_members(pgid: i32) -> Vec<(i32, char)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so split after the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(state), Some(pgrp)) = (fields.first(), fields.get(2)) else {
            continue;
        };
        let state = state.chars().next().unwrap_or('?');
        if pgrp.parse::<i32>() == Ok(pgid) && state != 'Z' && state != 'X' {
            out.push((pid, state));
        }
    }
    out
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|s| s != "Z" && s != "X"),
        Err(_) => false,
    }
}

/// Reads a pid a SUT script wrote (`echo $$ > FILE`), waiting for it.
pub fn read_pid(file: &Path, limit: Duration) -> i32 {
    let mut pid = 0;
    wait_until(limit, &format!("{}", file.display()), || {
        pid = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        pid > 0
    });
    pid
}

/// A minimal HTTP/1.1 exchange on a fresh connection: (status, body). `None` when the connection fails or the
/// answer is not HTTP.
pub fn http(
    method: &str,
    url: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Option<(u16, String)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr: std::net::SocketAddr = authority.parse().ok()?;
    assert!(addr.ip().is_loopback(), "tests only talk to loopback");
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {authority}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).ok()?;
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Some((
        status,
        if chunked {
            dechunk(body)?
        } else {
            body.to_string()
        },
    ))
}

/// The body of a chunked answer, its chunks joined.
fn dechunk(mut rest: &str) -> Option<String> {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// A faultd binary started as its own process, its addresses read from what it prints.
pub struct FaultdProcess {
    pub process: Running,
    pub data: String,
    pub control: String,
}

impl FaultdProcess {
    /// `faultd --config FILE --listen 127.0.0.1:0 --control 127.0.0.1:0 EXTRA...`.
    pub fn start(config: &Path, extra: &[&str]) -> FaultdProcess {
        let mut args = vec!["--config", config.to_str().unwrap()];
        args.extend_from_slice(extra);
        FaultdProcess::start_with(&args)
    }

    /// `faultd --listen 127.0.0.1:0 --control 127.0.0.1:0 ARGS...` (no configuration unless ARGS give one).
    pub fn start_with(args: &[&str]) -> FaultdProcess {
        let mut child = Command::new(bin("faultd"))
            .args(["--listen", "127.0.0.1:0", "--control", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let process = Running(child);
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
        let (mut data, mut control) = (String::new(), String::new());
        while data.is_empty() || control.is_empty() {
            let line = lines.next().expect("faultd prints its addresses").unwrap();
            let url = line
                .split_whitespace()
                .find(|w| w.starts_with("http://"))
                .unwrap_or_default()
                .to_string();
            if line.contains("data plane on") {
                data = url;
            } else if line.contains("control API on") {
                control = url;
            }
        }
        // Keep draining its stderr so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        FaultdProcess {
            process,
            data,
            control,
        }
    }
}

/// The Python the tests run services with (FAULTLINE_PYTHON, default python3), after failing, saying what to
/// install, unless it imports every module of `modules` (`"grpc, grpc_tools"`): tests/requirements.txt has them.
pub fn python_with(modules: &str) -> String {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .output();
    assert!(
        matches!(&probe, Ok(o) if o.status.success()),
        "{python} cannot import {modules} ({}): scripts/test installs tests/requirements.txt into .venv; or \
         `python3 -m venv VENV && VENV/bin/pip install -r tests/requirements.txt`, then FAULTLINE_PYTHON=VENV/bin/python",
        match &probe {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        }
    );
    python
}

/// Fails, saying what to install, unless FAULTLINE_PYTHON (default python3) imports grpcio and pybreaker: the
/// own-service tests' gRPC service (tests/services/python_grpc) needs both.
pub fn require_python_with_grpcio_and_pybreaker() {
    let python = std::env::var("FAULTLINE_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import grpc, pybreaker"])
        .output();
    assert!(
        matches!(&probe, Ok(o) if o.status.success()),
        "{python} cannot import grpcio and pybreaker ({}). scripts/test sets them up in .venv; or install them: \
         `python3 -m venv /path/to/venv && /path/to/venv/bin/pip install grpcio pybreaker`, \
         then set FAULTLINE_PYTHON=/path/to/venv/bin/python",
        match &probe {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        }
    );
}
