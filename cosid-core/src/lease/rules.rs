//! The store-side state changes of the protocol (`docs/protocol.md` section 3), written once as plain functions over a slot
//! record. Every store applies exactly these through its compare-and-set, so every store keeps
//! the same rule:
//!
//! | operation | condition                      | change                                                        |
//! |-----------|--------------------------------|---------------------------------------------------------------|
//! | acquire   | free or expired                | `fence+1`; `floor = next_floor`; `expires = now+ttl`; `ceiling = max(expires+tol, floor)`; `next_floor = ceiling` |
//! | renew     | incarnation and fence match    | `expires = max(expires, now+ttl)`; ceiling and next_floor follow; fence kept |
//! | release   | incarnation and fence match    | owner cleared; `next_floor = max(floor, min(last_issued, ceiling))`; `fence+1` |
//!
//! Invariant kept by all three (uniqueness follows from it alone): for any two successive holders of a slot,
//! the later floor is `>=` every ceiling the earlier one was granted, or `>=` its exact last
//! issued timestamp after a clean release. Floors are also never lowered below `floor_at_least`
//! (the namespace's `not_before` and the acquirer's own highest granted ceiling).

use super::record::{Owner, SlotRecord};

/// The lease durations, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terms {
    /// How long a lease lasts after its last renewal.
    pub ttl_ms: i64,
    /// How far past expiry the holder may still issue.
    pub tolerance_ms: i64,
}

/// Why a renewal or release was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The slot is held by someone else now (or by us under another fence).
    NotHolder {
        /// The current owner, if any.
        owner: Option<Owner>,
        /// The current fence.
        fence: u64,
    },
    /// The store has no record of the slot: it lost its data (restarted empty).
    Vanished,
    /// The store lost writes since this lease's last one (it restarted, or its file went back
    /// to an older one), and the record read is not the one this lease last wrote, or its
    /// lease expired: it may be an older copy the store moved back to, while another holder had
    /// the slot in between (`docs/protocol.md` section 7, rule 3).
    MovedBack,
}

/// The highest fence a new holder may be given. A holder's release raises the fence once more,
/// so a slot whose fence has reached this can take no new holder: it is retired, never free.
/// No store counts that far (one acquisition at a time, 2^64 of them); only a damaged or
/// hand-written record carries such a fence, and the rules pass its slot over instead of letting
/// the fence wrap to a value an earlier holder had.
pub const LAST_HOLDER_FENCE: u64 = u64::MAX - 1;

/// Whether a new owner may take the slot at store time `now`: it has no owner or its lease has
/// expired, and its fence can still grow ([`LAST_HOLDER_FENCE`]).
pub fn is_free(rec: &SlotRecord, now: i64) -> bool {
    (rec.owner.is_none() || now >= rec.expires_at) && rec.fence < LAST_HOLDER_FENCE
}

/// Whether `owner` holds the slot under `fence` (regardless of expiry: until someone takes it
/// over, an expired holder may still renew).
pub fn is_held_by(rec: &SlotRecord, owner: &Owner, fence: u64) -> bool {
    rec.owner.as_ref() == Some(owner) && rec.fence == fence
}

/// The record after `owner` acquires the free or expired slot `rec` at store time `now`.
/// `rec` must be free ([`is_free`]); for one that is not, the result is no lease a client may
/// write (its fence stops at `u64::MAX` rather than wrap).
pub fn acquire(
    rec: &SlotRecord,
    owner: &Owner,
    now: i64,
    terms: Terms,
    floor_at_least: i64,
) -> SlotRecord {
    let floor = rec.next_floor.max(floor_at_least);
    #[cfg(feature = "mutation-switches")]
    let floor = mutation::acquired_floor(floor);
    let expires_at = now.saturating_add(terms.ttl_ms);
    let ceiling = expires_at.saturating_add(terms.tolerance_ms).max(floor);
    SlotRecord {
        slot: rec.slot,
        owner: Some(owner.clone()),
        last_owner_key: Some(owner.key.clone()),
        fence: rec.fence.saturating_add(1),
        expires_at,
        floor,
        ceiling,
        next_floor: ceiling,
    }
}

