//! `sqlite://PATH` — the embedded default store, for any number of processes on one host.
//!
//! How it keeps the store guarantees of [`SlotStore`]:
//!
//! - **Atomic compare-and-set.** Each primitive is one SQLite transaction; the compare-and-set
//!   ones start with `BEGIN IMMEDIATE`, which takes the file's write lock before reading the
//!   version, so no other connection (in this process or another) can write between the
//!   comparison and the write. Reads run in one read transaction, so a snapshot is one moment.
//! - **Durable once reported.** `synchronous=FULL` (and `fullfsync` on macOS): a commit returns
//!   only after the write-ahead log is synced, so a compare-and-set reported as done survives a
//!   crash or power loss.
//! - **Versions never repeat for a key.** Every write takes the next value of one file-wide
//!   counter (`cosid_meta.last_version`). The counter of a new file starts at a random point
//!   below 2^62, so a file deleted and created again does not hand out versions that a client
//!   may still hold from the old one.
//! - **Many processes.** WAL journal mode (readers never block the writer) and a busy timeout
//!   of 5 s: a connection waits that long for the write lock before failing with a store error,
//!   which the keeper retries.
//!
//! - **Lost writes reported (the restart guard).** A file deleted or replaced under running
//!   stores (a new file, or a backup older than their last writes) forgot records that live
//!   holders may still issue from, up to their ceilings, until their next renewal finds the
//!   record gone or changed. [`SlotStore::started_at`] reports when that happened, so the
//!   lease client floors a newcomer's windows at that moment + ttl + tolerance, above every
//!   ceiling the file forgot. How the store knows: every store locks the sidecar `PATH-live`
//!   (a shared `flock`, through a description of its own) and records in it the lineage of
//!   the file it uses (random, written once when the file is created) and the high-water mark
//!   of the file's version counter (which every write raises). A store that finds the file of
//!   another lineage or with a lower counter than the sidecar says while another store holds
//!   the sidecar records the loss there, at its store clock's now; a store that finds its own
//!   file so records it whoever else lives. Nobody else live (a fresh machine, a file replaced
//!   while every store was closed): nothing is reported and the first start does not wait.
//!   The moment reported bounds every ceiling in use because a write that finds, once
//!   committed, that the path names another file is reported unknown, as a lost reply: no
//!   client uses a ceiling written into a file after it was lost.
//!   The `live` module says why each step is safe against the others, and what remains.
//!
//! The store clock is the host clock (or the clock a test passes): every process on one host
//! reads the same clock. The schema is created on open, idempotently, and versioned in
//! `cosid_meta`; a file written by a newer cosid with an unknown schema is refused.
//!
//! Thread-safe: one connection per store behind a mutex; each primitive holds it for its one
//! transaction. After `fork()` a child never uses its parent's store (`crate::fork`): the
//! descriptor of the sidecar it inherits shares the parent's lock, which stays while either
//! process keeps it open, and a store the child opens takes a lock of its own. Every SQLite
//! and sidecar call runs inside `fork::gate`.

use super::{
    CandidateAsk, CandidateView, Cas, NamespaceSnapshot, NamespaceWrite, SlotRead, SlotStore,
    SlotWrite,
};
use crate::clock::{SharedClock, SystemClock};
use crate::error::{Error, Result};
use crate::lease::record::IdLayout;
use crate::lease::{NamespaceRecord, Owner, SlotRecord, Snapshot, Versioned};
use live::Live;
use rusqlite::{
    params, Connection, ErrorCode, OpenFlags, OptionalExtension, Row, Transaction,
    TransactionBehavior,
};
use std::fmt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod live;

/// The schema this build writes and understands.
const SCHEMA_VERSION: i64 = 3;

/// How long a connection waits for another one's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// `PRAGMA application_id` of a cosid store: "cosi" in ASCII.
const APPLICATION_ID: i64 = 0x636f_7369;

const CREATE_META: &str = "CREATE TABLE IF NOT EXISTS cosid_meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value INTEGER NOT NULL
) WITHOUT ROWID";

