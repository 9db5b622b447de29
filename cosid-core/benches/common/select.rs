//! What the store benchmarks share besides the counting wrapper (`stores` and `storm` include
//! this file): their lease terms and the `COSID_BENCH_STORES` filter.

use cosid_core::lease::Terms;

/// Leases that outlive any run: no lease of a benchmark expires while it is measured.
pub const TERMS: Terms = Terms {
    ttl_ms: 3_600_000,
    tolerance_ms: 1_000,
};

/// Whether to measure the store `name`: `COSID_BENCH_STORES` (comma-separated names) is not
/// set, or names it.
pub fn wanted(name: &str) -> bool {
    std::env::var("COSID_BENCH_STORES")
        .ok()
        .as_deref()
        .is_none_or(|w| w.split(',').any(|n| n.trim() == name))
}
