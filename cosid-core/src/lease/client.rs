//! The lease protocol over a store's primitives: open a namespace, acquire a slot in the protocol's
//! order of preference, renew, release. Each change is one compare-and-set of one record; a lost
//! race re-reads and tries again.

use super::record::{IdLayout, NamespaceRecord, Owner, SlotLease, SlotRecord, Versioned};
#[cfg(feature = "mutation-switches")]
use super::rules::mutation;
use super::rules::{self, Refusal, Terms};
use crate::error::{Error, ErrorKind, Result};
use crate::store::{CandidateAsk, CandidateView, NamespaceWrite, SharedStore, SlotWrite};
use std::collections::{HashMap, HashSet};

/// How many lost compare-and-set races one call tolerates before giving up with a store error.
pub(super) const MAX_RACES: u32 = 10_000;

/// What the restart guard asks of an acquisition ([`LeaseClient::guard`]).
#[derive(Debug, Clone, Copy, Default)]
struct Guard {
    /// No window starts at or below it.
    floor: i64,
    /// The store may have lost writes so lately that a ceiling it forgot lies ahead.
    young: bool,
}

/// Whether [`LeaseClient::guard_floor`] is asked for a namespace record this client creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Creating {
    Yes,
    No,
}

/// What a runtime asks for when it acquires.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    /// Who asks.
    pub owner: Owner,
    /// A slot to take if it is free (a StatefulSet ordinal, say).
    pub preferred_slot: Option<u32>,
    /// The lowest floor this runtime accepts: the highest ceiling it was ever granted, so a store
    /// that lost its data can never hand it a window overlapping one it already used.
    pub floor_at_least: i64,
}

/// Why a slot was chosen, in the protocol's order of preference (`docs/protocol.md` section 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The slot this `(key, incarnation)` already holds: an idempotent retry.
    Own,
    /// The configured preferred slot.
    Preferred,
    /// A free slot whose last owner had the same key.
    Sticky,
    /// A free slot, spread over the lowest free ones ([`spread_pick`]).
    Free,
}

/// The fewest free slots a starter spreads over ([`spread_pick`]).
pub const SPREAD_MIN: usize = 64;

/// How many of the lowest free slots a starter spreads over: `max(SPREAD_MIN, 2 * held)`,
/// doubled by every compare-and-set race this acquisition lost, at most `free` (see
/// `docs/protocol.md` section 4 for why not all of them).
pub fn spread_width(free: usize, held: usize, raced: u32) -> usize {
    SPREAD_MIN
        .max(held.saturating_mul(2))
        .saturating_mul(1usize << raced.min(20))
        .min(free)
}

/// The free slot a starter with `incarnation` takes on its attempt after `raced` lost races,
/// from `lowest_free`, the lowest [`spread_width`] free slots in ascending order; `None` if
/// there are none. A pure function of its inputs: the same snapshot, incarnation and attempt
/// give the same slot (so the simulation replays it from its seed), while starters of different
/// incarnations, reading the same snapshot at once, land on different slots instead of all
/// racing for the lowest one.
pub fn spread_pick(lowest_free: &[u32], incarnation: &uuid::Uuid, raced: u32) -> Option<u32> {
    if lowest_free.is_empty() {
        return None;
    }
    let (hi, lo) = incarnation.as_u64_pair();
    // splitmix64's finaliser over the incarnation and the attempt.
    let mut z = hi ^ lo.rotate_left(29) ^ u64::from(raced).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    Some(lowest_free[(z % lowest_free.len() as u64) as usize])
}

/// How many free slots a starter offers in one compare-and-set call
/// ([`SlotStore::cas_first_slot`](crate::store::SlotStore::cas_first_slot)): its picks for
/// this attempt and the next `FREE_PICKS - 1`, each spread twice as wide as the one before, so
/// that a starter that loses the race for its first pick takes its next in the same call
/// instead of reading the namespace again.
pub const FREE_PICKS: u32 = 4;

/// The distinct free slots a starter offers on its attempt after `raced` lost races: the
/// [`spread_pick`]s of attempts `raced` to `raced + FREE_PICKS - 1`, each from the lowest
/// [`spread_width`] of `lowest_free` for that attempt, in that order. `lowest_free` holds the
/// lowest free slots in ascending order, at least as many as the widest spread takes.
pub fn free_picks(
    lowest_free: &[u32],
    held: usize,
    free: usize,
    incarnation: &uuid::Uuid,
    raced: u32,
) -> Vec<u32> {
    let mut picks = Vec::with_capacity(FREE_PICKS as usize);
    for attempt in raced..raced.saturating_add(FREE_PICKS) {
        let width = spread_width(free, held, attempt).min(lowest_free.len());
        if let Some(pick) = spread_pick(&lowest_free[..width], incarnation, attempt) {
            if !picks.contains(&pick) {
                picks.push(pick);
            }
        }
    }
    picks
}

/// What an acquisition after `raced` lost races asks the store's view to cover: the asker's key
/// and preferred slot, and at least `(SPREAD_MIN + 2 × live) × 2^(raced + FREE_PICKS - 1)`
/// slots no live lease holds, which is never fewer than the widest of its [`free_picks`] picks
/// from.
fn candidate_ask(req: &AcquireRequest, raced: u32) -> CandidateAsk<'_> {
    let doubled = 1u32 << raced.saturating_add(FREE_PICKS - 1).min(20);
    CandidateAsk {
        owner_key: Some(&req.owner.key),
        preferred_slot: req.preferred_slot,
        free_min: (SPREAD_MIN as u32).saturating_mul(doubled),
        free_per_live: 2u32.saturating_mul(doubled),
    }
}

/// What a [`CandidateView`] tells of the slots below the client's limit.
struct Known<'v> {
    /// The whole records the view returned.
    records: HashMap<u32, &'v Versioned<SlotRecord>>,
    /// Slots a live lease holds whose record the view did not return.
    held_unseen: HashSet<u32>,
    /// Every slot below this is vouched for (see [`CandidateView::covered_below`]).
    covered_below: u32,
    /// Vouched for too: a store returns the preferred slot's record if it has one.
    preferred: Option<u32>,
}

impl<'v> Known<'v> {
    fn of(view: &'v CandidateView, limit: u32, preferred: Option<u32>) -> Known<'v> {
        let records: HashMap<u32, &Versioned<SlotRecord>> = view
            .records
            .iter()
            .filter(|r| r.value.slot < limit)
            .map(|r| (r.value.slot, r))
            .collect();
        let held_unseen = view
            .live
            .iter()
            .copied()
            .filter(|s| *s < limit && !records.contains_key(s))
            .collect();
        Known {
            records,
            held_unseen,
            covered_below: view.covered_below.min(limit),
            preferred,
        }
    }

    /// Whether the view says what `slot` holds: its record, or that it has none.
    fn vouches_for(&self, slot: u32) -> bool {
        self.records.contains_key(&slot)
            || ((slot < self.covered_below || Some(slot) == self.preferred)
                && !self.held_unseen.contains(&slot))
    }

    /// `slot`'s version and record (vacant when it has none). Only for a slot the view vouches
    /// for.
    fn record(&self, slot: u32) -> (Option<u64>, SlotRecord) {
        debug_assert!(self.vouches_for(slot));
        self.records
            .get(&slot)
            .map_or((None, SlotRecord::vacant(slot)), |v| {
                (Some(v.version), v.value.clone())
            })
    }

    /// Whether a new owner may take `slot` at store time `now`, by the rules, as far as the
    /// view tells: a slot it does not vouch for is never free.
    fn is_free(&self, slot: u32, now: i64) -> bool {
        match self.records.get(&slot) {
            Some(r) => rules::is_free(&r.value, now),
            None => self.vouches_for(slot) && rules::is_free(&SlotRecord::vacant(slot), now),
        }
    }

    /// How many slots are held by live leases.
    fn held(&self, now: i64) -> usize {
        self.held_unseen.len()
            + self
                .records
                .values()
                .filter(|r| !rules::is_free(&r.value, now))
                .count()
    }

    /// Whether the view holds every record of the namespace's `limit` slots.
    fn is_whole(&self, limit: u32) -> bool {
        self.covered_below >= limit && self.held_unseen.is_empty()
    }
}

/// A successful acquisition.
#[derive(Debug, Clone)]
pub struct Acquisition {
    /// The lease granted.
    pub lease: SlotLease,
    /// Why this slot.
    pub choice: Choice,
    /// Slots held by a live lease of the same owner key but another incarnation: never taken
    /// over, reported as `DuplicateOwnerKey`.
    pub duplicate_owner_key: Vec<u32>,
}

/// The outcome of a renewal.
#[derive(Debug, Clone)]
pub enum Renewal {
    /// Renewed: the lease with its new expiry and ceiling.
    Renewed(SlotLease),
    /// The lease is gone (taken over, released, or the store lost its data).
    Lost(Refusal),
}

/// One namespace of one store, with the terms of this runtime.
#[derive(Debug, Clone)]
pub struct LeaseClient {
    store: SharedStore,
    namespace: String,
    limit: u32,
    terms: Terms,
    layout: Option<IdLayout>,
    restart_guard: bool,
}

impl LeaseClient {
    /// A client for `namespace` with `2^bits` slots.
    pub fn new(store: SharedStore, namespace: &str, bits: u8, terms: Terms) -> Result<Self> {
        if namespace.is_empty()
            || namespace.len() > 128
            || namespace
                .chars()
                .any(|c| c.is_control() || c == '/' || c == '{' || c == '}')
        {
            return Err(Error::config(format!(
                "namespace '{namespace}' must be 1 to 128 characters without '/', braces or control characters"
            )));
        }
        if bits > 20 {
            return Err(Error::config(format!("bits {bits} is more than 20")));
        }
        Ok(LeaseClient {
            store,
            namespace: namespace.to_string(),
            limit: 1 << bits,
            terms,
            layout: None,
            restart_guard: false,
        })
    }