const CREATE_TABLES: &str = "
CREATE TABLE IF NOT EXISTS cosid_namespace (
    namespace     TEXT PRIMARY KEY NOT NULL,
    version       INTEGER NOT NULL,
    slot_limit    INTEGER NOT NULL CHECK (slot_limit >= 0),
    tolerance_ms  INTEGER NOT NULL,
    not_before_ms INTEGER NOT NULL,
    layout        TEXT,
    ttl_ms        INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cosid_slot (
    namespace         TEXT NOT NULL,
    slot              INTEGER NOT NULL CHECK (slot >= 0),
    version           INTEGER NOT NULL,
    owner_key         TEXT,
    owner_incarnation TEXT,
    last_owner_key    TEXT,
    fence             INTEGER NOT NULL CHECK (fence >= 0),
    expires_at        INTEGER NOT NULL,
    floor             INTEGER NOT NULL,
    ceiling           INTEGER NOT NULL,
    next_floor        INTEGER NOT NULL,
    CHECK ((owner_key IS NULL) = (owner_incarnation IS NULL)),
    PRIMARY KEY (namespace, slot)
) WITHOUT ROWID;";

const SELECT_NAMESPACE: &str = "SELECT version, slot_limit, tolerance_ms, not_before_ms, layout,
    ttl_ms FROM cosid_namespace WHERE namespace = ?1";

const SLOT_COLUMNS: &str = "slot, version, owner_key, owner_incarnation, last_owner_key, fence, \
                            expires_at, floor, ceiling, next_floor";

const NEXT_VERSION: &str =
    "UPDATE cosid_meta SET value = value + 1 WHERE key = 'last_version' RETURNING value";

const UPSERT_NAMESPACE: &str = "INSERT INTO cosid_namespace
    (namespace, version, slot_limit, tolerance_ms, not_before_ms, layout, ttl_ms)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
    ON CONFLICT (namespace) DO UPDATE SET version = excluded.version,
        slot_limit = excluded.slot_limit, tolerance_ms = excluded.tolerance_ms,
        not_before_ms = excluded.not_before_ms, layout = excluded.layout,
        ttl_ms = excluded.ttl_ms";

const UPSERT_SLOT: &str = "INSERT INTO cosid_slot
    (namespace, slot, version, owner_key, owner_incarnation, last_owner_key, fence, expires_at,
     floor, ceiling, next_floor) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
    ON CONFLICT (namespace, slot) DO UPDATE SET version = excluded.version,
        owner_key = excluded.owner_key, owner_incarnation = excluded.owner_incarnation,
        last_owner_key = excluded.last_owner_key, fence = excluded.fence,
        expires_at = excluded.expires_at, floor = excluded.floor, ceiling = excluded.ceiling,
        next_floor = excluded.next_floor";

/// The SQLite store. Thread-safe; processes on one host share it through the file.
pub struct SqliteStore {
    path: PathBuf,
    clock: SharedClock,
    /// `None` only while the store is dropped.
    conn: Mutex<Option<State>>,
}

/// The connection and the identity `(device, inode)` of the file it opened: when the path no
/// longer names that file (deleted, or replaced by another), the connection is to a file no
/// other process will ever open again, and is replaced before the next read or write.
struct Open {
    conn: Connection,
    file: (u64, u64),
    /// The file's lineage (`cosid_meta.lineage`, random, written when the file was created).
    lineage: i64,
    /// The highest version counter this store saw in the file: when it opened it, and each
    /// write it committed.
    seen: i64,
}

/// What the store's mutex guards: the connection, the hold on the sidecar, and what this
/// store learnt of lost writes.
struct State {
    open: Open,
    live: Live,
    /// The latest moment this store found its own file replaced by one that forgot writes it
    /// had seen (its own clients may hold windows from them).
    lost_at: Option<i64>,
    /// The sidecar is to be reconciled before the next primitive (`Some(own_loss)`): the file
    /// or the sidecar changed, or writing the sidecar after a commit failed.
    pending: Option<bool>,
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        let slot = self.conn.get_mut().unwrap_or_else(|p| p.into_inner());
        // Closing is a SQLite call too: no fork while it runs.
        crate::fork::gate(|| drop(slot.take()));
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// One namespace row as stored: version, limit, tolerance, not-before, layout, ttl.
type NamespaceRow = (i64, i64, i64, i64, Option<String>, Option<i64>);

/// What one read of a namespace returns: its record, the live slots (when asked for a
/// candidate view) and slot records.
type NamespaceRead = (
    Option<Versioned<NamespaceRecord>>,
    Vec<u32>,
    Vec<Versioned<SlotRecord>>,
);

/// One slot row as stored, before it is checked.
struct SlotRow {
    slot: i64,
    version: i64,
    owner_key: Option<String>,
    owner_incarnation: Option<String>,
    last_owner_key: Option<String>,
    fence: i64,
    expires_at: i64,
    floor: i64,
    ceiling: i64,
    next_floor: i64,
}

impl SlotRow {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<SlotRow> {
        Ok(SlotRow {
            slot: r.get(0)?,
            version: r.get(1)?,
            owner_key: r.get(2)?,
            owner_incarnation: r.get(3)?,
            last_owner_key: r.get(4)?,
            fence: r.get(5)?,
            expires_at: r.get(6)?,
            floor: r.get(7)?,
            ceiling: r.get(8)?,
            next_floor: r.get(9)?,
        })
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store file at `path`, with the host clock as store clock.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with_clock(path, Arc::new(SystemClock))
    }

    /// Opens (creating if needed) the store file at `path`, with `clock` as the store clock.
    /// Creates the parent directory if it is missing (mode 0700) and the file (mode 0600) with
    /// the schema if the file has none; refuses a database of another application.
    pub fn open_with_clock(path: &Path, clock: SharedClock) -> Result<Self> {
        let state = crate::fork::gate(|| -> Result<State> {
            let open = connect(path)?;
            let live = Live::open(path, BUSY_TIMEOUT)?;
            let state = State {
                open,
                live,
                lost_at: None,
                pending: None,
            };
            reconcile(path, &state, false, clock.now_ms())?;
            Ok(state)
        })?;
        Ok(SqliteStore {
            path: path.to_path_buf(),
            clock,
            conn: Mutex::new(Some(state)),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The namespace record, the live slots (with `ask`) and the slot records, in one
    /// transaction: every record (no `ask`: a snapshot), or those of the candidate view `ask`
    /// wants, filtered by the query.
    fn read_namespace(
        &self,
        namespace: &str,
        store_now: i64,
        ask: Option<&CandidateAsk<'_>>,
    ) -> Result<NamespaceRead> {
        const LIVE: &str = "owner_key IS NOT NULL AND expires_at > ?2";
        let doing = format!("reading namespace '{namespace}'");
        let fail = |e| self.fail(&doing, e);
        let (ns_row, live, rows) = crate::fork::gate(|| {
            self.with_conn(|conn| {
                let tx = conn.transaction().map_err(fail)?;
                let ns_row: Option<NamespaceRow> = tx
                    .query_row(SELECT_NAMESPACE, [namespace], |r| {
                        Ok((
                            r.get(0)?,
                            r.get(1)?,
                            r.get(2)?,
                            r.get(3)?,
                            r.get(4)?,
                            r.get(5)?,
                        ))
                    })
                    .optional()
                    .map_err(fail)?;
                let mut live = Vec::new();
                let rows = match ask {
                    None => tx
                        .prepare_cached(&format!(
                            "SELECT {SLOT_COLUMNS} FROM cosid_slot WHERE namespace = ?1 ORDER BY slot"
                        ))
                        .and_then(|mut stmt| {
                            stmt.query_map([namespace], SlotRow::from_row)?
                                .collect::<rusqlite::Result<Vec<_>>>()
                        })
                        .map_err(fail)?,
                    Some(ask) => {
                        live = tx
                            .prepare_cached(&format!(
                                "SELECT slot FROM cosid_slot WHERE namespace = ?1 AND {LIVE}"
                            ))
                            .and_then(|mut stmt| {
                                stmt.query_map(params![namespace, store_now], |r| r.get(0))?
                                    .collect::<rusqlite::Result<Vec<u32>>>()
                            })
                            .map_err(fail)?;
                        let covered = ns_row.as_ref().map_or(0, |row| {
                            ask.covered_below(u32::try_from(row.1).unwrap_or(0), live.len())
                        });
                        tx.prepare_cached(&format!(
                            "SELECT {SLOT_COLUMNS} FROM cosid_slot WHERE namespace = ?1 AND \
                             (slot = ?3 OR owner_key = ?4 OR last_owner_key = ?4 \
                              OR (slot < ?5 AND NOT ({LIVE}))) ORDER BY slot"
                        ))
                        .and_then(|mut stmt| {
                            stmt.query_map(
                                params![
                                    namespace,
                                    store_now,
                                    ask.preferred_slot,
                                    ask.owner_key,
                                    covered
                                ],
                                SlotRow::from_row,
                            )?
                            .collect::<rusqlite::Result<Vec<_>>>()
                        })
                        .map_err(fail)?
                    }
                };
                tx.commit().map_err(fail)?;
                Ok((ns_row, live, rows))
            })
        })?;
        Ok((
            ns_row
                .map(|row| self.decode_namespace(namespace, row))
                .transpose()?,
            live,
            rows.into_iter()
                .map(|row| self.decode_slot(namespace, row))
                .collect::<Result<_>>()?,
        ))
    }

    /// Runs `f` on the connection to the file the path names now. A file deleted or replaced
    /// since the last call is noticed here, on every primitive: the connection is opened again
    /// on what the path names (creating a new file if there is none), so a holder's next
    /// renewal finds its lease gone instead of renewing it in a file nobody else sees.
    fn with_conn<R>(&self, f: impl FnOnce(&mut Connection) -> Result<R>) -> Result<R> {
        self.with_state(|state| f(&mut state.open.conn))
    }

    /// [`SqliteStore::with_conn`] with the whole state: the connection to the file the path
    /// names now, the sidecar the path names now, reconciled if either changed.
    fn with_state<R>(&self, f: impl FnOnce(&mut State) -> Result<R>) -> Result<R> {
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let Some(state) = guard.as_mut() else {
            return Err(Error::store(format!(
                "SQLite store '{}' is closed",
                self.path.display()
            )));
        };
        // A panic while a transaction was open would leave it open; never build on it.
        if !state.open.conn.is_autocommit() {
            let _ = state.open.conn.execute_batch("ROLLBACK");
        }
        let named = file_id(&self.path)?;
        if named != Some(state.open.file) {
            keep_wal_names(&state.open.conn);
            // If the new connection cannot be opened, the old one stays (it is never used while
            // the path names another file), and the next call tries again.
            let new = connect(&self.path)?;
            // A file of another lineage, or one whose counter went back below writes this
            // store made or saw: what this store's clients hold may be forgotten.
            let own_loss = new.lineage != state.open.lineage || new.seen < state.open.seen;
            if own_loss {
                let now = self.clock.now_ms();
                state.lost_at = Some(state.lost_at.map_or(now, |t| t.max(now)));
            }
            state.open = new;
            state.pending = Some(state.pending.unwrap_or(false) || own_loss);
        }
        if !state.live.still_named()? {
            // Deleted or replaced: lock what the path names, so that newcomers see this store.
            state.live = Live::open(&self.path, BUSY_TIMEOUT)?;
            state.pending.get_or_insert(false);
        }
        if let Some(own_loss) = state.pending {
            reconcile(&self.path, state, own_loss, self.clock.now_ms())?;
            state.pending = None;
        }
        f(state)
    }

    fn fail(&self, doing: &str, e: rusqlite::Error) -> Error {
        sqlite_error(&self.path, doing, e)
    }

    fn malformed(&self, namespace: &str, what: &str) -> Error {
        Error::store(format!(
            "SQLite store '{}': namespace '{namespace}' holds a malformed record ({what}); the \
             file was edited by hand or is corrupt: restore it from a backup",
            self.path.display()
        ))
    }

    fn decode_slot(&self, namespace: &str, row: SlotRow) -> Result<Versioned<SlotRecord>> {
        let bad = |what: String| self.malformed(namespace, &what);
        let slot = u32::try_from(row.slot).map_err(|_| bad(format!("slot {}", row.slot)))?;
        let owner = match (row.owner_key, row.owner_incarnation) {
            (Some(key), Some(inc)) => {
                let incarnation = uuid::Uuid::parse_str(&inc).map_err(|_| {
                    bad(format!(
                        "slot {slot}: owner incarnation '{inc}' is not a UUID"
                    ))
                })?;
                Some(Owner { key, incarnation })
            }
            (None, None) => None,
            _ => {
                return Err(bad(format!(
                    "slot {slot}: an owner key without an incarnation or the reverse"
                )))
            }
        };
        Ok(Versioned {
            value: SlotRecord {
                slot,
                owner,
                last_owner_key: row.last_owner_key,
                fence: u64::try_from(row.fence)
                    .map_err(|_| bad(format!("slot {slot}: fence {}", row.fence)))?,
                expires_at: row.expires_at,
                floor: row.floor,
                ceiling: row.ceiling,
                next_floor: row.next_floor,
            },
            version: u64::try_from(row.version)
                .map_err(|_| bad(format!("slot {slot}: version {}", row.version)))?,
        })
    }

    fn decode_namespace(
        &self,
        namespace: &str,
        (version, limit, tolerance_ms, not_before_ms, layout, ttl_ms): NamespaceRow,
    ) -> Result<Versioned<NamespaceRecord>> {
        let bad = |what: String| self.malformed(namespace, &what);
        let layout = match layout {
            Some(text) => {
                Some(IdLayout::decode(&text).ok_or_else(|| bad(format!("layout '{text}'")))?)
            }
            None => None,
        };
        Ok(Versioned {
            value: NamespaceRecord {
                limit: u32::try_from(limit).map_err(|_| bad(format!("limit {limit}")))?,
                tolerance_ms,
                not_before_ms,
                layout,
                ttl_ms,
            },
            version: u64::try_from(version)
                .map_err(|_| bad(format!("namespace version {version}")))?,
        })
    }

    /// Within a `BEGIN IMMEDIATE` transaction: the next value of the file-wide version counter.
    /// The version of the row `sql` selects, or `None` when there is none: what a
    /// compare-and-set compares with its expected version.
    fn version_of(
        &self,
        tx: &Transaction<'_>,
        sql: &str,
        params: impl rusqlite::Params,
        doing: &str,
    ) -> Result<Option<u64>> {
        let v: Option<i64> = tx
            .query_row(sql, params, |r| r.get(0))
            .optional()
            .map_err(|e| self.fail(doing, e))?;
        Ok(v.map(|v| v as u64))
    }

    fn next_version(&self, tx: &Transaction<'_>, doing: &str) -> Result<i64> {
        tx.query_row(NEXT_VERSION, [], |r| r.get(0))
            .map_err(|e| self.fail(doing, e))
    }

    /// The one compare-and-set both records share: in a `BEGIN IMMEDIATE` transaction, when the
    /// version `current_sql` selects with `key` is `expected`, takes the next version, lets
    /// `write` store the record with it and commits. Returns the new version, or `None` when the
    /// version had changed and nothing was written.
    fn compare_and_set(
        &self,
        doing: &str,
        expected: Option<u64>,
        current_sql: &str,
        key: impl rusqlite::Params,
        write: impl FnOnce(&Transaction<'_>, i64) -> rusqlite::Result<usize>,
    ) -> Result<Option<u64>> {
        crate::fork::gate(|| {
            self.with_state(|state| {
                let tx = state
                    .open
                    .conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(|e| self.fail(doing, e))?;
                let current = self.version_of(&tx, current_sql, key, doing)?;
                if current != expected {
                    // Dropping the transaction rolls it back: nothing is written.
                    return Ok(None);
                }
                let version = self.next_version(&tx, doing)?;
                write(&tx, version).map_err(|e| self.fail(doing, e))?;
                tx.commit().map_err(|e| self.fail(doing, e))?;
                // A file deleted or replaced after the check in `with_state` took this write
                // into a file nobody reads again. Its outcome is then reported unknown, as a
                // lost reply would be, so the client never uses a ceiling written after the
                // file was lost: every ceiling in use was written before the moment a store
                // that finds the loss reports (`started_at`).
                if file_id(&self.path).ok().flatten() != Some(state.open.file) {
                    return Err(Error::store(format!(
                        "SQLite store '{}': the file was deleted or replaced during the \
                         {doing}, so the write went to a file nobody reads; the next try uses \
                         the file the path names now",
                        self.path.display()
                    )));
                }
                state.open.seen = state.open.seen.max(version);
                // After the commit (the module doc of `live` says why): the sidecar's mark
                // follows the counter. The write is done whatever happens here; a failure is
                // tried again before the next primitive.
                if reconcile(&self.path, state, false, self.clock.now_ms()).is_err() {
                    state.pending = Some(false);
                }
                Ok(Some(version as u64))
            })
        })
    }
}

/// Closing the last connection to a file deletes its `-wal` and `-shm` by name; once the path
/// names another file, those names may be that file's. Tells SQLite to leave them.
fn keep_wal_names(conn: &Connection) {
    let mut keep: std::os::raw::c_int = 1;
    // SAFETY: the handle is valid while `conn` lives; SQLite reads one int through the pointer.
    unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&mut keep as *mut std::os::raw::c_int).cast(),
        );
    }
}

/// The mode of a new store file: 0660 in a setgid directory (one set up for a group of
/// services), 0600 anywhere else.
fn new_file_mode(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.mode() & 0o2000 != 0 => 0o660,
        _ => 0o600,
    }
}

/// Opens `path` (creating its directory, mode 0700, and the file, mode 0600, if missing), sets
/// the connection up and creates or checks the schema. Returns the connection with the
/// identity of the file it opened.
fn connect(path: &Path) -> Result<Open> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| {
                Error::store(format!(
                    "SQLite store '{}': cannot create its directory '{}': {e}; create it or \
                     choose another path",
                    path.display(),
                    parent.display()
                ))
                .permanent()
            })?;
    }
    // Create the file ourselves, so its mode is 0600 whatever the umask (SQLite would create it
    // 0644 less the umask); its `-wal` and `-shm` files take the database file's mode. An
    // existing file keeps its mode and owner (a store shared by a group is set up that way). In
    // a directory set up for a group (setgid, as `install -d -m 2770 -g cosid DIR` makes it) the
    // new file is 0660, so that every member of that group can open it.
    let mode = new_file_mode(path);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
    {
        Ok(f) => {
            // The umask may have taken bits away, never added any; say exactly what we mean.
            f.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| {
                    Error::store(format!(
                        "SQLite store '{}': cannot set the new file's mode to {mode:o}: {e}",
                        path.display()
                    ))
                    .permanent()
                })?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        // Anything else (a directory in the way, no permission) is reported by the open below,
        // with SQLite's reason and the hint that goes with it.
        Err(_) => {}
    }
    let fail = |doing: &str, e: rusqlite::Error| sqlite_error(path, doing, e);
    // No URI parsing (a path is a path); the store's mutex serializes use of the connection.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn =
        Connection::open_with_flags(path, flags).map_err(|e| fail("opening the file", e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| fail("setting the busy timeout", e))?;
    // Before anything is written: a database of another application is refused untouched.
    check_not_foreign(&conn, path)?;
    set_wal(&conn).map_err(|e| fail("switching to WAL journal mode", e))?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| fail("setting synchronous=FULL", e))?;
    // macOS's fsync leaves the data in the drive's cache; F_FULLFSYNC does not. A no-op
    // elsewhere.
    conn.pragma_update(None, "fullfsync", true)
        .map_err(|e| fail("setting fullfsync", e))?;
    init_schema(&mut conn, path)?;
    let (lineage, seen) = read_meta(&conn, path)?;
    // The file SQLite opened is the one the path names now (a replacement between the open and
    // here is noticed at the next call).
    let m = std::fs::metadata(path).map_err(|e| {
        Error::store(format!(
            "SQLite store '{}': the file vanished while it was being opened: {e}",
            path.display()
        ))
    })?;
    Ok(Open {
        conn,
        file: (m.dev(), m.ino()),
        lineage,
        seen,
    })
}

