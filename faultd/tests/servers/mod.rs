//! Real servers the tests start from Debian packages: a free loopback port, a temporary folder, and a guard that
//! stops the server and removes its folder when the test ends, however it ends.
#![allow(dead_code)]

pub mod postgres;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A started server. Dropping it stops the process (with `graceful`'s signal first, if set, then a kill) and
/// removes its folder.
pub struct Server {
    pub child: Child,
    pub dir: PathBuf,
    pub port: u16,
    /// A signal name for `kill -SIGNAL` that shuts the server down cleanly (PostgreSQL: `INT`, fast shutdown).
    pub graceful: Option<&'static str>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(signal) = self.graceful {
            let _ = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(self.child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    /// What the server wrote to its standard output and error (`start` keeps them in `server.log`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

/// How many times `start` tries a new port when the server finds its port taken.
const ATTEMPTS: u32 = 3;

/// Starts a server on a free loopback port, in a new folder, and waits until `ready(port)` holds, for `within` at
/// most. `command` gets the port and the folder and returns the server's command (it may prepare the folder first).
/// A port is free when asked, not when the server binds it: tests that start servers side by side can take it in
/// between, so a server that exits saying its address is in use starts again on another port. Its output goes to
/// `server.log` in its folder and is shown when it fails.
pub fn start(
    name: &str,
    within: Duration,
    graceful: Option<&'static str>,
    command: impl Fn(u16, &Path) -> Command,
    ready: impl Fn(u16) -> bool,
) -> Server {
    for attempt in 1..=ATTEMPTS {
        let port = free_port();
        let dir = temp_dir(name, port);
        let log = File::create(dir.join("server.log")).expect("a log file in the server's folder");
        let child = command(port, &dir)
            .stdout(log.try_clone().expect("the log file, twice"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} does not start: {e}"));
        let mut server = Server {
            child,
            dir,
            port,
            graceful,
        };
        let deadline = Instant::now() + within;
        loop {
            if ready(port) {
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                let log = server.log();
                if attempt < ATTEMPTS && log.contains("already in use") {
                    break;
                }
                panic!("{name} ended ({status}) before it answered on port {port}:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not answer on port {port} within {within:?}:\n{}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    unreachable!("the last attempt returns or panics")
}

/// A loopback port free at the time of asking, for a server to bind later (`faultline_units::port`).
pub fn free_port() -> u16 {
    faultline_units::port::handed_out().expect("a free loopback port")
}

/// A new folder under the system's temporary one, named for the server, this process and the port.
pub fn temp_dir(server: &str, port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("faultd-{server}-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    dir
}

/// Whether `binary --version` runs.
pub fn installed(binary: &str) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}