    /// This client's runtime issues ids of `layout`: the namespace records it on first open and
    /// refuses a runtime of another layout. Without it (tools that issue no ids) no layout is
    /// written or checked.
    pub fn with_layout(mut self, layout: &crate::layout::Layout) -> Self {
        self.layout = Some(IdLayout::of(layout));
        self
    }

    /// Turns the restart guard on (every runtime does): no window this client starts lies below
    /// a ceiling a store that lost data may have forgotten (`docs/protocol.md` section 7,
    /// `LeaseClient::guard`).
    pub fn with_restart_guard(mut self) -> Self {
        self.restart_guard = true;
        self
    }

    /// The store.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The terms.
    pub fn terms(&self) -> Terms {
        self.terms
    }

    fn store_error(&self, e: Error) -> Error {
        if e.kind() == ErrorKind::Store {
            e
        } else {
            Error::new(
                e.kind(),
                format!("{} (store {})", e.message(), self.store.describe()),
            )
        }
    }

    /// Creates the namespace record `{limit, tolerance, layout, ttl}` or checks that the
    /// existing one matches; a mismatch is refused with both values named. A record without a
    /// layout or a ttl (written before they were recorded, or by `cosid migrate`) gets this
    /// client's, by compare-and-set: if another runtime wrote a different one first, this one is
    /// refused.
    pub fn open_namespace(&self) -> Result<NamespaceRecord> {
        for _ in 0..MAX_RACES {
            let view = self
                .store
                .candidates(&self.namespace, &CandidateAsk::NAMESPACE_ONLY)?;
            if let Some(rec) = self.settle_namespace(view.namespace, view.store_now)? {
                return Ok(rec);
            }
        }
        Err(self.too_many_races("creating the namespace"))
    }

    /// Whether `rec` is complete for this client: a limit (not a record `cosid migrate` wrote
    /// before any runtime), and, for a client that issues ids, a layout and a ttl.
    fn is_settled(&self, rec: &NamespaceRecord) -> bool {
        rec.limit != 0 && (self.layout.is_none() || (rec.layout.is_some() && rec.ttl_ms.is_some()))
    }

    /// One step of [`LeaseClient::open_namespace`] from the namespace record as read (`found`,
    /// at store time `store_now`): the record when it matches and is complete, or once this
    /// client's compare-and-set created or completed it; `None` when another client's write
    /// came first (read again). An acquisition that read a namespace needing this takes the
    /// step on what it read, and reads again after it, whether or not it wrote.
    ///
    /// Every record this writes that a runtime had not completed before (a new one, or one
    /// `cosid migrate` wrote) carries the restart guard's floor ([`LeaseClient::guard_floor`]):
    /// no writer of a namespace record lets a namespace begin below it.
    fn settle_namespace(
        &self,
        found: Option<Versioned<NamespaceRecord>>,
        store_now: i64,
    ) -> Result<Option<NamespaceRecord>> {
        let recorded_ttl = self.layout.map(|_| self.terms.ttl_ms);
        let (expected, rec) = match found {
            Some(Versioned { value, version }) if value.limit == 0 => {
                // Created by `cosid migrate` before any runtime: complete it. A migration right
                // after the store lost its data must not switch the guard off, so its floor is
                // the higher of the migration's and the guard's.
                self.check_layout(&value)?;
                (
                    Some(version),
                    NamespaceRecord {
                        limit: self.limit,
                        tolerance_ms: self.terms.tolerance_ms,
                        not_before_ms: value
                            .not_before_ms
                            .max(self.guard_floor(store_now, Creating::Yes)?),
                        layout: self.layout.or(value.layout),
                        ttl_ms: value.ttl_ms.or(recorded_ttl),
                    },
                )
            }
            Some(Versioned { value, version }) => {
                self.check_matches(&value)?;
                if self.is_settled(&value) {
                    return Ok(Some(value));
                }
                // Recorded before layouts or ttls were: adopt ours.
                (
                    Some(version),
                    NamespaceRecord {
                        layout: value.layout.or(self.layout),
                        ttl_ms: value.ttl_ms.or(recorded_ttl),
                        ..value
                    },
                )
            }
            None => (
                None,
                NamespaceRecord {
                    limit: self.limit,
                    tolerance_ms: self.terms.tolerance_ms,
                    not_before_ms: self.guard_floor(store_now, Creating::Yes)?,
                    layout: self.layout,
                    ttl_ms: recorded_ttl,
                },
            ),
        };
        let written = self
            .store
            .cas_namespace(&self.namespace, NamespaceWrite::new(expected, &rec))?;
        Ok(written.map(|_| rec))
    }

    /// The restart guard's floor at store time `store_now`: no window this client starts (and,
    /// with [`Creating::Yes`], no window of a namespace record it creates) begins at or below
    /// it. 0 when the guard is off or nothing needs it.
    ///
    /// Two cases, each bounded by the same fact: a ceiling a store granted lies at most
    /// ttl + tolerance after the write that granted it (`rules::acquire`, `rules::renew`), and
    /// the namespace records the ttl and tolerance every holder uses.
    ///
    /// - **The store may have lost writes before `lost`** ([`SlotStore::started_at`]: a
    ///   server's start, an SQLite file that is not the one live holders use). Every ceiling in
    ///   the writes it lost lies at or below `lost + ttl + tolerance`; while that is ahead of the
    ///   store's clock, every acquisition starts there (a restart from an old snapshot, a crash
    ///   with RDB persistence: the namespace survives, its slot records moved back).
    /// - **A namespace this client creates on a network store** may be one the store lost
    ///   (`FLUSHALL`, `DROP TABLE`, a wiped etcd look exactly like a new namespace), while the
    ///   lost holders still issue up to their ceilings, none above `now + ttl + tolerance`. So
    ///   it starts there ([`SlotStore::may_forget_namespaces`]; `restart-guard=off` in the
    ///   URL opts out for a server known to be new). Its first runtime waits that long, once
    ///   per namespace, ever.
    fn guard_floor(&self, store_now: i64, creating: Creating) -> Result<i64> {
        // A floor already passed changes nothing a record says: 0 keeps the record as a
        // namespace that never needed the guard reads.
        Ok(Some(self.guard(store_now, creating)?.floor)
            .filter(|&floor| floor > store_now)
            .unwrap_or(0))
    }

    /// [`LeaseClient::guard_floor`], and whether the store may have lost writes so lately that
    /// a lost ceiling still lies ahead of `store_now`.
    fn guard(&self, store_now: i64, creating: Creating) -> Result<Guard> {
        let Some(lost) = self.lost_at()? else {
            return Ok(Guard::default());
        };
        let span = self.terms.ttl_ms.saturating_add(self.terms.tolerance_ms);
        // Not only while it lies ahead: once a store moved back (an old snapshot), the
        // next floors its records hand over stay stale for good, and a floor in the past
        // costs nothing, while a host clock that lags would otherwise issue below it.
        let above_lost = lost.map_or(0, |s| s.saturating_add(span));
        #[cfg(feature = "mutation-switches")]
        let above_lost = mutation::young_store_floor(above_lost);
        let mut floor = above_lost;
        if creating == Creating::Yes && self.store.may_forget_namespaces() {
            let fresh = store_now.saturating_add(span);
            #[cfg(feature = "mutation-switches")]
            let fresh = mutation::new_namespace_floor(fresh);
            floor = floor.max(fresh);
        }
        Ok(Guard {
            floor,
            young: above_lost > store_now,
        })
    }