/// The identity `(device, inode)` of the file `path` names, `None` when there is none.
fn file_id(path: &Path) -> Result<Option<(u64, u64)>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some((m.dev(), m.ino()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::store(format!(
            "SQLite store '{}': cannot check that the file is still there: {e}; check the \
             permissions of its directory",
            path.display()
        ))),
    }
}

/// The file's lineage and version counter, in one read transaction.
fn read_meta(conn: &Connection, path: &Path) -> Result<(i64, i64)> {
    // After every write: a cached statement.
    conn.prepare_cached(
        "SELECT (SELECT value FROM cosid_meta WHERE key = 'lineage'), \
         (SELECT value FROM cosid_meta WHERE key = 'last_version')",
    )
    .and_then(|mut stmt| {
        stmt.query_row([], |r| {
            Ok((
                r.get::<_, Option<i64>>(0)?.unwrap_or(0),
                r.get::<_, Option<i64>>(1)?.unwrap_or(0),
            ))
        })
    })
    .map_err(|e| sqlite_error(path, "reading the file's lineage and version counter", e))
}

/// Reconciles the sidecar with the file `state` has open ([`Live::reconcile`]): the latest
/// moment a store found writes lost, as the sidecar records it.
fn reconcile(path: &Path, state: &State, own_loss: bool, now: i64) -> Result<Option<i64>> {
    state.live.reconcile(
        || read_meta(&state.open.conn, path),
        own_loss,
        now,
        BUSY_TIMEOUT,
    )
}

