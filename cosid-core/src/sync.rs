//! The atomics the generator and window use, swapped for loom's under `--cfg loom` so the
//! lock-free paths can be model-checked (`RUSTFLAGS="--cfg loom" cargo test -p cosid-core --lib loom_model`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
