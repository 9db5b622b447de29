//! The standing mutation check: the simulation must fail when the protocol is wrong.
//!
//! Each test switches on one deliberate bug (`cosid_core::lease::mutation`, compiled only with
//! the `mutation-switches` feature) and runs the simulation of `sim/mod.rs` over the same seeds
//! as `simulation.rs` (`COSID_SIM_SEEDS`, default 3000). The simulation must report a broken
//! invariant within them; and with no bug switched on it must pass. The switch is one static for
//! the whole process, so the tests take turns.
//!
//! Run: `cargo test -p cosid-core --features redis,postgres,etcd,mutation-switches --test mutations`

mod sim;

use cosid_core::lease::invariants::Invariant;
use cosid_core::lease::mutation::{self, Mutation};
use std::sync::Mutex;

static TURN: Mutex<()> = Mutex::new(());

/// Runs the simulation's seeds with `m` switched on; the first failure, if any.
fn simulate_with(m: Mutation) -> Result<sim::Outcome, sim::Failure> {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    mutation::set(m);
    let result = sim::run_seeds(sim::seeds_from_env(), sim::STEPS);
    mutation::set(Mutation::None);
    result
}

/// `m` must make the simulation fail; returns the invariant that caught it.
fn caught(m: Mutation) -> Invariant {
    match simulate_with(m) {
        Ok(o) => panic!(
            "the simulation did not notice {m:?} in {} seeds ({o:?})",
            sim::seeds_from_env()
        ),
        Err(f) => {
            println!(
                "{m:?}: caught at seed {} by '{}'\n{}",
                f.seed, f.invariant, f.message
            );
            f.invariant
        }
    }
}

#[test]
fn with_no_mutation_the_simulation_passes() {
    let o = simulate_with(Mutation::None).unwrap_or_else(|f| panic!("{}", f.message));
    assert!(o.ids > 0 && o.grants > 0 && o.releases > 0, "{o:?}");
}

/// One test per mutation: `name => Mutation` must be caught by the simulation.
macro_rules! caught_tests {
    ($($name:ident => $mutation:ident,)*) => {
        $(
            #[test]
            fn $name() {
                caught(Mutation::$mutation);
            }
        )*
    };
}

caught_tests! {
    release_handing_over_the_old_floor_is_caught => ReleaseHandsOverFloor,
    issuing_at_the_floor_is_caught => IssueAtFloor,
    issuing_past_the_ceiling_is_caught => IssuePastCeiling,
    renewal_keeping_next_floor_is_caught => RenewKeepsNextFloor,
    acquisition_lowering_the_floor_by_300_ms_is_caught => AcquireLowersFloor,
    renewal_by_a_non_holder_is_caught => RenewSkipsHolderCheck,
    release_by_a_non_holder_is_caught => ReleaseSkipsHolderCheck,
    a_guard_ignoring_lost_writes_is_caught => GuardIgnoresLostWrites,
    a_guard_trusting_new_namespaces_is_caught => GuardTrustsNewNamespaces,
    a_renewal_of_a_moved_back_record_is_caught => RenewsMovedBackRecord,
}

#[test]
fn every_mutation_has_a_test_here() {
    // A mutation added to the switch list without a test above fails here.
    assert_eq!(Mutation::ALL.len(), 10, "add a test for the new mutation");
}
