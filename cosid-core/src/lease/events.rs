//! Events the keeper raises, and the counters behind [`Stats`] (`super::stats`).
//!
//! # The vocabulary of events
//!
//! Every surface of cosid (the C `struct cosid_event`, Python's `cosid.Event`, the object a Node
//! listener receives) names an event's kind and fields exactly as below, in snake_case, with
//! the `_ms` suffix on every value in milliseconds; Node writes each field name in camelCase
//! (`nextFloorMs`), as it does every field of every object, stats included. The tables are [`EVENT_KINDS`] and
//! [`EVENT_FIELDS`]; an event gives its own with [`Event::kind_name`] and [`Event::fields`], and
//! each binding's tests compare its surface with them.
//!
//! | kind | fields |
//! |---|---|
//! | `slot_acquired` | `slot`, `fence`, `floor_ms`, `ceiling_ms` |
//! | `slot_lost` | `slot`, `reason` |
//! | `duplicate_owner_key` | `slot`, `key` |
//! | `clock_skew` | `skew_ms` |
//! | `renewal_failed` | `slot`, `attempt`, `error` |
//! | `store_reset` | `slot` |
//! | `acquire_failed` | `error` |
//! | `slot_released` | `slot`, `next_floor_ms` |
//! | `window_ahead` | `slot`, `floor_ms`, `reason` |
//! | `store_unavailable` | `attempt`, `error`, `waited_ms`, `timeout_ms` |
//!
//! | field | type | unit | meaning |
//! |---|---|---|---|
//! | `slot` | u32 | | the slot concerned |
//! | `fence` | u64 | | the fence of the new ownership (grows with every new owner of the slot) |
//! | `floor_ms` | i64 | ms since the Unix epoch | the window's lower bound (excluded) |
//! | `ceiling_ms` | i64 | ms since the Unix epoch | the window's upper bound (included) |
//! | `next_floor_ms` | i64 | ms since the Unix epoch | the floor the slot's next holder gets |
//! | `skew_ms` | i64 | ms | this host's clock minus the store's (positive: this host is ahead) |
//! | `attempt` | u32 | count | consecutive failures so far (1 the first time) |
//! | `reason` | text | | why the lease was lost |
//! | `error` | text | | the error (of the store, or why no slot could be had) |
//! | `key` | text | | the owner key that two live runtimes hold |
//! | `waited_ms` | i64 | ms | how long the start has waited so far |
//! | `timeout_ms` | i64 | ms | how long the start waits at most (`acquire-timeout`) |
//!
//! Besides its fields, every event has `kind` (its kind name) and `message` (the whole event as
//! one English line: its `Display`). A field that does not belong to an event's kind is absent
//! (Python `None`, Node `undefined`, C `0` or `""`). A kind is only ever added, never renamed; a
//! surface fixed at compile time (the C enum) shows a kind it has no value for as `other`, with
//! its `message`, and a test of that surface fails until it has one.

use super::stats::Stats;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Something the keeper noticed. Listeners are called on the keeper's thread (or on the thread
/// that builds or closes the runtime) with no lock of the keeper held: they must be quick, and
/// may call any method of the runtime, `close` included.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A slot was acquired and bound: ids are issued in `(floor, ceiling]` on it.
    SlotAcquired {
        /// The slot.
        slot: u32,
        /// The fence of this ownership.
        fence: u64,
        /// Excluded lower bound, ms since the Unix epoch.
        floor_ms: i64,
        /// Included upper bound, ms since the Unix epoch.
        ceiling_ms: i64,
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
    /// The store no longer has the namespace or the slot record (it restarted empty), or it lost
    /// writes since this runtime's last renewal (it restarted from an older copy). Windows this
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
    /// The runtime's start waits for its window, which opens later than now: the namespace's
    /// not-before, or the restart guard keeping it above every window a store that lost data
    /// may have granted (`docs/protocol.md` section 7). Ids come once the clock passes
    /// `floor_ms`; `reason` says why and how to avoid the wait where it can be.
    WindowAhead {
        /// The slot.
        slot: u32,
        /// When the window opens (its excluded lower bound), ms since the Unix epoch.
        floor_ms: i64,
        /// Why it opens then.
        reason: String,
    },
    /// The runtime's start cannot reach its store, or the store fails it, with an error that
    /// may go away (a server starting, a network coming back, a server busy): it tries again
    /// with back-off until `timeout_ms` (the acquire timeout) has passed. An error that cannot
    /// go away (a wrong password, a database that does not exist, TLS on one side only, a host
    /// name that does not resolve) fails the start at once instead.
    StoreUnavailable {
        /// Consecutive failures so far (1 the first time).
        attempt: u32,
        /// The store's error (its URL without credentials, cut to a readable length).
        error: String,
        /// How long the start has waited so far, ms.
        waited_ms: i64,
        /// How long it waits at most (the acquire timeout), ms.
        timeout_ms: i64,
    },
    /// The slot was released on shutdown, handing `next_floor` to the next holder.
    SlotReleased {
        /// The slot.
        slot: u32,
        /// The floor the next holder gets, ms since the Unix epoch.
        next_floor_ms: i64,
    },
}

