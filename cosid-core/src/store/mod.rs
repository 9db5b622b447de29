//! Slot stores: where leases live.
//!
//! A store implements five primitives: read the namespace record, compare-and-set it, read every
//! slot record (with the store's clock), read one slot record (with the store's clock), and
//! compare-and-set one slot record. Three more have provided forms that a store overrides when it
//! can do better: a compare-and-set that also reads the store's clock, a candidate view
//! (`candidates`), the part of a namespace an acquisition needs, and a compare-and-set over
//! several candidate slots that writes the first still as it was read (`cas_first_slot`). The
//! lease protocol (`lease::client`) is written once on top of them, and the state changes
//! themselves once in `lease::rules`, so every store keeps the same rule: **one atomic
//! compare-and-set per change**.
//!
//! What a store must guarantee for uniqueness to hold: a compare-and-set that reported success is
//! durable and visible to every later read (linearizable), and a version never repeats for one
//! key. `docs/stores.md` says how each engine is set up to keep that.
//!
//! Store clients (rusqlite, redis, tokio-postgres, the etcd gateway client, mysql_async) never appear in this
//! trait or anywhere in the public API.

use crate::error::{Error, Result};
use crate::lease::{NamespaceRecord, SlotRecord, Snapshot, Versioned};
use std::fmt;
use std::sync::Arc;

#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "etcd",
    feature = "mysql"
))]
mod blocking;
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "etcd",
    feature = "mysql"
))]
mod ca_file;
#[cfg(any(feature = "redis", feature = "etcd"))]
mod codec;
#[cfg(feature = "etcd")]
pub mod etcd;
#[doc(hidden)]
pub mod hooked;
pub mod memory;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "postgres")]
mod postgres_reply;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod url;
mod view;

pub use url::StoreUrl;
pub use view::{CandidateAsk, CandidateView};

/// The record codec of the stores that keep records as text (Redis, etcd), for the fuzz targets
/// and their proptest drivers. Not a stable API.
#[cfg(any(feature = "redis", feature = "etcd"))]
#[doc(hidden)]
pub mod fuzzing {
    use crate::error::Result;
    use crate::lease::{NamespaceRecord, SlotRecord};

    /// Reads a slot record as a store would (an error for anything else than a record).
    pub fn decode_slot(text: &[u8]) -> Result<SlotRecord> {
        super::codec::decode_slot(text, "the input")
    }

    /// Writes a slot record as a store would.
    pub fn encode_slot(rec: &SlotRecord) -> String {
        super::codec::encode_slot(rec)
    }

    /// Reads a namespace record as a store would (an error for anything else than a record).
    pub fn decode_namespace(text: &[u8]) -> Result<NamespaceRecord> {
        super::codec::decode_namespace(text, "the input")
    }

    /// Writes a namespace record as a store would.
    pub fn encode_namespace(rec: &NamespaceRecord) -> String {
        super::codec::encode_namespace(rec)
    }
}

/// A namespace snapshot: its record (if any) and every slot record, read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceSnapshot {
    /// The namespace record with its version, `None` if the namespace was never created.
    pub namespace: Option<Versioned<NamespaceRecord>>,
    /// The slot records and the store clock.
    pub slots: Snapshot,
}

/// The primitives every store provides. Implementations are thread-safe and blocking (network
/// stores run their own small async runtime inside).
pub trait SlotStore: Send + Sync + fmt::Debug {
    /// The store as a URL with any password removed, for messages and logs.
    fn describe(&self) -> String;

    /// The namespace record and every slot record, with the store's clock, read at one moment.
    fn snapshot(&self, namespace: &str) -> Result<NamespaceSnapshot>;

