//! Start-up storms: N = 64, 256 and 1024 runtimes starting at once on one new namespace of 1024
//! slots, on each store: the time until the last one holds a slot, the compare-and-set attempts
//! each starter made (mean and maximum) and its round trips; then the round trips a keeper's
//! renewal and release cost.
//!
//! Each starter is what a runtime's start-up does with the store (`LeaseKeeper::start`): an
//! acquisition, which creates the namespace when it finds none. Starters share a few store handles (at most 32, as the processes
//! of a host would share nothing but a server would cap connections), each starter counting the
//! primitives it calls through a wrapper around the real store (every call goes to the store
//! unchanged). The servers are the throwaway ones `cosid-testkit` starts, as in the stores
//! bench.
//!
//! Each store runs as it is (acquisitions read the store's candidate view, filtered on its side
//! where the store can, and offer several slots in one compare-and-set call), and as earlier
//! builds did, side by side in one run: with every candidate view answered by a whole snapshot
//! (before the views were filtered), and with only the first slot of each call tried (before
//! an acquisition offered several: a lost race read the namespace again).
//!
//! `cargo bench -p cosid-core --features redis,postgres,etcd,mysql --bench storm`
//! (`COSID_BENCH_STORES=memory,sqlite,redis` for some stores, `COSID_STORM_SIZES=64,256` for
//! some sizes, `COSID_STORM_RUNS=3` runs per size, the median time reported,
//! `COSID_STORM_READS=view` or `snapshot` for one of the two reads, `COSID_STORM_OFFERS=all` or
//! `first` for one of the two offers, `COSID_STORM_BITS=11` for a namespace of 2^11 slots
//! instead of 2^10).

use cosid_core::lease::{KeeperConfig, LeaseClient, LeaseKeeper, Owner};
use cosid_core::store::{self, SharedStore};
use cosid_core::{ManualClock, Window};
use cosid_testkit::Server;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[path = "common/counting.rs"]
mod counting;
#[path = "common/select.rs"]
mod select;
use counting::Counting;
use select::{wanted, TERMS};

struct Target {
    name: &'static str,
    url: String,
    _server: Option<Server>,
    _dir: Option<tempfile::TempDir>,
}

fn targets() -> Vec<Target> {
    let mut out = Vec::new();
    if wanted("memory") {
        out.push(Target {
            name: "memory",
            url: "memory:storm".into(),
            _server: None,
            _dir: None,
        });
    }
    if wanted("sqlite") {
        let dir = tempfile::tempdir().unwrap();
        out.push(Target {
            name: "sqlite",
            url: format!("sqlite://{}", dir.path().join("slots.db").display()),
            _server: None,
            _dir: Some(dir),
        });
    }
    let mut server = |name: &'static str, start: fn() -> Server| {
        if wanted(name) {
            let s = start();
            out.push(Target {
                name,
                url: s.url(),
                _server: Some(s),
                _dir: None,
            });
        }
    };
    server("redis", Server::redis);
    server("postgres", Server::postgres);
    server("etcd", Server::etcd);
    server("mysql", Server::mysql);
    out
}

/// How the starters of one storm act: as this build does, or as an earlier one did.
#[derive(Debug, Clone, Copy)]
struct Mode {
    /// Every candidate view answered by a whole snapshot.
    whole: bool,
    /// Only the first slot of each compare-and-set call tried.
    first_only: bool,
}

/// What [`Counting::take`] counts for one starter: store calls, compare-and-set calls, slots
/// tried.
type Counts = (u64, u64, u64);

/// One storm: `n` starters at once on a new namespace. The time until the last holds a slot,
/// and each starter's [`Counts`].
fn storm(handles: &[SharedStore], n: usize, bits: u8, mode: Mode) -> (Duration, Vec<Counts>) {
    let ns = format!("storm-{n}-{}", uuid::Uuid::new_v4().simple());
    let barrier = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let handle = handles[i % handles.len()].clone();
            let counting = Counting::emulating(handle, mode.whole, mode.first_only);
            let c = LeaseClient::new(counting.clone(), &ns, bits, TERMS).unwrap();
            let barrier = barrier.clone();
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let owner = Owner::new(format!("starter-{i}"));
                    let req = cosid_core::lease::AcquireRequest {
                        owner,
                        preferred_slot: None,
                        floor_at_least: 0,
                    };
                    barrier.wait();
                    let started = Instant::now();
                    // What a runtime's start-up does: acquire, which opens the namespace
                    // when it must (retrying what may go away, as the keeper does).
                    loop {
                        match c.acquire(&req) {
                            Ok(got) => {
                                let done = Instant::now();
                                return (got.lease.slot, started, done, counting.take());
                            }
                            Err(e) if e.kind() == cosid_core::ErrorKind::Store => {
                                std::thread::sleep(Duration::from_millis(100))
                            }
                            Err(e) => panic!("starter {i}: {e}"),
                        }
                    }
                })
                .expect("spawn a starter")
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut last = start;
    let mut counts = Vec::with_capacity(n);
    let mut slots = std::collections::HashSet::new();
    for t in threads {
        let (slot, _, done, c) = t.join().expect("a starter");
        assert!(slots.insert(slot), "slot {slot} granted twice");
        last = last.max(done);
        counts.push(c);
    }
    (last - start, counts)
}