/// The type of an event field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// An unsigned 32-bit integer.
    U32,
    /// An unsigned 64-bit integer.
    U64,
    /// A signed 64-bit integer.
    I64,
    /// UTF-8 text.
    Text,
}

/// One field of the event vocabulary: its name on every surface, its type, unit and meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventField {
    /// The name, the same on every surface.
    pub name: &'static str,
    /// The type of its value.
    pub ty: FieldType,
    /// The unit (`"ms since the Unix epoch"`, `"ms"`, `"count"`), `""` for none.
    pub unit: &'static str,
    /// What it means.
    pub meaning: &'static str,
}

/// One kind of event: its name on every surface and the names of its fields, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventKind {
    /// The kind name, the same on every surface.
    pub name: &'static str,
    /// The names of its fields (each one of [`EVENT_FIELDS`]), in the order [`Event::fields`]
    /// gives them.
    pub fields: &'static [&'static str],
}

/// Every field of every event (the module's vocabulary table), in the order of the C struct.
pub const EVENT_FIELDS: [EventField; 12] = [
    EventField {
        name: "slot",
        ty: FieldType::U32,
        unit: "",
        meaning: "the slot concerned",
    },
    EventField {
        name: "fence",
        ty: FieldType::U64,
        unit: "",
        meaning: "the fence of the new ownership (grows with every new owner of the slot)",
    },
    EventField {
        name: "floor_ms",
        ty: FieldType::I64,
        unit: "ms since the Unix epoch",
        meaning: "the window's lower bound (excluded)",
    },
    EventField {
        name: "ceiling_ms",
        ty: FieldType::I64,
        unit: "ms since the Unix epoch",
        meaning: "the window's upper bound (included)",
    },
    EventField {
        name: "next_floor_ms",
        ty: FieldType::I64,
        unit: "ms since the Unix epoch",
        meaning: "the floor the slot's next holder gets",
    },
    EventField {
        name: "skew_ms",
        ty: FieldType::I64,
        unit: "ms",
        meaning: "this host's clock minus the store's (positive: this host is ahead)",
    },
    EventField {
        name: "attempt",
        ty: FieldType::U32,
        unit: "count",
        meaning: "consecutive failures so far (1 the first time)",
    },
    EventField {
        name: "reason",
        ty: FieldType::Text,
        unit: "",
        meaning: "why the lease was lost, or why the window opens later than now",
    },
    EventField {
        name: "error",
        ty: FieldType::Text,
        unit: "",
        meaning: "the error (of the store, or why no slot could be had)",
    },
    EventField {
        name: "key",
        ty: FieldType::Text,
        unit: "",
        meaning: "the owner key that two live runtimes hold",
    },
    EventField {
        name: "waited_ms",
        ty: FieldType::I64,
        unit: "ms",
        meaning: "how long the start has waited so far",
    },
    EventField {
        name: "timeout_ms",
        ty: FieldType::I64,
        unit: "ms",
        meaning: "how long the start waits at most (acquire-timeout)",
    },
];

