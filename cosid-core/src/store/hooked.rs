//! A store wrapper for tests and benchmarks: every primitive goes through one hook, which may
//! count it, record it, delay it, fail it, or pass it to the wrapped store unchanged
//! (`call.on(inner)`). The counting store of the benchmarks, the recording store of the
//! simulation and the fault injectors of the tests are each a [`Hook`], so no one of them
//! re-implements the [`SlotStore`] trait just to forward. Not a stable API.

use super::{
    CandidateAsk, CandidateView, NamespaceSnapshot, NamespaceWrite, SharedStore, SlotRead,
    SlotStore, SlotWrite, Written,
};
use crate::error::Result;
use crate::lease::{SlotRecord, Versioned};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// One call of a store primitive, with its arguments (`describe` is [`Hook::describe`]).
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    /// [`SlotStore::snapshot`].
    Snapshot { namespace: &'a str },
    /// [`SlotStore::cas_namespace`].
    CasNamespace {
        namespace: &'a str,
        write: NamespaceWrite<'a>,
    },
    /// [`SlotStore::read_slot`].
    ReadSlot { namespace: &'a str, slot: u32 },
    /// [`SlotStore::cas_slot`].
    CasSlot {
        namespace: &'a str,
        write: SlotWrite<'a>,
    },
    /// [`SlotStore::cas_slot_timed`].
    CasSlotTimed {
        namespace: &'a str,
        write: SlotWrite<'a>,
    },
    /// [`SlotStore::candidates`].
    Candidates {
        namespace: &'a str,
        ask: &'a CandidateAsk<'a>,
    },
    /// [`SlotStore::cas_first_slot`], for a hook that takes it whole
    /// ([`Hook::sees_each_write`]).
    CasFirstSlot {
        namespace: &'a str,
        writes: &'a [SlotWrite<'a>],
    },
}

/// What a primitive returned, one variant per return type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Of `snapshot`.
    Snapshot(NamespaceSnapshot),
    /// Of `cas_namespace` and `cas_slot`: the new version, `None` when nothing was written. Also
    /// a valid answer to `cas_slot_timed`: written without reading the store's clock, as the
    /// trait's provided `cas_slot_timed` reports it.
    Version(Option<u64>),
    /// Of `read_slot`: the store's clock and the slot's record.
    Slot(i64, Option<Versioned<SlotRecord>>),
    /// Of `cas_slot_timed`.
    Written(Option<Written>),
    /// Of `candidates`.
    Candidates(CandidateView),
    /// Of `cas_first_slot`: the index of the write made and its new version.
    First(Option<(usize, u64)>),
}

impl Call<'_> {
    /// Makes this call on `store`.
    pub fn on(self, store: &dyn SlotStore) -> Result<Reply> {
        Ok(match self {
            Call::Snapshot { namespace } => Reply::Snapshot(store.snapshot(namespace)?),
            Call::CasNamespace { namespace, write } => {
                Reply::Version(store.cas_namespace(namespace, write)?)
            }
            Call::ReadSlot { namespace, slot } => {
                let (now, record) = store.read_slot(namespace, slot)?;
                Reply::Slot(now, record)
            }
            Call::CasSlot { namespace, write } => Reply::Version(store.cas_slot(namespace, write)?),
            Call::CasSlotTimed { namespace, write } => {
                Reply::Written(store.cas_slot_timed(namespace, write)?)
            }
            Call::Candidates { namespace, ask } => {
                Reply::Candidates(store.candidates(namespace, ask)?)
            }
            Call::CasFirstSlot { namespace, writes } => {
                Reply::First(store.cas_first_slot(namespace, writes)?)
            }
        })
    }

    /// The primitives' names, as the trait spells them, in the order of [`Call::index`].
    pub const NAMES: [&'static str; 7] = [
        "snapshot",
        "cas_namespace",
        "read_slot",
        "cas_slot",
        "cas_slot_timed",
        "candidates",
        "cas_first_slot",
    ];

    /// The primitive's place in [`Call::NAMES`] (for a table of counts, say).
    pub fn index(&self) -> usize {
        match self {
            Call::Snapshot { .. } => 0,
            Call::CasNamespace { .. } => 1,
            Call::ReadSlot { .. } => 2,
            Call::CasSlot { .. } => 3,
            Call::CasSlotTimed { .. } => 4,
            Call::Candidates { .. } => 5,
            Call::CasFirstSlot { .. } => 6,
        }
    }

    /// The primitive's name, as the trait spells it.
    pub fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }
}