    /// With the guard on, `Some` of [`SlotStore::started_at`](crate::store::SlotStore::started_at):
    /// when the store may last have lost writes (`None` inside: never, as far as it can tell).
    fn lost_at(&self) -> Result<Option<Option<i64>>> {
        if !self.restart_guard {
            return Ok(None);
        }
        self.store
            .started_at(&self.namespace)
            .map(Some)
            .map_err(|e| self.store_error(e))
    }

    /// A recorded limit above this client's is no mismatch: `cosid namespace raise-slots`
    /// raised it, and every client uses the recorded limit (runtimes configured before the
    /// raise keep their bits); one below it is, as is one this client's layout cannot hold.
    fn check_matches(&self, rec: &NamespaceRecord) -> Result<()> {
        if rec.limit < self.limit {
            return Err(Error::new(
                ErrorKind::NamespaceMismatch,
                format!(
                    "namespace '{}' records limit {} slots; this runtime asks for {} (bits {}); \
                     use bits with at most the recorded slots, raise the namespace's slots \
                     (`cosid namespace raise-slots`), or use another namespace",
                    self.namespace,
                    rec.limit,
                    self.limit,
                    self.limit.trailing_zeros()
                ),
            ));
        }
        if let Some(layout) = self.layout {
            let holds = 1u64 << layout.node_bits.min(63);
            if u64::from(rec.limit) > holds {
                return Err(Error::new(
                    ErrorKind::NamespaceMismatch,
                    format!(
                        "namespace '{}' records limit {} slots, more than this runtime's \
                         layout holds (node-bits {}: {holds} slots); give this runtime the \
                         namespace's layout, or use another namespace",
                        self.namespace, rec.limit, layout.node_bits
                    ),
                ));
            }
        }
        if rec.tolerance_ms != self.terms.tolerance_ms {
            return Err(Error::new(
                ErrorKind::NamespaceMismatch,
                format!(
                    "namespace '{}' records tolerance {}; this runtime asks for {}; use the \
                     recorded tolerance or another namespace",
                    self.namespace,
                    fmt_ms(rec.tolerance_ms),
                    fmt_ms(self.terms.tolerance_ms)
                ),
            ));
        }
        if let (Some(recorded), Some(_)) = (rec.ttl_ms, self.layout) {
            if recorded != self.terms.ttl_ms {
                return Err(Error::new(
                    ErrorKind::NamespaceMismatch,
                    format!(
                        "namespace '{}' records ttl {}; this runtime asks for {}; use the \
                         recorded ttl or another namespace (the restart guard bounds the \
                         ceilings a lost store granted by the recorded ttl)",
                        self.namespace,
                        fmt_ms(recorded),
                        fmt_ms(self.terms.ttl_ms)
                    ),
                ));
            }
        }
        self.check_layout(rec)
    }

    /// Refuses a recorded layout other than this client's (an absent one on either side is not
    /// a mismatch: see [`LeaseClient::open_namespace`]).
    fn check_layout(&self, rec: &NamespaceRecord) -> Result<()> {
        match (rec.layout, self.layout) {
            (Some(recorded), Some(mine)) if recorded != mine => Err(Error::new(
                ErrorKind::NamespaceMismatch,
                format!(
                    "namespace '{}' records the id layout {recorded} ({}); this runtime uses \
                     {mine} ({}); a namespace's layout never changes and ids of two layouts \
                     collide, so give this runtime the recorded layout (cosid.snowflake), or \
                     give the other layout a namespace of its own whose ids never share a \
                     column with this one's",
                    self.namespace,
                    recorded.encode(),
                    mine.encode()
                ),
            )),
            _ => Ok(()),
        }
    }

    fn too_many_races(&self, what: &str) -> Error {
        Error::store(format!(
            "lost {MAX_RACES} compare-and-set races in a row {what} in namespace '{}' of {}",
            self.namespace,
            self.store.describe()
        ))
    }

    /// Acquires a slot in the protocol's order: own slot, preferred, sticky, a free one (spread
    /// over the lowest free slots: [`spread_pick`]). `Exhausted`
    /// (with the earliest expiry) when every slot is held by a live lease; a store error after
    /// `MAX_RACES` rounds (lost compare-and-set races, or a namespace that never appears).
    ///
    /// Each round reads a [`CandidateView`] (the store's filtered view where it has one, so the
    /// read does not grow with the slots in use) and re-checks every record in it with the
    /// rules; a round whose partial view has nothing to take reads a whole snapshot before it
    /// reports the namespace exhausted.
    pub fn acquire(&self, req: &AcquireRequest) -> Result<Acquisition> {
        let mut raced = 0u32;
        let mut whole = false;
        // Every round re-reads after a lost race, a namespace that had to be (re)created, or a
        // partial view with nothing to take.
        for _ in 0..MAX_RACES {
            let view = if whole {
                self.store
                    .snapshot(&self.namespace)
                    .map(CandidateView::of_snapshot)
            } else {
                self.store
                    .candidates(&self.namespace, &candidate_ask(req, raced))
            }
            .map_err(|e| self.store_error(e))?;
            let ns = match &view.namespace {
                Some(v) if self.is_settled(&v.value) => {
                    self.check_matches(&v.value)?;
                    v.value
                }
                // The namespace vanished (store restarted empty), was never completed, or has no
                // layout or ttl recorded yet.
                _ => {
                    self.settle_namespace(view.namespace.clone(), view.store_now)?;
                    continue;
                }
            };
            let now = view.store_now;
            // Asked after the view was read: a store that lost writes before its answer says
            // so now, so no window granted from a view of what it kept starts below the
            // ceilings it forgot.
            let guard = self.guard(now, Creating::No)?;
            let floor_at_least = req.floor_at_least.max(ns.not_before_ms).max(guard.floor);
            // The recorded limit, which `cosid namespace raise-slots` may have raised above
            // this client's (`check_matches`): read at every acquisition, so a runtime that
            // started before the raise takes the new slots the next time it acquires.
            let limit = ns.limit;
            let known = Known::of(&view, limit, req.preferred_slot);

            // 1. Our own slot: an idempotent retry (renew it, so the window is fresh). Not
            // when the store may have lost writes lately (`guard`) or the record expired: a
            // record naming us may then be an old one a store moved back to, whose slot
            // another holder had in between; a new tenure of it starts above them all.
            if let Some(own) = known
                .records
                .values()
                .find(|r| r.value.owner.as_ref() == Some(&req.owner))
            {
                let renewed = if guard.young || rules::is_free(&own.value, now) {
                    Some(rules::acquire(
                        &own.value,
                        &req.owner,
                        now,
                        self.terms,
                        floor_at_least,
                    ))
                    .filter(|_| own.value.fence < rules::LAST_HOLDER_FENCE)
                } else {
                    rules::renew(&own.value, &req.owner, own.value.fence, now, self.terms).ok()
                };
                if let Some(renewed) = renewed {
                    if let Some(version) = self
                        .store
                        .cas_slot(&self.namespace, SlotWrite::new(Some(own.version), &renewed))?
                    {
                        return Ok(self.granted(renewed, version, now, Choice::Own, &known, req));
                    }
                }
                raced += 1;
                continue;
            }

            let free = |slot: u32| known.is_free(slot, now);
            let mut candidates: Vec<(u32, Choice)> = Vec::with_capacity(2 + FREE_PICKS as usize);
            if let Some(p) = req.preferred_slot.filter(|p| *p < limit && free(*p)) {
                candidates.push((p, Choice::Preferred));
            }
            let mut sticky: Vec<u32> = known
                .records
                .values()
                .filter(|r| r.value.last_owner_key.as_deref() == Some(req.owner.key.as_str()))
                .map(|r| r.value.slot)
                .filter(|s| free(*s))
                .collect();
            sticky.sort_unstable();
            if let Some(s) = sticky.first() {
                candidates.push((*s, Choice::Sticky));
            }
            // Spread starters over the lowest free slots, from the first attempt: many
            // starting at once would otherwise all race for the lowest one.
            let held = known.held(now);
            let free_count = (limit as usize).saturating_sub(held);
            let widest = spread_width(free_count, held, raced.saturating_add(FREE_PICKS - 1));
            let lowest_free: Vec<u32> = (0..known.covered_below)
                .filter(|s| free(*s))
                .take(widest)
                .collect();
            for pick in free_picks(
                &lowest_free,
                held,
                free_count,
                &req.owner.incarnation,
                raced,
            ) {
                if !candidates.iter().any(|(s, _)| *s == pick) {
                    candidates.push((pick, Choice::Free));
                }
            }

            if candidates.is_empty() {
                if known.is_whole(limit) {
                    return Err(self.exhausted(limit, &known.records, now));
                }
                whole = true;
                continue;
            }
            whole = false;
            // Every candidate in the protocol's order, each written by the rules from the
            // record the view holds for it; the store writes the first still as it was read.
            let (expected, records): (Vec<Option<u64>>, Vec<SlotRecord>) = candidates
                .iter()
                .map(|&(slot, _)| {
                    let (expected, current) = known.record(slot);
                    let next =
                        rules::acquire(&current, &req.owner, now, self.terms, floor_at_least);
                    (expected, next)
                })
                .unzip();
            let writes: Vec<SlotWrite<'_>> = expected
                .iter()
                .zip(&records)
                .map(|(&expected, record)| SlotWrite::new(expected, record))
                .collect();
            if let Some((i, written)) = self.store.cas_first_slot(&self.namespace, &writes)? {
                let tried = writes.len();
                let (Some(next), Some(&(_, choice))) =
                    (records.into_iter().nth(i), candidates.get(i))
                else {
                    return Err(Error::store(format!(
                        "{} reported writing candidate {i} of a compare-and-set over {tried} \
                         slots in namespace '{}'; a store must name one of the writes it was \
                         given",
                        self.store.describe(),
                        self.namespace
                    )));
                };
                return Ok(self.granted(next, written, now, choice, &known, req));
            }
            raced += 1;
        }
        Err(self.too_many_races("acquiring a slot"))
    }