/// Every kind of event with its fields, in the order of the C enum (value = index + 1).
pub const EVENT_KINDS: [EventKind; 10] = [
    EventKind {
        name: "slot_acquired",
        fields: &["slot", "fence", "floor_ms", "ceiling_ms"],
    },
    EventKind {
        name: "slot_lost",
        fields: &["slot", "reason"],
    },
    EventKind {
        name: "duplicate_owner_key",
        fields: &["slot", "key"],
    },
    EventKind {
        name: "clock_skew",
        fields: &["skew_ms"],
    },
    EventKind {
        name: "renewal_failed",
        fields: &["slot", "attempt", "error"],
    },
    EventKind {
        name: "store_reset",
        fields: &["slot"],
    },
    EventKind {
        name: "acquire_failed",
        fields: &["error"],
    },
    EventKind {
        name: "slot_released",
        fields: &["slot", "next_floor_ms"],
    },
    EventKind {
        name: "window_ahead",
        fields: &["slot", "floor_ms", "reason"],
    },
    EventKind {
        name: "store_unavailable",
        fields: &["attempt", "error", "waited_ms", "timeout_ms"],
    },
];

/// The value of one event field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValue<'a> {
    /// A [`FieldType::U32`] value.
    U32(u32),
    /// A [`FieldType::U64`] value.
    U64(u64),
    /// A [`FieldType::I64`] value.
    I64(i64),
    /// A [`FieldType::Text`] value.
    Text(&'a str),
}

impl Event {
    /// The event's place in [`EVENT_KINDS`].
    fn kind_index(&self) -> usize {
        match self {
            Event::SlotAcquired { .. } => 0,
            Event::SlotLost { .. } => 1,
            Event::DuplicateOwnerKey { .. } => 2,
            Event::ClockSkew { .. } => 3,
            Event::RenewalFailed { .. } => 4,
            Event::StoreReset { .. } => 5,
            Event::AcquireFailed { .. } => 6,
            Event::SlotReleased { .. } => 7,
            Event::WindowAhead { .. } => 8,
            Event::StoreUnavailable { .. } => 9,
        }
    }

