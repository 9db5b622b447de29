//! The lock-free Snowflake generator.
//!
//! One id path: clock -> window check -> atomic state -> compose.
//!
//! The generator's whole state is one atomic word: the last issued `(timestamp, sequence)`
//! packed as `timestamp << sequence_bits | sequence`, plus two flag bits (`EMPTY` before the
//! first id, `CLOSED` after shutdown). An id is issued by one compare-and-set that moves the
//! word strictly forward, so:
//!
//! - **issued `(timestamp, sequence)` pairs strictly increase** across all threads of one
//!   generator (each successful CAS moves the word forward, and two CASes never both succeed from
//!   the same value);
//! - **every id lies in its binding's window**: the candidate's unit start is checked against
//!   `floor < start <= ceiling` of a consistent window snapshot before the CAS; the ceiling only
//!   holds values the store granted, so a snapshot that went stale between the check and the CAS
//!   is still inside a window that was granted to this holder;
//! - **nothing is issued after close**: closing sets `CLOSED` with one `fetch_or`, which fails
//!   every CAS still in flight and returns the exact last issued timestamp for the release.
//!
//! - **nothing is issued on another process's binding**: a forked child sees the parent's
//!   binding as foreign (`Binding::process`) and either takes a slot of its own through the
//!   runtime's fork hook, then issues from that, or fails with `Forked`. The state word needs no
//!   reset: the child's window is a new lease, disjoint from every other holder's.
//!
//! A clock that steps back never makes the word go back: the generator keeps issuing at its last
//! timestamp while sequence numbers remain, then waits. Every wait is bounded by `max_wait`.

use crate::clock::SharedClock;
use crate::error::{Error, ErrorKind, Result};
use crate::layout::Layout;
use crate::sync::{AtomicU64, Ordering};
use crate::window::{Window, WindowStatus};
use std::sync::Arc;
use std::time::Duration;

const CLOSED: u64 = 1 << 63;
const EMPTY: u64 = 1 << 62;

/// Why an id could not be issued right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// Every sequence number of the current time unit is used; the next unit is near.
    NextTick,
    /// The clock is before the window's floor, or stepped back behind the last issued timestamp.
    ClockBehind,
    /// The clock is past the window's ceiling; the keeper's renewal will extend it.
    Ceiling,
    /// No slot is bound yet.
    Unbound,
}

impl WaitReason {
    /// The error a wait of this kind becomes once `max_wait` runs out.
    pub fn into_error(self, max_wait: Duration) -> Error {
        let (kind, what) = match self {
            WaitReason::NextTick => (ErrorKind::Timeout, "waiting for the next time unit"),
            WaitReason::ClockBehind => (
                ErrorKind::ClockBehind,
                "the clock is behind the window's floor or the last issued id",
            ),
            WaitReason::Ceiling => (
                ErrorKind::WindowClosed,
                "the window's ceiling is reached and no renewal extended it",
            ),
            WaitReason::Unbound => (ErrorKind::Timeout, "no slot is bound yet"),
        };
        Error::new(
            kind,
            format!(
                "no id issued after {}: {what}; raise max-wait or look at the keeper's events",
                crate::time::format_duration(max_wait)
            ),
        )
    }
}

/// The outcome of a non-blocking attempt.
#[derive(Debug)]
pub enum TryNext<T> {
    /// Issued.
    Ready(T),
    /// Not now: try again after about `retry_after` (zero: at once).
    Wait {
        /// Why.
        reason: WaitReason,
        /// A hint for when to try again.
        retry_after: Duration,
    },
}

/// A run of consecutive ids: `(timestamp, slot)` fixed, sequences `first..first + count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// Timestamp field (units since the epoch).
    pub timestamp: u64,
    /// The slot.
    pub slot: u32,
    /// First sequence number.
    pub first_sequence: u32,
    /// How many ids.
    pub count: u32,
}

impl Reservation {
    /// Writes the run's ids, composed with `layout` (the generator's), into `out[..count]`, in
    /// increasing order: the one place a batch turns reserved sequence numbers into ids.
    ///
    /// # Panics
    /// When `out` is shorter than `count` (a caller's bug: it asked for at most `out.len()`).
    #[inline]
    pub fn write_ids(&self, layout: &Layout, out: &mut [u64]) {
        let base = layout.compose(self.timestamp, self.slot, 0) | self.first_sequence as u64;
        for (i, id) in out[..self.count as usize].iter_mut().enumerate() {
            *id = base + i as u64;
        }
    }

    /// The run's ids, composed with `layout`, in increasing order (see [`Reservation::write_ids`]).
    #[inline]
    pub fn ids(&self, layout: &Layout) -> impl Iterator<Item = u64> {
        let base = layout.compose(self.timestamp, self.slot, 0) | self.first_sequence as u64;
        (0..self.count as u64).map(move |i| base + i)
    }
}

/// The ids of one batch, reserved but not yet written: the runs of
/// [`Generator::reserve_batch`], in increasing order.
#[derive(Debug, Clone)]
pub struct Batch<'g> {
    layout: &'g Layout,
    len: usize,
    /// The first run (empty when the batch is); most batches have no other.
    first: Reservation,
    rest: Vec<Reservation>,
}

impl Batch<'_> {
    /// How many ids.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch has no id.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn runs(&self) -> impl Iterator<Item = &Reservation> {
        std::iter::once(&self.first).chain(&self.rest)
    }

    /// Writes the ids into `out[..len]`, in increasing order.
    ///
    /// # Panics
    /// When `out` is shorter than the batch.
    pub fn write_ids(&self, out: &mut [u64]) {
        let mut filled = 0;
        for r in self.runs() {
            r.write_ids(self.layout, &mut out[filled..]);
            filled += r.count as usize;
        }
    }

    /// The ids, in increasing order.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs().flat_map(|r| r.ids(self.layout))
    }
}

