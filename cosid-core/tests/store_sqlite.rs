//! The store conformance suite on `sqlite://`, and what only the SQLite store has: processes
//! sharing one file, a file that is corrupt, of a newer schema or of another application,
//! durability across reopening, a file deleted under its users, and the schema created by many
//! openers at once.

#![cfg(feature = "sqlite")]

mod conformance;

use conformance::{
    acquire, acquire_with, check_renewal_vanished, client, reacquire_above, record, request,
    unique_namespace, LONG,
};
use cosid_core::lease::{AcquireRequest, Owner, Renewal};
use cosid_core::store::sqlite::SqliteStore;
use cosid_core::store::{self, SharedStore, SlotStore};
use cosid_core::{ErrorKind, ManualClock};
use cosid_testkit::race::at_once;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

static SHARED_DIR: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_shared_dir() {
    if let Some(dir) = SHARED_DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A new temporary directory (removed when the handle is dropped) and the path of a store file
/// in it that does not exist yet: where most tests here keep their file.
fn new_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("slots.db");
    (dir, db)
}

/// The schema version a store file records.
const SCHEMA_VERSION: &str = "SELECT value FROM cosid_meta WHERE key = 'schema_version'";

/// The first column of the one row `sql` returns from the file `db`, read with a connection of
/// its own.
fn query<T: rusqlite::types::FromSql>(db: &Path, sql: &str) -> T {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

/// The one file every conformance test of this binary shares (as they would share a server),
/// in a temporary directory that outlives every store and is removed when the process exits.
fn shared_db() -> PathBuf {
    SHARED_DIR
        .get_or_init(|| {
            let dir = tempfile::Builder::new()
                .prefix("cosid-conformance-")
                .tempdir()
                .expect("a temporary directory")
                .keep();
            // SAFETY: registers a plain function that touches only a set-once static.
            unsafe { libc::atexit(remove_shared_dir) };
            dir
        })
        .join("slots.db")
}

conformance_suite!(
    store::open(&format!("sqlite://{}", shared_db().display())).expect("the SQLite store opens")
);

fn open(path: &Path) -> SharedStore {
    Arc::new(SqliteStore::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display())))
}

fn open_err(path: &Path) -> cosid_core::Error {
    let e = SqliteStore::open(path).expect_err("opening should fail");
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(
        e.message().contains(&path.display().to_string()),
        "names the file: {e}"
    );
    e
}

// ----------------------------------------------------------------------------------------------
// Many processes on one file
// ----------------------------------------------------------------------------------------------

const CHILD_DB: &str = "COSID_TEST_CHILD_DB";
const CHILD_NS: &str = "COSID_TEST_CHILD_NS";
const CHILD_GO: &str = "COSID_TEST_CHILD_GO";
const CHILD_BITS: u8 = 3;

/// Not a test of its own: the body of each child process `many_processes_share_one_file`
/// starts (ignored, so a plain run does not run it without its parent).
#[test]
#[ignore = "run by many_processes_share_one_file as a child process"]
fn sqlite_child_process() {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: this test runs only as a child of many_processes_share_one_file")
        })
    };
    let (db, ns, go) = (var(CHILD_DB), var(CHILD_NS), PathBuf::from(var(CHILD_GO)));
    let store = open(Path::new(&db));
    let c = client(&store, &ns, CHILD_BITS, LONG);
    // Start together: wait (bounded) for the parent to say go.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !go.exists() {
        assert!(
            Instant::now() < deadline,
            "no go file {} after 60s",
            go.display()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let got = acquire(&c, &Owner::new(format!("child:{}", std::process::id())));
    println!(
        "COSID-CHILD slot={} fence={} incarnation={}",
        got.lease.slot, got.lease.fence, got.lease.owner.incarnation
    );
}