/// What a [`Hooked`] store does with each call.
pub trait Hook: Send + Sync + fmt::Debug {
    /// Answers `call` for the store wrapping `inner` (`call.on(inner)` passes it on unchanged).
    fn call(&self, inner: &dyn SlotStore, call: Call<'_>) -> Result<Reply>;

    /// The wrapping store's [`SlotStore::describe`]: by default the wrapped store's.
    fn describe(&self, inner: &dyn SlotStore) -> String {
        inner.describe()
    }

    /// Whether a [`SlotStore::cas_first_slot`] reaches this hook as one `CasSlot` call per slot
    /// tried (`true`, the default: the trait's provided loop, so a hook that watches or fails
    /// single writes sees every one), or whole, as one [`Call::CasFirstSlot`] that
    /// `call.on(inner)` hands to the wrapped store's own (a counting hook of the benchmarks,
    /// which must measure the store as it is).
    fn sees_each_write(&self) -> bool {
        true
    }

    /// The wrapping store's [`SlotStore::started_at`]: by default the wrapped store's.
    fn started_at(&self, inner: &dyn SlotStore, namespace: &str) -> Result<Option<i64>> {
        inner.started_at(namespace)
    }

    /// The wrapping store's [`SlotStore::may_forget_namespaces`]: by default the wrapped
    /// store's.
    fn may_forget_namespaces(&self, inner: &dyn SlotStore) -> bool {
        inner.may_forget_namespaces()
    }
}

/// `inner` behind `hook`. Derefs to the hook, so a test reaches the hook's switches and counts
/// through the store handle.
#[derive(Debug)]
pub struct Hooked<H> {
    /// The wrapped store.
    pub inner: SharedStore,
    /// What every call goes through.
    pub hook: H,
}

impl<H: Hook> Hooked<H> {
    /// `inner` behind `hook`.
    pub fn new(inner: SharedStore, hook: H) -> Arc<Hooked<H>> {
        Arc::new(Hooked { inner, hook })
    }

    fn call(&self, call: Call<'_>) -> Result<Reply> {
        self.hook.call(&*self.inner, call)
    }

    /// The new version a compare-and-set `call` (of a namespace or a slot) wrote.
    fn version(&self, call: Call<'_>) -> Result<Option<u64>> {
        match self.call(call)? {
            Reply::Version(version) => Ok(version),
            other => mismatched(call, other),
        }
    }
}

impl<H> Deref for Hooked<H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.hook
    }
}

/// A hook that answered a call with another primitive's reply: a bug in the test.
fn mismatched(call: Call<'_>, reply: Reply) -> ! {
    panic!("a store hook answered {call:?} with {reply:?}")
}

impl<H: Hook> SlotStore for Hooked<H> {
    fn describe(&self) -> String {
        self.hook.describe(&*self.inner)
    }

    fn started_at(&self, namespace: &str) -> Result<Option<i64>> {
        self.hook.started_at(&*self.inner, namespace)
    }

    fn may_forget_namespaces(&self) -> bool {
        self.hook.may_forget_namespaces(&*self.inner)
    }

    /// Straight to the inner store: an operator's command, outside every lease change a hook
    /// counts or fails.
    fn deletes_slots(&self) -> bool {
        self.inner.deletes_slots()
    }

    fn delete_slot(&self, namespace: &str, slot: u32, expected: u64) -> Result<bool> {
        self.inner.delete_slot(namespace, slot, expected)
    }

    fn snapshot(&self, namespace: &str) -> Result<NamespaceSnapshot> {
        let call = Call::Snapshot { namespace };
        match self.call(call)? {
            Reply::Snapshot(snapshot) => Ok(snapshot),
            other => mismatched(call, other),
        }
    }

    fn cas_namespace(&self, namespace: &str, write: NamespaceWrite<'_>) -> Result<Option<u64>> {
        self.version(Call::CasNamespace { namespace, write })
    }

    fn read_slot(&self, namespace: &str, slot: u32) -> Result<SlotRead> {
        let call = Call::ReadSlot { namespace, slot };
        match self.call(call)? {
            Reply::Slot(now, record) => Ok((now, record)),
            other => mismatched(call, other),
        }
    }

    fn cas_slot(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<u64>> {
        self.version(Call::CasSlot { namespace, write })
    }

    fn cas_slot_timed(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<Written>> {
        let call = Call::CasSlotTimed { namespace, write };
        match self.call(call)? {
            Reply::Written(written) => Ok(written),
            Reply::Version(version) => Ok(version.map(|version| Written {
                version,
                store_now: None,
            })),
            other => mismatched(call, other),
        }
    }

    fn candidates(&self, namespace: &str, ask: &CandidateAsk<'_>) -> Result<CandidateView> {
        let call = Call::Candidates { namespace, ask };
        match self.call(call)? {
            Reply::Candidates(view) => Ok(view),
            other => mismatched(call, other),
        }
    }

    fn cas_first_slot(
        &self,
        namespace: &str,
        writes: &[SlotWrite<'_>],
    ) -> Result<Option<(usize, u64)>> {
        if self.hook.sees_each_write() {
            return super::cas_one_by_one(self, namespace, writes);
        }
        let call = Call::CasFirstSlot { namespace, writes };
        match self.call(call)? {
            Reply::First(first) => Ok(first),
            other => mismatched(call, other),
        }
    }
}
