//! Deterministic simulation of the slot lease under clock faults, pauses and crashes: the core
//! that `simulation.rs` (the protocol as written) and `mutations.rs` (the protocol with a
//! deliberate bug, which must fail) both run.
//!
//! Many simulated instances share one store. Each has its own manual clock (skewed ahead or
//! behind, jumping, frozen), its own real `LeaseKeeper` and `Generator`; the store has a clock of
//! its own that jumps too. A seeded generator picks every step, so a run is a pure function of
//! its seed.
//!
//! The store is the real memory store behind a recorder that sees every record written by a
//! successful compare-and-set: every window the store grants (acquisitions and renewals) and
//! every release. With the instances' clean releases (and the last timestamp each says it
//! issued) and every id issued (with the lease its instance held), that is a trace for
//! `cosid_core::lease::invariants`, checked after every step:
//!
//! 1. windows granted on a slot to different holders (incarnation and fence) are disjoint;
//! 2. no (slot, time unit) is issued by two holders;
//! 3. every id lies in the window its holder was granted, on its slot, before any release;
//! 4. no id is issued twice.
//!
//! **A store that loses its data** (one seed in four): the store forgets acknowledged writes,
//! as a `FLUSHALL` (a wipe on a server that keeps running), a restart without its data (a
//! wipe, and the server reports its start), a restart that kept the namespace record but lost
//! the slot records' writes (the server reports its start; no namespace is created again, so
//! only the guard's floor after a restart keeps newcomers above the lost ceilings), or a restart
//! from an older snapshot (every record as it was some steps ago, at most back to the last
//! loss; the server reports its start). The clients run with the restart guard,
//! the store says that a new namespace may be a lost one (as every network store does), and the
//! checker decides as for every other fault: the old holders' windows still count up to their
//! ceilings, so a newcomer's window on their slot must start above them. In those seeds the
//! store's clock does not jump: the guard bounds the lost ceilings by the store's clock, which a
//! store clock set back across the loss would break, and a jump ahead makes a holder's estimate
//! of it lag, the one case of a record brought back that a one-round-trip renewal cannot see
//! (`docs/stores.md`, "What remains"). Versions never repeat across a loss here; a store whose
//! versions restart (etcd) keeps them apart by its lineage, tested against etcd itself.

#![allow(dead_code)]

use cosid_core::clock::{Clock, ManualClock, SharedClock};
use cosid_core::lease::invariants::{Checker, Holder, Invariant, Step};
use cosid_core::lease::{KeeperConfig, LeaseClient, LeaseKeeper, Owner, SlotRecord, Terms};
use cosid_core::store::hooked::{Call, Hook, Hooked, Reply};
use cosid_core::store::memory::{MemorySaved, MemoryStore};
use cosid_core::store::{SharedStore, SlotStore, Written};
use cosid_core::{Generator, Layout, TryNext, Window};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Steps per seed.
pub const STEPS: usize = 400;

/// How many seeds a run covers: `COSID_SIM_SEEDS` or 3000.
pub fn seeds_from_env() -> u64 {
    match std::env::var("COSID_SIM_SEEDS") {
        Ok(s) => s.parse().unwrap_or_else(|_| {
            panic!("COSID_SIM_SEEDS='{s}' is not a number of seeds; set it to e.g. 3000")
        }),
        Err(_) => 3000,
    }
}

/// splitmix64: small, fast, and enough for choosing steps.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn signed(&mut self, max: i64) -> i64 {
        self.below(2 * max as u64 + 1) as i64 - max
    }
}

/// The real memory store, recording every slot record a successful compare-and-set wrote. Not a
/// stand-in: every call goes to the memory store unchanged. With `clockless` (chosen per seed)
/// it drops the clock `cas_slot_timed` reports, as a store that cannot read its clock with a
/// compare-and-set would: the keepers then renew from their estimate of the store's clock and
/// read the slot about once per ttl.
#[derive(Debug)]
struct Recorder {
    written: Mutex<Vec<SlotRecord>>,
    clockless: bool,
    /// Renewals and releases written by one compare-and-set against the version the holder
    /// last wrote (the one-round-trip path: `cas_slot_timed`, or a `cas_slot` not preceded by a
    /// read of the slot).
    one_trip: Mutex<usize>,
    /// Whether the last call was a read of a slot (so the next compare-and-set is a fallback).
    after_read: Mutex<bool>,
    /// Whether this seed's store loses data (and so says a new namespace may be a lost one).
    loses_data: bool,
    /// When the store last lost writes by restarting (what `started_at` reports).
    restarted_at: Mutex<Option<i64>>,
}

