//! Interrupting the waits of the calling threads: a program's own signal handler (C's SIGINT
//! handler, say) calls [`request`], which only stores to an atomic and so is
//! async-signal-safe; every wait a caller's thread is in, or enters until [`clear`], then ends
//! within [`POLL`] (plus the step it is in: a nap of at most `POLL`) with an error that
//! [`is_interrupted`] tells.
//!
//! The waits that end: building a runtime (the start-up acquisition and its back-off, each store
//! call it makes, the wait for a restart guard's floor) and an id call waiting for its window or
//! the next tick (`max-wait`). The keeper's own thread never ends a wait for it (a renewal is
//! not the caller's wait: cutting it would lose the slot), nor does closing a runtime (its
//! release is bounded by the store's timeout, and must not be cut short). A store call
//! interrupted is left to finish on the store's IO thread, and its outcome is taken as unknown,
//! like a timed-out one.

use crate::error::{Error, ErrorKind, Result};
use crate::Clock;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often an interruptible wait looks at the request: at most this long passes between a
/// [`request`] and the end of a wait (besides the step the wait is in).
pub const POLL: Duration = Duration::from_millis(20);

static REQUESTED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// How many interruptible sections this thread is in.
    static SECTIONS: Cell<u32> = const { Cell::new(0) };
}

/// Makes every interruptible wait of the process end, now and until [`clear`]. Async-signal-safe:
/// one atomic store.
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Withdraws a [`request`]: later waits wait again.
pub fn clear() {
    REQUESTED.store(false, Ordering::SeqCst);
}

/// Whether a [`request`] stands.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// Whether `e` is the error of a wait that a [`request`] ended.
pub fn is_interrupted(e: &Error) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<Interrupted>())
}

/// The marker an interrupted wait's error carries as its source.
#[derive(Debug)]
struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// The error of a wait for `what` that a request ended: kind `Timeout` (the wait ended before
/// its bound), told apart by [`is_interrupted`].
pub(crate) fn error(what: &str) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "{what}: interrupted (an interrupt was requested, and stands until it is cleared: \
             cosid_interrupt_clear in C)"
        ),
    )
    .with_source(Interrupted)
}

/// While the guard lives, this thread's waits end on a [`request`].
pub(crate) struct Section(());

impl Drop for Section {
    fn drop(&mut self) {
        SECTIONS.with(|s| s.set(s.get().saturating_sub(1)));
    }
}

/// Enters an interruptible section on this thread.
pub(crate) fn section() -> Section {
    SECTIONS.with(|s| s.set(s.get() + 1));
    Section(())
}

/// Whether a wait on this thread should end now: a request stands and the thread is in a
/// section.
pub(crate) fn stops_here() -> bool {
    requested() && SECTIONS.with(|s| s.get() > 0)
}

/// `Err` when a wait for `what` on this thread should end now.
pub(crate) fn check(what: &str) -> Result<()> {
    if stops_here() {
        return Err(error(what));
    }
    Ok(())
}

/// Sleeps `d` on `clock` in naps of at most [`POLL`], ending early (`Err`) on a request.
pub(crate) fn sleep(clock: &dyn Clock, d: Duration, what: &str) -> Result<()> {
    let mut left = d;
    loop {
        check(what)?;
        if left.is_zero() {
            return Ok(());
        }
        let nap = left.min(POLL);
        clock.sleep(nap);
        left -= nap;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_section_stops_and_the_error_tells_itself() {
        // The process-wide request is not made here: the other unit tests of this program wait
        // in sections meanwhile (cosid-core/tests/interrupt.rs and the C tests make it).
        let e = error("waiting");
        assert!(is_interrupted(&e), "{e}");
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(!is_interrupted(&Error::new(ErrorKind::Timeout, "late")));
        assert_eq!(SECTIONS.with(Cell::get), 0);
        {
            let _s = section();
            let _t = section();
            assert_eq!(SECTIONS.with(Cell::get), 2);
        }
        assert_eq!(SECTIONS.with(Cell::get), 0);
    }
}
