//! `faultline completions SHELL` and `faultline man`: the shell's completion script and the man pages, both
//! generated from the command-line definition the binary parses with, so that they never drift from it.
//!
//! Not for the definition itself: the `faultline` binary owns it and hands it here.

use std::io::Write;
use std::path::Path;

pub use clap_complete::Shell;

/// Prints `shell`'s completion script for `cli` to stdout.
pub fn completions(mut cli: clap::Command, shell: Shell) -> i32 {
    let name = cli.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cli, name, &mut out);
    write_stdout(&out)
}

/// Prints the man page of `cli` to stdout, or with `dir` writes it and one page per command (`faultline-run.1`, ...)
/// there.
pub fn man(cli: clap::Command, dir: Option<&Path>) -> i32 {
    match dir {
        None => {
            let mut out = Vec::new();
            if let Err(e) = clap_mangen::Man::new(cli).render(&mut out) {
                eprintln!("error: cannot render the man page: {e}");
                return 3;
            }
            write_stdout(&out)
        }
        Some(dir) => {
            if let Err(e) = std::fs::create_dir_all(dir) {
                eprintln!("error: cannot create {}: {e}", dir.display());
                return 2;
            }
            match clap_mangen::generate_to(cli, dir) {
                Ok(()) => {
                    eprintln!("wrote the man pages to {}", dir.display());
                    0
                }
                Err(e) => {
                    eprintln!(
                        "error: cannot write the man pages to {}: {e}",
                        dir.display()
                    );
                    2
                }
            }
        }
    }
}

/// Writes `bytes` to stdout; a closed pipe (`| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> i32 {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            3
        }
    }
}