    fn granted(
        &self,
        rec: SlotRecord,
        version: u64,
        now: i64,
        choice: Choice,
        known: &Known<'_>,
        req: &AcquireRequest,
    ) -> Acquisition {
        let mut duplicate_owner_key: Vec<u32> = known
            .records
            .values()
            .filter(|r| {
                r.value.owner.as_ref().is_some_and(|o| {
                    o.key == req.owner.key && o.incarnation != req.owner.incarnation
                }) && !rules::is_free(&r.value, now)
            })
            .map(|r| r.value.slot)
            .collect();
        duplicate_owner_key.sort_unstable();
        Acquisition {
            lease: SlotLease::written(&self.namespace, rec, version, now, true),
            choice,
            duplicate_owner_key,
        }
    }

    fn exhausted(
        &self,
        limit: u32,
        records: &HashMap<u32, &Versioned<SlotRecord>>,
        now: i64,
    ) -> Error {
        let earliest = records
            .values()
            .map(|r| r.value.expires_at)
            .min()
            .unwrap_or(now);
        Error::new(
            ErrorKind::Exhausted,
            format!(
                "all {} slots of namespace '{}' are held by live leases; the earliest expires at {} \
                 (in {}); wait for it, or raise the namespace's slots (at most what the layout's \
                 node-bits hold) with `cosid namespace raise-slots --store URL --namespace NS \
                 --slots N`: running runtimes keep their slots and new ones take the new slots",
                limit,
                self.namespace,
                crate::time::format_rfc3339_ms(earliest),
                fmt_ms(earliest.saturating_sub(now).max(0))
            ),
        )
    }

    /// Renews `lease`, reading the slot (and the store's clock) first: two round trips. The
    /// keeper renews with [`LeaseClient::renew_at`], one round trip in the common case. A store
    /// error is returned as `Err` (retry later); a refusal as `Renewal::Lost`.
    pub fn renew(&self, lease: &SlotLease) -> Result<Renewal> {
        for _ in 0..MAX_RACES {
            let (now, current) = self.store.read_slot(&self.namespace, lease.slot)?;
            let Some(current) = current else {
                return Ok(Renewal::Lost(Refusal::Vanished));
            };
            // A record other than the one this lease last wrote, or one whose lease expired,
            // on a store that may have lost writes since this lease's last write, may be an
            // older copy that the store moved back to (a restart from an old snapshot) while
            // another holder had the slot in between: renewing it would stretch this holder's
            // window over theirs. It is lost; the acquisition that follows takes a new tenure
            // above every ceiling the store may have forgotten.
            if lease.version() != Some(current.version) || now >= current.value.expires_at {
                let lost = self.lost_at()?.flatten();
                let moved_back = lost.is_some_and(|lost| lost >= lease.store_now);
                #[cfg(feature = "mutation-switches")]
                let moved_back = mutation::moved_back(moved_back);
                if moved_back {
                    return Ok(Renewal::Lost(Refusal::MovedBack));
                }
            }
            let next =
                match rules::renew(&current.value, &lease.owner, lease.fence, now, self.terms) {
                    Ok(next) => next,
                    Err(refusal) => return Ok(Renewal::Lost(refusal)),
                };
            if let Some(version) = self.store.cas_slot(
                &self.namespace,
                SlotWrite::new(Some(current.version), &next),
            )? {
                return Ok(Renewal::Renewed(SlotLease::written(
                    &self.namespace,
                    next,
                    version,
                    now,
                    true,
                )));
            }
        }
        Err(self.too_many_races("renewing"))
    }

    /// Renews `lease` as of `store_now`, an estimate of the store's clock (the last reading of
    /// it plus the local monotonic time since): **one round trip** when the slot still holds the
    /// record this lease last wrote, a compare-and-set against that record's version of the
    /// record [`rules::renew`] makes of it. When that compare-and-set writes nothing (someone
    /// else wrote the slot, a renewal whose answer was lost wrote it, the store lost it) or the
    /// lease does not know its record, it falls back to [`LeaseClient::renew`]: read, then
    /// compare-and-set, as of the clock the read returns.
    ///
    /// Why the estimate is safe (`docs/protocol.md` section 6): the compare-and-set succeeds
    /// only if the slot's version is the one the store gave the record we wrote, and a version
    /// never repeats for one key, so the slot holds exactly that record: the renewal is the one
    /// a read-then-compare-and-set would have made if its read had returned it, with another
    /// `now`. And `now` only decides `expires_at` (`max(expires_at, now + ttl)`) and with it the
    /// ceiling, while `next_floor` moves with the ceiling in the same write: whatever `now`, the
    /// next holder's floor is at or above every ceiling this holder was granted, and the holder
    /// issues only up to a ceiling the store accepted. An estimate that is off moves when the
    /// lease expires (availability), never which timestamps two holders may issue (safety).
    pub fn renew_at(&self, lease: &SlotLease, store_now: i64) -> Result<Renewal> {
        // A lease that expired as far as this holder can tell renews by a read (which sees the
        // store's clock, and whether the store lost writes lately), never blind.
        if let Some(w) = lease
            .last_written()
            .filter(|w| store_now < w.value.expires_at)
        {
            if let Ok(next) =
                rules::renew(&w.value, &lease.owner, lease.fence, store_now, self.terms)
            {
                if let Some(done) = self
                    .store
                    .cas_slot_timed(&self.namespace, SlotWrite::new(Some(w.version), &next))?
                {
                    return Ok(Renewal::Renewed(SlotLease::written(
                        &self.namespace,
                        next,
                        done.version,
                        done.store_now.unwrap_or(store_now),
                        done.store_now.is_some(),
                    )));
                }
            }
        }
        self.renew(lease)
    }

    /// Releases `lease`, handing `last_issued` (unit start ms of the last issued timestamp) to
    /// the next holder. `Ok(false)` if the lease was already gone.
    pub fn release(&self, lease: &SlotLease, last_issued: Option<i64>) -> Result<bool> {
        Ok(self.release_handing_over(lease, last_issued)?.is_some())
    }

