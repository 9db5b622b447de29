//! The store conformance suite and the fault tests on `redis`, against a real Redis server that
//! `cosid-testkit` starts (or the one `COSID_TEST_REDIS_URL` names; the fault tests that stop or
//! empty a server always start their own).
//!
//! Run with `cargo test -p cosid-core --features redis --test store_redis`.

#![cfg(feature = "redis")]

mod conformance;
mod network;

use cosid_core::lease::{Owner, SlotRecord};
use cosid_core::store::redis::RedisStore;
use cosid_core::store::{CandidateAsk, SharedStore, SlotWrite};
use cosid_testkit::Server;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

// A password URL names the user `cosid` (the test server has no users configured: it refuses
// them).
network_store_tests!(
    RedisStore,
    Server::redis,
    cosid_testkit::shared_redis_url,
    "cosid"
);

/// The connections the server at `url` has accepted since it started, as its `INFO stats`
/// counts them (the connection asking included).
fn connections_received(url: &str) -> usize {
    let mut con = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("a direct connection to the test server");
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut con)
        .expect("INFO stats");
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_connections_received in INFO stats: {info}"))
}

/// A handle shares one connection among all its callers, including the first ones: 256
/// threads that call a fresh handle at once open one connection between them, not one each
/// (one each ran into the server's client limit and listen backlog, and callers saw
/// "connection reset by peer").
#[test]
fn callers_of_a_fresh_handle_share_one_connection() {
    let server = Server::redis();
    let url = server.url();
    let before = connections_received(&url);
    let store = open(&url, Duration::from_secs(20)).expect("the store opens");
    let ns = conformance::unique_namespace("one-connection");
    let snapshots = cosid_testkit::race::at_once(256, move |_, go| {
        go.wait();
        store.snapshot(&ns).map(|_| ())
    });
    for s in snapshots {
        s.expect("the snapshot");
    }
    // `before + 1` is the connection that asked for `before`.
    assert_eq!(
        connections_received(&url),
        before + 2,
        "256 callers of one handle are connected by one connection"
    );
}

/// A new master whose version counter is behind the writes a failover lost (here: the counter
/// set back by hand) does not issue their versions again: every write takes at least the
/// server's time in microseconds, which has moved on since.
#[test]
fn versions_stay_above_those_of_writes_a_failover_lost() {
    let url = cosid_testkit::shared_redis_url();
    let store = open(&url, Duration::from_secs(20)).expect("the store opens");
    let ns = conformance::unique_namespace("lost-counter");
    let lost = store
        .cas_slot(
            &ns,
            SlotWrite::new(None, &cosid_core::lease::SlotRecord::vacant(0)),
        )
        .unwrap()
        .expect("a new record is written");
    let mut con = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .expect("a direct connection to the test server");
    let _: () = redis::cmd("SET")
        .arg(format!("cosid:{{{ns}}}:version"))
        .arg(1)
        .query(&mut con)
        .expect("SET");
    let after = store
        .cas_slot(
            &ns,
            SlotWrite::new(None, &cosid_core::lease::SlotRecord::vacant(1)),
        )
        .unwrap()
        .expect("a new record is written");
    assert!(after > lost, "version {after} is not above {lost}");
}

#[test]
fn the_server_filters_the_candidate_view() {
    conformance::candidate_view_is_filtered_by_the_store(&shared);
}

/// The index the Redis store keeps of a namespace's slot records, read raw: the held slots with
/// their scores, the unheld slots, and the slots each (percent-encoded) key names.
#[derive(Debug, PartialEq)]
struct Index {
    held: BTreeMap<String, i64>,
    unheld: BTreeSet<String>,
    keys: BTreeMap<String, BTreeSet<String>>,
}

fn raw(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("a direct connection to the test server")
}

/// The field of a record line after `name` (` owner_key=`, say), up to the next space.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(name)? + name.len();
    line[at..].split(' ').next()
}