/// A Snowflake generator bound to a shared [`Window`].
///
/// Thread-safe and lock-free: any number of threads may call `next`, `try_next` and
/// `next_batch` at once. Ids from one generator strictly increase in `(timestamp, sequence)`
/// within a binding and are unique across all threads.
///
/// ```
/// use cosid_core::Runtime;
///
/// let rt = Runtime::from_yaml("cosid: {namespace: docs-gen, machine: {lease: {store: 'memory:docs-gen'}}}")?;
/// let orders = rt.generator("orders")?; // a named generator: a sequence of its own on the slot
/// let mut ids = [0u64; 100];
/// orders.next_batch(&mut ids)?;
/// assert!(ids.windows(2).all(|w| w[0] < w[1]));
/// rt.close()?;
/// # Ok::<(), cosid_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Generator {
    state: AtomicU64,
    /// Ids of time units already left behind (the current unit's count is in `state`).
    retired: AtomicU64,
    waits: AtomicU64,
    layout: Layout,
    /// The layout's numbers the id path uses, precomputed.
    fast: FastLayout,
    window: Arc<Window>,
    clock: SharedClock,
    max_wait: Duration,
    /// Who gives this generator a binding of its own in a forked child (the runtime).
    fork_hook: ForkHook,
    name: String,
}

/// What a forked child does when a generator finds its binding is the parent's.
pub(crate) trait AfterFork: Send + Sync {
    /// Binds the window to a slot of this process, or says why it cannot (then the generator
    /// fails with that error). Returns only once the window is bound here, or with an error.
    fn take_own_slot(&self) -> Result<()>;
}

/// The runtime behind a generator, held weakly (the runtime owns its generators).
#[derive(Default)]
struct ForkHook(Option<std::sync::Weak<dyn AfterFork>>);

impl std::fmt::Debug for ForkHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "ForkHook(runtime)"
        } else {
            "ForkHook(none)"
        })
    }
}

/// What the id path needs of a [`Layout`], precomputed so that it divides by no runtime value
/// and re-derives no mask or shift per id. Same results as the `Layout` methods it replaces
/// (tested below).
#[derive(Debug, Clone, Copy)]
struct FastLayout {
    epoch_ms: i64,
    /// The largest `ms - epoch_ms` whose timestamp field fits.
    max_since_ms: u64,
    seconds: bool,
    sequence_bits: u32,
    timestamp_shift: u32,
    max_sequence: u32,
}

impl FastLayout {
    fn new(layout: &Layout) -> Self {
        let unit = layout.unit().ms() as u128;
        let end = (layout.max_timestamp() as u128 + 1) * unit - 1;
        FastLayout {
            epoch_ms: layout.epoch_ms(),
            max_since_ms: end.min(u64::MAX as u128) as u64,
            seconds: layout.unit() == crate::layout::TimeUnit::Seconds,
            sequence_bits: layout.sequence_bits() as u32,
            timestamp_shift: layout.node_bits() as u32 + layout.sequence_bits() as u32,
            max_sequence: layout.max_sequence(),
        }
    }

    /// `Layout::timestamp_at`: `None` before the epoch or past the layout's range.
    #[inline(always)]
    fn timestamp_at(&self, ms: i64) -> Option<u64> {
        let since = u64::try_from(ms.checked_sub(self.epoch_ms)?).ok()?;
        if since > self.max_since_ms {
            return None;
        }
        // A constant divisor: a multiply, not a division.
        Some(if self.seconds { since / 1000 } else { since })
    }

    /// `Layout::unit_start_ms`.
    #[inline(always)]
    fn unit_start_ms(&self, t: u64) -> i64 {
        let units = t as i64;
        self.epoch_ms + if self.seconds { units * 1000 } else { units }
    }

    /// `Layout::compose`, for fields that fit.
    #[inline(always)]
    fn compose(&self, t: u64, slot: u32, sequence: u32) -> u64 {
        (t << self.timestamp_shift) | ((slot as u64) << self.sequence_bits) | sequence as u64
    }
}

impl Generator {
    /// A generator issuing ids of `layout` inside `window`, timing with `clock`, waiting at most
    /// `max_wait` per call.
    pub fn new(
        name: impl Into<String>,
        layout: Layout,
        window: Arc<Window>,
        clock: SharedClock,
        max_wait: Duration,
    ) -> Self {
        Generator {
            state: AtomicU64::new(EMPTY),
            retired: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            layout,
            fast: FastLayout::new(&layout),
            window,
            clock,
            max_wait,
            fork_hook: ForkHook::default(),
            name: name.into(),
        }
    }

    /// The runtime that re-binds this generator's window in a forked child (without one, a
    /// child's generator fails with `Forked`).
    pub(crate) fn with_fork_hook(mut self, hook: std::sync::Weak<dyn AfterFork>) -> Self {
        self.fork_hook = ForkHook(Some(hook));
        self
    }

    /// The binding is another process's: this is a fork child. Take a slot of this process
    /// through the runtime, or fail.
    #[cold]
    #[inline(never)]
    fn after_fork(&self) -> Result<()> {
        match self.fork_hook.0.as_ref().and_then(std::sync::Weak::upgrade) {
            Some(runtime) => runtime.take_own_slot(),
            None => Err(forked()),
        }
    }

    /// The generator's name ("" for a runtime's default generator).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bit layout of the ids.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The longest a blocking call waits.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    #[inline]
    fn unpack(&self, word: u64) -> (u64, u32) {
        let low = word & !(CLOSED | EMPTY);
        (
            low >> self.fast.sequence_bits,
            (low & self.fast.max_sequence as u64) as u32,
        )
    }

