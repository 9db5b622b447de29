//! The store conformance suite: one set of tests that every [`SlotStore`] must pass.
//!
//! # Use
//!
//! In a test file at the root of a test crate (`tests/store_NAME.rs`):
//!
//! ```ignore
//! mod conformance;
//!
//! conformance_suite!(cosid_core::store::open("redis://127.0.0.1:6379/0").unwrap());
//! ```
//!
//! The argument is an expression of type [`SharedStore`]. The suite evaluates it whenever a test
//! needs a handle (once or more per test, from the test's own thread), so **every evaluation
//! must give a handle on the same store**: the same `memory:NAME`, the same SQLite file, the
//! same server. Each test works in a namespace of its own (`t-<case>-<uuid>`), so one store (one
//! server) serves every test, also when tests run in parallel; nothing is cleaned up.
//!
//! The macro expands to one `#[test]` function per case, named after the case, so a failure
//! names the rule that broke. It needs this module to be `crate::conformance` (that is, `mod
//! conformance;` at the root of the test crate). A store test file may call the helpers below
//! for its own store-specific tests.
//!
//! # What it covers
//!
//! Every rule of `docs/protocol.md` (sections 3, 4 and 7), driven through [`LeaseClient`] (the
//! protocol, written once over the primitives), and the primitives themselves where a rule is
//! about the store: compare-and-set with a stale version writes nothing, versions never repeat,
//! records round-trip exactly, a write is seen through another handle, and `2^bits` concurrent
//! acquirers get each slot exactly once. The store losing its data (`Refusal::Vanished`) needs
//! a way to empty the store, which the trait does not have: each store's own test file covers
//! it.
//!
//! No test asserts on timing, except that a lease with a 1 ms ttl is free after sleeping 50 ms
//! and one with a 1 h ttl is not.

#![allow(dead_code)]

use cosid_core::lease::client::{spread_pick, spread_width};
use cosid_core::lease::invariants;
use cosid_core::lease::record::IdLayout;
use cosid_core::lease::{
    rules, AcquireRequest, Acquisition, Choice, LeaseClient, NamespaceRecord, Owner, Refusal,
    Renewal, SlotLease, SlotRecord, Terms, Versioned,
};
use cosid_core::store::hooked::{Call, Hook, Hooked, Reply};
use cosid_core::store::{
    CandidateAsk, CandidateView, NamespaceWrite, SharedStore, SlotStore, SlotWrite, StoreUrl,
};
use cosid_core::{Clock, ErrorKind, Layout, ManualClock, TimeUnit};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

/// Expands to one `#[test]` per conformance case, each running against the store the
/// expression (of type `cosid_core::store::SharedStore`) opens. See the module documentation.
#[macro_export]
macro_rules! conformance_suite {
    ($open:expr) => {
        $crate::conformance_suite!(@cases $open;
            snapshot_of_an_unknown_namespace_is_empty,
            cas_namespace_with_a_stale_version_writes_nothing,
            cas_slot_with_a_stale_version_writes_nothing,
            cas_first_slot_writes_the_first_still_as_read,
            slot_records_round_trip_every_field,
            namespaces_are_isolated,
            versions_never_repeat_for_a_key,
            concurrent_cas_on_one_slot_has_exactly_one_winner,
            writes_are_visible_through_another_handle,
            describe_is_a_store_url,
            candidate_view_of_an_unknown_namespace_has_the_clock_only,
            candidate_view_is_the_filtered_namespace,
            candidate_view_of_a_busy_namespace_leaves_the_others_records_out,
            an_acquisition_reads_one_view_and_writes_once,
            a_starter_that_loses_its_first_choice_takes_the_next_without_reading_again,
            open_namespace_records_limit_and_tolerance,
            namespace_limit_mismatch_is_refused_naming_both_values,
            namespace_tolerance_mismatch_is_refused_naming_both_values,
            namespace_layout_mismatch_is_refused_naming_both_layouts,
            a_namespace_without_a_layout_takes_the_first_runtime_s,
            namespace_ttl_mismatch_is_refused_naming_both_values,
            acquire_follows_the_table,
            acquire_ceiling_is_never_below_the_floor,
            renew_extends_the_lease_and_keeps_the_fence,
            replayed_renewal_succeeds_and_lowers_nothing,
            renew_with_a_stale_fence_is_lost,
            renew_by_another_incarnation_is_lost,
            renew_after_release_is_lost,
            renewal_and_release_are_one_round_trip_each,
            cas_slot_timed_reports_the_store_clock,
            a_renewal_after_another_write_reads_the_slot_then_renews,
            a_renewal_or_release_after_a_takeover_is_refused_and_writes_nothing,
            release_clears_the_owner_and_hands_over_the_last_issued_timestamp,
            release_of_a_holder_that_issued_nothing_sets_next_floor_to_floor,
            release_clamps_last_issued_into_the_window,
            release_of_a_lost_lease_changes_nothing,
            expired_lease_is_free_for_another_owner,
            live_lease_is_not_taken,
            exhausted_names_the_earliest_expiry,
            retry_with_the_same_owner_gets_its_own_slot_back,
            live_lease_of_the_same_key_is_never_taken_over,
            duplicate_owner_key_with_no_free_slot_is_exhausted_not_a_takeover,
            sticky_slot_is_preferred_over_the_lowest,
            preferred_slot_is_taken_when_free,
            preferred_slot_beats_sticky,
            held_or_out_of_range_preferred_slot_falls_back_to_the_lowest,
            raise_not_before_lifts_every_later_floor,
            raise_not_before_on_a_new_namespace_is_completed_by_the_first_runtime,
            raise_not_before_never_lowers,
            raise_not_before_defeats_an_acquisition_racing_it,
            raise_not_before_reports_live_holders_below_it,
            raise_not_before_refuses_a_time_far_ahead_or_outside_the_layout_unless_forced,
            raise_not_before_writes_no_record_for_slots_nobody_can_take,
            every_slot_once_to_64_concurrent_acquirers_then_exhausted,
            every_slot_once_to_1024_concurrent_acquirers_then_exhausted,
            raise_slots_lets_running_and_new_runtimes_take_the_new_slots,
            raise_slots_refuses_lowering_and_beyond_the_layout,
            raise_slots_refuses_a_namespace_without_a_limit_or_a_layout,
            delete_namespace_is_refused_while_a_lease_lives,
            delete_namespace_leaves_a_tombstone_above_every_id,
            delete_namespace_keeps_a_lease_acquired_while_it_ran,
        );
    };
    (@cases $open:expr; $($case:ident),+ $(,)?) => {
        $(
            #[test]
            fn $case() {
                let open = || -> ::cosid_core::store::SharedStore { $open };
                $crate::conformance::$case(&open);
            }
        )+
    };
}

/// The operation timeout of the suite on a network store. The suite runs up to 1024 acquirers on
/// a handful of handles at once on a two-core machine: a generous bound keeps a loaded machine
/// from failing it (the bound is about hangs, not speed; the fault tests use short ones).
pub const SUITE_TIMEOUT: Duration = Duration::from_secs(20);

/// For a network store type `$store` (one with `open_with_timeout`): defines `open(url, timeout)`,
/// the store on `url` with `timeout` on every operation, and `shared()`, a handle on the store at
/// the URL `$shared_url` gives with [`SUITE_TIMEOUT`], and runs the conformance suite on
/// `shared()`.
#[macro_export]
macro_rules! network_conformance_suite {
    ($store:ty, $shared_url:expr) => {
        /// Opens the store on `url` with `timeout` on every operation.
        fn open(
            url: &str,
            timeout: ::std::time::Duration,
        ) -> ::cosid_core::Result<::cosid_core::store::SharedStore> {
            Ok(<$store>::open_with_timeout(
                &::cosid_core::store::StoreUrl::parse(url)?,
                timeout,
            )?)
        }

        /// A handle on the store the conformance suite runs on.
        fn shared() -> ::cosid_core::store::SharedStore {
            open(&$shared_url, $crate::conformance::SUITE_TIMEOUT).expect("the store opens")
        }

        $crate::conformance_suite!(shared());
    };
}

/// Opens a handle on the store under test.
pub type Open<'a> = &'a dyn Fn() -> SharedStore;

/// Terms with a lease long enough that nothing expires during a test.
pub const LONG: Terms = Terms {
    ttl_ms: 3_600_000,
    tolerance_ms: 1_000,
};

/// A namespace no other test (and no earlier run against the same server) uses.
pub fn unique_namespace(case: &str) -> String {
    format!("t-{case}-{}", uuid::Uuid::new_v4().simple())
}

/// A client on `namespace` with `2^bits` slots.
pub fn client(store: &SharedStore, namespace: &str, bits: u8, terms: Terms) -> LeaseClient {
    LeaseClient::new(store.clone(), namespace, bits, terms)
        .unwrap_or_else(|e| panic!("a client for '{namespace}': {e}"))
}

/// A plain request: no preferred slot, no lower bound on the floor.
pub fn request(owner: &Owner) -> AcquireRequest {
    AcquireRequest {
        owner: owner.clone(),
        preferred_slot: None,
        floor_at_least: 0,
    }
}

/// Acquires for `owner` or fails the test with the error.
pub fn acquire(client: &LeaseClient, owner: &Owner) -> Acquisition {
    acquire_with(client, request(owner))
}

/// Acquires with `req` or fails the test with the error.
pub fn acquire_with(client: &LeaseClient, req: AcquireRequest) -> Acquisition {
    client
        .acquire(&req)
        .unwrap_or_else(|e| panic!("{} acquires in '{}': {e}", req.owner, client.namespace()))
}

/// The record of one slot, which must exist.
pub fn record(store: &SharedStore, namespace: &str, slot: u32) -> Versioned<SlotRecord> {
    store
        .read_slot(namespace, slot)
        .unwrap_or_else(|e| panic!("reading slot {slot} of '{namespace}': {e}"))
        .1
        .unwrap_or_else(|| panic!("slot {slot} of '{namespace}' has no record"))
}

fn renewed(client: &LeaseClient, lease: &SlotLease) -> SlotLease {
    match client.renew(lease).expect("renewal reaches the store") {
        Renewal::Renewed(l) => l,
        Renewal::Lost(r) => panic!("renewal of slot {} refused: {r:?}", lease.slot),
    }
}

fn lost(client: &LeaseClient, lease: &SlotLease) -> Refusal {
    match client.renew(lease).expect("renewal reaches the store") {
        Renewal::Renewed(l) => panic!("renewal should have been refused, got {l:?}"),
        Renewal::Lost(r) => r,
    }
}

fn held(owner: &Owner, slot: u32, fence: u64) -> SlotRecord {
    SlotRecord {
        owner: Some(owner.clone()),
        last_owner_key: Some(owner.key.clone()),
        fence,
        expires_at: 1_000,
        floor: 10,
        ceiling: 2_000,
        next_floor: 2_000,
        ..SlotRecord::vacant(slot)
    }
}

/// The store under test, counting the primitives called through it: each is one round trip to
/// a network store (one transaction on SQLite). Every call goes to the real store unchanged.
#[derive(Debug, Default)]
pub struct Counting {
    /// One count per primitive, in the order of `Call::NAMES`.
    calls: [AtomicU64; Call::NAMES.len()],
}

/// The primitives called through a [`Counting`] store since the last look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Calls {
    pub snapshot: u64,
    pub cas_namespace: u64,
    pub read_slot: u64,
    pub cas_slot: u64,
    pub cas_slot_timed: u64,
    pub candidates: u64,
}

impl Calls {
    /// Round trips: every primitive is one.
    pub fn total(&self) -> u64 {
        self.snapshot
            + self.cas_namespace
            + self.read_slot
            + self.cas_slot
            + self.cas_slot_timed
            + self.candidates
    }
}

impl Counting {
    /// `inner`, counted.
    pub fn wrap(inner: SharedStore) -> Arc<Hooked<Counting>> {
        Hooked::new(inner, Counting::default())
    }