/// Refuses a database that is not a cosid store: another `application_id`, or tables (views,
/// indexes, triggers) of its own that are not cosid's. An empty database is taken.
fn check_not_foreign(conn: &Connection, path: &Path) -> Result<()> {
    let doing = "checking that the file is a cosid store";
    let fail = |e: rusqlite::Error| sqlite_error(path, doing, e);
    let app_id: i64 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(fail)?;
    if app_id == APPLICATION_ID {
        return Ok(());
    }
    if app_id != 0 {
        return Err(Error::store(format!(
            "SQLite store '{}': the file is a SQLite database of another application \
             (application_id {app_id:#x}); point sqlite:// at a file of its own",
            path.display()
        ))
        .permanent());
    }
    let mut stmt = conn
        .prepare(
            "SELECT name FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
             AND name NOT IN ('cosid_meta', 'cosid_namespace', 'cosid_slot') ORDER BY name",
        )
        .map_err(fail)?;
    let foreign: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(fail)?;
    if let Some(first) = foreign.first() {
        return Err(Error::store(format!(
            "SQLite store '{}': the file is a SQLite database of another application (it has \
             {} table(s) or other objects that are not cosid's, such as '{}'); point sqlite:// \
             at a file of its own",
            path.display(),
            foreign.len(),
            first.escape_debug()
        ))
        .permanent());
    }
    Ok(())
}

