//! The sidecar `PATH-live`: which database file the live stores on `PATH` use, so that a store
//! opened on a file that forgot their writes can tell (the restart guard of
//! [`super::SqliteStore`]'s `started_at`).
//!
//! Every open store holds a shared `flock` on the sidecar for its whole life, through an open
//! file description of its own (two stores in one process are two holders). The sidecar
//! records the database file those stores use: the file's random lineage (`cosid_meta`,
//! written once when the file is created), the high-water mark of its version counter (which
//! every write raises), and the latest moment at which a store found writes lost. A store
//! writes it after each write it commits and whenever it opens or reopens the file.
//!
//! No `fsync`: the sidecar matters only while a store that wrote it lives, and every process
//! on the host reads it through the same page cache. After a crash of the host no store lives,
//! and whatever the sidecar says is only compared, never trusted for more than that.
//!
//! # Reconciling
//!
//! [`Live::reconcile`] compares the database file with the sidecar, all inside the gate (an
//! exclusive `flock` on the directory, which every store of that directory takes for this
//! step alone, a few system calls long):
//!
//! - same lineage, counter at or above the mark: nothing lost; the mark is raised.
//! - another lineage (the file was deleted and created again, or another file moved over it)
//!   or a counter below the mark (a backup restored): the file forgot writes that stores
//!   recorded. If another store holds the sidecar, it may still issue up to the ceilings the
//!   file forgot: the loss is recorded now. If none does, nobody issues from what was
//!   forgotten: the file simply becomes the new mark (a file replaced while no store was live
//!   needs nothing, and the first start on a fresh machine, which finds no sidecar, never
//!   waits).
//! - a store that found its own file replaced by one that forgot its own writes records the
//!   loss whoever else holds the sidecar: stores on a sidecar deleted with the file are not
//!   seen, and they may be in the same state.
//!
//! A recorded loss is kept: a moment longer ago than a holder's ttl plus tolerance costs the
//! restart guard nothing.
//!
//! "Does another store hold the sidecar" is an exclusive `flock` tried without waiting on the
//! store's own description. Converting a lock is not atomic (Linux drops the shared lock
//! before trying the exclusive one, and a failed try leaves none): two stores trying at once
//! could each see the other without a lock and both conclude they are alone. Only stores inside
//! the gate try, one at a time, and each takes its shared lock back before leaving it, so every
//! other store's lock is in place while one tries. A store that is opening takes its shared
//! lock outside the gate; while a try holds the exclusive lock it waits those few system calls.
//!
//! The database is read inside the gate too, after the stores that raise the mark have
//! committed: a store raises the mark only after its commit, so a counter read inside the gate
//! is never below a mark another store raised for the same file.
//!
//! # What remains
//!
//! - Stores of a cosid without the sidecar (an older version) are not seen.
//! - The sidecar deleted together with the file (`rm slots.db*`): until their next operation,
//!   the live stores hold the lock of a file the path no longer names, and a newcomer finds no
//!   mark; each live store then locks the new sidecar and records the loss.
//! - Every store of the file gone, and the host's clock set back across the loss: windows
//!   start above what the file remembers, and a clock set back may reach below what the dead
//!   stores issued.

use crate::error::{Error, Result};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the sidecar records: the database file the live stores use and the latest loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    /// The file's lineage (`cosid_meta.lineage`).
    lineage: i64,
    /// The highest version counter (`cosid_meta.last_version`) a store saw in it.
    version: i64,
    /// The latest moment (store clock, ms) a store found the file forgot writes, if any.
    lost_at: Option<i64>,
}

/// Three right-aligned fields of 20 characters (an `i64` with its sign fits) and a newline:
/// one length, so a write never leaves the tail of a longer record behind.
const MARK_LEN: usize = 3 * 21;

impl Mark {
    fn encode(&self) -> Vec<u8> {
        let lost = self.lost_at.map_or("-".to_string(), |t| t.to_string());
        let text = format!("{:>20} {:>20} {lost:>20}\n", self.lineage, self.version);
        debug_assert_eq!(text.len(), MARK_LEN);
        text.into_bytes()
    }

    /// `None` for anything else than a record (a new, empty sidecar; one edited by hand).
    fn decode(bytes: &[u8]) -> Option<Mark> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut fields = text.lines().next()?.split_whitespace();
        let lineage = fields.next()?.parse().ok()?;
        let version = fields.next()?.parse().ok()?;
        let lost_at = match fields.next()? {
            "-" => None,
            t => Some(t.parse().ok()?),
        };
        fields.next().is_none().then_some(Mark {
            lineage,
            version,
            lost_at,
        })
    }
}

