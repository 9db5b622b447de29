//! A store wrapper for the benchmarks: every primitive goes to the real store unchanged, and is
//! counted on the way (`stores` and `storm` include this file).

use cosid_core::store::hooked::{Call, Hook, Hooked, Reply};
use cosid_core::store::{CandidateView, SharedStore, SlotStore};
use cosid_core::Result;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counts the primitives called through it: all of them (store calls), the slot
/// compare-and-set calls (attempts), and the slots those tried (more than the calls when one
/// `cas_first_slot` tries several: one round trip on Redis and etcd, one per slot tried on the
/// stores that use the trait's provided loop).
#[derive(Debug, Default)]
pub struct Counting {
    calls: AtomicU64,
    cas: AtomicU64,
    tried: AtomicU64,
    /// Answers every candidate view with a whole snapshot (what acquisitions read before the
    /// stores filtered their views), for a before-and-after in one run.
    whole_snapshots: bool,
    /// Tries only the first slot of a `cas_first_slot` (what an acquisition did before it
    /// offered several: a lost race for its first choice read the namespace again), for a
    /// before-and-after in one run.
    first_candidate_only: bool,
}

impl Counting {
    /// `inner`, counted.
    pub fn new(inner: SharedStore) -> Arc<Hooked<Counting>> {
        Hooked::new(inner, Counting::default())
    }

    /// `inner`, counted, acting as an earlier build did: its candidate views read as whole
    /// snapshots (`whole_snapshots`), only the first slot of several tried
    /// (`first_candidate_only`).
    #[allow(dead_code)] // the storm bench's; the stores bench has no use for it
    pub fn emulating(
        inner: SharedStore,
        whole_snapshots: bool,
        first_candidate_only: bool,
    ) -> Arc<Hooked<Counting>> {
        Hooked::new(
            inner,
            Counting {
                whole_snapshots,
                first_candidate_only,
                ..Counting::default()
            },
        )
    }

    /// The calls, slot compare-and-set calls and slots tried since the last `take`, and a new
    /// count from zero.
    pub fn take(&self) -> (u64, u64, u64) {
        (
            self.calls.swap(0, Ordering::Relaxed),
            self.cas.swap(0, Ordering::Relaxed),
            self.tried.swap(0, Ordering::Relaxed),
        )
    }
}

impl Hook for Counting {
    fn call(&self, inner: &dyn SlotStore, call: Call<'_>) -> Result<Reply> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Call::CasSlot { .. } | Call::CasSlotTimed { .. } | Call::CasFirstSlot { .. } = call {
            self.cas.fetch_add(1, Ordering::Relaxed);
        }
        let reply = match call {
            Call::Candidates { namespace, .. } if self.whole_snapshots => Ok(Reply::Candidates(
                CandidateView::of_snapshot(inner.snapshot(namespace)?),
            )),
            Call::CasFirstSlot { namespace, writes } if self.first_candidate_only => Ok(
                Reply::First(inner.cas_first_slot(namespace, &writes[..writes.len().min(1)])?),
            ),
            _ => call.on(inner),
        }?;
        let tried = match (&call, &reply) {
            (Call::CasSlot { .. } | Call::CasSlotTimed { .. }, _) => 1,
            (Call::CasFirstSlot { .. }, Reply::First(Some((i, _)))) => *i as u64 + 1,
            (Call::CasFirstSlot { .. }, _) if self.first_candidate_only => 1,
            (Call::CasFirstSlot { writes, .. }, _) => writes.len() as u64,
            _ => 0,
        };
        self.tried.fetch_add(tried, Ordering::Relaxed);
        Ok(reply)
    }

    /// A compare-and-set over several candidates goes to the store whole, as it would without
    /// this hook (one script on Redis), and counts as one call.
    fn sees_each_write(&self) -> bool {
        false
    }
}