/// Turns on WAL, waiting out other connections that hold the file (switching the journal mode
/// of a new file needs it to themselves, and SQLite does not always call the busy handler for
/// it). Safety does not depend on WAL; it lets readers run beside the writer.
fn set_wal(conn: &Connection) -> rusqlite::Result<()> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)) {
            Ok(_) => return Ok(()),
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                ) && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Creates the schema if the file has none; checks its version otherwise. One `BEGIN
/// IMMEDIATE` transaction, so processes opening a new file at once create it exactly once.
fn init_schema(conn: &mut Connection, path: &Path) -> Result<()> {
    let fail = |doing: &str, e: rusqlite::Error| sqlite_error(path, doing, e);
    let doing = "creating or checking the schema";
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| fail(doing, e))?;
    // Again inside the write lock: another application may have written the file meanwhile.
    check_not_foreign(&tx, path)?;
    tx.execute_batch(CREATE_META).map_err(|e| fail(doing, e))?;
    let version: Option<i64> = tx
        .query_row(
            "SELECT value FROM cosid_meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| fail(doing, e))?;
    // The file's lineage (the sidecar tells files apart by it): one random value written once,
    // when the file is created, or when a file written before lineages is first opened.
    let lineage = (uuid::Uuid::new_v4().as_u128() as u64 >> 1) as i64;
    match version {
        Some(SCHEMA_VERSION) => {}
        Some(1) => {
            // Version 2 records the id layout per namespace; records of version 1 have none
            // until their first runtime of this version writes its own.
            tx.execute_batch(
                "ALTER TABLE cosid_namespace ADD COLUMN layout TEXT;
                 ALTER TABLE cosid_namespace ADD COLUMN ttl_ms INTEGER;
                 UPDATE cosid_meta SET value = 3 WHERE key = 'schema_version';",
            )
            .map_err(|e| fail(doing, e))?;
        }
        Some(2) => {
            // Version 3 records the lease ttl per namespace, for the restart guard; records of
            // older versions have none until their first runtime of this version writes its
            // own.
            tx.execute_batch(
                "ALTER TABLE cosid_namespace ADD COLUMN ttl_ms INTEGER;
                 UPDATE cosid_meta SET value = 3 WHERE key = 'schema_version';",
            )
            .map_err(|e| fail(doing, e))?;
        }
        Some(v) if v > SCHEMA_VERSION => {
            return Err(Error::store(format!(
                "SQLite store '{}' has schema version {v}, written by a newer cosid; this \
                 cosid knows schema versions up to {SCHEMA_VERSION}: upgrade cosid, or use \
                 another file",
                path.display()
            ))
            .permanent())
        }
        Some(v) => {
            return Err(Error::store(format!(
                "SQLite store '{}' has the unknown schema version {v}; it was not written by \
                 cosid: point sqlite:// at a file of its own",
                path.display()
            ))
            .permanent())
        }
        None => {
            tx.execute_batch(CREATE_TABLES)
                .map_err(|e| fail(doing, e))?;
            let seed = (uuid::Uuid::new_v4().as_u128() as u64 >> 2) as i64;
            tx.execute(
                "INSERT INTO cosid_meta (key, value) VALUES ('schema_version', ?1), \
                 ('last_version', ?2)",
                params![SCHEMA_VERSION, seed],
            )
            .map_err(|e| fail(doing, e))?;
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(|e| fail(doing, e))?;
        }
    }
    tx.execute(
        "INSERT OR IGNORE INTO cosid_meta (key, value) VALUES ('lineage', ?1)",
        [lineage],
    )
    .map_err(|e| fail(doing, e))?;
    tx.commit().map_err(|e| fail(doing, e))
}

