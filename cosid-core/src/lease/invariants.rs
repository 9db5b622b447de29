//! The safety invariants of the slot lease, as plain functions over what happened.
//!
//! Uniqueness rests on windows, not on ids: if the windows the store grants on a slot never
//! overlap and every id lies in its holder's window, no id can repeat. "No id twice" alone is the
//! weakest check there is: two holders that overlap in time rarely hit the same time unit *and*
//! the same sequence number, so a broken protocol can pass it for a long time. These functions
//! check the strong properties directly, in the order of strength:
//!
//! | invariant | function | says |
//! |---|---|---|
//! | disjoint windows | [`disjoint_windows`] | on each slot, a window granted to a holder starts at or above every timestamp an earlier holder could have used: its highest granted ceiling, or its last issued timestamp after a clean release |
//! | one holder per unit | [`one_holder_per_unit`] | no `(slot, time unit)` is issued by two holders |
//! | id in its window | [`ids_in_windows`] | every id lies on its holder's slot, inside the window `(floor, ceiling]` its holder was granted before the id was issued, and not after its release |
//! | no id twice | [`no_id_twice`] | no id is issued twice |
//!
//! The input is a trace: the [`Step`]s in the order they happened. A holder is one tenure of a
//! slot, told apart by `(slot, incarnation, fence)`. Whoever produces the trace records every
//! window the store granted (acquisitions and renewals, as written by the store's
//! compare-and-set), every clean release with the holder's own last issued timestamp, and every
//! id with the holder that issued it. The deterministic simulation, the store conformance suite
//! and any other checker use the same definitions.
//!
//! Each function checks one invariant over a whole trace; [`Checker`] checks all four one step at
//! a time, for a producer that checks after every step (re-checking the whole trace each time
//! would be quadratic).

use super::record::{SlotLease, SlotRecord};
use std::collections::{HashMap, HashSet};
use std::fmt;
use uuid::Uuid;

/// One tenure of a slot: who held it, under which fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Holder {
    /// The slot.
    pub slot: u32,
    /// The holder's incarnation (unique per runtime start).
    pub incarnation: Uuid,
    /// The fence of this ownership.
    pub fence: u64,
}

impl Holder {
    /// The holder of a granted lease.
    pub fn of_lease(lease: &SlotLease) -> Holder {
        Holder {
            slot: lease.slot,
            incarnation: lease.owner.incarnation,
            fence: lease.fence,
        }
    }

    /// The holder of a slot record, `None` if the slot is not held.
    pub fn of_record(rec: &SlotRecord) -> Option<Holder> {
        rec.owner.as_ref().map(|o| Holder {
            slot: rec.slot,
            incarnation: o.incarnation,
            fence: rec.fence,
        })
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slot {} fence {} incarnation {}",
            self.slot, self.fence, self.incarnation
        )
    }
}

/// One thing that happened, in a trace ordered by when it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The store granted `holder` the window `(floor, ceiling]` on `holder.slot` (an acquisition
    /// or a renewal, as written by the store).
    Granted {
        /// Who.
        holder: Holder,
        /// Excluded lower bound.
        floor: i64,
        /// Included upper bound.
        ceiling: i64,
    },
    /// `holder` released its slot cleanly (the store accepted the release), having issued up to
    /// the time unit starting at `last_issued` ms (`None`: it issued nothing), as the holder
    /// itself knows it, not as the store recorded it.
    Released {
        /// Who.
        holder: Holder,
        /// Unit start (ms) of the last timestamp it issued.
        last_issued: Option<i64>,
    },
    /// `holder` issued `id`, whose slot field is `slot` and whose time unit starts at
    /// `unit_start_ms`.
    Issued {
        /// The id.
        id: u64,
        /// Who issued it (the lease its runtime held at that moment).
        holder: Holder,
        /// The slot field of the id.
        slot: u32,
        /// The start (ms) of the id's time unit.
        unit_start_ms: i64,
    },
}

impl Step {
    /// The window `lease` was granted, as a [`Step::Granted`] of its holder.
    pub fn of_lease(lease: &SlotLease) -> Step {
        Step::Granted {
            holder: Holder::of_lease(lease),
            floor: lease.floor,
            ceiling: lease.ceiling,
        }
    }
}

