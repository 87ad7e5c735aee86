//! Reading a file a person named (a scenario, a configuration, a record to import) within a cap on its size, so
//! that a file far larger than any such input, `/dev/zero` or a FIFO is refused with a message instead of filling
//! memory or blocking. Every binary of the workspace reads its inputs through here.
//!
//! Files a configuration names (a gRPC message) come through here too, with the cap of the limit they answer to
//! ([`Cap::limit`]). Where such a file may be is the caller's rule (faultd's `files` module for its control API).
//!
//! Not for files the harness wrote itself and reads back, nor for streams read piece by piece: those bound their
//! memory by what they keep, not by the size of the file.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::Size;

/// The most a scenario, a faultd or demo configuration or a load spec may hold. The YAML parser stops at a
/// million events, which the largest imported scenarios write in well under this; a larger file is the wrong file.
pub const MAX_CONFIG_SIZE: Cap = Cap {
    size: Size(16 << 20),
    raised_by: None,
    limit: None,
};

/// The most bytes an input may hold, and the flag that raises it (none: nothing valid is that large) or the
/// limit it answers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    pub size: Size,
    pub raised_by: Option<&'static str>,
    pub limit: Option<&'static str>,
}

impl Cap {
    /// A cap the user chose with `flag`.
    pub fn by_flag(size: Size, flag: &'static str) -> Cap {
        Cap {
            size,
            raised_by: Some(flag),
            limit: None,
        }
    }

    /// A cap set by a limit the file answers to, e.g. `"gRPC's default message limit"`.
    pub const fn limit(size: Size, limit: &'static str) -> Cap {
        Cap {
            size,
            raised_by: None,
            limit: Some(limit),
        }
    }

    fn hint(&self) -> String {
        match (self.raised_by, self.limit) {
            (Some(flag), _) => format!("raise the cap with {flag}"),
            (None, Some(limit)) => limit.to_string(),
            (None, None) => "no valid file of its kind is that large".into(),
        }
    }
}

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {path}: it is {kind}, not a regular file")]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("file too large: {path} holds more than the cap of {} ({})", cap.size, cap.hint())]
    TooLarge { path: PathBuf, cap: Cap },
}

/// Opens `path` for reading if it is a regular file. A FIFO is refused before it is opened (opening one blocks
/// until a writer comes), a device such as `/dev/zero` before a byte is read. The open itself never blocks, so a
/// FIFO swapped in after the look cannot stall the reader either.
pub fn open_regular(path: &Path) -> Result<File, InputError> {
    let read = |source| InputError::Read {
        path: path.to_path_buf(),
        source,
    };
    check_regular(path, &std::fs::metadata(path).map_err(read)?)?;
    let file = open_without_blocking(path).map_err(read)?;
    // The name may have been swapped between the look and the open.
    check_regular(path, &file.metadata().map_err(read)?)?;
    Ok(file)
}

#[cfg(unix)]
fn open_without_blocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

#[cfg(not(unix))]
fn open_without_blocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

fn check_regular(path: &Path, meta: &std::fs::Metadata) -> Result<(), InputError> {
    if meta.is_file() {
        return Ok(());
    }
    let kind = if meta.is_dir() {
        "a folder"
    } else {
        special_kind(meta)
    };
    Err(InputError::NotAFile {
        path: path.to_path_buf(),
        kind,
    })
}

#[cfg(unix)]
fn special_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::Metadata) -> &'static str {
    "a special file"
}

/// Opens `path` as [`open_regular`] does and refuses it when its size is over `cap`; the reader it returns stops
/// one byte past the cap, for a file that grows while it is read.
pub fn open_capped(path: &Path, cap: Cap) -> Result<std::io::Take<File>, InputError> {
    let file = open_regular(path)?;
    let len = file
        .metadata()
        .map_err(|source| InputError::Read {
            path: path.to_path_buf(),
            source,
        })?
        .len();
    if len > cap.size.bytes() {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
            cap,
        });
    }
    Ok(file.take(cap.size.bytes().saturating_add(1)))
}

/// The whole of `path`, a regular file of at most `cap` bytes.
pub fn read_capped(path: &Path, cap: Cap) -> Result<Vec<u8>, InputError> {
    let mut bytes = Vec::new();
    open_capped(path, cap)?
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > cap.size.bytes() {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
            cap,
        });
    }
    Ok(bytes)
}

/// As [`read_capped`], for a text file (UTF-8).
pub fn read_capped_text(path: &Path, cap: Cap) -> Result<String, InputError> {
    String::from_utf8(read_capped(path, cap)?).map_err(|e| InputError::Read {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
    })
}

/// The name that stands for standard input where a file is read (`faultline validate -`).
pub const STDIN: &str = "-";

/// As [`read_capped_text`], and for [`STDIN`] the whole of standard input, read once and kept: a command that
/// reads its input twice (a scenario loaded for each of two runs) reads the same text both times.
pub fn read_capped_text_or_stdin(path: &Path, cap: Cap) -> Result<String, InputError> {
    static READ: std::sync::OnceLock<Result<String, (std::io::ErrorKind, String)>> =
        std::sync::OnceLock::new();
    if path != Path::new(STDIN) {
        return read_capped_text(path, cap);
    }
    let read = READ.get_or_init(|| {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .take(cap.size.bytes().saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| (e.kind(), e.to_string()))?;
        if bytes.len() as u64 > cap.size.bytes() {
            return Err((std::io::ErrorKind::FileTooLarge, String::new()));
        }
        String::from_utf8(bytes)
            .map_err(|e| (std::io::ErrorKind::InvalidData, e.utf8_error().to_string()))
    });
    read.clone().map_err(|(kind, message)| match kind {
        std::io::ErrorKind::FileTooLarge => InputError::TooLarge {
            path: path.to_path_buf(),
            cap,
        },
        kind => InputError::Read {
            path: path.to_path_buf(),
            source: std::io::Error::new(kind, message),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("faultline-units-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn a_file_within_its_cap_is_read_whole_and_one_over_it_is_refused_naming_the_flag() {
        let path = scratch("cap", b"0123456789");
        let cap = |n| Cap::by_flag(Size(n), "--max-input-size");
        assert_eq!(read_capped_text(&path, cap(10)).unwrap(), "0123456789");
        let e = read_capped(&path, cap(9)).unwrap_err().to_string();
        assert!(e.starts_with("file too large"), "{e}");
        assert!(e.contains("9B") && e.contains("--max-input-size"), "{e}");
        std::fs::remove_file(path).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_device_and_a_folder_are_refused_before_a_byte_is_read() {
        let e = read_capped(Path::new("/dev/zero"), MAX_CONFIG_SIZE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a device, not a regular file"), "{e}");
        let e = read_capped(&std::env::temp_dir(), MAX_CONFIG_SIZE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a folder"), "{e}");
    }
}
