//! etcd as a cluster of three members (`etcd://m1,m2,m3`), against real clusters that
//! `cosid-testkit` starts on loopback (`testkit/src/etcd_cluster.rs`), or the one
//! `COSID_TEST_ETCD_CLUSTER_URL` names for the conformance suite:
//!
//! - the conformance suite through a URL naming the three members;
//! - holders with handles of their own renew, release and acquire while the leader is
//!   SIGKILLed, a new one is elected and the old one comes back: every operation that failed
//!   while the cluster had no leader succeeds when retried, no holder loses its lease, and every
//!   window granted is disjoint from the others on its slot;
//! - a handle whose first member is dead uses the next one from its first operation.
//!
//! Run with `cargo test -p cosid-core --features etcd --test store_etcd_cluster`. No test
//! asserts on timing: waits are bounded and fail the test when they run out.

#![cfg(feature = "etcd")]

mod conformance;

use conformance::{acquire, client, request, unique_namespace, LONG};
use cosid_core::lease::invariants::{self, Holder, Step};
use cosid_core::lease::{LeaseClient, Owner, Renewal, SlotLease};
use cosid_core::store::etcd::EtcdStore;
use cosid_testkit::etcd_cluster::EtcdCluster;
use std::thread;
use std::time::{Duration, Instant};

/// The longest any wait of these tests may take.
const BOUND: Duration = Duration::from_secs(90);

network_conformance_suite!(
    EtcdStore,
    cosid_testkit::etcd_cluster::shared_etcd_cluster_url()
);

/// Runs `op` until it returns `Ok`, bounded by [`BOUND`]: a cluster between leaders answers
/// with errors (or not at all, until the operation's timeout), never with a wrong answer.
fn retried<T>(what: &str, mut op: impl FnMut() -> cosid_core::Result<T>) -> T {
    let deadline = Instant::now() + BOUND;
    loop {
        match op() {
            Ok(v) => return v,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "{what}: not within {BOUND:?}: {e}"
                );
                thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn renewed(c: &LeaseClient, lease: &SlotLease) -> SlotLease {
    match retried("renewing", || c.renew(lease)) {
        Renewal::Renewed(next) => {
            assert_eq!(next.fence, lease.fence, "a renewal keeps the fence");
            next
        }
        Renewal::Lost(why) => panic!("slot {} lost: {why:?}", lease.slot),
    }
}

/// Waits (bounded) until a running member reports itself the leader, and returns it.
fn leader(cluster: &EtcdCluster) -> usize {
    let deadline = Instant::now() + BOUND;
    loop {
        if let Some(i) = cluster.leader() {
            return i;
        }
        assert!(Instant::now() < deadline, "no leader within {BOUND:?}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Three holders, each with a handle on all three members starting from a different one, hold
/// slots while the leader is SIGKILLed: they renew through the election, one releases and a
/// newcomer acquires while the old leader is down, and everyone renews again once it is back.
/// No lease is lost, the newcomer takes a slot of its own, and the windows stay disjoint.
#[test]
fn holders_keep_their_leases_while_the_leader_is_killed_and_comes_back() {
    let cluster = EtcdCluster::start();
    let ports = cluster.ports();
    let ns = unique_namespace("leader-killed");
    let handles: Vec<LeaseClient> = (0..3)
        .map(|i| {
            let hosts: Vec<String> = (0..3)
                .map(|k| format!("127.0.0.1:{}", ports[(i + k) % 3]))
                .collect();
            let url = format!("etcd://{}", hosts.join(","));
            let store = open(&url, Duration::from_secs(2)).expect("open");
            client(&store, &ns, 3, LONG)
        })
        .collect();
    let mut trace = Vec::new();
    let mut leases: Vec<SlotLease> = handles
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let l = acquire(c, &Owner::new(format!("holder-{i}"))).lease;
            trace.push(Step::of_lease(&l));
            l
        })
        .collect();

    let old = leader(&cluster);
    cluster.kill(old);
    for (c, l) in handles.iter().zip(leases.iter_mut()) {
        *l = renewed(c, l);
        trace.push(Step::of_lease(l));
    }
    let new = leader(&cluster);
    assert_ne!(new, old, "the killed member does not lead");

    // While the old leader is down: one holder leaves, a newcomer arrives.
    let gone = leases.remove(0);
    let released = retried("releasing", || handles[0].release(&gone, Some(gone.floor)));
    assert!(released, "the release found its lease");
    trace.push(Step::Released {
        holder: Holder::of_lease(&gone),
        last_issued: Some(gone.floor),
    });
    let newcomer = retried("acquiring", || {
        handles[1].acquire(&request(&Owner::new("newcomer")))
    })
    .lease;
    trace.push(Step::of_lease(&newcomer));
    assert!(
        leases.iter().all(|l| l.slot != newcomer.slot),
        "the newcomer took slot {} of a live holder",
        newcomer.slot
    );

    cluster.restart(old);
    for (c, l) in handles[1..].iter().zip(leases.iter_mut()) {
        *l = renewed(c, l);
        trace.push(Step::of_lease(l));
    }
    let newcomer = renewed(&handles[2], &newcomer);
    trace.push(Step::of_lease(&newcomer));
    invariants::disjoint_windows(&trace).unwrap_or_else(|v| panic!("{v}"));

    // The member that came back serves what was written while it was down.
    let alone = open(
        &format!("etcd://127.0.0.1:{}", ports[old]),
        Duration::from_secs(2),
    )
    .expect("open");
    let (_, rec) = retried("reading through the member that came back", || {
        alone.read_slot(&ns, newcomer.slot)
    });
    let rec = rec.expect("the newcomer's record").value;
    assert_eq!(Holder::of_record(&rec), Some(Holder::of_lease(&newcomer)));
}

/// A URL whose first member is dead: the handle's operations succeed from the first one on
/// (within the operation's timeout, the next member answers).
#[test]
fn a_dead_first_member_is_passed_over() {
    let cluster = EtcdCluster::start();
    let ports = cluster.ports();
    cluster.kill(0);
    leader(&cluster);
    let url = format!(
        "etcd://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
        ports[0], ports[1], ports[2]
    );
    let store = open(&url, Duration::from_secs(2)).expect("open");
    let ns = unique_namespace("dead-first");
    let c = client(&store, &ns, 2, LONG);
    let got = c
        .acquire(&request(&Owner::new("one")))
        .expect("the first operation reaches a live member");
    let again = match c.renew(&got.lease).expect("renew") {
        Renewal::Renewed(l) => l,
        Renewal::Lost(why) => panic!("lost: {why:?}"),
    };
    assert!(c.release(&again, Some(again.floor)).expect("release"));
}
