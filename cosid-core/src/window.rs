//! The issuance window: the binding `(slot, floor, ceiling)` that every generator of a runtime
//! checks each id against, plus its status (active, lost, closed).
//!
//! Invariants (the reason this module exists):
//! - A reader never sees the slot of one binding with the floor of another: `slot` and `floor`
//!   change together under a sequence lock, and readers retry a torn read.
//! - Within one binding the ceiling only grows, and it only ever holds a value the store has
//!   already granted (the keeper extends it after a successful renewal). A reader holding a stale,
//!   smaller ceiling is therefore conservative, never unsafe.
//! - There is one writer at a time (the runtime's keeper, under its own lock). Readers never
//!   block and never write.
//! - A binding belongs to the process that made it: it records that process's fork generation
//!   (`crate::fork`), and generators issue only from a binding of their own process. A forked
//!   child therefore never issues on the parent's slot, whatever object it issues through. A
//!   child that finds a write in progress (the parent's keeper was writing at the moment of
//!   `fork()`, and that thread does not exist in the child) gets the binding as foreign instead
//!   of waiting for a writer that will never finish.

use crate::sync::{fence, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Where the window stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WindowStatus {
    /// No slot yet (the keeper is acquiring one). Generators wait.
    Unbound = 0,
    /// Bound to a slot with a window; generators issue inside it.
    Active = 1,
    /// The lease was lost; generators fail fast until the keeper binds a new slot.
    Lost = 2,
    /// Shut down for good.
    Closed = 3,
}

impl WindowStatus {
    fn from_u8(v: u8) -> WindowStatus {
        match v {
            1 => WindowStatus::Active,
            2 => WindowStatus::Lost,
            3 => WindowStatus::Closed,
            _ => WindowStatus::Unbound,
        }
    }
}

/// A consistent snapshot of the window, as a generator reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// The leased slot.
    pub slot: u32,
    /// Excluded lower bound, ms: timestamps issued are `> floor`.
    pub floor: i64,
    /// Included upper bound, ms: timestamps issued are `<= ceiling`.
    pub ceiling: i64,
    /// Whether ids may be issued.
    pub status: WindowStatus,
    /// Bumped on every rebinding and status change (not on an extension of the ceiling); lets
    /// observers tell bindings apart.
    pub generation: u64,
    /// The fork generation of the process that made this binding (`crate::fork`): a binding
    /// of another process is never issued from.
    pub process: u64,
}

/// The shared window. Thread-safe: any number of readers, one writer at a time.
///
/// Only this crate writes it (the lease keeper, a static slot, the fork handling): the writer
/// methods are crate-private, so no caller can widen a window the store did not grant. Outside
/// the crate a window is made bound once ([`Window::bound`]) or unbound ([`Window::new`]) and
/// then only read.
#[derive(Debug)]
pub struct Window {
    /// Sequence lock: odd while a rebinding is being written.
    seq: AtomicU64,
    slot: AtomicU32,
    floor: AtomicI64,
    ceiling: AtomicI64,
    status: AtomicU8,
    /// The fork generation of the process that wrote the current binding.
    process: AtomicU64,
    /// Under loom only: held by the writer for the whole write, so that a reader that finds a
    /// write in progress blocks on it instead of spinning. Loom cannot explore two readers
    /// spinning at once (each yield lets it switch freely between them, an unbounded path);
    /// the seqlock's loads, fences and retries are still modelled as they are.
    #[cfg(loom)]
    writing: loom::sync::Mutex<()>,
}

impl Default for Window {
    fn default() -> Self {
        Window::new()
    }
}

impl Window {
    /// An unbound window.
    pub fn new() -> Self {
        Window {
            seq: AtomicU64::new(0),
            slot: AtomicU32::new(0),
            floor: AtomicI64::new(i64::MAX),
            ceiling: AtomicI64::new(i64::MIN),
            status: AtomicU8::new(WindowStatus::Unbound as u8),
            process: AtomicU64::new(crate::fork::generation()),
            #[cfg(loom)]
            writing: loom::sync::Mutex::new(()),
        }
    }