/// `2^3` processes acquire on one namespace of one file at once: each gets its own slot, and
/// the store shows each slot held by the process that reported it.
#[test]
fn many_processes_share_one_file() {
    let (dir, db) = new_file();
    let go = dir.path().join("go");
    let ns = unique_namespace("processes");
    let exe = std::env::current_exe().expect("the test binary's path");
    let children: Vec<_> = (0..1u32 << CHILD_BITS)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "sqlite_child_process",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_DB, &db)
                .env(CHILD_NS, &ns)
                .env(CHILD_GO, &go)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a child test process")
        })
        .collect();
    std::fs::write(&go, b"go").unwrap();
    let mut held = Vec::new();
    for child in children {
        let out = child.wait_with_output().expect("a child process");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|l| Some(&l[l.find("COSID-CHILD ")? + "COSID-CHILD ".len()..]))
            .unwrap_or_else(|| panic!("no result line from a child:\n{stdout}"));
        let field = |name: &str| {
            line.split(' ')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {name} in '{line}'"))
                .to_string()
        };
        held.push((
            field("slot").parse::<u32>().unwrap(),
            field("fence").parse::<u64>().unwrap(),
            field("incarnation"),
        ));
    }
    held.sort();
    let slots: Vec<u32> = held.iter().map(|h| h.0).collect();
    assert_eq!(slots, (0..1u32 << CHILD_BITS).collect::<Vec<_>>());
    let store = open(&db);
    for (slot, fence, incarnation) in &held {
        let rec = conformance::record(&store, &ns, *slot).value;
        let owner = rec.owner.expect("the child's lease is live");
        assert_eq!(
            (owner.incarnation.to_string(), rec.fence),
            (incarnation.clone(), *fence)
        );
    }
    let e = client(&store, &ns, CHILD_BITS, LONG)
        .acquire(&request(&Owner::new("parent")))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
}

/// Threads each with their own connection (their own store handle) acquire at once.
#[test]
fn connections_of_one_process_get_distinct_slots() {
    let (_dir, db) = new_file();
    let ns = unique_namespace("connections");
    const N: usize = 16;
    let slots: HashSet<u32> = HashSet::from_iter(at_once(N, move |i, go| {
        let c = client(&open(&db), &ns, 4, LONG);
        go.wait();
        acquire(&c, &Owner::new(format!("t{i}"))).lease.slot
    }));
    assert_eq!(slots, (0..N as u32).collect());
}

// ----------------------------------------------------------------------------------------------
// The file
// ----------------------------------------------------------------------------------------------

/// Sixteen openers of one new file (in a directory that does not exist yet) at once: all
/// succeed, the schema is created once, and each gets a slot of its own.
#[test]
fn sixteen_threads_create_the_schema_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("not/yet/there/slots.db");
    let ns = unique_namespace("schema-race");
    const N: usize = 16;
    let results = {
        let db = db.clone();
        at_once(N, move |i, go| {
            go.wait();
            let store: SharedStore = Arc::new(SqliteStore::open(&db)?);
            let c = client(&store, &ns, 4, LONG);
            c.acquire(&request(&Owner::new(format!("t{i}"))))
                .map(|a| a.lease.slot)
        })
    };
    let slots: HashSet<u32> = results
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("every opener succeeds: {e}")))
        .collect();
    assert_eq!(slots, (0..N as u32).collect());
    let rows: i64 = query(
        &db,
        "SELECT count(*) FROM cosid_meta WHERE key = 'schema_version'",
    );
    assert_eq!(rows, 1);
}

/// Everything written is there, with the same versions, after the store is closed and opened
/// again; the old lease renews through the new handle.
#[test]
fn reopening_keeps_every_record() {
    let (_dir, db) = new_file();
    let ns = unique_namespace("durable");
    let (a, before) = {
        let store = open(&db);
        let c = client(&store, &ns, 2, LONG);
        let a = acquire(&c, &Owner::new("a")).lease;
        let b = acquire(&c, &Owner::new("b")).lease;
        assert!(c.release(&b, Some(b.store_now)).unwrap());
        (a, store.snapshot(&ns).unwrap())
    };
    let store = open(&db);
    let after = store.snapshot(&ns).unwrap();
    assert_eq!(after.namespace, before.namespace);
    assert_eq!(after.slots.slots, before.slots.slots);
    let c = client(&store, &ns, 2, LONG);
    match c.renew(&a).unwrap() {
        Renewal::Renewed(r) => assert_eq!((r.slot, r.fence), (a.slot, a.fence)),
        Renewal::Lost(r) => panic!("the reopened store lost the lease: {r:?}"),
    }
}

