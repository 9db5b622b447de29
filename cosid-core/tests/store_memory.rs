//! The store conformance suite on `memory:`, and what only the memory store lets a test do:
//! lose every record (a store restarted empty) and run on a manual clock.

mod conformance;

use conformance::{acquire, acquire_with, client, request, unique_namespace, LONG};
use cosid_core::lease::{AcquireRequest, Owner, Refusal, Renewal};
use cosid_core::store::memory::MemoryStore;
use cosid_core::store::{self, SharedStore};
use cosid_core::ManualClock;
use std::sync::{Arc, OnceLock};

/// One memory store for this test binary, under a name no other binary or test uses. Each
/// conformance test holds a handle while it opens more, so every handle of a test is the same
/// store.
fn memory_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| format!("memory:conformance-{}", uuid::Uuid::new_v4().simple()))
}

conformance_suite!(store::open(memory_url()).expect("the memory store opens"));

#[test]
fn store_restarted_empty_reports_the_lease_vanished() {
    let memory = MemoryStore::new(Arc::new(cosid_core::SystemClock));
    let shared: SharedStore = memory.clone();
    let ns = unique_namespace("vanished");
    let c = client(&shared, &ns, 2, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    memory.wipe();
    match c.renew(&a).unwrap() {
        Renewal::Lost(refusal) => assert_eq!(refusal, Refusal::Vanished),
        Renewal::Renewed(l) => panic!("renewed a lease the store forgot: {l:?}"),
    }
    assert!(!c.release(&a, None).unwrap());
    // The keeper asks for a floor at or above the highest ceiling it was granted, so the
    // emptied store cannot give it a window overlapping the one it used.
    let again = acquire_with(
        &c,
        AcquireRequest {
            floor_at_least: a.ceiling,
            ..request(&a.owner)
        },
    );
    assert_eq!(again.lease.floor, a.ceiling);
    assert_eq!(
        shared.snapshot(&ns).unwrap().namespace.unwrap().value.limit,
        4,
        "the namespace record is written again"
    );
}

#[test]
fn named_stores_are_shared_by_name_and_only_by_name() {
    let name = format!("memory:named-{}", uuid::Uuid::new_v4().simple());
    let (one, same) = (store::open(&name).unwrap(), store::open(&name).unwrap());
    let other = store::open(&format!("{name}-other")).unwrap();
    let ns = unique_namespace("named");
    acquire(&client(&one, &ns, 0, LONG), &Owner::new("a"));
    assert!(same.read_slot(&ns, 0).unwrap().1.is_some());
    assert!(other.read_slot(&ns, 0).unwrap().1.is_none());
}

#[test]
fn expiry_follows_the_store_clock_exactly() {
    let clock = ManualClock::shared(1_700_000_000_000);
    let store = MemoryStore::new(clock.clone());
    conformance::expiry_follows_the_store_clock_exactly(store, &clock);
}