/// One store's hold on the sidecar: the file, locked shared while this lives.
pub(super) struct Live {
    path: PathBuf,
    /// The directory the gate locks.
    dir: PathBuf,
    file: File,
    /// `(device, inode)` of the file: the path may come to name another.
    id: (u64, u64),
    /// Opened read-only (another user's file this one may only read): locked and compared,
    /// never written.
    writable: bool,
}

impl Live {
    /// The sidecar of the database file `db`.
    pub(super) fn path_of(db: &Path) -> PathBuf {
        let mut name = db.as_os_str().to_owned();
        name.push("-live");
        PathBuf::from(name)
    }

    /// Opens the sidecar of `db` (creating it with the database file's mode and group if it is
    /// missing) and locks it shared, waiting at most `wait` for a store that is reconciling.
    pub(super) fn open(db: &Path, wait: Duration) -> Result<Live> {
        let path = Self::path_of(db);
        let dir = match db.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let fail = |doing: &str, e: std::io::Error| {
            let hint = if e.raw_os_error() == Some(libc::ELOOP) {
                "it is a symbolic link, which is never followed: remove it (the store makes its \
                 sidecar itself)"
            } else {
                "it must be a file readable and writable by every user of the store, as the \
                 database file is"
            };
            Error::store(format!(
                "SQLite store '{}': {doing} '{}' failed: {e}; {hint}",
                db.display(),
                path.display()
            ))
        };
        let (file, writable) = match create_like(&path, db) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                // A lock needs only a descriptor: another user's sidecar this user may read
                // still shows the stores that hold it.
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(|e| fail("opening the sidecar", e))?;
                (f, false)
            }
            Err(e) => return Err(fail("opening the sidecar", e)),
        };
        lock_within(&file, libc::LOCK_SH, wait).map_err(|e| fail("locking the sidecar", e))?;
        let m = file
            .metadata()
            .map_err(|e| fail("reading the sidecar's metadata", e))?;
        Ok(Live {
            path,
            dir,
            file,
            id: (m.dev(), m.ino()),
            writable,
        })
    }

    /// Whether the path still names the sidecar this store holds (deleted or replaced: no).
    pub(super) fn still_named(&self) -> Result<bool> {
        match std::fs::metadata(&self.path) {
            Ok(m) => Ok((m.dev(), m.ino()) == self.id),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::store(format!(
                "SQLite store: cannot check that the sidecar '{}' is still there: {e}; check \
                 the permissions of its directory",
                self.path.display()
            ))),
        }
    }

    /// Compares the database file (`lineage`, version counter), as `read_db` reads it inside
    /// the gate, with the sidecar, records the outcome, and returns the latest moment a store
    /// found writes lost (the module doc says when). `own_loss`: this store found its own file
    /// replaced by one that forgot writes it had seen. `now`: the store clock.
    pub(super) fn reconcile(
        &self,
        read_db: impl FnOnce() -> Result<(i64, i64)>,
        own_loss: bool,
        now: i64,
        wait: Duration,
    ) -> Result<Option<i64>> {
        let _gate = self.gate(wait)?;
        let (lineage, version) = read_db()?;
        let mark = self.read()?;
        let forgot = mark.is_some_and(|m| m.lineage != lineage || version < m.version);
        let lost = own_loss || (forgot && !self.alone(wait)?);
        let lost_at = match (mark.and_then(|m| m.lost_at), lost) {
            (Some(t), true) => Some(t.max(now)),
            (None, true) => Some(now),
            (t, false) => t,
        };
        let next = Mark {
            lineage,
            version: match mark {
                Some(m) if !forgot => m.version.max(version),
                _ => version,
            },
            lost_at,
        };
        if mark != Some(next) && self.writable {
            self.file
                .write_all_at(&next.encode(), 0)
                .map_err(|e| self.io_error("writing", e))?;
        }
        Ok(lost_at)
    }

    fn read(&self) -> Result<Option<Mark>> {
        let mut buf = [0u8; MARK_LEN];
        let mut len = 0;
        while len < MARK_LEN {
            match self.file.read_at(&mut buf[len..], len as u64) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error("reading", e)),
            }
        }
        Ok(Mark::decode(&buf[..len]))
    }

    /// Whether no other store holds the sidecar. Inside the gate only (the module doc says
    /// why); leaves this store's shared lock in place.
    fn alone(&self, wait: Duration) -> Result<bool> {
        let alone = match flock(&self.file, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
            Err(e) => return Err(self.io_error("locking", e)),
        };
        lock_within(&self.file, libc::LOCK_SH, wait).map_err(|e| self.io_error("locking", e))?;
        Ok(alone)
    }

    /// The gate: an exclusive lock on the directory, held while the returned file lives.
    fn gate(&self, wait: Duration) -> Result<File> {
        let fail = |e: std::io::Error| {
            Error::store(format!(
                "SQLite store: locking the directory '{}' to compare the store file with its \
                 sidecar failed: {e}; the directory must be readable by every user of the store",
                self.dir.display()
            ))
        };
        let dir = File::open(&self.dir).map_err(fail)?;
        lock_within(&dir, libc::LOCK_EX, wait).map_err(fail)?;
        Ok(dir)
    }

    fn io_error(&self, doing: &str, e: std::io::Error) -> Error {
        Error::store(format!(
            "SQLite store: {doing} the sidecar '{}' failed: {e}",
            self.path.display()
        ))
    }
}