    /// The event's kind in the vocabulary.
    pub fn kind(&self) -> &'static EventKind {
        &EVENT_KINDS[self.kind_index()]
    }

    /// The stable snake_case name of the event's kind (`"slot_acquired"`, …), the same on every
    /// surface.
    pub fn kind_name(&self) -> &'static str {
        self.kind().name
    }

    /// The same as [`Event::kind_name`].
    pub fn name(&self) -> &'static str {
        self.kind_name()
    }

    /// The event's fields as `(name, value)` pairs, exactly those of its kind in
    /// [`EVENT_KINDS`], in that order. Every binding builds its event from this.
    pub fn fields(&self) -> Vec<(&'static str, FieldValue<'_>)> {
        use FieldValue::{Text, I64, U32, U64};
        match self {
            Event::SlotAcquired {
                slot,
                fence,
                floor_ms,
                ceiling_ms,
            } => vec![
                ("slot", U32(*slot)),
                ("fence", U64(*fence)),
                ("floor_ms", I64(*floor_ms)),
                ("ceiling_ms", I64(*ceiling_ms)),
            ],
            Event::SlotLost { slot, reason } => {
                vec![("slot", U32(*slot)), ("reason", Text(reason))]
            }
            Event::DuplicateOwnerKey { slot, key } => {
                vec![("slot", U32(*slot)), ("key", Text(key))]
            }
            Event::ClockSkew { skew_ms } => vec![("skew_ms", I64(*skew_ms))],
            Event::RenewalFailed {
                slot,
                attempt,
                error,
            } => vec![
                ("slot", U32(*slot)),
                ("attempt", U32(*attempt)),
                ("error", Text(error)),
            ],
            Event::StoreReset { slot } => vec![("slot", U32(*slot))],
            Event::AcquireFailed { error } => vec![("error", Text(error))],
            Event::SlotReleased {
                slot,
                next_floor_ms,
            } => vec![("slot", U32(*slot)), ("next_floor_ms", I64(*next_floor_ms))],
            Event::WindowAhead {
                slot,
                floor_ms,
                reason,
            } => vec![
                ("slot", U32(*slot)),
                ("floor_ms", I64(*floor_ms)),
                ("reason", Text(reason)),
            ],
            Event::StoreUnavailable {
                attempt,
                error,
                waited_ms,
                timeout_ms,
            } => vec![
                ("attempt", U32(*attempt)),
                ("error", Text(error)),
                ("waited_ms", I64(*waited_ms)),
                ("timeout_ms", I64(*timeout_ms)),
            ],
        }
    }

    /// One event of every kind, with distinct non-zero values and non-empty texts (for the
    /// bindings' tests of their vocabulary).
    #[doc(hidden)]
    pub fn samples() -> Vec<Event> {
        vec![
            Event::SlotAcquired {
                slot: 3,
                fence: 7,
                floor_ms: 1_700_000_000_000,
                ceiling_ms: 1_700_000_030_000,
            },
            Event::SlotLost {
                slot: 3,
                reason: "now held by another owner".into(),
            },
            Event::DuplicateOwnerKey {
                slot: 4,
                key: "host-a".into(),
            },
            Event::ClockSkew { skew_ms: -1500 },
            Event::RenewalFailed {
                slot: 3,
                attempt: 2,
                error: "store unreachable".into(),
            },
            Event::StoreReset { slot: 3 },
            Event::AcquireFailed {
                error: "every slot is held".into(),
            },
            Event::SlotReleased {
                slot: 3,
                next_floor_ms: 1_700_000_012_345,
            },
            Event::WindowAhead {
                slot: 3,
                floor_ms: 1_700_000_031_000,
                reason: "the restart guard".into(),
            },
            Event::StoreUnavailable {
                attempt: 4,
                error: "store redis://127.0.0.1:6379/0: connecting: Connection refused".into(),
                waited_ms: 1_500,
                timeout_ms: 30_000,
            },
        ]
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::SlotAcquired {
                slot,
                fence,
                floor_ms,
                ceiling_ms,
            } => {
                write!(
                    f,
                    "slot {slot} acquired (fence {fence}, window ({floor_ms}, {ceiling_ms}])"
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
            Event::SlotReleased {
                slot,
                next_floor_ms,
            } => write!(f, "slot {slot} released with next floor {next_floor_ms}"),
            Event::WindowAhead {
                slot,
                floor_ms,
                reason,
            } => write!(
                f,
                "waiting for slot {slot}'s window, which opens at {}: {reason}",
                crate::time::format_rfc3339_ms(*floor_ms)
            ),
            Event::StoreUnavailable {
                attempt,
                error,
                waited_ms,
                timeout_ms,
            } => write!(
                f,
                "waiting for the store ({:.1} s so far, attempt {attempt}; at most {:.1} s, the \
                 acquire-timeout): {error}",
                *waited_ms as f64 / 1000.0,
                *timeout_ms as f64 / 1000.0
            ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_gives_exactly_its_kinds_fields_and_every_kind_has_a_sample() {
        let samples = Event::samples();
        assert_eq!(samples.len(), EVENT_KINDS.len());
        for (i, e) in samples.iter().enumerate() {
            assert_eq!(
                e.kind(),
                &EVENT_KINDS[i],
                "samples are in the table's order"
            );
            let names: Vec<_> = e.fields().iter().map(|(n, _)| *n).collect();
            assert_eq!(names, e.kind().fields, "{e:?}");
            for (name, value) in e.fields() {
                let field = EVENT_FIELDS.iter().find(|f| f.name == name).expect(name);
                let ty = match value {
                    FieldValue::U32(v) => (FieldType::U32, v != 0),
                    FieldValue::U64(v) => (FieldType::U64, v != 0),
                    FieldValue::I64(v) => (FieldType::I64, v != 0),
                    FieldValue::Text(t) => (FieldType::Text, !t.is_empty()),
                };
                assert_eq!(ty, (field.ty, true), "{name} of {e:?}");
            }
        }
    }

    #[test]
    fn names_are_unique_snake_case_and_every_millisecond_value_ends_in_ms() {
        let snake =
            |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        let mut fields: Vec<_> = EVENT_FIELDS.iter().map(|f| f.name).collect();
        let mut kinds: Vec<_> = EVENT_KINDS.iter().map(|k| k.name).collect();
        for f in &EVENT_FIELDS {
            assert!(snake(f.name) && f.name != "kind" && f.name != "message");
            assert_eq!(
                f.unit.starts_with("ms"),
                f.name.ends_with("_ms"),
                "{}",
                f.name
            );
        }
        for k in &EVENT_KINDS {
            assert!(snake(k.name));
            assert!(k.fields.iter().all(|f| fields.contains(f)), "{}", k.name);
        }
        // Every field belongs to some kind.
        assert!(fields
            .iter()
            .all(|f| EVENT_KINDS.iter().any(|k| k.fields.contains(f))));
        fields.sort();
        fields.dedup();
        kinds.sort();
        kinds.dedup();
        assert_eq!(fields.len(), EVENT_FIELDS.len());
        assert_eq!(kinds.len(), EVENT_KINDS.len());
    }
}