/// A store error naming the file, what was being done, SQLite's reason, and the fix.
fn sqlite_error(path: &Path, doing: &str, e: rusqlite::Error) -> Error {
    let hint = match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            "; the file is corrupt or not a SQLite database: restore it from a backup, or move \
             it aside and run `cosid migrate --not-before TIME` (a time after the last id \
             issued) on the new file, so that no window restarts below ids already issued"
        }
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            "; another connection held the file's lock for longer than the 5s busy timeout: \
             look for a process stuck holding it"
        }
        Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied | ErrorCode::ReadOnly) => {
            "; check that the path names a file (not a directory) this process may read and \
             write, in a writable directory"
        }
        Some(ErrorCode::DiskFull) => "; free some disk space",
        _ => "",
    };
    let error = Error::store(format!(
        "SQLite store '{}': {doing} failed: {e}{hint}",
        path.display()
    ));
    // What a retry cannot cure: a file this process may not write, or that is not a database.
    match e.sqlite_error_code() {
        Some(
            ErrorCode::ReadOnly
            | ErrorCode::PermissionDenied
            | ErrorCode::NotADatabase
            | ErrorCode::DatabaseCorrupt
            | ErrorCode::AuthorizationForStatementDenied,
        ) => error.permanent(),
        _ => error,
    }
}