    /// A window bound to `(slot, floor, ceiling]` for good: nothing extends or revokes it.
    /// For benchmarks, tests and a [`crate::Generator`] over a range you own by other means;
    /// uniqueness across processes is then yours to keep.
    pub fn bound(slot: u32, floor: i64, ceiling: i64) -> Self {
        let w = Window::new();
        w.rebind(slot, floor, ceiling);
        w
    }

    /// A consistent snapshot. Lock-free; retries only while a rebinding is in progress.
    #[inline]
    pub fn read(&self) -> Binding {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let slot = self.slot.load(Ordering::Relaxed);
                let floor = self.floor.load(Ordering::Relaxed);
                let ceiling = self.ceiling.load(Ordering::Relaxed);
                let status = self.status.load(Ordering::Relaxed);
                let process = self.process.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s1 {
                    return Binding {
                        slot,
                        floor,
                        ceiling,
                        status: WindowStatus::from_u8(status),
                        generation: s1 / 2,
                        process,
                    };
                }
            } else if let Some(foreign) = self.foreign_write_in_progress() {
                return foreign;
            }
            self.wait_for_writer();
        }
    }

    /// Binds a new slot and window and makes it active. Single writer.
    pub(crate) fn rebind(&self, slot: u32, floor: i64, ceiling: i64) {
        self.write(|w| {
            w.slot.store(slot, Ordering::Relaxed);
            w.floor.store(floor, Ordering::Relaxed);
            w.ceiling.store(ceiling, Ordering::Relaxed);
            w.status
                .store(WindowStatus::Active as u8, Ordering::Relaxed);
            w.process.store(crate::fork::current(), Ordering::Relaxed);
        });
    }

    /// In a forked child, before its own keeper binds this window: ends a write the parent's
    /// keeper had in progress at the moment of `fork()` (its thread does not exist here), so
    /// that readers stop treating the window as being written. The binding stays the parent's
    /// (foreign) until the child's keeper calls [`Window::rebind`].
    pub(crate) fn take_over_in_child(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        if s & 1 == 1 {
            self.seq.store(s + 1, Ordering::Release);
        }
    }

    /// A write is in progress: if it is a dead parent's (this process is a fork child of the
    /// writer), the binding is foreign; say so instead of waiting for ever.
    #[cold]
    fn foreign_write_in_progress(&self) -> Option<Binding> {
        let process = self.process.load(Ordering::Relaxed);
        (process != crate::fork::current()).then_some(Binding {
            slot: 0,
            floor: i64::MAX,
            ceiling: i64::MIN,
            status: WindowStatus::Unbound,
            generation: 0,
            process,
        })
    }

    /// Raises the ceiling of the current binding to `ceiling` (never lowers it). Single writer.
    /// Call only with a ceiling the store has granted.
    pub(crate) fn extend(&self, ceiling: i64) {
        self.ceiling.fetch_max(ceiling, Ordering::Release);
    }

    /// Marks the current binding lost (generators fail fast) or closed. Single writer.
    pub(crate) fn set_status(&self, status: WindowStatus) {
        self.write(|w| w.status.store(status as u8, Ordering::Relaxed));
    }

    fn write(&self, f: impl FnOnce(&Self)) {
        #[cfg(loom)]
        let _writing = self.writing.lock().unwrap();
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0, "two writers on one window");
        self.seq.store(s + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        f(self);
        self.seq.store(s + 2, Ordering::Release);
    }
}

