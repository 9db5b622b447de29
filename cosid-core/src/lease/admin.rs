//! An operator's changes to a namespace's life: raising its slot limit and deleting it. Each is
//! safe by construction: one compare-and-set of the namespace record decides it, and nothing
//! either writes can let a later window on a slot reach below a ceiling granted before
//! (`docs/stores.md`, "Raising a namespace's slots" and "Deleting a namespace").

use super::client::{LeaseClient, MAX_RACES};
use super::record::{NamespaceRecord, Owner};
use crate::error::{Error, Result};
use crate::store::{CandidateAsk, NamespaceWrite, SharedStore};

/// What [`LeaseClient::raise_slots`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotsRaise {
    /// The limit before.
    pub before: u32,
    /// The namespace record after the raise (unchanged when it already had the limit).
    pub namespace: NamespaceRecord,
}

/// What [`LeaseClient::delete_namespace`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    /// The tombstone left as the namespace record: no layout but the deleted one's, no limit,
    /// ttl or tolerance, and a not-before at or above every ceiling the deleted records granted.
    pub tombstone: NamespaceRecord,
    /// How many slot records were deleted.
    pub deleted: usize,
    /// Slot records written after the deletion read them (an acquisition that raced it, whose
    /// lease lives on; the namespace's next runtime respects it): `(slot, holder, expiry)`.
    pub kept: Vec<(u32, Option<Owner>, i64)>,
}

/// The error of a namespace the store does not have.
fn missing(store: &SharedStore, namespace: &str) -> Error {
    Error::config(format!(
        "namespace '{namespace}' does not exist in {}; check --namespace and --store",
        store.describe()
    ))
}

impl LeaseClient {
    /// Raises namespace `namespace`'s slot limit to `slots`, by one compare-and-set of its
    /// record. Refused: a namespace that does not exist, or whose record has no limit or no
    /// layout yet (its first runtime records them); `slots` below the recorded limit (a limit
    /// never goes down: slots above it may hold leases); `slots` above what the recorded
    /// layout's node bits hold. Asking for the recorded limit changes nothing.
    ///
    /// Running runtimes keep their leases (a renewal never reads the limit) and use the new
    /// slots at their next acquisition; a runtime configured with fewer bits than the new limit
    /// holds is accepted and uses the recorded limit. The new slots have no record: their first
    /// windows start at the namespace's not-before and the restart guard's floor, like every
    /// never-used slot's (no id was ever issued on them: the limit never went down).
    pub fn raise_slots(store: &SharedStore, namespace: &str, slots: u32) -> Result<SlotsRaise> {
        for _ in 0..MAX_RACES {
            let view = store.candidates(namespace, &CandidateAsk::NAMESPACE_ONLY)?;
            let Some(found) = view.namespace else {
                return Err(missing(store, namespace));
            };
            let rec = found.value;
            if rec.limit == 0 {
                return Err(Error::config(format!(
                    "namespace '{namespace}' records no slot limit yet (written by `cosid \
                     migrate` or left by `cosid namespace delete`); its next runtime records \
                     one from its cosid.machine.lease.bits: start it with the bits you want"
                )));
            }
            let Some(layout) = rec.layout else {
                return Err(Error::config(format!(
                    "namespace '{namespace}' records no id layout, so the slots its ids can \
                     hold are unknown; start one runtime of this cosid version on it (it \
                     records its layout), then raise the slots"
                )));
            };
            let holds = 1u64 << layout.node_bits.min(63);
            if u64::from(slots) > holds {
                return Err(Error::invalid(format!(
                    "--slots {slots} is more than namespace '{namespace}''s layout holds: its \
                     node-bits {} give {holds} slots; give at most {holds} (a layout never \
                     changes: more slots than that need a namespace of another layout)",
                    layout.node_bits
                )));
            }
            if slots < rec.limit {
                return Err(Error::invalid(format!(
                    "--slots {slots} is below namespace '{namespace}''s limit of {} slots; a \
                     limit is never lowered (the slots above it may hold leases and ids); give \
                     {} or more",
                    rec.limit, rec.limit
                )));
            }
            if slots == rec.limit {
                return Ok(SlotsRaise {
                    before: rec.limit,
                    namespace: rec,
                });
            }
            let next = NamespaceRecord {
                limit: slots,
                ..rec
            };
            if store
                .cas_namespace(namespace, NamespaceWrite::new(Some(found.version), &next))?
                .is_some()
            {
                return Ok(SlotsRaise {
                    before: rec.limit,
                    namespace: next,
                });
            }
        }
        Err(Error::store(format!(
            "lost {MAX_RACES} races raising the slots of '{namespace}'"
        )))
    }

