//! The store conformance suite on `sqlite://`, and what only the SQLite store has: processes
//! sharing one file, a file that is corrupt, of a newer schema or of another application,
//! durability across reopening, a file deleted under its users, and the schema created by many
//! openers at once.

#![cfg(feature = "sqlite")]

mod conformance;

use conformance::{acquire, acquire_with, client, request, unique_namespace, LONG};
use cosid_core::lease::{AcquireRequest, Owner, Refusal, Renewal};
use cosid_core::store::sqlite::SqliteStore;
use cosid_core::store::{self, SharedStore, SlotStore};
use cosid_core::{ErrorKind, ManualClock};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

static SHARED_DIR: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_shared_dir() {
    if let Some(dir) = SHARED_DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
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
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("slots.db");
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
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("slots.db");
    let ns = unique_namespace("connections");
    const N: usize = 16;
    let barrier = Arc::new(Barrier::new(N));
    let threads: Vec<_> = (0..N)
        .map(|i| {
            let (db, ns, barrier) = (db.clone(), ns.clone(), barrier.clone());
            std::thread::spawn(move || {
                let c = client(&open(&db), &ns, 4, LONG);
                barrier.wait();
                acquire(&c, &Owner::new(format!("t{i}"))).lease.slot
            })
        })
        .collect();
    let slots: HashSet<u32> = threads.into_iter().map(|t| t.join().unwrap()).collect();
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
    let barrier = Arc::new(Barrier::new(N));
    let threads: Vec<_> = (0..N)
        .map(|i| {
            let (db, ns, barrier) = (db.clone(), ns.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let store: SharedStore = Arc::new(SqliteStore::open(&db)?);
                let c = client(&store, &ns, 4, LONG);
                c.acquire(&request(&Owner::new(format!("t{i}"))))
                    .map(|a| a.lease.slot)
            })
        })
        .collect();
    let slots: HashSet<u32> = threads
        .into_iter()
        .map(|t| {
            t.join()
                .unwrap()
                .unwrap_or_else(|e| panic!("every opener succeeds: {e}"))
        })
        .collect();
    assert_eq!(slots, (0..N as u32).collect());
    let conn = rusqlite::Connection::open(&db).unwrap();
    let rows: i64 = conn
        .query_row(
            "SELECT count(*) FROM cosid_meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 1);
}

/// Everything written is there, with the same versions, after the store is closed and opened
/// again; the old lease renews through the new handle.
#[test]
fn reopening_keeps_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("slots.db");
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
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("slots.db");
    let ns = unique_namespace("deleted");
    let (a, old_versions) = {
        let store = open(&db);
        let a = acquire(&client(&store, &ns, 1, LONG), &Owner::new("a")).lease;
        let snap = store.snapshot(&ns).unwrap();
        let mut versions = vec![snap.namespace.unwrap().version];
        versions.extend(snap.slots.slots.iter().map(|r| r.version));
        (a, versions)
    };
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", db.display()));
        if file.exists() {
            std::fs::remove_file(&file).unwrap();
        }
    }
    let store = open(&db);
    let c = client(&store, &ns, 1, LONG);
    match c.renew(&a).unwrap() {
        Renewal::Lost(refusal) => assert_eq!(refusal, Refusal::Vanished),
        Renewal::Renewed(l) => panic!("renewed a lease the store forgot: {l:?}"),
    }
    let again = acquire_with(
        &c,
        AcquireRequest {
            floor_at_least: a.ceiling,
            ..request(&a.owner)
        },
    );
    assert_eq!(again.lease.floor, a.ceiling);
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
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("slots.db");
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
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("slots.db");
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
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("slots.db");
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
        m.contains("schema version 7") && m.contains("up to 1") && m.contains("upgrade cosid"),
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
    let tables: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name LIKE 'cosid%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "nothing of cosid's was written into it");
}

#[test]
fn the_file_is_in_wal_mode_with_a_versioned_schema() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("slots.db");
    let _store = open(&db);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: i64 = conn
        .query_row(
            "SELECT value FROM cosid_meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, 1);
}

#[test]
fn debug_and_describe_show_only_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("slots.db");
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