impl Window {
    /// A read saw a write in progress: wait a moment before retrying.
    #[inline]
    fn wait_for_writer(&self) {
        #[cfg(loom)]
        drop(self.writing.lock().unwrap());
        #[cfg(not(loom))]
        std::hint::spin_loop();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rebind_extend_and_status() {
        let w = Window::new();
        assert_eq!(w.read().status, WindowStatus::Unbound);
        w.rebind(3, 100, 200);
        let b = w.read();
        assert_eq!(
            (b.slot, b.floor, b.ceiling, b.status),
            (3, 100, 200, WindowStatus::Active)
        );
        w.extend(150);
        assert_eq!(w.read().ceiling, 200, "a ceiling never goes down");
        w.extend(250);
        assert_eq!(w.read().ceiling, 250);
        w.set_status(WindowStatus::Lost);
        assert_eq!(w.read().status, WindowStatus::Lost);
        let g = w.read().generation;
        w.rebind(4, 250, 300);
        assert!(w.read().generation > g);
        assert_eq!(w.read().slot, 4);
    }

    #[test]
    fn the_generation_counts_rebindings_and_status_changes_not_extensions() {
        let w = Window::new();
        assert_eq!(w.read().generation, 0);
        w.rebind(1, 10, 20);
        assert_eq!(w.read().generation, 1);
        w.extend(30); // one atomic store: readers need no sequence for it
        assert_eq!(w.read().generation, 1);
        w.set_status(WindowStatus::Lost);
        assert_eq!(w.read().generation, 2);
    }

    #[test]
    fn a_child_ends_the_write_a_fork_interrupted_and_leaves_a_finished_one_alone() {
        let w = Window::bound(2, 10, 20);
        let finished = w.seq.load(Ordering::Relaxed);
        w.take_over_in_child();
        assert_eq!(
            w.seq.load(Ordering::Relaxed),
            finished,
            "no write was in progress"
        );
        // A write in progress (odd sequence), as the parent's keeper left it at the fork.
        w.seq.store(finished + 1, Ordering::Relaxed);
        w.take_over_in_child();
        let seq = w.seq.load(Ordering::Relaxed);
        assert_eq!(seq, finished + 2, "the interrupted write is ended");
        let b = w.read();
        assert_eq!((b.slot, b.floor, b.ceiling), (2, 10, 20));
        // From the start (sequence 0) too.
        let fresh = Window::new();
        fresh.take_over_in_child();
        assert_eq!(fresh.seq.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_write_marks_the_window_as_being_written_while_it_runs() {
        let w = Window::new();
        let mut during = None;
        w.write(|w| during = Some(w.seq.load(Ordering::Relaxed)));
        assert_eq!(during.map(|s| s & 1), Some(1), "odd while writing");
        assert_eq!(w.seq.load(Ordering::Relaxed), 2, "even once written");
    }

    #[test]
    fn a_reader_waits_for_a_write_of_its_own_process_to_finish() {
        use std::sync::Arc;
        let w = Arc::new(Window::bound(1, 10, 20));
        let s = w.seq.load(Ordering::Relaxed);
        // A writer of this process half-way through a rebinding to slot 2.
        w.seq.store(s + 1, Ordering::Relaxed);
        let writer = std::thread::spawn({
            let w = w.clone();
            move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                w.slot.store(2, Ordering::Relaxed);
                w.floor.store(30, Ordering::Relaxed);
                w.ceiling.store(40, Ordering::Relaxed);
                w.seq.store(s + 2, Ordering::Release);
            }
        });
        let b = w.read();
        writer.join().unwrap();
        assert_eq!(
            (b.slot, b.floor, b.ceiling),
            (2, 30, 40),
            "waited for the write"
        );
        assert_eq!(b.status, WindowStatus::Active);
    }

    #[test]
    fn a_write_left_in_progress_by_another_process_reads_as_foreign() {
        let w = Window::bound(1, 10, 20);
        let s = w.seq.load(Ordering::Relaxed);
        // The parent's keeper was writing when the fork happened: its generation, not ours.
        let parent = crate::fork::current().wrapping_add(1);
        w.process.store(parent, Ordering::Relaxed);
        w.seq.store(s + 1, Ordering::Relaxed);
        let b = w.read();
        assert_eq!(b.status, WindowStatus::Unbound, "never issued from");
        assert_eq!(b.process, parent);
        assert!(b.floor > b.ceiling, "an empty window");
    }

    #[test]
    fn readers_never_see_a_torn_binding() {
        use std::sync::atomic::{AtomicBool, AtomicU64};
        use std::sync::Arc;
        // Each binding has floor = slot * 1000; a torn read would break that relation.
        let w = Arc::new(Window::bound(0, 0, 10));
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (w, stop, reads) = (w.clone(), stop.clone(), reads.clone());
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let b = w.read();
                        assert_eq!(b.floor, b.slot as i64 * 1000);
                        reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let mut i = 0u32;
        while i < 20_000 || reads.load(std::sync::atomic::Ordering::Relaxed) < 100_000 {
            i += 1;
            w.rebind(
                i % 1024,
                (i % 1024) as i64 * 1000,
                (i % 1024) as i64 * 1000 + 10,
            );
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    }
}