    /// Writes `write.record` as the namespace record if its version is still `write.expected`
    /// (`None`: no record yet). Returns the new version, or `None` when the version had changed and nothing was written.
    fn cas_namespace(&self, namespace: &str, write: NamespaceWrite<'_>) -> Result<Option<u64>>;

    /// One slot record (`None` if the slot has none) and the store's clock.
    fn read_slot(&self, namespace: &str, slot: u32) -> Result<SlotRead>;

    /// Writes `write.record` (for slot `write.record.slot`) if the slot's version is still
    /// `write.expected` (`None`: no record yet). Returns the new version, or `None` when the version had changed
    /// and nothing was written. This is the one atomic step of every lease change.
    fn cas_slot(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<u64>>;

    /// Writes the first of `writes` whose slot's version is still the one it expects, and
    /// returns its index in `writes` and its new version; `None` when no version matched and
    /// nothing was written. Exactly [`SlotStore::cas_slot`] on each in order, stopping at the
    /// first that wrote: every write is one atomic compare-and-set of one slot, judged by the
    /// rules on its own, so the candidates a starter offers change what it tries, never what a
    /// write may do (`docs/protocol.md` section 4, "Several candidates in one call"). The
    /// writes need not be atomic together: a lost reply before a later one is the same as a
    /// lost reply of a single compare-and-set.
    ///
    /// Provided: that loop, one compare-and-set after another. Redis tries them all in one
    /// script and etcd in one transaction, so a starter that lost a race for its first choice
    /// takes its next in the same round trip instead of reading the namespace again.
    fn cas_first_slot(
        &self,
        namespace: &str,
        writes: &[SlotWrite<'_>],
    ) -> Result<Option<(usize, u64)>> {
        cas_one_by_one(self, namespace, writes)
    }

    /// [`SlotStore::cas_slot`], also returning the store's clock (the clock `read_slot` and
    /// `snapshot` report), read in the same round trip, when the store can: Redis's `TIME` in
    /// the script, PostgreSQL's `clock_timestamp()` in `RETURNING`, the host clock for the
    /// stores whose clock it is. The lease keeper renews with this compare-and-set alone (no
    /// read first) and takes the clock for its next estimate of the store's time and for its
    /// clock-skew check (`docs/protocol.md` section 6).
    ///
    /// Provided: calls `cas_slot`, then reports [`SlotStore::host_clock_ms`] (by default no
    /// clock). A store that reports no clock still gets renewals and releases in one round trip;
    /// the keeper then reads the slot before a renewal about once per ttl to see the store's
    /// clock again.
    fn cas_slot_timed(&self, namespace: &str, write: SlotWrite<'_>) -> Result<Option<Written>> {
        let written = self.cas_slot(namespace, write)?;
        let store_now = self.host_clock_ms();
        Ok(written.map(|version| Written { version, store_now }))
    }

    /// The store's clock, for a store whose clock is read on this host (the host's own, or one
    /// the store is given), as its reads report it. The provided [`SlotStore::cas_slot_timed`]
    /// reads it once the write has returned, so that these stores need not write that method
    /// out again each with only its clock changed.
    ///
    /// Provided: `None`, the store's clock is not this host's.
    fn host_clock_ms(&self) -> Option<i64> {
        None
    }

    /// Enough of the namespace to choose a slot: its record, the store's clock, the numbers of
    /// the slots live leases hold, and whole records only for the slots `ask` wants
    /// ([`CandidateView`] says exactly which). What an acquisition reads, so that its read
    /// does not grow with the slots in use on a store that can filter on its side.
    ///
    /// Provided: the view of a whole [`SlotStore::snapshot`] (every record, every slot
    /// covered), which is always a valid answer. Redis (a script), PostgreSQL and SQLite (a
    /// query) filter on their side; etcd cannot filter values on the server, and on MySQL and
    /// MariaDB a filtering query cost the server more than the bytes it saved
    /// (BENCHMARKS.md, "Start-up storms").
    fn candidates(&self, namespace: &str, ask: &CandidateAsk<'_>) -> Result<CandidateView> {
        let _ = ask;
        Ok(CandidateView::of_snapshot(self.snapshot(namespace)?))
    }

    /// The latest moment (store clock, ms) at or before which this store may have lost writes
    /// it acknowledged for `namespace`, while that is recent enough to matter: a server's last
    /// start (a restart without its data, or from an older snapshot, a crash on Redis's RDB
    /// persistence), or, for SQLite, now when the file is not the one live holders use. `None`:
    /// nothing lost, as far as the store can tell.
    ///
    /// The restart guard (`docs/protocol.md` section 7) starts every acquisition at least
    /// ttl + tolerance past it, above every ceiling the lost writes could hold.
    ///
    /// Provided: `None`, for stores that cannot tell (etcd: [`SlotStore::may_forget_namespaces`]
    /// covers its wipes) and whose data cannot outlive their users while holders live
    /// (memory). Redis, PostgreSQL and MySQL report their server's start unless their URL says
    /// `restart-guard=off`; SQLite reports a file deleted or replaced under live holders. The
    /// latest start the server's answer allows is reported (an uptime in whole seconds is
    /// rounded down), so the guard errs late, never early.
    fn started_at(&self, namespace: &str) -> Result<Option<i64>> {
        let _ = namespace;
        Ok(None)
    }

    /// Whether a namespace missing from this store may be one it lost: a network server whose
    /// data a `FLUSHALL`, a `DROP TABLE`, a `TRUNCATE` or a wiped data directory can take while
    /// holders of its slots still issue. The restart guard then starts every window of a
    /// namespace it creates ttl + tolerance after the creation, above every ceiling a lost
    /// record could hold (`docs/protocol.md` section 7): the first start of a namespace waits
    /// that long, once.
    ///
    /// Provided: `false`, for the stores whose new namespaces are new: memory (nothing
    /// outlives the process) and SQLite (the embedded default, whose first start must not
    /// wait; a file lost under live holders is reported by [`SlotStore::started_at`]). Every
    /// network store says `true` unless its URL says `restart-guard=off` (a server known to be
    /// new, such as a test server).
    fn may_forget_namespaces(&self) -> bool {
        false
    }

    /// Whether [`SlotStore::delete_slot`] deletes (`cosid namespace delete` asks before it
    /// writes anything, so a store that cannot is refused with nothing changed).
    ///
    /// Provided: `false`.
    fn deletes_slots(&self) -> bool {
        false
    }

    /// Deletes slot `slot`'s record if its version is still `expected`, in one atomic step:
    /// `true` when it deleted it, `false` when the version had changed (an acquisition or a
    /// renewal wrote it since it was read) and nothing was deleted. Only
    /// [`LeaseClient::delete_namespace`](crate::lease::LeaseClient::delete_namespace) calls it,
    /// after the namespace record became a tombstone whose not-before lies at or above every
    /// ceiling the deleted records granted, so a record this deletes takes no floor with it
    /// (`docs/stores.md`, "Deleting a namespace").
    ///
    /// Provided: refused, naming the store (see [`SlotStore::deletes_slots`]).
    fn delete_slot(&self, namespace: &str, slot: u32, expected: u64) -> Result<bool> {
        let _ = (namespace, slot, expected);
        Err(Error::config(format!(
            "{} cannot delete slot records yet, so `cosid namespace delete` is not supported \
             on this store; leave the namespace as it is (an unused namespace costs only its \
             records)",
            self.describe()
        )))
    }
}

/// One compare-and-set of one record: write `record` if the store's version of it is still
/// `expected` (`None`: the store has no record yet). Every change a client makes to a store is
/// one of these, a [`NamespaceWrite`] of the namespace record or a [`SlotWrite`] of slot
/// `record.slot`'s, so the trait takes the pair as one value wherever it writes.
#[derive(Debug, PartialEq, Eq)]
pub struct Cas<'a, R> {
    /// The version the record must still have.
    pub expected: Option<u64>,
    /// The record to write.
    pub record: &'a R,
}

impl<'a, R> Cas<'a, R> {
    /// `record`, if the store's version is still `expected`.
    pub fn new(expected: Option<u64>, record: &'a R) -> Self {
        Cas { expected, record }
    }
}

// By hand: a derive would ask `R: Clone`, and the pair only borrows its record.
impl<R> Clone for Cas<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Cas<'_, R> {}

/// A compare-and-set of a slot record ([`SlotStore::cas_slot`], [`SlotStore::cas_first_slot`]).
pub type SlotWrite<'a> = Cas<'a, SlotRecord>;

/// A compare-and-set of the namespace record ([`SlotStore::cas_namespace`]).
pub type NamespaceWrite<'a> = Cas<'a, NamespaceRecord>;

/// What [`SlotStore::read_slot`] returns: the store's clock (ms) and the slot's record with its
/// version (`None`: the slot has no record).
pub type SlotRead = (i64, Option<Versioned<SlotRecord>>);

/// [`SlotStore::cas_first_slot`] as one [`SlotStore::cas_slot`] after another, stopping at the
/// first that wrote: the trait's provided form, and what a [`hooked::Hooked`] store does for a
/// hook that sees each write.
fn cas_one_by_one<S: SlotStore + ?Sized>(
    store: &S,
    namespace: &str,
    writes: &[SlotWrite<'_>],
) -> Result<Option<(usize, u64)>> {
    for (i, &write) in writes.iter().enumerate() {
        if let Some(version) = store.cas_slot(namespace, write)? {
            return Ok(Some((i, version)));
        }
    }
    Ok(None)
}

/// What [`SlotStore::cas_slot_timed`] returns when it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The record's new version.
    pub version: u64,
    /// The store's clock (ms), read in the same round trip; `None` when the store cannot.
    pub store_now: Option<i64>,
}

/// A namespace record from the columns a SQL store keeps it in, checked: `Err` names the value
/// that does not fit (a limit outside `u32`, a layout that does not parse).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn namespace_from_columns(
    limit: i64,
    tolerance_ms: i64,
    not_before_ms: i64,
    layout: Option<String>,
    ttl_ms: Option<i64>,
) -> std::result::Result<NamespaceRecord, String> {
    let layout = match layout {
        Some(text) => Some(
            crate::lease::IdLayout::decode(&text)
                .ok_or_else(|| format!("namespace layout '{text}'"))?,
        ),
        None => None,
    };
    Ok(NamespaceRecord {
        limit: u32::try_from(limit).map_err(|_| format!("namespace limit {limit}"))?,
        tolerance_ms,
        not_before_ms,
        layout,
        ttl_ms,
    })
}

/// A namespace snapshot from the rows of a SQL store's snapshot query: the store's clock and
/// the namespace record (`head`, read from the first row), and the slot record, if any, that
/// each row carries, read by `slot_of`. PostgreSQL and MySQL share it: their queries differ
/// only in the column a row's slot record starts at.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn snapshot_of_rows<R>(
    head: (i64, Option<Versioned<NamespaceRecord>>),
    rows: &[R],
    slot_of: impl Fn(&R) -> Result<Option<Versioned<SlotRecord>>>,
) -> Result<NamespaceSnapshot> {
    let (store_now, namespace) = head;
    let mut slots = Vec::with_capacity(rows.len());
    for row in rows {
        slots.extend(slot_of(row)?);
    }
    Ok(NamespaceSnapshot {
        namespace,
        slots: Snapshot { store_now, slots },
    })
}

