//! Files a configuration names (a gRPC answer's `message_file`): where they may be read from, and how.
//!
//! For: the one way faultd reads such a file, so that no configuration can make it wait on a FIFO, read a device
//! without end, or serve a file from outside the folder it was given. A configuration file may name files beside
//! it; the control API may name files only inside the folder faultd was started with (`--files DIR`), and none
//! without it. Not for: TLS certificates and CA files, which only the one who starts faultd names.

use std::path::{Path, PathBuf};

/// The largest file a configuration may name: the control API's body limit, so that a file never lets a
/// configuration carry more than the same configuration written inline could.
pub const MAX_FILE: usize = 2 << 20;

/// Where the files a configuration names are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Files {
    /// Relative to this folder (the configuration file's own), or absolute: its author could read them anyway.
    Beside(PathBuf),
    /// Only inside this folder (`faultd --files DIR`): a path through `..`, an absolute path elsewhere and a link
    /// that leads out are refused. For configurations from the control API, whose caller is not the one who
    /// started faultd.
    Within(PathBuf),
    /// No file at all: the control API of a faultd started without `--files`.
    Refused,
}

impl Files {
    /// The files of a configuration that came over the control API: inside `dir` when faultd was given one,
    /// none otherwise.
    pub fn for_control_api(dir: Option<&Path>) -> Files {
        dir.map_or(Files::Refused, |d| Files::Within(d.to_path_buf()))
    }

    /// The bytes of the file written `written`: a regular file of at most [`MAX_FILE`] bytes, opened so that
    /// nothing else (a FIFO, a device, a directory) can block or flood the reader. The error names the path and
    /// the reason; the caller adds the field.
    pub fn read(&self, written: &str) -> Result<Vec<u8>, String> {
        let path = match self {
            Files::Refused => {
                return Err(format!(
                    "{written:?}: this faultd reads no files for its control API (start it with --files DIR \
                     to allow files inside DIR); give the message inline as `message` (hex)"
                ))
            }
            Files::Beside(dir) => dir.join(written),
            Files::Within(dir) => inside(dir, written)?,
        };
        let cap = faultline_units::input::Cap::limit(
            faultline_units::Size(MAX_FILE as u64),
            "the control API's body limit",
        );
        faultline_units::input::read_capped(&path, cap).map_err(|why| format!("{written:?}: {why}"))
    }
}

/// `written` resolved inside `dir`, links followed, refused when it leads out of `dir`.
fn inside(dir: &Path, written: &str) -> Result<PathBuf, String> {
    let root = dir
        .canonicalize()
        .map_err(|e| format!("the --files folder {}: {e}", dir.display()))?;
    let outside = |path: &Path| {
        format!(
            "{written:?} leads to {}, outside the --files folder {}",
            path.display(),
            root.display()
        )
    };
    // Judged on the words first, so that a path that leads out is refused alike whether or not its target
    // exists: the answer must not tell a caller which files exist outside the folder.
    let lexical = normalized(&root.join(written));
    if !lexical.starts_with(&root) {
        return Err(outside(&lexical));
    }
    let path = lexical
        .canonicalize()
        .map_err(|e| format!("{written:?}: {e}"))?;
    if path.starts_with(&root) {
        Ok(path)
    } else {
        Err(outside(&path))
    }
}

/// `path` with `.` dropped and each `..` taking away the part before it, without asking the file system.
fn normalized(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("faultd-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn within_a_folder_only_its_files_are_read() {
        let dir = folder("within");
        std::fs::write(dir.join("m.bin"), b"\x08\x01").unwrap();
        let within = Files::Within(dir.clone());
        assert_eq!(within.read("m.bin").unwrap(), b"\x08\x01");
        let absolute = dir.join("m.bin").display().to_string();
        assert_eq!(within.read(&absolute).unwrap(), b"\x08\x01");
        for out in [
            "../etc/passwd",
            "../no-such-file",
            "sub/../../m.bin",
            "/etc/hostname",
        ] {
            let e = within.read(out).unwrap_err();
            assert!(e.contains("outside the --files folder"), "{out}: {e}");
        }
        std::fs::create_dir(dir.join("sub")).unwrap();
        assert_eq!(within.read("sub/../m.bin").unwrap(), b"\x08\x01");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(std::env::temp_dir(), dir.join("link")).unwrap();
            let e = within.read("link").unwrap_err();
            assert!(e.contains("outside the --files folder"), "{e}");
        }
        let e = Files::Refused.read("m.bin").unwrap_err();
        assert!(e.contains("--files") && e.contains("`message`"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_over_the_cap_is_refused_naming_the_cap() {
        let dir = folder("cap");
        std::fs::write(dir.join("big.bin"), vec![0u8; MAX_FILE + 1]).unwrap();
        let e = Files::Beside(dir.clone()).read("big.bin").unwrap_err();
        assert!(
            e.contains("file too large") && e.contains("body limit"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
