//! Bounds on what hostile or careless input can grow, each enforced where the input enters.
//!
//! Files a configuration names are read by [`read_file`]: opened without blocking (a FIFO's
//! open waits for a writer otherwise), refused unless regular, and read to at most their limit
//! plus one byte, so `/dev/zero` or a 10 GB file fails at once instead of filling memory.
//!
//! Configuration values have length limits after `${VAR}` expansion ([`check_len`] and the
//! `MAX_*` constants), and every message that quotes foreign text (a server's error reply, a
//! value from the environment) quotes at most [`MAX_QUOTE_CHARS`] characters of it ([`quote`]).

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The largest CA file (`cacert=`, `sslrootcert=`, `ssl-ca=`) read: a system bundle of every
/// public root is some 220 KB.
pub const MAX_CA_FILE_BYTES: u64 = 1 << 20;

/// The largest static-slot state file read: it is one line of some 40 bytes.
pub const MAX_STATE_FILE_BYTES: u64 = 4096;

/// The longest string value of a configuration after `${VAR}` expansion: expansion stops
/// there, so `${BIG}` repeated cannot build a value larger than the document's own limit.
pub const MAX_VALUE_BYTES: usize = 64 << 10;

/// The longest namespace (the stores' keys and the lease client take at most this many).
pub const MAX_NAMESPACE_BYTES: usize = 128;

/// The longest owner key: a host name of 253 bytes, a pid and room for a deployment's tag.
pub const MAX_OWNER_KEY_BYTES: usize = 512;

/// The longest store URL.
pub const MAX_STORE_URL_BYTES: usize = 32 << 10;

/// The longest host name in a store URL (DNS's limit), port and brackets not counted.
pub const MAX_HOST_BYTES: usize = 253;

/// The most hosts one store URL lists (Sentinels, Cluster seeds, etcd endpoints).
pub const MAX_HOSTS: usize = 64;

/// The most characters of a foreign text (a server's message, a value) one message quotes.
pub const MAX_QUOTE_CHARS: usize = 200;

/// The most characters of a store's error detail (its client's or its server's words with
/// cosid's own advice after them) one message holds.
pub const MAX_DETAIL_CHARS: usize = 1000;

/// The largest reply cosid reads from a Redis server (a plain server, a sentinel, a cluster
/// node) for any request but the two that list a namespace's records: those answer one record
/// (a few KB at most: an owner key of [`MAX_OWNER_KEY_BYTES`], percent-encoded), a number, or a
/// short status.
pub const MAX_REDIS_REPLY_BYTES: usize = 1 << 20;

/// The largest reply cosid reads from a Redis server while a snapshot or the candidate view of
/// a namespace is in flight: the records of a full namespace of 2^20 slots (the most a layout
/// has) at 256 bytes a record, the size of one whose owner keys are some 40 bytes long. A
/// namespace whose records together are larger cannot be listed (`cosid slots`, an acquisition
/// that reads every record) on Redis.
pub const MAX_REDIS_SNAPSHOT_REPLY_BYTES: usize = 256 << 20;

/// The largest message cosid reads from a PostgreSQL server (its client reserves a message's
/// declared length as soon as the 5-byte header arrives) for any statement but the two that
/// list a namespace's records: a row holds one record (a few KB at most: an owner key of
/// [`MAX_OWNER_KEY_BYTES`] twice), a server's error or notice a few hundred bytes.
pub const MAX_POSTGRES_MESSAGE_BYTES: usize = 1 << 20;

/// The largest message cosid reads from a PostgreSQL server while a snapshot or the candidate
/// view of a namespace is in flight: the candidate view's first row lists the live slots'
/// numbers, at most 2^20 of 7 digits and a comma each (8 MiB), with room to spare. Each record
/// comes in a row of its own, so the count of rows is bounded by the namespace's slots, not here.
pub const MAX_POSTGRES_LISTING_MESSAGE_BYTES: usize = 16 << 20;