/// A shared store.
pub type SharedStore = Arc<dyn SlotStore>;

/// Opens the store a URL names: `memory:`, `memory:NAME`, `sqlite://PATH`, and, when built with
/// their features, `redis://`, `rediss://`, `redis+sentinel://`, `rediss+sentinel://`,
/// `redis+cluster://`, `rediss+cluster://`,
/// `postgres://`, `postgresql://`, `etcd://`, `etcds://`, `mysql://`, `mariadb://`.
pub fn open(url: &str) -> Result<SharedStore> {
    let parsed = StoreUrl::parse(url)?;
    open_parsed(&parsed)
}

/// A store opened with a host clock of the caller's choice (memory and SQLite use the host
/// clock as the store clock; tests and simulations pass a manual one).
pub fn open_with_clock(url: &str, clock: crate::clock::SharedClock) -> Result<SharedStore> {
    let parsed = StoreUrl::parse(url)?;
    match &parsed {
        StoreUrl::Memory { name } => Ok(memory::MemoryStore::named_with_clock(name, clock)),
        #[cfg(feature = "sqlite")]
        StoreUrl::Sqlite { path } => {
            Ok(Arc::new(sqlite::SqliteStore::open_with_clock(path, clock)?))
        }
        _ => open_parsed(&parsed),
    }
}

