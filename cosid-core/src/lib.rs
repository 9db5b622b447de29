//! # cosid-core
//!
//! Distributed Snowflake ids `(time, slot, sequence)`, unique whatever the clocks do.
//!
//! Each holder issues timestamps only inside its leased window `(floor, ceiling]` on its slot,
//! and the store keeps successive windows on a slot disjoint with one atomic compare-and-set per
//! change. See `ARCHITECTURE.md` at the repository root for the map.

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