/// The largest packet the MySQL/MariaDB client reads (mysql_async's client-side
/// `max_allowed_packet`; set, so that the server's own value, up to 1 GiB, does not become the
/// client's): a row of cosid's tables is a few KB. 16 MiB, the protocol's largest chunk, so a
/// statement is never split differently from the protocol's own rule.
pub const MAX_MYSQL_PACKET_BYTES: usize = 16 << 20;

/// `text` for a message: on one line (newlines, tabs, controls and the characters of
/// [`is_dangerous`] written as escapes, so none acts on a terminal) and cut after
/// [`MAX_QUOTE_CHARS`] characters with `… (N bytes in all)`. Never for a text that may hold a
/// password.
pub fn quote(text: &str) -> String {
    quote_at_most(text, MAX_QUOTE_CHARS)
}

/// [`quote`] with another limit.
pub fn quote_at_most(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars + 32));
    for (n, c) in text.chars().enumerate() {
        if n == max_chars {
            out.push_str(&format!("… ({} bytes in all)", text.len()));
            return out;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_dangerous(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Characters a terminal may act on or that change how the text around them is shown: the
/// controls (C0, C1, DEL), the line and paragraph separators, and the format characters
/// (Unicode category Cf: the bidirectional overrides and isolates U+202A–U+202E and
/// U+2066–U+2069, the marks U+200E/U+200F/U+061C, zero-width characters, tags, …).
pub fn is_dangerous(c: char) -> bool {
    c.is_control()
        || matches!(c as u32,
            0x00AD
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x2028..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F)
}

/// A Config error unless `value` (of configuration key or flag `key`) is at most `max` bytes:
/// the message names the key, the limit and the value's length, and quotes its start.
pub fn check_len(key: &str, value: &str, max: usize) -> crate::Result<()> {
    if value.len() <= max {
        return Ok(());
    }
    Err(crate::Error::config(format!(
        "{key} is {} bytes long, more than the limit of {max}; it begins '{}'",
        value.len(),
        quote_at_most(value, 40)
    )))
}

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

/// A bound of `bytes` in a store's message: "1 MiB", "16 MiB", or a count of bytes.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn bound_text(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
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

    #[test]
    fn quotes_are_cut_escaped_and_say_the_whole_length() {
        assert_eq!(quote("short"), "short");
        assert_eq!(quote("a\nb"), "a\\nb");
        assert_eq!(quote("rtl\u{202e}x"), "rtl\\u{202e}x");
        assert_eq!(quote("it's \"x\" \\ y"), "it's \"x\" \\ y");
        let long = "é".repeat(10_000_000);
        let q = quote(&long);
        assert!(
            q.ends_with("… (20000000 bytes in all)"),
            "{}",
            &q[q.len() - 40..]
        );
        assert_eq!(q.chars().filter(|c| *c == 'é').count(), MAX_QUOTE_CHARS);
        assert_eq!(
            quote(&"x".repeat(MAX_QUOTE_CHARS)),
            "x".repeat(MAX_QUOTE_CHARS)
        );
    }

    #[test]
    fn lengths_past_a_limit_name_the_key_the_limit_and_the_length() {
        assert!(check_len("k", "abc", 3).is_ok());
        let e = check_len("cosid.namespace", &"n".repeat(1000), 128).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Config);
        let m = e.message();
        assert!(
            m.contains("cosid.namespace is 1000 bytes long, more than the limit of 128"),
            "{m}"
        );
        assert!(m.len() < 200, "{m}");
    }

    #[test]
    fn format_characters_are_dangerous_and_letters_are_not() {
        for c in [
            '\u{202e}',
            '\u{2066}',
            '\u{200b}',
            '\u{feff}',
            '\u{e0041}',
            '\n',
            '\u{85}',
        ] {
            assert!(is_dangerous(c), "{c:?}");
        }
        for c in ['a', 'é', '中', '-', ' ', '\u{1f600}'] {
            assert!(!is_dangerous(c), "{c:?}");
        }
    }
}
