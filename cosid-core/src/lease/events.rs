//! Events the keeper raises, and the counters a user can read.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Something the keeper noticed. Listeners are called on the keeper's thread (or on the thread
/// that builds or closes the runtime), so they must be quick and must not call back into the
/// runtime's `close`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A slot was acquired and bound: ids are issued in `(floor, ceiling]` on it.
    SlotAcquired {
        /// The slot.
        slot: u32,
        /// The fence of this ownership.
        fence: u64,
        /// Excluded lower bound, ms.
        floor: i64,
        /// Included upper bound, ms.
        ceiling: i64,
    },
    /// The lease was lost (taken over after expiry, or the store lost it); generators fail fast
    /// with `SlotLost` until a new slot is bound.
    SlotLost {
        /// The slot that was lost.
        slot: u32,
        /// Why.
        reason: String,
    },
    /// A live lease of the same owner key but another incarnation holds `slot`: two processes
    /// run with one owner key. It is never taken over; this runtime took another slot.
    DuplicateOwnerKey {
        /// The slot the other incarnation holds.
        slot: u32,
        /// The owner key.
        key: String,
    },
    /// The store's clock and the local clock differ by more than `tolerance / 2`.
    ClockSkew {
        /// Local minus store, ms (positive: the local clock is ahead).
        skew_ms: i64,
    },
    /// A renewal failed (the store is unreachable or slow); it is retried with back-off, and
    /// generators keep issuing up to the ceiling meanwhile.
    RenewalFailed {
        /// The slot.
        slot: u32,
        /// Consecutive failures so far.
        attempt: u32,
        /// The store's error.
        error: String,
    },
    /// The store no longer has the namespace or the slot record: it restarted empty. Windows this
    /// runtime gets from now on start above every ceiling it was granted before.
    StoreReset {
        /// The slot whose record vanished.
        slot: u32,
    },
    /// Acquiring a slot failed (exhausted namespace or store error); retried with back-off.
    AcquireFailed {
        /// The error.
        error: String,
    },
    /// The slot was released on shutdown, handing `next_floor` to the next holder.
    SlotReleased {
        /// The slot.
        slot: u32,
        /// The floor the next holder gets.
        next_floor: i64,
    },
}

impl Event {
    /// A stable snake_case name of the event kind (used by the bindings).
    pub fn name(&self) -> &'static str {
        match self {
            Event::SlotAcquired { .. } => "slot_acquired",
            Event::SlotLost { .. } => "slot_lost",
            Event::DuplicateOwnerKey { .. } => "duplicate_owner_key",
            Event::ClockSkew { .. } => "clock_skew",
            Event::RenewalFailed { .. } => "renewal_failed",
            Event::StoreReset { .. } => "store_reset",
            Event::AcquireFailed { .. } => "acquire_failed",
            Event::SlotReleased { .. } => "slot_released",
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::SlotAcquired {
                slot,
                fence,
                floor,
                ceiling,
            } => {
                write!(
                    f,
                    "slot {slot} acquired (fence {fence}, window ({floor}, {ceiling}])"
                )
            }
            Event::SlotLost { slot, reason } => write!(f, "slot {slot} lost: {reason}"),
            Event::DuplicateOwnerKey { slot, key } => write!(
                f,
                "owner key '{key}' is already held on slot {slot} by another live runtime (another \
                 process, or another runtime of this one); this runtime took another slot. Give \
                 each runtime its own owner key"
            ),
            Event::ClockSkew { skew_ms } => {
                write!(f, "local clock differs from the store's by {skew_ms} ms")
            }
            Event::RenewalFailed {
                slot,
                attempt,
                error,
            } => {
                write!(
                    f,
                    "renewal of slot {slot} failed (attempt {attempt}): {error}"
                )
            }
            Event::StoreReset { slot } => {
                write!(
                    f,
                    "the store lost the record of slot {slot} (restarted empty?)"
                )
            }
            Event::AcquireFailed { error } => write!(f, "acquiring a slot failed: {error}"),
            Event::SlotReleased { slot, next_floor } => {
                write!(f, "slot {slot} released with next floor {next_floor}")
            }
        }
    }
}

/// A listener for [`Event`]s.
pub type EventListener = Arc<dyn Fn(&Event) + Send + Sync>;

/// Fans events out to listeners. A listener that panics is caught and does not stop the keeper.
#[derive(Default)]
pub(crate) struct EventBus {
    listeners: RwLock<Vec<EventListener>>,
}

impl fmt::Debug for EventBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventBus")
    }
}

impl EventBus {
    // Both take the lock inside `fork::gate`, so a forked child never inherits it held.
    pub(crate) fn subscribe(&self, listener: EventListener) {
        crate::fork::gate(|| {
            self.listeners
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .push(listener)
        });
    }

    pub(crate) fn emit(&self, event: Event) {
        let listeners = crate::fork::gate(|| {
            self.listeners
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        });
        for l in listeners {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l(&event)));
        }
    }
}

/// Counters of one runtime, read with [`crate::Runtime::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Ids issued by all generators (exact after close).
    pub ids_issued: u64,
    /// Calls that had to wait (next tick, floor, ceiling).
    pub waits: u64,
    /// Successful renewals.
    pub renewals: u64,
    /// Failed renewals (store errors).
    pub renewal_failures: u64,
    /// Slots acquired (1 at start, +1 per rebinding).
    pub acquisitions: u64,
    /// Leases lost.
    pub slots_lost: u64,
    /// Clock-skew events raised.
    pub clock_skew_events: u64,
    /// The bound slot (meaningful while `bound`).
    pub slot: u32,
    /// Whether a slot is bound now.
    pub bound: bool,
    /// The current window's floor, ms.
    pub floor: i64,
    /// The current window's ceiling, ms.
    pub ceiling: i64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub renewals: AtomicU64,
    pub renewal_failures: AtomicU64,
    pub acquisitions: AtomicU64,
    pub slots_lost: AtomicU64,
    pub clock_skew_events: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn fill(&self, s: &mut Stats) {
        s.renewals = self.renewals.load(Ordering::Relaxed);
        s.renewal_failures = self.renewal_failures.load(Ordering::Relaxed);
        s.acquisitions = self.acquisitions.load(Ordering::Relaxed);
        s.slots_lost = self.slots_lost.load(Ordering::Relaxed);
        s.clock_skew_events = self.clock_skew_events.load(Ordering::Relaxed);
    }
}