/// The record after `owner` renews at store time `now`. A replayed renewal succeeds (the fence
/// is unchanged) and changes nothing a holder relies on: expiry and ceiling never go down.
pub fn renew(
    rec: &SlotRecord,
    owner: &Owner,
    fence: u64,
    now: i64,
    terms: Terms,
) -> Result<SlotRecord, Refusal> {
    let held = is_held_by(rec, owner, fence);
    #[cfg(feature = "mutation-switches")]
    let held = mutation::renewal_held(held);
    holder_only(rec, held)?;
    let expires_at = rec.expires_at.max(now.saturating_add(terms.ttl_ms));
    let ceiling = rec
        .ceiling
        .max(expires_at.saturating_add(terms.tolerance_ms))
        .max(rec.floor);
    let next_floor = rec.next_floor.max(ceiling);
    #[cfg(feature = "mutation-switches")]
    let next_floor = mutation::renewed_next_floor(rec, next_floor);
    Ok(SlotRecord {
        expires_at,
        ceiling,
        next_floor,
        ..rec.clone()
    })
}

/// Renewing or releasing `rec` is for its holder only (`held`); anyone else is refused with the
/// owner and fence the record has.
fn holder_only(rec: &SlotRecord, held: bool) -> Result<(), Refusal> {
    if held {
        return Ok(());
    }
    Err(Refusal::NotHolder {
        owner: rec.owner.clone(),
        fence: rec.fence,
    })
}

/// The record after `owner` releases the slot, having issued up to `last_issued` (the unit
/// start of its last timestamp, `None` if it issued nothing). Hands the exact last issued
/// timestamp to the next holder.
pub fn release(
    rec: &SlotRecord,
    owner: &Owner,
    fence: u64,
    last_issued: Option<i64>,
) -> Result<SlotRecord, Refusal> {
    let held = is_held_by(rec, owner, fence);
    #[cfg(feature = "mutation-switches")]
    let held = mutation::release_held(held);
    holder_only(rec, held)?;
    let next_floor = handed_over_floor(rec.floor, rec.ceiling, last_issued);
    #[cfg(feature = "mutation-switches")]
    let next_floor = mutation::released_next_floor(rec, next_floor);
    Ok(SlotRecord {
        owner: None,
        // At most `u64::MAX`: a holder's fence is at most `LAST_HOLDER_FENCE`.
        fence: rec.fence.saturating_add(1),
        next_floor,
        ..rec.clone()
    })
}

/// The floor a holder of the window `(floor, ceiling]` hands to the next holder of its slot
/// when it lets go, having issued up to `last_issued` (the unit start of its last timestamp,
/// `None` if it issued nothing): that timestamp, kept inside the window. The lease protocol's
/// [`release`] and a static slot's last state-file write both use it.
pub fn handed_over_floor(floor: i64, ceiling: i64, last_issued: Option<i64>) -> i64 {
    floor.max(last_issued.unwrap_or(floor).min(ceiling))
}

/// Deliberate protocol bugs, switched on one at a time at run time, to prove that the tests
/// notice a broken protocol (`cosid-core/tests/mutations.rs` runs the simulation under each and
/// expects it to fail). Compiled only with the `mutation-switches` feature, which no build of
/// the library for use turns on: without it none of this code, nor any check of it, exists.
#[cfg(feature = "mutation-switches")]
pub mod mutation {
    use super::SlotRecord;
    use std::sync::atomic::{AtomicU8, Ordering};

    /// One deliberate bug in the lease protocol or the generator's window check.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[repr(u8)]
    pub enum Mutation {
        /// No bug: the protocol as written.
        None = 0,
        /// A release hands over the old floor instead of the last issued timestamp.
        ReleaseHandsOverFloor,
        /// The generator's window check lets a holder issue at its floor (`<` for `<=`).
        IssueAtFloor,
        /// The generator's window check lets a holder issue 2 s past its ceiling.
        IssuePastCeiling,
        /// A renewal extends the ceiling but not `next_floor`: the next holder's floor stays at
        /// the first ceiling.
        RenewKeepsNextFloor,
        /// An acquisition lowers the floor it grants by 300 ms.
        AcquireLowersFloor,
        /// A renewal is accepted from anyone, not only the holder under its fence.
        RenewSkipsHolderCheck,
        /// A release is accepted from anyone, not only the holder under its fence.
        ReleaseSkipsHolderCheck,
        /// The restart guard ignores a store that lost writes (a young server, a rolled-back
        /// one): acquisitions on it start at the records' floors.
        GuardIgnoresLostWrites,
        /// The restart guard trusts a namespace created on a store that may have lost it: it
        /// starts at 0.
        GuardTrustsNewNamespaces,
        /// A renewal through a read renews a record a store that lost writes since the lease's
        /// last one may have moved back, instead of reporting the lease lost.
        RenewsMovedBackRecord,
    }