/// The file deleted (a store restarted empty): the holder's renewal reports the lease
/// vanished, the new file never hands out a version the old one did, and a new window starts
/// above the old ceiling when the holder asks for it.
#[test]
fn store_file_deleted_reports_the_lease_vanished() {
    let (_dir, db) = new_file();
    let ns = unique_namespace("deleted");
    let (a, old_versions) = {
        let store = open(&db);
        let a = acquire(&client(&store, &ns, 1, LONG), &Owner::new("a")).lease;
        let snap = store.snapshot(&ns).unwrap();
        let mut versions = vec![snap.namespace.unwrap().version];
        versions.extend(snap.slots.slots.iter().map(|r| r.version));
        (a, versions)
    };
    remove_store_files(&db);
    let store = open(&db);
    let c = client(&store, &ns, 1, LONG);
    check_renewal_vanished(&c, &a);
    assert_eq!(reacquire_above(&c, &a).floor, a.ceiling);
    let snap = store.snapshot(&ns).unwrap();
    let mut new_versions = vec![snap.namespace.unwrap().version];
    new_versions.extend(snap.slots.slots.iter().map(|r| r.version));
    for v in &new_versions {
        assert!(
            !old_versions.contains(v),
            "version {v} of the new file was handed out by the deleted one: {old_versions:?}"
        );
    }
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_clearly() {
    let (_dir, db) = new_file();
    std::fs::write(&db, "this is not a database\n".repeat(500)).unwrap();
    let e = open_err(&db);
    assert!(
        e.message()
            .contains("corrupt or not a SQLite database: restore it from a backup"),
        "{e}"
    );
    // Nothing was written over it.
    assert!(std::fs::read_to_string(&db)
        .unwrap()
        .starts_with("this is not a database"));
}

#[test]
fn a_truncated_store_file_is_refused_clearly() {
    let (_dir, db) = new_file();
    {
        let store = open(&db);
        let c = client(&store, &unique_namespace("truncated"), 6, LONG);
        for i in 0..64 {
            acquire(&c, &Owner::new(format!("o{i}")));
        }
    }
    let len = std::fs::metadata(&db).unwrap().len();
    assert!(len > 8192, "a store with 64 slots spans pages: {len} bytes");
    let file = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    file.set_len(4096 + 100).unwrap();
    drop(file);
    let e = match SqliteStore::open(&db) {
        Err(e) => e,
        // Page 1 may still read; the first read of a lost page must then fail.
        Ok(store) => store
            .snapshot("anything")
            .expect_err("reading a truncated file should fail"),
    };
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(e.message().contains(&db.display().to_string()), "{e}");
    assert!(e.message().contains("corrupt"), "{e}");
}

#[test]
fn a_newer_schema_is_refused_naming_both_versions() {
    let (_dir, db) = new_file();
    drop(open(&db));
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE cosid_meta SET value = 7 WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
    let e = open_err(&db);
    let m = e.message();
    assert!(
        m.contains("schema version 7") && m.contains("up to 3") && m.contains("upgrade cosid"),
        "{m}"
    );
}

#[test]
fn a_database_of_another_application_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("PRAGMA application_id = 42; CREATE TABLE t (x INTEGER);")
        .unwrap();
    drop(conn);
    let e = open_err(&db);
    assert!(e.message().contains("another application"), "{e}");
    let tables: i64 = query(
        &db,
        "SELECT count(*) FROM sqlite_master WHERE name LIKE 'cosid%'",
    );
    assert_eq!(tables, 0, "nothing of cosid's was written into it");
}

#[test]
fn the_file_is_in_wal_mode_with_a_versioned_schema() {
    let (_dir, db) = new_file();
    let _store = open(&db);
    assert_eq!(query::<String>(&db, "PRAGMA journal_mode"), "wal");
    assert_eq!(query::<i64>(&db, SCHEMA_VERSION), 3);
}

/// A file of schema version 1 (namespace records without a layout) is upgraded in place when
/// opened; its namespaces keep their records and take the layout of their first runtime.
#[test]
fn a_file_of_schema_version_1_is_upgraded_and_keeps_its_records() {
    use cosid_core::lease::record::IdLayout;
    use cosid_core::Layout;
    let (_dir, db) = new_file();
    let ns = unique_namespace("v1");
    {
        let store = open(&db);
        acquire(&client(&store, &ns, 2, LONG), &Owner::new("old"));
    }
    // Back to the schema of version 1, as an earlier cosid wrote it.
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "ALTER TABLE cosid_namespace DROP COLUMN layout;
             ALTER TABLE cosid_namespace DROP COLUMN ttl_ms;
             UPDATE cosid_meta SET value = 1 WHERE key = 'schema_version';",
        )
        .unwrap();
    let store = open(&db);
    let before = store.snapshot(&ns).unwrap();
    assert_eq!(before.namespace.as_ref().unwrap().value.layout, None);
    assert_eq!(before.namespace.as_ref().unwrap().value.ttl_ms, None);
    assert_eq!(before.slots.slots.len(), 1);
    let c = client(&store, &ns, 2, LONG).with_layout(&Layout::MILLIS);
    let rec = c.open_namespace().unwrap();
    assert_eq!(rec.layout, Some(IdLayout::of(&Layout::MILLIS)));
    assert_eq!(rec.ttl_ms, Some(LONG.ttl_ms));
    assert_eq!(query::<i64>(&db, SCHEMA_VERSION), 3);
}