    #[inline]
    fn pack(&self, t: u64, s: u32) -> u64 {
        (t << self.fast.sequence_bits) | s as u64
    }

    /// Tries to reserve up to `want` (>= 1) consecutive ids without waiting.
    #[inline]
    pub fn try_reserve(&self, want: u32) -> Result<TryNext<Reservation>> {
        debug_assert!(want >= 1);
        let mut took_own_slot = false;
        loop {
            let cur = self.state.load(Ordering::Acquire);
            if cur & CLOSED != 0 {
                return Err(closed(&self.name));
            }
            let b = self.window.read();
            if b.process != crate::fork::current() {
                // A forked child, on the parent's binding: never issue from it.
                if took_own_slot {
                    return Err(forked());
                }
                self.after_fork()?;
                took_own_slot = true;
                continue;
            }
            match b.status {
                WindowStatus::Active => {}
                WindowStatus::Lost => return Err(slot_lost(b.slot)),
                WindowStatus::Closed => return Err(closed(&self.name)),
                WindowStatus::Unbound => {
                    return Ok(TryNext::Wait {
                        reason: WaitReason::Unbound,
                        retry_after: Duration::from_millis(1),
                    })
                }
            }
            let now_ms = self.clock.now_ms();
            let Some(now_t) = self.fast.timestamp_at(now_ms) else {
                return Err(out_of_range(&self.layout, now_ms));
            };
            let max_seq = self.fast.max_sequence;
            let (t, first) = if cur & EMPTY != 0 {
                (now_t, 0)
            } else {
                let (last_t, last_s) = self.unpack(cur);
                if now_t > last_t {
                    (now_t, 0)
                } else if last_s < max_seq {
                    (last_t, last_s + 1)
                } else {
                    // This unit is used up; wait for the clock to reach the next one.
                    let next_start = self.fast.unit_start_ms(last_t + 1);
                    let reason = if now_t == last_t {
                        WaitReason::NextTick
                    } else {
                        WaitReason::ClockBehind
                    };
                    return Ok(TryNext::Wait {
                        reason,
                        retry_after: Duration::from_millis((next_start - now_ms).max(0) as u64),
                    });
                }
            };
            let start = self.fast.unit_start_ms(t);
            #[cfg(feature = "mutation-switches")]
            let b = crate::lease::mutation::checked_window(b);
            if start <= b.floor {
                // Before the floor: the previous holder may have used these timestamps.
                let first_ok = self.layout.timestamp_at(b.floor).map_or(t + 1, |f| f + 1);
                let wait_ms = self.layout.unit_start_ms(first_ok) - now_ms;
                return Ok(TryNext::Wait {
                    reason: WaitReason::ClockBehind,
                    retry_after: Duration::from_millis(wait_ms.max(1) as u64),
                });
            }
            if start > b.ceiling {
                return Ok(TryNext::Wait {
                    reason: WaitReason::Ceiling,
                    retry_after: Duration::from_millis(1),
                });
            }
            let last = first.saturating_add(want - 1).min(max_seq);
            let next = self.pack(t, last);
            if self
                .state
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                if cur & EMPTY == 0 && first == 0 {
                    // We left a time unit behind: count its ids once, off the per-id path.
                    let (_, old_s) = self.unpack(cur);
                    self.retired.fetch_add(old_s as u64 + 1, Ordering::Relaxed);
                }
                return Ok(TryNext::Ready(Reservation {
                    timestamp: t,
                    slot: b.slot,
                    first_sequence: first,
                    count: last - first + 1,
                }));
            }
        }
    }

    /// Tries to issue one id without waiting.
    #[inline]
    pub fn try_next(&self) -> Result<TryNext<u64>> {
        Ok(match self.try_reserve(1)? {
            TryNext::Ready(r) => {
                TryNext::Ready(self.fast.compose(r.timestamp, r.slot, r.first_sequence))
            }
            TryNext::Wait {
                reason,
                retry_after,
            } => TryNext::Wait {
                reason,
                retry_after,
            },
        })
    }

    /// Issues one id, waiting (at most `max_wait`) when the window or the clock require it.
    #[inline]
    pub fn next(&self) -> Result<u64> {
        if let TryNext::Ready(id) = self.try_next()? {
            return Ok(id);
        }
        self.next_slow()
    }

    #[cold]
    fn next_slow(&self) -> Result<u64> {
        let r = self.reserve_waiting(1)?;
        Ok(self.fast.compose(r.timestamp, r.slot, r.first_sequence))
    }

    /// Reserves up to `want` consecutive ids (one atomic step), waiting like [`Generator::next`].
    pub fn reserve_waiting(&self, want: u32) -> Result<Reservation> {
        let deadline = self.clock.monotonic() + self.max_wait;
        let mut counted = false;
        loop {
            match self.try_reserve(want)? {
                TryNext::Ready(r) => return Ok(r),
                TryNext::Wait {
                    reason,
                    retry_after,
                } => {
                    if !counted {
                        self.waits.fetch_add(1, Ordering::Relaxed);
                        counted = true;
                    }
                    // Every id wait is its caller's: an interrupt ends it.
                    if crate::interrupt::requested() {
                        return Err(crate::interrupt::error("waiting for an id"));
                    }
                    let now = self.clock.monotonic();
                    if now >= deadline {
                        return Err(self.wait_error(reason));
                    }
                    let nap = match reason {
                        // The next unit starts within the millisecond. The hint is counted in
                        // whole ms of a truncated clock, so sleeping it would oversleep into
                        // the next unit and leave part of its ids unused (a saturated generator
                        // would lose ~10% of its rate). A zero nap yields once and retries (a
                        // manual clock's zero sleep moves it by 1 ms).
                        WaitReason::NextTick if retry_after <= Duration::from_millis(1) => {
                            Duration::ZERO
                        }
                        // Poll the window at least every few ms: a renewal or a rebinding may
                        // end the wait before the hint does.
                        _ => retry_after
                            .min(deadline - now)
                            .min(Duration::from_millis(5)),
                    };
                    self.clock.sleep(nap);
                }
            }
        }
    }

    /// The error a wait became. A clock behind names what it is behind: the clock's time, the
    /// window's floor and the last issued id's time.
    #[cold]
    fn wait_error(&self, reason: WaitReason) -> Error {
        let e = reason.into_error(self.max_wait);
        if reason != WaitReason::ClockBehind {
            return e;
        }
        let t = crate::time::format_rfc3339_ms;
        let floor = self.window.read().floor;
        let word = self.state.load(Ordering::Acquire);
        let last = if word & EMPTY != 0 {
            "none yet".to_string()
        } else {
            t(self.layout.unit_start_ms(self.unpack(word).0))
        };
        Error::new(
            ErrorKind::ClockBehind,
            format!(
                "{} (the clock reads {}; ids need a time after the window's floor {} and not \
                 before the last issued id's time, {last})",
                e.message(),
                t(self.clock.now_ms()),
                t(floor)
            ),
        )
    }

    /// Fills `out` with ids, reserving whole runs of sequence numbers per atomic step and
    /// waiting like [`Generator::next`] (at most `max_wait` per wait) when a run cannot come at
    /// once: [`Generator::fill_with`] with the blocking policy, [`Generator::reserve_waiting`].
    ///
    /// All or nothing: on an error nothing is written to `out` (the runs reserved before it are
    /// issued and dropped, never reissued).
    pub fn next_batch(&self, out: &mut [u64]) -> Result<()> {
        self.fill_with(out, |want, _, _| self.reserve_waiting(want))
    }

    /// Fills `out` with ids: [`Generator::reserve_batch`] of `out.len()` ids, then written in
    /// increasing order.
    ///
    /// All or nothing: nothing is written to `out` unless the whole batch was issued. On an
    /// error (the core's, converted with `From`, or the one `wait` returned) `out` is as it
    /// was, and the runs reserved before the error are issued and dropped (never reissued:
    /// the ids have a gap).
    pub fn fill_with<E: From<Error>>(
        &self,
        out: &mut [u64],
        wait: impl FnMut(u32, WaitReason, Duration) -> std::result::Result<Reservation, E>,
    ) -> std::result::Result<(), E> {
        self.reserve_batch(out.len(), wait)?.write_ids(out);
        Ok(())
    }

    /// Reserves `n` ids as runs of consecutive sequence numbers, one atomic step
    /// ([`Generator::try_reserve`]) per run, and returns them once all are in hand; no id is
    /// composed before then. The one batch loop of every binding.
    ///
    /// When a run cannot come at once, `wait(want, reason, retry_after)` is the caller's
    /// policy: it gets a run of 1 to `want` ids (blocking with
    /// [`Generator::reserve_waiting`], with a language's lock released around that, or spinning
    /// on `try_reserve` for a while) or returns the error the batch fails with. It is called
    /// once per run that had to wait.
    ///
    /// A `wait` that returns an empty run or one of more than `want` ids fails the batch with
    /// `InvalidArgument`.
    pub fn reserve_batch<E: From<Error>>(
        &self,
        n: usize,
        mut wait: impl FnMut(u32, WaitReason, Duration) -> std::result::Result<Reservation, E>,
    ) -> std::result::Result<Batch<'_>, E> {
        let mut batch = Batch {
            layout: &self.layout,
            len: 0,
            first: Reservation {
                timestamp: 0,
                slot: 0,
                first_sequence: 0,
                count: 0,
            },
            rest: Vec::new(),
        };
        while batch.len < n {
            let want = (n - batch.len).min(u32::MAX as usize) as u32;
            let r = match self.try_reserve(want)? {
                TryNext::Ready(r) => r,
                TryNext::Wait {
                    reason,
                    retry_after,
                } => {
                    let r = wait(want, reason, retry_after)?;
                    if !(1..=want).contains(&r.count) {
                        return Err(Error::new(
                            ErrorKind::InvalidArgument,
                            format!(
                                "a batch's wait policy returned a run of {} ids where 1 to \
                                 {want} were asked for; return what `reserve_waiting(want)` or \
                                 `try_reserve(want)` gave",
                                r.count
                            ),
                        )
                        .into());
                    }
                    r
                }
            };
            if batch.len == 0 {
                batch.first = r;
            } else {
                batch.rest.push(r);
            }
            batch.len += r.count as usize;
        }
        Ok(batch)
    }

    /// Closes the generator: every later call fails with `Closed`, and no call in flight can
    /// still issue. Returns the unit start (ms) of the last issued timestamp, or `None` if it
    /// never issued. Idempotent.
    pub fn close(&self) -> Option<i64> {
        let last = self.state.fetch_or(CLOSED, Ordering::AcqRel);
        self.last_issued_ms_of(last)
    }

    /// The unit start (ms) of the last issued timestamp, `None` before the first id.
    pub fn last_issued_ms(&self) -> Option<i64> {
        self.last_issued_ms_of(self.state.load(Ordering::Acquire))
    }

    fn last_issued_ms_of(&self, word: u64) -> Option<i64> {
        (word & EMPTY == 0).then(|| self.fast.unit_start_ms(self.unpack(word).0))
    }

    /// Whether [`Generator::close`] ran.
    pub fn is_closed(&self) -> bool {
        self.state.load(Ordering::Acquire) & CLOSED != 0
    }

    /// Ids issued so far (exact once closed; may trail by one time unit's worth while running).
    pub fn issued(&self) -> u64 {
        let word = self.state.load(Ordering::Acquire);
        let current = if word & EMPTY != 0 {
            0
        } else {
            self.unpack(word).1 as u64 + 1
        };
        self.retired.load(Ordering::Relaxed) + current
    }

    /// Calls that had to wait at least once.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }
}