    /// Deletes namespace `namespace`: refused while any slot holds a live lease (the error
    /// names the slot, its holder and when it expires), and on a store that cannot delete slot
    /// records (nothing is written then).
    ///
    /// Two steps, each atomic. First the namespace record becomes a **tombstone** by one
    /// compare-and-set against the version read with the slots: limit, ttl and tolerance gone,
    /// the layout kept (ids of two layouts collide), and not-before raised to the highest
    /// timestamp any slot's holders may have issued (the ceiling of a record that names an owner,
    /// the next floor of one released) and the old not-before. Then every slot record
    /// read is deleted if its version is still the one read ([`SlotStore::delete_slot`]); one
    /// written since (an acquisition that read the namespace before the tombstone) is kept and
    /// reported. A runtime that opens the namespace later completes the tombstone as it
    /// completes a record `cosid migrate` wrote: its settings, the recorded layout, and
    /// not-before at least the tombstone's (and, on a network store, ttl + tolerance past
    /// its creation, `docs/protocol.md` section 7, rule 1). So every window of the namespace's
    /// second life starts above every id of its first, on every store, SQLite included, whatever
    /// the clocks do.
    ///
    /// [`SlotStore::delete_slot`]: crate::store::SlotStore::delete_slot
    pub fn delete_namespace(store: &SharedStore, namespace: &str) -> Result<Deletion> {
        if !store.deletes_slots() {
            return Err(Error::config(format!(
                "{} cannot delete slot records yet, so `cosid namespace delete` is not \
                 supported on this store (nothing was changed); leave the namespace as it is \
                 (an unused namespace costs only its records)",
                store.describe()
            )));
        }
        for _ in 0..MAX_RACES {
            let snap = store.snapshot(namespace)?;
            let Some(found) = snap.namespace else {
                return Err(missing(store, namespace));
            };
            let now = snap.slots.store_now;
            let mut live: Vec<_> = snap
                .slots
                .slots
                .iter()
                .map(|r| &r.value)
                .filter(|r| r.owner.is_some() && now < r.expires_at)
                .collect();
            live.sort_by_key(|r| (r.expires_at, r.slot));
            if let Some(first) = live.first() {
                let owner = first.owner.as_ref().map(|o| o.key.as_str()).unwrap_or("");
                return Err(Error::invalid(format!(
                    "namespace '{namespace}' has {} live lease(s): slot {} is held by '{}' \
                     until {} (store time); stop the namespace's runtimes (they release their \
                     slots) or wait until every lease expires, then delete it",
                    live.len(),
                    first.slot,
                    crate::bounds::quote(owner),
                    crate::time::format_rfc3339_ms(first.expires_at),
                )));
            }
            let floor = snap
                .slots
                .slots
                .iter()
                // What the slot's holders may have issued: up to the ceiling while an owner
                // is named (a lease that expired may still issue until then), up to the floor
                // a release handed over once it is not (the next holder's floor, as ever).
                .map(|r| match r.value.owner {
                    Some(_) => r.value.ceiling.max(r.value.next_floor),
                    None => r.value.next_floor,
                })
                .fold(found.value.not_before_ms, i64::max);
            let tombstone = NamespaceRecord {
                limit: 0,
                tolerance_ms: 0,
                not_before_ms: floor,
                layout: found.value.layout,
                ttl_ms: None,
            };
            if found.value != tombstone
                && store
                    .cas_namespace(
                        namespace,
                        NamespaceWrite::new(Some(found.version), &tombstone),
                    )?
                    .is_none()
            {
                continue;
            }
            let mut deleted = 0;
            for r in &snap.slots.slots {
                if store.delete_slot(namespace, r.value.slot, r.version)? {
                    deleted += 1;
                }
            }
            let after = store.snapshot(namespace)?;
            let mut kept: Vec<_> = after
                .slots
                .slots
                .into_iter()
                .map(|r| (r.value.slot, r.value.owner, r.value.expires_at))
                .collect();
            kept.sort_by_key(|k| k.0);
            return Ok(Deletion {
                tombstone,
                deleted,
                kept,
            });
        }
        Err(Error::store(format!(
            "lost {MAX_RACES} races deleting '{namespace}'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::lease::Terms;
    use crate::store::memory::MemoryStore;
    use crate::store::{NamespaceSnapshot, SlotRead, SlotStore, SlotWrite};
    use std::sync::Arc;

    /// A store of the five primitives only: it keeps the trait's provided `delete_slot`.
    #[derive(Debug)]
    struct Plain(SharedStore);

    impl SlotStore for Plain {
        fn describe(&self) -> String {
            "plain:".into()
        }
        fn snapshot(&self, namespace: &str) -> Result<NamespaceSnapshot> {
            self.0.snapshot(namespace)
        }
        fn cas_namespace(&self, namespace: &str, write: NamespaceWrite<'_>) -> Result<Option<u64>> {
            self.0.cas_namespace(namespace, write)
        }
        fn read_slot(&self, namespace: &str, slot: u32) -> Result<SlotRead> {
            self.0.read_slot(namespace, slot)
        }
        fn cas_slot(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<u64>> {
            self.0.cas_slot(namespace, write)
        }
    }

    #[test]
    fn a_store_that_cannot_delete_slot_records_refuses_a_deletion_writing_nothing() {
        let memory = MemoryStore::named(&uuid::Uuid::new_v4().to_string());
        let store: SharedStore = Arc::new(Plain(memory.clone()));
        let terms = Terms {
            ttl_ms: 60_000,
            tolerance_ms: 1_000,
        };
        let client = LeaseClient::new(store.clone(), "ns", 1, terms)
            .unwrap()
            .with_layout(&crate::layout::Layout::MILLIS);
        let lease = client
            .acquire(&crate::lease::AcquireRequest {
                owner: Owner::new("a"),
                preferred_slot: None,
                floor_at_least: 0,
            })
            .unwrap()
            .lease;
        assert!(client.release(&lease, None).unwrap());
        let before = store.snapshot("ns").unwrap();
        assert!(!store.deletes_slots());
        let e = store.delete_slot("ns", lease.slot, 1).unwrap_err();
        assert!(e.message().contains("plain:"), "{e}");
        let e = LeaseClient::delete_namespace(&store, "ns").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{e}");
        assert!(
            e.message()
                .contains("`cosid namespace delete` is not supported on this store"),
            "{e}"
        );
        let mut after = store.snapshot("ns").unwrap();
        after.slots.store_now = before.slots.store_now;
        assert_eq!(after, before);
        // The same records in a store that deletes: deleted.
        let done = LeaseClient::delete_namespace(&memory, "ns").unwrap();
        assert_eq!((done.deleted, done.kept.len()), (1, 0));
    }
}
