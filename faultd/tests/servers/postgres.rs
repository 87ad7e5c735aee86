//! A PostgreSQL server for a test: a cluster made by `initdb` in a temporary folder, run by `postgres` on a free
//! loopback port (its unix socket in the same folder), user `postgres` without a password, and the stock `psql`
//! as a client.
//!
//! PostgreSQL refuses to run as root: when the test runs as root, the cluster belongs to `nobody` and its
//! programs run as that user through `setpriv` (which execs, so the child is the server itself and the guard
//! stops the server, not a wrapper).
//!
//! Needs the Debian package `postgresql` (server binaries under /usr/lib/postgresql/15/bin, `psql` on the
//! PATH); fails, not skips, without it.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use super::Server;

const BIN: &str = "/usr/lib/postgresql/15/bin";
const INSTALL: &str = "install PostgreSQL (apt-get install -y postgresql)";

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A PostgreSQL program, run as `nobody` when the test runs as root.
fn server_command(program: &str, as_nobody: bool) -> Command {
    let path = Path::new(BIN).join(program);
    if as_nobody {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--reset-env",
        ])
        .arg(path);
        c
    } else {
        Command::new(path)
    }
}

pub fn start_postgres() -> Server {
    for program in ["initdb", "postgres"] {
        assert!(
            Path::new(BIN).join(program).exists(),
            "{INSTALL}: no {BIN}/{program}"
        );
    }
    assert!(super::installed("psql"), "{INSTALL}: no psql");
    let as_nobody = running_as_root();
    // SIGINT is PostgreSQL's fast shutdown: it ends its backends too, which a SIGKILL of the postmaster would
    // leave running until they notice.
    super::start(
        "postgres",
        Duration::from_secs(20),
        Some("INT"),
        |port, dir| {
            if as_nobody {
                let chown = Command::new("chown")
                    .arg("nobody:nogroup")
                    .arg(dir)
                    .status()
                    .expect("chown runs");
                assert!(chown.success(), "the temporary folder goes to nobody");
            }
            let data = dir.join("data");
            let initdb = server_command("initdb", as_nobody)
                .arg("-D")
                .arg(&data)
                .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
                .output()
                .expect("initdb runs");
            assert!(
                initdb.status.success(),
                "initdb failed: {}",
                String::from_utf8_lossy(&initdb.stderr)
            );
            let mut postgres = server_command("postgres", as_nobody);
            postgres
                .arg("-D")
                .arg(&data)
                .args(["-p", &port.to_string(), "-k"])
                .arg(dir)
                .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]);
            postgres
        },
        |port| psql(port, &["select 1"]).stdout == b"1\n",
    )
}

/// One `psql` session on its own connection, running each command in turn, unaligned and tuples only.
pub fn psql(port: u16, commands: &[&str]) -> Output {
    psql_command(port, commands).output().expect("psql runs")
}

/// The command of [`psql`], for a caller that sets more of its environment.
pub fn psql_command(port: u16, commands: &[&str]) -> Command {
    let mut c = Command::new("psql");
    c.args([
        "-X",
        "-A",
        "-t",
        "-h",
        "127.0.0.1",
        "-U",
        "postgres",
        "-d",
        "postgres",
    ])
    .args(["-p", &port.to_string()])
    .env("PGCONNECT_TIMEOUT", "5");
    for command in commands {
        c.args(["-c", command]);
    }
    c
}