fn to_i64(value: u64, what: &str, path: &Path) -> Result<i64> {
    i64::try_from(value).map_err(|_| {
        Error::invalid(format!(
            "SQLite store '{}': {what} {value} is larger than SQLite's largest integer",
            path.display()
        ))
    })
}

impl SlotStore for SqliteStore {
    fn describe(&self) -> String {
        crate::fork::gate(|| format!("sqlite://{}", self.path.display()))
    }

    fn snapshot(&self, namespace: &str) -> Result<NamespaceSnapshot> {
        let store_now = self.clock.now_ms();
        let (namespace_rec, _, slots) = self.read_namespace(namespace, store_now, None)?;
        Ok(NamespaceSnapshot {
            namespace: namespace_rec,
            slots: Snapshot { store_now, slots },
        })
    }

    fn candidates(&self, namespace: &str, ask: &CandidateAsk<'_>) -> Result<CandidateView> {
        let store_now = self.clock.now_ms();
        let (namespace, live, records) = self.read_namespace(namespace, store_now, Some(ask))?;
        Ok(CandidateView {
            covered_below: namespace
                .as_ref()
                .map_or(0, |n| ask.covered_below(n.value.limit, live.len())),
            namespace,
            store_now,
            live,
            records,
        })
    }

    fn cas_namespace(&self, namespace: &str, write: NamespaceWrite<'_>) -> Result<Option<u64>> {
        let Cas { expected, record } = write;
        let doing = format!("compare-and-set of namespace '{namespace}'");
        self.compare_and_set(
            &doing,
            expected,
            "SELECT version FROM cosid_namespace WHERE namespace = ?1",
            params![namespace],
            |tx, version| {
                tx.execute(
                    UPSERT_NAMESPACE,
                    params![
                        namespace,
                        version,
                        record.limit,
                        record.tolerance_ms,
                        record.not_before_ms,
                        record.layout.map(|l| l.encode()),
                        record.ttl_ms
                    ],
                )
            },
        )
    }