impl Hook for Recorder {
    fn started_at(
        &self,
        _inner: &dyn SlotStore,
        _namespace: &str,
    ) -> cosid_core::Result<Option<i64>> {
        Ok(*self.restarted_at.lock().unwrap())
    }

    fn may_forget_namespaces(&self, _inner: &dyn SlotStore) -> bool {
        self.loses_data
    }

    fn call(&self, inner: &dyn SlotStore, call: Call<'_>) -> cosid_core::Result<Reply> {
        match call {
            Call::ReadSlot { .. } => {
                *self.after_read.lock().unwrap() = true;
                call.on(inner)
            }
            Call::CasSlot { namespace, write } => {
                let after_read = std::mem::take(&mut *self.after_read.lock().unwrap());
                let written = inner.cas_slot(namespace, write)?;
                if written.is_some() {
                    // A release (no owner) written without reading the slot first.
                    if !after_read && write.record.owner.is_none() {
                        *self.one_trip.lock().unwrap() += 1;
                    }
                    self.written.lock().unwrap().push(write.record.clone());
                }
                Ok(Reply::Version(written))
            }
            Call::CasSlotTimed { namespace, write } => {
                *self.after_read.lock().unwrap() = false;
                let written = inner.cas_slot_timed(namespace, write)?;
                if written.is_some() {
                    *self.one_trip.lock().unwrap() += 1;
                    self.written.lock().unwrap().push(write.record.clone());
                }
                Ok(Reply::Written(written.map(|w| Written {
                    store_now: if self.clockless { None } else { w.store_now },
                    ..w
                })))
            }
            // `CasFirstSlot` never reaches this hook: it sees each write as a `CasSlot`
            // (`Hook::sees_each_write`).
            Call::Snapshot { .. }
            | Call::CasNamespace { .. }
            | Call::Candidates { .. }
            | Call::CasFirstSlot { .. } => call.on(inner),
        }
    }
}

struct Live {
    keeper: LeaseKeeper,
    generator: Generator,
    owner: Owner,
}

struct Instance {
    key: String,
    clock: Arc<ManualClock>,
    frozen: bool,
    paused_for: u32,
    live: Option<Live>,
}

/// What one seed did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Ids issued.
    pub ids: usize,
    /// Windows the store granted (acquisitions and renewals).
    pub grants: usize,
    /// Of those, renewals (a grant to a holder granted before).
    pub renewals: usize,
    /// Clean releases.
    pub releases: usize,
    /// Renewals and releases written in one round trip (a compare-and-set against the version
    /// the holder last wrote, no read first).
    pub one_trip: usize,
    /// Times the store lost its data (wiped, restarted empty or from an older snapshot).
    pub losses: usize,
}

/// A seed whose run broke an invariant.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// Which invariant.
    pub invariant: Invariant,
    /// The violation and the tail of the step log.
    pub message: String,
}

struct Sim {
    rng: Rng,
    layout: Layout,
    store: SharedStore,
    recorder: Arc<Hooked<Recorder>>,
    /// The memory store behind the recorder, for the data-loss faults.
    memory: Arc<MemoryStore>,
    /// A copy of the store taken some steps ago: what a restore from an old snapshot brings
    /// back.
    saved: MemorySaved,
    store_clock: Arc<ManualClock>,
    bits: u8,
    terms: Terms,
    instances: Vec<Instance>,
    /// The last record written per slot (to know whose ownership a release ended).
    records: HashMap<u32, SlotRecord>,
    /// Every holder granted a window so far.
    holders: HashSet<Holder>,
    /// For each `(slot, incarnation, fence)`, the number of the tenure (acquisition) its
    /// latest grant belongs to: a store that lost its records counts fences again, so one
    /// incarnation can be granted the same slot under the same fence before and after a loss,
    /// and the checker must see two holders (see [`Sim::tagged`]).
    tenures: HashMap<Holder, u64>,
    next_tenure: u64,
    checker: Checker,
    outcome: Outcome,
    log: Vec<String>,
    /// The source of the owners' incarnations: seeded (a stream of its own, so the steps drawn
    /// from `rng` are those of the seed whatever the incarnations), so a slot choice derived
    /// from an incarnation is the same on every replay.
    incarnations: Rng,
}

