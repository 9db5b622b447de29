//! `fork()` after a runtime exists: a child never issues on the parent's slot, never hangs, and
//! never disturbs the parent's lease (the rule in `cosid_core::fork`).
//!
//! Each test forks real children. A child runs a closure, writes what it issued to a file, and
//! leaves with `_exit` (no destructors of the test harness run in it); the parent waits for it
//! with a deadline, so a child that hangs fails the test instead of hanging it.

use cosid_core::lease::SlotRecord;
use cosid_core::store::SharedStore;
use cosid_core::{Config, ErrorKind, Runtime};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn config(store: &str, extra: &str) -> Config {
    Config::from_yaml(&format!(
        "cosid:\n  namespace: forks\n{extra}  machine:\n    lease:\n      store: '{store}'\n      bits: 6\n      ttl: 3s\n"
    ))
    .unwrap()
}

fn sqlite_store(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("slots.db").display())
}

/// What a child reports: its exit code (0 = the closure returned Ok) and the ids it wrote.
struct Child {
    pid: libc::pid_t,
    out: PathBuf,
}

/// Forks; the child runs `f`, which returns the ids it issued or an error text, and exits.
fn fork_child(dir: &Path, name: &str, f: impl FnOnce() -> Result<Vec<u64>, String>) -> Child {
    let out = dir.join(format!("{name}.out"));
    // SAFETY: the child only runs `f` and exits with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let (code, text) = match result {
            Ok(Ok(ids)) => (
                0,
                ids.iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            Ok(Err(e)) => (1, e),
            Err(_) => (2, "panicked".to_string()),
        };
        let _ = std::fs::write(&out, text);
        // SAFETY: ends the child without running the parent's destructors or atexit handlers.
        unsafe { libc::_exit(code) };
    }
    Child { pid, out }
}

impl Child {
    /// Waits (at most `limit`) and returns the child's exit code and output.
    fn wait(self, limit: Duration) -> (i32, String) {
        let deadline = Instant::now() + limit;
        loop {
            let mut status = 0;
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == self.pid {
                let code = if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    -1
                };
                let text = std::fs::read_to_string(&self.out).unwrap_or_default();
                return (code, text);
            }
            if Instant::now() > deadline {
                // SAFETY: our own child.
                unsafe { libc::kill(self.pid, libc::SIGKILL) };
                panic!("child {} hung for {limit:?}", self.pid);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn ids(self, limit: Duration) -> Vec<u64> {
        let (code, text) = self.wait(limit);
        assert_eq!(code, 0, "child failed: {text}");
        text.lines().map(|l| l.parse().unwrap()).collect()
    }
}

fn slot_of(rt: &Runtime, id: u64) -> u32 {
    rt.layout().decompose(id).unwrap().slot
}

fn holders(store: &str) -> Vec<SlotRecord> {
    let s: SharedStore = cosid_core::store::open(store).unwrap();
    s.snapshot("forks")
        .unwrap()
        .slots
        .slots
        .into_iter()
        .map(|v| v.value)
        .filter(|r| r.owner.is_some())
        .collect()
}

fn issue(rt: &Runtime, generator: &str, n: usize) -> Result<Vec<u64>, String> {
    let g = rt.generator(generator).map_err(|e| e.to_string())?;
    (0..n)
        .map(|_| g.next().map_err(|e| e.to_string()))
        .collect()
}

#[test]
fn a_generator_first_asked_for_in_a_child_never_issues_on_the_parents_slot() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    // Under `fail`: the child's new generator refuses.
    let rt = Runtime::new(config(&store, "  fork: fail\n")).unwrap();
    let parent_slot = rt.lease().unwrap().slot;
    let child = fork_child(dir.path(), "fail", || {
        match rt.generator("orders").and_then(|g| g.next()) {
            Err(e) if e.kind() == ErrorKind::Forked => Ok(vec![]),
            other => Err(format!("expected Forked, got {other:?}")),
        }
    });
    assert_eq!(child.wait(Duration::from_secs(30)).0, 0);
    rt.close().unwrap();

    // Under the default: it issues, on a slot of its own, ids the parent never issues.
    let rt = Runtime::new(config(&store, "")).unwrap();
    let parent_slot_2 = rt.lease().unwrap().slot;
    let rt2 = rt.clone();
    let child = fork_child(dir.path(), "new-slot", move || {
        let ids = issue(&rt2, "orders", 20_000)?;
        rt2.close().map_err(|e| e.to_string())?;
        Ok(ids)
    });
    let mine = issue(&rt, "orders", 20_000).unwrap();
    let theirs = child.ids(Duration::from_secs(60));
    assert_eq!(theirs.len(), 20_000);
    assert!(theirs.iter().all(|id| slot_of(&rt, *id) != parent_slot_2));
    let all: HashSet<u64> = mine.iter().chain(theirs.iter()).copied().collect();
    assert_eq!(all.len(), 40_000, "parent and child issued a common id");
    let _ = parent_slot;
    rt.close().unwrap();
}

#[test]
fn an_inherited_runtime_and_its_generators_take_a_new_slot_in_each_child() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    let rt = Runtime::new(config(&store, "")).unwrap();
    let orders = rt.generator("orders").unwrap();
    let parent_slot = rt.lease().unwrap().slot;
    let children: Vec<Child> = (0..2)
        .map(|i| {
            let (rt, orders) = (rt.clone(), orders.clone());
            fork_child(dir.path(), &format!("child{i}"), move || {
                let mut ids = Vec::new();
                for _ in 0..10_000 {
                    ids.push(rt.next().map_err(|e| e.to_string())?);
                    ids.push(orders.next().map_err(|e| e.to_string())?);
                }
                let lease = rt.lease().ok_or("no lease in the child")?;
                if lease.slot == parent_slot {
                    return Err("the child's lease is the parent's slot".into());
                }
                if rt.stats().slot != lease.slot {
                    return Err("stats() describe another slot than the child's".into());
                }
                rt.close().map_err(|e| e.to_string())?;
                Ok(ids)
            })
        })
        .collect();
    let mut mine = Vec::new();
    for _ in 0..10_000 {
        mine.push(rt.next().unwrap());
        mine.push(orders.next().unwrap());
    }
    let mut default_ids = HashSet::new();
    let mut orders_ids = HashSet::new();
    let mut take = |ids: &[u64]| {
        for pair in ids.chunks(2) {
            assert!(default_ids.insert(pair[0]), "duplicate id {}", pair[0]);
            assert!(orders_ids.insert(pair[1]), "duplicate id {}", pair[1]);
        }
    };
    take(&mine);
    for c in children {
        let ids = c.ids(Duration::from_secs(60));
        assert!(ids.iter().all(|id| slot_of(&rt, *id) != parent_slot));
        take(&ids);
    }
    assert_eq!(default_ids.len(), 30_000);
    // The children released their slots when they closed; the parent still holds its own.
    let held = holders(&store);
    assert_eq!(held.len(), 1, "slots still held: {held:?}");
    assert_eq!(held[0].slot, parent_slot);
    assert_eq!(rt.lease().unwrap().slot, parent_slot);
    rt.close().unwrap();
    assert!(holders(&store).is_empty());
}