/// What the index must hold, worked out from the records themselves.
fn index_of_records(con: &mut redis::Connection, ns: &str) -> Index {
    let records: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(format!("cosid:{{{ns}}}:slots"))
        .query(con)
        .expect("HGETALL");
    let mut index = Index {
        held: BTreeMap::new(),
        unheld: BTreeSet::new(),
        keys: BTreeMap::new(),
    };
    for (slot, line) in records {
        match field(&line, " owner_key=") {
            Some(_) => {
                let expires_at = field(&line, " expires_at=").expect("an expiry");
                index
                    .held
                    .insert(slot.clone(), expires_at.parse().expect("a number"));
            }
            None => {
                index.unheld.insert(slot.clone());
            }
        }
        for name in [" owner_key=", " last_owner_key="] {
            if let Some(key) = field(&line, name) {
                index
                    .keys
                    .entry(key.to_string())
                    .or_default()
                    .insert(slot.clone());
            }
        }
    }
    index
}

/// The index as stored, without the placeholder members (` index`) that keep its keys in
/// existence; `None` when it was never written.
fn stored_index(con: &mut redis::Connection, ns: &str) -> Option<Index> {
    let placeholder = " index";
    let held: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(format!("cosid:{{{ns}}}:held"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(con)
        .expect("ZRANGE held");
    let unheld: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("cosid:{{{ns}}}:unheld"))
        .arg(0)
        .arg(-1)
        .query(con)
        .expect("ZRANGE unheld");
    let keys: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(format!("cosid:{{{ns}}}:keys"))
        .query(con)
        .expect("HGETALL keys");
    if held.is_empty() && unheld.is_empty() && keys.is_empty() {
        return None;
    }
    assert_eq!(keys.get(placeholder).map(String::as_str), Some(","));
    assert!(unheld.iter().any(|s| s == placeholder), "{unheld:?}");
    assert!(held.iter().any(|(s, _)| s == placeholder), "{held:?}");
    Some(Index {
        held: held
            .into_iter()
            .filter(|(s, _)| s != placeholder)
            .map(|(s, score)| (s, score as i64))
            .collect(),
        unheld: unheld.into_iter().filter(|s| s != placeholder).collect(),
        keys: keys
            .into_iter()
            .filter(|(k, _)| k != placeholder)
            .map(|(k, list)| {
                assert!(list.starts_with(',') && list.ends_with(','), "{k}: {list}");
                let slots = list.split(',').filter(|s| !s.is_empty());
                (k, slots.map(String::from).collect())
            })
            .collect(),
    })
}

/// The asks a view is checked with in the index tests: by each key the planted records name,
/// with and without a preferred slot, and for the namespace only.
fn index_asks() -> Vec<CandidateAsk<'static>> {
    let mut asks = vec![CandidateAsk::NAMESPACE_ONLY];
    for key in ["me", "other", "x y=z", "stranger", "nobody"] {
        for (preferred_slot, free_min) in [(None, 64), (Some(60), 3), (Some(2), 0)] {
            asks.push(CandidateAsk {
                owner_key: Some(key),
                preferred_slot,
                free_min,
                free_per_live: 2,
            });
        }
    }
    asks
}

/// A handle on the shared server, a raw connection to it, and a namespace of every kind of
/// record (`conformance::plant_view_records`).
fn planted(case: &str) -> (SharedStore, redis::Connection, String) {
    let store = shared();
    let ns = conformance::plant_view_records(&store, case);
    (store, raw(&cosid_testkit::shared_redis_url()), ns)
}

fn rewrite(store: &SharedStore, ns: &str, slot: u32, change: impl Fn(&mut SlotRecord)) {
    let current = conformance::record(store, ns, slot);
    let mut next = current.value.clone();
    change(&mut next);
    assert!(store
        .cas_slot(ns, SlotWrite::new(Some(current.version), &next))
        .unwrap()
        .is_some());
}

