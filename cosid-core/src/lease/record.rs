//! The data of the slot lease: what a store keeps per namespace and per slot, and what a holder
//! is granted. All times are ms since the Unix epoch in the store's clock.

use std::fmt;
use uuid::Uuid;

/// Who holds a lease: a logical identity (`host:pid` by default, or configured) plus a UUID per
/// runtime start. A live lease of the same key and another incarnation is never taken over.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The logical identity.
    pub key: String,
    /// Unique per runtime start.
    pub incarnation: Uuid,
}

impl Owner {
    /// An owner with `key` and a fresh random incarnation.
    pub fn new(key: impl Into<String>) -> Self {
        Owner {
            key: key.into(),
            incarnation: Uuid::new_v4(),
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.key, self.incarnation)
    }
}

/// The namespace record `{limit, tolerance}` (D20), written by the first runtime; a runtime asking
/// for other values is refused. `not_before` is raised by `cosid migrate`: no window on any slot
/// starts below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceRecord {
    /// Number of slots, `2^bits`.
    pub limit: u32,
    /// How far past its expiry a holder may still issue, ms.
    pub tolerance_ms: i64,
    /// The lowest floor any acquisition may get, ms (0 when never migrated).
    pub not_before_ms: i64,
}

/// One slot's state in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRecord {
    /// The slot number, `0..limit`.
    pub slot: u32,
    /// The current holder; `None` after a release (or before the first acquisition).
    pub owner: Option<Owner>,
    /// The key of the last holder, kept after release: the "sticky" preference.
    pub last_owner_key: Option<String>,
    /// +1 on every change of ownership (acquire, release); renewals keep it.
    pub fence: u64,
    /// When someone else may take the slot.
    pub expires_at: i64,
    /// The current (or last) holder's floor, excluded.
    pub floor: i64,
    /// The current (or last) holder's ceiling, included: `max(expires_at + tolerance, floor)`.
    pub ceiling: i64,
    /// The floor the next holder gets: the largest timestamp the previous holder could have used.
    pub next_floor: i64,
}

impl SlotRecord {
    /// The record of a slot that was never written: free, nothing issued on it.
    pub fn vacant(slot: u32) -> Self {
        SlotRecord {
            slot,
            owner: None,
            last_owner_key: None,
            fence: 0,
            expires_at: 0,
            floor: 0,
            ceiling: 0,
            next_floor: 0,
        }
    }
}

/// A record with the store's version of it, for compare-and-set. Versions are opaque to the
/// protocol; each store defines them (a counter, an etcd mod revision) and only compares them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The value as read.
    pub value: T,
    /// The store's version of it.
    pub version: u64,
}

/// Everything a slot choice needs, read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The store's clock when it was read.
    pub store_now: i64,
    /// Every slot record that exists (absent slots are vacant), in any order.
    pub slots: Vec<Versioned<SlotRecord>>,
}

/// A granted lease: the exclusive right to issue timestamps in `(floor, ceiling]` on `slot`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotLease {
    /// The namespace.
    pub namespace: String,
    /// The slot.
    pub slot: u32,
    /// The holder.
    pub owner: Owner,
    /// The fence of this ownership.
    pub fence: u64,
    /// When someone else may take the slot (store clock).
    pub expires_at: i64,
    /// Excluded lower bound of the window.
    pub floor: i64,
    /// Included upper bound of the window.
    pub ceiling: i64,
    /// The store's clock when the lease was granted or renewed.
    pub store_now: i64,
}

impl SlotLease {
    pub(crate) fn from_record(namespace: &str, rec: &SlotRecord, store_now: i64) -> Self {
        SlotLease {
            namespace: namespace.to_string(),
            slot: rec.slot,
            owner: rec.owner.clone().expect("a granted record has an owner"),
            fence: rec.fence,
            expires_at: rec.expires_at,
            floor: rec.floor,
            ceiling: rec.ceiling,
            store_now,
        }
    }
}
