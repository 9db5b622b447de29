//! `memory:` — a store inside one process. Runtimes of one process that name the same memory
//! store share it (and so get distinct slots); nothing survives the process. The store clock is
//! the host clock (or the clock a test passes).

use super::{
    Cas, NamespaceSnapshot, NamespaceWrite, SharedStore, SlotRead, SlotStore, SlotWrite, Written,
};
use crate::clock::{SharedClock, SystemClock};
use crate::error::Result;
use crate::lease::{NamespaceRecord, SlotRecord, Snapshot, Versioned};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};

#[derive(Debug, Default)]
struct Namespace {
    record: Option<Versioned<NamespaceRecord>>,
    slots: BTreeMap<u32, Versioned<SlotRecord>>,
}

/// What [`MemoryStore::save`] saw: every namespace's records.
#[derive(Debug, Clone, Default)]
pub struct MemorySaved(Vec<SavedNamespace>);

impl MemorySaved {
    /// The namespace records alone, without a slot record: what a store that restarted having
    /// lost its slot records' writes but not its namespaces' looks like (for tests).
    pub fn namespaces_only(&self) -> MemorySaved {
        MemorySaved(
            self.0
                .iter()
                .map(|(name, record, _)| (name.clone(), record.clone(), BTreeMap::new()))
                .collect(),
        )
    }
}

/// One namespace's name, record and slot records, as saved.
type SavedNamespace = (
    String,
    Option<Versioned<NamespaceRecord>>,
    BTreeMap<u32, Versioned<SlotRecord>>,
);

/// The in-process store. Thread-safe; each primitive holds one mutex for its whole step.
#[derive(Debug)]
pub struct MemoryStore {
    name: String,
    clock: SharedClock,
    state: Mutex<(u64, HashMap<String, Namespace>)>,
}

fn registry() -> &'static Mutex<HashMap<String, Weak<MemoryStore>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Weak<MemoryStore>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

impl MemoryStore {
    /// A private store, not shared by name.
    pub fn new(clock: SharedClock) -> Arc<MemoryStore> {
        Arc::new(MemoryStore {
            name: "(private)".into(),
            clock,
            state: Mutex::default(),
        })
    }

    /// The process-wide store called `name`, created on first use, kept while anyone holds it.
    pub fn named(name: &str) -> SharedStore {
        Self::named_with_clock(name, Arc::new(SystemClock))
    }

    /// Like [`MemoryStore::named`]; `clock` is used only if the store is created by this call.
    pub fn named_with_clock(name: &str, clock: SharedClock) -> SharedStore {
        let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = reg.get(name).and_then(Weak::upgrade) {
            return existing;
        }
        let store = Arc::new(MemoryStore {
            name: name.to_string(),
            clock,
            state: Mutex::default(),
        });
        reg.insert(name.to_string(), Arc::downgrade(&store));
        store
    }

    /// Forgets every namespace: what a store restarted empty looks like (for tests).
    pub fn wipe(&self) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clear();
    }

    /// Every namespace as it is now, for [`MemoryStore::roll_back`] (for tests).
    pub fn save(&self) -> MemorySaved {
        self.with(|_, map| {
            MemorySaved(
                map.iter()
                    .map(|(name, ns)| (name.clone(), ns.record.clone(), ns.slots.clone()))
                    .collect(),
            )
        })
    }

    /// Puts back every namespace as [`MemoryStore::save`] saw it, forgetting every write since:
    /// what a store restored from an older snapshot looks like (for tests). Versions go on
    /// from the highest ever issued, as a store whose versions follow its clock does.
    pub fn roll_back(&self, saved: &MemorySaved) {
        self.with(|_, map| {
            map.clear();
            for (name, record, slots) in &saved.0 {
                map.insert(
                    name.clone(),
                    Namespace {
                        record: record.clone(),
                        slots: slots.clone(),
                    },
                );
            }
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut u64, &mut HashMap<String, Namespace>) -> T) -> T {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (versions, map) = &mut *guard;
        f(versions, map)
    }

    /// The one compare-and-set both records share: under the lock, when `current` (the version
    /// the namespace holds now) is `expected`, takes the next store-wide version and lets `put`
    /// store the record with it. Returns the new version, or `None` when nothing was written.
    fn compare_and_set(
        &self,
        namespace: &str,
        expected: Option<u64>,
        current: impl FnOnce(&Namespace) -> Option<u64>,
        put: impl FnOnce(&mut Namespace, u64),
    ) -> Option<u64> {
        self.with(|versions, map| {
            let ns = map.entry(namespace.to_string()).or_default();
            if current(ns) != expected {
                return None;
            }
            *versions += 1;
            put(ns, *versions);
            Some(*versions)
        })
    }
}

impl SlotStore for MemoryStore {
    fn describe(&self) -> String {
        format!("memory:{}", self.name)
    }

    fn snapshot(&self, namespace: &str) -> Result<NamespaceSnapshot> {
        let store_now = self.clock.now_ms();
        Ok(self.with(|_, map| {
            let ns = map.get(namespace);
            NamespaceSnapshot {
                namespace: ns.and_then(|n| n.record.clone()),
                slots: Snapshot {
                    store_now,
                    slots: ns
                        .map(|n| n.slots.values().cloned().collect())
                        .unwrap_or_default(),
                },
            }
        }))
    }

    fn cas_namespace(&self, namespace: &str, write: NamespaceWrite<'_>) -> Result<Option<u64>> {
        let Cas { expected, record } = write;
        Ok(self.compare_and_set(
            namespace,
            expected,
            |ns| ns.record.as_ref().map(|r| r.version),
            |ns, version| {
                ns.record = Some(Versioned {
                    value: *record,
                    version,
                });
            },
        ))
    }

    fn read_slot(&self, namespace: &str, slot: u32) -> Result<SlotRead> {
        let now = self.clock.now_ms();
        Ok(self.with(|_, map| {
            (
                now,
                map.get(namespace).and_then(|n| n.slots.get(&slot)).cloned(),
            )
        }))
    }

    fn cas_slot(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<u64>> {
        let Cas { expected, record } = write;
        Ok(self.compare_and_set(
            namespace,
            expected,
            |ns| ns.slots.get(&record.slot).map(|r| r.version),
            |ns, version| {
                ns.slots.insert(
                    record.slot,
                    Versioned {
                        value: record.clone(),
                        version,
                    },
                );
            },
        ))
    }

    fn deletes_slots(&self) -> bool {
        true
    }

    fn delete_slot(&self, namespace: &str, slot: u32, expected: u64) -> Result<bool> {
        Ok(self.with(|_, map| {
            let Some(ns) = map.get_mut(namespace) else {
                return false;
            };
            if ns.slots.get(&slot).map(|r| r.version) != Some(expected) {
                return false;
            }
            ns.slots.remove(&slot);
            true
        }))
    }

    /// The store clock is read as the write is made, as `read_slot` reads it.
    fn cas_slot_timed(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<Written>> {
        let now = self.clock.now_ms();
        Ok(self.cas_slot(namespace, write)?.map(|version| Written {
            version,
            store_now: Some(now),
        }))
    }
}