#[test]
fn dropping_an_inherited_runtime_in_the_child_leaves_the_parent_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    let rt = Runtime::new(config(&store, "")).unwrap();
    let parent = rt.lease().unwrap();
    // The child replaces the inherited runtime with a new one, as the docs once advised: the
    // drop must not join the parent's keeper thread or close its store connection.
    let inherited = rt.clone();
    let store2 = store.clone();
    let child = fork_child(dir.path(), "rebuild", move || {
        drop(inherited);
        let own = Runtime::new(config(&store2, "")).map_err(|e| e.to_string())?;
        let ids = issue(&own, "", 100)?;
        own.close().map_err(|e| e.to_string())?;
        Ok(ids)
    });
    let ids = child.ids(Duration::from_secs(60));
    assert_eq!(ids.len(), 100);
    // Closing (not only dropping) an inherited, unused runtime in a child is quiet too.
    let inherited = rt.clone();
    let child = fork_child(dir.path(), "close", move || {
        inherited.close().map_err(|e| e.to_string())?;
        Ok(vec![])
    });
    assert_eq!(child.wait(Duration::from_secs(30)).0, 0);
    let now = rt.lease().unwrap();
    assert_eq!((now.slot, now.fence), (parent.slot, parent.fence));
    rt.next().unwrap();
    let held = holders(&store);
    assert_eq!(held.len(), 1, "{held:?}");
    rt.close().unwrap();
}

#[test]
fn memory_and_static_slots_refuse_in_a_child() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(config("memory:forks-memory", "")).unwrap();
    let child = fork_child(dir.path(), "memory", || match rt.next() {
        Err(e) if e.kind() == ErrorKind::Forked && e.message().contains("memory") => Ok(vec![]),
        other => Err(format!(
            "expected Forked naming the memory store, got {other:?}"
        )),
    });
    let (code, text) = child.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{text}");
    rt.close().unwrap();

    let state = dir.path().join("state");
    let rt = Runtime::new(
        Config::from_yaml(&format!(
            "cosid:\n  machine:\n    static:\n      slot: 5\n      state-file: '{}'\n      ahead: 2s\n",
            state.display()
        ))
        .unwrap(),
    )
    .unwrap();
    rt.next().unwrap();
    let child = fork_child(dir.path(), "static", || match rt.next() {
        Err(e) if e.kind() == ErrorKind::Forked => Ok(vec![]),
        other => Err(format!("expected Forked, got {other:?}")),
    });
    let (code, text) = child.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{text}");
    rt.close().unwrap();
}