fn forked() -> Error {
    Error::new(
        ErrorKind::Forked,
        "this process is a fork of the one that built the runtime, which still holds its slot; \
         build a new runtime in the child",
    )
}

fn closed(name: &str) -> Error {
    let what = if name.is_empty() {
        "the generator".to_string()
    } else {
        format!("generator '{name}'")
    };
    Error::new(
        ErrorKind::Closed,
        format!("{what} is closed; build a new runtime to issue more ids"),
    )
}

fn slot_lost(slot: u32) -> Error {
    Error::new(
        ErrorKind::SlotLost,
        format!(
            "the lease on slot {slot} was lost (expired or taken over); the keeper is acquiring a \
             new slot, retry shortly"
        ),
    )
}

fn out_of_range(layout: &Layout, now_ms: i64) -> Error {
    let now = crate::time::format_rfc3339_ms(now_ms);
    if now_ms < layout.epoch_ms() {
        Error::new(
            ErrorKind::ClockBehind,
            format!("the clock ({now}) is before the layout's epoch"),
        )
    } else {
        Error::new(
            ErrorKind::Config,
            format!(
                "the clock ({now}) is past the end of the layout's range ({}); use a layout with \
                 more timestamp bits or a later epoch",
                crate::time::format_rfc3339_ms(layout.runs_out_at_ms())
            ),
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_writes_its_run_in_the_layouts_bit_order() {
        let r = Reservation {
            timestamp: 7,
            slot: 1,
            first_sequence: 2,
            count: 2,
        };
        for layout in [Layout::MILLIS, Layout::SAFE_JS_SECONDS] {
            let want: Vec<u64> = (0..2).map(|i| layout.compose(7, 1, 2 + i)).collect();
            let mut out = [0u64; 3];
            r.write_ids(&layout, &mut out);
            assert_eq!(out[..2], want[..]);
            assert_eq!(out[2], 0, "nothing past the run");
            assert_eq!(r.ids(&layout).collect::<Vec<_>>(), want);
        }
    }
    use crate::clock::{Clock, ManualClock};
    use std::collections::HashSet;

    const T0: i64 = 1_800_000_000_000;

    fn setup(
        layout: Layout,
        floor: i64,
        ceiling: i64,
    ) -> (Arc<ManualClock>, Arc<Window>, Generator) {
        let clock = ManualClock::shared(T0);
        let window = Arc::new(Window::bound(5, floor, ceiling));
        let g = Generator::new(
            "",
            layout,
            window.clone(),
            clock.clone(),
            Duration::from_millis(100),
        );
        (clock, window, g)
    }

    fn ready<T: std::fmt::Debug>(r: Result<TryNext<T>>) -> T {
        match r.unwrap() {
            TryNext::Ready(v) => v,
            other => panic!("expected an id, got {other:?}"),
        }
    }

    fn wait_reason<T: std::fmt::Debug>(r: Result<TryNext<T>>) -> WaitReason {
        match r.unwrap() {
            TryNext::Wait { reason, .. } => reason,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    fn wait<T: std::fmt::Debug>(r: Result<TryNext<T>>) -> (WaitReason, Duration) {
        match r.unwrap() {
            TryNext::Wait {
                reason,
                retry_after,
            } => (reason, retry_after),
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    /// What a generator reports of itself: closed or not, the calls that had to wait (once per
    /// call, however many naps it took), and which error a clock outside the layout is.
    #[test]
    fn a_generator_reports_its_state_waits_and_clock_errors() {
        // The floor is 5 ms ahead: one call, several naps, one wait counted.
        let (clock, _, g) = setup(Layout::MILLIS, T0 + 5, T0 + 1_000);
        assert_eq!(g.waits(), 0);
        g.next().unwrap();
        assert!(clock.now_ms() > T0 + 5);
        assert_eq!(g.waits(), 1);
        g.next().unwrap();
        assert_eq!(g.waits(), 1, "a call that did not wait is not counted");
        assert!(!g.is_closed());
        g.close();
        assert!(g.is_closed());

        // Before the layout's epoch the clock is behind; past its range the layout is wrong.
        let (clock, _, g) = setup(Layout::MILLIS, T0 - 10, T0 + 10);
        clock.set(Layout::MILLIS.epoch_ms() - 1);
        assert_eq!(g.next().unwrap_err().kind(), ErrorKind::ClockBehind);
        clock.set(Layout::MILLIS.runs_out_at_ms() + 1);
        assert_eq!(g.next().unwrap_err().kind(), ErrorKind::Config);
    }

    /// A clock behind says what it is behind: the window's floor, and the last issued id's
    /// time (or that there is none yet).
    #[test]
    fn a_clock_behind_error_names_the_floor_and_the_last_id_s_time() {
        let t = crate::time::format_rfc3339_ms;
        let (_, _, g) = setup(Layout::MILLIS, T0 + 10_000, T0 + 20_000);
        let e = g.next().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ClockBehind, "{e}");
        assert!(e.message().contains(&t(T0 + 10_000)), "{e}");
        assert!(e.message().contains("none yet"), "{e}");
        let (clock, _, g) = setup(Layout::MILLIS, T0 - 10_000, T0 + 20_000);
        g.next().unwrap();
        // The clock goes back: ids go on at the last time while its sequence numbers last.
        clock.set(T0 - 5_000);
        ready(g.try_reserve(g.layout().max_sequence() + 1));
        let e = g.next().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ClockBehind, "{e}");
        assert!(
            e.message()
                .contains(&format!("last issued id's time, {}", t(T0))),
            "{e}"
        );
    }

    /// A wait says how long until an id can come: to the start of the next time unit when this
    /// one is used up, to the start of the first unit above the floor when the clock is below
    /// it. (Callers sleep that long: too short spins, too long stalls.)
    #[test]
    fn a_wait_says_how_long_until_an_id_can_come() {
        // T0 is a whole second of the layout's epoch.
        let (clock, _, g) = setup(Layout::SECONDS, T0 - 10_000, T0 + 10_000);
        clock.set(T0 + 250);
        let all = g.layout().max_sequence() + 1;
        assert_eq!(ready(g.try_reserve(all)).count, all);
        assert_eq!(
            wait(g.try_next()),
            (WaitReason::NextTick, Duration::from_millis(750))
        );
        let (clock, _, g) = setup(Layout::SECONDS, T0 + 2_500, T0 + 10_000);
        clock.set(T0 + 250);
        assert_eq!(
            wait(g.try_next()),
            (WaitReason::ClockBehind, Duration::from_millis(2_750))
        );
        // A floor past the layout's range: no id can ever come; it says so one unit at a time.
        let (clock, _, g) = setup(Layout::SECONDS, i64::MAX / 2, i64::MAX / 2 + 10);
        clock.set(T0 + 250);
        assert_eq!(
            wait(g.try_next()),
            (WaitReason::ClockBehind, Duration::from_millis(750))
        );
    }

    #[test]
    fn issues_inside_the_window_with_increasing_sequences() {
        let (_, _, g) = setup(Layout::MILLIS, T0 - 10, T0 + 10);
        let a = g.layout().decompose(ready(g.try_next())).unwrap();
        let b = g.layout().decompose(ready(g.try_next())).unwrap();
        assert_eq!((a.slot, a.sequence, b.sequence), (5, 0, 1));
        assert_eq!(g.layout().unit_start_ms(a.timestamp), T0);
        assert_eq!(g.issued(), 2);
        assert_eq!(g.last_issued_ms(), Some(T0));
    }

    #[test]
    fn sequence_exhausted_waits_for_the_next_tick() {
        let (clock, _, g) = setup(Layout::SAFE_JS_MILLIS, T0 - 10, T0 + 10);
        let mut ids = vec![0; 512];
        g.next_batch(&mut ids).unwrap();
        assert_eq!(wait_reason(g.try_next()), WaitReason::NextTick);
        clock.advance(Duration::from_millis(1));
        let p = g.layout().decompose(ready(g.try_next())).unwrap();
        assert_eq!(
            (g.layout().unit_start_ms(p.timestamp), p.sequence),
            (T0 + 1, 0)
        );
        // Blocking next() sleeps the manual clock forward instead of failing.
        let mut more = vec![0; 600];
        g.next_batch(&mut more).unwrap();
        assert!(more.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn before_the_floor_waits_then_fails_clock_behind() {
        let (clock, _, g) = setup(Layout::MILLIS, T0 + 50, T0 + 100);
        assert_eq!(wait_reason(g.try_next()), WaitReason::ClockBehind);
        // 100 ms of max_wait is not enough to pass a floor 50 ms ahead? It is: the wait ends.
        let id = g.next().unwrap();
        assert!(
            g.layout()
                .unit_start_ms(g.layout().decompose(id).unwrap().timestamp)
                > T0 + 50
        );
        clock.freeze();
        let (_, _, g2) = setup(Layout::MILLIS, T0 + 500, T0 + 1000);
        assert_eq!(g2.next().unwrap_err().kind(), ErrorKind::ClockBehind);
    }

    #[test]
    fn clock_behind_names_the_clock_the_floor_and_the_last_id() {
        let (clock, _, g) = setup(Layout::MILLIS, T0 + 500, T0 + 1000);
        clock.freeze();
        let e = g.next().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ClockBehind, "{e}");
        let t = crate::time::format_rfc3339_ms;
        assert!(
            e.message().contains(&format!("the clock reads {}", t(T0))),
            "{e}"
        );
        assert!(
            e.message().contains(&format!("floor {}", t(T0 + 500))),
            "{e}"
        );
        assert!(e.message().contains("none yet"), "{e}");
    }

    #[test]
    fn ceiling_reached_waits_for_an_extension_then_fails_window_closed() {
        let (clock, window, g) = setup(Layout::MILLIS, T0 - 10, T0);
        g.next().unwrap();
        clock.advance(Duration::from_millis(1));
        assert_eq!(wait_reason(g.try_next()), WaitReason::Ceiling);
        let e = g.next().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WindowClosed, "{e}");
        window.extend(clock.now_ms() + 10);
        g.next().unwrap();
    }

    #[test]
    fn clock_stepped_back_an_hour_keeps_issuing_at_the_last_timestamp_then_fails() {
        let (clock, _, g) = setup(Layout::SAFE_JS_MILLIS, T0 - 3_600_000 * 2, T0 + 10);
        let first = g.next().unwrap();
        clock.step_back(Duration::from_secs(3600));
        clock.freeze();
        let mut last = first;
        for _ in 0..511 {
            let id = g.next().unwrap();
            assert!(id > last);
            last = id;
        }
        let p = g.layout().decompose(last).unwrap();
        assert_eq!(
            (g.layout().unit_start_ms(p.timestamp), p.sequence),
            (T0, 511)
        );
        let e = g.next().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ClockBehind, "{e}");
        // Once the clock is back, issuing resumes past the last timestamp.
        clock.unfreeze();
        clock.set(T0 + 1);
        assert!(g.next().unwrap() > last);
    }

    #[test]
    fn coarse_units_check_the_unit_start() {
        // Window (T0+500, T0+5000]: the unit [T0, T0+1000) starts at T0, below the floor.
        let (clock, _, g) = setup(Layout::SECONDS, T0 + 500, T0 + 5_000);
        assert_eq!(wait_reason(g.try_next()), WaitReason::ClockBehind);
        clock.set(T0 + 1_000);
        let p = g.layout().decompose(ready(g.try_next())).unwrap();
        assert_eq!(g.layout().unit_start_ms(p.timestamp), T0 + 1_000);
        clock.set(T0 + 5_000);
        ready(g.try_next());
        clock.set(T0 + 6_000);
        assert_eq!(wait_reason(g.try_next()), WaitReason::Ceiling);
    }

    #[test]
    fn lost_closed_and_forked() {
        let (_, window, g) = setup(Layout::MILLIS, T0 - 10, T0 + 10);
        g.next().unwrap();
        window.set_status(WindowStatus::Lost);
        assert_eq!(g.next().unwrap_err().kind(), ErrorKind::SlotLost);
        window.rebind(6, T0 - 1, T0 + 10);
        let p = g.layout().decompose(g.next().unwrap()).unwrap();
        assert_eq!(p.slot, 6);
        assert_eq!(g.close(), Some(T0));
        assert_eq!(g.close(), Some(T0), "close is idempotent");
        assert_eq!(g.next().unwrap_err().kind(), ErrorKind::Closed);
        let mut buf = [0u64; 4];
        assert_eq!(
            g.next_batch(&mut buf).unwrap_err().kind(),
            ErrorKind::Closed
        );
    }

    mod fast_layout {
        use super::super::FastLayout;
        use crate::layout::{strategies, Layout};
        use proptest::prelude::*;

        fn layout() -> impl Strategy<Value = Layout> {
            // The custom layouts are not js-safe; the presets include the js-safe ones.
            strategies::preset_or(strategies::custom(Just(false)))
        }

        proptest! {
            #[test]
            fn agrees_with_the_layout(l in layout(), ms in any::<i64>(), near in any::<i32>(),
                    slot in any::<u32>(), seq in any::<u32>()) {
                let f = FastLayout::new(&l);
                // Arbitrary instants, instants near the epoch and the end of the range, and the
                // milliseconds on either side of each boundary.
                let (start, end) = (l.epoch_ms(), l.runs_out_at_ms());
                let edges = [start - 1, start, start + 1, end - 1001, end - 1000, end - 1, end, end + 1];
                for ms in [ms, start + near as i64, end + near as i64].into_iter().chain(edges) {
                    let t = l.timestamp_at(ms);
                    prop_assert_eq!(f.timestamp_at(ms), t, "{} at {}", l, ms);
                    if let Some(t) = t {
                        prop_assert_eq!(f.unit_start_ms(t), l.unit_start_ms(t));
                        let (slot, seq) = (slot & l.max_slot(), seq & l.max_sequence());
                        prop_assert_eq!(f.compose(t, slot, seq), l.compose(t, slot, seq));
                    }
                }
            }
        }
    }

    #[test]
    fn a_generator_s_name_wait_and_debug_output_say_what_it_is() {
        let g = Generator::new(
            "orders",
            Layout::MILLIS,
            Arc::new(Window::bound(5, T0 - 10, T0 + 10)),
            ManualClock::shared(T0),
            Duration::from_millis(250),
        );
        assert_eq!(g.name(), "orders");
        assert_eq!(g.max_wait(), Duration::from_millis(250));
        // Without a runtime behind it, nothing gives it a slot after a fork: its output says so.
        let shown = format!("{g:?}");
        assert!(shown.contains("name: \"orders\""), "{shown}");
        assert!(shown.contains("fork_hook: ForkHook(none)"), "{shown}");
    }

    #[test]
    fn a_generator_that_never_issued_reports_no_last_timestamp() {
        let (_, _, g) = setup(Layout::MILLIS, T0 - 10, T0 + 10);
        assert_eq!(g.close(), None);
        assert_eq!(g.issued(), 0);
    }

    #[test]
    fn batch_reserves_consecutive_sequences() {
        let (clock, _, g) = setup(Layout::MILLIS, T0 - 10, T0 + 100);
        g.next().unwrap();
        let r = ready(g.try_reserve(100));
        assert_eq!((r.first_sequence, r.count), (1, 100));
        let mut ids = vec![0u64; 10_000];
        g.next_batch(&mut ids).unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(g.issued(), 10_101);
        assert!(clock.now_ms() >= T0 + 2, "the batch waited for later ticks");
    }

    /// A batch bigger than one time unit's sequence numbers takes several runs (the wait policy
    /// is asked once per unit it has to wait for) and returns strictly increasing, unique ids.
    #[test]
    fn a_batch_larger_than_a_time_unit_spans_runs_with_increasing_unique_ids() {
        let (clock, _, g) = setup(Layout::MILLIS, T0 - 10, T0 + 100);
        let per_unit = g.layout().max_sequence() as usize + 1;
        let mut ids = vec![0u64; 3 * per_unit + 5];
        let mut waits = Vec::new();
        g.fill_with(&mut ids, |want, reason, _| {
            waits.push((want, reason));
            clock.advance(Duration::from_millis(1));
            g.try_reserve(want).map(|r| ready(Ok(r)))
        })
        .unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids increase");
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
        let units: HashSet<u64> = ids
            .iter()
            .map(|&id| g.layout().decompose(id).unwrap().timestamp)
            .collect();
        assert_eq!(units.len(), 4, "four time units");
        assert_eq!(
            waits,
            [
                ((2 * per_unit + 5) as u32, WaitReason::NextTick),
                ((per_unit + 5) as u32, WaitReason::NextTick),
                (5, WaitReason::NextTick),
            ]
        );
        assert_eq!(g.issued(), ids.len() as u64);
        // The blocking policy (next_batch) gives the same kind of batch.
        let mut more = vec![0u64; 2 * per_unit + 1];
        g.next_batch(&mut more).unwrap();
        assert!(more.windows(2).all(|w| w[0] < w[1]));
        assert!(more[0] > ids[ids.len() - 1]);
    }

    /// A batch that fails part-way writes nothing: the runs reserved before the failure are
    /// issued and dropped (never reissued), and the caller's buffer is as it was.
    #[test]
    fn a_batch_that_fails_mid_way_leaves_the_buffer_untouched() {
        // The window ends at T0: the first unit's sequence numbers are all there is.
        let (_, _, g) = setup(Layout::MILLIS, T0 - 10, T0);
        let per_unit = g.layout().max_sequence() as usize + 1;
        let mut ids = vec![7u64; per_unit + 10];
        let e = g.next_batch(&mut ids).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WindowClosed, "{e}");
        assert!(ids.iter().all(|&id| id == 7), "nothing written");
        assert_eq!(g.issued(), per_unit as u64, "the first run was issued");

        // A policy's own error comes back as it is, and also writes nothing.
        #[derive(Debug, PartialEq)]
        enum Stop {
            Core(ErrorKind),
            GaveUp(u32, WaitReason),
        }
        impl From<Error> for Stop {
            fn from(e: Error) -> Self {
                Stop::Core(e.kind())
            }
        }
        let (_, _, g) = setup(Layout::MILLIS, T0 - 10, T0 + 100);
        let mut ids = vec![7u64; per_unit + 10];
        let r = g.fill_with(&mut ids, |want, reason, _| Err(Stop::GaveUp(want, reason)));
        assert_eq!(r, Err(Stop::GaveUp(10, WaitReason::NextTick)));
        assert!(ids.iter().all(|&id| id == 7), "nothing written");
        // A core error on a later run too.
        g.close();
        let r = g.fill_with(&mut ids, |want, reason, _| Err(Stop::GaveUp(want, reason)));
        assert_eq!(r, Err(Stop::Core(ErrorKind::Closed)));
        assert!(ids.iter().all(|&id| id == 7), "nothing written");
    }

    /// A reserved batch hands out its ids without a buffer of the caller's (a binding writing
    /// them into its own objects), in the same order `fill_with` writes them.
    #[test]
    fn a_reserved_batch_iterates_the_ids_it_would_write() {
        let (clock, _, g) = setup(Layout::SAFE_JS_MILLIS, T0 - 10, T0 + 100);
        let batch = g
            .reserve_batch(1_000, |want, _, _| {
                clock.advance(Duration::from_millis(1));
                g.try_reserve(want).map(|r| ready(Ok(r)))
            })
            .map_err(|e: Error| e)
            .unwrap();
        assert_eq!(batch.len(), 1_000);
        let mut written = vec![0u64; 1_000];
        batch.write_ids(&mut written);
        assert_eq!(batch.ids().collect::<Vec<_>>(), written);
        assert!(written.windows(2).all(|w| w[0] < w[1]));
        let empty = g.reserve_batch(0, |_, _, _| -> Result<Reservation> {
            unreachable!("nothing to wait for")
        });
        assert_eq!(empty.unwrap().ids().count(), 0);
        // A policy that hands back an empty run, or more than it was asked for: an error, not
        // a loop or a write past the buffer.
        let per_unit = g.layout().max_sequence() as usize + 1;
        for extra in [None, Some(1)] {
            let mut out = vec![7u64; per_unit + 3];
            let e = g
                .fill_with(&mut out, |want, _, _| {
                    let run = Reservation {
                        timestamp: 0,
                        slot: 0,
                        first_sequence: 0,
                        count: extra.map_or(0, |x| want + x),
                    };
                    Ok::<_, Error>(run)
                })
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
            assert!(e.message().contains("wait policy"), "{e}");
            assert!(out.iter().all(|&id| id == 7), "nothing written");
        }
    }

    #[test]
    fn eight_threads_two_million_ids_no_duplicate_each_increasing() {
        let clock: SharedClock = Arc::new(crate::clock::SystemClock);
        let now = clock.now_ms();
        let window = Arc::new(Window::bound(1, now - 1, now + 3_600_000));
        let g = Arc::new(Generator::new(
            "",
            Layout::MILLIS,
            window,
            clock,
            Duration::from_secs(5),
        ));
        let per_thread = 250_000;
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || {
                    let mut ids = Vec::with_capacity(per_thread);
                    for _ in 0..per_thread {
                        ids.push(g.next().unwrap());
                    }
                    ids
                })
            })
            .collect();
        let mut all = HashSet::with_capacity(8 * per_thread);
        for h in handles {
            let ids = h.join().unwrap();
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "a thread's ids must increase"
            );
            for id in ids {
                assert!(all.insert(id), "duplicate id {id}");
            }
        }
        assert_eq!(all.len(), 8 * per_thread);
        assert!(g.close().is_some());
        assert_eq!(g.issued(), 8 * per_thread as u64);
    }
}
