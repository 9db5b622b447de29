//! A store wrapper for the benchmarks: every primitive goes to the real store unchanged, and is
//! counted on the way (`stores` and `storm` include this file).

use cosid_core::lease::{NamespaceRecord, SlotRecord, Versioned};
use cosid_core::store::{self, NamespaceSnapshot, SharedStore, SlotStore};
use cosid_core::Result;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counts the primitives called through it: all of them (round trips) and the slot
/// compare-and-sets (attempts).
#[derive(Debug)]
pub struct Counting {
    inner: SharedStore,
    calls: AtomicU64,
    cas: AtomicU64,
}

impl Counting {
    pub fn new(inner: SharedStore) -> Arc<Counting> {
        Arc::new(Counting {
            inner,
            calls: AtomicU64::new(0),
            cas: AtomicU64::new(0),
        })
    }
    /// The calls and slot compare-and-sets since the last `take`, and a new count from zero.
    pub fn take(&self) -> (u64, u64) {
        (
            self.calls.swap(0, Ordering::Relaxed),
            self.cas.swap(0, Ordering::Relaxed),
        )
    }
}

impl SlotStore for Counting {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn snapshot(&self, namespace: &str) -> Result<NamespaceSnapshot> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.snapshot(namespace)
    }
    fn cas_namespace(
        &self,
        namespace: &str,
        expected: Option<u64>,
        record: &NamespaceRecord,
    ) -> Result<Option<u64>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.cas_namespace(namespace, expected, record)
    }
    fn read_slot(
        &self,
        namespace: &str,
        slot: u32,
    ) -> Result<(i64, Option<Versioned<SlotRecord>>)> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.read_slot(namespace, slot)
    }
    fn cas_slot(
        &self,
        namespace: &str,
        expected: Option<u64>,
        record: &SlotRecord,
    ) -> Result<Option<u64>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.cas.fetch_add(1, Ordering::Relaxed);
        self.inner.cas_slot(namespace, expected, record)
    }
    fn cas_slot_timed(
        &self,
        namespace: &str,
        expected: Option<u64>,
        record: &SlotRecord,
    ) -> Result<Option<store::Written>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.cas.fetch_add(1, Ordering::Relaxed);
        self.inner.cas_slot_timed(namespace, expected, record)
    }
}
