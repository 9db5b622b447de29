//! Redis Cluster (`redis+cluster://`), against real clusters that `cosid-testkit` starts (three
//! primaries with a password on loopback ports, `testkit/src/redis_cluster.rs`), or the one
//! `COSID_TEST_REDIS_CLUSTER_URL` names for the conformance suite:
//!
//! - the conformance suite through `redis+cluster://` (its namespaces land on every shard: the
//!   client follows `MOVED` from the seed it reached first);
//! - a namespace whose hash slot migrates: while its keys are on the importing node the owner
//!   answers `ASK` and the client sends `ASKING` and the command there (once: the next call asks
//!   the owner again), the scripts are loaded on the new node (`NOSCRIPT`); once the migration
//!   ends the old owner answers `MOVED`, and the client remembers the new owner; acquisitions,
//!   renewals and releases work throughout and windows stay disjoint;
//! - runtimes issuing ids while their namespace's slot migrates twice: no id twice;
//! - nodes that disagree about a slot (each names the other) give a `Store` error naming the
//!   chain of redirections, not a loop;
//! - `?replicas=N` sends `WAIT` to the node that ran the script (the shard has no replica here:
//!   a write is refused naming the count);
//! - every bad URL form is refused naming the value and the fix; passwords never show.
//!
//! Run with `cargo test -p cosid-core --features redis --test store_redis_cluster`. No test
//! asserts on timing: waits are bounded and fail the test when they run out.

#![cfg(feature = "redis")]

mod conformance;
mod network;

use conformance::{acquire, client, request, unique_namespace, LONG};
use cosid_core::lease::invariants::{self, Holder, Step};
use cosid_core::lease::{Owner, Renewal, SlotLease};
use cosid_core::store::redis::RedisStore;
use cosid_core::ErrorKind;
use cosid_testkit::redis_cluster::{RedisCluster, CLUSTER_PASSWORD};
use network::assert_store_error;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The longest any wait of these tests may take.
const BOUND: Duration = Duration::from_secs(90);

network_conformance_suite!(
    RedisStore,
    cosid_testkit::redis_cluster::shared_redis_cluster_url()
);

/// Waits (bounded by [`BOUND`]) until `done` holds.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "not within {BOUND:?}: {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

fn renewed(c: &cosid_core::lease::LeaseClient, lease: &SlotLease) -> SlotLease {
    match c.renew(lease).expect("the renewal reaches the store") {
        Renewal::Renewed(next) => {
            assert_eq!(next.fence, lease.fence);
            next
        }
        Renewal::Lost(why) => panic!("slot {} lost: {why:?}", lease.slot),
    }
}

/// A node of the cluster other than the one on `port` (the tests that take a slot's owner
/// away need a second node to talk to).
fn another_node(cluster: &RedisCluster, port: u16) -> u16 {
    *cluster
        .ports()
        .iter()
        .find(|p| **p != port)
        .expect("another node")
}

/// The hash slot of a namespace, as the cluster computes it for each of its keys (they must
/// agree: a script may only touch keys of one slot).
fn slot_of(cluster: &RedisCluster, ns: &str) -> u16 {
    let slots: HashSet<u16> = ["ns", "slots", "version"]
        .iter()
        .map(|k| cluster.keyslot(&format!("cosid:{{{ns}}}:{k}")))
        .collect();
    assert_eq!(
        slots.len(),
        1,
        "the keys of '{ns}' span hash slots {slots:?}"
    );
    slots.into_iter().next().expect("one slot")
}

/// A new namespace named after `prefix`, and its hash slot: what most tests here start from.
fn namespace_on(cluster: &RedisCluster, prefix: &str) -> (String, u16) {
    let ns = unique_namespace(prefix);
    let slot = slot_of(cluster, &ns);
    (ns, slot)
}