/// Every write of a slot record keeps the index exact (held with the record's expiry, unheld,
/// and the keys each record names, as owner or last owner), and the view read through it is
/// the filtered namespace, whatever the record became: released, taken by another key, holding
/// no key at all, or new.
#[test]
fn the_index_follows_every_write_of_a_slot_record() {
    let (store, mut con, ns) = planted("index-follows");
    let later = conformance::store_clock(&store, &ns) + 7_200_000;
    /// What one write does to the record of a slot before writing it back.
    type Change = Box<dyn Fn(&mut SlotRecord)>;
    let changes: Vec<(u32, Change)> = vec![
        (0, Box::new(|r| r.owner = None)),
        (
            2,
            Box::new(move |r| {
                r.owner = Some(Owner::new("me"));
                r.last_owner_key = Some("me".into());
                r.expires_at = later;
            }),
        ),
        (
            5,
            Box::new(|r| {
                r.owner = Some(Owner::new("x y=z"));
                r.last_owner_key = Some("x y=z".into());
            }),
        ),
        (
            60,
            Box::new(|r| {
                r.owner = None;
                r.last_owner_key = None;
            }),
        ),
        (1, Box::new(move |r| r.expires_at = later)),
        (
            3,
            Box::new(|r| {
                r.owner = Some(Owner::new("other"));
            }),
        ),
    ];
    let check = |con: &mut redis::Connection, after: &str| {
        assert_eq!(
            stored_index(con, &ns).as_ref(),
            Some(&index_of_records(con, &ns)),
            "after {after}"
        );
        for ask in index_asks() {
            conformance::check_candidate_view(&store, &ns, &ask);
        }
    };
    check(&mut con, "planting");
    for (slot, change) in &changes {
        rewrite(&store, &ns, *slot, change);
        check(&mut con, &format!("rewriting slot {slot}"));
    }
    assert!(store
        .cas_slot(&ns, SlotWrite::new(None, &SlotRecord::vacant(99)))
        .unwrap()
        .is_some());
    check(&mut con, "a new record of no key");
    // A compare-and-set over several slots keeps the index of the one it writes, and of no
    // other: slot 2 is offered with a stale version, slot 100 (no record yet) is written.
    let taker = Owner::new("several");
    let taken = |slot| SlotRecord {
        owner: Some(taker.clone()),
        last_owner_key: Some(taker.key.clone()),
        expires_at: later,
        ..SlotRecord::vacant(slot)
    };
    let (two, hundred) = (taken(2), taken(100));
    let writes = [SlotWrite::new(None, &two), SlotWrite::new(None, &hundred)];
    assert_eq!(
        store.cas_first_slot(&ns, &writes).unwrap().map(|w| w.0),
        Some(1)
    );
    check(&mut con, "a compare-and-set over two slots");
}

/// A namespace whose records were written without the index (by a build before it, or with
/// its keys lost) is read by a scan, with the same view, and the next slot write rebuilds the
/// index from every record.
#[test]
fn a_namespace_without_its_index_is_scanned_then_indexed() {
    let (store, mut con, ns) = planted("index-rebuilt");
    let _: () = redis::cmd("DEL")
        .arg(format!("cosid:{{{ns}}}:held"))
        .arg(format!("cosid:{{{ns}}}:unheld"))
        .arg(format!("cosid:{{{ns}}}:keys"))
        .query(&mut con)
        .expect("DEL");
    assert_eq!(stored_index(&mut con, &ns), None);
    for ask in index_asks() {
        conformance::check_candidate_view(&store, &ns, &ask);
    }
    rewrite(&store, &ns, 40, |r| r.owner = Some(Owner::new("newcomer")));
    assert_eq!(
        stored_index(&mut con, &ns),
        Some(index_of_records(&mut con, &ns))
    );
    for ask in index_asks() {
        conformance::check_candidate_view(&store, &ns, &ask);
    }
}