    impl Mutation {
        /// Every deliberate bug (not [`Mutation::None`]).
        pub const ALL: [Mutation; 10] = [
            Mutation::ReleaseHandsOverFloor,
            Mutation::IssueAtFloor,
            Mutation::IssuePastCeiling,
            Mutation::RenewKeepsNextFloor,
            Mutation::AcquireLowersFloor,
            Mutation::RenewSkipsHolderCheck,
            Mutation::ReleaseSkipsHolderCheck,
            Mutation::GuardIgnoresLostWrites,
            Mutation::GuardTrustsNewNamespaces,
            Mutation::RenewsMovedBackRecord,
        ];
    }

    static ACTIVE: AtomicU8 = AtomicU8::new(Mutation::None as u8);

    /// Switches `m` on (and every other one off) for the whole process.
    pub fn set(m: Mutation) {
        ACTIVE.store(m as u8, Ordering::SeqCst);
    }

    /// Whether `m` is switched on.
    #[inline]
    pub fn is(m: Mutation) -> bool {
        ACTIVE.load(Ordering::Relaxed) == m as u8
    }

    /// The floor an acquisition grants: 300 ms lower under [`Mutation::AcquireLowersFloor`].
    pub(crate) fn acquired_floor(floor: i64) -> i64 {
        if is(Mutation::AcquireLowersFloor) {
            floor - 300
        } else {
            floor
        }
    }

    /// Whether a renewal is by the holder: always under [`Mutation::RenewSkipsHolderCheck`].
    pub(crate) fn renewal_held(held: bool) -> bool {
        held || is(Mutation::RenewSkipsHolderCheck)
    }

    /// Whether a release is by the holder: always under [`Mutation::ReleaseSkipsHolderCheck`].
    pub(crate) fn release_held(held: bool) -> bool {
        held || is(Mutation::ReleaseSkipsHolderCheck)
    }

    /// The `next_floor` after a renewal: unchanged under [`Mutation::RenewKeepsNextFloor`].
    pub(crate) fn renewed_next_floor(rec: &SlotRecord, next_floor: i64) -> i64 {
        if is(Mutation::RenewKeepsNextFloor) {
            rec.next_floor
        } else {
            next_floor
        }
    }

    /// The `next_floor` after a release: the old floor under
    /// [`Mutation::ReleaseHandsOverFloor`].
    pub(crate) fn released_next_floor(rec: &SlotRecord, next_floor: i64) -> i64 {
        if is(Mutation::ReleaseHandsOverFloor) {
            rec.floor
        } else {
            next_floor
        }
    }

    /// The restart guard's floor for a store that lost writes: 0 under
    /// [`Mutation::GuardIgnoresLostWrites`].
    pub(crate) fn young_store_floor(floor: i64) -> i64 {
        if is(Mutation::GuardIgnoresLostWrites) {
            0
        } else {
            floor
        }
    }

    /// The restart guard's floor for a namespace created on a store that may have lost it: 0
    /// under [`Mutation::GuardTrustsNewNamespaces`].
    pub(crate) fn new_namespace_floor(floor: i64) -> i64 {
        if is(Mutation::GuardTrustsNewNamespaces) {
            0
        } else {
            floor
        }
    }

    /// Whether a renewal through a read takes the record it read as moved back: never under
    /// [`Mutation::RenewsMovedBackRecord`].
    pub(crate) fn moved_back(moved_back: bool) -> bool {
        moved_back && !is(Mutation::RenewsMovedBackRecord)
    }

