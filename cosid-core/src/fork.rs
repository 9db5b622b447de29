//! `fork()`: a child never issues on its parent's slot, and never blocks on what it inherited.
//!
//! # The rule
//!
//! 1. **No id from an inherited binding.** Every window binding records the fork generation of
//!    the process that made it ([`crate::Window`]); a generator issues only from a binding made in
//!    its own process. A generator created in the child, before or after the fork, through any
//!    surface, is held by the same check: the check is on the binding, not on the generator.
//! 2. **Nothing inherited is used or dropped.** The parent's keeper, its store connections and
//!    its threads are left untouched in the child (never closed, never joined, never freed):
//!    closing a SQLite connection in a child can disturb the parent's locks, and joining a
//!    thread that does not exist in the child fails.
//! 3. **No lock of ours is held across `fork()`.** The short critical sections a child could
//!    later need (the generator map, the event listeners, every SQLite call) run inside
//!    `gate`; a `pthread_atfork` prepare handler waits until none is running before the fork
//!    proceeds. None of them calls user code, so a fork waits at most for one store call of the
//!    embedded store.
//!
//! # The policy
//!
//! What an inherited runtime does in the child is [`ForkPolicy`] (`cosid.fork` in the
//! configuration): by default it takes a new slot on first use, with a new incarnation and the
//! same configuration, as a connection pool reconnects after a fork.
//!
//! Detection costs no system call: a `pthread_atfork` child handler bumps a process-wide
//! generation counter, and the id path compares it with the binding's in one relaxed load.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;
use std::time::Duration;

static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

/// Threads inside a [`gate`] section right now.
static INSIDE: AtomicUsize = AtomicUsize::new(0);
/// Set by the prepare handler while a fork is about to happen: new sections wait.
static FORKING: AtomicBool = AtomicBool::new(false);

/// What an inherited runtime does in a forked child (`cosid.fork`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForkPolicy {
    /// `new-slot` (the default): on its first use in the child the runtime acquires a new slot
    /// (a new incarnation, the same configuration and store), then issues from it. Generators
    /// obtained before the fork follow it. Needs a store other processes can reach: a `memory:`
    /// store, a store injected in code, or a static slot cannot be shared with the child, so
    /// those refuse as with `fail`.
    #[default]
    NewSlot,
    /// `fail`: every call in the child fails with [`crate::ErrorKind::Forked`]; build a new
    /// runtime there.
    Fail,
}

impl ForkPolicy {
    /// The configuration's spelling.
    pub fn name(self) -> &'static str {
        match self {
            ForkPolicy::NewSlot => "new-slot",
            ForkPolicy::Fail => "fail",
        }
    }

    /// Parses the configuration's spelling.
    pub fn from_name(name: &str) -> Option<ForkPolicy> {
        match name {
            "new-slot" => Some(ForkPolicy::NewSlot),
            "fail" => Some(ForkPolicy::Fail),
            _ => None,
        }
    }
}

extern "C" fn prepare() {
    FORKING.store(true, Ordering::SeqCst);
    // Sections are short and call no user code; a SQLite call is the longest of them.
    while INSIDE.load(Ordering::SeqCst) != 0 {
        std::thread::sleep(Duration::from_micros(50));
    }
}

extern "C" fn in_parent() {
    FORKING.store(false, Ordering::SeqCst);
}

extern "C" fn in_child() {
    // Only the forking thread exists here, and it is inside no section.
    INSIDE.store(0, Ordering::SeqCst);
    FORKING.store(false, Ordering::SeqCst);
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// The current fork generation. The first call registers the `pthread_atfork` handlers, so call
/// this when building a runtime, before any fork that must be detected.
pub fn generation() -> u64 {
    REGISTER.call_once(|| {
        // SAFETY: the handlers only touch atomics and sleep; registering them has no other
        // effect.
        let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(in_parent), Some(in_child)) };
        if let Some(warning) = registration_warning(rc) {
            eprintln!("{warning}");
        }
    });
    GENERATION.load(Ordering::Relaxed)
}