/// A file of schema version 2 (namespace records without a ttl) is upgraded in place when
/// opened; its namespaces keep their records and take the ttl of their first runtime.
#[test]
fn a_file_of_schema_version_2_is_upgraded_and_keeps_its_records() {
    use cosid_core::Layout;
    let (_dir, db) = new_file();
    let ns = unique_namespace("v2");
    {
        let store = open(&db);
        let c = client(&store, &ns, 2, LONG).with_layout(&Layout::MILLIS);
        acquire(&c, &Owner::new("old"));
    }
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "ALTER TABLE cosid_namespace DROP COLUMN ttl_ms;
             UPDATE cosid_meta SET value = 2 WHERE key = 'schema_version';",
        )
        .unwrap();
    let store = open(&db);
    let before = store.snapshot(&ns).unwrap();
    assert_eq!(before.namespace.as_ref().unwrap().value.ttl_ms, None);
    assert_eq!(before.slots.slots.len(), 1);
    let c = client(&store, &ns, 2, LONG).with_layout(&Layout::MILLIS);
    assert_eq!(c.open_namespace().unwrap().ttl_ms, Some(LONG.ttl_ms));
    assert_eq!(query::<i64>(&db, SCHEMA_VERSION), 3);
}

#[test]
fn debug_and_describe_show_only_the_path() {
    let (_dir, db) = new_file();
    let store = SqliteStore::open(&db).unwrap();
    assert_eq!(
        format!("{store:?}"),
        format!("SqliteStore {{ path: {db:?}, .. }}")
    );
    assert_eq!(store.describe(), format!("sqlite://{}", db.display()));
    assert_eq!(store.path(), db);
}

#[test]
fn expiry_follows_the_store_clock_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::shared(1_700_000_000_000);
    let store = store::open_with_clock(
        &format!("sqlite://{}", dir.path().join("slots.db").display()),
        clock.clone(),
    )
    .unwrap();
    conformance::expiry_follows_the_store_clock_exactly(store, &clock);
}

// ----------------------------------------------------------------------------------------------
// Hostile and careless use of the file
// ----------------------------------------------------------------------------------------------

fn remove_store_files(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", db.display()));
        if file.exists() {
            std::fs::remove_file(&file).unwrap();
        }
    }
}

/// The lease of a newcomer `b` on `store` that asks for `slot`: the slot of a holder whose
/// file was deleted under it.
fn newcomer_on(store: &SharedStore, ns: &str, slot: u32) -> cosid_core::lease::SlotLease {
    acquire_with(
        &client(store, ns, 1, LONG),
        AcquireRequest {
            preferred_slot: Some(slot),
            ..request(&Owner::new("b"))
        },
    )
    .lease
}

