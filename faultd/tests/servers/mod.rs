//! Real servers the tests start from Debian packages: a free loopback port, a temporary folder, and a guard that
//! stops the server and removes its folder when the test ends, however it ends.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
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

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
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
