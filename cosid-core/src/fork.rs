//! Fork detection without a system call on the id path.
//!
//! A `pthread_atfork` child handler bumps a process-wide generation counter. A runtime records
//! the generation it was built in; the generator compares it with one relaxed load per id. A
//! child of a fork therefore sees a different generation and refuses to issue with the
//! parent's slot (the parent still holds it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

extern "C" fn in_child_after_fork() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// The current fork generation. The first call registers the `pthread_atfork` handler, so call
/// this when building a runtime, before any fork that must be detected.
pub fn generation() -> u64 {
    REGISTER.call_once(|| {
        // SAFETY: registering a handler that only touches an atomic is async-signal-safe.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child_after_fork)) };
        // pthread_atfork fails only on ENOMEM; without the handler forks go undetected, so say it.
        if rc != 0 {
            eprintln!("cosid: pthread_atfork failed ({rc}); fork detection is off");
        }
    });
    GENERATION.load(Ordering::Relaxed)
}

/// The current generation, without registering (for the id path, after `generation()` ran).
#[inline]
pub(crate) fn current() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}