/// Which invariant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Invariant {
    /// Windows of different holders of a slot are disjoint.
    DisjointWindows,
    /// No `(slot, time unit)` is issued by two holders.
    OneHolderPerUnit,
    /// Every id lies in its holder's window.
    IdInWindow,
    /// No id is issued twice.
    NoIdTwice,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Invariant::DisjointWindows => "disjoint windows",
            Invariant::OneHolderPerUnit => "one holder per time unit",
            Invariant::IdInWindow => "id in its window",
            Invariant::NoIdTwice => "no id twice",
        })
    }
}

/// A broken invariant: which one, at which step of the trace (0-based), and what exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The invariant.
    pub invariant: Invariant,
    /// The index of the step that broke it.
    pub at: usize,
    /// What broke it, with the values.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invariant '{}' broken at step {}: {}",
            self.invariant, self.at, self.message
        )
    }
}

impl std::error::Error for Violation {}

/// Checks [`Invariant::DisjointWindows`] over `trace`.
pub fn disjoint_windows(trace: &[Step]) -> Result<(), Violation> {
    run(&mut DisjointWindows::default(), trace)
}

/// Checks [`Invariant::OneHolderPerUnit`] over `trace`.
pub fn one_holder_per_unit(trace: &[Step]) -> Result<(), Violation> {
    run(&mut OneHolderPerUnit::default(), trace)
}

/// Checks [`Invariant::IdInWindow`] over `trace`.
pub fn ids_in_windows(trace: &[Step]) -> Result<(), Violation> {
    run(&mut IdsInWindows::default(), trace)
}

/// Checks [`Invariant::NoIdTwice`] over `trace`.
pub fn no_id_twice(trace: &[Step]) -> Result<(), Violation> {
    run(&mut NoIdTwice::default(), trace)
}

/// Checks all four invariants over `trace`; the first violation in trace order.
pub fn check_all(trace: &[Step]) -> Result<(), Violation> {
    run(&mut Checker::default(), trace)
}

trait Observe {
    fn observe_at(&mut self, at: usize, step: &Step) -> Result<(), Violation>;
}

fn run(checker: &mut impl Observe, trace: &[Step]) -> Result<(), Violation> {
    trace
        .iter()
        .enumerate()
        .try_for_each(|(at, step)| checker.observe_at(at, step))
}

/// All four invariants, checked one step at a time against everything observed before.
#[derive(Debug, Default)]
pub struct Checker {
    steps: usize,
    windows: DisjointWindows,
    units: OneHolderPerUnit,
    in_window: IdsInWindows,
    ids: NoIdTwice,
}

impl Checker {
    /// A checker that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks `step`, the next step of the trace, against every step observed before it.
    pub fn observe(&mut self, step: &Step) -> Result<(), Violation> {
        let at = self.steps;
        self.steps += 1;
        self.observe_at(at, step)
    }

    /// How many steps were observed.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// How many distinct ids were observed.
    pub fn ids(&self) -> usize {
        self.ids.seen.len()
    }
}

impl Observe for Checker {
    fn observe_at(&mut self, at: usize, step: &Step) -> Result<(), Violation> {
        self.windows.observe_at(at, step)?;
        self.units.observe_at(at, step)?;
        self.in_window.observe_at(at, step)?;
        self.ids.observe_at(at, step)
    }
}

/// One holder's tenure of a slot as the store granted it.
#[derive(Debug, Clone, Copy)]
struct Tenure {
    holder: Holder,
    /// The lowest floor granted to it.
    floor: i64,
    /// The highest ceiling granted to it.
    ceiling: i64,
    /// `Some(last issued)` once it released cleanly (and was granted nothing since).
    released: Option<Option<i64>>,
}

impl Tenure {
    /// The highest timestamp this holder could have used: its highest granted ceiling, or after a
    /// clean release its last issued timestamp clamped into its window.
    fn used_up_to(&self) -> i64 {
        match self.released {
            None => self.ceiling,
            Some(last) => self.floor.max(last.unwrap_or(self.floor).min(self.ceiling)),
        }
    }
}

#[derive(Debug, Default)]
struct DisjointWindows {
    /// Per slot, its tenures in the order of their first grant.
    slots: HashMap<u32, Vec<Tenure>>,
}