/// The error for a store this build was compiled without. Every package of cosid names a store's
/// feature the same way (`cosid-core`, the command, libcosid and both bindings), and all but
/// `cosid-core` build every store by default: the user who meets this error is almost always a
/// Rust user whose `Cargo.toml` names `cosid-core` with its defaults (SQLite only).
#[cfg_attr(
    all(
        feature = "sqlite",
        feature = "redis",
        feature = "postgres",
        feature = "etcd",
        feature = "mysql"
    ),
    allow(dead_code)
)]
fn missing_feature(url: &StoreUrl) -> Error {
    let feature = url.feature();
    Error::config(format!(
        "store '{}' needs the '{feature}' feature, which this build of cosid does not have; \
         enable it where cosid-core is a dependency (Cargo.toml: `cosid-core = {{ version = \
         \"0.1\", features = [\"{feature}\"] }}`), or build the command, libcosid or a binding \
         with its default features (every store) or `--features {feature}`",
        url.redacted(),
    ))
}

fn open_parsed(url: &StoreUrl) -> Result<SharedStore> {
    url.check_params()?;
    match url {
        StoreUrl::Memory { name } => Ok(memory::MemoryStore::named(name)),
        #[cfg(feature = "sqlite")]
        StoreUrl::Sqlite { path } => Ok(Arc::new(sqlite::SqliteStore::open(path)?)),
        #[cfg(feature = "redis")]
        StoreUrl::Redis { .. } => Ok(redis::RedisStore::open(url)?),
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres { .. } => Ok(postgres::PostgresStore::open(url)?),
        #[cfg(feature = "etcd")]
        StoreUrl::Etcd { .. } => Ok(etcd::EtcdStore::open(url)?),
        #[cfg(feature = "mysql")]
        StoreUrl::Mysql { .. } => Ok(mysql::MysqlStore::open(url)?),
        // Unreachable when every store's feature is on.
        #[allow(unreachable_patterns)]
        other => Err(missing_feature(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_built_without_says_which_feature_and_where_to_enable_it() {
        for (url, feature) in [
            ("redis://127.0.0.1:1", "redis"),
            ("postgres://u:secret@db/x", "postgres"),
            ("mariadb://db/x", "mysql"),
            ("etcds://e1:2379", "etcd"),
        ] {
            let text = missing_feature(&StoreUrl::parse(url).unwrap()).to_string();
            assert!(
                text.contains(&format!("features = [\"{feature}\"]")),
                "{url}: {text}"
            );
            assert!(text.contains("Cargo.toml"), "{url}: {text}");
            assert!(!text.contains("secret"), "{url}: {text}");
        }
    }
}
