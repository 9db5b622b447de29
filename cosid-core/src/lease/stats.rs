//! The counters and the window a user reads with [`crate::Runtime::stats`], and their names.
//!
//! Every surface names them as [`STATS_FIELDS`] does, in its order: Rust's [`Stats`], the C
//! `struct cosid_stats` and Python's `cosid.Stats` in snake_case exactly as below, Node's
//! `rt.stats()` in camelCase of the same words (`ids_issued` is `idsIssued`, `floor_ms` is
//! `floorMs`). As in the event vocabulary (`super::events`), a value in milliseconds ends in
//! `_ms`. Each binding's tests compare its surface with the table; a field is only ever added.
//!
//! | field | type | unit | meaning |
//! |---|---|---|---|
//! | `ids_issued` | u64 | count | ids issued by all generators (exact after close) |
//! | `waits` | u64 | count | calls that had to wait (next tick, floor, ceiling) |
//! | `renewals` | u64 | count | successful renewals |
//! | `renewal_failures` | u64 | count | failed renewals (store errors) |
//! | `acquisitions` | u64 | count | slots acquired (1 at start, +1 per rebinding) |
//! | `slots_lost` | u64 | count | leases lost |
//! | `clock_skew_events` | u64 | count | clock-skew events raised |
//! | `slot` | u32 | | the bound slot (meaningful while `bound`) |
//! | `bound` | bool | | whether a slot is bound now |
//! | `floor_ms` | i64 | ms since the Unix epoch | the current window's lower bound (excluded) |
//! | `ceiling_ms` | i64 | ms since the Unix epoch | the current window's upper bound (included) |

/// Counters of one runtime and its current window, read with [`crate::Runtime::stats`]. The
/// fields are [`STATS_FIELDS`], in that order.
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
    /// The current window's lower bound (excluded), ms since the Unix epoch.
    pub floor_ms: i64,
    /// The current window's upper bound (included), ms since the Unix epoch.
    pub ceiling_ms: i64,
}

/// The type of a stats field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsType {
    /// An unsigned 32-bit integer.
    U32,
    /// An unsigned 64-bit integer.
    U64,
    /// A signed 64-bit integer.
    I64,
    /// A boolean.
    Bool,
}

/// One field of [`Stats`]: its name (snake_case; Node uses the camelCase of the same words), its
/// type, unit and meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsField {
    /// The name.
    pub name: &'static str,
    /// The type of its value.
    pub ty: StatsType,
    /// The unit (`"count"`, `"ms since the Unix epoch"`), `""` for none.
    pub unit: &'static str,
    /// What it means.
    pub meaning: &'static str,
}

/// The value of one stats field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsValue {
    /// A [`StatsType::U32`] value.
    U32(u32),
    /// A [`StatsType::U64`] value.
    U64(u64),
    /// A [`StatsType::I64`] value.
    I64(i64),
    /// A [`StatsType::Bool`] value.
    Bool(bool),
}

const fn field(
    name: &'static str,
    ty: StatsType,
    unit: &'static str,
    meaning: &'static str,
) -> StatsField {
    StatsField {
        name,
        ty,
        unit,
        meaning,
    }
}

/// Every field of [`Stats`], in the order of the struct (and of the C struct).
pub const STATS_FIELDS: [StatsField; 11] = {
    use StatsType::{Bool, I64, U32, U64};
    const EPOCH_MS: &str = "ms since the Unix epoch";
    [
        field(
            "ids_issued",
            U64,
            "count",
            "ids issued by all generators (exact after close)",
        ),
        field(
            "waits",
            U64,
            "count",
            "calls that had to wait (next tick, floor, ceiling)",
        ),
        field("renewals", U64, "count", "successful renewals"),
        field(
            "renewal_failures",
            U64,
            "count",
            "failed renewals (store errors)",
        ),
        field(
            "acquisitions",
            U64,
            "count",
            "slots acquired (1 at start, +1 per rebinding)",
        ),
        field("slots_lost", U64, "count", "leases lost"),
        field(
            "clock_skew_events",
            U64,
            "count",
            "clock-skew events raised",
        ),
        field("slot", U32, "", "the bound slot (meaningful while bound)"),
        field("bound", Bool, "", "whether a slot is bound now"),
        field(
            "floor_ms",
            I64,
            EPOCH_MS,
            "the current window's lower bound (excluded)",
        ),
        field(
            "ceiling_ms",
            I64,
            EPOCH_MS,
            "the current window's upper bound (included)",
        ),
    ]
};

impl Stats {
    /// The fields as `(name, value)` pairs, exactly [`STATS_FIELDS`] in its order. A binding
    /// that builds its stats object at run time builds it from this.
    pub fn fields(&self) -> [(&'static str, StatsValue); 11] {
        use StatsValue::{Bool, I64, U32, U64};
        let Stats {
            ids_issued,
            waits,
            renewals,
            renewal_failures,
            acquisitions,
            slots_lost,
            clock_skew_events,
            slot,
            bound,
            floor_ms,
            ceiling_ms,
        } = *self;
        [
            ("ids_issued", U64(ids_issued)),
            ("waits", U64(waits)),
            ("renewals", U64(renewals)),
            ("renewal_failures", U64(renewal_failures)),
            ("acquisitions", U64(acquisitions)),
            ("slots_lost", U64(slots_lost)),
            ("clock_skew_events", U64(clock_skew_events)),
            ("slot", U32(slot)),
            ("bound", Bool(bound)),
            ("floor_ms", I64(floor_ms)),
            ("ceiling_ms", I64(ceiling_ms)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_the_table_in_its_order_with_its_types() {
        let s = Stats {
            ids_issued: 1,
            waits: 2,
            renewals: 3,
            renewal_failures: 4,
            acquisitions: 5,
            slots_lost: 6,
            clock_skew_events: 7,
            slot: 8,
            bound: true,
            floor_ms: 10,
            ceiling_ms: 11,
        };
        let fields = s.fields();
        assert_eq!(fields.len(), STATS_FIELDS.len());
        for (i, ((name, value), want)) in fields.iter().zip(&STATS_FIELDS).enumerate() {
            assert_eq!(*name, want.name);
            let (ty, n) = match *value {
                StatsValue::U32(v) => (StatsType::U32, i64::from(v)),
                StatsValue::U64(v) => (StatsType::U64, v as i64),
                StatsValue::I64(v) => (StatsType::I64, v),
                StatsValue::Bool(v) => (StatsType::Bool, if v { 9 } else { 0 }),
            };
            assert_eq!(ty, want.ty, "{name}");
            // Each field reads its own member (the sample's values are 1, 2, … in order).
            assert_eq!(n, i as i64 + 1, "{name}");
        }
    }

    #[test]
    fn names_are_unique_snake_case_and_every_millisecond_value_ends_in_ms() {
        let snake =
            |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        let mut names: Vec<_> = STATS_FIELDS.iter().map(|f| f.name).collect();
        for f in &STATS_FIELDS {
            assert!(snake(f.name), "{}", f.name);
            assert_eq!(
                f.unit.starts_with("ms"),
                f.name.ends_with("_ms"),
                "{}",
                f.name
            );
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), STATS_FIELDS.len());
    }
}