/// Opens `path` read-write, creating it if missing with the mode (and, where this user may
/// set it, the group) of the database file `db`, whatever the umask: every user that may
/// write the store may lock and write its sidecar. A symbolic link is never followed (a link
/// planted there would have the store write elsewhere).
fn create_like(path: &Path, db: &Path) -> std::io::Result<File> {
    let db_meta = std::fs::metadata(db)?;
    let mode = (db_meta.mode() & 0o666) | 0o600;
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => {
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            if f.metadata()?.gid() != db_meta.gid() {
                // SAFETY: fchown on a descriptor this function owns; -1 keeps the owner. A
                // refusal (this user is not in the group) leaves the creator's group.
                unsafe { libc::fchown(f.as_raw_fd(), u32::MAX, db_meta.gid()) };
            }
            Ok(f)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path),
        Err(e) => Err(e),
    }
}

fn flock(file: &File, op: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor `file` keeps open.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `flock(op)` without blocking, tried again until `wait` has passed: every lock here is held
/// for a few system calls, and a store never hangs on one.
fn lock_within(file: &File, op: libc::c_int, wait: Duration) -> std::io::Result<()> {
    let deadline = Instant::now() + wait;
    loop {
        match flock(file, op | libc::LOCK_NB) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("still locked by another store after {wait:?}"),
                ))
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip_and_anything_else_is_none() {
        for m in [
            Mark {
                lineage: 1,
                version: i64::MAX,
                lost_at: None,
            },
            Mark {
                lineage: i64::MIN,
                version: 0,
                lost_at: Some(1_800_000_000_000),
            },
        ] {
            assert_eq!(m.encode().len(), MARK_LEN);
            assert_eq!(Mark::decode(&m.encode()), Some(m));
        }
        for bad in [&b""[..], b"1 2", b"1 2 x", b"1 2 3 4", b"\xff"] {
            assert_eq!(Mark::decode(bad), None, "{bad:?}");
        }
    }

    /// A symbolic link planted at the sidecar's name is refused, naming it, and its target
    /// is left untouched.
    #[test]
    fn a_symbolic_link_at_the_sidecar_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("slots.db");
        std::fs::write(&db, b"").unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, Live::path_of(&db)).unwrap();
        let e = Live::open(&db, Duration::from_secs(5))
            .err()
            .expect("a link is refused");
        assert!(
            e.message().contains("slots.db-live") && e.message().contains("symbolic link"),
            "{e}"
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }

    /// Two holders of one sidecar (two descriptions, as two stores have) each see the other;
    /// either alone sees nobody, and keeps its shared lock either way.
    #[test]
    fn each_holder_sees_the_other_and_keeps_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("slots.db");
        std::fs::write(&db, b"").unwrap();
        let wait = Duration::from_secs(5);
        let a = Live::open(&db, wait).unwrap();
        assert!(a.alone(wait).unwrap());
        let b = Live::open(&db, wait).unwrap();
        assert!(!a.alone(wait).unwrap());
        assert!(!b.alone(wait).unwrap());
        // a still holds its lock after a failed try: b is not alone.
        assert!(!b.alone(wait).unwrap());
        drop(a);
        assert!(b.alone(wait).unwrap());
    }
}