impl Observe for DisjointWindows {
    fn observe_at(&mut self, at: usize, step: &Step) -> Result<(), Violation> {
        let broken = |message: String| Violation {
            invariant: Invariant::DisjointWindows,
            at,
            message,
        };
        match *step {
            Step::Granted {
                holder,
                floor,
                ceiling,
            } => {
                let tenures = self.slots.entry(holder.slot).or_default();
                let k = match tenures.iter().position(|t| t.holder == holder) {
                    Some(k) => {
                        let t = &mut tenures[k];
                        t.floor = t.floor.min(floor);
                        t.ceiling = t.ceiling.max(ceiling);
                        t.released = None;
                        k
                    }
                    None => {
                        tenures.push(Tenure {
                            holder,
                            floor,
                            ceiling,
                            released: None,
                        });
                        tenures.len() - 1
                    }
                };
                let this = tenures[k];
                // Every earlier holder's used range lies at or below this window's floor...
                if let Some(e) = tenures[..k].iter().find(|e| e.used_up_to() > this.floor) {
                    return Err(broken(format!(
                        "window ({floor}, {ceiling}] granted to {holder} starts below {}, the \
                         highest timestamp the earlier holder {} could have used (its window \
                         ({}, {}], released: {:?})",
                        e.used_up_to(),
                        e.holder,
                        e.floor,
                        e.ceiling,
                        e.released
                    )));
                }
                // ...and a grant to an earlier holder never reaches into a later one's window.
                if let Some(l) = tenures[k + 1..]
                    .iter()
                    .find(|l| this.used_up_to() > l.floor)
                {
                    return Err(broken(format!(
                        "window ({floor}, {ceiling}] granted to {holder} reaches above the floor \
                         {} of the later holder {}",
                        l.floor, l.holder
                    )));
                }
                Ok(())
            }
            Step::Released {
                holder,
                last_issued,
            } => {
                if let Some(t) = self
                    .slots
                    .get_mut(&holder.slot)
                    .and_then(|ts| ts.iter_mut().find(|t| t.holder == holder))
                {
                    t.released = Some(last_issued);
                }
                Ok(())
            }
            Step::Issued { .. } => Ok(()),
        }
    }
}

#[derive(Debug, Default)]
struct OneHolderPerUnit {
    units: HashMap<(u32, i64), Holder>,
}