    /// The calls since the last `take`, and a fresh count.
    pub fn take(&self) -> Calls {
        let n = |i: usize| self.calls[i].swap(0, Ordering::SeqCst);
        Calls {
            snapshot: n(0),
            cas_namespace: n(1),
            read_slot: n(2),
            cas_slot: n(3),
            cas_slot_timed: n(4),
            candidates: n(5),
        }
    }
}

impl Hook for Counting {
    fn call(&self, inner: &dyn SlotStore, call: Call<'_>) -> cosid_core::Result<Reply> {
        self.calls[call.index()].fetch_add(1, Ordering::SeqCst);
        call.on(inner)
    }
}

/// Renewing `lease` is refused because the store no longer has it (`Refusal::Vanished`): a
/// store that lost its data or its file.
pub fn check_renewal_vanished(c: &LeaseClient, lease: &SlotLease) {
    match c.renew(lease).unwrap() {
        Renewal::Lost(refusal) => assert_eq!(refusal, Refusal::Vanished),
        Renewal::Renewed(l) => panic!("renewed a lease the store no longer has: {l:?}"),
    }
}

/// `lease`'s owner acquires again as its keeper does after a loss: with a floor at or above the
/// highest ceiling it was granted, `lease`'s.
pub fn reacquire_above(c: &LeaseClient, lease: &SlotLease) -> SlotLease {
    acquire_with(
        c,
        AcquireRequest {
            floor_at_least: lease.ceiling,
            ..request(&lease.owner)
        },
    )
    .lease
}

/// The store's clock now, read through `store` (for an estimate a test passes to
/// [`LeaseClient::renew_at`]).
pub fn store_clock(store: &SharedStore, namespace: &str) -> i64 {
    store
        .read_slot(namespace, 0)
        .unwrap_or_else(|e| panic!("reading the store's clock: {e}"))
        .0
}

fn renewed_at(client: &LeaseClient, lease: &SlotLease, store_now: i64) -> SlotLease {
    match client
        .renew_at(lease, store_now)
        .expect("renewal reaches the store")
    {
        Renewal::Renewed(l) => l,
        Renewal::Lost(r) => panic!("renewal of slot {} refused: {r:?}", lease.slot),
    }
}

// ----------------------------------------------------------------------------------------------
// The primitives
// ----------------------------------------------------------------------------------------------

/// A namespace never written has no record and no slots.
pub fn snapshot_of_an_unknown_namespace_is_empty(open: Open) {
    let store = open();
    let ns = unique_namespace("unknown");
    let snap = store.snapshot(&ns).unwrap();
    assert_eq!(snap.namespace, None);
    assert!(snap.slots.slots.is_empty(), "{:?}", snap.slots.slots);
    assert_eq!(store.read_slot(&ns, 0).unwrap().1, None);
}

/// `cas_namespace` creates only where there is no record, and then writes only under the
/// current version; a stale version writes nothing and returns `None`.
pub fn cas_namespace_with_a_stale_version_writes_nothing(open: Open) {
    let store = open();
    let ns = unique_namespace("cas-ns");
    let a = NamespaceRecord {
        limit: 8,
        tolerance_ms: 1_000,
        not_before_ms: 0,
        layout: None,
        ttl_ms: None,
    };
    let b = NamespaceRecord {
        not_before_ms: 5,
        ..a
    };
    let v1 = store
        .cas_namespace(&ns, NamespaceWrite::new(None, &a))
        .unwrap()
        .expect("created");
    assert_eq!(
        store
            .cas_namespace(&ns, NamespaceWrite::new(None, &b))
            .unwrap(),
        None
    );
    let current = store.snapshot(&ns).unwrap().namespace;
    assert_eq!(
        current,
        Some(Versioned {
            value: a,
            version: v1
        })
    );
    assert_eq!(
        store
            .cas_namespace(&ns, NamespaceWrite::new(Some(v1 ^ 1), &b))
            .unwrap(),
        None
    );
    let v2 = store
        .cas_namespace(&ns, NamespaceWrite::new(Some(v1), &b))
        .unwrap()
        .expect("the current version writes");
    assert_eq!(
        store
            .cas_namespace(&ns, NamespaceWrite::new(Some(v1), &a))
            .unwrap(),
        None
    );
    assert_eq!(
        store.snapshot(&ns).unwrap().namespace,
        Some(Versioned {
            value: b,
            version: v2
        })
    );
}

/// `cas_slot` creates only where there is no record, and then writes only under the current
/// version; a stale version writes nothing and returns `None`.
pub fn cas_slot_with_a_stale_version_writes_nothing(open: Open) {
    let store = open();
    let ns = unique_namespace("cas-slot");
    let a = held(&Owner::new("a"), 3, 1);
    let b = held(&Owner::new("b"), 3, 2);
    let v1 = store
        .cas_slot(&ns, SlotWrite::new(None, &a))
        .unwrap()
        .expect("created");
    assert_eq!(store.cas_slot(&ns, SlotWrite::new(None, &b)).unwrap(), None);
    assert_eq!(
        record(&store, &ns, 3),
        Versioned {
            value: a.clone(),
            version: v1
        }
    );
    assert_eq!(
        store
            .cas_slot(&ns, SlotWrite::new(Some(v1 ^ 1), &b))
            .unwrap(),
        None
    );
    assert_eq!(record(&store, &ns, 3).value, a);
    let v2 = store
        .cas_slot(&ns, SlotWrite::new(Some(v1), &b))
        .unwrap()
        .expect("the current version writes");
    assert_eq!(
        store.cas_slot(&ns, SlotWrite::new(Some(v1), &a)).unwrap(),
        None
    );
    assert_eq!(
        record(&store, &ns, 3),
        Versioned {
            value: b,
            version: v2
        }
    );
    // Another slot of the same namespace is its own key.
    assert_eq!(store.read_slot(&ns, 4).unwrap().1, None);
}

/// A compare-and-set over several slots writes the first whose version is still the expected
/// one, and only it: the slots before it (stale) and after it (not tried) keep their records.
/// When none matches, nothing is written. One write is `cas_slot`.
pub fn cas_first_slot_writes_the_first_still_as_read(open: Open) {
    let store = open();
    let ns = unique_namespace("cas-first");
    let (owner_a, owner_b) = (Owner::new("a"), Owner::new("b"));
    let a = |slot| held(&owner_a, slot, 1);
    let b = |slot| held(&owner_b, slot, 2);
    let v3 = store
        .cas_slot(&ns, SlotWrite::new(None, &a(3)))
        .unwrap()
        .expect("created");
    let v5 = store
        .cas_slot(&ns, SlotWrite::new(None, &a(5)))
        .unwrap()
        .expect("created");
    let write = SlotWrite::new;
    let (b3, b4, b5, b6, a5) = (b(3), b(4), b(5), b(6), a(5));
    let stale = [
        write(Some(v3 ^ 1), &b3), // another version than the record's
        write(None, &b5),         // a record where none was expected
        write(Some(v5), &b4),     // a version where the slot has no record
    ];
    assert_eq!(store.cas_first_slot(&ns, &stale).unwrap(), None);
    let unchanged = |slot, version| {
        assert_eq!(
            record(&store, &ns, slot),
            Versioned {
                value: a(slot),
                version
            },
            "slot {slot} was written though no write to it matched"
        );
    };
    unchanged(3, v3);
    unchanged(5, v5);
    assert_eq!(store.read_slot(&ns, 4).unwrap().1, None);

    let mut writes = stale.to_vec();
    writes.push(write(Some(v5), &b5)); // the first that matches
    writes.push(write(None, &b6)); // matches too, but comes after
    let (i, v) = store
        .cas_first_slot(&ns, &writes)
        .unwrap()
        .expect("the fourth write matches");
    assert_eq!(i, 3, "the first write whose version matched");
    assert!(v != v3 && v != v5, "version {v} repeated");
    assert_eq!(
        record(&store, &ns, 5),
        Versioned {
            value: b(5),
            version: v
        }
    );
    unchanged(3, v3);
    assert_eq!(store.read_slot(&ns, 4).unwrap().1, None);
    assert_eq!(
        store.read_slot(&ns, 6).unwrap().1,
        None,
        "a write after the first was made"
    );

    // One write is a plain compare-and-set.
    assert_eq!(
        store.cas_first_slot(&ns, &[write(Some(v5), &a5)]).unwrap(),
        None
    );
    let (i, v6) = store
        .cas_first_slot(&ns, &[write(None, &b6)])
        .unwrap()
        .expect("slot 6 has no record");
    assert_eq!(i, 0);
    assert_eq!(
        record(&store, &ns, 6),
        Versioned {
            value: b(6),
            version: v6
        }
    );
    assert_eq!(
        store.cas_first_slot(&ns, &[]).unwrap(),
        None,
        "no write, nothing written"
    );
}

/// Every field comes back exactly as written, over the whole range of its type (a store that
/// keeps numbers as doubles would lose the low bits of large ones).
pub fn slot_records_round_trip_every_field(open: Open) {
    let store = open();
    let ns = unique_namespace("round-trip");
    let owner = Owner::new("hôst-ü:8080/✓ with spaces");
    let extreme = SlotRecord {
        slot: (1 << 20) - 1,
        owner: Some(owner.clone()),
        last_owner_key: Some("previous key".into()),
        fence: (1 << 53) + 1,
        expires_at: (1 << 53) + 3,
        floor: i64::MIN,
        ceiling: i64::MAX,
        next_floor: i64::MAX - 1,
    };
    let released = SlotRecord {
        slot: 0,
        owner: None,
        last_owner_key: Some(owner.key.clone()),
        fence: 2,
        expires_at: 1_700_000_000_123,
        floor: -1,
        ceiling: 1_700_000_001_123,
        next_floor: 1_700_000_000_999,
    };
    let never = SlotRecord::vacant(7);
    let mut versions = Vec::new();
    for rec in [&extreme, &released, &never] {
        versions.push(
            store
                .cas_slot(&ns, SlotWrite::new(None, rec))
                .unwrap()
                .expect("created"),
        );
    }
    for (rec, version) in [&extreme, &released, &never].into_iter().zip(&versions) {
        assert_eq!(
            record(&store, &ns, rec.slot),
            Versioned {
                value: rec.clone(),
                version: *version
            }
        );
    }
    let mut snap = store.snapshot(&ns).unwrap().slots.slots;
    snap.sort_by_key(|r| r.value.slot);
    assert_eq!(
        snap,
        vec![
            Versioned {
                value: released,
                version: versions[1]
            },
            Versioned {
                value: never,
                version: versions[2]
            },
            Versioned {
                value: extreme,
                version: versions[0]
            },
        ]
    );
    let ns_rec = NamespaceRecord {
        limit: 1 << 20,
        tolerance_ms: i64::MAX,
        not_before_ms: (1 << 53) + 1,
        layout: Some(IdLayout::of(&Layout::SAFE_JS_SECONDS)),
        ttl_ms: None,
    };
    let v = store
        .cas_namespace(&ns, NamespaceWrite::new(None, &ns_rec))
        .unwrap()
        .unwrap();
    assert_eq!(
        store.snapshot(&ns).unwrap().namespace,
        Some(Versioned {
            value: ns_rec,
            version: v
        })
    );
}

/// Records of one namespace are invisible in another, also for the same slot number.
pub fn namespaces_are_isolated(open: Open) {
    let store = open();
    let (a, b) = (unique_namespace("iso-a"), unique_namespace("iso-b"));
    let rec = held(&Owner::new("a"), 1, 1);
    store
        .cas_slot(&a, SlotWrite::new(None, &rec))
        .unwrap()
        .unwrap();
    store
        .cas_namespace(
            &a,
            NamespaceWrite::new(
                None,
                &NamespaceRecord {
                    limit: 2,
                    tolerance_ms: 1,
                    not_before_ms: 0,
                    layout: None,
                    ttl_ms: None,
                },
            ),
        )
        .unwrap()
        .unwrap();
    let snap = store.snapshot(&b).unwrap();
    assert_eq!(snap.namespace, None);
    assert!(snap.slots.slots.is_empty());
    assert_eq!(store.read_slot(&b, 1).unwrap().1, None);
    // The same slot in namespace b is created fresh, not as a successor of a's.
    let other = held(&Owner::new("b"), 1, 1);
    store
        .cas_slot(&b, SlotWrite::new(None, &other))
        .unwrap()
        .expect("b has no record of slot 1 yet");
    assert_eq!(record(&store, &a, 1).value, rec);
    assert_eq!(record(&store, &b, 1).value, other);
}