    fn read_slot(&self, namespace: &str, slot: u32) -> Result<SlotRead> {
        let doing = format!("reading slot {slot} of namespace '{namespace}'");
        let now = self.clock.now_ms();
        let row = crate::fork::gate(|| {
            self.with_conn(|conn| {
                conn.prepare_cached(&format!(
                    "SELECT {SLOT_COLUMNS} FROM cosid_slot WHERE namespace = ?1 AND slot = ?2"
                ))
                .and_then(|mut stmt| {
                    stmt.query_row(params![namespace, slot], SlotRow::from_row)
                        .optional()
                })
                .map_err(|e| self.fail(&doing, e))
            })
        })?;
        Ok((
            now,
            row.map(|row| self.decode_slot(namespace, row))
                .transpose()?,
        ))
    }

    fn cas_slot(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<u64>> {
        let Cas { expected, record } = write;
        let doing = format!(
            "compare-and-set of slot {} of namespace '{namespace}'",
            record.slot
        );
        let fence = to_i64(record.fence, "fence", &self.path)?;
        self.compare_and_set(
            &doing,
            expected,
            "SELECT version FROM cosid_slot WHERE namespace = ?1 AND slot = ?2",
            params![namespace, record.slot],
            |tx, version| {
                let (owner_key, incarnation) = match &record.owner {
                    Some(o) => (
                        Some(o.key.as_str()),
                        Some(o.incarnation.hyphenated().to_string()),
                    ),
                    None => (None, None),
                };
                tx.execute(
                    UPSERT_SLOT,
                    params![
                        namespace,
                        record.slot,
                        version,
                        owner_key,
                        incarnation,
                        record.last_owner_key,
                        fence,
                        record.expires_at,
                        record.floor,
                        record.ceiling,
                        record.next_floor
                    ],
                )
            },
        )
    }

    fn deletes_slots(&self) -> bool {
        true
    }

    /// One transaction: the version checked, then the row deleted (a version is spent, as by
    /// every write, so the sidecar's mark follows the counter).
    fn delete_slot(&self, namespace: &str, slot: u32, expected: u64) -> Result<bool> {
        let doing = format!("deleting slot {slot} of namespace '{namespace}'");
        let deleted = self.compare_and_set(
            &doing,
            Some(expected),
            "SELECT version FROM cosid_slot WHERE namespace = ?1 AND slot = ?2",
            params![namespace, slot],
            |tx, _| {
                tx.execute(
                    "DELETE FROM cosid_slot WHERE namespace = ?1 AND slot = ?2",
                    params![namespace, slot],
                )
            },
        )?;
        Ok(deleted.is_some())
    }

    /// The store clock (the host's) is read once the write is committed: a write that waited
    /// for the file's lock reports the time it was made, not the time it was asked for.
    fn host_clock_ms(&self) -> Option<i64> {
        Some(self.clock.now_ms())
    }

    /// The latest moment at which the file may have forgotten writes that stores still live
    /// may issue from: when a store found the file deleted or replaced (by a new file, or a
    /// backup older than the writes stores recorded) while another store held the sidecar, or
    /// when this store found its own file so. `None` on a fresh machine, while the file stays,
    /// and for a file replaced while no store was live. The module doc says how.
    fn started_at(&self, _namespace: &str) -> Result<Option<i64>> {
        crate::fork::gate(|| {
            self.with_state(|state| {
                let recorded = reconcile(&self.path, state, false, self.clock.now_ms())?;
                Ok(recorded.max(state.lost_at))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn round_trips_records_and_refuses_stale_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/dir/slots.db");
        let store = SqliteStore::open_with_clock(&path, ManualClock::shared(1_234)).unwrap();
        let rec = SlotRecord {
            owner: Some(Owner::new("h:1")),
            last_owner_key: Some("h:1".into()),
            fence: 7,
            ..SlotRecord::vacant(5)
        };
        let v1 = store
            .cas_slot("ns", SlotWrite::new(None, &rec))
            .unwrap()
            .unwrap();
        assert_eq!(
            store.cas_slot("ns", SlotWrite::new(None, &rec)).unwrap(),
            None
        );
        let (now, got) = store.read_slot("ns", 5).unwrap();
        assert_eq!(now, 1_234);
        assert_eq!(
            got,
            Some(Versioned {
                value: rec.clone(),
                version: v1
            })
        );
        let v2 = store
            .cas_slot("ns", SlotWrite::new(Some(v1), &rec))
            .unwrap()
            .unwrap();
        assert_ne!(v1, v2);
        assert_eq!(
            store
                .cas_slot("ns", SlotWrite::new(Some(v1), &rec))
                .unwrap(),
            None
        );
        assert_eq!(
            format!("{store:?}"),
            format!("SqliteStore {{ path: {path:?}, .. }}")
        );
        assert_eq!(store.describe(), format!("sqlite://{}", path.display()));
    }

    #[test]
    fn a_directory_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = SqliteStore::open(dir.path()).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Store);
        assert!(
            e.message().contains(&dir.path().display().to_string()),
            "{e}"
        );
    }
}
