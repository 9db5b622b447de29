//! `cosid_interrupt` and `cosid_interrupt_clear`: a program's own signal handler ends the waits
//! of cosid calls (the core's `interrupt` module; this file only exports it).

/// Ends every cosid wait of the process within 100 ms, now and until `cosid_interrupt_clear`:
/// `cosid_runtime_new` waiting for a slot (its acquisition, back-off and store calls) and an id
/// call waiting for its window or the next tick (`max-wait`) return `COSID_ERR_INTERRUPTED`.
/// The keeper's renewals and `cosid_runtime_close`'s release are not cut short; calls that do
/// not wait are not affected.
///
/// Async-signal-safe (one atomic store): call it from a `SIGINT` handler, then, outside the
/// handler, close and free what you built and call `cosid_interrupt_clear` before waiting again.
/// Process-wide: it ends the waits of every runtime and thread.
#[no_mangle]
pub extern "C" fn cosid_interrupt() {
    cosid_core::interrupt::request();
}

/// Withdraws `cosid_interrupt`: later waits wait again. Async-signal-safe. Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_interrupt_clear() {
    cosid_core::interrupt::clear();
}