    /// The window the generator's check uses: the one bound, widened by
    /// [`Mutation::IssueAtFloor`] (one ms lower: `start <= floor - 1` is `start < floor`) or
    /// [`Mutation::IssuePastCeiling`].
    #[inline]
    pub fn checked_window(b: crate::window::Binding) -> crate::window::Binding {
        let mut b = b;
        if is(Mutation::IssueAtFloor) {
            b.floor -= 1;
        } else if is(Mutation::IssuePastCeiling) {
            b.ceiling += 2_000;
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TERMS: Terms = Terms {
        ttl_ms: 30_000,
        tolerance_ms: 1_000,
    };

    /// Slot 0 free, its last holder having handed over `next_floor`.
    fn vacant_above(next_floor: i64) -> SlotRecord {
        SlotRecord {
            next_floor,
            ..SlotRecord::vacant(0)
        }
    }

    #[test]
    fn a_slot_whose_fence_cannot_grow_is_retired_and_nothing_wraps() {
        let a = Owner::new("a:1");
        let last = SlotRecord {
            fence: LAST_HOLDER_FENCE - 1,
            ..SlotRecord::vacant(0)
        };
        assert!(is_free(&last, 0), "the last holder may still take it");
        let held = acquire(&last, &a, 0, TERMS, 0);
        assert_eq!(held.fence, LAST_HOLDER_FENCE);
        let released = release(&held, &a, LAST_HOLDER_FENCE, Some(5)).unwrap();
        assert_eq!(released.fence, u64::MAX);
        for fence in [LAST_HOLDER_FENCE, u64::MAX] {
            let rec = SlotRecord {
                fence,
                ..SlotRecord::vacant(0)
            };
            assert!(
                !is_free(&rec, i64::MAX),
                "fence {fence} cannot grow twice more"
            );
        }
        // A damaged record claiming the highest fence for its holder: no panic, no wrap.
        let damaged = SlotRecord {
            owner: Some(a.clone()),
            fence: u64::MAX,
            ..SlotRecord::vacant(0)
        };
        let released = release(&damaged, &a, u64::MAX, None).unwrap();
        assert_eq!(released.fence, u64::MAX);
    }

    #[test]
    fn acquire_renew_release_follow_the_table() {
        let a = Owner::new("a:1");
        let r0 = SlotRecord::vacant(3);
        let r1 = acquire(&r0, &a, 1_000, TERMS, 0);
        assert_eq!(
            (r1.fence, r1.floor, r1.expires_at, r1.ceiling),
            (1, 0, 31_000, 32_000)
        );
        assert_eq!(r1.next_floor, 32_000);
        let r2 = renew(&r1, &a, 1, 11_000, TERMS).unwrap();
        assert_eq!(
            (r2.fence, r2.expires_at, r2.ceiling, r2.next_floor),
            (1, 41_000, 42_000, 42_000)
        );
        // A replayed (older) renewal never lowers anything.
        assert_eq!(renew(&r2, &a, 1, 11_000, TERMS).unwrap(), r2);
        let r3 = release(&r2, &a, 1, Some(12_345)).unwrap();
        assert_eq!(
            (r3.owner.clone(), r3.fence, r3.next_floor),
            (None, 2, 12_345)
        );
        assert_eq!(r3.last_owner_key.as_deref(), Some("a:1"));
        let b = Owner::new("b:1");
        let r4 = acquire(&r3, &b, 13_000, TERMS, 0);
        assert_eq!((r4.floor, r4.fence), (12_345, 3));
    }

    #[test]
    fn release_clamps_last_issued_into_the_window() {
        let a = Owner::new("a");
        let r = acquire(&vacant_above(500), &a, 1_000, TERMS, 0);
        assert_eq!(release(&r, &a, r.fence, None).unwrap().next_floor, 500);
        assert_eq!(release(&r, &a, r.fence, Some(100)).unwrap().next_floor, 500);
        assert_eq!(
            release(&r, &a, r.fence, Some(99_999_999))
                .unwrap()
                .next_floor,
            r.ceiling
        );
    }

    #[test]
    fn stale_fence_or_other_incarnation_is_refused() {
        let a = Owner::new("a");
        let r = acquire(&SlotRecord::vacant(0), &a, 0, TERMS, 0);
        let twin = Owner {
            key: "a".into(),
            incarnation: uuid::Uuid::new_v4(),
        };
        assert!(matches!(
            renew(&r, &twin, r.fence, 1, TERMS),
            Err(Refusal::NotHolder { .. })
        ));
        assert!(renew(&r, &a, r.fence + 1, 1, TERMS).is_err());
        assert!(release(&r, &a, r.fence - 1, None).is_err());
    }

    #[test]
    fn floor_never_below_the_requested_minimum_and_ceiling_never_below_floor() {
        let a = Owner::new("a");
        // The store's clock is far behind the floor: the window is empty until renewals pass it.
        let r = acquire(&vacant_above(1_000_000), &a, 0, TERMS, 0);
        assert_eq!((r.floor, r.ceiling), (1_000_000, 1_000_000));
        let r = acquire(&SlotRecord::vacant(0), &a, 0, TERMS, 77_777);
        assert_eq!(r.floor, 77_777);
    }

    #[test]
    fn free_means_released_or_expired() {
        let a = Owner::new("a");
        let r = acquire(&SlotRecord::vacant(0), &a, 0, TERMS, 0);
        assert!(!is_free(&r, 29_999));
        assert!(is_free(&r, 30_000));
        assert!(is_free(&release(&r, &a, r.fence, None).unwrap(), 0));
    }
}
