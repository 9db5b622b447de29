//! The slot lease of `docs/protocol.md`: records, the state-change rules, the protocol over a
//! store, the keeper that renews, and the events it raises.

pub mod admin;
pub mod client;
pub mod events;
pub mod invariants;
pub mod keeper;
pub mod record;
pub mod rules;
pub mod stats;

pub use admin::{Deletion, SlotsRaise};
pub use client::{
    AcquireRequest, Acquisition, Choice, LeaseClient, Migration, Renewal, MIGRATE_AHEAD_LIMIT_MS,
    MIGRATE_VACANT_BOUND,
};
pub use events::{Event, EventListener};
pub use keeper::{KeeperConfig, LeaseKeeper};
pub use record::{IdLayout, NamespaceRecord, Owner, SlotLease, SlotRecord, Snapshot, Versioned};
#[cfg(feature = "mutation-switches")]
pub use rules::mutation;
pub use rules::{Refusal, Terms};
pub use stats::Stats;
