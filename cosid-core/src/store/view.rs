//! The candidate view: what an acquisition reads instead of the whole namespace.
//!
//! A snapshot carries every slot record, so an acquisition's read grows with the slots in use,
//! and a storm of N starters reads about N²/2 records. An acquisition needs much less: the
//! namespace record, the store's clock, which slots live leases hold (their numbers only), the
//! records it may take (the lowest slots no live lease holds), and the records that concern the
//! asker (its own key, current or last, and its preferred slot). A store that can filter on its
//! side returns just that ([`SlotStore::candidates`]); every other store gets the provided view,
//! made from a snapshot.
//!
//! # Why a partial view is safe
//!
//! The view decides nothing. The client re-checks every record it returns with `rules::is_free`
//! (the lease rules stay in `lease::rules`), treats a slot whose number is in `live` without a
//! record as held, and treats a slot above `covered_below` whose record was not returned as
//! unknown, never as free. A store that filters wrongly can make an acquisition pass over a free
//! slot, never take a held one: every take is still a compare-and-set against the version the
//! view returned, or against "no record" for a slot the store vouched had none (a record that
//! does exist makes that compare-and-set write nothing). An acquisition that finds nothing to
//! take in a partial view reads a full snapshot before it reports the namespace exhausted.
//!
//! [`SlotStore::candidates`]: super::SlotStore::candidates

use super::NamespaceSnapshot;
use crate::lease::{rules, NamespaceRecord, SlotRecord, Versioned};

/// What an acquisition asks a store's view to cover ([`super::SlotStore::candidates`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CandidateAsk<'a> {
    /// The asker's owner key: every record whose owner key or last owner key is this one comes
    /// back whole (the asker's own slot, slots of its key held by another incarnation, its
    /// sticky slots). `None`: no record is asked for by key.
    pub owner_key: Option<&'a str>,
    /// A slot whose record comes back whole, if it has one.
    pub preferred_slot: Option<u32>,
    /// With `free_per_live`, how many slots no live lease holds the view covers:
    /// `free_min + free_per_live × live`, [`CandidateView::covered_below`] says how.
    pub free_min: u32,
    /// See `free_min`.
    pub free_per_live: u32,
}

impl CandidateAsk<'_> {
    /// An ask for the namespace record and the store's clock only (what opening a namespace
    /// reads).
    pub const NAMESPACE_ONLY: CandidateAsk<'static> = CandidateAsk {
        owner_key: None,
        preferred_slot: None,
        free_min: 0,
        free_per_live: 0,
    };

    /// How many slots that no live lease holds a view with `live` live slots covers.
    pub fn wanted(&self, live: usize) -> u64 {
        u64::from(self.free_min)
            .saturating_add(u64::from(self.free_per_live).saturating_mul(live as u64))
    }

    /// The [`CandidateView::covered_below`] a store that filters sets, for a namespace of
    /// `limit` slots of which `live` are held by live leases: 0 when nothing is wanted, else
    /// `min(limit, wanted + live)`. Below that bound at most `live` slots are live, so it covers
    /// at least `wanted` slots that are not (or every slot).
    pub fn covered_below(&self, limit: u32, live: usize) -> u32 {
        let wanted = self.wanted(live);
        if wanted == 0 {
            return 0;
        }
        wanted
            .saturating_add(live as u64)
            .min(u64::from(limit))
            .try_into()
            .unwrap_or(limit)
    }

    /// Whether `rec` must come back whole whatever its slot: it is the asker's key's (current or
    /// last owner) or the preferred slot's.
    pub fn concerns(&self, rec: &SlotRecord) -> bool {
        Some(rec.slot) == self.preferred_slot
            || self.owner_key.is_some_and(|key| {
                rec.owner.as_ref().is_some_and(|o| o.key == key)
                    || rec.last_owner_key.as_deref() == Some(key)
            })
    }
}

/// A store's answer to a [`CandidateAsk`]: enough of a namespace to choose a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateView {
    /// The namespace record with its version, `None` if the namespace was never created.
    pub namespace: Option<Versioned<NamespaceRecord>>,
    /// The store's clock when the view was read.
    pub store_now: i64,
    /// The slots whose record has an owner and an expiry after `store_now` (held by a live
    /// lease), in any order; numbers only.
    pub live: Vec<u32>,
    /// The store vouches for every slot below this bound: its record is in `records`, or its
    /// number is in `live`, or it has no record. 0 when the namespace has no record.
    pub covered_below: u32,
    /// Whole records: every record below `covered_below` that is not live, every record the
    /// ask [concerns](CandidateAsk::concerns); a store may return more (the provided view
    /// returns them all).
    pub records: Vec<Versioned<SlotRecord>>,
}