impl Observe for OneHolderPerUnit {
    fn observe_at(&mut self, at: usize, step: &Step) -> Result<(), Violation> {
        let Step::Issued {
            id,
            holder,
            slot,
            unit_start_ms,
        } = *step
        else {
            return Ok(());
        };
        let first = *self.units.entry((slot, unit_start_ms)).or_insert(holder);
        if first != holder {
            return Err(Violation {
                invariant: Invariant::OneHolderPerUnit,
                at,
                message: format!(
                    "id {id} on slot {slot} in the time unit starting at {unit_start_ms} ms issued \
                     by {holder}; that unit was already used on that slot by {first}"
                ),
            });
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct IdsInWindows {
    /// Per holder: the window it holds (first floor, highest ceiling) and whether it released.
    windows: HashMap<Holder, (i64, i64, bool)>,
}

impl Observe for IdsInWindows {
    fn observe_at(&mut self, at: usize, step: &Step) -> Result<(), Violation> {
        match *step {
            Step::Granted {
                holder,
                floor,
                ceiling,
            } => {
                let w = self
                    .windows
                    .entry(holder)
                    .or_insert((floor, ceiling, false));
                w.1 = w.1.max(ceiling);
                w.2 = false;
                Ok(())
            }
            Step::Released { holder, .. } => {
                if let Some(w) = self.windows.get_mut(&holder) {
                    w.2 = true;
                }
                Ok(())
            }
            Step::Issued {
                id,
                holder,
                slot,
                unit_start_ms,
            } => {
                let broken = |message: String| {
                    Err(Violation {
                        invariant: Invariant::IdInWindow,
                        at,
                        message: format!("id {id} (slot {slot}, unit start {unit_start_ms} ms) issued by {holder}: {message}"),
                    })
                };
                let Some(&(floor, ceiling, released)) = self.windows.get(&holder) else {
                    return broken("the store never granted that holder a window".into());
                };
                if slot != holder.slot {
                    return broken(format!(
                        "the id is not on the holder's slot {}",
                        holder.slot
                    ));
                }
                if released {
                    return broken("issued after the holder released its slot".into());
                }
                if unit_start_ms <= floor || unit_start_ms > ceiling {
                    return broken(format!("outside the holder's window ({floor}, {ceiling}]"));
                }
                Ok(())
            }
        }
    }
}

#[derive(Debug, Default)]
struct NoIdTwice {
    seen: HashSet<u64>,
}

impl Observe for NoIdTwice {
    fn observe_at(&mut self, at: usize, step: &Step) -> Result<(), Violation> {
        if let Step::Issued { id, holder, .. } = *step {
            if !self.seen.insert(id) {
                return Err(Violation {
                    invariant: Invariant::NoIdTwice,
                    at,
                    message: format!("id {id} issued again, by {holder}"),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(slot: u32, n: u128, fence: u64) -> Holder {
        Holder {
            slot,
            incarnation: Uuid::from_u128(n),
            fence,
        }
    }

    fn granted(holder: Holder, floor: i64, ceiling: i64) -> Step {
        Step::Granted {
            holder,
            floor,
            ceiling,
        }
    }

    fn issued(id: u64, holder: Holder, unit_start_ms: i64) -> Step {
        Step::Issued {
            id,
            holder,
            slot: holder.slot,
            unit_start_ms,
        }
    }

    /// A correct history of slot 0: A acquires and renews, crashes; B takes over above A's
    /// highest ceiling and releases after issuing at 2500; C starts at B's last issued
    /// timestamp. Every invariant holds.
    fn good() -> Vec<Step> {
        let (a, b, c) = (holder(0, 1, 1), holder(0, 2, 2), holder(0, 3, 4));
        vec![
            granted(a, 0, 1000),
            issued(1, a, 500),
            granted(a, 0, 1800),
            issued(2, a, 1700),
            granted(b, 1800, 3000),
            issued(3, b, 2500),
            Step::Released {
                holder: b,
                last_issued: Some(2500),
            },
            granted(c, 2500, 4000),
            issued(4, c, 2501),
        ]
    }

    #[test]
    fn a_correct_history_passes_every_invariant() {
        let t = good();
        assert_eq!(disjoint_windows(&t), Ok(()));
        assert_eq!(one_holder_per_unit(&t), Ok(()));
        assert_eq!(ids_in_windows(&t), Ok(()));
        assert_eq!(no_id_twice(&t), Ok(()));
        assert_eq!(check_all(&t), Ok(()));
        let mut c = Checker::new();
        for s in &t {
            c.observe(s).unwrap();
        }
        assert_eq!((c.steps(), c.ids()), (t.len(), 4));
    }

    /// Two holders' grants on one slot that overlap, each caught at its third grant with the
    /// message saying how. No id is issued at all, so only this invariant can see them: the
    /// other three pass, and `check_all` reports this one violation.
    #[test]
    fn disjoint_windows_catches_overlapping_grants() {
        let (a, b) = (holder(0, 1, 1), holder(0, 2, 2));
        let cases = [
            // B's floor is A's first ceiling, not its renewed one: the renew-keeps-next-floor
            // bug.
            (
                [
                    granted(a, 0, 1000),
                    granted(a, 0, 1800),
                    granted(b, 1000, 3000),
                ],
                "starts below 1800",
            ),
            // A's renewal is accepted after B took over: A may now issue inside B's window.
            (
                [
                    granted(a, 0, 1000),
                    granted(b, 1000, 2000),
                    granted(a, 0, 1500),
                ],
                "reaches above the floor 1000",
            ),
        ];
        for (t, says) in cases {
            let v = disjoint_windows(&t).unwrap_err();
            assert_eq!((v.invariant, v.at), (Invariant::DisjointWindows, 2));
            assert!(v.message.contains(says), "{v}");
            assert_eq!(check_all(&t).unwrap_err(), v);
            assert_eq!(one_holder_per_unit(&t), Ok(()));
            assert_eq!(ids_in_windows(&t), Ok(()));
            assert_eq!(no_id_twice(&t), Ok(()));
        }
    }

    #[test]
    fn disjoint_windows_catches_a_release_that_hands_over_less_than_was_used() {
        let (a, b) = (holder(1, 1, 1), holder(1, 2, 3));
        let released = |last| Step::Released {
            holder: a,
            last_issued: last,
        };
        // A issued up to 700 and released; B starting at 500 overlaps (500, 700].
        let bad = [
            granted(a, 100, 1000),
            released(Some(700)),
            granted(b, 500, 2000),
        ];
        let v = disjoint_windows(&bad).unwrap_err();
        assert_eq!((v.invariant, v.at), (Invariant::DisjointWindows, 2));
        // Starting at exactly 700 is fine; so is A's floor when A issued nothing.
        assert_eq!(
            disjoint_windows(&[
                granted(a, 100, 1000),
                released(Some(700)),
                granted(b, 700, 2000)
            ]),
            Ok(())
        );
        assert_eq!(
            disjoint_windows(&[granted(a, 100, 1000), released(None), granted(b, 100, 2000)]),
            Ok(())
        );
    }

    #[test]
    fn disjoint_windows_keeps_slots_apart_and_lets_a_holder_renew() {
        let (a, b) = (holder(0, 1, 1), holder(1, 2, 1));
        // Another slot's windows may overlap in time; a holder's own renewals may too.
        let t = [
            granted(a, 0, 5000),
            granted(b, 0, 100),
            granted(a, 0, 6000),
            granted(b, 0, 7000),
        ];
        assert_eq!(disjoint_windows(&t), Ok(()));
        // A new tenure (fence 2) of the same incarnation is another holder.
        let again = holder(0, 1, 2);
        let v = disjoint_windows(&[granted(a, 0, 5000), granted(again, 4999, 9000)]).unwrap_err();
        assert_eq!(v.at, 1);
    }

    #[test]
    fn one_holder_per_unit_catches_two_holders_in_one_time_unit() {
        let (a, b) = (holder(2, 1, 1), holder(2, 2, 2));
        // Different ids (different sequence numbers), same slot and unit: no id repeats.
        let t = [issued(10, a, 1000), issued(11, b, 1000)];
        let v = one_holder_per_unit(&t).unwrap_err();
        assert_eq!((v.invariant, v.at), (Invariant::OneHolderPerUnit, 1));
        assert_eq!(no_id_twice(&t), Ok(()));
        // One holder may use a unit many times; another slot's unit is another unit.
        let c = holder(3, 2, 1);
        assert_eq!(
            one_holder_per_unit(&[
                issued(10, a, 1000),
                issued(12, a, 1000),
                issued(11, c, 1000)
            ]),
            Ok(())
        );
    }

    #[test]
    fn ids_in_windows_catches_an_id_at_the_floor_past_the_ceiling_or_off_its_window() {
        let a = holder(0, 1, 1);
        let w = granted(a, 1000, 2000);
        let check = |s: Step| ids_in_windows(&[w, s]);
        assert_eq!(check(issued(1, a, 1001)), Ok(()));
        assert_eq!(check(issued(1, a, 2000)), Ok(()));
        for bad in [
            issued(1, a, 1000), // at the floor (excluded)
            issued(1, a, 2001), // past the ceiling
            Step::Issued {
                id: 1,
                holder: a,
                slot: 5, // not the holder's slot
                unit_start_ms: 1500,
            },
            issued(1, holder(0, 9, 1), 1500), // never granted anything
        ] {
            let v = check(bad).unwrap_err();
            assert_eq!((v.invariant, v.at), (Invariant::IdInWindow, 1), "{bad:?}");
        }
        // After its release the holder issues nothing; before a renewal, not above the ceiling
        // it held then (a later renewal does not make an earlier id valid).
        let rel = Step::Released {
            holder: a,
            last_issued: Some(1500),
        };
        assert!(ids_in_windows(&[w, rel, issued(1, a, 1600)]).is_err());
        assert!(ids_in_windows(&[w, issued(1, a, 2500), granted(a, 1000, 3000)]).is_err());
        assert_eq!(
            ids_in_windows(&[w, granted(a, 1000, 3000), issued(1, a, 2500)]),
            Ok(())
        );
    }

    #[test]
    fn no_id_twice_catches_a_repeated_id() {
        let a = holder(0, 1, 1);
        let t = [issued(7, a, 1500), issued(7, a, 1500)];
        let v = no_id_twice(&t).unwrap_err();
        assert_eq!((v.invariant, v.at), (Invariant::NoIdTwice, 1));
        assert!(v.to_string().contains("id 7 issued again"), "{v}");
    }
}
