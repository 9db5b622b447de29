//! The data of the slot lease: what a store keeps per namespace and per slot, and what a holder
//! is granted. All times are ms since the Unix epoch in the store's clock.

use crate::layout::{Layout, TimeUnit};
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

/// The namespace record `{limit, tolerance, layout, ttl}`, written by the first runtime; a runtime
/// asking for other values is refused. `not_before` is raised by `cosid migrate`: no window on
/// any slot starts below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceRecord {
    /// Number of slots, `2^bits`.
    pub limit: u32,
    /// How far past its expiry a holder may still issue, ms.
    pub tolerance_ms: i64,
    /// The lowest floor any acquisition may get, ms (0 when never migrated).
    pub not_before_ms: i64,
    /// The id layout every runtime of the namespace uses; `None` in a record written before
    /// layouts were recorded (or by `cosid migrate` before any runtime): the first runtime
    /// that opens the namespace writes its own.
    pub layout: Option<IdLayout>,
    /// The lease ttl every runtime of the namespace uses, ms; `None` in a record written before
    /// ttls were recorded (or by `cosid migrate` before any runtime): the first runtime that
    /// opens the namespace writes its own. The restart guard needs it: a namespace created
    /// again after a store lost its data starts above every ceiling the lost records could
    /// hold, and those ceilings lie at most ttl + tolerance past the loss only if every holder
    /// used the recorded ttl (`docs/protocol.md` section 7).
    pub ttl_ms: Option<i64>,
}

/// What of an id layout decides which id a `(time, slot, sequence)` becomes: the epoch, the
/// unit and the three bit widths. Windows are disjoint in time, so two runtimes of one
/// namespace with layouts that differ in any of these can issue the same id from different
/// slots and times (an epoch 2 s later turns time `t` into the other's `t - 2s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdLayout {
    /// The epoch, ms since the Unix epoch.
    pub epoch_ms: i64,
    /// The time unit.
    pub unit: TimeUnit,
    /// Timestamp bits.
    pub timestamp_bits: u8,
    /// Node (slot) bits.
    pub node_bits: u8,
    /// Sequence bits.
    pub sequence_bits: u8,
}

impl IdLayout {
    /// The recorded part of `layout`.
    pub fn of(layout: &Layout) -> Self {
        IdLayout {
            epoch_ms: layout.epoch_ms(),
            unit: layout.unit(),
            timestamp_bits: layout.timestamp_bits(),
            node_bits: layout.node_bits(),
            sequence_bits: layout.sequence_bits(),
        }
    }

    /// The stored form, one word: `EPOCH_MS:UNIT:TS/NODE/SEQ`, e.g. `1577203200000:ms:41/10/12`.
    pub fn encode(&self) -> String {
        format!(
            "{}:{}:{}/{}/{}",
            self.epoch_ms,
            self.unit.name(),
            self.timestamp_bits,
            self.node_bits,
            self.sequence_bits
        )
    }

    /// Reads what [`IdLayout::encode`] wrote; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split(':');
        let epoch_ms = parts.next()?.parse().ok()?;
        let unit = match parts.next()? {
            "ms" => TimeUnit::Millis,
            "s" => TimeUnit::Seconds,
            _ => return None,
        };
        let mut bits = parts.next()?.split('/').map(|b| b.parse::<u8>().ok());
        let (timestamp_bits, node_bits, sequence_bits) =
            (bits.next()??, bits.next()??, bits.next()??);
        if parts.next().is_some() || bits.next().is_some() {
            return None;
        }
        Some(IdLayout {
            epoch_ms,
            unit,
            timestamp_bits,
            node_bits,
            sequence_bits,
        })
    }
}

impl fmt::Display for IdLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "epoch {}, unit {}, {}/{}/{} timestamp/node/sequence bits",
            crate::time::format_rfc3339_ms(self.epoch_ms),
            self.unit.name(),
            self.timestamp_bits,
            self.node_bits,
            self.sequence_bits
        )
    }
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
///
/// It also remembers the record its last change wrote and the version the store gave it, so the
/// next renewal or release can be one compare-and-set against that version, with no read first
/// (`docs/protocol.md` section 6). Those fields are private: only a compare-and-set that
/// succeeded sets them, which is what makes a compare-and-set against them sound.
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
    /// The store's clock when the lease was granted or renewed: as the store reported it, or,
    /// for a renewal on a store that cannot report its clock with a compare-and-set, the
    /// estimate the renewal used ([`SlotLease::store_clock_seen`] says which).
    pub store_now: i64,
    /// The record the change that granted this lease wrote, with the version the store gave
    /// it; `None` when not known.
    written: Option<Versioned<SlotRecord>>,
    /// Whether `store_now` was read from the store.
    clock_seen: bool,
}

impl SlotLease {
    /// The lease a successful compare-and-set of `rec` (now at `version`) granted.
    pub(crate) fn written(
        namespace: &str,
        rec: SlotRecord,
        version: u64,
        store_now: i64,
        clock_seen: bool,
    ) -> Self {
        SlotLease {
            namespace: namespace.to_string(),
            slot: rec.slot,
            owner: rec.owner.clone().expect("a granted record has an owner"),
            fence: rec.fence,
            expires_at: rec.expires_at,
            floor: rec.floor,
            ceiling: rec.ceiling,
            store_now,
            written: Some(Versioned {
                value: rec,
                version,
            }),
            clock_seen,
        }
    }

    /// The record this lease's last change wrote, with its version, if it is still this
    /// lease's own: same slot, owner and fence (a copy of a lease with a field changed by hand
    /// no longer matches, and is renewed or released by reading the slot first).
    pub(crate) fn last_written(&self) -> Option<&Versioned<SlotRecord>> {
        self.written.as_ref().filter(|w| {
            w.value.slot == self.slot
                && w.value.fence == self.fence
                && w.value.owner.as_ref() == Some(&self.owner)
        })
    }

    /// The version of the record this lease's last change wrote (`None` if not known).
    pub fn version(&self) -> Option<u64> {
        self.last_written().map(|w| w.version)
    }

    /// Whether [`SlotLease::store_now`] was read from the store (`false`: an estimate).
    pub fn store_clock_seen(&self) -> bool {
        self.clock_seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_layouts_round_trip_and_malformed_text_is_refused() {
        for l in [Layout::MILLIS, Layout::SECONDS, Layout::SAFE_JS_MILLIS] {
            let id = IdLayout::of(&l);
            assert_eq!(IdLayout::decode(&id.encode()), Some(id));
        }
        assert_eq!(
            IdLayout::of(&Layout::MILLIS).encode(),
            "1577203200000:ms:41/10/12"
        );
        for bad in [
            "",
            "1577203200000",
            "1577203200000:us:41/10/12",
            "1577203200000:ms:41/10",
            "1577203200000:ms:41/10/12/1",
            "1577203200000:ms:41/10/12:x",
            "x:ms:41/10/12",
            "1577203200000:ms:41/10/300",
        ] {
            assert_eq!(IdLayout::decode(bad), None, "{bad}");
        }
    }
}