/// Round trips of a keeper's renewal (its `tick` at ttl/3) and of its release.
fn keeper_round_trips(url: &str) -> (f64, u64) {
    let counting = Counting::new(store::open(url).unwrap());
    let ns = format!("storm-keeper-{}", uuid::Uuid::new_v4().simple());
    let clock = ManualClock::shared(cosid_core::clock::system_now_ms());
    let ttl = Duration::from_secs(30);
    let keeper = LeaseKeeper::start_standalone(
        LeaseClient::new(counting.clone(), &ns, 10, TERMS).unwrap(),
        Arc::new(Window::new()),
        clock.clone(),
        KeeperConfig {
            ttl,
            acquire_timeout: ttl,
            preferred_slot: None,
            owner: Owner::new("keeper"),
        },
    )
    .unwrap();
    counting.take();
    const RENEWALS: u64 = 30;
    for _ in 0..RENEWALS {
        clock.advance(ttl / 3);
        keeper.tick();
    }
    let (renew_calls, ..) = counting.take();
    keeper.release(None).unwrap();
    let (release_calls, ..) = counting.take();
    (renew_calls as f64 / RENEWALS as f64, release_calls)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the arguments.
    let sizes: Vec<usize> = std::env::var("COSID_STORM_SIZES")
        .unwrap_or_else(|_| "64,256,1024".into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("COSID_STORM_SIZES: numbers, e.g. 64,256")
        })
        .collect();
    let bits: u8 = std::env::var("COSID_STORM_BITS")
        .ok()
        .map(|b| {
            b.parse()
                .ok()
                .filter(|b| (1..=20).contains(b))
                .expect("COSID_STORM_BITS: the namespace's slot bits, 1 to 20")
        })
        .unwrap_or(10);
    let runs: usize = std::env::var("COSID_STORM_RUNS")
        .ok()
        .map(|r| r.parse().expect("COSID_STORM_RUNS: a number of runs"))
        .unwrap_or(3);
    let reads: Vec<bool> = match std::env::var("COSID_STORM_READS").as_deref() {
        Ok("view") => vec![false],
        Ok("snapshot") => vec![true],
        _ => vec![false, true],
    };
    let offers: Vec<bool> = match std::env::var("COSID_STORM_OFFERS").as_deref() {
        Ok("all") => vec![false],
        Ok("first") => vec![true],
        _ => vec![false, true],
    };
    let modes: Vec<Mode> = reads
        .iter()
        .flat_map(|&whole| {
            offers
                .iter()
                .map(move |&first_only| Mode { whole, first_only })
        })
        .collect();
    let targets = targets();
    println!(
        "| store | read | offer | N | last holds a slot (median of {runs}) | CAS calls per starter, mean / max | slots tried per starter, mean / max | store calls per starter, mean / max | round trips per renewal / release |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|:---:|");
    for t in &targets {
        let handles: Vec<SharedStore> = (0..32).map(|_| store::open(&t.url).unwrap()).collect();
        // Every handle connects (and PostgreSQL checks its schema) before any clock starts.
        for h in &handles {
            h.read_slot("storm-warm-up", 0).unwrap();
        }
        let (renew, release) = keeper_round_trips(&t.url);
        for (&n, &mode) in sizes.iter().flat_map(|n| modes.iter().map(move |m| (n, m))) {
            let mut times = Vec::new();
            let mut counts = Vec::new();
            for _ in 0..runs {
                let (d, c) = storm(&handles, n, bits, mode);
                times.push(d);
                counts.extend(c);
            }
            times.sort();
            let mean = |f: fn(&Counts) -> u64| {
                counts.iter().map(f).sum::<u64>() as f64 / counts.len() as f64
            };
            let max = |f: fn(&Counts) -> u64| counts.iter().map(f).max().unwrap_or(0);
            println!(
                "| {} | {} | {} | {n} | {:.0} ms | {:.2} / {} | {:.2} / {} | {:.2} / {} | {renew:.2} / {release} |",
                t.name,
                if mode.whole {
                    "whole snapshot"
                } else {
                    "candidate view"
                },
                if mode.first_only {
                    "first slot only"
                } else {
                    "every candidate"
                },
                times[times.len() / 2].as_secs_f64() * 1e3,
                mean(|c| c.1),
                max(|c| c.1),
                mean(|c| c.2),
                max(|c| c.2),
                mean(|c| c.0),
                max(|c| c.0),
            );
        }
    }
}
