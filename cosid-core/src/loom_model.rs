//! A loom model of the lock-free generator racing the keeper's changes to the shared window.
//!
//! It lives inside the crate (as a test module compiled only under `--cfg loom`) because it
//! drives the window's writer side, which is the keeper's alone and not public. Run it with
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p cosid-core --lib --release loom_model
//! ```
//!
//! (add `CARGO_TARGET_DIR=target/loom` to keep the loom build from invalidating the normal one).
//! The preemption bound is 2 (1 for the rebinding variant, whose window writes multiply the
//! values each relaxed load may return), about 20 s in all; `COSID_LOOM_PREEMPTIONS=N` sets it
//! for every variant (`LOOM_MAX_PREEMPTIONS` is ignored: see `model`).
//!
//! Every atomic of `Generator` and `Window` goes through `cosid-core/src/sync.rs`, which is
//! loom's under `--cfg loom`, so loom explores every interleaving (and every value a relaxed load
//! may return) of:
//! - two issuers calling `try_next` on one generator, racing a keeper that extends the window
//!   while the clock runs past the ceiling;
//! - the same issuers racing a keeper that marks the lease lost and rebinds another slot with a
//!   later floor (a torn read of the seqlock would pair the new slot with the old floor);
//! - issuers racing `close()`.
//!
//! Asserted in every execution: no two ids are equal; every id's `(slot, unit start)` lies in a
//! window `(floor, ceiling]` that was granted for that slot; each thread's ids increase; and for
//! close: nothing is issued once `close()` has returned, and the timestamp `close()` reports is
//! at least every issued id's unit start.
//!
//! The clock is a `ManualClock` (std atomics, outside the modelled race): it is created inside
//! each execution, so its values follow the schedule deterministically.

use crate::{ErrorKind, Generator, Layout, ManualClock, TryNext, Window, WindowStatus};
use loom::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const T0: i64 = 1_800_000_000_000;
const LAYOUT: Layout = Layout::MILLIS;

/// A window granted for a slot: ids of that slot must have `floor < unit start <= ceiling`.
#[derive(Debug, Clone, Copy)]
struct Granted {
    slot: u32,
    floor: i64,
    ceiling: i64,
}

/// Runs `f` under loom with at most `preemptions` preemptions per execution, and checks that
/// loom really explored more than one execution.
///
/// The bound is this test's, whatever `LOOM_MAX_PREEMPTIONS` says (the test command may set
/// it for every loom model); `COSID_LOOM_PREEMPTIONS=N` raises every variant to `N` for a
/// deeper, much slower run.
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let executions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(
        std::env::var("COSID_LOOM_PREEMPTIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(preemptions),
    );
    let counter = executions.clone();
    b.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    let n = executions.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "loom explored {n} executions (preemption bound {:?})",
        b.preemption_bound
    );
    assert!(n > 1, "the model explored no interleaving");
}

fn generator(window: &Arc<Window>, clock: &Arc<ManualClock>) -> Arc<Generator> {
    Arc::new(Generator::new(
        "",
        LAYOUT,
        window.clone(),
        clock.clone(),
        Duration::from_millis(10),
    ))
}

/// What each execution starts from: a clock at T0 and a generator on slot 1 bound to the
/// window (T0-1, `ceiling`], returned as granted.
fn start(ceiling: i64) -> (Arc<ManualClock>, Arc<Window>, Arc<Generator>, Granted) {
    let granted = Granted {
        slot: 1,
        floor: T0 - 1,
        ceiling,
    };
    let clock = ManualClock::shared(T0);
    let window = Arc::new(Window::bound(granted.slot, granted.floor, granted.ceiling));
    let g = generator(&window, &clock);
    (clock, window, g, granted)
}

/// One issuer: `n` non-blocking attempts. Waits and the fail-fast errors of a lost or closed
/// window are legitimate outcomes; an id is recorded.
fn issue(g: &Generator, n: usize) -> Vec<u64> {
    let mut ids = Vec::new();
    for _ in 0..n {
        match g.try_next() {
            Ok(TryNext::Ready(id)) => ids.push(id),
            Ok(TryNext::Wait { .. }) => {}
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::SlotLost | ErrorKind::Closed),
                "unexpected error {e}"
            ),
        }
    }
    ids
}

/// The model's invariants over every id issued in one execution.
fn check(per_thread: &[Vec<u64>], granted: &[Granted]) {
    let mut all: Vec<u64> = per_thread.iter().flatten().copied().collect();
    for ids in per_thread {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a thread's ids must increase: {ids:?}"
        );
    }
    for &id in &all {
        let p = LAYOUT.decompose(id).unwrap();
        let start = LAYOUT.unit_start_ms(p.timestamp);
        assert!(
            granted
                .iter()
                .any(|w| w.slot == p.slot && w.floor < start && start <= w.ceiling),
            "id {id} (slot {}, unit start T0{:+}) lies in no window granted for its slot: {granted:?}",
            p.slot,
            start - T0
        );
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "duplicate id in {per_thread:?}");
}

fn spawn_issuer(g: &Arc<Generator>, n: usize) -> loom::thread::JoinHandle<Vec<u64>> {
    let g = g.clone();
    loom::thread::spawn(move || issue(&g, n))
}