    /// [`LeaseClient::release`], returning the next floor the release wrote (what the next
    /// holder of the slot starts above), or `None` when the slot was no longer ours.
    ///
    /// One round trip in the common case: a compare-and-set against the version of the record
    /// this lease last wrote, of the record [`rules::release`] makes of it (a release needs no
    /// clock). Only when that writes nothing does it read the slot and try again as before.
    pub fn release_handing_over(
        &self,
        lease: &SlotLease,
        last_issued: Option<i64>,
    ) -> Result<Option<i64>> {
        if let Some(w) = lease.last_written() {
            if let Ok(next) = rules::release(&w.value, &lease.owner, lease.fence, last_issued) {
                if self
                    .store
                    .cas_slot(&self.namespace, SlotWrite::new(Some(w.version), &next))?
                    .is_some()
                {
                    return Ok(Some(next.next_floor));
                }
            }
        }
        for _ in 0..MAX_RACES {
            let (_, current) = self.store.read_slot(&self.namespace, lease.slot)?;
            let Some(current) = current else {
                return Ok(None);
            };
            // A store that moved back (restored from an older snapshot) may hold a lower
            // ceiling than this holder was granted since: the hand-over still covers every
            // timestamp it issued.
            let seen = SlotRecord {
                ceiling: current.value.ceiling.max(lease.ceiling),
                ..current.value.clone()
            };
            let Ok(next) = rules::release(&seen, &lease.owner, lease.fence, last_issued) else {
                return Ok(None);
            };
            if self
                .store
                .cas_slot(
                    &self.namespace,
                    SlotWrite::new(Some(current.version), &next),
                )?
                .is_some()
            {
                return Ok(Some(next.next_floor));
            }
        }
        Err(self.too_many_races("releasing"))
    }

    /// Raises the namespace's `not_before` (the 4.x migration, and the recovery after a store
    /// lost acknowledged writes): no acquisition that completes after this returns gets a floor
    /// below it. Creates the namespace record if there is none yet.
    ///
    /// Two steps, each a compare-and-set per record: the namespace record first, then the slot
    /// records, raising the next floor of free slots and rewriting held ones. The second step
    /// changes the version of every record an acquisition in flight may have read, so one that
    /// read the old `not_before` loses its compare-and-set and retries with the new one: every
    /// existing record, and a record for each slot without one that a starter may take without
    /// reading one ([`MIGRATE_VACANT_BOUND`]), not every slot the namespace could have (a
    /// namespace of 2^20 slots would get a million records, and every later read would carry
    /// them). Slots still held by a live lease whose window starts below `not_before` are
    /// reported: their holders were granted before the migration and must be restarted.
    ///
    /// Refused unless `force`: a `not_before` outside the time the namespace's layout can
    /// represent (the recorded one, or the default layout where none is recorded), and one
    /// more than a day ahead of the store's clock, which would stop every runtime of the
    /// namespace until then with no way back.
    pub fn raise_not_before(
        store: &SharedStore,
        namespace: &str,
        not_before_ms: i64,
        force: bool,
    ) -> Result<Migration> {
        if !force {
            let snap = store.candidates(namespace, &CandidateAsk::NAMESPACE_ONLY)?;
            check_not_before(
                namespace,
                snap.namespace.and_then(|n| n.value.layout),
                not_before_ms,
                snap.store_now,
            )?;
        }
        let record = Self::raise_namespace_not_before(store, namespace, not_before_ms)?;
        let mut held_below = Vec::new();
        let snap = store.snapshot(namespace)?;
        let live = snap
            .slots
            .slots
            .iter()
            .filter(|r| !rules::is_free(&r.value, snap.slots.store_now))
            .count();
        let vacant_below = record
            .limit
            .min(MIGRATE_VACANT_BOUND.saturating_add(2 * FAR_PICKS * live as u32));
        let mut slots: Vec<u32> = snap.slots.slots.iter().map(|r| r.value.slot).collect();
        slots.extend(0..vacant_below);
        slots.sort_unstable();
        slots.dedup();
        for slot in slots.into_iter().filter(|s| *s < record.limit) {
            let mut settled = false;
            for _ in 0..MAX_RACES {
                let (now, current) = store.read_slot(namespace, slot)?;
                let (version, rec) = match current {
                    Some(v) => (Some(v.version), v.value),
                    None => (None, SlotRecord::vacant(slot)),
                };
                let next = if rec.owner.is_none() {
                    SlotRecord {
                        next_floor: rec.next_floor.max(not_before_ms),
                        ..rec.clone()
                    }
                } else {
                    rec.clone()
                };
                if store
                    .cas_slot(namespace, SlotWrite::new(version, &next))?
                    .is_some()
                {
                    if let Some(owner) = &rec.owner {
                        if !rules::is_free(&rec, now) && rec.floor < not_before_ms {
                            held_below.push((slot, owner.key.clone()));
                        }
                    }
                    settled = true;
                    break;
                }
            }
            if !settled {
                return Err(Error::store(format!(
                    "lost {MAX_RACES} races raising not-before on slot {slot} of '{namespace}'"
                )));
            }
        }
        Ok(Migration {
            namespace: record,
            held_below,
        })
    }

    fn raise_namespace_not_before(
        store: &SharedStore,
        namespace: &str,
        not_before_ms: i64,
    ) -> Result<NamespaceRecord> {
        for _ in 0..MAX_RACES {
            let snap = store.snapshot(namespace)?;
            let (expected, rec) = match snap.namespace {
                Some(v) => (Some(v.version), v.value),
                None => (
                    None,
                    NamespaceRecord {
                        limit: 0,
                        tolerance_ms: 0,
                        not_before_ms: 0,
                        layout: None,
                        ttl_ms: None,
                    },
                ),
            };
            if rec.not_before_ms >= not_before_ms {
                return Ok(rec);
            }
            let next = NamespaceRecord {
                not_before_ms,
                ..rec
            };
            if store
                .cas_namespace(namespace, NamespaceWrite::new(expected, &next))?
                .is_some()
            {
                return Ok(next);
            }
        }
        Err(Error::store(format!(
            "lost {MAX_RACES} races raising not-before in '{namespace}'"
        )))
    }
}

/// The slots without a record below which [`LeaseClient::raise_not_before`] writes one: a
/// starter that lost up to three compare-and-set races picks among the lowest
/// `(SPREAD_MIN + 2 × live) × 2^(races + FREE_PICKS - 1)` free slots (`candidate_ask`), so
/// with no live lease, below `SPREAD_MIN × 2^6`; each live lease widens that by
/// `2 × FAR_PICKS` more.
pub const MIGRATE_VACANT_BOUND: u32 = (SPREAD_MIN as u32) << 6;

/// See [`MIGRATE_VACANT_BOUND`].
const FAR_PICKS: u32 = 1 << 6;

/// How far ahead of the store's clock `cosid migrate` raises `not_before` without `--force`.
pub const MIGRATE_AHEAD_LIMIT_MS: i64 = 86_400_000;

/// Refuses a `not_before` the layout cannot represent or more than
/// [`MIGRATE_AHEAD_LIMIT_MS`] ahead of `store_now`, naming the value, the bound and the fix.
fn check_not_before(
    namespace: &str,
    layout: Option<IdLayout>,
    not_before_ms: i64,
    store_now: i64,
) -> Result<()> {
    let layout = layout.unwrap_or_else(|| IdLayout::of(&crate::layout::Layout::default()));
    let units = 1i64
        .checked_shl(u32::from(layout.timestamp_bits))
        .unwrap_or(i64::MAX);
    let runs_out = layout
        .epoch_ms
        .saturating_add(units.saturating_mul(layout.unit.ms()));
    // Years past 9999 have no RFC 3339 form.
    let at = |ms: i64| match ms {
        0..=253_402_300_799_999 => crate::time::format_rfc3339_ms(ms),
        _ => format!("{ms} ms since the Unix epoch"),
    };
    if not_before_ms < layout.epoch_ms || not_before_ms >= runs_out {
        return Err(Error::invalid(format!(
            "not-before {} lies outside the time namespace '{namespace}''s id layout can hold \
             ({} to {}); give a time inside it, or --force",
            at(not_before_ms),
            at(layout.epoch_ms),
            at(runs_out)
        )));
    }
    if not_before_ms > store_now.saturating_add(MIGRATE_AHEAD_LIMIT_MS) {
        return Err(Error::invalid(format!(
            "not-before {} is more than a day ahead of the store's clock ({}): every runtime \
             of namespace '{namespace}' would wait until then, and not-before never goes back; \
             give an earlier time, or --force if that is what you want",
            at(not_before_ms),
            at(store_now)
        )));
    }
    Ok(())
}

/// What `raise_not_before` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The namespace record after the raise.
    pub namespace: NamespaceRecord,
    /// Slots held by a live lease granted before the raise whose window starts below
    /// `not_before`: `(slot, owner key)`. Restart those holders.
    pub held_below: Vec<(u32, String)>,
}

