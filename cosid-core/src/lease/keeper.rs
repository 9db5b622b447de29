//! The `LeaseKeeper`: one per runtime, shared by all its generators.
//!
//! It is a state machine stepped by [`LeaseKeeper::tick`], which does whatever is due and says
//! how long until the next thing is due; the runtime's keeper thread just calls it in a loop,
//! and tests call it directly under a manual clock.
//!
//! - Renews at `ttl/3`. A failed renewal is retried with back-off from 100 ms up to `ttl/6`;
//!   until the ceiling the generators keep issuing.
//! - A renewal that finds the lease gone marks the window lost (generators fail fast with
//!   `SlotLost`), then acquires a new slot with a new window.
//! - Every window it asks for starts at or above the highest ceiling it was ever granted, so a
//!   store that restarted empty cannot give this runtime an overlapping window.
//! - Compares `storeNow` with the local clock; a skew above `tolerance/2` raises `ClockSkew`.
//! - There is no switch to keep issuing after the lease is lost: under any model that could
//!   duplicate ids.
//!
//! Locking. Two locks, neither held while a listener runs:
//! - `turn` gives one store operation at a time its turn (start-up's acquisition, a step of
//!   [`LeaseKeeper::tick`], [`LeaseKeeper::release`]): a renewal and a release never interleave,
//!   so the state a store call started from is still the state when its answer is applied.
//!   It is held across the store call, and nothing but another store operation waits for it.
//! - `state` guards the lease and the schedule; it is held only to read or write them, never
//!   across a store call, so [`LeaseKeeper::lease`] (and so `Runtime::lease`, `stats`) answers
//!   at once even while a store call hangs for its timeout.
//!
//! Events are collected while the work is done and delivered after both locks are released, so
//! a listener may call any method of the keeper or the runtime, `close` included.

use super::client::{AcquireRequest, Acquisition, LeaseClient, Renewal};
use super::events::{Counters, Event, EventBus};
use super::record::{Owner, SlotLease};
use super::rules::Refusal;
use crate::clock::SharedClock;
use crate::error::{Error, ErrorKind, Result};
use crate::window::{Window, WindowStatus};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The keeper's timing.
#[derive(Debug, Clone)]
pub struct KeeperConfig {
    /// Lease duration.
    pub ttl: Duration,
    /// How long start-up retries an exhausted namespace or an unreachable store.
    pub acquire_timeout: Duration,
    /// The slot to prefer.
    pub preferred_slot: Option<u32>,
    /// Who we are.
    pub owner: Owner,
}

impl KeeperConfig {
    fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let max = (self.ttl / 6).max(Duration::from_millis(100));
        Duration::from_millis(100)
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(max)
    }
}

/// Whether start-up should try again after `e`: a namespace whose slots are all held (a lease
/// may expire), or a store error that may go away (unreachable, busy, a lost race). A permanent
/// store error (a read-only file, a permission refused, a file that is not a cosid store: see
/// [`Error::permanent`]), a namespace or layout mismatch, a bad configuration or argument fail
/// at once: waiting cannot cure them.
pub fn is_transient(e: &Error) -> bool {
    match e.kind() {
        ErrorKind::Exhausted => true,
        ErrorKind::Store => !e.is_permanent(),
        _ => false,
    }
}

#[derive(Debug)]
struct State {
    lease: Option<SlotLease>,
    /// The highest ceiling this runtime was ever granted: every later window starts above it.
    highest_ceiling: i64,
    /// Consecutive failures of the current renewal or acquisition.
    failures: u32,
    /// Monotonic time when the next renewal (or re-acquisition) is due.
    due: Duration,
    /// The last reading of the store's clock (ms) and the monotonic time it arrived: the base
    /// of the estimate a renewal uses instead of reading the slot first (see
    /// [`LeaseKeeper::store_now_estimate`]).
    store_clock: Option<(i64, Duration)>,
    closed: bool,
}

/// Keeps one runtime's lease alive and its window bound. Thread-safe.
#[derive(Debug)]
pub struct LeaseKeeper {
    client: LeaseClient,
    window: Arc<Window>,
    clock: SharedClock,
    config: KeeperConfig,
    /// One store operation at a time (see the module's "Locking").
    turn: Mutex<()>,
    state: Mutex<State>,
    events: Arc<EventBus>,
    counters: Arc<Counters>,
}

/// Proof that the caller holds the keeper's `turn`: the functions that call the store and apply
/// its answer take one.
struct Turn<'a> {
    _guard: std::sync::MutexGuard<'a, ()>,
}

/// Events raised while holding the turn, delivered once it is released.
type Pending = Vec<Event>;

