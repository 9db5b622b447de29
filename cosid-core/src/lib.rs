//! # cosid-core
//!
//! Distributed Snowflake ids `(time, slot, sequence)` in a `u64`, issued by any number of
//! processes on any number of hosts, **unique whatever the clocks do**.
//!
//! Each process leases a slot together with a time window `(floor, ceiling]`, issues timestamps
//! only inside it, and the store keeps successive windows on a slot disjoint with one atomic
//! compare-and-set per change. A clock that jumps, a paused process or a slow network can delay
//! ids; they cannot duplicate them.
//!
//! ## Start here
//!
//! ```
//! use cosid_core::{convert, Runtime};
//!
//! // `memory:NAME` lives in this process only; a fleet names a shared store (below).
//! let rt = Runtime::from_yaml("cosid: {namespace: orders, machine: {lease: {store: 'memory:docs'}}}")?;
//! let id = rt.next()?;
//! let parts = convert::decode(rt.layout(), id)?;
//! assert_eq!(parts.slot, rt.stats().slot);
//! rt.close()?; // generators stop, then the slot is released with the exact last timestamp
//! # Ok::<(), cosid_core::Error>(())
//! ```
//!
//! [`Runtime::embedded_default`] needs no configuration at all: one host, SQLite under
//! `$XDG_STATE_HOME/cosid/slots.db`. [`Config`] documents every key of the YAML/JSON
//! document; [`Runtime::builder`] injects a clock, a store or event listeners.
//!
//! ## The main types
//!
//! | type | what it is |
//! |---|---|
//! | [`Runtime`] | a slot, the keeper that renews its lease, and its generators; [`Runtime::next`] is the call |
//! | [`Generator`] | one sequence of ids ([`Runtime::generator`] for named ones): `next`, `try_next`, `next_batch`, `try_reserve` |
//! | [`Layout`] | how the 63 bits split into time, slot and sequence; [`convert`] turns ids into text and parts |
//! | [`Config`] | the configuration document, parsed and checked |
//! | [`Event`] | what the runtime tells listeners ([`RuntimeBuilder::on_event`]): a slot acquired, lost or released, a renewal that failed, a clock skew, a window that starts ahead |
//! | [`Error`] / [`ErrorKind`] | every failure, with a kind to match on and a text naming the value and the fix |
//! | [`store`] | the stores and their URLs; [`store::SlotStore`] for a store of your own |
//!
//! `Runtime` is a handle: `Clone` copies one `Arc`, and every clone issues from the same slot and
//! generators. Share it between threads freely; [`Runtime::close`] (or dropping the last clone)
//! releases the slot.
//!
//! ## Stores and features
//!
//! | feature | store URLs | default |
//! |---|---|---|
//! | `sqlite` | `sqlite:///path/slots.db` (one host) | **on** |
//! | `redis` | `redis://`, `rediss://`, `redis+sentinel://`, `redis+cluster://` (and TLS forms) | off |
//! | `postgres` | `postgres://`, `postgresql://` | off |
//! | `mysql` | `mysql://`, `mariadb://` | off |
//! | `etcd` | `etcd://`, `etcds://` | off |
//!
//! `memory:NAME` is always there (tests, one process). Each network store brings its client, a
//! small tokio runtime of its own and rustls; none of them appears in the public API. Enable
//! what the fleet uses:
//!
//! ```toml
//! [dependencies]
//! cosid-core = { version = "0.1", features = ["redis"] }
//! ```
//!
//! A store URL whose feature is off is refused with an error that says so. The repository's
//! `docs/` folder has the protocol (`protocol.md`), how each store is set up and what it
//! guarantees (`stores.md`), the configuration reference and the reliability record.

#![warn(missing_docs)]

pub mod bounds;
pub mod clock;
pub mod config;
pub mod convert;
pub mod error;
pub mod fork;
pub mod generator;
pub mod interrupt;
pub mod layout;
pub mod lease;
// Used by the network stores' URL and record parsers only.
mod percent;
pub mod runtime;
pub mod static_slot;
pub mod store;
mod sync;
pub mod time;
pub mod window;

// The loom model of the generator racing the keeper (see the module's docs for how to run it).
#[cfg(all(test, loom))]
mod loom_model;

pub use clock::{Clock, ManualClock, SharedClock, SystemClock};
pub use config::Config;
pub use error::{Error, ErrorKind, Result};
pub use generator::{Batch, Generator, Reservation, TryNext, WaitReason};
pub use layout::{IdParts, Layout, TimeUnit};
pub use lease::{Event, Stats};
pub use runtime::{Runtime, RuntimeBuilder};
pub use window::{Binding, Window, WindowStatus};

/// The README's Rust examples, compiled and run as doctests.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