/// The file deleted while its holder keeps its connection open, and a newcomer creating a
/// fresh file at the same path: the fresh file hands the newcomer the holder's slot from floor
/// 0, so the holder must notice at its next renewal that the path names another file, lose the
/// lease, and acquire again from the file the path names, on another slot above its old
/// ceiling (before, it renewed in the deleted file for as long as it ran).
#[test]
fn a_store_file_deleted_under_its_holder_is_noticed_at_the_next_renewal() {
    let (_dir, db) = new_file();
    let ns = unique_namespace("deleted-under-holder");
    let holder = open(&db);
    let c = client(&holder, &ns, 1, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    remove_store_files(&db);
    let newcomer = open(&db);
    let b = newcomer_on(&newcomer, &ns, a.slot);
    assert_eq!(
        (b.slot, b.floor),
        (a.slot, 0),
        "the fresh file starts the slot over"
    );
    match c.renew(&a).unwrap() {
        Renewal::Lost(_) => {}
        Renewal::Renewed(l) => panic!("renewed a lease in a deleted file: {l:?}"),
    }
    let again = reacquire_above(&c, &a);
    assert_ne!(
        again.slot, b.slot,
        "the newcomer's slot is live in the file"
    );
    assert!(again.floor >= a.ceiling, "{again:?} starts below {a:?}");
    // Both handles now see one file.
    assert_eq!(
        record(&holder, &ns, again.slot),
        record(&newcomer, &ns, again.slot)
    );
}

/// Another file moved over the path (a backup restored, a wrong file copied in) while a holder
/// runs: the holder's next operation reads the file the path names, not the one it opened.
#[test]
fn a_store_file_replaced_under_its_holder_is_noticed_at_the_next_renewal() {
    let (dir, db) = new_file();
    let other = dir.path().join("other.db");
    let ns = unique_namespace("replaced-under-holder");
    let holder = open(&db);
    let c = client(&holder, &ns, 1, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    drop(open(&other));
    // The old file goes with its write-ahead log (SQLite would read an old `-wal` into the new
    // file: docs/stores.md says to remove them together).
    remove_store_files(&db);
    std::fs::rename(&other, &db).unwrap();
    check_renewal_vanished(&c, &a);
}

/// The keeper of a runtime on a file deleted under it marks the window lost at its next
/// renewal (generators stop at once with `SlotLost`), then binds a new slot whose window starts
/// above everything it issued: the newcomer on the fresh file and the old holder never share a
/// slot and a window.
#[test]
fn the_keeper_stops_issuing_when_its_store_file_is_deleted() {
    use cosid_core::lease::{KeeperConfig, LeaseKeeper};
    use cosid_core::{Window, WindowStatus};
    let (_dir, db) = new_file();
    let ns = unique_namespace("keeper-deleted");
    let clock = ManualClock::shared(1_800_000_000_000);
    let holder: SharedStore = Arc::new(SqliteStore::open_with_clock(&db, clock.clone()).unwrap());
    let window = Arc::new(Window::new());
    let ttl = Duration::from_secs(30);
    let keeper = LeaseKeeper::start_standalone(
        client(&holder, &ns, 1, LONG),
        window.clone(),
        clock.clone(),
        KeeperConfig {
            ttl,
            acquire_timeout: ttl,
            preferred_slot: None,
            owner: Owner::new("a"),
        },
    )
    .unwrap();
    let first = keeper.lease().unwrap();
    remove_store_files(&db);
    let newcomer: SharedStore = Arc::new(SqliteStore::open_with_clock(&db, clock.clone()).unwrap());
    let b = newcomer_on(&newcomer, &ns, first.slot);
    assert_eq!(b.slot, first.slot);
    clock.advance(ttl / 3);
    keeper.tick();
    let now = keeper
        .lease()
        .expect("a new lease from the file the path names");
    assert_ne!(now.slot, b.slot);
    assert!(now.floor >= first.ceiling);
    let bound = window.read();
    assert_eq!(bound.status, WindowStatus::Active);
    assert_eq!((bound.slot, bound.floor), (now.slot, now.floor));
}

// ----------------------------------------------------------------------------------------------
// The restart guard: a file deleted or replaced under live holders
// ----------------------------------------------------------------------------------------------

/// The sidecar beside a store file that every open store locks and records the file in.
fn live_file(db: &Path) -> PathBuf {
    PathBuf::from(format!("{}-live", db.display()))
}

/// A store on `db` with the manual `clock`.
fn open_at(db: &Path, clock: &Arc<ManualClock>) -> SharedStore {
    Arc::new(SqliteStore::open_with_clock(db, clock.clone()).unwrap())
}

/// A copy of the store file as it is now, taken as a backup tool would (`VACUUM INTO`).
fn backup_of(db: &Path, to: &Path) {
    rusqlite::Connection::open(db)
        .unwrap()
        .execute("VACUUM INTO ?1", [to.display().to_string()])
        .unwrap();
}

/// The store file (with its `-wal` and `-shm`, leaving the sidecar) replaced by `with`.
fn restore(db: &Path, with: &Path) {
    remove_store_files(db);
    std::fs::rename(with, db).unwrap();
}

const T0: i64 = 1_800_000_000_000;

/// The file deleted under a live holder: a store opened on the path afterwards (a newcomer,
/// which creates a fresh file) reports that writes may have been lost now, so the restart
/// guard floors its windows above every ceiling the holder may still issue up to. So does
/// every later newcomer while the holder lives, at the moment of the loss, not at its own
/// start. Once every store that used the lost file is closed, a newcomer is told nothing.
#[test]
fn a_file_deleted_under_a_live_holder_is_reported_lost_to_newcomers() {
    let (_dir, db) = new_file();
    let ns = unique_namespace("lost-deleted");
    let clock = ManualClock::shared(T0);
    let holder = open_at(&db, &clock);
    acquire(&client(&holder, &ns, 1, LONG), &Owner::new("a"));
    assert_eq!(holder.started_at(&ns).unwrap(), None, "nothing lost yet");
    remove_store_files(&db);
    clock.advance(Duration::from_secs(5));
    let newcomer = open_at(&db, &clock);
    assert_eq!(newcomer.started_at(&ns).unwrap(), Some(T0 + 5_000));
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        open_at(&db, &clock).started_at(&ns).unwrap(),
        Some(T0 + 5_000)
    );
    // The holder notices at its next operation, and its own clients are told too.
    assert_eq!(holder.started_at(&ns).unwrap(), Some(T0 + 10_000));
    drop((holder, newcomer));
    let (_dir, db) = new_file();
    let holder = open_at(&db, &clock);
    acquire(&client(&holder, &ns, 1, LONG), &Owner::new("a"));
    drop(holder);
    remove_store_files(&db);
    assert_eq!(
        open_at(&db, &clock).started_at(&ns).unwrap(),
        None,
        "no holder was live: nobody issues from the deleted file"
    );
}

/// The file replaced by a backup taken before the live holder's last writes: the version
/// counter of the file went back, so a newcomer is told that writes were lost. With the holder
/// closed first, nothing is reported: nobody issues from what the backup forgot.
#[test]
fn a_file_replaced_by_an_older_backup_under_a_live_holder_is_reported_lost() {
    for holder_live in [true, false] {
        let (dir, db) = new_file();
        let copy = dir.path().join("backup.db");
        let ns = unique_namespace("lost-backup");
        let clock = ManualClock::shared(T0);
        let holder = open_at(&db, &clock);
        let c = client(&holder, &ns, 1, LONG);
        let a = acquire(&c, &Owner::new("a")).lease;
        backup_of(&db, &copy);
        clock.advance(Duration::from_secs(20));
        match c.renew(&a).unwrap() {
            Renewal::Renewed(_) => {}
            Renewal::Lost(r) => panic!("{r:?}"),
        }
        // The client holds the store too.
        let holder = if holder_live {
            Some((holder, c))
        } else {
            drop((holder, c));
            None
        };
        restore(&db, &copy);
        clock.advance(Duration::from_secs(1));
        let newcomer = open_at(&db, &clock);
        let expected = holder_live.then_some(T0 + 21_000);
        assert_eq!(newcomer.started_at(&ns).unwrap(), expected, "{holder_live}");
        drop(holder);
    }
}

/// A fresh file with nobody else on it, a second store on the same file, and a file whose
/// stores all closed and opened again: nothing lost, no wait for the first start.
#[test]
fn nothing_is_reported_lost_while_the_file_stays() {
    let (_dir, db) = new_file();
    let ns = unique_namespace("kept");
    let clock = ManualClock::shared(T0);
    let first = open_at(&db, &clock);
    assert_eq!(first.started_at(&ns).unwrap(), None);
    assert!(live_file(&db).exists());
    acquire(&client(&first, &ns, 1, LONG), &Owner::new("a"));
    let second = open_at(&db, &clock);
    assert_eq!(second.started_at(&ns).unwrap(), None);
    acquire(&client(&second, &ns, 1, LONG), &Owner::new("b"));
    assert_eq!(first.started_at(&ns).unwrap(), None);
    drop((first, second));
    assert_eq!(open_at(&db, &clock).started_at(&ns).unwrap(), None);
}

/// The file and its sidecar deleted together (`rm slots.db*`) under a live holder: the holder
/// notices at its next operation, locks a new sidecar and records the loss in it, so every
/// newcomer from then on is told.
#[test]
fn a_holder_records_the_loss_when_the_sidecar_was_deleted_too() {
    let (_dir, db) = new_file();
    let ns = unique_namespace("lost-sidecar");
    let clock = ManualClock::shared(T0);
    let holder = open_at(&db, &clock);
    let c = client(&holder, &ns, 1, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    remove_store_files(&db);
    std::fs::remove_file(live_file(&db)).unwrap();
    clock.advance(Duration::from_secs(3));
    check_renewal_vanished(&c, &a);
    assert!(live_file(&db).exists(), "the holder made a new sidecar");
    clock.advance(Duration::from_secs(3));
    assert_eq!(
        open_at(&db, &clock).started_at(&ns).unwrap(),
        Some(T0 + 3_000)
    );
}

/// End to end with the lease client's restart guard: a holder's file deleted under it, a
/// newcomer asking for the holder's very slot gets a window whose floor lies above the
/// holder's ceiling (before, it started at 0 on the fresh file).
#[test]
fn a_guarded_newcomer_starts_above_the_ceiling_of_a_holder_whose_file_was_deleted() {
    let (_dir, db) = new_file();
    let ns = unique_namespace("guard-deleted");
    let clock = ManualClock::shared(T0);
    let holder = open_at(&db, &clock);
    let a = acquire(&client(&holder, &ns, 1, LONG), &Owner::new("a")).lease;
    remove_store_files(&db);
    clock.advance(Duration::from_secs(1));
    let newcomer = open_at(&db, &clock);
    let b = acquire_with(
        &client(&newcomer, &ns, 1, LONG).with_restart_guard(),
        AcquireRequest {
            preferred_slot: Some(a.slot),
            ..request(&Owner::new("b"))
        },
    )
    .lease;
    assert_eq!(b.slot, a.slot);
    assert!(
        b.floor >= a.ceiling,
        "{b:?} starts below the holder's {a:?}"
    );
}

/// The same with the file replaced by a 20 s old backup that already had the namespace, with
/// short leases (ttl 3 s): the holder renewed every second since the backup, whose copy of
/// its lease has long expired, so the newcomer may take the holder's very slot; the guard must
/// act on an acquisition in an existing namespace too, and start it above the holder's ceiling
/// (without the guard it starts at the backup's stale ceiling).
#[test]
fn a_guarded_newcomer_starts_above_the_ceiling_of_a_holder_whose_file_went_back_to_a_backup() {
    let short = cosid_core::lease::Terms {
        ttl_ms: 3_000,
        tolerance_ms: 1_000,
    };
    let (dir, db) = new_file();
    let copy = dir.path().join("backup.db");
    let ns = unique_namespace("guard-backup");
    let clock = ManualClock::shared(T0);
    let holder = open_at(&db, &clock);
    let c = client(&holder, &ns, 1, short);
    let mut a = acquire(&c, &Owner::new("a")).lease;
    backup_of(&db, &copy);
    for _ in 0..20 {
        clock.advance(Duration::from_secs(1));
        a = match c.renew(&a).unwrap() {
            Renewal::Renewed(l) => l,
            Renewal::Lost(r) => panic!("{r:?}"),
        };
    }
    restore(&db, &copy);
    clock.advance(Duration::from_secs(1));
    let newcomer = open_at(&db, &clock);
    let b = acquire_with(
        &client(&newcomer, &ns, 1, short).with_restart_guard(),
        AcquireRequest {
            preferred_slot: Some(a.slot),
            ..request(&Owner::new("b"))
        },
    )
    .lease;
    assert_eq!(b.slot, a.slot, "the backup's lease on it has expired");
    assert!(
        b.floor >= a.ceiling,
        "{b:?} starts below the holder's {a:?}"
    );
}

/// A database of another application that never set `application_id` (most of them) is
/// refused untouched, naming the file; an empty file is taken.
#[test]
fn a_database_of_another_application_without_an_application_id_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('x');")
        .unwrap();
    let before = std::fs::read(&db).unwrap();
    let e = open_err(&db);
    assert!(
        e.message().contains("another application") && e.message().contains("'users'"),
        "{e}"
    );
    assert!(e.is_permanent(), "{e:?}");
    assert_eq!(std::fs::read(&db).unwrap(), before, "the file is unchanged");
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    drop(open(&empty));
}

const CHILD_UMASK_DIR: &str = "COSID_TEST_CHILD_UMASK_DIR";

/// Not a test of its own: run by `files_are_private_whatever_the_umask` in a child process,
/// because the umask is the whole process's.
#[test]
#[ignore = "run by files_are_private_whatever_the_umask as a child process"]
fn sqlite_umask_child() {
    let dir = PathBuf::from(std::env::var(CHILD_UMASK_DIR).expect("run only by its parent"));
    // SAFETY: umask only changes the process's file-creation mask.
    unsafe { libc::umask(0) };
    let store = open(&dir.join("a/b/slots.db"));
    acquire(
        &client(&store, &unique_namespace("umask"), 1, LONG),
        &Owner::new("u"),
    );
    // A directory set up for a group of services (setgid, 2770).
    use std::os::unix::fs::PermissionsExt;
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o2770)).unwrap();
    drop(open(&shared.join("slots.db")));
    println!("COSID-CHILD done");
}