fn fmt_ms(ms: i64) -> String {
    crate::time::format_duration(std::time::Duration::from_millis(ms.max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, SharedClock};
    use crate::lease::Owner;
    use crate::store::hooked::{Call, Hook, Hooked, Reply};
    use crate::store::memory::MemoryStore;
    use crate::store::SlotStore;
    use std::sync::Arc;

    /// A fault injector in front of the real memory store, on a manual clock.
    #[derive(Debug)]
    struct Faulty {
        clock: Arc<ManualClock>,
        /// Every read of the namespace (a snapshot or a candidate view) fails with this.
        snapshot_error: Option<(ErrorKind, &'static str)>,
        /// Namespace writes report success and write nothing (a store that loses writes).
        forgets_namespace: bool,
        /// Every slot compare-and-set reports a lost race (versions that never match).
        always_raced: bool,
        /// The first slot compare-and-set after this is set loses its race: it writes nothing,
        /// or, with `taker`, lets the lease expire (the clock moves on past it) and `taker` take
        /// that slot first (a starter that got there in between).
        lose_next: std::sync::atomic::AtomicBool,
        taker: Option<Owner>,
        /// What `started_at` reports.
        started_at: Option<i64>,
    }

    impl Faulty {
        fn new() -> Faulty {
            Faulty {
                clock: ManualClock::shared(1_000),
                snapshot_error: None,
                forgets_namespace: false,
                always_raced: false,
                lose_next: false.into(),
                taker: None,
                started_at: None,
            }
        }

        /// A memory store on this injector's clock, behind it.
        fn store(self) -> Arc<Hooked<Faulty>> {
            Hooked::new(MemoryStore::new(self.clock.clone() as SharedClock), self)
        }

        /// A client of namespace "ns" (2 slots) on [`Faulty::store`].
        fn client(self) -> LeaseClient {
            LeaseClient::new(self.store(), "ns", 2, terms()).unwrap()
        }
    }

    impl Hook for Faulty {
        fn started_at(&self, _inner: &dyn SlotStore, _namespace: &str) -> Result<Option<i64>> {
            Ok(self.started_at)
        }
        fn call(&self, inner: &dyn SlotStore, call: Call<'_>) -> Result<Reply> {
            match call {
                Call::Snapshot { .. } | Call::Candidates { .. } => match self.snapshot_error {
                    Some((kind, message)) => Err(Error::new(kind, message)),
                    None => call.on(inner),
                },
                Call::CasNamespace { .. } if self.forgets_namespace => Ok(Reply::Version(Some(1))),
                // A timed compare-and-set is a plain one, written without the store's clock.
                Call::CasSlot { namespace, write } | Call::CasSlotTimed { namespace, write } => {
                    if self.always_raced {
                        return Ok(Reply::Version(None));
                    }
                    if !self
                        .lose_next
                        .swap(false, std::sync::atomic::Ordering::SeqCst)
                    {
                        return Ok(Reply::Version(inner.cas_slot(namespace, write)?));
                    }
                    if let Some(taker) = &self.taker {
                        self.clock.advance(std::time::Duration::from_secs(2));
                        plant_lease(inner, write.record.slot, taker);
                    }
                    Ok(Reply::Version(None))
                }
                _ => call.on(inner),
            }
        }
    }

    /// An acquisition through `faulty` fails with a `Store` error saying `why`.
    fn check_acquisition_gives_up(faulty: Faulty, why: &str) {
        let e = faulty.client().acquire(&request()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store, "{e}");
        assert!(e.message().contains(why), "{e}");
    }

    #[test]
    fn an_acquisition_that_loses_every_race_gives_up_naming_the_races() {
        let faulty = Faulty {
            always_raced: true,
            ..Faulty::new()
        };
        check_acquisition_gives_up(
            faulty,
            "lost 10000 compare-and-set races in a row acquiring a slot",
        );
    }

    fn request() -> AcquireRequest {
        AcquireRequest {
            owner: Owner::new("a"),
            preferred_slot: None,
            floor_at_least: 0,
        }
    }

    #[test]
    fn a_store_failure_of_another_kind_names_the_store_and_a_store_error_is_kept_as_is() {
        let client_failing_with = |kind, message| {
            Faulty {
                snapshot_error: Some((kind, message)),
                ..Faulty::new()
            }
            .client()
        };
        let c = client_failing_with(ErrorKind::Timeout, "no answer in 5s");
        let e = c.acquire(&request()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert_eq!(
            e.message(),
            format!("no answer in 5s (store {})", c.store().describe())
        );
        // A store error already names the store: it is passed on unchanged.
        let c = client_failing_with(ErrorKind::Store, "store memory:x: broken pipe");
        let e = c.acquire(&request()).unwrap_err();
        assert_eq!(
            (e.kind(), e.message()),
            (ErrorKind::Store, "store memory:x: broken pipe")
        );
    }

    fn layout_client(store: &SharedStore, epoch: &str) -> LeaseClient {
        let layout =
            crate::Config::from_yaml(&format!("cosid: {{snowflake: {{epoch: '{epoch}'}}}}"))
                .unwrap()
                .layout;
        let terms = Terms {
            ttl_ms: 30_000,
            tolerance_ms: 1_000,
        };
        LeaseClient::new(store.clone(), "ns", 2, terms)
            .unwrap()
            .with_layout(&layout)
    }

    /// A namespace `cosid migrate` created before any runtime records the layout of the first
    /// runtime that completes it: a second runtime with another layout is refused.
    #[test]
    fn completing_a_migrated_namespace_records_the_runtime_s_layout() {
        let store: SharedStore = MemoryStore::new(ManualClock::shared(1_000) as SharedClock);
        LeaseClient::raise_not_before(&store, "ns", 5_000, true).unwrap();
        let first = layout_client(&store, "2019-12-24T16:00:00Z");
        let rec = first.open_namespace().unwrap();
        assert!(rec.layout.is_some(), "{rec:?}");
        assert_eq!(rec.not_before_ms, 5_000, "migrate's floor is kept");
        let other = layout_client(&store, "2019-12-24T16:00:02Z");
        let e = other.open_namespace().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NamespaceMismatch, "{e}");
    }

    /// Opening a namespace that already records this layout writes nothing (a write would race
    /// every other runtime starting at the same moment for nothing).
    #[test]
    fn opening_a_namespace_with_the_same_layout_writes_nothing() {
        let store: SharedStore = MemoryStore::new(ManualClock::shared(1_000) as SharedClock);
        let a = layout_client(&store, "2019-12-24T16:00:00Z");
        a.open_namespace().unwrap();
        let version = store.snapshot("ns").unwrap().namespace.unwrap().version;
        a.open_namespace().unwrap();
        layout_client(&store, "2019-12-24T16:00:00Z")
            .open_namespace()
            .unwrap();
        assert_eq!(
            store.snapshot("ns").unwrap().namespace.unwrap().version,
            version
        );
    }

    fn incarnation(i: u64) -> uuid::Uuid {
        uuid::Uuid::from_u64_pair(0x5EED ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15), i)
    }

    /// 64 starters reading one empty snapshot of 1024 slots spread over the lowest 64 free
    /// slots instead of all racing for slot 0; 1024 spread over all of them once they have
    /// lost a few races.
    #[test]
    fn starters_reading_one_snapshot_spread_over_the_free_slots() {
        let free: Vec<u32> = (0..1024).collect();
        let picks = |n: u64, raced: u32| -> HashMap<u32, u32> {
            let width = spread_width(free.len(), 0, raced);
            let mut seen = HashMap::new();
            for i in 0..n {
                let slot = spread_pick(&free[..width], &incarnation(i), raced).unwrap();
                assert!(
                    (slot as usize) < width,
                    "{slot} is not among the lowest {width}"
                );
                *seen.entry(slot).or_insert(0) += 1;
            }
            seen
        };
        assert_eq!(spread_width(1024, 0, 0), SPREAD_MIN);
        // Every slot taken once would be 64 distinct; a uniform choice gives 64 * (1 - 1/e) ≈ 40
        // on average. The old choice (the lowest free slot) gave 1.
        let first = picks(64, 0);
        assert!(
            first.len() >= 32,
            "only {} distinct slots of 64",
            first.len()
        );
        assert!(*first.values().max().unwrap() <= 6, "{first:?}");
        // After 4 lost races a starter spreads over 1024 slots.
        assert_eq!(spread_width(1024, 0, 4), 1024);
        let later = picks(1024, 4);
        assert!(
            later.len() >= 560,
            "only {} distinct slots of 1024",
            later.len()
        );
        // With 300 slots held, the first attempt already spreads over 600 free ones.
        assert_eq!(spread_width(724, 300, 0), 600);
        assert_eq!(spread_width(10, 300, 0), 10, "never more than are free");
    }

    #[test]
    fn the_spread_choice_is_a_pure_function_of_its_inputs() {
        let free: Vec<u32> = (0..64).map(|s| s * 3 + 1).collect();
        for i in 0..200 {
            let a = spread_pick(&free, &incarnation(i), 0);
            assert_eq!(
                a,
                spread_pick(&free, &incarnation(i), 0),
                "same inputs, same slot"
            );
            assert!(free.contains(&a.unwrap()));
        }
        // Another attempt of the same starter moves it (for most starters).
        let moved = (0..200)
            .filter(|i| {
                spread_pick(&free, &incarnation(*i), 0) != spread_pick(&free, &incarnation(*i), 1)
            })
            .count();
        assert!(
            moved > 150,
            "only {moved} of 200 starters moved after a lost race"
        );
        assert_eq!(spread_pick(&[], &incarnation(1), 0), None);
        assert_eq!(spread_pick(&[7], &incarnation(1), 3), Some(7));
    }

    #[test]
    fn leases_are_granted_in_the_client_s_namespace() {
        let store: SharedStore = MemoryStore::new(ManualClock::shared(1_000) as SharedClock);
        let client = LeaseClient::new(store.clone(), "orders", 2, terms()).unwrap();
        assert_eq!(client.namespace(), "orders");
        let lease = client.acquire(&request()).unwrap().lease;
        assert_eq!(lease.namespace, client.namespace());
        let held = store.read_slot(client.namespace(), lease.slot).unwrap().1;
        assert_eq!(held.map(|v| v.value.owner), Some(Some(lease.owner)));
    }

    #[test]
    fn an_acquisition_whose_namespace_never_appears_gives_up() {
        let faulty = Faulty {
            forgets_namespace: true,
            ..Faulty::new()
        };
        check_acquisition_gives_up(faulty, "acquiring a slot");
    }

    fn terms() -> Terms {
        Terms {
            ttl_ms: 1_000,
            tolerance_ms: 100,
        }
    }

    /// A live lease on `slot` for `owner`, written straight into the store.
    fn plant_lease(store: &dyn SlotStore, slot: u32, owner: &Owner) {
        plant_lease_above(store, slot, owner, 0);
    }

    /// A live lease on `slot` for `owner` whose floor is at least `floor_at_least`.
    fn plant_lease_above(store: &dyn SlotStore, slot: u32, owner: &Owner, floor_at_least: i64) {
        let (now, current) = store.read_slot("ns", slot).unwrap();
        let rec = current.map_or(SlotRecord::vacant(slot), |v| v.value);
        let next = rules::acquire(&rec, owner, now, terms(), floor_at_least);
        let expected = store.read_slot("ns", slot).unwrap().1.map(|v| v.version);
        assert!(store
            .cas_slot("ns", SlotWrite::new(expected, &next))
            .unwrap()
            .is_some());
    }

    /// A store whose candidate view is replaced by `view` (given the real one): a store that
    /// filters too much, or one that lies.
    #[derive(Debug)]
    struct Viewed(fn(CandidateView) -> CandidateView);

    impl Hook for Viewed {
        fn call(&self, inner: &dyn SlotStore, call: Call<'_>) -> Result<Reply> {
            match call.on(inner)? {
                Reply::Candidates(view) => Ok(Reply::Candidates((self.0)(view))),
                other => Ok(other),
            }
        }
    }

    /// A view that covers nothing and names no live slot (a store that filters too much): an
    /// acquisition reads a whole snapshot and takes a free slot; in a namespace where every
    /// slot is held it reports `Exhausted` with the earliest expiry, from that snapshot.
    #[test]
    fn a_view_with_nothing_to_take_is_checked_against_a_whole_snapshot() {
        let clock = ManualClock::shared(1_000);
        let memory: SharedStore = MemoryStore::new(clock.clone() as SharedClock);
        let store: SharedStore = Hooked::new(
            memory.clone(),
            Viewed(|view| CandidateView {
                covered_below: 0,
                live: vec![],
                records: vec![],
                ..view
            }),
        );
        let client = LeaseClient::new(store, "ns", 2, terms()).unwrap();
        let mut slots: Vec<u32> = (0..4)
            .map(|_| client.acquire(&request()).unwrap().lease.slot)
            .collect();
        slots.sort_unstable();
        assert_eq!(slots, [0, 1, 2, 3]);
        let e = client.acquire(&request()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Exhausted, "{e}");
        assert!(e.to_string().contains("all 4 slots"), "{e}");
    }

    /// A view that vouches for slots it does not know (a store that lies: every slot covered,
    /// none live, no record): the acquisition's compare-and-set against "no record" writes
    /// nothing on a slot that has one, so it gives up after its races and takes over nothing.
    #[test]
    fn a_view_that_lies_never_gets_a_held_slot_taken() {
        let clock = ManualClock::shared(1_000);
        let memory: SharedStore = MemoryStore::new(clock.clone() as SharedClock);
        let honest = LeaseClient::new(memory.clone(), "ns", 2, terms()).unwrap();
        for _ in 0..4 {
            honest.acquire(&request()).unwrap();
        }
        let before = memory.snapshot("ns").unwrap();
        let store: SharedStore = Hooked::new(
            memory.clone(),
            Viewed(|view| CandidateView {
                live: vec![],
                records: vec![],
                ..view
            }),
        );
        let e = LeaseClient::new(store, "ns", 2, terms())
            .unwrap()
            .acquire(&request())
            .unwrap_err();
        assert!(e.to_string().contains("compare-and-set races"), "{e}");
        assert_eq!(
            memory.snapshot("ns").unwrap(),
            before,
            "nothing was written"
        );
    }

    /// A namespace of 2 slots (bits 1) whose store holds a lease on slot 2, outside it, for the
    /// very owner that asks (as a store written by a runtime with more bits could): slot 2 does
    /// not fit the id's slot field, so it is never handed out, not even as the asker's own.
    #[test]
    fn a_lease_beyond_the_namespace_s_slots_is_not_taken_for_the_asker_s_own() {
        let store: SharedStore = MemoryStore::new(ManualClock::shared(1_000) as SharedClock);
        let client = LeaseClient::new(store.clone(), "ns", 1, terms()).unwrap();
        let req = request();
        let first = client.acquire(&req).unwrap();
        client.release(&first.lease, Some(1_000)).unwrap();
        plant_lease(&*store, 2, &req.owner);
        let again = client.acquire(&req).unwrap();
        assert!(again.lease.slot < 2, "{:?}", again.lease);
        assert_ne!(again.choice, Choice::Own);
    }

    /// A preferred slot outside the namespace (slot 2 of 2) is not a candidate: the runtime
    /// takes a free slot instead.
    #[test]
    fn a_preferred_slot_beyond_the_namespace_s_slots_is_not_taken() {
        let store: SharedStore = MemoryStore::new(ManualClock::shared(1_000) as SharedClock);
        let client = LeaseClient::new(store, "ns", 1, terms()).unwrap();
        let got = client
            .acquire(&AcquireRequest {
                preferred_slot: Some(2),
                ..request()
            })
            .unwrap();
        assert!(got.lease.slot < 2, "{:?}", got.lease);
        assert_eq!(got.choice, Choice::Free);
    }

    /// The slot a starter picks on a namespace of 1024 slots after `raced` lost races, with
    /// `taken` held by others.
    fn expected_pick(owner: &Owner, taken: &[u32], raced: u32) -> u32 {
        let free: Vec<u32> = (0..1024).filter(|s| !taken.contains(s)).collect();
        let width = spread_width(free.len(), taken.len(), raced);
        spread_pick(&free[..width], &owner.incarnation, raced).unwrap()
    }

    /// Starter "a" acquires on a namespace of 1024 slots on `store`, after first taking a slot
    /// if `retry_own` (and then asking again, as a retry whose reply was lost does), its next
    /// slot compare-and-set losing a race: it must take the pick of its second attempt.
    fn check_the_pick_after_a_lost_race(store: Arc<Hooked<Faulty>>, retry_own: bool) {
        let client = LeaseClient::new(store.clone() as SharedStore, "ns", 10, terms()).unwrap();
        let req = AcquireRequest {
            owner: Owner {
                key: "a".into(),
                incarnation: incarnation(7),
            },
            ..request()
        };
        let taken = if retry_own {
            vec![client.acquire(&req).unwrap().lease.slot]
        } else {
            vec![]
        };
        store
            .lose_next
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let first = expected_pick(&req.owner, &taken, 0);
        let second = expected_pick(&req.owner, &taken, 1);
        assert_ne!(
            first, second,
            "use an incarnation whose two attempts differ"
        );
        let got = client.acquire(&req).unwrap();
        assert_eq!((got.lease.slot, got.choice), (second, Choice::Free));
    }

    /// After a lost race a starter counts it: its next pick is the one for its next attempt
    /// (spread wider, and elsewhere than the slot it just lost), not its first pick again.
    #[test]
    fn a_starter_that_lost_a_race_picks_for_its_next_attempt() {
        check_the_pick_after_a_lost_race(Faulty::new().store(), false);
    }

    /// The same when the race is lost renewing the asker's own slot (a retry of an acquisition
    /// whose reply was lost) to a starter that took that slot meanwhile.
    #[test]
    fn a_retry_that_lost_its_own_slot_picks_for_its_next_attempt() {
        let store = Faulty {
            taker: Some(Owner::new("b")),
            ..Faulty::new()
        };
        check_the_pick_after_a_lost_race(store.store(), true);
    }

    /// `cosid migrate` on a namespace of 4 slots: slot 0's lease expired, slot 1 is held with a
    /// floor below not-before, slot 2 with a floor at not-before exactly (its ids all lie above
    /// it), slot 3 was never used. Only slot 1's holder is reported, and the unused slot's next
    /// floor is raised to not-before.
    #[test]
    fn raising_not_before_reports_only_live_holders_below_it_and_lifts_unused_slots() {
        let clock = ManualClock::shared(1_000);
        let store: SharedStore = MemoryStore::new(clock.clone() as SharedClock);
        let client = LeaseClient::new(store.clone(), "ns", 2, terms()).unwrap();
        let first = client.acquire(&request()).unwrap().lease;
        client.release(&first, None).unwrap();
        let not_before = 50_000;
        plant_lease(&*store, 0, &Owner::new("expired"));
        clock.advance(std::time::Duration::from_secs(5));
        plant_lease(&*store, 1, &Owner::new("below"));
        plant_lease_above(&*store, 2, &Owner::new("at"), not_before);
        let migration = LeaseClient::raise_not_before(&store, "ns", not_before, true).unwrap();
        assert_eq!(migration.held_below, vec![(1, "below".to_string())]);
        let unused = store.read_slot("ns", 3).unwrap().1.unwrap().value;
        assert_eq!(unused.next_floor, not_before, "{unused:?}");
    }

    #[test]
    fn a_namespace_created_on_a_young_server_starts_above_every_ceiling_it_could_have_lost() {
        let open = |started_at: Option<i64>, guard: bool| {
            let faulty = Faulty {
                started_at,
                ..Faulty::new()
            };
            let now = crate::clock::Clock::now_ms(&*faulty.clock);
            let client = faulty.client();
            let client = if guard {
                client.with_restart_guard()
            } else {
                client
            };
            let ns = client.open_namespace().unwrap();
            let lease = client.acquire(&request()).unwrap().lease;
            (now, ns.not_before_ms, lease)
        };
        let longest = terms().ttl_ms + terms().tolerance_ms;
        // Started 500 ms ago: a lost ceiling may reach start + ttl + tolerance.
        let (now, not_before, lease) = open(Some(1_000 - 500), true);
        assert_eq!(not_before, now - 500 + longest);
        assert_eq!(lease.floor, not_before, "{lease:?}");
        // The same server without the guard, a server older than ttl + tolerance, and a
        // store that cannot tell: nothing to wait for.
        for (started_at, guard) in [
            (Some(1_000 - 500), false),
            (Some(1_000 - 31_000), true),
            (None, true),
        ] {
            let (_, not_before, lease) = open(started_at, guard);
            assert_eq!((not_before, lease.floor), (0, 0), "{started_at:?} {guard}");
        }
    }

    /// Hostile records: whatever a damaged or hostile store holds for a slot (any fence, any
    /// times, another owner or ours), and whatever its clock says, the client answers with a
    /// lease or an error, never a panic (debug builds check every addition), and any lease it
    /// grants is a window `(floor, ceiling]` at or above what the record handed over.
    mod hostile_records {
        use super::*;
        use proptest::prelude::*;

        fn extreme_i64() -> impl Strategy<Value = i64> {
            prop_oneof![
                Just(i64::MIN),
                Just(i64::MIN + 1),
                Just(-1i64),
                Just(0i64),
                Just(1_800_000_000_000i64),
                Just(i64::MAX - 1),
                Just(i64::MAX),
                any::<i64>(),
            ]
        }

        fn extreme_u64() -> impl Strategy<Value = u64> {
            prop_oneof![
                Just(0u64),
                Just(1u64),
                Just(rules::LAST_HOLDER_FENCE - 1),
                Just(rules::LAST_HOLDER_FENCE),
                Just(u64::MAX),
                any::<u64>(),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]
            #[test]
            fn never_panic_and_grant_only_windows_above_the_record(
                fence in extreme_u64(),
                expires_at in extreme_i64(),
                floor in extreme_i64(),
                ceiling in extreme_i64(),
                next_floor in extreme_i64(),
                now in extreme_i64(),
                owner_is_us in any::<bool>(),
                owned in any::<bool>(),
                floor_at_least in extreme_i64(),
                last_issued in proptest::option::of(extreme_i64()),
            ) {
                let clock = ManualClock::shared(now);
                let store = MemoryStore::named_with_clock(
                    &format!("hostile-{}", uuid::Uuid::new_v4()),
                    clock.clone(),
                );
                let us = Owner::new("us");
                let planted = SlotRecord {
                    slot: 0,
                    owner: owned.then(|| if owner_is_us { us.clone() } else { Owner::new("them") }),
                    last_owner_key: Some("us".into()),
                    fence,
                    expires_at,
                    floor,
                    ceiling,
                    next_floor,
                };
                // Slot 1 is held by a live stranger (or is as hostile): the client may only
                // take slot 0 or fail.
                let held = SlotRecord {
                    owner: Some(Owner::new("stranger")),
                    expires_at: i64::MAX,
                    fence: 1,
                    ..SlotRecord::vacant(1)
                };
                for rec in [&planted, &held] {
                    store.cas_slot("ns", SlotWrite::new(None, rec)).unwrap();
                }
                let client = LeaseClient::new(store, "ns", 1, terms()).unwrap();
                let req = AcquireRequest {
                    owner: us.clone(),
                    preferred_slot: Some(0),
                    floor_at_least,
                };
                let Ok(got) = client.acquire(&req) else {
                    return Ok(());
                };
                let lease = got.lease;
                // Slot 1 only once the stranger's lease expired, at the end of time.
                prop_assert!(lease.slot == 0 || now == i64::MAX, "{:?}", lease);
                let before = if lease.slot == 0 { &planted } else { &held };
                prop_assert!(lease.floor <= lease.ceiling, "{:?}", lease);
                if lease.fence != before.fence {
                    // A new ownership: the window starts at the handed-over floor or above.
                    prop_assert!(lease.fence > before.fence, "{:?}", lease);
                    prop_assert!(
                        lease.floor >= before.next_floor.max(floor_at_least),
                        "{:?}",
                        lease
                    );
                }
                // A generator bound to the granted window issues or refuses, on any clock.
                let window = Arc::new(crate::window::Window::bound(
                    lease.slot,
                    lease.floor,
                    lease.ceiling,
                ));
                for layout in [crate::layout::Layout::MILLIS, crate::layout::Layout::SAFE_JS_SECONDS] {
                    let g = crate::generator::Generator::new(
                        "",
                        layout,
                        window.clone(),
                        clock.clone(),
                        std::time::Duration::ZERO,
                    );
                    if let Ok(crate::generator::TryNext::Ready(id)) = g.try_next() {
                        let parts = layout.decompose(id).unwrap();
                        let ms = layout.unit_start_ms(parts.timestamp);
                        prop_assert!(lease.floor < ms && ms <= lease.ceiling, "{} {:?}", ms, lease);
                    }
                }
                clock.advance(std::time::Duration::from_millis(500));
                let _ = client.renew(&lease);
                let _ = client.release(&lease, last_issued);
            }
        }
    }
}