const T0: i64 = 1_800_000_000_000;

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng(seed);
        let layout = [
            Layout::MILLIS,
            Layout::SECONDS,
            Layout::SAFE_JS_MILLIS,
            Layout::SAFE_JS_SECONDS,
        ][rng.below(4) as usize];
        let store_clock = ManualClock::shared(T0);
        let memory = MemoryStore::new(store_clock.clone() as SharedClock);
        let recorder = Hooked::new(
            memory.clone(),
            Recorder {
                written: Mutex::new(Vec::new()),
                clockless: seed % 4 == 3,
                one_trip: Mutex::new(0),
                after_read: Mutex::new(false),
                loses_data: seed % 4 == 1,
                restarted_at: Mutex::new(None),
            },
        );
        let bits = 1 + rng.below(2) as u8;
        let terms = Terms {
            ttl_ms: 200 + rng.below(1800) as i64,
            tolerance_ms: 20 + rng.below(500) as i64,
        };
        let n = 2 + rng.below(5) as usize;
        let instances = (0..n)
            .map(|i| Instance {
                // Two instances share a key sometimes: the duplicate-owner-key case.
                key: format!("host-{}", if i > 0 && rng.chance(20) { i - 1 } else { i }),
                clock: ManualClock::shared(T0 + rng.signed(3 * terms.tolerance_ms)),
                frozen: false,
                paused_for: 0,
                live: None,
            })
            .collect();
        Sim {
            rng,
            layout,
            store: recorder.clone(),
            recorder,
            memory,
            saved: MemorySaved::default(),
            store_clock,
            bits,
            terms,
            instances,
            records: HashMap::new(),
            holders: HashSet::new(),
            tenures: HashMap::new(),
            next_tenure: 0,
            checker: Checker::new(),
            outcome: Outcome::default(),
            log: Vec::new(),
            incarnations: Rng(seed ^ 0x1AC4_0A71_0000_0001),
        }
    }

    /// `h` told apart from a holder of the same `(slot, incarnation, fence)` in another
    /// tenure: its tenure's number goes into the fence's top bits, which no store here counts
    /// to.
    fn tagged(&self, h: Holder) -> Holder {
        let tenure = self.tenures.get(&h).copied().unwrap_or(u64::from(u32::MAX));
        Holder {
            fence: (h.fence & u64::from(u32::MAX)) | (tenure << 32),
            ..h
        }
    }

    fn observe(&mut self, step: Step) -> Result<(), (Invariant, String)> {
        self.checker
            .observe(&step)
            .map_err(|v| (v.invariant, v.to_string()))
    }

    /// Feeds every record the store wrote since the last call to the checker: an owned record
    /// is a grant; an unowned one is a release, clean if it ended `released_by`'s ownership.
    fn drain(
        &mut self,
        released_by: Option<(Holder, Option<i64>)>,
    ) -> Result<(), (Invariant, String)> {
        let written = std::mem::take(&mut *self.recorder.written.lock().unwrap());
        for rec in written {
            let before = self.records.insert(rec.slot, rec.clone());
            match Holder::of_record(&rec) {
                Some(holder) => {
                    // A new tenure unless it renews the record the slot held.
                    let renews = before
                        .as_ref()
                        .is_some_and(|b| b.owner == rec.owner && b.fence == rec.fence);
                    if !renews || !self.tenures.contains_key(&holder) {
                        self.tenures.insert(holder, self.next_tenure);
                        self.next_tenure += 1;
                    }
                    let holder = self.tagged(holder);
                    self.log.push(format!(
                        "store granted slot {} ({}, {}] to {} (renews: {renews})",
                        rec.slot, rec.floor, rec.ceiling, holder
                    ));
                    self.outcome.grants += 1;
                    if !self.holders.insert(holder) {
                        self.outcome.renewals += 1;
                    }
                    self.observe(Step::Granted {
                        holder,
                        floor: rec.floor,
                        ceiling: rec.ceiling,
                    })?;
                }
                None => {
                    let ended = before
                        .as_ref()
                        .and_then(Holder::of_record)
                        .map(|h| self.tagged(h));
                    match released_by {
                        Some((holder, last_issued)) if ended == Some(holder) => {
                            self.outcome.releases += 1;
                            self.observe(Step::Released {
                                holder,
                                last_issued,
                            })?;
                        }
                        // Ownership ended by someone other than its holder: its windows stay
                        // "could have been used" up to their ceilings.
                        _ => self.log.push(format!(
                            "slot {} released by someone other than its holder {ended:?}",
                            rec.slot
                        )),
                    }
                }
            }
        }
        Ok(())
    }

    fn start(&mut self, i: usize) {
        let incarnation =
            uuid::Uuid::from_u64_pair(self.incarnations.next(), self.incarnations.next());
        let inst = &mut self.instances[i];
        let window = Arc::new(Window::new());
        let mut client =
            LeaseClient::new(self.store.clone(), "sim", self.bits, self.terms).unwrap();
        if self.recorder.loses_data {
            client = client.with_restart_guard();
        }
        let owner = Owner {
            key: inst.key.clone(),
            incarnation,
        };
        let config = KeeperConfig {
            ttl: Duration::from_millis(self.terms.ttl_ms as u64),
            acquire_timeout: Duration::ZERO,
            preferred_slot: None,
            owner: owner.clone(),
        };
        let clock: SharedClock = inst.clock.clone();
        match LeaseKeeper::start_standalone(client, window.clone(), clock.clone(), config) {
            Ok(keeper) => {
                let l = keeper.lease().unwrap();
                self.log.push(format!(
                    "{i} acquired slot {} fence {} ({}, {}] at local {}",
                    l.slot,
                    l.fence,
                    l.floor,
                    l.ceiling,
                    inst.clock.now_ms()
                ));
                let generator = Generator::new("", self.layout, window, clock, Duration::ZERO);
                inst.live = Some(Live {
                    keeper,
                    generator,
                    owner,
                });
            }
            Err(e) => self.log.push(format!("{i} start failed: {}", e.kind())),
        }
    }

    fn step(&mut self, step: usize) -> Result<(), (Invariant, String)> {
        let dt = self.rng.below(40) as i64;
        self.store_clock.set(self.store_clock.now_ms() + dt);
        for inst in &mut self.instances {
            // Real time passes for everyone: monotonic time always moves (the keeper renews by
            // it), wall time unless the clock is frozen.
            let wall = inst.clock.now_ms();
            inst.clock.advance(Duration::from_millis(dt as u64));
            if inst.frozen {
                inst.clock.set(wall);
            }
            inst.paused_for = inst.paused_for.saturating_sub(1);
        }
        let i = self.rng.below(self.instances.len() as u64) as usize;
        if self.instances[i].paused_for > 0 {
            return Ok(());
        }
        let roll = self.rng.below(100);
        let mut released_by = None;
        match roll {
            0..=44 => self.issue(i, step)?,
            45..=69 => {
                if let Some(live) = &self.instances[i].live {
                    let before = live.keeper.lease().map(|l| (l.slot, l.fence, l.ceiling));
                    live.keeper.tick();
                    let after = live.keeper.lease().map(|l| (l.slot, l.fence, l.ceiling));
                    if before != after {
                        self.log.push(format!(
                            "{i} tick: (slot, fence, ceiling) {before:?} -> {after:?}"
                        ));
                    }
                } else {
                    self.start(i);
                }
            }
            70..=74 => {
                if self.instances[i].live.take().is_some() {
                    self.log.push(format!("{i} crashed"));
                }
            }
            75..=78 => {
                if let Some(live) = self.instances[i].live.take() {
                    let holder = live
                        .keeper
                        .lease()
                        .map(|l| self.tagged(Holder::of_lease(&l)));
                    let last = live.generator.close();
                    let r = live.keeper.release(last);
                    self.log.push(format!(
                        "{i} closed (last {last:?}): {:?}",
                        r.map_err(|e| e.kind())
                    ));
                    released_by = holder.map(|h| (h, last));
                }
            }
            79..=84 => {
                let steps = 1 + self.rng.below(80) as u32;
                self.instances[i].paused_for = steps;
                self.log.push(format!("{i} paused for {steps} steps"));
            }
            85..=90 => {
                let jump = self.rng.signed(4 * self.terms.tolerance_ms.max(500));
                let c = &self.instances[i].clock;
                c.set(c.now_ms() + jump);
                self.log.push(format!("{i} clock jumped {jump} ms"));
            }
            91..=93 => {
                let inst = &mut self.instances[i];
                inst.frozen = !inst.frozen;
                self.log.push(format!("{i} clock frozen={}", inst.frozen));
            }
            94..=96 if self.recorder.loses_data => self.lose_data(),
            // A store that loses data keeps its clock: the guard's bound is in the store's
            // clock, and a holder's estimate of it must not lag a jump (see the module doc).
            _ if self.recorder.loses_data => {}
            _ => {
                let jump = self.rng.signed(4 * self.terms.ttl_ms);
                self.store_clock.set(self.store_clock.now_ms() + jump);
                self.log.push(format!("store clock jumped {jump} ms"));
            }
        }
        if self.recorder.loses_data && self.rng.chance(5) {
            self.saved = self.memory.save();
        }
        self.drain(released_by)
    }

    /// The store forgets acknowledged writes: a wipe while it runs (`FLUSHALL`), a restart
    /// without its data, or a restart from the copy saved some steps ago.
    fn lose_data(&mut self) {
        let now = self.store_clock.now_ms();
        self.outcome.losses += 1;
        match self.rng.below(4) {
            0 => {
                self.memory.wipe();
                self.log.push("store wiped while running (FLUSHALL)".into());
            }
            1 => {
                self.memory.wipe();
                *self.recorder.restarted_at.lock().unwrap() = Some(now);
                self.log.push(format!("store restarted empty at {now}"));
            }
            2 => {
                let namespaces = self.memory.save().namespaces_only();
                self.memory.roll_back(&namespaces);
                *self.recorder.restarted_at.lock().unwrap() = Some(now);
                self.log.push(format!(
                    "store restarted at {now} without its slot records (the namespace kept)"
                ));
            }
            _ => {
                self.memory.roll_back(&self.saved);
                *self.recorder.restarted_at.lock().unwrap() = Some(now);
                self.log
                    .push(format!("store restarted from an older snapshot at {now}"));
            }
        }
        // A later restore goes back at most to here: a restore to a copy older than an
        // earlier loss (a wipe, then a backup from before it) can bring back, unexpired, a
        // lease that a holder still remembers as its last write, whose one-round-trip renewal
        // cannot tell (docs/stores.md, "What remains").
        self.saved = self.memory.save();
        // What the store holds now is what the next writes start from (a renewal of a record
        // the snapshot brought back continues its tenure).
        self.records = self
            .memory
            .snapshot("sim")
            .unwrap()
            .slots
            .slots
            .into_iter()
            .map(|r| (r.value.slot, r.value))
            .collect();
    }

    fn issue(&mut self, i: usize, step: usize) -> Result<(), (Invariant, String)> {
        let want = 1 + self.rng.below(64);
        let Some(live) = &self.instances[i].live else {
            return Ok(());
        };
        // The holder the instance is: its own incarnation, under the lease its keeper holds now
        // (the keeper changes only in `tick`, never while this loop runs). An instance issuing
        // with no lease is attributed to fence 0, which the store never grants.
        let lease = live.keeper.lease();
        let incarnation = live.owner.incarnation;
        let mut issued = Vec::new();
        for _ in 0..want {
            match live.generator.try_next() {
                Ok(TryNext::Ready(id)) => {
                    let p = self.layout.decompose(id).unwrap();
                    let holder = match &lease {
                        Some(l) => self.tagged(Holder {
                            slot: l.slot,
                            incarnation,
                            fence: l.fence,
                        }),
                        None => Holder {
                            slot: p.slot,
                            incarnation,
                            fence: 0,
                        },
                    };
                    issued.push(Step::Issued {
                        id,
                        holder,
                        slot: p.slot,
                        unit_start_ms: self.layout.unit_start_ms(p.timestamp),
                    });
                }
                Ok(TryNext::Wait { .. }) | Err(_) => break,
            }
        }
        if let (
            Some(Step::Issued {
                unit_start_ms: a, ..
            }),
            Some(Step::Issued {
                unit_start_ms: b,
                slot,
                ..
            }),
        ) = (issued.first(), issued.last())
        {
            self.log.push(format!(
                "{i} issued {} ids on slot {slot}, units {a}..={b} (step {step})",
                issued.len()
            ));
        }
        self.outcome.ids += issued.len();
        for s in issued {
            self.observe(s)?;
        }
        Ok(())
    }
}