impl LeaseKeeper {
    /// A keeper with its own (listener-less) event bus and counters: for simulations and tools
    /// that drive [`LeaseKeeper::tick`] themselves. See `LeaseKeeper::start`.
    pub fn start_standalone(
        client: LeaseClient,
        window: Arc<Window>,
        clock: SharedClock,
        config: KeeperConfig,
    ) -> Result<LeaseKeeper> {
        Self::start(
            client,
            window,
            clock,
            config,
            Arc::default(),
            Arc::default(),
        )
    }

    /// Opens the namespace and acquires a slot, retrying an exhausted namespace or an unreachable
    /// store for `acquire_timeout`; binds `window` on success.
    pub(crate) fn start(
        client: LeaseClient,
        window: Arc<Window>,
        clock: SharedClock,
        config: KeeperConfig,
        events: Arc<EventBus>,
        counters: Arc<Counters>,
    ) -> Result<LeaseKeeper> {
        let keeper = LeaseKeeper {
            client,
            window,
            clock,
            config,
            turn: Mutex::new(()),
            state: Mutex::new(State {
                lease: None,
                highest_ceiling: i64::MIN,
                failures: 0,
                due: Duration::ZERO,
                store_clock: None,
                closed: false,
            }),
            events,
            counters,
        };
        let started = keeper.clock.monotonic();
        let deadline = started + keeper.config.acquire_timeout;
        let mut attempt = 0;
        // The start-up acquisition is the caller's wait: an interrupt ends it.
        let _interruptible = crate::interrupt::section();
        loop {
            crate::interrupt::check("acquiring a slot")?;
            let mut pending = Pending::new();
            let result = {
                let turn = keeper.turn();
                // The acquisition checks the namespace record it reads (and creates or
                // completes it first when it must), so a start-up that finds the namespace as
                // it should be costs one read and one compare-and-set.
                keeper.acquire(&turn, &mut pending)
            };
            keeper.deliver(pending);
            if result.is_err() {
                crate::interrupt::check("acquiring a slot")?;
            }
            match result {
                Ok(()) => return Ok(keeper),
                Err(e) if is_transient(&e) => {
                    attempt += 1;
                    let now = keeper.clock.monotonic();
                    if now >= deadline {
                        return Err(Error::new(
                            e.kind(),
                            format!(
                                "no slot after {} (acquire-timeout): {}",
                                crate::time::format_duration(keeper.config.acquire_timeout),
                                e.message()
                            ),
                        ));
                    }
                    // A store that fails says what the start waits for, how long so far and
                    // how long at most; an exhausted namespace, that no slot is free.
                    keeper.events.emit(if e.kind() == ErrorKind::Store {
                        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
                        Event::StoreUnavailable {
                            attempt,
                            error: crate::bounds::quote_at_most(
                                &e.to_string(),
                                crate::bounds::MAX_DETAIL_CHARS,
                            ),
                            waited_ms: ms(now - started),
                            timeout_ms: ms(keeper.config.acquire_timeout),
                        }
                    } else {
                        Event::AcquireFailed {
                            error: e.to_string(),
                        }
                    });
                    crate::interrupt::sleep(
                        &*keeper.clock,
                        keeper.config.backoff(attempt).min(deadline - now),
                        "acquiring a slot",
                    )?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn turn(&self) -> Turn<'_> {
        Turn {
            _guard: self.turn.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }

    /// Hands events to the listeners; called with no lock of the keeper held.
    fn deliver(&self, pending: Pending) {
        for event in pending {
            self.events.emit(event);
        }
    }

    /// The current lease, if bound.
    pub fn lease(&self) -> Option<SlotLease> {
        self.lock().lease.clone()
    }

    /// The lease client (store and namespace).
    pub fn client(&self) -> &LeaseClient {
        &self.client
    }

    /// Acquires a slot and binds the window to it.
    fn acquire(&self, _turn: &Turn<'_>, pending: &mut Pending) -> Result<()> {
        let req = AcquireRequest {
            owner: self.config.owner.clone(),
            preferred_slot: self.config.preferred_slot,
            floor_at_least: self.lock().highest_ceiling.max(0),
        };
        let started_ms = self.clock.now_ms();
        let Acquisition {
            lease,
            duplicate_owner_key,
            ..
        } = self.client.acquire(&req)?;
        for slot in duplicate_owner_key {
            pending.push(Event::DuplicateOwnerKey {
                slot,
                key: self.config.owner.key.clone(),
            });
        }
        self.window.rebind(lease.slot, lease.floor, lease.ceiling);
        Counters::bump(&self.counters.acquisitions);
        self.check_skew(started_ms, lease.store_now, pending);
        pending.push(Event::SlotAcquired {
            slot: lease.slot,
            fence: lease.fence,
            floor_ms: lease.floor,
            ceiling_ms: lease.ceiling,
        });
        let mut st = self.lock();
        st.highest_ceiling = st.highest_ceiling.max(lease.ceiling);
        st.failures = 0;
        let now = self.clock.monotonic();
        st.due = now + self.config.renew_every();
        st.store_clock = Some((lease.store_now, now));
        st.lease = Some(lease);
        Ok(())
    }

    /// The store's clock now, estimated as the last reading of it plus the local monotonic time
    /// since it arrived; `None` when there is no reading, or when the last one is a ttl old or
    /// more (a store whose compare-and-set reports no clock: the renewal then reads the slot,
    /// and with it the clock, so the estimate is refreshed at least once per ttl).
    ///
    /// The estimate only decides when the renewed lease expires: see
    /// [`LeaseClient::renew_at`] for why it cannot make two windows overlap. The reading is
    /// taken as of the end of the call that returned it, so with the two clocks running at the
    /// same rate the estimate is never ahead of the store's clock at the renewal's write, and a
    /// lease never expires later than a renewal that read the clock first would have made it.
    fn store_now_estimate(st: &State, monotonic_now: Duration, ttl: Duration) -> Option<i64> {
        let (store_ms, at) = st.store_clock?;
        let since = monotonic_now.checked_sub(at)?;
        (since < ttl)
            .then(|| store_ms.saturating_add(i64::try_from(since.as_millis()).unwrap_or(i64::MAX)))
    }

    /// The store read its clock (`store_now`) somewhere between `started_ms` and now on our
    /// clock; only a reading outside that interval is skew. A slow call (a SQLite store waiting
    /// for its file lock, a slow network) is not.
    fn check_skew(&self, started_ms: i64, store_now: i64, pending: &mut Pending) {
        let skew = skew_ms(started_ms, store_now, self.clock.now_ms());
        if skew.saturating_abs() > self.client.terms().tolerance_ms / 2 {
            Counters::bump(&self.counters.clock_skew_events);
            pending.push(Event::ClockSkew { skew_ms: skew });
        }
    }

    /// Does whatever is due (renew, retry, re-acquire) and returns how long until the next step
    /// is due. Never blocks longer than one store call (plus the listeners of what it raised).
    pub fn tick(&self) -> Duration {
        let mut pending = Pending::new();
        let wait = {
            let turn = self.turn();
            self.step(&turn, &mut pending)
        };
        self.deliver(pending);
        wait
    }

    fn step(&self, turn: &Turn<'_>, pending: &mut Pending) -> Duration {
        let (lease, estimate) = {
            let st = self.lock();
            if st.closed {
                return Duration::from_secs(3600);
            }
            let now = self.clock.monotonic();
            if now < st.due {
                return st.due - now;
            }
            (
                st.lease.clone(),
                Self::store_now_estimate(&st, now, self.config.ttl),
            )
        };
        let started_ms = self.clock.now_ms();
        match lease {
            None => self.reacquire(turn, pending),
            // One round trip in the common case (a compare-and-set against the version of the
            // record we last wrote); a read first when there is no fresh estimate of the
            // store's clock, or when that compare-and-set writes nothing.
            Some(lease) => match match estimate {
                Some(now) => self.client.renew_at(&lease, now),
                None => self.client.renew(&lease),
            } {
                Ok(Renewal::Renewed(renewed)) => {
                    self.window.extend(renewed.ceiling);
                    Counters::bump(&self.counters.renewals);
                    let seen = renewed.store_clock_seen();
                    if seen {
                        self.check_skew(started_ms, renewed.store_now, pending);
                    }
                    let mut st = self.lock();
                    st.highest_ceiling = st.highest_ceiling.max(renewed.ceiling);
                    st.failures = 0;
                    let now = self.clock.monotonic();
                    st.due = now + self.config.renew_every();
                    if seen {
                        st.store_clock = Some((renewed.store_now, now));
                    }
                    st.lease = Some(renewed);
                }
                Ok(Renewal::Lost(refusal)) => {
                    self.window.set_status(WindowStatus::Lost);
                    Counters::bump(&self.counters.slots_lost);
                    let reason = match &refusal {
                        Refusal::Vanished => {
                            pending.push(Event::StoreReset { slot: lease.slot });
                            "the store has no record of the slot (restarted empty?)".to_string()
                        }
                        Refusal::MovedBack => {
                            pending.push(Event::StoreReset { slot: lease.slot });
                            "the store lost writes since this lease's last renewal (restarted \
                             from an older copy?); the record it holds now may not be the last \
                             one, so the slot is acquired again above the loss"
                                .to_string()
                        }
                        Refusal::NotHolder {
                            owner: Some(o),
                            fence,
                        } => {
                            format!("now held by {o} under fence {fence}")
                        }
                        Refusal::NotHolder { owner: None, fence } => {
                            format!("released by someone else (fence {fence})")
                        }
                    };
                    pending.push(Event::SlotLost {
                        slot: lease.slot,
                        reason,
                    });
                    {
                        let mut st = self.lock();
                        st.lease = None;
                        st.failures = 0;
                    }
                    self.reacquire(turn, pending);
                }
                Err(e) => {
                    Counters::bump(&self.counters.renewal_failures);
                    let mut st = self.lock();
                    st.failures += 1;
                    pending.push(Event::RenewalFailed {
                        slot: lease.slot,
                        attempt: st.failures,
                        error: e.to_string(),
                    });
                    st.due = self.clock.monotonic() + self.config.backoff(st.failures);
                }
            },
        }
        self.lock().due.saturating_sub(self.clock.monotonic())
    }

    fn reacquire(&self, turn: &Turn<'_>, pending: &mut Pending) {
        if let Err(e) = self.acquire(turn, pending) {
            pending.push(Event::AcquireFailed {
                error: e.to_string(),
            });
            let mut st = self.lock();
            st.failures += 1;
            st.due = self.clock.monotonic() + self.config.backoff(st.failures);
        }
    }

    /// Releases the slot, handing over `last_issued` (unit start ms of the last issued
    /// timestamp). Call only after every generator is closed. Idempotent.
    pub fn release(&self, last_issued: Option<i64>) -> Result<()> {
        let (lease, handed_over) = {
            let _turn = self.turn();
            let lease = {
                let mut st = self.lock();
                st.closed = true;
                st.lease.take()
            };
            self.window.set_status(WindowStatus::Closed);
            let Some(lease) = lease else {
                return Ok(());
            };
            let handed_over = self.client.release_handing_over(&lease, last_issued)?;
            (lease, handed_over)
        };
        if let Some(next_floor) = handed_over {
            self.deliver(vec![Event::SlotReleased {
                slot: lease.slot,
                next_floor_ms: next_floor,
            }]);
        }
        Ok(())
    }
}

/// How far the store's clock reading `store_now` lies outside `[started_ms, ended_ms]` of ours
/// (positive: the store is behind; 0 inside). Saturating: the store's clock is the store's word,
/// and a broken or hostile one may say anything, `i64::MIN` included.
fn skew_ms(started_ms: i64, store_now: i64, ended_ms: i64) -> i64 {
    if store_now < started_ms {
        started_ms.saturating_sub(store_now)
    } else if store_now > ended_ms {
        ended_ms.saturating_sub(store_now)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {

    //! The keeper under a manual clock: every wait is virtual, every step deterministic. The store
    //! is the real memory store; `Outage` wraps it to make it unreachable on demand (a fault
    //! injector in front of a real store, not a stand-in for one).
    use super::*;

    use crate::clock::{Clock, ManualClock};
    use crate::generator::Generator;
    use crate::lease::{AcquireRequest, Terms};
    use crate::store::hooked::{Call, Hook, Hooked, Reply};
    use crate::store::memory::MemoryStore;
    use crate::store::{SharedStore, SlotStore};
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn skew_is_outside_the_call_only_and_any_store_clock_is_measured() {
        assert_eq!(skew_ms(1_000, 1_500, 2_000), 0);
        assert_eq!(skew_ms(1_000, 400, 2_000), 600);
        assert_eq!(skew_ms(1_000, 2_700, 2_000), -700);
        assert_eq!(skew_ms(1_000, i64::MIN, 2_000), i64::MAX);
        assert_eq!(skew_ms(-1, i64::MAX, -1), i64::MIN);
        assert_eq!(skew_ms(i64::MIN, i64::MAX, i64::MIN), i64::MIN);
    }

    const T0: i64 = 1_800_000_000_000;
    const TTL: Duration = Duration::from_secs(30);
    const TERMS: Terms = Terms {
        ttl_ms: 30_000,
        tolerance_ms: 1_000,
    };

    #[derive(Debug)]
    struct Outage {
        down: AtomicBool,
        /// The local clock, and how long (ms) each call takes on it after the store read its
        /// clock (a SQLite store waiting for its file lock, say).
        local: Arc<ManualClock>,
        slow_ms: std::sync::atomic::AtomicU64,
        /// While true, every call waits (a store call hanging for its timeout); the count says
        /// how many calls are waiting.
        stalled: Mutex<(bool, u32)>,
        unstalled: std::sync::Condvar,
    }

    impl Outage {
        fn stall(&self, on: bool) {
            self.stalled.lock().unwrap().0 = on;
            self.unstalled.notify_all();
        }

        fn stalled_calls(&self) -> u32 {
            self.stalled.lock().unwrap().1
        }

        fn check(&self) -> Result<()> {
            let mut stalled = self.stalled.lock().unwrap();
            if stalled.0 {
                stalled.1 += 1;
                while stalled.0 {
                    stalled = self.unstalled.wait(stalled).unwrap();
                }
                stalled.1 -= 1;
            }
            drop(stalled);
            if self.down.load(Ordering::SeqCst) {
                return Err(Error::store("store unreachable (test outage)"));
            }
            Ok(())
        }

        fn took<T>(&self, r: T) -> T {
            let ms = self.slow_ms.load(Ordering::SeqCst);
            self.local.advance(Duration::from_millis(ms));
            r
        }
    }

    impl Hook for Outage {
        fn call(&self, inner: &dyn SlotStore, call: Call<'_>) -> Result<Reply> {
            self.check()?;
            self.took(call.on(inner))
        }

        fn describe(&self, _: &dyn SlotStore) -> String {
            "outage:".into()
        }
    }

    struct Rig {
        clock: Arc<ManualClock>,
        store: Arc<Hooked<Outage>>,
        /// The memory store behind `store`.
        memory: Arc<MemoryStore>,
        window: Arc<Window>,
        events: Arc<Mutex<Vec<Event>>>,
        /// The monotonic time of each event in `events`.
        times: Arc<Mutex<Vec<Duration>>>,
        counters: Arc<Counters>,
    }

    fn rig(store_clock: Option<Arc<ManualClock>>) -> Rig {
        let clock = ManualClock::shared(T0);
        let sc: SharedClock = match store_clock {
            Some(c) => c,
            None => clock.clone(),
        };
        let memory = MemoryStore::new(sc);
        Rig {
            store: Hooked::new(
                memory.clone(),
                Outage {
                    down: AtomicBool::new(false),
                    local: clock.clone(),
                    slow_ms: Default::default(),
                    stalled: Mutex::new((false, 0)),
                    unstalled: Default::default(),
                },
            ),
            memory,
            clock,
            window: Arc::new(Window::new()),
            events: Arc::default(),
            times: Arc::default(),
            counters: Arc::default(),
        }
    }

    impl Rig {
        fn client(&self, bits: u8) -> LeaseClient {
            LeaseClient::new(self.store.clone() as SharedStore, "k", bits, TERMS).unwrap()
        }

        fn start(&self, bits: u8, owner: &str, acquire_timeout: Duration) -> Result<LeaseKeeper> {
            let bus = Arc::new(EventBus::default());
            let (sink, times, clock) =
                (self.events.clone(), self.times.clone(), self.clock.clone());
            bus.subscribe(Arc::new(move |e: &Event| {
                sink.lock().unwrap().push(e.clone());
                times.lock().unwrap().push(clock.monotonic());
            }));
            LeaseKeeper::start(
                self.client(bits),
                self.window.clone(),
                self.clock.clone(),
                KeeperConfig {
                    ttl: TTL,
                    acquire_timeout,
                    preferred_slot: None,
                    owner: Owner::new(owner),
                },
                bus,
                self.counters.clone(),
            )
        }

        /// The `skew_ms` of every ClockSkew event so far.
        fn skews(&self) -> Vec<i64> {
            self.events
                .lock()
                .unwrap()
                .iter()
                .filter_map(|e| match e {
                    Event::ClockSkew { skew_ms } => Some(*skew_ms),
                    _ => None,
                })
                .collect()
        }

        /// When each event called `name` came, in ms after `since` (monotonic).
        fn times_of(&self, name: &str, since: Duration) -> Vec<u128> {
            let events = self.events.lock().unwrap();
            let times = self.times.lock().unwrap();
            events
                .iter()
                .zip(times.iter())
                .filter(|(e, _)| e.name() == name)
                .map(|(_, t)| (*t - since).as_millis())
                .collect()
        }

        fn names(&self) -> Vec<&'static str> {
            self.events
                .lock()
                .unwrap()
                .iter()
                .map(Event::name)
                .collect()
        }
    }

    #[test]
    fn renews_every_third_of_the_ttl_and_extends_the_window() {
        let r = rig(None);
        let k = r.start(2, "a", TTL).unwrap();
        let first = k.lease().unwrap();
        assert_eq!(k.tick(), TTL / 3, "nothing due right after acquiring");
        r.clock.advance(TTL / 3 - Duration::from_millis(1));
        assert_eq!(k.tick(), Duration::from_millis(1));
        assert_eq!(r.counters.renewals.load(Ordering::Relaxed), 0);
        r.clock.advance(Duration::from_millis(1));
        assert_eq!(k.tick(), TTL / 3);
        assert_eq!(r.counters.renewals.load(Ordering::Relaxed), 1);
        let renewed = k.lease().unwrap();
        assert_eq!(renewed.fence, first.fence);
        assert_eq!(renewed.ceiling, first.ceiling + 10_000);
        assert_eq!(r.window.read().ceiling, renewed.ceiling);
    }

    #[test]
    fn failed_renewals_back_off_from_100ms_to_a_sixth_of_the_ttl_while_ids_flow() {
        let r = rig(None);
        let k = r.start(2, "a", TTL).unwrap();
        let g = Generator::new(
            "",
            crate::Layout::MILLIS,
            r.window.clone(),
            r.clock.clone(),
            Duration::from_millis(50),
        );
        r.store.down.store(true, Ordering::SeqCst);
        r.clock.advance(TTL / 3);
        let mut waits = Vec::new();
        for _ in 0..8 {
            let wait = k.tick();
            waits.push(wait.as_millis());
            g.next().expect("ids keep flowing up to the ceiling");
            r.clock.advance(wait);
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(r.counters.renewal_failures.load(Ordering::Relaxed), 8);
        assert!(r.names().iter().filter(|n| **n == "renewal_failed").count() == 8);
        // Past the ceiling the generator waits, then fails with WindowClosed: never past it.
        r.clock.set(r.window.read().ceiling + 1);
        assert_eq!(g.next().unwrap_err().kind(), ErrorKind::WindowClosed);
        // The store is back: the next renewal extends the window and ids flow again.
        r.store.down.store(false, Ordering::SeqCst);
        r.clock.advance(Duration::from_secs(5));
        k.tick();
        g.next().unwrap();
    }

    #[test]
    fn a_lost_lease_invalidates_the_window_then_rebinds_above_every_granted_ceiling() {
        let r = rig(None);
        let k = r.start(1, "a", TTL).unwrap();
        let old = k.lease().unwrap();
        // The keeper sleeps past the expiry (a long pause); someone else takes the slot.
        r.clock.advance(TTL + Duration::from_secs(1));
        let thief = r
            .client(1)
            .acquire(&AcquireRequest {
                owner: Owner::new("b"),
                preferred_slot: Some(old.slot),
                floor_at_least: 0,
            })
            .unwrap();
        assert_eq!(thief.lease.slot, old.slot);
        assert!(thief.lease.floor >= old.ceiling);
        k.tick();
        assert!(r.names().contains(&"slot_lost"));
        let new = k.lease().expect("rebound to the other slot");
        assert_ne!(new.slot, old.slot);
        assert!(
            new.floor >= old.ceiling,
            "new window starts above the old ceiling"
        );
        assert_eq!(r.window.read().slot, new.slot);
        assert_eq!(r.counters.slots_lost.load(Ordering::Relaxed), 1);
        assert_eq!(r.counters.acquisitions.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_store_restarted_empty_is_reported_and_never_yields_an_overlapping_window() {
        let r = rig(None);
        let k = r.start(2, "a", TTL).unwrap();
        let old = k.lease().unwrap();
        r.memory.wipe();
        r.clock.advance(TTL / 3);
        k.tick();
        let names = r.names();
        assert!(
            names.contains(&"store_reset") && names.contains(&"slot_lost"),
            "{names:?}"
        );
        let new = k.lease().unwrap();
        assert!(new.floor >= old.ceiling, "{} < {}", new.floor, old.ceiling);
    }

    #[test]
    fn start_up_retries_an_exhausted_namespace_for_the_acquire_timeout_then_fails() {
        let r = rig(None);
        let _holder = r.start(0, "holder", TTL).unwrap();
        let t0 = r.clock.monotonic();
        let e = r.start(0, "late", Duration::from_secs(2)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
        assert!(e.message().contains("acquire-timeout"), "{e}");
        assert_eq!(r.clock.monotonic() - t0, Duration::from_secs(2));
        assert!(r.names().contains(&"acquire_failed"));
    }

    /// A start-up that cannot reach its store says so at each attempt with `store_unavailable`:
    /// the error, the attempt, how long it has waited and how long it waits at most; an
    /// exhausted namespace stays `acquire_failed`.
    #[test]
    fn start_up_says_it_waits_for_an_unreachable_store_and_for_how_long() {
        let r = rig(None);
        r.store.down.store(true, Ordering::SeqCst);
        let e = r.start(0, "a", Duration::from_secs(2)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store, "{e}");
        let events = r.events.lock().unwrap().clone();
        let said: Vec<_> = events
            .iter()
            .map(|e| match e {
                Event::StoreUnavailable {
                    attempt,
                    error,
                    waited_ms,
                    timeout_ms,
                } => {
                    assert!(error.contains("unreachable"), "{error}");
                    assert_eq!(*timeout_ms, 2_000);
                    (*attempt, *waited_ms)
                }
                other => panic!("only store_unavailable: {other:?}"),
            })
            .collect();
        assert_eq!(said, [(1, 0), (2, 100), (3, 300), (4, 700), (5, 1500)]);
        assert!(
            events[4].to_string().contains("at most 2.0 s"),
            "{}",
            events[4]
        );
    }

    #[test]
    fn start_up_retries_back_off_from_100ms_up_to_the_acquire_timeout() {
        let r = rig(None);
        let _holder = r.start(0, "holder", TTL).unwrap();
        let t0 = r.clock.monotonic();
        r.start(0, "late", Duration::from_secs(2)).unwrap_err();
        // Attempts at 0, 0.1, 0.3, 0.7 and 1.5 s failed (reported), the one at 2 s ended it.
        assert_eq!(
            r.times_of("acquire_failed", t0),
            [0, 100, 300, 700, 1500],
            "the waits between attempts double from 100 ms"
        );
    }

    #[test]
    fn a_failed_reacquisition_backs_off_like_a_failed_renewal() {
        let r = rig(None);
        let k = r.start(0, "a", TTL).unwrap();
        // The lease expires during a long pause and the one slot goes to someone else.
        r.clock.advance(TTL + Duration::from_secs(1));
        r.client(0)
            .acquire(&AcquireRequest {
                owner: Owner::new("b"),
                preferred_slot: None,
                floor_at_least: 0,
            })
            .unwrap();
        let mut waits = Vec::new();
        for _ in 0..8 {
            let wait = k.tick();
            waits.push(wait.as_millis());
            r.clock.advance(wait);
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert!(k.lease().is_none());
        assert_eq!(r.names().iter().filter(|n| **n == "slot_lost").count(), 1);
        assert_eq!(r.times_of("acquire_failed", Duration::ZERO).len(), 8);
    }

    #[test]
    fn start_up_gets_the_slot_once_the_holder_expires_within_the_timeout() {
        let r = rig(None);
        let holder = r.start(0, "holder", TTL).unwrap();
        let held = holder.lease().unwrap();
        let late = r.start(0, "late", Duration::from_secs(60)).unwrap();
        let got = late.lease().unwrap();
        assert_eq!(got.slot, held.slot);
        assert!(got.floor >= held.ceiling);
    }

    #[test]
    fn an_unreachable_store_at_start_is_retried_then_reported() {
        let r = rig(None);
        r.store.down.store(true, Ordering::SeqCst);
        let e = r.start(2, "a", Duration::from_millis(500)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store);
        assert!(e.message().contains("500ms"), "{e}");
    }

    #[test]
    fn skew_beyond_half_the_tolerance_raises_an_event() {
        let store_clock = ManualClock::shared(T0 - 2_000);
        let r = rig(Some(store_clock.clone()));
        let k = r.start(2, "a", TTL).unwrap();
        assert_eq!(r.skews(), [2_000]);
        // Within tolerance/2: no event.
        store_clock.set(r.clock.now_ms() - 400);
        r.clock.advance(TTL / 3);
        store_clock.advance(TTL / 3);
        k.tick();
        assert_eq!(r.counters.clock_skew_events.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_store_clock_ahead_is_skew_too_with_its_sign_and_half_the_tolerance_is_not() {
        // The store reads 2 s ahead of us: our clock minus the store's, -2000 ms.
        let store_clock = ManualClock::shared(T0 + 2_000);
        let r = rig(Some(store_clock.clone()));
        let k = r.start(2, "a", TTL).unwrap();
        assert_eq!(r.skews(), [-2_000]);
        // Exactly half the tolerance (500 ms) ahead is within it: no event.
        store_clock.set(r.clock.now_ms() + TTL.as_millis() as i64 / 3 + 500);
        r.clock.advance(TTL / 3);
        k.tick();
        assert_eq!(r.skews(), [-2_000]);
        // One millisecond more is beyond it.
        store_clock.set(r.clock.now_ms() + TTL.as_millis() as i64 / 3 + 501);
        r.clock.advance(TTL / 3);
        k.tick();
        assert_eq!(r.skews(), [-2_000, -501]);
    }

    #[test]
    fn a_slow_store_call_is_not_clock_skew() {
        // The store's clock is ours, but every call takes 3 s after it read it (a SQLite store
        // waiting for its file's lock): the reading lies inside the call, so it is no skew.
        let r = rig(None);
        r.store.slow_ms.store(3_000, Ordering::SeqCst);
        let k = r.start(2, "a", TTL).unwrap();
        r.clock.advance(TTL / 3);
        k.tick();
        assert!(k.lease().is_some());
        assert_eq!(r.counters.clock_skew_events.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn only_errors_that_may_go_away_are_retried() {
        assert!(is_transient(&Error::new(ErrorKind::Exhausted, "all held")));
        assert!(is_transient(&Error::store("connection refused")));
        assert!(!is_transient(&Error::store("read-only file").permanent()));
        for kind in ErrorKind::ALL {
            if !matches!(kind, ErrorKind::Exhausted | ErrorKind::Store) {
                assert!(!is_transient(&Error::new(kind, "x")), "{kind}");
            }
        }
    }

    #[test]
    fn a_permanent_store_error_fails_start_up_at_once() {
        /// Every write fails as SQLite's does on a read-only file.
        #[derive(Debug)]
        struct ReadOnly;
        impl Hook for ReadOnly {
            fn call(&self, inner: &dyn SlotStore, call: Call<'_>) -> Result<Reply> {
                match call {
                    Call::Snapshot { .. } | Call::ReadSlot { .. } => call.on(inner),
                    _ => Err(Error::store("attempt to write a readonly database").permanent()),
                }
            }

            fn describe(&self, _: &dyn SlotStore) -> String {
                "read-only:".into()
            }
        }
        let clock = ManualClock::shared(T0);
        let store: SharedStore = Hooked::new(MemoryStore::new(clock.clone()), ReadOnly);
        let e = LeaseKeeper::start_standalone(
            LeaseClient::new(store, "k", 2, TERMS).unwrap(),
            Arc::new(Window::new()),
            clock.clone(),
            KeeperConfig {
                ttl: TTL,
                acquire_timeout: Duration::from_secs(600),
                preferred_slot: None,
                owner: Owner::new("a"),
            },
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store);
        assert!(e.message().contains("readonly"), "{e}");
        // The manual clock moves only when start-up sleeps between attempts: it never did.
        assert_eq!(clock.now_ms(), T0);
    }

    #[test]
    fn the_lease_is_readable_while_a_renewal_hangs_in_the_store() {
        let r = rig(None);
        let k = Arc::new(r.start(2, "a", TTL).unwrap());
        let first = k.lease().unwrap();
        r.store.stall(true);
        r.clock.advance(TTL / 3);
        let ticking = std::thread::spawn({
            let k = k.clone();
            move || k.tick()
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while r.store.stalled_calls() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the renewal never reached the store"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // The renewal is inside its store call: reading the lease must not wait for it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn({
            let k = k.clone();
            move || tx.send(k.lease()).unwrap()
        });
        let seen = rx.recv_timeout(Duration::from_secs(10));
        r.store.stall(false);
        ticking.join().unwrap();
        let seen = seen.expect("lease() waited for the store call in flight");
        assert_eq!(seen.unwrap().fence, first.fence);
        assert!(
            k.lease().unwrap().ceiling > first.ceiling,
            "the renewal then applied"
        );
    }

    #[test]
    fn a_listener_may_call_the_keeper_and_release_it() {
        let r = rig(None);
        let keeper: Arc<std::sync::OnceLock<Arc<LeaseKeeper>>> = Arc::default();
        // (event, the lease's slot as the listener saw it, whether its release succeeded)
        type Seen = Vec<(&'static str, Option<u32>, bool)>;
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let bus = Arc::new(EventBus::default());
        bus.subscribe(Arc::new({
            let (keeper, seen) = (keeper.clone(), seen.clone());
            move |e: &Event| {
                if let Some(k) = keeper.get() {
                    let slot = k.lease().map(|l| l.slot);
                    let released = e.name() == "renewal_failed" && k.release(None).is_ok();
                    seen.lock().unwrap().push((e.name(), slot, released));
                }
            }
        }));
        let k = LeaseKeeper::start(
            r.client(2),
            r.window.clone(),
            r.clock.clone(),
            KeeperConfig {
                ttl: TTL,
                acquire_timeout: TTL,
                preferred_slot: None,
                owner: Owner::new("a"),
            },
            bus,
            r.counters.clone(),
        )
        .unwrap();
        let k = keeper.get_or_init(|| Arc::new(k)).clone();
        let slot = k.lease().unwrap().slot;
        r.store.down.store(true, Ordering::SeqCst);
        r.clock.advance(TTL / 3);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn({
            let k = k.clone();
            move || tx.send(k.tick()).unwrap()
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a listener calling the keeper deadlocked the step");
        // The listener saw the lease and released it; the release (store down) failed, and
        // left the keeper closed with the window closed.
        assert_eq!(
            seen.lock().unwrap().as_slice(),
            &[("renewal_failed", Some(slot), false)]
        );
        assert_eq!(r.window.read().status, WindowStatus::Closed);
        assert!(k.lease().is_none());
    }

    #[test]
    fn a_duplicate_owner_key_is_never_taken_over_and_is_reported() {
        let r = rig(None);
        let a = r.start(2, "same:1", TTL).unwrap();
        let b = r.start(2, "same:1", TTL).unwrap();
        assert_ne!(a.lease().unwrap().slot, b.lease().unwrap().slot);
        assert!(r.names().contains(&"duplicate_owner_key"));
    }

    #[test]
    fn release_hands_over_the_last_issued_timestamp_and_stops_the_keeper() {
        let r = rig(None);
        let k = r.start(2, "a", TTL).unwrap();
        let lease = k.lease().unwrap();
        k.release(Some(T0 + 5)).unwrap();
        assert_eq!(r.window.read().status, WindowStatus::Closed);
        let (_, rec) = r.store.read_slot("k", lease.slot).unwrap();
        assert_eq!(rec.unwrap().value.next_floor, T0 + 5);
        assert_eq!(r.names().last(), Some(&"slot_released"));
        // Nothing more happens after release.
        r.clock.advance(TTL);
        k.tick();
        assert_eq!(r.counters.renewals.load(Ordering::Relaxed), 0);
        k.release(None).unwrap();
    }
}