/// Deleting a slot record (`cosid namespace delete`) keeps the index exact: the record leaves
/// the held or unheld set and the key lists it was on, and the view read through the index is
/// still the filtered namespace. A stale version deletes nothing.
#[test]
fn deleting_a_slot_record_keeps_the_index_exact() {
    let (store, mut con, ns) = planted("index-delete");
    let snap = store.snapshot(&ns).unwrap();
    let mut records = snap.slots.slots.clone();
    records.sort_by_key(|r| r.value.slot);
    let held = records.iter().find(|r| r.value.owner.is_some()).unwrap();
    let free = records.iter().find(|r| r.value.owner.is_none()).unwrap();
    assert!(!store
        .delete_slot(&ns, held.value.slot, held.version + 1)
        .unwrap());
    for r in [held, free] {
        assert!(store.delete_slot(&ns, r.value.slot, r.version).unwrap());
        assert_eq!(store.read_slot(&ns, r.value.slot).unwrap().1, None);
        assert_eq!(
            stored_index(&mut con, &ns),
            Some(index_of_records(&mut con, &ns))
        );
        for ask in index_asks() {
            conformance::check_candidate_view(&store, &ns, &ask);
        }
    }
}

/// A view that returns thousands of free records through the index (more than Lua unpacks in
/// one call) returns every one of them.
#[test]
fn a_view_of_thousands_of_free_records_returns_them_all() {
    const RELEASED: u32 = 9_000;
    let store = shared();
    let ns = conformance::unique_namespace("index-thousands");
    conformance::client(&store, &ns, 14, conformance::LONG)
        .open_namespace()
        .unwrap();
    // Written from 16 threads: the server's fsyncs are shared by what arrives together.
    let (writer, namespace) = (store.clone(), ns.clone());
    let written = cosid_testkit::race::at_once(16, move |i, go| {
        go.wait();
        for slot in (i as u32..RELEASED).step_by(16) {
            let released = SlotRecord {
                last_owner_key: Some("gone".into()),
                fence: 1,
                ..SlotRecord::vacant(slot)
            };
            assert!(writer
                .cas_slot(&namespace, SlotWrite::new(None, &released))?
                .is_some());
        }
        Ok::<(), cosid_core::Error>(())
    });
    for w in written {
        w.expect("the records are written");
    }
    let ask = CandidateAsk {
        owner_key: Some("gone"),
        preferred_slot: None,
        free_min: RELEASED,
        free_per_live: 0,
    };
    let view = store.candidates(&ns, &ask).unwrap();
    assert!(view.live.is_empty());
    assert_eq!(view.covered_below, RELEASED);
    let mut slots: Vec<u32> = view.records.iter().map(|r| r.value.slot).collect();
    slots.sort_unstable();
    assert_eq!(slots, (0..RELEASED).collect::<Vec<_>>());
}

/// Issue 32: a record of 512 KiB planted in the real server (a broken or hostile writer), with
/// a newline in it: reading it is a `Store` error of one line and a readable length, quoting the
/// record's start only. One of 20 MiB is refused as its reply's header arrives, naming the bound
/// on a reply (`bounds::MAX_REDIS_REPLY_BYTES`).
#[test]
fn a_huge_foreign_record_is_quoted_cut_in_one_line() {
    let store = shared();
    let mut con = raw(&cosid_testkit::shared_redis_url());
    for (size, said) in [
        (512 << 10, "does not hold a cosid record"),
        (20 << 20, "more than the 1 MiB any cosid request gets back"),
    ] {
        let ns = conformance::unique_namespace("huge-record");
        let record = format!("1|cosid-slot-v1 {}\nsecond line", "x".repeat(size));
        let _: () = redis::cmd("HSET")
            .arg(format!("cosid:{{{ns}}}:slots"))
            .arg("0")
            .arg(&record)
            .query(&mut con)
            .expect("HSET");
        let e = match store.read_slot(&ns, 0) {
            Ok(r) => panic!("a record was read: {r:?}"),
            Err(e) => e,
        };
        assert_eq!(e.kind(), cosid_core::ErrorKind::Store, "{e}");
        let m = e.message();
        assert!(m.contains(said), "{}", &m[..m.len().min(300)]);
        assert!(m.len() < 2000 && !m.contains('\n'), "{} bytes", m.len());
    }
}