/// Runs one seed for `steps` steps, checking every invariant after every step.
pub fn run_seed(seed: u64, steps: usize) -> Result<Outcome, Failure> {
    let mut sim = Sim::new(seed);
    let outcome = run(&mut sim, seed, steps)?;
    let one_trip = *sim.recorder.one_trip.lock().unwrap();
    Ok(Outcome {
        one_trip,
        ..outcome
    })
}

fn run(sim: &mut Sim, seed: u64, steps: usize) -> Result<Outcome, Failure> {
    for step in 0..steps {
        if let Err((invariant, e)) = sim.step(step) {
            let tail: Vec<_> = sim.log.iter().rev().take(25).rev().cloned().collect();
            return Err(Failure {
                seed,
                invariant,
                message: format!(
                    "seed {seed}, simulation step {step}: {e}\nlast events:\n  {}",
                    tail.join("\n  ")
                ),
            });
        }
    }
    Ok(sim.outcome)
}

/// Runs seeds `0..seeds`, stopping at the first that breaks an invariant.
pub fn run_seeds(seeds: u64, steps: usize) -> Result<Outcome, Failure> {
    let mut total = Outcome::default();
    for seed in 0..seeds {
        let o = run_seed(seed, steps)?;
        total.ids += o.ids;
        total.grants += o.grants;
        total.renewals += o.renewals;
        total.releases += o.releases;
        total.one_trip += o.one_trip;
        total.losses += o.losses;
    }
    Ok(total)
}