/// The keeper extends the ceiling while the clock runs past it: the clock first reaches the old
/// ceiling's next ms (T0+1, not yet granted), then the renewal grants T0+1, then the clock runs
/// on to T0+2, which is never granted. An issuer holding a stale ceiling must wait; none may
/// issue at T0+2.
#[test]
fn issuers_race_a_window_extension() {
    model(2, || {
        let (clock, window, g, granted) = start(T0);
        let issuers = [spawn_issuer(&g, 2), spawn_issuer(&g, 2)];
        let keeper = {
            let (window, clock) = (window.clone(), clock.clone());
            loom::thread::spawn(move || {
                clock.set(T0 + 1);
                window.extend(T0 + 1);
                clock.set(T0 + 2);
            })
        };
        keeper.join().unwrap();
        let ids: Vec<_> = issuers.into_iter().map(|h| h.join().unwrap()).collect();
        // The keeper extended the window to T0+1.
        check(
            &ids,
            &[Granted {
                ceiling: T0 + 1,
                ..granted
            }],
        );
        assert_eq!(g.issued(), ids.iter().map(Vec::len).sum::<usize>() as u64);
    });
}

/// The keeper finds the lease on slot 1 lost and rebinds slot 2 with the floor T0 (the previous
/// holder of slot 2 may have used T0), then the clock moves to T0+1. Slot 2 may issue only from
/// T0+1: an issuer that paired slot 2 with slot 1's floor (a torn read) would issue (2, T0).
#[test]
fn issuers_race_a_lost_lease_and_a_rebinding() {
    // One preemption: the torn read this variant looks for needs just one (the reader
    // preempted between its loads while the keeper rebinds); stale relaxed loads are explored
    // whatever the bound. Two preemptions take about ten minutes on 2 cores.
    model(1, || {
        let (clock, window, g, granted) = start(T0 + 5);
        let issuers = [spawn_issuer(&g, 1), spawn_issuer(&g, 1)];
        let keeper = {
            let (window, clock) = (window.clone(), clock.clone());
            loom::thread::spawn(move || {
                window.set_status(WindowStatus::Lost);
                window.rebind(2, T0, T0 + 5);
                clock.set(T0 + 1);
            })
        };
        keeper.join().unwrap();
        let ids: Vec<_> = issuers.into_iter().map(|h| h.join().unwrap()).collect();
        check(
            &ids,
            &[
                granted,
                Granted {
                    slot: 2,
                    floor: T0,
                    ceiling: T0 + 5,
                },
            ],
        );
        // After the rebinding, the generator issues on slot 2 only.
        let after = g.try_next().unwrap();
        let TryNext::Ready(id) = after else {
            panic!("slot 2 at T0+1 must issue, got {after:?}");
        };
        assert_eq!(LAYOUT.decompose(id).unwrap().slot, 2);
    });
}

/// `close()` races two issuers, one of which moves the clock between its ids. Once close has
/// returned, every attempt fails with `Closed`; the last timestamp close reports covers every
/// id issued.
#[test]
fn issuers_race_close() {
    model(2, || {
        let (clock, _, g, granted) = start(T0 + 5);
        // Set (Release) right after close() returns; an issuer that sees it (Acquire) started
        // its attempt after close returned, so the attempt must fail.
        let closed = Arc::new(AtomicBool::new(false));
        let issuers: Vec<_> = [true, false]
            .into_iter()
            .map(|advances| {
                let (g, clock, closed) = (g.clone(), clock.clone(), closed.clone());
                loom::thread::spawn(move || {
                    let mut ids = Vec::new();
                    for _ in 0..2 {
                        let after_close = closed.load(Ordering::Acquire);
                        match g.try_next() {
                            Ok(TryNext::Ready(id)) => {
                                assert!(!after_close, "id {id} issued after close returned");
                                ids.push(id);
                            }
                            Ok(TryNext::Wait { reason, .. }) => {
                                panic!("nothing to wait for in (T0-1, T0+5]: {reason:?}")
                            }
                            Err(e) => assert_eq!(e.kind(), ErrorKind::Closed, "{e}"),
                        }
                        if advances {
                            clock.advance(Duration::from_millis(1));
                        }
                    }
                    ids
                })
            })
            .collect();
        let closer = {
            let (g, closed) = (g.clone(), closed.clone());
            loom::thread::spawn(move || {
                let last = g.close();
                closed.store(true, Ordering::Release);
                last
            })
        };
        let last = closer.join().unwrap();
        let ids: Vec<_> = issuers.into_iter().map(|h| h.join().unwrap()).collect();
        check(&ids, &[granted]);
        let issued: Vec<u64> = ids.iter().flatten().copied().collect();
        match last {
            None => assert!(issued.is_empty(), "close reported no id, but {issued:?}"),
            Some(last_ms) => {
                assert!(!issued.is_empty(), "close reported T0{:+}", last_ms - T0);
                for id in &issued {
                    let start = LAYOUT.unit_start_ms(LAYOUT.decompose(*id).unwrap().timestamp);
                    assert!(
                        start <= last_ms,
                        "id at T0{:+} after close's T0{:+}",
                        start - T0,
                        last_ms - T0
                    );
                }
                // Exact, not just an upper bound: the release hands this to the next holder.
                let max = issued.iter().max().unwrap();
                let max_start = LAYOUT.unit_start_ms(LAYOUT.decompose(*max).unwrap().timestamp);
                assert_eq!(last_ms, max_start);
            }
        }
        assert_eq!(g.close(), last, "close is idempotent");
        assert_eq!(g.issued(), issued.len() as u64);
        assert_eq!(g.try_next().unwrap_err().kind(), ErrorKind::Closed);
    });
}