impl CandidateView {
    /// The view of a whole snapshot: every record whole, every slot covered. What
    /// [`super::SlotStore::candidates`] returns for a store that does not filter.
    pub fn of_snapshot(snap: NamespaceSnapshot) -> CandidateView {
        let now = snap.slots.store_now;
        CandidateView {
            covered_below: snap.namespace.as_ref().map_or(0, |n| n.value.limit),
            namespace: snap.namespace,
            store_now: now,
            live: snap
                .slots
                .slots
                .iter()
                .filter(|r| !rules::is_free(&r.value, now))
                .map(|r| r.value.slot)
                .collect(),
            records: snap.slots.slots,
        }
    }

    /// The least a store that filters must return, made from every record of the namespace:
    /// the stores' own views (a Lua script, a SQL query) hold at least these records, and the
    /// conformance suite compares them with it.
    pub fn filtered(
        namespace: Option<Versioned<NamespaceRecord>>,
        store_now: i64,
        every_record: Vec<Versioned<SlotRecord>>,
        ask: &CandidateAsk<'_>,
    ) -> CandidateView {
        let live: Vec<u32> = every_record
            .iter()
            .filter(|r| !rules::is_free(&r.value, store_now))
            .map(|r| r.value.slot)
            .collect();
        let covered_below = namespace
            .as_ref()
            .map_or(0, |n| ask.covered_below(n.value.limit, live.len()));
        let records = every_record
            .into_iter()
            .filter(|r| {
                ask.concerns(&r.value)
                    || (r.value.slot < covered_below && rules::is_free(&r.value, store_now))
            })
            .collect();
        CandidateView {
            namespace,
            store_now,
            live,
            covered_below,
            records,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{Owner, Snapshot};

    fn rec(
        slot: u32,
        owner: Option<&str>,
        last: Option<&str>,
        expires_at: i64,
    ) -> Versioned<SlotRecord> {
        Versioned {
            value: SlotRecord {
                owner: owner.map(Owner::new),
                last_owner_key: last.map(String::from),
                expires_at,
                ..SlotRecord::vacant(slot)
            },
            version: u64::from(slot) + 1,
        }
    }

    fn namespace(limit: u32) -> Option<Versioned<NamespaceRecord>> {
        Some(Versioned {
            value: NamespaceRecord {
                limit,
                tolerance_ms: 1000,
                not_before_ms: 0,
                layout: None,
                ttl_ms: None,
            },
            version: 1,
        })
    }

    #[test]
    fn a_filtered_view_covers_the_wanted_free_slots_and_the_asker_s_records_only() {
        // Slots 0-3 live (others'), 4 released, 9 the asker's sticky slot, 20 the asker's key
        // held by another incarnation, 30 preferred and expired, 40 a stranger's free record.
        let now = 1_000;
        let every = vec![
            rec(0, Some("a"), None, 2_000),
            rec(1, Some("b"), None, 2_000),
            rec(2, Some("c"), None, 2_000),
            rec(3, Some("d"), None, 2_000),
            rec(4, None, Some("e"), 500),
            rec(9, None, Some("me"), 500),
            rec(20, Some("me"), None, 2_000),
            rec(30, Some("f"), None, 999),
            rec(40, None, Some("g"), 0),
        ];
        let ask = CandidateAsk {
            owner_key: Some("me"),
            preferred_slot: Some(30),
            free_min: 2,
            free_per_live: 1,
        };
        let view = CandidateView::filtered(namespace(64), now, every, &ask);
        let mut live = view.live.clone();
        live.sort_unstable();
        assert_eq!(live, [0, 1, 2, 3, 20]);
        // wanted = 2 + 1 × 5 = 7, covered = 7 + 5 = 12.
        assert_eq!(view.covered_below, 12);
        let mut whole: Vec<u32> = view.records.iter().map(|r| r.value.slot).collect();
        whole.sort_unstable();
        assert_eq!(whole, [4, 9, 20, 30]);
    }

    #[test]
    fn the_bound_is_the_limit_at_most_and_zero_when_nothing_is_wanted() {
        let ask = CandidateAsk {
            free_min: 64,
            free_per_live: 2,
            ..CandidateAsk::NAMESPACE_ONLY
        };
        assert_eq!(ask.covered_below(1024, 0), 64);
        assert_eq!(ask.covered_below(1024, 100), 364);
        assert_eq!(ask.covered_below(1024, 1000), 1024);
        assert_eq!(CandidateAsk::NAMESPACE_ONLY.covered_below(1024, 1000), 0);
        let huge = CandidateAsk {
            free_min: u32::MAX,
            free_per_live: u32::MAX,
            ..CandidateAsk::NAMESPACE_ONLY
        };
        assert_eq!(huge.covered_below(u32::MAX, usize::MAX), u32::MAX);
    }

    #[test]
    fn the_view_of_a_snapshot_covers_every_slot_with_every_record() {
        let snap = NamespaceSnapshot {
            namespace: namespace(8),
            slots: Snapshot {
                store_now: 1_000,
                slots: vec![rec(0, Some("a"), None, 2_000), rec(5, None, Some("b"), 0)],
            },
        };
        let view = CandidateView::of_snapshot(snap.clone());
        assert_eq!(view.covered_below, 8);
        assert_eq!(view.live, [0]);
        assert_eq!(view.records, snap.slots.slots);
    }
}