/// What to say when `pthread_atfork` returned `rc`: nothing when it succeeded (0). It fails only
/// on ENOMEM; without the handlers forks go undetected, so that is said on standard error.
fn registration_warning(rc: libc::c_int) -> Option<String> {
    (rc != 0).then(|| format!("cosid: pthread_atfork failed ({rc}); fork detection is off"))
}

/// The current generation, without registering (for the id path, after `generation()` ran).
#[inline]
pub(crate) fn current() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

/// Runs `f` so that no `fork()` happens while it runs: a fork waits until `f` returns, and `f`
/// waits for a fork in progress to finish. For short sections that take a lock a child may
/// need; never around user code (a fork from inside would wait for itself).
pub(crate) fn gate<R>(f: impl FnOnce() -> R) -> R {
    thread_local! {
        /// How deep this thread is inside sections: a nested section is already covered (and
        /// must not wait for a fork that waits for the outer one).
        static DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }
    struct Depth;
    impl Drop for Depth {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get() - 1));
        }
    }
    if DEPTH.with(|d| d.get()) > 0 {
        DEPTH.with(|d| d.set(d.get() + 1));
        let _depth = Depth;
        return f();
    }
    loop {
        while FORKING.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        INSIDE.fetch_add(1, Ordering::SeqCst);
        if !FORKING.load(Ordering::SeqCst) {
            break;
        }
        // A fork started between the check and the increment: let it go first.
        INSIDE.fetch_sub(1, Ordering::SeqCst);
    }
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            INSIDE.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _leave = Leave;
    DEPTH.with(|d| d.set(d.get() + 1));
    let _depth = Depth;
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip() {
        for p in [ForkPolicy::NewSlot, ForkPolicy::Fail] {
            assert_eq!(ForkPolicy::from_name(p.name()), Some(p));
        }
        assert_eq!(ForkPolicy::from_name("relese"), None);
        assert_eq!(ForkPolicy::default(), ForkPolicy::NewSlot);
    }

    #[test]
    fn gate_counts_and_returns() {
        generation();
        assert_eq!(gate(|| 7), 7);
        let r = std::panic::catch_unwind(|| gate(|| panic!("inside")));
        assert!(r.is_err(), "the panic reaches the caller");
        // Nested sections do not wait for themselves.
        assert_eq!(gate(|| gate(|| 8)), 8);
    }

    #[test]
    fn a_registered_handler_is_not_reported_a_failed_one_is() {
        assert_eq!(registration_warning(0), None);
        let warning = registration_warning(libc::ENOMEM).unwrap();
        assert!(
            warning.contains("pthread_atfork failed") && warning.contains("fork detection is off")
        );
    }

    /// A fork that starts while a thread is inside a section waits for that section, so a
    /// section nested in it must not wait for the fork: it runs at once, the outer section
    /// ends, and the fork goes ahead. (A nested section that waited would never run: the fork
    /// waits for the outer one.) The fork's handlers are called directly, as `fork()` would.
    #[test]
    fn a_section_nested_in_one_a_fork_waits_for_runs_at_once() {
        use std::sync::mpsc::channel;
        generation();
        let (inside_tx, inside_rx) = channel();
        let (go_tx, go_rx) = channel::<()>();
        let (done_tx, done_rx) = channel();
        let section = std::thread::spawn(move || {
            gate(|| {
                inside_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                done_tx.send(gate(|| 9)).unwrap();
            })
        });
        inside_rx.recv().unwrap();
        let forker = std::thread::spawn(|| {
            prepare();
            in_parent();
        });
        while !FORKING.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        go_tx.send(()).unwrap();
        let nested = done_rx.recv_timeout(Duration::from_secs(10));
        assert_eq!(
            nested,
            Ok(9),
            "the nested section waited for a fork that waited for it"
        );
        section.join().unwrap();
        forker.join().unwrap();
    }
}