/// Under umask 000 the directories are created 0700 and the database file (and its `-wal`,
/// `-shm` and `-live`) 0600: no other user may read or write the store. In a setgid directory (one set up
/// for a group of services) the file is 0660: the group shares it, nobody else.
#[test]
fn files_are_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "sqlite_umask_child", "--ignored", "--nocapture"])
        .env(CHILD_UMASK_DIR, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("COSID-CHILD done"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&dir.path().join("a")), 0o700);
    assert_eq!(mode(&dir.path().join("a/b")), 0o700);
    let db = dir.path().join("a/b/slots.db");
    assert_eq!(mode(&db), 0o600);
    // In a setgid directory the group shares the store.
    assert_eq!(mode(&dir.path().join("shared/slots.db")), 0o660);
    // The sidecar every store locks takes the database file's mode.
    assert_eq!(mode(&live_file(&db)), 0o600);
    assert_eq!(mode(&live_file(&dir.path().join("shared/slots.db"))), 0o660);
    for suffix in ["-wal", "-shm"] {
        let f = PathBuf::from(format!("{}{suffix}", db.display()));
        if f.exists() {
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
    }
}

const CHILD_READONLY_DB: &str = "COSID_TEST_CHILD_READONLY_DB";

/// Not a test of its own: run by `a_read_only_store_fails_at_once` as another user.
#[test]
#[ignore = "run by a_read_only_store_fails_at_once as a child process"]
fn sqlite_readonly_child() {
    let db = std::env::var(CHILD_READONLY_DB).expect("run only by its parent");
    let config = cosid_core::Config::from_yaml(&format!(
        "cosid:\n  namespace: ro\n  machine:\n    lease:\n      store: sqlite://{db}\n      \
         acquire-timeout: 10m\n"
    ))
    .unwrap();
    match cosid_core::Runtime::builder().config(config).build() {
        Ok(_) => println!("COSID-CHILD built"),
        Err(e) => println!(
            "COSID-CHILD kind={} permanent={} message={}",
            e.kind(),
            e.is_permanent(),
            e
        ),
    }
}