/// No version is handed out twice for one key (a slot, a namespace record).
pub fn versions_never_repeat_for_a_key(open: Open) {
    let store = open();
    let ns = unique_namespace("versions");
    let owner = Owner::new("v");
    let mut seen = HashSet::new();
    let mut version = None;
    for fence in 0..50u64 {
        let v = store
            .cas_slot(&ns, SlotWrite::new(version, &held(&owner, 0, fence)))
            .unwrap()
            .expect("the current version writes");
        assert!(seen.insert(v), "slot version {v} handed out twice");
        version = Some(v);
    }
    let mut seen = HashSet::new();
    let mut version = None;
    for i in 0..20 {
        let rec = NamespaceRecord {
            limit: 4,
            tolerance_ms: 1_000,
            not_before_ms: i,
            layout: None,
            ttl_ms: None,
        };
        let v = store
            .cas_namespace(&ns, NamespaceWrite::new(version, &rec))
            .unwrap()
            .unwrap();
        assert!(seen.insert(v), "namespace version {v} handed out twice");
        version = Some(v);
    }
}

/// Many writers racing one compare-and-set: exactly one wins, and its record is what the
/// store keeps. Repeated under an existing version.
pub fn concurrent_cas_on_one_slot_has_exactly_one_winner(open: Open) {
    const N: usize = 16;
    let ns = unique_namespace("cas-race");
    let handles: Vec<SharedStore> = (0..4).map(|_| open()).collect();
    let mut expected = None;
    for round in 0..3u64 {
        let barrier = Arc::new(Barrier::new(N));
        let threads: Vec<_> = (0..N)
            .map(|i| {
                let store = handles[i % handles.len()].clone();
                let (ns, barrier) = (ns.clone(), barrier.clone());
                let rec = held(&Owner::new(format!("w{i}")), 0, round * 100 + i as u64);
                thread::spawn(move || {
                    barrier.wait();
                    (
                        rec.clone(),
                        store.cas_slot(&ns, SlotWrite::new(expected, &rec)).unwrap(),
                    )
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let winners: Vec<_> = results.iter().filter(|(_, v)| v.is_some()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let (rec, version) = winners[0];
        assert_eq!(
            record(&handles[0], &ns, 0),
            Versioned {
                value: rec.clone(),
                version: version.unwrap()
            }
        );
        expected = *version;
    }
}

/// A write through one handle is seen through another at once (linearizable).
pub fn writes_are_visible_through_another_handle(open: Open) {
    let (h1, h2) = (open(), open());
    let ns = unique_namespace("handles");
    let a = acquire(&client(&h1, &ns, 0, LONG), &Owner::new("a"));
    let seen = record(&h2, &ns, 0);
    assert_eq!(seen, record(&h1, &ns, 0));
    assert_eq!(seen.value.owner.as_ref(), Some(&a.lease.owner));
    let e = client(&h2, &ns, 0, LONG)
        .acquire(&request(&Owner::new("b")))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
    let renewed = renewed(&client(&h2, &ns, 0, LONG), &a.lease);
    assert_eq!(record(&h1, &ns, 0).value.expires_at, renewed.expires_at);
}

/// `describe()` is a store URL (without a password): it is what messages and logs show.
pub fn describe_is_a_store_url(open: Open) {
    let store = open();
    let described = store.describe();
    if let Err(e) = StoreUrl::parse(&described) {
        panic!("describe() gave '{described}', not a store URL: {e}");
    }
}

// ----------------------------------------------------------------------------------------------
// The candidate view (what an acquisition reads)
// ----------------------------------------------------------------------------------------------

/// What a store's candidate view must hold, checked against a snapshot read just before: the
/// same namespace record, the live slots exactly, every whole record it returns as stored, and
/// every record the filter wants ([`CandidateView::filtered`] over the snapshot, at the view's
/// clock). Nothing may write the namespace meanwhile. Returns the view.
pub fn check_candidate_view(
    store: &SharedStore,
    ns: &str,
    ask: &CandidateAsk<'_>,
) -> CandidateView {
    let snap = store.snapshot(ns).unwrap();
    let view = store.candidates(ns, ask).unwrap();
    assert_eq!(view.namespace, snap.namespace, "the namespace record");
    assert!(
        view.store_now >= snap.slots.store_now,
        "the view's clock {} runs on from the snapshot's {}",
        view.store_now,
        snap.slots.store_now
    );
    let wanted = CandidateView::filtered(
        snap.namespace,
        view.store_now,
        snap.slots.slots.clone(),
        ask,
    );
    let sorted = |mut v: Vec<u32>| {
        v.sort_unstable();
        v
    };
    assert_eq!(
        sorted(view.live.clone()),
        sorted(wanted.live.clone()),
        "the live slots"
    );
    assert!(
        view.covered_below >= wanted.covered_below,
        "covers {} slots, at least {} wanted",
        view.covered_below,
        wanted.covered_below
    );
    for r in &view.records {
        assert!(snap.slots.slots.contains(r), "returned as stored: {r:?}");
    }
    for r in &wanted.records {
        assert!(view.records.contains(r), "the view leaves out {r:?}");
    }
    for r in &snap.slots.slots {
        if r.value.slot < view.covered_below && !view.live.contains(&r.value.slot) {
            assert!(view.records.contains(r), "covered but left out: {r:?}");
        }
    }
    view
}

/// A namespace never written: no record, nothing covered, the store's clock.
pub fn candidate_view_of_an_unknown_namespace_has_the_clock_only(open: Open) {
    let store = open();
    let ns = unique_namespace("view-unknown");
    let ask = CandidateAsk {
        owner_key: Some("k"),
        preferred_slot: Some(3),
        free_min: 64,
        free_per_live: 2,
    };
    let view = check_candidate_view(&store, &ns, &ask);
    assert_eq!(view.namespace, None);
    assert_eq!(view.covered_below, 0);
    assert!(view.live.is_empty() && view.records.is_empty());
    assert!(
        view.store_now > 1_600_000_000_000,
        "a clock in ms: {}",
        view.store_now
    );
}

/// Plants every kind of record a view sorts (live and expired, released with and without the
/// asker's key as last owner, the asker's key held by another incarnation, records past a
/// narrow covered range) in a namespace of 128 slots; returns the namespace.
pub fn plant_view_records(store: &SharedStore, case: &str) -> String {
    let ns = unique_namespace(case);
    client(store, &ns, 7, LONG).open_namespace().unwrap();
    let now = store_clock(store, &ns);
    let plant = |slot: u32, owner: Option<&str>, last: Option<&str>, expires_at: i64| {
        let rec = SlotRecord {
            owner: owner.map(Owner::new),
            last_owner_key: last.map(String::from),
            fence: 1,
            expires_at,
            floor: 5,
            ceiling: expires_at.max(5),
            next_floor: expires_at.max(5),
            ..SlotRecord::vacant(slot)
        };
        assert!(store
            .cas_slot(&ns, SlotWrite::new(None, &rec))
            .unwrap()
            .is_some());
    };
    plant(0, Some("other"), Some("other"), now + 3_600_000);
    plant(1, Some("other"), Some("other"), now - 1_000);
    plant(2, None, Some("other"), now - 1_000);
    plant(3, None, Some("me"), now - 1_000);
    plant(5, Some("me"), Some("me"), now + 3_600_000);
    plant(40, None, Some("stranger"), 0);
    plant(41, Some("stranger"), Some("stranger"), now + 3_600_000);
    plant(50, None, Some("me"), 0);
    plant(60, Some("x y=z"), None, now - 5);
    ns
}

/// A view asked for a few free slots covers them and leaves out the records of free slots past
/// them, but still returns every record of the asker's key and the preferred slot's.
pub fn candidate_view_is_the_filtered_namespace(open: Open) {
    let store = open();
    let ns = plant_view_records(&store, "view-filtered");
    for ask in [
        CandidateAsk {
            owner_key: Some("me"),
            preferred_slot: Some(60),
            free_min: 3,
            free_per_live: 0,
        },
        CandidateAsk {
            owner_key: Some("me"),
            preferred_slot: None,
            free_min: 64,
            free_per_live: 2,
        },
        CandidateAsk {
            owner_key: Some("x y=z"),
            preferred_slot: Some(127),
            free_min: 1,
            free_per_live: 1,
        },
        CandidateAsk::NAMESPACE_ONLY,
    ] {
        let view = check_candidate_view(&store, &ns, &ask);
        assert_eq!(view.namespace.map(|n| n.value.limit), Some(128), "{ask:?}");
    }
}

/// A namespace of 1024 slots where 200 runtimes of other keys hold a slot each.
fn busy_namespace(store: &SharedStore, case: &str) -> (LeaseClient, String) {
    let ns = unique_namespace(case);
    let c = client(store, &ns, 10, LONG);
    for i in 0..200 {
        acquire(&c, &Owner::new(format!("busy-{i}")));
    }
    (c, ns)
}

/// What a starter of a key new to the namespace asks on its first attempt.
const NEWCOMER_ASK: CandidateAsk<'static> = CandidateAsk {
    owner_key: Some("newcomer"),
    preferred_slot: None,
    free_min: 64,
    free_per_live: 2,
};

/// For a store that filters its candidate view on its side (not part of the suite: the
/// provided view, every record, is a valid answer too). Among 200 live leases of others, the
/// view a newcomer asks for covers `64 + 3 × 200` slots and returns none of their records.
pub fn candidate_view_is_filtered_by_the_store(open: Open) {
    let store = open();
    let (_, ns) = busy_namespace(&store, "view-by-the-store");
    let view = check_candidate_view(&store, &ns, &NEWCOMER_ASK);
    assert_eq!(view.live.len(), 200);
    assert_eq!(view.covered_below, 664);
    assert_eq!(view.records, [], "no record is wanted whole");
}

/// 200 live leases of others: a view asked for the asker's records and a few free slots names
/// the live slots, and an acquisition through it takes a slot that was free.
pub fn candidate_view_of_a_busy_namespace_leaves_the_others_records_out(open: Open) {
    let store = open();
    let (c, ns) = busy_namespace(&store, "view-busy");
    let view = check_candidate_view(&store, &ns, &NEWCOMER_ASK);
    assert_eq!(view.live.len(), 200);
    let newcomer = acquire(&c, &Owner::new("newcomer")).lease;
    assert!(
        !view.live.contains(&newcomer.slot),
        "slot {} was live",
        newcomer.slot
    );
}

/// An acquisition in a namespace that is open reads the namespace once (a candidate view) and
/// writes once.
pub fn an_acquisition_reads_one_view_and_writes_once(open: Open) {
    let store = open();
    let counting = Counting::wrap(store.clone());
    let ns = unique_namespace("view-trips");
    let c = client(&(counting.clone() as SharedStore), &ns, 8, LONG);
    c.open_namespace().unwrap();
    acquire(&c, &Owner::new("first"));
    counting.take();
    acquire(&c, &Owner::new("second"));
    assert_eq!(
        counting.take(),
        Calls {
            candidates: 1,
            cas_slot: 1,
            ..Calls::default()
        }
    );
}

/// Takes the first slot of the first compare-and-set over several slots just before the store
/// sees it (another starter's write landing between this one's read and its write), then
/// hands the whole call to the store's own `cas_first_slot`; counts the candidate views read.
#[derive(Debug)]
struct TakesTheFirstChoice {
    taker: Owner,
    /// The first and second slot offered, once the first call came.
    offered: std::sync::Mutex<Option<(u32, u32)>>,
    views: AtomicU64,
}

impl Hook for TakesTheFirstChoice {
    fn call(&self, inner: &dyn SlotStore, call: Call<'_>) -> cosid_core::Result<Reply> {
        match call {
            Call::Candidates { .. } => {
                self.views.fetch_add(1, Ordering::SeqCst);
            }
            Call::CasFirstSlot { namespace, writes } => {
                let mut offered = self.offered.lock().unwrap();
                if offered.is_none() {
                    assert!(writes.len() >= 2, "offered {writes:?}");
                    let first = writes[0].record.slot;
                    *offered = Some((first, writes[1].record.slot));
                    let (_, current) = inner.read_slot(namespace, first)?;
                    let taken = held(&self.taker, first, 1);
                    let wrote = inner.cas_slot(
                        namespace,
                        SlotWrite::new(current.map(|c| c.version), &taken),
                    )?;
                    assert!(wrote.is_some(), "the taker wrote slot {first}");
                }
            }
            _ => {}
        }
        call.on(inner)
    }

    fn sees_each_write(&self) -> bool {
        false
    }
}

/// A starter whose first choice (its preferred slot) was taken between its read and its write
/// takes its next (its sticky slot) in the same compare-and-set call, through the store's own
/// `cas_first_slot`, without reading the namespace again; the slot taken keeps the taker's
/// record.
pub fn a_starter_that_loses_its_first_choice_takes_the_next_without_reading_again(open: Open) {
    let store = open();
    let ns = unique_namespace("next-choice");
    let owner = Owner::new("returning");
    client(&store, &ns, 8, LONG).open_namespace().unwrap();
    // Slot 9 was last held by this key: its sticky slot.
    let released = SlotRecord {
        last_owner_key: Some(owner.key.clone()),
        ..SlotRecord::vacant(9)
    };
    store
        .cas_slot(&ns, SlotWrite::new(None, &released))
        .unwrap()
        .expect("planted");
    let hooked = Hooked::new(
        store.clone(),
        TakesTheFirstChoice {
            taker: Owner::new("quicker"),
            offered: std::sync::Mutex::new(None),
            views: AtomicU64::new(0),
        },
    );
    let c = client(&(hooked.clone() as SharedStore), &ns, 8, LONG);
    let got = acquire_with(
        &c,
        AcquireRequest {
            preferred_slot: Some(5),
            ..request(&owner)
        },
    );
    assert_eq!(*hooked.offered.lock().unwrap(), Some((5, 9)));
    assert_eq!((got.lease.slot, got.choice), (9, Choice::Sticky));
    assert_eq!(
        hooked.views.load(Ordering::SeqCst),
        1,
        "read the namespace again"
    );
    assert_eq!(
        record(&store, &ns, 5).value.owner.as_ref(),
        Some(&hooked.taker)
    );
    assert_eq!(record(&store, &ns, 9).value.owner.as_ref(), Some(&owner));
}

// ----------------------------------------------------------------------------------------------
// The namespace record {limit, tolerance, layout} (docs/protocol.md section 7)
// ----------------------------------------------------------------------------------------------

/// The first runtime writes `{limit = 2^bits, tolerance}`; the next one with the same values
/// reads it back.
pub fn open_namespace_records_limit_and_tolerance(open: Open) {
    let store = open();
    let ns = unique_namespace("ns-open");
    let terms = Terms {
        ttl_ms: 30_000,
        tolerance_ms: 1_500,
    };
    let rec = client(&store, &ns, 5, terms).open_namespace().unwrap();
    let want = NamespaceRecord {
        limit: 32,
        tolerance_ms: 1_500,
        not_before_ms: 0,
        layout: None,
        ttl_ms: None,
    };
    assert_eq!(rec, want);
    assert_eq!(store.snapshot(&ns).unwrap().namespace.unwrap().value, want);
    // Another ttl is fine: only limit and tolerance are the namespace's.
    let again = client(
        &open(),
        &ns,
        5,
        Terms {
            ttl_ms: 5_000,
            ..terms
        },
    );
    assert_eq!(again.open_namespace().unwrap(), want);
}

fn assert_mismatch(e: cosid_core::Error, ns: &str, recorded: &str, asked: &str) {
    assert_eq!(e.kind(), ErrorKind::NamespaceMismatch, "{e}");
    let m = e.message();
    let at = m
        .find(ns)
        .unwrap_or_else(|| panic!("names the namespace: {m}"));
    // Look past the namespace, whose random part may hold the digits looked for.
    let m = &m[at + ns.len()..];
    let (r, a) = (
        m.find(recorded)
            .unwrap_or_else(|| panic!("names '{recorded}': {m}")),
        m.find(asked)
            .unwrap_or_else(|| panic!("names '{asked}': {m}")),
    );
    assert!(r < a, "names the recorded value, then the asked one: {m}");
}

/// A runtime asking for another limit is refused, naming both values.
pub fn namespace_limit_mismatch_is_refused_naming_both_values(open: Open) {
    let store = open();
    let ns = unique_namespace("ns-limit");
    acquire(&client(&store, &ns, 4, LONG), &Owner::new("a"));
    let other = client(&store, &ns, 6, LONG);
    let e = other.open_namespace().unwrap_err();
    assert_mismatch(e, &ns, "limit 16", "64");
    let e = other.acquire(&request(&Owner::new("b"))).unwrap_err();
    assert_mismatch(e, &ns, "limit 16", "64");
    assert_eq!(
        store.snapshot(&ns).unwrap().namespace.unwrap().value.limit,
        16
    );
}

/// A runtime asking for another tolerance is refused, naming both values.
pub fn namespace_tolerance_mismatch_is_refused_naming_both_values(open: Open) {
    let store = open();
    let ns = unique_namespace("ns-tolerance");
    acquire(&client(&store, &ns, 2, LONG), &Owner::new("a"));
    let other = client(
        &store,
        &ns,
        2,
        Terms {
            ttl_ms: 60_000,
            tolerance_ms: 2_000,
        },
    );
    let e = other.open_namespace().unwrap_err();
    assert_mismatch(e, &ns, "tolerance 1s", "2s");
    let e = other.acquire(&request(&Owner::new("b"))).unwrap_err();
    assert_mismatch(e, &ns, "tolerance 1s", "2s");
    let snap = store.snapshot(&ns).unwrap();
    assert_eq!(snap.namespace.unwrap().value.tolerance_ms, 1_000);
    assert_eq!(
        snap.slots.slots.len(),
        1,
        "the refused runtime took no slot"
    );
}

/// The namespace records the ttl of its first runtime (the restart guard bounds the ceilings a
/// lost store granted by it), and refuses a runtime of another ttl, naming both; a tool that
/// issues no ids (no layout) neither records nor checks it.
pub fn namespace_ttl_mismatch_is_refused_naming_both_values(open: Open) {
    let store = open();
    let ns = unique_namespace("ns-ttl");
    let first = client(&store, &ns, 2, LONG).with_layout(&Layout::MILLIS);
    assert_eq!(first.open_namespace().unwrap().ttl_ms, Some(LONG.ttl_ms));
    acquire(&first, &Owner::new("a"));
    let short = Terms {
        ttl_ms: 10_000,
        ..LONG
    };
    let other = client(&open(), &ns, 2, short).with_layout(&Layout::MILLIS);
    for e in [
        other.open_namespace().unwrap_err(),
        other.acquire(&request(&Owner::new("b"))).unwrap_err(),
    ] {
        assert_mismatch(e, &ns, "ttl 1h", "10s");
    }
    let tool = client(&open(), &ns, 2, short);
    assert_eq!(tool.open_namespace().unwrap().ttl_ms, Some(LONG.ttl_ms));
    let snap = store.snapshot(&ns).unwrap();
    assert_eq!(
        snap.slots.slots.len(),
        1,
        "the refused runtime took no slot"
    );
}

/// A layout like the millisecond preset with its epoch moved `by_ms`.
fn millis_layout_with_epoch_moved(by_ms: i64) -> Layout {
    Layout::new(
        Layout::MILLIS.epoch_ms() + by_ms,
        TimeUnit::Millis,
        41,
        10,
        12,
        false,
    )
    .unwrap()
}

/// Two runtimes of one namespace whose epochs are 2 s apart would issue the same ids (the
/// second's time `t` is the first's `t - 2s`): the namespace records the first one's layout
/// and refuses the second, naming both layouts.
pub fn namespace_layout_mismatch_is_refused_naming_both_layouts(open: Open) {
    let store = open();
    let ns = unique_namespace("layout-mismatch");
    let first = IdLayout::of(&Layout::MILLIS);
    let second = millis_layout_with_epoch_moved(2_000);
    let a = client(&store, &ns, 3, LONG).with_layout(&Layout::MILLIS);
    assert_eq!(a.open_namespace().unwrap().layout, Some(first));
    acquire(&a, &Owner::new("a"));
    let b = client(&open(), &ns, 3, LONG).with_layout(&second);
    for e in [
        b.open_namespace().unwrap_err(),
        b.acquire(&request(&Owner::new("b"))).unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::NamespaceMismatch, "{e}");
        let m = e.message();
        assert!(m.contains(&ns), "{m}");
        assert!(
            m.contains(&first.encode()),
            "names the recorded layout: {m}"
        );
        assert!(
            m.contains(&IdLayout::of(&second).encode()),
            "names this runtime's layout: {m}"
        );
        assert!(
            m.contains("cosid.snowflake"),
            "names the setting to fix: {m}"
        );
    }
    // Another unit or bit split is refused the same way; the same layout is accepted.
    let seconds = client(&open(), &ns, 3, LONG).with_layout(&Layout::SECONDS);
    assert_eq!(
        seconds.open_namespace().unwrap_err().kind(),
        ErrorKind::NamespaceMismatch
    );
    let same = client(&open(), &ns, 3, LONG).with_layout(&Layout::MILLIS);
    assert_eq!(same.open_namespace().unwrap().layout, Some(first));
}

/// A namespace record written before layouts were recorded (or by `cosid migrate`) has none:
/// the first runtime that opens it writes its own by compare-and-set, and a runtime of
/// another layout is refused from then on. The migration's not-before is kept.
pub fn a_namespace_without_a_layout_takes_the_first_runtime_s(open: Open) {
    let store = open();
    let ns = unique_namespace("layout-adopted");
    let old = NamespaceRecord {
        limit: 8,
        tolerance_ms: LONG.tolerance_ms,
        not_before_ms: 77,
        layout: None,
        ttl_ms: None,
    };
    store
        .cas_namespace(&ns, NamespaceWrite::new(None, &old))
        .unwrap()
        .unwrap();
    let mine = millis_layout_with_epoch_moved(-2_000);
    let a = client(&store, &ns, 3, LONG).with_layout(&mine);
    let got = acquire(&a, &Owner::new("a"));
    assert!(got.lease.floor >= 77);
    let rec = store.snapshot(&ns).unwrap().namespace.unwrap().value;
    assert_eq!(
        rec,
        NamespaceRecord {
            layout: Some(IdLayout::of(&mine)),
            ttl_ms: Some(LONG.ttl_ms),
            ..old
        }
    );
    let b = client(&open(), &ns, 3, LONG).with_layout(&Layout::MILLIS);
    assert_eq!(
        b.open_namespace().unwrap_err().kind(),
        ErrorKind::NamespaceMismatch
    );
    // A tool that issues no ids (no layout) still reads the namespace, and `cosid migrate`
    // keeps the layout.
    client(&open(), &ns, 3, LONG).open_namespace().unwrap();
    let m = cosid_core::lease::LeaseClient::raise_not_before(&store, &ns, 1_000, true).unwrap();
    assert_eq!(m.namespace.layout, Some(IdLayout::of(&mine)));
}

// ----------------------------------------------------------------------------------------------
// acquire: fence+1; floor = next_floor; expiresAt = now+ttl; ceiling = max(expiresAt+tol,
// floor); next_floor = ceiling
// ----------------------------------------------------------------------------------------------

fn assert_acquired_by_the_table(
    store: &SharedStore,
    ns: &str,
    got: &SlotLease,
    before: &SlotRecord,
    terms: Terms,
) {
    assert_eq!(got.fence, before.fence + 1, "fence + 1");
    assert_eq!(got.floor, before.next_floor, "floor = next_floor");
    assert_eq!(
        got.expires_at,
        got.store_now + terms.ttl_ms,
        "expiresAt = now + ttl"
    );
    assert_eq!(
        got.ceiling,
        (got.expires_at + terms.tolerance_ms).max(got.floor),
        "ceiling = max(expiresAt + tolerance, floor)"
    );
    let stored = record(store, ns, got.slot).value;
    assert_eq!(stored.next_floor, got.ceiling, "next_floor = ceiling");
    assert_eq!(
        (
            stored.fence,
            stored.floor,
            stored.ceiling,
            stored.expires_at
        ),
        (got.fence, got.floor, got.ceiling, got.expires_at),
        "the store keeps what was granted"
    );
    assert_eq!(stored.owner.as_ref(), Some(&got.owner));
    assert_eq!(
        stored.last_owner_key.as_deref(),
        Some(got.owner.key.as_str())
    );
}

/// An acquisition changes the slot exactly as the protocol's table says, on a never-used slot and
/// on one a previous holder released.
pub fn acquire_follows_the_table(open: Open) {
    let store = open();
    let ns = unique_namespace("acquire");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a"));
    assert_eq!((a.lease.slot, a.choice), (0, Choice::Free));
    assert_acquired_by_the_table(&store, &ns, &a.lease, &SlotRecord::vacant(0), LONG);
    let last = a.lease.floor + 12_345;
    assert!(c.release(&a.lease, Some(last)).unwrap());
    let before = record(&store, &ns, 0).value;
    let b = acquire(&c, &Owner::new("b"));
    assert_acquired_by_the_table(&store, &ns, &b.lease, &before, LONG);
    assert_eq!((b.lease.fence, b.lease.floor), (3, last));
}

/// A floor above the store's clock (a higher `floor_at_least`) gives `ceiling = floor`: an empty
/// window, never one that ends below its start.
pub fn acquire_ceiling_is_never_below_the_floor(open: Open) {
    let store = open();
    let ns = unique_namespace("ceiling-floor");
    let c = client(&store, &ns, 0, LONG);
    let far = store.snapshot(&ns).unwrap().slots.store_now + 10 * 86_400_000;
    let a = acquire_with(
        &c,
        AcquireRequest {
            floor_at_least: far,
            ..request(&Owner::new("a"))
        },
    );
    assert_eq!((a.lease.floor, a.lease.ceiling), (far, far));
    assert!(a.lease.expires_at + LONG.tolerance_ms < far);
    assert_eq!(record(&store, &ns, 0).value.next_floor, far);
}

// ----------------------------------------------------------------------------------------------
// renew: incarnation and fence match; expiresAt = max(expiresAt, now+ttl); ceiling and
// next_floor follow; fence unchanged
// ----------------------------------------------------------------------------------------------

/// A renewal extends expiry and ceiling by the table and keeps the fence and the floor.
pub fn renew_extends_the_lease_and_keeps_the_fence(open: Open) {
    let store = open();
    let ns = unique_namespace("renew");
    let c = client(&store, &ns, 1, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    thread::sleep(Duration::from_millis(20));
    let r = renewed(&c, &a);
    assert_eq!(
        (r.slot, r.fence, r.floor, &r.owner),
        (a.slot, a.fence, a.floor, &a.owner)
    );
    assert_eq!(r.expires_at, a.expires_at.max(r.store_now + LONG.ttl_ms));
    assert_eq!(
        r.ceiling,
        a.ceiling.max(r.expires_at + LONG.tolerance_ms).max(r.floor)
    );
    assert!(r.expires_at >= a.expires_at && r.ceiling >= a.ceiling);
    let stored = record(&store, &ns, a.slot).value;
    assert_eq!(
        (
            stored.fence,
            stored.expires_at,
            stored.ceiling,
            stored.next_floor
        ),
        (a.fence, r.expires_at, r.ceiling, r.ceiling)
    );
}

/// Renewing with an old copy of the lease (a replay) succeeds, and lowers neither expiry nor
/// ceiling nor next_floor.
pub fn replayed_renewal_succeeds_and_lowers_nothing(open: Open) {
    let store = open();
    let ns = unique_namespace("renew-replay");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    let first = renewed(&c, &a);
    let before = record(&store, &ns, 0).value;
    let replay = renewed(&c, &a);
    let after = record(&store, &ns, 0).value;
    assert_eq!(replay.fence, a.fence);
    assert!(
        replay.expires_at >= first.expires_at,
        "{replay:?} {first:?}"
    );
    assert!(replay.ceiling >= first.ceiling);
    assert!(after.expires_at >= before.expires_at);
    assert!(after.ceiling >= before.ceiling);
    assert!(after.next_floor >= before.next_floor);
    assert_eq!((after.floor, after.fence), (before.floor, before.fence));
    // A renewal that would end sooner (a shorter ttl, like an old request arriving late)
    // succeeds and leaves expiry, ceiling and next_floor where they were.
    let hasty = client(
        &store,
        &ns,
        0,
        Terms {
            ttl_ms: 1_000,
            ..LONG
        },
    );
    let late = renewed(&hasty, &a);
    let kept = record(&store, &ns, 0).value;
    assert_eq!(
        (late.expires_at, late.ceiling),
        (after.expires_at, after.ceiling)
    );
    assert_eq!(
        (kept.expires_at, kept.ceiling, kept.next_floor),
        (after.expires_at, after.ceiling, after.next_floor)
    );
}

/// A renewal under a fence other than the current one is refused as lost, and writes nothing.
pub fn renew_with_a_stale_fence_is_lost(open: Open) {
    let store = open();
    let ns = unique_namespace("renew-fence");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    let before = record(&store, &ns, 0);
    for fence in [a.fence - 1, a.fence + 1] {
        let mut stale = a.clone();
        stale.fence = fence;
        assert_eq!(
            lost(&c, &stale),
            Refusal::NotHolder {
                owner: Some(a.owner.clone()),
                fence: a.fence
            }
        );
    }
    assert_eq!(
        record(&store, &ns, 0),
        before,
        "a refused renewal writes nothing"
    );
}

/// Another incarnation of the same owner key cannot renew the lease.
pub fn renew_by_another_incarnation_is_lost(open: Open) {
    let store = open();
    let ns = unique_namespace("renew-twin");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("svc:1")).lease;
    let before = record(&store, &ns, 0);
    let mut twin = a.clone();
    twin.owner = Owner::new("svc:1");
    assert_eq!(
        lost(&c, &twin),
        Refusal::NotHolder {
            owner: Some(a.owner.clone()),
            fence: a.fence
        }
    );
    assert_eq!(record(&store, &ns, 0), before);
    assert!(!c.release(&twin, None).unwrap(), "nor release it");
    assert_eq!(record(&store, &ns, 0), before);
}

/// After a release the old lease cannot be renewed (its fence is gone).
pub fn renew_after_release_is_lost(open: Open) {
    let store = open();
    let ns = unique_namespace("renew-released");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    assert!(c.release(&a, None).unwrap());
    assert_eq!(
        lost(&c, &a),
        Refusal::NotHolder {
            owner: None,
            fence: a.fence + 1
        }
    );
}

// ----------------------------------------------------------------------------------------------
// one round trip per renewal and per release (docs/protocol.md section 6)
// ----------------------------------------------------------------------------------------------

/// A renewal as of an estimate of the store's clock is one compare-and-set against the version
/// of the record the lease last wrote, with no read, and follows the table with the estimate as
/// `now`; so is the next renewal, from the renewed lease; a release is one compare-and-set too.
pub fn renewal_and_release_are_one_round_trip_each(open: Open) {
    let store = open();
    let counting = Counting::wrap(store.clone());
    let ns = unique_namespace("one-round-trip");
    let c = client(&(counting.clone() as SharedStore), &ns, 1, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    assert_eq!(a.version(), Some(record(&store, &ns, a.slot).version));
    thread::sleep(Duration::from_millis(20));
    let estimate = store_clock(&store, &ns);
    counting.take();
    let r = renewed_at(&c, &a, estimate);
    assert_eq!(
        counting.take(),
        Calls {
            cas_slot_timed: 1,
            ..Calls::default()
        },
        "a renewal is one compare-and-set"
    );
    assert_eq!(
        (r.slot, r.fence, r.floor, &r.owner),
        (a.slot, a.fence, a.floor, &a.owner)
    );
    assert_eq!(r.expires_at, a.expires_at.max(estimate + LONG.ttl_ms));
    assert_eq!(
        r.ceiling,
        a.ceiling.max(r.expires_at + LONG.tolerance_ms).max(r.floor)
    );
    assert!(r.ceiling > a.ceiling, "the estimate moved the window on");
    let stored = record(&store, &ns, a.slot);
    assert_eq!(r.version(), Some(stored.version));
    assert_eq!(
        (
            stored.value.fence,
            stored.value.expires_at,
            stored.value.ceiling,
            stored.value.next_floor
        ),
        (a.fence, r.expires_at, r.ceiling, r.ceiling)
    );
    counting.take();
    let r2 = renewed_at(&c, &r, estimate + 10);
    assert_eq!(counting.take().total(), 1, "and so is the next one");
    assert_eq!(r2.version(), Some(record(&store, &ns, a.slot).version));
    let last = r2.floor + 1;
    assert!(c.release(&r2, Some(last)).unwrap());
    assert_eq!(
        counting.take(),
        Calls {
            cas_slot: 1,
            ..Calls::default()
        },
        "a release is one compare-and-set"
    );
    let released = record(&store, &ns, a.slot).value;
    assert_eq!(
        (released.owner, released.fence, released.next_floor),
        (None, a.fence + 1, last)
    );
}

/// The compare-and-set a renewal makes reports the store's clock, read in the same round
/// trip: the keeper's clock-skew check and its next estimate come from it.
pub fn cas_slot_timed_reports_the_store_clock(open: Open) {
    let store = open();
    let ns = unique_namespace("timed-cas");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    let before = store_clock(&store, &ns);
    let r = renewed_at(&c, &a, before);
    let after = store_clock(&store, &ns);
    assert!(
        r.store_clock_seen(),
        "{} reports no clock with a compare-and-set (implement SlotStore::cas_slot_timed)",
        store.describe()
    );
    assert!(
        before <= r.store_now && r.store_now <= after,
        "the clock {} was not read between {before} and {after}",
        r.store_now
    );
    let stale = store.cas_slot_timed(
        &ns,
        SlotWrite::new(r.version().map(|v| v ^ 1), &SlotRecord::vacant(0)),
    );
    assert_eq!(stale.unwrap(), None, "a stale version writes nothing");
}

/// When the slot no longer holds the record the lease last wrote (here: the same holder
/// renewed through another handle, as a renewal whose answer was lost does), the
/// compare-and-set writes nothing and the renewal reads the slot, then renews it.
pub fn a_renewal_after_another_write_reads_the_slot_then_renews(open: Open) {
    let store = open();
    let counting = Counting::wrap(store.clone());
    let ns = unique_namespace("fallback");
    let c = client(&(counting.clone() as SharedStore), &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    let elsewhere = renewed(&client(&open(), &ns, 0, LONG), &a);
    let before = record(&store, &ns, 0);
    assert_ne!(a.version(), Some(before.version));
    counting.take();
    let r = renewed_at(&c, &a, store_clock(&store, &ns));
    assert_eq!(
        counting.take(),
        Calls {
            cas_slot_timed: 1,
            read_slot: 1,
            cas_slot: 1,
            ..Calls::default()
        },
        "a compare-and-set that wrote nothing, then a read and a compare-and-set"
    );
    assert!(r.ceiling >= elsewhere.ceiling && r.fence == a.fence);
    assert_eq!(r.version(), Some(record(&store, &ns, 0).version));
    counting.take();
    renewed_at(&c, &r, r.store_now);
    assert_eq!(counting.take().total(), 1, "one round trip again after it");
}

/// A lease taken over after it expired: the old holder's renewal, its lease expired by its own
/// estimate of the store's clock, reads the slot instead of writing blind (a store that moved
/// back could hold its old record again) and is refused (lost); its release writes nothing with
/// its compare-and-set, reads and is refused too, and neither changes the new holder's record.
pub fn a_renewal_or_release_after_a_takeover_is_refused_and_writes_nothing(open: Open) {
    let store = open();
    let counting = Counting::wrap(store.clone());
    let ns = unique_namespace("fallback-takeover");
    let short = Terms {
        ttl_ms: 1,
        tolerance_ms: 1_000,
    };
    let c = client(&(counting.clone() as SharedStore), &ns, 0, short);
    let a = acquire(&c, &Owner::new("a")).lease;
    thread::sleep(Duration::from_millis(20));
    let b = acquire(&client(&open(), &ns, 0, short), &Owner::new("b")).lease;
    assert_eq!((b.slot, b.floor), (a.slot, a.ceiling));
    let taken = record(&store, &ns, 0);
    counting.take();
    match c.renew_at(&a, store_clock(&store, &ns)).unwrap() {
        Renewal::Lost(refusal) => assert_eq!(
            refusal,
            Refusal::NotHolder {
                owner: Some(b.owner.clone()),
                fence: b.fence
            }
        ),
        Renewal::Renewed(l) => panic!("renewed a lease taken over: {l:?}"),
    }
    assert_eq!(
        counting.take(),
        Calls {
            read_slot: 1,
            ..Calls::default()
        },
        "an expired lease renews by a read, never blind"
    );
    assert!(!c.release(&a, Some(a.ceiling)).unwrap());
    assert_eq!(
        counting.take(),
        Calls {
            cas_slot: 1,
            read_slot: 1,
            ..Calls::default()
        }
    );
    assert_eq!(
        record(&store, &ns, 0),
        taken,
        "the new holder's record is untouched"
    );
}

// ----------------------------------------------------------------------------------------------
// release: incarnation and fence match; owner cleared; next_floor = max(floor, min(lastIssued,
// ceiling)); fence+1
// ----------------------------------------------------------------------------------------------

/// A clean release hands the exact last issued timestamp to the next holder, which starts
/// right after it.
pub fn release_clears_the_owner_and_hands_over_the_last_issued_timestamp(open: Open) {
    let store = open();
    let ns = unique_namespace("release");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    let last = a.store_now;
    assert!(a.floor < last && last <= a.ceiling);
    assert!(c.release(&a, Some(last)).unwrap());
    let rec = record(&store, &ns, 0).value;
    assert_eq!(rec.owner, None, "owner cleared");
    assert_eq!(rec.fence, a.fence + 1, "fence + 1");
    assert_eq!(
        rec.next_floor, last,
        "next_floor = the last issued timestamp"
    );
    assert_eq!(
        (rec.floor, rec.ceiling, rec.last_owner_key.as_deref()),
        (a.floor, a.ceiling, Some("a"))
    );
    let b = acquire(&c, &Owner::new("b")).lease;
    assert_eq!((b.slot, b.floor, b.fence), (0, last, a.fence + 2));
}

/// A holder that issued nothing hands over its own floor, not its ceiling.
pub fn release_of_a_holder_that_issued_nothing_sets_next_floor_to_floor(open: Open) {
    let store = open();
    let ns = unique_namespace("release-nothing");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    let handed = a.store_now;
    assert!(c.release(&a, Some(handed)).unwrap());
    let b = acquire(&c, &Owner::new("b")).lease;
    assert_eq!(b.floor, handed);
    assert!(b.floor < b.ceiling);
    assert!(c.release(&b, None).unwrap());
    assert_eq!(record(&store, &ns, 0).value.next_floor, b.floor);
    let next = acquire(&c, &Owner::new("c")).lease;
    assert_eq!(next.floor, handed);
}

/// A last issued timestamp outside the window is clamped into `[floor, ceiling]`.
pub fn release_clamps_last_issued_into_the_window(open: Open) {
    let store = open();
    let ns = unique_namespace("release-clamp");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    assert!(c.release(&a, Some(a.ceiling + 1_000_000)).unwrap());
    assert_eq!(record(&store, &ns, 0).value.next_floor, a.ceiling);
    let b = acquire(&c, &Owner::new("b")).lease;
    assert_eq!(b.floor, a.ceiling);
    assert!(c.release(&b, Some(b.floor - 1_000_000)).unwrap());
    assert_eq!(record(&store, &ns, 0).value.next_floor, b.floor);
}

/// Releasing a lease twice, or with a stale fence, reports it gone and writes nothing.
pub fn release_of_a_lost_lease_changes_nothing(open: Open) {
    let store = open();
    let ns = unique_namespace("release-lost");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    let mut stale = a.clone();
    stale.fence = a.fence + 7;
    let before = record(&store, &ns, 0);
    assert!(!c.release(&stale, Some(a.ceiling)).unwrap());
    assert_eq!(record(&store, &ns, 0), before);
    assert!(c.release(&a, None).unwrap());
    let released = record(&store, &ns, 0);
    assert!(!c.release(&a, Some(a.ceiling)).unwrap());
    assert_eq!(record(&store, &ns, 0), released);
}

// ----------------------------------------------------------------------------------------------
// expiry
// ----------------------------------------------------------------------------------------------

/// A lease past its expiry is free: another owner takes the slot with fence + 1 and a floor at
/// the old holder's ceiling (it did not release), and the old holder's renewal is refused.
pub fn expired_lease_is_free_for_another_owner(open: Open) {
    let store = open();
    let ns = unique_namespace("expiry");
    let short = Terms {
        ttl_ms: 1,
        tolerance_ms: 1_000,
    };
    let c = client(&store, &ns, 0, short);
    let first = acquire(&c, &Owner::new("a")).lease;
    thread::sleep(Duration::from_millis(20));
    // Renewed once: the takeover's floor must clear the renewed ceiling, not the first one.
    let a = renewed(&c, &first);
    thread::sleep(Duration::from_millis(50));
    let b = acquire(&c, &Owner::new("b"));
    assert_eq!((b.lease.slot, b.lease.fence), (0, a.fence + 1));
    assert_eq!(
        b.lease.floor, a.ceiling,
        "floor = the expired holder's ceiling"
    );
    // The same, as the lease invariant the simulation checks: disjoint windows per slot.
    let grant = invariants::Step::of_lease;
    invariants::disjoint_windows(&[grant(&first), grant(&a), grant(&b.lease)])
        .unwrap_or_else(|v| panic!("{v}"));
    assert!(b.duplicate_owner_key.is_empty());
    assert_eq!(
        lost(&c, &a),
        Refusal::NotHolder {
            owner: Some(b.lease.owner.clone()),
            fence: b.lease.fence
        }
    );
    assert!(!c.release(&a, None).unwrap());
    assert_eq!(record(&store, &ns, 0).value.owner, Some(b.lease.owner));
}

/// A live lease is never taken: with one slot, the next owner gets `Exhausted`.
pub fn live_lease_is_not_taken(open: Open) {
    let store = open();
    let ns = unique_namespace("live");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    let before = record(&store, &ns, 0);
    thread::sleep(Duration::from_millis(50));
    let e = c.acquire(&request(&Owner::new("b"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
    assert_eq!(record(&store, &ns, 0), before);
    assert_eq!(renewed(&c, &a).fence, a.fence);
}

// ----------------------------------------------------------------------------------------------
// choosing a slot: own, preferred, sticky, lowest, exhausted
// ----------------------------------------------------------------------------------------------

/// With every slot held, `Exhausted` names the namespace, the slot count and the earliest
/// expiry to wait for.
pub fn exhausted_names_the_earliest_expiry(open: Open) {
    let store = open();
    let ns = unique_namespace("exhausted");
    let c = client(&store, &ns, 1, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    // Only so that the two expiries differ and "earliest" means something.
    thread::sleep(Duration::from_millis(20));
    let b = acquire(&c, &Owner::new("b")).lease;
    let e = c.acquire(&request(&Owner::new("c"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
    let earliest = a.expires_at.min(b.expires_at);
    let m = e.message();
    assert!(
        m.contains(&cosid_core::time::format_rfc3339_ms(earliest)),
        "names the earliest expiry: {m}"
    );
    assert!(m.contains(&ns) && m.contains("2 slots"), "{m}");
}

/// The same `(key, incarnation)` acquiring again (a retry after a lost reply) gets the slot it
/// already holds, under the same fence, and takes no second slot.
pub fn retry_with_the_same_owner_gets_its_own_slot_back(open: Open) {
    let store = open();
    let ns = unique_namespace("retry");
    let c = client(&store, &ns, 2, LONG);
    acquire(&c, &Owner::new("x"));
    let a = Owner::new("a");
    let first = acquire(&c, &a).lease;
    let again = acquire_with(
        &c,
        AcquireRequest {
            preferred_slot: Some(3),
            ..request(&a)
        },
    );
    assert_eq!(again.choice, Choice::Own);
    assert_eq!(
        (again.lease.slot, again.lease.fence, again.lease.floor),
        (first.slot, first.fence, first.floor)
    );
    assert!(again.lease.ceiling >= first.ceiling);
    let held_by_a = store
        .snapshot(&ns)
        .unwrap()
        .slots
        .slots
        .into_iter()
        .filter(|r| r.value.owner.as_ref() == Some(&a))
        .count();
    assert_eq!(held_by_a, 1);
}

/// A live lease of the same owner key and another incarnation is never taken over, not even
/// when it holds the preferred slot: the newcomer gets another slot and is told which slot
/// holds its key.
pub fn live_lease_of_the_same_key_is_never_taken_over(open: Open) {
    let store = open();
    let ns = unique_namespace("dup-key");
    let c = client(&store, &ns, 2, LONG);
    let first = acquire(&c, &Owner::new("svc:8080"));
    assert!(first.duplicate_owner_key.is_empty());
    let before = record(&store, &ns, first.lease.slot);
    let second = acquire_with(
        &c,
        AcquireRequest {
            preferred_slot: Some(first.lease.slot),
            ..request(&Owner::new("svc:8080"))
        },
    );
    assert_ne!(second.lease.slot, first.lease.slot);
    assert_eq!(second.duplicate_owner_key, vec![first.lease.slot]);
    assert_eq!(record(&store, &ns, first.lease.slot), before);
    assert_eq!(renewed(&c, &first.lease).fence, first.lease.fence);
}

/// With no other slot free, the second incarnation gets `Exhausted`, never the first's slot.
pub fn duplicate_owner_key_with_no_free_slot_is_exhausted_not_a_takeover(open: Open) {
    let store = open();
    let ns = unique_namespace("dup-key-full");
    let c = client(&store, &ns, 0, LONG);
    acquire(&c, &Owner::new("svc:8080"));
    let before = record(&store, &ns, 0);
    let e = c.acquire(&request(&Owner::new("svc:8080"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
    assert_eq!(record(&store, &ns, 0), before);
}

/// The free slot an acquisition with no preferred, own or sticky slot takes: the one
/// `spread_pick` chooses for its incarnation from the snapshot of the namespace it read.
fn expected_free_pick(store: &SharedStore, ns: &str, bits: u8, owner: &Owner) -> u32 {
    let snap = store.snapshot(ns).unwrap().slots;
    let limit = 1u32 << bits;
    let live: HashSet<u32> = snap
        .slots
        .iter()
        .filter(|r| r.value.slot < limit && !rules::is_free(&r.value, snap.store_now))
        .map(|r| r.value.slot)
        .collect();
    let width = spread_width(limit as usize - live.len(), live.len(), 0);
    let lowest_free: Vec<u32> = (0..limit)
        .filter(|s| !live.contains(s))
        .take(width)
        .collect();
    spread_pick(&lowest_free, &owner.incarnation, 0).expect("a free slot")
}

/// A free slot whose last owner had the same key is taken before any other free slot; an
/// owner with no sticky slot takes the free slot `spread_pick` chooses from what it read.
pub fn sticky_slot_is_preferred_over_the_lowest(open: Open) {
    let store = open();
    let ns = unique_namespace("sticky");
    let c = client(&store, &ns, 2, LONG);
    let x = acquire(&c, &Owner::new("x")).lease;
    let k = acquire(&c, &Owner::new("k")).lease;
    assert_ne!(x.slot, k.slot);
    let handed = k.store_now;
    assert!(c.release(&k, Some(handed)).unwrap());
    assert!(c.release(&x, None).unwrap());
    let k2 = acquire(&c, &Owner::new("k"));
    assert_eq!((k2.lease.slot, k2.choice), (k.slot, Choice::Sticky));
    assert_eq!(k2.lease.floor, handed);
    let owner = Owner::new("y");
    let expected = expected_free_pick(&store, &ns, 2, &owner);
    let y = acquire(&c, &owner);
    assert_eq!((y.lease.slot, y.choice), (expected, Choice::Free));
}

/// A free preferred slot is taken.
pub fn preferred_slot_is_taken_when_free(open: Open) {
    let store = open();
    let ns = unique_namespace("preferred");
    let c = client(&store, &ns, 3, LONG);
    let a = acquire_with(
        &c,
        AcquireRequest {
            preferred_slot: Some(5),
            ..request(&Owner::new("a"))
        },
    );
    assert_eq!((a.lease.slot, a.choice), (5, Choice::Preferred));
    assert_eq!(record(&store, &ns, 5).value.owner, Some(a.lease.owner));
}

/// The preferred slot comes before a sticky one.
pub fn preferred_slot_beats_sticky(open: Open) {
    let store = open();
    let ns = unique_namespace("preferred-sticky");
    let c = client(&store, &ns, 2, LONG);
    let k = acquire(&c, &Owner::new("k")).lease;
    assert!(c.release(&k, None).unwrap());
    let k2 = acquire_with(
        &c,
        AcquireRequest {
            preferred_slot: Some(3),
            ..request(&Owner::new("k"))
        },
    );
    assert_eq!((k2.lease.slot, k2.choice), (3, Choice::Preferred));
}

/// A preferred slot that is held, or beyond the namespace's slots, falls back to a free slot.
pub fn held_or_out_of_range_preferred_slot_falls_back_to_the_lowest(open: Open) {
    let store = open();
    let ns = unique_namespace("preferred-fallback");
    let c = client(&store, &ns, 2, LONG);
    let prefer = |owner: &Owner, slot| {
        acquire_with(
            &c,
            AcquireRequest {
                preferred_slot: Some(slot),
                ..request(owner)
            },
        )
    };
    let a = prefer(&Owner::new("a"), 2);
    assert_eq!((a.lease.slot, a.choice), (2, Choice::Preferred));
    for (name, preferred) in [("b", 2), ("c", 99)] {
        let owner = Owner::new(name);
        let expected = expected_free_pick(&store, &ns, 2, &owner);
        let got = prefer(&owner, preferred);
        assert_eq!((got.lease.slot, got.choice), (expected, Choice::Free));
    }
    assert_eq!(store.read_slot(&ns, 99).unwrap().1, None);
}

// ----------------------------------------------------------------------------------------------
// not-before (the 4.x migration)
// ----------------------------------------------------------------------------------------------

/// After `raise_not_before`, every acquisition (of a used slot or a never-used one) gets a
/// floor at least that high.
pub fn raise_not_before_lifts_every_later_floor(open: Open) {
    let store = open();
    let ns = unique_namespace("not-before");
    let c = client(&store, &ns, 1, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    assert!(c.release(&a, Some(a.store_now)).unwrap());
    let nb = a.store_now + 10 * 86_400_000;
    let rec = LeaseClient::raise_not_before(&store, &ns, nb, true)
        .unwrap()
        .namespace;
    assert_eq!((rec.not_before_ms, rec.limit), (nb, 2));
    let b = acquire(&c, &Owner::new("b")).lease;
    let d = acquire(&c, &Owner::new("d")).lease;
    let mut got = [(b.slot, b.floor, b.ceiling), (d.slot, d.floor, d.ceiling)];
    got.sort();
    assert_eq!(got, [(0, nb, nb), (1, nb, nb)]);
}

/// `raise_not_before` on a namespace no runtime opened yet leaves a record the first runtime
/// completes with its limit and tolerance, keeping not-before.
pub fn raise_not_before_on_a_new_namespace_is_completed_by_the_first_runtime(open: Open) {
    let store = open();
    let ns = unique_namespace("not-before-new");
    let nb = store.snapshot(&ns).unwrap().slots.store_now + 86_400_000;
    LeaseClient::raise_not_before(&store, &ns, nb, true).unwrap();
    let c = client(&store, &ns, 3, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    assert_eq!(a.floor, nb);
    assert_eq!(
        store.snapshot(&ns).unwrap().namespace.unwrap().value,
        NamespaceRecord {
            limit: 8,
            tolerance_ms: LONG.tolerance_ms,
            not_before_ms: nb,
            layout: None,
            ttl_ms: None,
        }
    );
}

/// Not-before only rises.
pub fn raise_not_before_never_lowers(open: Open) {
    let store = open();
    let ns = unique_namespace("not-before-lower");
    client(&store, &ns, 1, LONG).open_namespace().unwrap();
    LeaseClient::raise_not_before(&store, &ns, 5_000_000, true).unwrap();
    let rec = LeaseClient::raise_not_before(&store, &ns, 4_000_000, true)
        .unwrap()
        .namespace;
    assert_eq!(rec.not_before_ms, 5_000_000);
    let stored = store.snapshot(&ns).unwrap().namespace.unwrap().value;
    assert_eq!(stored.not_before_ms, 5_000_000);
}

/// An acquisition that read the namespace before the migration cannot complete after it with a
/// floor below not-before: the migration rewrites every slot record, so the stale
/// compare-and-set writes nothing.
pub fn raise_not_before_defeats_an_acquisition_racing_it(open: Open) {
    let store = open();
    let ns = unique_namespace("not-before-race");
    let c = client(&store, &ns, 1, LONG);
    c.open_namespace().unwrap();
    let before = store.snapshot(&ns).unwrap();
    let stale_version = before
        .slots
        .slots
        .iter()
        .find(|r| r.value.slot == 0)
        .map(|r| r.version);
    let nb = before.slots.store_now + 86_400_000;
    let done = LeaseClient::raise_not_before(&store, &ns, nb, true).unwrap();
    assert!(done.held_below.is_empty());
    let stale = cosid_core::lease::rules::acquire(
        &SlotRecord::vacant(0),
        &Owner::new("late"),
        before.slots.store_now,
        LONG,
        0,
    );
    assert_eq!(
        store
            .cas_slot(&ns, SlotWrite::new(stale_version, &stale))
            .unwrap(),
        None
    );
    assert_eq!(acquire(&c, &Owner::new("a")).lease.floor, nb);
}

/// A live holder granted before the migration is reported, not silently kept.
pub fn raise_not_before_reports_live_holders_below_it(open: Open) {
    let store = open();
    let ns = unique_namespace("not-before-held");
    let c = client(&store, &ns, 1, LONG);
    let a = acquire(&c, &Owner::new("early")).lease;
    let nb = a.ceiling + 1;
    let done = LeaseClient::raise_not_before(&store, &ns, nb, true).unwrap();
    assert_eq!(done.held_below, vec![(a.slot, "early".to_string())]);
    // The holder keeps its lease (taking it away could not recall ids it already issued).
    assert!(matches!(
        c.renew(&a).unwrap(),
        cosid_core::lease::Renewal::Renewed(_)
    ));
}

/// `cosid migrate` refuses, unless forced, a not-before that would stop the namespace for more
/// than a day (not-before never goes back) or that its layout cannot represent, naming the
/// value and the fix; nothing is written.
pub fn raise_not_before_refuses_a_time_far_ahead_or_outside_the_layout_unless_forced(open: Open) {
    let store = open();
    let ns = unique_namespace("not-before-refused");
    let now = store.snapshot(&ns).unwrap().slots.store_now;
    for (nb, says) in [
        (now + 2 * 86_400_000, "more than a day ahead"),
        (253_402_300_799_000, "outside the time"),
        (Layout::MILLIS.runs_out_at_ms(), "outside the time"),
        (Layout::MILLIS.epoch_ms() - 1, "outside the time"),
    ] {
        let e = LeaseClient::raise_not_before(&store, &ns, nb, false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.message().contains(says), "{nb}: {e}");
        assert!(e.message().contains("--force"), "{e}");
    }
    assert_eq!(
        store.snapshot(&ns).unwrap().namespace,
        None,
        "nothing written"
    );
    let forced = LeaseClient::raise_not_before(&store, &ns, now + 2 * 86_400_000, true).unwrap();
    assert_eq!(forced.namespace.not_before_ms, now + 2 * 86_400_000);
    // A day ahead or less needs no force.
    let ns = unique_namespace("not-before-near");
    LeaseClient::raise_not_before(&store, &ns, now + 3_600_000, false).unwrap();
}

/// `cosid migrate` on a namespace of 2^20 slots writes the records that exist and one for each
/// slot a starter in flight may take without reading one, not a million: every later read
/// would carry them.
pub fn raise_not_before_writes_no_record_for_slots_nobody_can_take(open: Open) {
    let store = open();
    let ns = unique_namespace("not-before-wide");
    let c = client(&store, &ns, 20, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    let nb = a.store_now + 1_000;
    LeaseClient::raise_not_before(&store, &ns, nb, false).unwrap();
    let snap = store.snapshot(&ns).unwrap();
    let records = snap.slots.slots.len();
    assert!(
        records <= cosid_core::lease::MIGRATE_VACANT_BOUND as usize + 200,
        "{records} records written for a namespace with one holder"
    );
    assert!(
        records > 1,
        "the vacant slots a starter may take got records"
    );
    // A starter still gets a floor at or above not-before on any slot.
    let far = c
        .acquire(&AcquireRequest {
            preferred_slot: Some((1 << 20) - 1),
            ..request(&Owner::new("far"))
        })
        .unwrap()
        .lease;
    assert_eq!(far.slot, (1 << 20) - 1);
    assert!(far.floor >= nb, "{far:?}");
}

// ----------------------------------------------------------------------------------------------
// many acquirers at once
// ----------------------------------------------------------------------------------------------

/// `2^bits` threads, each its own owner, acquire at once (through a few handles): they get
/// slots `0..2^bits` exactly once each, and one more acquirer gets `Exhausted`.
pub fn every_slot_once_to_concurrent_acquirers(open: Open, bits: u8) {
    let n = 1usize << bits;
    let ns = unique_namespace(&format!("concurrent-{n}"));
    let handles: Vec<SharedStore> = (0..8).map(|_| open()).collect();
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let c = client(&handles[i % handles.len()], &ns, bits, LONG);
            let barrier = barrier.clone();
            thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let owner = Owner::new(format!("acquirer-{i}"));
                    barrier.wait();
                    c.acquire(&request(&owner))
                })
                .expect("spawn an acquirer thread")
        })
        .collect();
    let mut acquired: Vec<SlotLease> = threads
        .into_iter()
        .map(|t| {
            t.join()
                .expect("acquirer thread")
                .unwrap_or_else(|e| panic!("every acquirer gets a slot: {e}"))
                .lease
        })
        .collect();
    acquired.sort_by_key(|l| l.slot);
    let slots: Vec<u32> = acquired.iter().map(|l| l.slot).collect();
    assert_eq!(slots, (0..n as u32).collect::<Vec<_>>());
    let mut stored = handles[0].snapshot(&ns).unwrap().slots.slots;
    stored.sort_by_key(|r| r.value.slot);
    assert_eq!(stored.len(), n);
    for (lease, rec) in acquired.iter().zip(&stored) {
        assert_eq!(rec.value.owner.as_ref(), Some(&lease.owner));
        assert_eq!((rec.value.fence, lease.fence), (1, 1));
    }
    let e = client(&handles[1], &ns, bits, LONG)
        .acquire(&request(&Owner::new("one-more")))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
}

/// [`every_slot_once_to_concurrent_acquirers`] with 64 slots.
pub fn every_slot_once_to_64_concurrent_acquirers_then_exhausted(open: Open) {
    every_slot_once_to_concurrent_acquirers(open, 6);
}

/// [`every_slot_once_to_concurrent_acquirers`] with 1024 slots (the default bits).
pub fn every_slot_once_to_1024_concurrent_acquirers_then_exhausted(open: Open) {
    every_slot_once_to_concurrent_acquirers(open, 10);
}

// ----------------------------------------------------------------------------------------------
// For stores whose clock a test can set (memory, SQLite): not part of the macro
// ----------------------------------------------------------------------------------------------

/// Expiry follows the store's clock to the millisecond, and a store clock that jumps back
/// lowers nothing: `store` must use `clock` as its store clock.
pub fn expiry_follows_the_store_clock_exactly(store: SharedStore, clock: &ManualClock) {
    let ns = unique_namespace("expiry-exact");
    let c = client(&store, &ns, 0, LONG);
    let a = acquire(&c, &Owner::new("a")).lease;
    assert_eq!(
        a.store_now,
        clock.now_ms(),
        "the lease reports the store clock"
    );
    assert_eq!(a.expires_at, a.store_now + LONG.ttl_ms);
    clock.set(a.expires_at - 1);
    let e = c.acquire(&request(&Owner::new("b"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Exhausted, "one ms before expiry: {e}");
    clock.set(a.expires_at);
    let b = acquire(&c, &Owner::new("b")).lease;
    assert_eq!(
        (b.store_now, b.floor, b.fence),
        (a.expires_at, a.ceiling, a.fence + 1)
    );
    // The store clock jumps back an hour: the renewal keeps expiry and ceiling.
    clock.set(a.store_now - 3_600_000);
    let r = renewed(&c, &b);
    assert_eq!((r.expires_at, r.ceiling), (b.expires_at, b.ceiling));
    assert_eq!(
        lost(&c, &a),
        Refusal::NotHolder {
            owner: Some(b.owner.clone()),
            fence: b.fence
        }
    );
}

// ----------------------------------------------------------------------------------------------
// A namespace's life: raising its slots, deleting it
// ----------------------------------------------------------------------------------------------

/// A client with `2^bits` slots that records the millisecond layout (node bits 10).
fn layout_client(store: &SharedStore, namespace: &str, bits: u8) -> LeaseClient {
    client(store, namespace, bits, LONG).with_layout(&Layout::MILLIS)
}

/// Raising the limit is one compare-and-set of the namespace record: a running client (with
/// the old bits) keeps its lease and takes the new slots at its next acquisition, a new one
/// with the old bits is accepted, and one asking for more than the new limit is still refused.
pub fn raise_slots_lets_running_and_new_runtimes_take_the_new_slots(open: Open) {
    let store = open();
    let ns = unique_namespace("raise-slots");
    let c = layout_client(&store, &ns, 1);
    let a = acquire(&c, &Owner::new("a")).lease;
    acquire(&c, &Owner::new("b"));
    let e = c.acquire(&request(&Owner::new("c"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
    assert!(e.message().contains("cosid namespace raise-slots"), "{e}");

    let raised = LeaseClient::raise_slots(&store, &ns, 5).unwrap();
    assert_eq!((raised.before, raised.namespace.limit), (2, 5));
    let rec = store.snapshot(&ns).unwrap().namespace.unwrap().value;
    assert_eq!(rec, raised.namespace);
    assert_eq!(rec.layout, Some(IdLayout::of(&Layout::MILLIS)));

    // The running client: its lease renews, and its next acquisition takes a new slot.
    assert!(matches!(c.renew(&a).unwrap(), Renewal::Renewed(_)));
    let got = acquire(&c, &Owner::new("c")).lease;
    assert!((2..5).contains(&got.slot), "slot {}", got.slot);
    // A new runtime configured with the old bits opens it and uses the recorded limit.
    let fresh = layout_client(&store, &ns, 1);
    assert_eq!(fresh.open_namespace().unwrap().limit, 5);
    for key in ["d", "e"] {
        assert!(acquire(&fresh, &Owner::new(key)).lease.slot >= 2);
    }
    let e = fresh.acquire(&request(&Owner::new("f"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
    assert!(e.message().contains("all 5 slots"), "{e}");
    // One asking for more slots than recorded is refused, naming both.
    let e = layout_client(&store, &ns, 3).open_namespace().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NamespaceMismatch, "{e}");
    assert!(e.message().contains("records limit 5 slots"), "{e}");
    assert!(e.message().contains("asks for 8"), "{e}");
}

/// A limit is never lowered, never raised beyond what the recorded layout's node bits hold,
/// and asking for the recorded one changes nothing; each refusal names the values and writes
/// nothing.
pub fn raise_slots_refuses_lowering_and_beyond_the_layout(open: Open) {
    let store = open();
    let ns = unique_namespace("raise-slots-bounds");
    layout_client(&store, &ns, 2).open_namespace().unwrap();
    let before = store.snapshot(&ns).unwrap().namespace.unwrap();

    let e = LeaseClient::raise_slots(&store, &ns, 3).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.message().contains("--slots 3 is below"), "{e}");
    assert!(e.message().contains("limit of 4 slots"), "{e}");
    assert!(e.message().contains("never lowered"), "{e}");

    let e = LeaseClient::raise_slots(&store, &ns, 1025).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.message().contains("--slots 1025"), "{e}");
    assert!(e.message().contains("node-bits 10 give 1024 slots"), "{e}");

    let same = LeaseClient::raise_slots(&store, &ns, 4).unwrap();
    assert_eq!((same.before, same.namespace.limit), (4, 4));
    assert_eq!(store.snapshot(&ns).unwrap().namespace.unwrap(), before);

    let most = LeaseClient::raise_slots(&store, &ns, 1024).unwrap();
    assert_eq!(most.namespace.limit, 1024);
}

/// A namespace that does not exist, or whose record has no limit or no layout yet, is refused.
pub fn raise_slots_refuses_a_namespace_without_a_limit_or_a_layout(open: Open) {
    let store = open();
    let ns = unique_namespace("raise-slots-missing");
    let e = LeaseClient::raise_slots(&store, &ns, 8).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert!(e.message().contains("does not exist"), "{e}");

    // Recorded before layouts were (a client that issues no ids writes none).
    client(&store, &ns, 1, LONG).open_namespace().unwrap();
    let e = LeaseClient::raise_slots(&store, &ns, 8).unwrap_err();
    assert!(e.message().contains("records no id layout"), "{e}");

    let nb = store_clock(&store, &ns) + 60_000;
    let fresh = unique_namespace("raise-slots-migrated");
    LeaseClient::raise_not_before(&store, &fresh, nb, true).unwrap();
    let e = LeaseClient::raise_slots(&store, &fresh, 8).unwrap_err();
    assert!(e.message().contains("records no slot limit yet"), "{e}");
}

/// Deleting is refused while a lease lives, naming the slot, its holder and its expiry, and
/// writes nothing.
pub fn delete_namespace_is_refused_while_a_lease_lives(open: Open) {
    let store = open();
    let ns = unique_namespace("delete-live");
    let c = layout_client(&store, &ns, 2);
    let a = acquire(&c, &Owner::new("holder-a")).lease;
    let before = store.snapshot(&ns).unwrap();
    assert!(store.deletes_slots(), "every store deletes slot records");
    let e = LeaseClient::delete_namespace(&store, &ns).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let m = e.message();
    assert!(
        m.contains(&format!("slot {} is held by 'holder-a'", a.slot)),
        "{m}"
    );
    assert!(
        m.contains(&cosid_core::time::format_rfc3339_ms(a.expires_at)),
        "{m}"
    );
    let mut after = store.snapshot(&ns).unwrap();
    after.slots.store_now = before.slots.store_now;
    assert_eq!(after, before);
}

/// A deleted namespace leaves a tombstone: no limit, ttl or tolerance, the layout kept, and a
/// not-before at the highest floor its slots handed over; its slot records are gone. Created
/// again with other bits, ttl and tolerance, every window starts above every id of its first
/// life; another layout is still refused.
pub fn delete_namespace_leaves_a_tombstone_above_every_id(open: Open) {
    let store = open();
    let ns = unique_namespace("delete");
    let c = layout_client(&store, &ns, 2);
    let a = acquire(&c, &Owner::new("a")).lease;
    let b = acquire(&c, &Owner::new("b")).lease;
    assert!(c.release(&a, Some(a.floor + 1)).unwrap());
    assert!(c.release(&b, Some(b.ceiling)).unwrap());
    // What the released slots hand over: the highest id issued on them.
    let highest = [&a, &b]
        .iter()
        .map(|l| record(&store, &ns, l.slot).value.next_floor)
        .max()
        .unwrap();
    assert_eq!(highest, b.ceiling.max(a.floor + 1));

    let done = LeaseClient::delete_namespace(&store, &ns).unwrap();
    assert_eq!((done.deleted, done.kept.clone()), (2, vec![]));
    let expected = NamespaceRecord {
        limit: 0,
        tolerance_ms: 0,
        not_before_ms: highest,
        layout: Some(IdLayout::of(&Layout::MILLIS)),
        ttl_ms: None,
    };
    assert_eq!(done.tombstone, expected);
    let snap = store.snapshot(&ns).unwrap();
    assert_eq!(snap.namespace.unwrap().value, expected);
    assert_eq!(snap.slots.slots, vec![]);
    // Deleting again changes nothing and deletes nothing.
    let again = LeaseClient::delete_namespace(&store, &ns).unwrap();
    assert_eq!((again.deleted, again.tombstone), (0, expected));

    // Another layout is refused: ids of two layouts collide.
    let other = client(&store, &ns, 1, LONG).with_layout(&Layout::SECONDS);
    let e = other.open_namespace().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NamespaceMismatch, "{e}");
    // Created again with other bits, ttl and tolerance: above every id of the first life.
    let terms = Terms {
        ttl_ms: 600_000,
        tolerance_ms: 2_000,
    };
    let again = client(&store, &ns, 3, terms).with_layout(&Layout::MILLIS);
    let rec = again.open_namespace().unwrap();
    assert_eq!(
        (rec.limit, rec.tolerance_ms, rec.ttl_ms),
        (8, 2_000, Some(600_000))
    );
    assert!(rec.not_before_ms >= highest);
    for key in ["x", "y", "z"] {
        let l = acquire(&again, &Owner::new(key)).lease;
        assert!(
            l.floor >= highest,
            "slot {} floor {} < {highest}",
            l.slot,
            l.floor
        );
    }
}

/// An acquisition that read the namespace before the tombstone and writes its slot after the
/// deletion read it keeps its lease: the deletion leaves that record (a compare-and-delete of
/// each slot, against the version read) and reports it; the namespace's next runtime does not
/// take it.
pub fn delete_namespace_keeps_a_lease_acquired_while_it_ran(open: Open) {
    let store = open();
    let ns = unique_namespace("delete-race");
    let c = layout_client(&store, &ns, 1);
    let a = acquire(&c, &Owner::new("a")).lease;
    assert!(c.release(&a, Some(a.floor + 1)).unwrap());

    #[derive(Debug)]
    struct RaceOnTombstone {
        store: SharedStore,
        namespace: String,
        raced: std::sync::Mutex<Option<SlotLease>>,
    }
    impl Hook for RaceOnTombstone {
        fn call(&self, inner: &dyn SlotStore, call: Call<'_>) -> cosid_core::Result<Reply> {
            if let Call::CasNamespace { .. } = call {
                let mut raced = self.raced.lock().unwrap();
                if raced.is_none() {
                    let racer = layout_client(&self.store, &self.namespace, 1);
                    *raced = Some(acquire(&racer, &Owner::new("racer")).lease);
                }
            }
            call.on(inner)
        }
    }
    let hook = RaceOnTombstone {
        store: store.clone(),
        namespace: ns.clone(),
        raced: Default::default(),
    };
    let hooked: SharedStore = Hooked::new(store.clone(), hook);
    let done = LeaseClient::delete_namespace(&hooked, &ns).unwrap();
    let snap = store.snapshot(&ns).unwrap();
    assert_eq!(snap.namespace.unwrap().value.limit, 0, "the tombstone");
    let racer = snap
        .slots
        .slots
        .iter()
        .find(|r| r.value.owner.as_ref().is_some_and(|o| o.key == "racer"))
        .expect("the racer's lease is kept")
        .value
        .clone();
    assert_eq!(done.kept.len(), 1, "{:?}", done.kept);
    assert_eq!(done.kept[0].0, racer.slot);
    // The next runtime takes the other slot, never the racer's.
    let next = layout_client(&store, &ns, 1);
    let l = acquire(&next, &Owner::new("next")).lease;
    assert_ne!(l.slot, racer.slot);
    let e = next.acquire(&request(&Owner::new("more"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
}
