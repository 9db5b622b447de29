//! Holders through a failover of real servers, shared by the replicated Redis tests (a
//! Sentinel group, a Redis Cluster shard): [`holders_through_a_failover`], and the bounded
//! waits they use.

#![allow(dead_code)]

use crate::conformance::{client, request, unique_namespace};
use crate::network::SECRET;
use cosid_core::lease::invariants::{self, Holder, Step};
use cosid_core::lease::{AcquireRequest, Owner, Renewal, SlotLease, Terms};
use cosid_core::store::SharedStore;
use cosid_core::{ErrorKind, Result};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The longest any wait of these tests may take.
pub const BOUND: Duration = Duration::from_secs(90);

/// Calls `f` until it gives `Ok` (every 100 ms, for at most [`BOUND`]); errors on the way must be
/// `Store` errors (the store unreachable or failing over).
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Result<T>) -> T {
    let deadline = Instant::now() + BOUND;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Store, "{what}: {e}");
                assert!(Instant::now() < deadline, "{what}: still failing: {e}");
                thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Waits (bounded by [`BOUND`]) until `done` holds.
pub fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "not within {BOUND:?}: {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Four holders, each with a store handle of its own on `url`, renew in a new namespace while
/// `fail` (given the namespace) makes the servers of the namespace fail over, and returns what
/// happened (for the log) and a URL of the promoted primary alone. Renewals fail while the
/// promotion is under way, then go on against the promoted replica: no holder loses its lease
/// (`url` makes every renewal that counted reach a replica), the promoted primary holds each
/// holder's last renewal, and every window granted, before, during and after, is disjoint from
/// the others on its slot, also across a release and a new holder afterwards.
pub fn holders_through_a_failover(url: &str, fail: impl FnOnce(&str) -> (String, String)) {
    let url = url.to_string();
    let ns = unique_namespace("failover");
    // Leases outlive the failover (a few seconds) many times over.
    let terms = Terms {
        ttl_ms: 120_000,
        tolerance_ms: 1_000,
    };
    let trace = Arc::new(Mutex::new(Vec::<Step>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let renewals: Arc<Vec<AtomicUsize>> = Arc::new((0..4).map(|_| AtomicUsize::new(0)).collect());
    let failures = Arc::new(AtomicUsize::new(0));
    let holders: Vec<_> = (0..4)
        .map(|i| {
            let (url, ns, trace, stop, renewals, failures) = (
                url.clone(),
                ns.clone(),
                trace.clone(),
                stop.clone(),
                renewals.clone(),
                failures.clone(),
            );
            thread::spawn(move || {
                let store = crate::open(&url, Duration::from_secs(2)).expect("open");
                let c = client(&store, &ns, 3, terms);
                let owner = Owner::new(format!("holder-{i}"));
                let mut lease = eventually("acquiring", || c.acquire(&request(&owner))).lease;
                trace.lock().unwrap().push(Step::of_lease(&lease));
                while !stop.load(Ordering::SeqCst) {
                    match c.renew(&lease) {
                        Ok(Renewal::Renewed(next)) => {
                            assert_eq!(next.fence, lease.fence, "a renewal keeps the fence");
                            assert!(next.ceiling >= lease.ceiling, "a renewal lowers nothing");
                            trace.lock().unwrap().push(Step::of_lease(&next));
                            lease = next;
                            renewals[i].fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(Renewal::Lost(why)) => {
                            panic!("holder {i} lost its lease across the failover: {why:?}")
                        }
                        Err(e) => {
                            // The old primary gone, the promotion under way: retried.
                            assert_eq!(e.kind(), ErrorKind::Store, "{e}");
                            assert!(!e.message().contains(SECRET));
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    thread::sleep(Duration::from_millis(50));
                }
                (store, c, lease)
            })
        })
        .collect();

    let each_renewed = |at_least: &[usize]| {
        renewals
            .iter()
            .zip(at_least)
            .all(|(n, min)| n.load(Ordering::SeqCst) >= *min)
    };
    wait_for("every holder renews before the failover", || {
        each_renewed(&[3; 4])
    });
    let (what, new_primary_url) = fail(&ns);
    let after: Vec<usize> = renewals
        .iter()
        .map(|n| n.load(Ordering::SeqCst) + 3)
        .collect();
    wait_for("every holder renews on the promoted replica", || {
        each_renewed(&after)
    });
    stop.store(true, Ordering::SeqCst);
    let held: Vec<(SharedStore, _, SlotLease)> = holders
        .into_iter()
        .map(|h| h.join().expect("a holder thread"))
        .collect();

    // The new primary holds every holder's last renewal.
    let direct =
        crate::open(&new_primary_url, Duration::from_secs(5)).expect("open the new primary");
    for (_, _, lease) in &held {
        let (_, rec) = direct
            .read_slot(&ns, lease.slot)
            .expect("read the new primary");
        let rec = rec.expect("the slot record survived the failover").value;
        assert_eq!(Holder::of_record(&rec), Some(Holder::of_lease(lease)));
        assert!(rec.expires_at >= lease.expires_at);
    }

    // A release and a new holder on that slot after the failover.
    let (_, c, first) = &held[0];
    assert!(eventually("releasing", || c.release(first, Some(first.floor))));
    trace.lock().unwrap().push(Step::Released {
        holder: Holder::of_lease(first),
        last_issued: Some(first.floor),
    });
    let next = eventually("a newcomer acquires the released slot", || {
        c.acquire(&AcquireRequest {
            owner: Owner::new("newcomer"),
            preferred_slot: Some(first.slot),
            floor_at_least: 0,
        })
    })
    .lease;
    assert_eq!(next.slot, first.slot);
    trace.lock().unwrap().push(Step::of_lease(&next));

    let trace = trace.lock().unwrap();
    // 4 holders × (an acquisition, 3 renewals before and 3 after), and the newcomer's grant.
    assert!(trace.len() > 4 * 7, "{} grants", trace.len());
    invariants::disjoint_windows(&trace).unwrap_or_else(|v| panic!("{v}"));
    eprintln!(
        "failover {what}: {} grants, {} renewals failed during it",
        trace.len(),
        failures.load(Ordering::SeqCst)
    );
}