/// A store file this process may read but not write fails start-up at once with a store error
/// naming the file, instead of being retried for the whole acquire timeout (10 minutes here:
/// the test returns only if nothing retries).
#[test]
fn a_read_only_store_fails_at_once() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let (dir, db) = new_file();
    {
        let store = open(&db);
        acquire(&client(&store, "ro", 10, LONG), &Owner::new("the-writer"));
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    // A copy of this test program where any user may run it (the checkout may be in a folder
    // only root can enter).
    let exe = dir.path().join("child-test-program");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(&exe);
    cmd.args([
        "--exact",
        "sqlite_readonly_child",
        "--ignored",
        "--nocapture",
    ])
    .env(CHILD_READONLY_DB, &db);
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        // Root writes any file: run the child as an unprivileged user.
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| Some(&l[l.find("COSID-CHILD ")? + "COSID-CHILD ".len()..]))
        .unwrap_or_else(|| {
            panic!(
                "no result from the child:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(line.starts_with("kind=store permanent=true"), "{line}");
    assert!(line.contains(&db.display().to_string()), "{line}");
    assert!(!line.contains("acquire-timeout"), "retried: {line}");
}

/// Two runtimes through the public API: the store file is deleted under the first, and the
/// second, creating a fresh file, is granted the first one's slot, but (the restart guard: the
/// first still holds the sidecar) from a floor above the first one's ceiling, not from 0. The
/// first runtime's keeper notices at its next renewal and moves to another slot above its old
/// ceiling, so the two issue disjoint ids (before, the first renewed in the deleted file and
/// both issued on one slot for as long as they ran; then, until the first noticed, both
/// issued on one slot in overlapping windows).
#[test]
fn a_runtime_leaves_its_slot_when_the_store_file_is_deleted_under_it() {
    let (_dir, db) = new_file();
    let config = |preferred: &str| {
        cosid_core::Config::from_yaml(&format!(
            "cosid:\n  namespace: deleted\n  max-wait: 5s\n  machine:\n    lease:\n      \
             store: sqlite://{}\n      ttl: 600ms\n      tolerance: 100ms\n      bits: 1\n\
             {preferred}",
            db.display()
        ))
        .unwrap()
    };
    let a = cosid_core::Runtime::builder()
        .config(config(""))
        .build()
        .unwrap();
    let first = a.binding();
    remove_store_files(&db);
    let b = cosid_core::Runtime::builder()
        .config(config(&format!("      preferred-slot: {}\n", first.slot)))
        .build()
        .unwrap();
    assert_eq!(
        b.binding().slot,
        first.slot,
        "the fresh file hands the newcomer the same slot"
    );
    assert!(
        b.binding().floor >= first.ceiling,
        "the newcomer's window {:?} starts below the holder's {first:?}",
        b.binding()
    );
    // Bounded wait for the holder's keeper (it renews every 200 ms).
    let deadline = Instant::now() + Duration::from_secs(60);
    while a.binding().slot == b.binding().slot {
        assert!(
            Instant::now() < deadline,
            "the holder still shares slot {} with the newcomer after 60s",
            first.slot
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(a.binding().floor >= first.ceiling, "{:?}", a.binding());
    let ids_a: HashSet<u64> = (0..2_000).map(|_| a.next().unwrap()).collect();
    let ids_b: HashSet<u64> = (0..2_000).map(|_| b.next().unwrap()).collect();
    assert!(ids_a.is_disjoint(&ids_b));
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn the_query_filters_the_candidate_view() {
    conformance::candidate_view_is_filtered_by_the_store(&|| {
        store::open(&format!("sqlite://{}", shared_db().display())).expect("the SQLite store opens")
    });
}
