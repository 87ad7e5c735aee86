//! Reading a file that a configuration names (a gRPC message, say): a regular file of a bounded size, opened so
//! that nothing else can block or flood the reader.
//!
//! For: every crate that reads such a file (faultd, loadgen, the runner), so the rule is written once. Not for:
//! where a file may be (faultd's `files` module decides that for its control API), nor files the person starting a
//! program names on its command line for its own use (certificates, outputs).

use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Why a named file was not read.
#[derive(Debug, thiserror::Error)]
pub enum NamedFileError {
    /// It could not be opened or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is a FIFO, a device, a directory or a socket.
    #[error("not a regular file (a {kind}); only regular files are read")]
    NotRegular {
        /// What it is.
        kind: &'static str,
    },
    /// It is larger than the reader allows.
    #[error("{len} bytes, above the {cap}-byte cap{why}")]
    TooBig {
        /// Its size (or the cap plus one, if it grew while read).
        len: u64,
        /// The cap.
        cap: usize,
        /// Where the cap comes from, e.g. ` (the control API's body limit)`.
        why: &'static str,
    },
}

/// Reads the regular file at `path`, of at most `cap` bytes (`why` says where the cap comes from, for the error).
/// The type is checked before the open, so a device is never opened, and again on the open file, which may have
/// been swapped in between; the open never blocks, since a FIFO opened for a blocking read waits for a writer.
pub fn read_named_file(path: &Path, cap: usize, why: &'static str) -> Result<Vec<u8>, NamedFileError> {
    let check = |meta: &std::fs::Metadata| -> Result<(), NamedFileError> {
        let kind = meta.file_type();
        if !kind.is_file() {
            return Err(NamedFileError::NotRegular {
                kind: kind_name(&kind),
            });
        }
        if meta.len() > cap as u64 {
            return Err(NamedFileError::TooBig {
                len: meta.len(),
                cap,
                why,
            });
        }
        Ok(())
    };
    check(&std::fs::metadata(path)?)?;
    let file = open_without_blocking(path)?;
    let meta = file.metadata()?;
    check(&meta)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // A file that grows after the check is cut at the cap plus one byte: refused, not read on.
    file.take(cap as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > cap {
        return Err(NamedFileError::TooBig {
            len: bytes.len() as u64,
            cap,
            why,
        });
    }
    Ok(bytes)
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

fn kind_name(kind: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "FIFO";
        }
        if kind.is_char_device() {
            return "character device";
        }
        if kind.is_block_device() {
            return "block device";
        }
        if kind.is_socket() {
            return "socket";
        }
    }
    if kind.is_dir() {
        "directory"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_and_a_directory_are_refused_and_a_regular_file_is_read_up_to_its_cap() {
        let e = read_named_file(Path::new("/dev/zero"), 10, "").unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let e = read_named_file(&std::env::temp_dir(), 10, "").unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        let file = std::env::temp_dir().join(format!("units-named-file-{}", std::process::id()));
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(read_named_file(&file, 10, "").unwrap(), b"0123456789");
        let e = read_named_file(&file, 9, " (a test's)").unwrap_err();
        assert_eq!(e.to_string(), "10 bytes, above the 9-byte cap (a test's)");
        std::fs::remove_file(&file).unwrap();
    }
}
