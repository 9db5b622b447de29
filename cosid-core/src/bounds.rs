//! Bounds on what hostile or careless input can grow, each enforced where the input enters.
//!
//! Files a configuration names are read by [`read_file`]: opened without blocking (a FIFO's
//! open waits for a writer otherwise), refused unless regular, and read to at most their limit
//! plus one byte, so `/dev/zero` or a 10 GB file fails at once instead of filling memory.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The largest CA file (`cacert=`, `sslrootcert=`, `ssl-ca=`) read: a system bundle of every
/// public root is some 220 KB.
pub const MAX_CA_FILE_BYTES: u64 = 1 << 20;

/// The largest static-slot state file read: it is one line of some 40 bytes.
pub const MAX_STATE_FILE_BYTES: u64 = 4096;

/// Why [`read_file`] refused a file. `Display` says it in a few words, after the caller's
/// "cannot read X 'path': ".
#[derive(Debug)]
pub enum FileError {
    /// The file could not be opened or read.
    Io(std::io::Error),
    /// The path names something other than a regular file (its kind in words: "a FIFO").
    NotRegular(&'static str),
    /// The file is longer than the limit (in bytes).
    TooLarge {
        /// The limit.
        limit: u64,
    },
}

impl FileError {
    /// Whether the file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, FileError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Io(e) => write!(f, "{e}"),
            FileError::NotRegular(kind) => write!(f, "it is {kind}, not a regular file"),
            FileError::TooLarge { limit } => {
                write!(f, "it is larger than the limit of {}", bytes_text(*limit))
            }
        }
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FileError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// `n` bytes in words: "1048576 bytes (1 MiB)".
pub fn bytes_text(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{n} bytes ({} MiB)", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{n} bytes ({} KiB)", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// The regular file at `path`, read whole if it holds at most `limit` bytes.
///
/// Opened with `O_NONBLOCK` (a FIFO or a device's open returns at once; the flag has no effect
/// on a regular file's reads) and checked by `fstat` on the open descriptor, so the file read is
/// the file checked. At most `limit + 1` bytes are read: a file growing past the limit after
/// the check fails too.
pub fn read_file(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(FileError::Io)?;
    let meta = file.metadata().map_err(FileError::Io)?;
    let kind = meta.file_type();
    if !kind.is_file() {
        return Err(FileError::NotRegular(if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a special file"
        }));
    }
    if meta.len() > limit {
        return Err(FileError::TooLarge { limit });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(FileError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(FileError::TooLarge { limit });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn refuses_what_is_not_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 101]).unwrap();
        let small = dir.path().join("small");
        std::fs::write(&small, b"hello").unwrap();
        for (path, shown) in [
            (
                Path::new("/dev/zero"),
                "a character device, not a regular file",
            ),
            (Path::new("/dev/urandom"), "a character device"),
            (fifo.as_path(), "a FIFO, not a regular file"),
            (dir.path(), "a directory, not a regular file"),
            (big.as_path(), "larger than the limit of 100 bytes"),
        ] {
            let e = read_file(path, 100).unwrap_err();
            assert!(e.to_string().contains(shown), "{path:?}: {e}");
        }
        assert!(read_file(&dir.path().join("none"), 100)
            .unwrap_err()
            .is_not_found());
        assert_eq!(read_file(&small, 5).unwrap(), b"hello");
        assert_eq!(bytes_text(MAX_CA_FILE_BYTES), "1048576 bytes (1 MiB)");
    }
}