/// One holder and then a second one work on a namespace through each stage of its hash slot's
/// migration: keys still on the owner (served there), keys moved (the owner answers `ASK`: the
/// command goes to the importing node after `ASKING`, every call, since an `ASK` does not change
/// the owner; the importing node had never seen the scripts, so `NOSCRIPT` is handled there
/// too), and the migration over (the old owner answers `MOVED` once; the next calls go to the
/// new owner directly).
#[test]
fn a_namespace_works_while_its_slot_migrates_through_ask_then_moved() {
    let cluster = RedisCluster::start();
    let store = open(&cluster.url(""), Duration::from_secs(5)).expect("open");
    let (ns, slot) = namespace_on(&cluster, "migrating");
    let c = client(&store, &ns, 3, LONG);
    let mut trace = Vec::new();
    let first = acquire(&c, &Owner::new("first")).lease;
    trace.push(Step::of_lease(&first));

    let m = cluster.begin_migration(slot);
    // The keys are still on the owner: it serves them, no redirection.
    let asks = cluster.redirections(m.from, "ASK");
    let first = renewed(&c, &first);
    trace.push(Step::of_lease(&first));
    assert_eq!(cluster.redirections(m.from, "ASK"), asks);

    assert!(cluster.move_keys(&m) >= 3, "the namespace's keys move");
    let first = renewed(&c, &first);
    trace.push(Step::of_lease(&first));
    let after_one = cluster.redirections(m.from, "ASK");
    assert!(after_one > asks, "the owner answered ASK");
    assert!(
        cluster.redirections(m.to, "NOSCRIPT") >= 1,
        "the importing node was asked for a script it did not have"
    );
    // An ASK does not change the owner: the next calls ask the owner again.
    let second = acquire(&c, &Owner::new("second")).lease;
    trace.push(Step::of_lease(&second));
    let second = renewed(&c, &second);
    trace.push(Step::of_lease(&second));
    assert!(c.release(&second, Some(second.floor)).expect("release"));
    trace.push(Step::Released {
        holder: Holder::of_lease(&second),
        last_issued: Some(second.floor),
    });
    assert!(
        cluster.redirections(m.from, "ASK") >= after_one + 3,
        "every call during the migration went to the owner first"
    );
    assert_eq!(
        cluster.redirections(m.from, "MOVED"),
        0,
        "no MOVED while the slot migrates"
    );

    cluster.finish_migration(&m);
    let moved = cluster.redirections(m.from, "MOVED");
    let first = renewed(&c, &first);
    trace.push(Step::of_lease(&first));
    assert_eq!(
        cluster.redirections(m.from, "MOVED"),
        moved + 1,
        "one MOVED"
    );
    // The new owner is remembered: no redirection any more.
    let first = renewed(&c, &first);
    trace.push(Step::of_lease(&first));
    let third = acquire(&c, &Owner::new("third")).lease;
    trace.push(Step::of_lease(&third));
    assert_eq!(cluster.redirections(m.from, "MOVED"), moved + 1);
    assert_eq!(cluster.owner(slot), m.to);

    // A fresh handle, starting from the seeds, reads what the holders wrote on the new owner.
    let fresh = open(&cluster.url(""), Duration::from_secs(5)).expect("open");
    let (_, rec) = fresh.read_slot(&ns, first.slot).expect("read");
    let rec = rec.expect("the record moved with the slot").value;
    assert_eq!(Holder::of_record(&rec), Some(Holder::of_lease(&first)));
    invariants::disjoint_windows(&trace).unwrap_or_else(|v| panic!("{v}"));
}

