//! The store conformance suite on `memory:`, and what only the memory store lets a test do:
//! lose every record (a store restarted empty) and run on a manual clock.

mod conformance;

use conformance::{
    acquire, check_renewal_vanished, client, reacquire_above, unique_namespace, LONG,
};
use cosid_core::lease::Owner;
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
    check_renewal_vanished(&c, &a);
    assert!(!c.release(&a, None).unwrap());
    // The keeper asks for a floor at or above the highest ceiling it was granted, so the
    // emptied store cannot give it a window overlapping the one it used.
    assert_eq!(reacquire_above(&c, &a).floor, a.ceiling);
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
