//! A store wrapper for the benchmarks: every primitive goes to the real store unchanged, and is
//! counted on the way (`stores` and `storm` include this file).

use cosid_core::store::hooked::{Call, Hook, Hooked, Reply};
use cosid_core::store::{CandidateView, SharedStore, SlotStore};
use cosid_core::Result;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counts the primitives called through it: all of them (round trips) and the slot
/// compare-and-sets (attempts).
#[derive(Debug, Default)]
pub struct Counting {
    calls: AtomicU64,
    cas: AtomicU64,
    /// Answers every candidate view with a whole snapshot (what acquisitions read before the
    /// stores filtered their views), for a before-and-after in one run.
    whole_snapshots: bool,
}

impl Counting {
    /// `inner`, counted.
    pub fn new(inner: SharedStore) -> Arc<Hooked<Counting>> {
        Hooked::new(inner, Counting::default())
    }

    /// `inner`, counted, its candidate views read as whole snapshots.
    #[allow(dead_code)] // the storm bench's; the stores bench has no use for it
    pub fn reading_whole_snapshots(inner: SharedStore) -> Arc<Hooked<Counting>> {
        Hooked::new(
            inner,
            Counting {
                whole_snapshots: true,
                ..Counting::default()
            },
        )
    }

    /// The calls and slot compare-and-sets since the last `take`, and a new count from zero.
    pub fn take(&self) -> (u64, u64) {
        (
            self.calls.swap(0, Ordering::Relaxed),
            self.cas.swap(0, Ordering::Relaxed),
        )
    }
}

impl Hook for Counting {
    fn call(&self, inner: &dyn SlotStore, call: Call<'_>) -> Result<Reply> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Call::CasSlot { .. } | Call::CasSlotTimed { .. } = call {
            self.cas.fetch_add(1, Ordering::Relaxed);
        }
        match call {
            Call::Candidates { namespace, .. } if self.whole_snapshots => Ok(Reply::Candidates(
                CandidateView::of_snapshot(inner.snapshot(namespace)?),
            )),
            _ => call.on(inner),
        }
    }
}