/// Four holders, each with a handle of its own, renew (and one of them releases and acquires
/// again) while the namespace's slot migrates to a second node and then a third. No holder
/// loses its lease, and every window granted is disjoint from the others on its slot.
#[test]
fn holders_keep_their_leases_while_the_slot_migrates_twice() {
    let cluster = RedisCluster::start();
    let url = cluster.url("");
    let (ns, slot) = namespace_on(&cluster, "holders");
    let trace = Arc::new(Mutex::new(Vec::<Step>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let holders: Vec<_> = (0..4)
        .map(|i| {
            let (url, ns, trace, stop) = (url.clone(), ns.clone(), trace.clone(), stop.clone());
            thread::spawn(move || {
                let store = open(&url, Duration::from_secs(5)).expect("open");
                let c = client(&store, &ns, 3, LONG);
                let owner = Owner::new(format!("holder-{i}"));
                let mut lease = acquire(&c, &owner).lease;
                trace.lock().unwrap().push(Step::of_lease(&lease));
                let mut rounds = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    rounds += 1;
                    if i == 0 && rounds % 5 == 0 {
                        assert!(c.release(&lease, Some(lease.floor)).expect("release"));
                        trace.lock().unwrap().push(Step::Released {
                            holder: Holder::of_lease(&lease),
                            last_issued: Some(lease.floor),
                        });
                        lease = c.acquire(&request(&owner)).expect("acquire again").lease;
                    } else {
                        lease = renewed(&c, &lease);
                    }
                    trace.lock().unwrap().push(Step::of_lease(&lease));
                    thread::sleep(Duration::from_millis(20));
                }
                rounds
            })
        })
        .collect();
    let grants = || trace.lock().unwrap().len();
    wait_for("the holders start", || grants() >= 8);
    for _ in 0..2 {
        let m = cluster.begin_migration(slot);
        let before = grants();
        wait_for("calls while the slot is marked migrating", || {
            grants() >= before + 8
        });
        cluster.move_keys(&m);
        let before = grants();
        wait_for("calls while the keys are on the importing node", || {
            grants() >= before + 8
        });
        cluster.finish_migration(&m);
        let before = grants();
        wait_for("calls once the slot moved", || grants() >= before + 8);
        assert!(cluster.redirections(m.from, "ASK") > 0);
        assert!(cluster.redirections(m.from, "MOVED") > 0);
    }
    stop.store(true, Ordering::SeqCst);
    for h in holders {
        assert!(h.join().expect("a holder thread") > 0);
    }
    let trace = trace.lock().unwrap();
    invariants::disjoint_windows(&trace).unwrap_or_else(|v| panic!("{v}"));
}

/// Two runtimes issue ids on one namespace (renewing every ttl/3) while its slot migrates twice:
/// no id is issued twice, and each runtime's window moves on after the migrations (it renewed
/// on the new owner).
#[test]
fn runtimes_issue_unique_ids_while_the_slot_migrates() {
    let cluster = RedisCluster::start();
    let (ns, slot) = namespace_on(&cluster, "runtime");
    let config = format!(
        "cosid:\n  namespace: {ns}\n  machine:\n    lease:\n      store: \"{}\"\n      \
         ttl: 900ms\n      tolerance: 100ms\n      bits: 2\n",
        cluster.url("")
    );
    let runtimes: Vec<Arc<cosid_core::Runtime>> = (0..2)
        .map(|_| {
            Arc::new(
                cosid_core::Runtime::builder()
                    .config(cosid_core::Config::from_yaml(&config).expect("the configuration"))
                    .build()
                    .expect("the runtime starts"),
            )
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let issuers: Vec<_> = runtimes
        .iter()
        .map(|rt| {
            let (rt, stop) = (rt.clone(), stop.clone());
            thread::spawn(move || {
                let mut ids = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    match rt.next() {
                        Ok(id) => ids.push(id),
                        // A wait for the next window is bounded; the loop goes on.
                        Err(e) => assert_ne!(e.kind(), ErrorKind::Config, "{e}"),
                    }
                    if ids.len() % 256 == 0 {
                        thread::sleep(Duration::from_millis(1));
                    }
                }
                ids
            })
        })
        .collect();
    for _ in 0..2 {
        let m = cluster.begin_migration(slot);
        cluster.move_keys(&m);
        let ceilings: Vec<i64> = runtimes.iter().map(|rt| rt.binding().ceiling).collect();
        wait_for(
            "each runtime renews while the keys are on the importing node",
            || {
                runtimes
                    .iter()
                    .zip(&ceilings)
                    .all(|(rt, c)| rt.binding().ceiling > *c)
            },
        );
        cluster.finish_migration(&m);
        let ceilings: Vec<i64> = runtimes.iter().map(|rt| rt.binding().ceiling).collect();
        wait_for("each runtime renews on the new owner", || {
            runtimes
                .iter()
                .zip(&ceilings)
                .all(|(rt, c)| rt.binding().ceiling > *c)
        });
    }
    stop.store(true, Ordering::SeqCst);
    let mut seen = HashSet::new();
    let mut total = 0;
    for h in issuers {
        for id in h.join().expect("an issuer thread") {
            total += 1;
            assert!(seen.insert(id), "id {id} issued twice");
        }
    }
    assert!(total > 0);
    for rt in runtimes {
        rt.close().expect("close");
    }
    eprintln!("{total} ids, none twice, across two migrations of slot {slot}");
}

/// Nodes that disagree about who serves a slot (each tells the other is the owner) make a
/// call follow a bounded number of redirections and fail with a `Store` error naming them.
#[test]
fn a_redirection_loop_is_a_store_error_naming_the_chain() {
    let cluster = RedisCluster::start();
    let (ns, slot) = namespace_on(&cluster, "loop");
    let owner = cluster.owner(slot);
    let other = another_node(&cluster, owner);
    // The owner hands the slot to the other node, which is never told: each now answers MOVED
    // naming the other.
    let other_id = {
        let reply = cosid_testkit::redis_cluster::command(other, &["CLUSTER", "MYID"])
            .expect("CLUSTER MYID");
        String::from_utf8_lossy(&reply)
            .lines()
            .nth(1)
            .expect("an id")
            .to_string()
    };
    let reply = cosid_testkit::redis_cluster::command(
        owner,
        &["CLUSTER", "SETSLOT", &slot.to_string(), "NODE", &other_id],
    );
    assert!(
        reply.as_deref().is_some_and(|r| r.starts_with(b"+OK")),
        "{reply:?}"
    );
    let store = open(&cluster.url(""), Duration::from_secs(5)).expect("open");
    let e = store
        .snapshot(&ns)
        .expect_err("the nodes send the call around");
    assert_store_error(
        &e,
        &[
            "more than 5 redirections",
            &format!("127.0.0.1:{owner} MOVED 127.0.0.1:{other}"),
            &format!("127.0.0.1:{other} MOVED 127.0.0.1:{owner}"),
        ],
    );
    assert!(!e.message().contains(CLUSTER_PASSWORD), "{e}");
}

/// A call whose keys a migration has split between two nodes (`TRYAGAIN`) is sent again until
/// half the operation timeout, then fails with a `Store` error that says so; once the rest of
/// the keys have moved it runs.
#[test]
fn keys_split_by_a_migration_are_waited_for_then_an_error_that_says_so() {
    let cluster = RedisCluster::start();
    let store = open(&cluster.url(""), Duration::from_secs(2)).expect("open");
    let (ns, slot) = namespace_on(&cluster, "split");
    let c = client(&store, &ns, 2, LONG);
    acquire(&c, &Owner::new("holder"));
    let m = cluster.begin_migration(slot);
    // Only the namespace record moves: a snapshot reads it and the slots hash.
    cluster.migrate_keys(&m, &[&format!("cosid:{{{ns}}}:ns")]);
    let e = store.snapshot(&ns).expect_err("the keys are split");
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(
        e.message()
            .contains(&format!("hash slot {slot} is being migrated")),
        "{e}"
    );
    assert!(e.message().contains("TRYAGAIN"), "{e}");
    cluster.move_keys(&m);
    let snapshot = store.snapshot(&ns).expect("the keys are together again");
    assert_eq!(snapshot.slots.slots.len(), 1);
    cluster.finish_migration(&m);
    assert_eq!(store.snapshot(&ns).expect("moved").slots.slots.len(), 1);
}

/// A node that a `MOVED` names but that cannot be reached (a crashed primary) is not kept as
/// the owner: each call asks the seeds again (after a shard's failover they name the promoted
/// replica), rather than going back to the dead node for ever.
#[test]
fn an_unreachable_owner_is_forgotten_and_the_seeds_asked_again() {
    let cluster = RedisCluster::start();
    let (ns, slot) = namespace_on(&cluster, "dead-owner");
    let owner = cluster.owner(slot);
    let seed = another_node(&cluster, owner);
    cluster.kill_node(owner);
    let store = open(
        &format!("redis+cluster://:{CLUSTER_PASSWORD}@127.0.0.1:{seed}/0"),
        Duration::from_secs(2),
    )
    .expect("open");
    let before = cluster.redirections(seed, "MOVED");
    for _ in 0..3 {
        let e = store.snapshot(&ns).expect_err("the owner is down");
        assert_store_error(&e, &[&format!("127.0.0.1:{owner}")]);
    }
    assert_eq!(
        cluster.redirections(seed, "MOVED"),
        before + 3,
        "every call asked the seed again"
    );
}

/// `?replicas=N` sends `WAIT` to the node that ran the script: these shards have no replica,
/// so a write is refused naming the count, and one that writes nothing needs none.
#[test]
fn replicas_wait_on_the_shard_that_ran_the_write() {
    let url = cosid_testkit::redis_cluster::shared_redis_cluster_url();
    let sep = if url.contains('?') { '&' } else { '?' };
    let store = open(
        &format!("{url}{sep}replicas=1&wait_timeout_ms=100"),
        Duration::from_secs(5),
    )
    .expect("open");
    let ns = unique_namespace("replicas");
    let e = cosid_core::lease::LeaseClient::new(store.clone(), &ns, 2, LONG)
        .and_then(|c| c.acquire(&request(&Owner::new("h"))))
        .expect_err("no replica acknowledges");
    assert_store_error(&e, &["reached 0 of the 1 replicas"]);
    assert!(store.snapshot(&ns).is_ok(), "a read sends no WAIT");
}

/// A wrong password is a `Store` error that does not show it; the right one reaches every
/// node a call is redirected to (the conformance suite's namespaces span the shards).
#[test]
fn passwords_in_a_cluster_url_never_show() {
    let cluster = RedisCluster::start();
    let wrong = cluster.url("").replace(CLUSTER_PASSWORD, "Not-the-pw-123");
    let store = open(&wrong, Duration::from_secs(2)).expect("open");
    let shown = format!("{store:?} {}", store.describe());
    assert!(
        !shown.contains("Not-the-pw-123") && shown.contains("***"),
        "{shown}"
    );
    let e = store.snapshot("pw").expect_err("a wrong password");
    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
    assert!(!format!("{e} {e:?}").contains("Not-the-pw-123"), "{e}");

    let store = open(&cluster.url(""), Duration::from_secs(5)).expect("open");
    let mut shards = HashSet::new();
    for i in 0..12 {
        let ns = unique_namespace(&format!("pw{i}"));
        shards.insert(cluster.owner(slot_of(&cluster, &ns)));
        let lease = acquire(&client(&store, &ns, 2, LONG), &Owner::new("h")).lease;
        assert_eq!(lease.fence, 1);
    }
    assert!(shards.len() > 1, "the namespaces span shards: {shards:?}");
}

/// Every bad form of a cluster URL is a `Config` error that names the value (when it cannot
/// be a piece of a credential) and the fix, and shows no password.
#[test]
fn every_bad_cluster_url_is_refused_naming_the_value_and_the_fix() {
    for (bad, says) in [
        (
            "redis+cluster://h1,h2/1",
            "has the database '1'; a Redis Cluster has only database 0: write /0 or leave the \
             database out",
        ),
        ("redis+cluster://h1/x", "has the database 'x'"),
        ("redis+cluster://h1/0/1", "has the database (not shown)"),
        ("redis+cluster://h1:x/0", "node port 'x', not a port"),
        ("redis+cluster://h1:0/0", "node port '0', not a port"),
        ("redis+cluster://h1:70000", "node port '70000', not a port"),
        ("redis+cluster://h1,/0", "empty node host"),
        ("redis+cluster://,h1/0", "empty node host"),
        (
            "redis+cluster://h1/0?protocol=resp3",
            "parameter 'protocol' that a cluster URL does not take",
        ),
        (
            "redis+cluster://h1/0?sentinel_password=x",
            "that a cluster URL does not take",
        ),
        ("rediss+cluster://h1/0#insecure", "#fragment"),
        (
            "redis+cluster://h1/0?replicas=x",
            "replicas='x' is not a number of replicas",
        ),
        (
            "redis+cluster://h1/0?wait_timeout_ms=5",
            "without replicas=N",
        ),
        ("redis+cluster:///0", "has no host"),
        ("redis+cluster:h1/0", "must have // after the scheme"),
    ] {
        let e = open(bad, Duration::from_secs(2)).expect_err(bad);
        assert_eq!(e.kind(), ErrorKind::Config, "{bad}: {e}");
        assert!(e.message().contains(says), "{bad}: {e}");
        if says.contains("cluster URL") || says.contains("database") || says.contains("node") {
            assert!(
                e.message().contains("use redis+cluster://"),
                "{bad}: the fix: {e}"
            );
        }
    }
    for secret in [
        "redis+cluster://u:Sup3r-s3cret@h1:x/0",
        "redis+cluster://u:Sup3r-s3cret@h1/3",
        "redis+cluster://:Sup3r-s3cret@h1,/0",
        "redis+cluster://u:Sup3r-s3cret@h1/0?replicas=x",
    ] {
        let e = open(secret, Duration::from_secs(2)).expect_err(secret);
        assert!(!format!("{e} {e:?}").contains("Sup3r"), "{secret}: {e}");
    }
    for good in [
        "redis+cluster://h1,h2:7000,[::1]:7001",
        "redis+cluster://u:p@h1/0?replicas=1&wait_timeout_ms=500",
        "rediss+cluster://:p@h1:6380/",
        "REDIS+CLUSTER://h1",
    ] {
        let store = open(good, Duration::from_secs(2)).unwrap_or_else(|e| panic!("{good}: {e}"));
        assert!(!store.describe().contains(":p@"), "{good}");
    }
}

#[test]
fn the_server_filters_the_candidate_view() {
    conformance::candidate_view_is_filtered_by_the_store(&shared);
}