/// Many runtimes whose keepers renew all the time (ttl 300 ms on SQLite), and hundreds of forks
/// landing at random moments of their store calls: no child hangs on a lock the fork copied, and
/// every child gets a slot of its own.
#[test]
fn forks_while_keepers_are_busy_never_hang() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(dir.path());
    let cfg = Config::from_yaml(&format!(
        "cosid:\n  namespace: forks\n  machine:\n    lease:\n      store: '{store}'\n      bits: 8\n      ttl: 300ms\n      tolerance: 100ms\n"
    ))
    .unwrap();
    let runtimes: Vec<Runtime> = (0..16)
        .map(|_| Runtime::new(cfg.clone()).unwrap())
        .collect();
    let mut seen = HashSet::new();
    for i in 0..150 {
        let rt = runtimes[i % runtimes.len()].clone();
        let cfg = cfg.clone();
        let child = fork_child(dir.path(), "stress", move || {
            // Both ways a child gets ids: the inherited runtime, and one built here.
            let a = rt.next().map_err(|e| e.to_string())?;
            let own = Runtime::new(cfg).map_err(|e| e.to_string())?;
            let b = own.next().map_err(|e| e.to_string())?;
            own.close().map_err(|e| e.to_string())?;
            rt.close().map_err(|e| e.to_string())?;
            Ok(vec![a, b])
        });
        for id in child.ids(Duration::from_secs(30)) {
            assert!(seen.insert(id), "duplicate id {id} in fork {i}");
        }
    }
    for rt in runtimes {
        rt.next().unwrap();
        rt.close().unwrap();
    }
}

/// The SQLite store's sidecar lock across a fork (`store::sqlite`, the restart guard): a
/// child's own store takes a lock of its own beside the one it inherited, sees the parent's
/// store live (the file deleted in the child is reported lost there, since the parent's store
/// still holds the sidecar), and neither its stores' close nor its exit releases the parent's
/// lock: the file deleted again afterwards is reported lost at that later moment.
#[test]
fn a_childs_sqlite_store_locks_the_sidecar_for_itself_and_leaves_the_parents_lock() {
    use cosid_core::lease::{AcquireRequest, LeaseClient, Owner, Terms};
    use cosid_core::store::sqlite::SqliteStore;
    use cosid_core::store::SlotStore;
    use cosid_core::ManualClock;
    use std::sync::Arc;
    cosid_core::fork::generation();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("slots.db");
    let remove_db = |db: &Path| {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    };
    let t0 = 1_800_000_000_000;
    let clock = ManualClock::shared(t0);
    let parent: SharedStore = Arc::new(SqliteStore::open_with_clock(&db, clock.clone()).unwrap());
    let terms = Terms {
        ttl_ms: 60_000,
        tolerance_ms: 1_000,
    };
    LeaseClient::new(parent.clone(), "forks", 2, terms)
        .unwrap()
        .acquire(&AcquireRequest {
            owner: Owner::new("parent"),
            preferred_slot: None,
            floor_at_least: 0,
        })
        .unwrap();
    let child_db = db.clone();
    let child = fork_child(dir.path(), "sidecar", move || {
        let open = || {
            SqliteStore::open_with_clock(&child_db, ManualClock::shared(t0))
                .map_err(|e| e.to_string())
        };
        let own = open()?;
        match own.started_at("forks") {
            Ok(None) => {}
            other => return Err(format!("the child's store reported {other:?}")),
        }
        drop(own);
        remove_db(&child_db);
        match open()?.started_at("forks") {
            Ok(Some(t)) if t == t0 => Ok(vec![]),
            other => Err(format!("the parent's store is not seen: {other:?}")),
        }
    });
    assert_eq!(child.ids(Duration::from_secs(60)), Vec::<u64>::new());
    remove_db(&db);
    clock.advance(Duration::from_secs(1));
    let newcomer = SqliteStore::open_with_clock(&db, clock.clone()).unwrap();
    assert_eq!(
        newcomer.started_at("forks").unwrap(),
        Some(t0 + 1_000),
        "the parent's store no longer holds the sidecar"
    );
    drop(parent);
}
