//! The `LeaseKeeper`: one per runtime, shared by all its generators (D18).
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
//! - There is no switch to keep issuing after the lease is lost (P1).

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

#[derive(Debug)]
struct State {
    lease: Option<SlotLease>,
    /// The highest ceiling this runtime was ever granted: every later window starts above it.
    highest_ceiling: i64,
    /// Consecutive failures of the current renewal or acquisition.
    failures: u32,
    /// Monotonic time when the next renewal (or re-acquisition) is due.
    due: Duration,
    closed: bool,
}

/// Keeps one runtime's lease alive and its window bound. Thread-safe.
#[derive(Debug)]
pub struct LeaseKeeper {
    client: LeaseClient,
    window: Arc<Window>,
    clock: SharedClock,
    config: KeeperConfig,
    state: Mutex<State>,
    events: Arc<EventBus>,
    counters: Arc<Counters>,
}

impl LeaseKeeper {
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
            state: Mutex::new(State {
                lease: None,
                highest_ceiling: i64::MIN,
                failures: 0,
                due: Duration::ZERO,
                closed: false,
            }),
            events,
            counters,
        };
        let deadline = keeper.clock.monotonic() + keeper.config.acquire_timeout;
        let mut attempt = 0;
        loop {
            let result = keeper
                .client
                .open_namespace()
                .and_then(|_| keeper.acquire_and_bind());
            match result {
                Ok(()) => return Ok(keeper),
                Err(e) if matches!(e.kind(), ErrorKind::Exhausted | ErrorKind::Store) => {
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
                    keeper.events.emit(Event::AcquireFailed {
                        error: e.to_string(),
                    });
                    keeper
                        .clock
                        .sleep(keeper.config.backoff(attempt).min(deadline - now));
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current lease, if bound.
    pub fn lease(&self) -> Option<SlotLease> {
        self.lock().lease.clone()
    }

    /// The lease client (store and namespace).
    pub fn client(&self) -> &LeaseClient {
        &self.client
    }

    fn acquire_and_bind(&self) -> Result<()> {
        let mut st = self.lock();
        self.acquire_locked(&mut st)
    }

    fn acquire_locked(&self, st: &mut State) -> Result<()> {
        let req = AcquireRequest {
            owner: self.config.owner.clone(),
            preferred_slot: self.config.preferred_slot,
            floor_at_least: st.highest_ceiling.max(0),
        };
        let Acquisition {
            lease,
            duplicate_owner_key,
            ..
        } = self.client.acquire(&req)?;
        for slot in duplicate_owner_key {
            self.events.emit(Event::DuplicateOwnerKey {
                slot,
                key: self.config.owner.key.clone(),
            });
        }
        self.window.rebind(lease.slot, lease.floor, lease.ceiling);
        st.highest_ceiling = st.highest_ceiling.max(lease.ceiling);
        st.failures = 0;
        st.due = self.clock.monotonic() + self.config.renew_every();
        Counters::bump(&self.counters.acquisitions);
        self.check_skew(lease.store_now);
        self.events.emit(Event::SlotAcquired {
            slot: lease.slot,
            fence: lease.fence,
            floor: lease.floor,
            ceiling: lease.ceiling,
        });
        st.lease = Some(lease);
        Ok(())
    }

    fn check_skew(&self, store_now: i64) {
        let skew = self.clock.now_ms() - store_now;
        if skew.abs() > self.client.terms().tolerance_ms / 2 {
            Counters::bump(&self.counters.clock_skew_events);
            self.events.emit(Event::ClockSkew { skew_ms: skew });
        }
    }

    /// Does whatever is due (renew, retry, re-acquire) and returns how long until the next step
    /// is due. Never blocks longer than one store call.
    pub fn tick(&self) -> Duration {
        let mut st = self.lock();
        if st.closed {
            return Duration::from_secs(3600);
        }
        let now = self.clock.monotonic();
        if now < st.due {
            return st.due - now;
        }
        match st.lease.clone() {
            None => self.reacquire(&mut st),
            Some(lease) => match self.client.renew(&lease) {
                Ok(Renewal::Renewed(renewed)) => {
                    self.window.extend(renewed.ceiling);
                    st.highest_ceiling = st.highest_ceiling.max(renewed.ceiling);
                    st.failures = 0;
                    st.due = self.clock.monotonic() + self.config.renew_every();
                    Counters::bump(&self.counters.renewals);
                    self.check_skew(renewed.store_now);
                    st.lease = Some(renewed);
                }
                Ok(Renewal::Lost(refusal)) => {
                    self.window.set_status(WindowStatus::Lost);
                    Counters::bump(&self.counters.slots_lost);
                    let reason = match &refusal {
                        Refusal::Vanished => {
                            self.events.emit(Event::StoreReset { slot: lease.slot });
                            "the store has no record of the slot (restarted empty?)".to_string()
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
                    self.events.emit(Event::SlotLost {
                        slot: lease.slot,
                        reason,
                    });
                    st.lease = None;
                    st.failures = 0;
                    self.reacquire(&mut st);
                }
                Err(e) => {
                    st.failures += 1;
                    Counters::bump(&self.counters.renewal_failures);
                    self.events.emit(Event::RenewalFailed {
                        slot: lease.slot,
                        attempt: st.failures,
                        error: e.to_string(),
                    });
                    st.due = self.clock.monotonic() + self.config.backoff(st.failures);
                }
            },
        }
        st.due.saturating_sub(self.clock.monotonic())
    }

    fn reacquire(&self, st: &mut State) {
        if let Err(e) = self.acquire_locked(st) {
            st.failures += 1;
            self.events.emit(Event::AcquireFailed {
                error: e.to_string(),
            });
            st.due = self.clock.monotonic() + self.config.backoff(st.failures);
        }
    }

    /// Releases the slot, handing over `last_issued` (unit start ms of the last issued
    /// timestamp). Call only after every generator is closed. Idempotent.
    pub(crate) fn release(&self, last_issued: Option<i64>) -> Result<()> {
        let mut st = self.lock();
        st.closed = true;
        self.window.set_status(WindowStatus::Closed);
        let Some(lease) = st.lease.take() else {
            return Ok(());
        };
        if self.client.release(&lease, last_issued)? {
            let next_floor = lease
                .floor
                .max(last_issued.unwrap_or(lease.floor).min(lease.ceiling));
            self.events.emit(Event::SlotReleased {
                slot: lease.slot,
                next_floor,
            });
        }
        Ok(())
    }
}
