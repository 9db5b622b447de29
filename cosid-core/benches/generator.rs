//! The core generator beside the physical floor and its peers, in one run (BENCHMARKS.md,
//! section "Core generator"):
//!
//! ```text
//! cargo bench -p cosid-core --bench generator -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Per-id cases use one protocol, the same for us, the floor and every peer: wait (untimed) for
//! a fresh millisecond, then time a burst of `BURST` calls. A burst fits well inside the 4,096
//! ids a 41/10/12 Snowflake slot may issue per millisecond, so the figure is the cost of one
//! call, not the wait for the next tick that any rate-bound generator (ours or snowflaked) hits
//! in a tight loop. Criterion prints that cost as the time per iteration (one iteration = one
//! id).
//!
//! `next_batch(4096)` is timed twice: on a manual clock whose `sleep` moves virtual time, so
//! the wait for the next tick costs nothing and what remains is the CPU cost, and on the system
//! clock, where the wait dominates (a batch is a whole millisecond's worth of ids).
//!
//! Saturation (ids per second over about a second, from 1 and from 2 threads, as a fraction of
//! the layout's 4,096,000/s) runs after the criterion cases and prints its own lines.

use cosid_core::{Generator, Layout, ManualClock, SharedClock, SystemClock, Window};
use criterion::{BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Calls timed per fresh millisecond.
const BURST: u64 = 1024;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// Our generator as the runtime builds it: system clock, bound to a wide window.
fn system_generator(layout: Layout) -> Generator {
    let now = now_ms();
    let window = Arc::new(Window::bound(1, now - 1, now + 3_600_000));
    let clock: SharedClock = Arc::new(SystemClock);
    Generator::new("", layout, window, clock, Duration::from_secs(5))
}

/// Spins (untimed) until the wall clock enters a new millisecond.
fn fresh_millisecond() {
    let start = now_ms();
    while now_ms() == start {
        std::hint::spin_loop();
    }
}

/// CPU time of the calling thread. The bursts are timed with it rather than with the wall
/// clock: on a shared 2-core machine the wall clock also counts the time the thread spent
/// descheduled, which is the neighbours' cost, not ours.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Times `iters` calls of `f` in bursts of at most `BURST`, each starting in a fresh ms.
fn bursts(iters: u64, mut f: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(BURST);
        fresh_millisecond();
        let t = thread_cpu_time();
        for _ in 0..n {
            f();
        }
        total += thread_cpu_time() - t;
        left -= n;
    }
    total
}

fn per_id(c: &mut Criterion) {
    let mut g = c.benchmark_group("per_id");
    g.throughput(Throughput::Elements(1));

    // The physical floor: one wall-clock read (to ms, as every id needs) plus one uncontended
    // compare-and-set on a word.
    let word = AtomicU64::new(0);
    g.bench_function("floor: SystemTime::now + compare_exchange", |b| {
        b.iter_custom(|iters| {
            bursts(iters, || {
                let ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis() as u64;
                let cur = word.load(Ordering::Acquire);
                let next = (ms << 22) | (cur.wrapping_add(1) & 0x3f_ffff);
                black_box(word.compare_exchange(cur, next, Ordering::AcqRel, Ordering::Acquire))
                    .ok();
            })
        })
    });

    let ours = system_generator(Layout::MILLIS);
    g.bench_function("cosid Generator::next (41/10/12)", |b| {
        b.iter_custom(|iters| {
            bursts(iters, || {
                black_box(ours.next().expect("an id"));
            })
        })
    });

    g.bench_function("peer uuid::Uuid::now_v7", |b| {
        b.iter_custom(|iters| {
            bursts(iters, || {
                black_box(uuid::Uuid::now_v7());
            })
        })
    });

    g.bench_function("peer ulid::Ulid::generate", |b| {
        b.iter_custom(|iters| {
            bursts(iters, || {
                black_box(ulid::Ulid::generate());
            })
        })
    });

    static SNOWFLAKED: snowflaked::sync::Generator = snowflaked::sync::Generator::new(1);
    g.bench_function("peer snowflaked::sync::Generator::generate", |b| {
        b.iter_custom(|iters| {
            bursts(iters, || {
                black_box(SNOWFLAKED.generate::<u64>());
            })
        })
    });
    g.finish();
}

fn batch(c: &mut Criterion) {
    const N: usize = 4096;
    let mut g = c.benchmark_group("next_batch");
    g.throughput(Throughput::Elements(N as u64));
    let mut buf = vec![0u64; N];

    // CPU only: the manual clock's sleep moves virtual time, so each batch's wait for the next
    // tick is the generator's waiting logic without the waiting.
    let t0 = now_ms();
    let clock = ManualClock::shared(t0);
    let window = Arc::new(Window::bound(1, t0 - 1, i64::MAX / 2));
    let manual = Generator::new("", Layout::MILLIS, window, clock, Duration::from_secs(5));
    g.bench_with_input(
        BenchmarkId::new("cpu (manual clock: tick wait costs nothing)", N),
        &N,
        |b, _| b.iter(|| manual.next_batch(black_box(&mut buf)).expect("ids")),
    );

    // A batch that fits the current tick, on the system clock.
    let system = system_generator(Layout::MILLIS);
    g.throughput(Throughput::Elements(2048));
    g.bench_with_input(
        BenchmarkId::new("cpu (system clock, fresh tick)", 2048),
        &2048,
        |b, _| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    fresh_millisecond();
                    let t = thread_cpu_time();
                    system.next_batch(black_box(&mut buf[..2048])).expect("ids");
                    total += thread_cpu_time() - t;
                }
                total
            })
        },
    );

    // Wall time on the system clock: each batch is a whole millisecond's worth of ids.
    g.throughput(Throughput::Elements(N as u64));
    g.bench_with_input(
        BenchmarkId::new("wall (system clock, includes the tick wait)", N),
        &N,
        |b, _| b.iter(|| system.next_batch(black_box(&mut buf)).expect("ids")),
    );
    g.finish();
}

/// Ids per second from `threads` threads sharing one generator for `run`, on 41/10/12.
fn saturation(threads: usize, run: Duration) -> f64 {
    let g = Arc::new(system_generator(Layout::MILLIS));
    // Warm up and start at a tick boundary.
    for _ in 0..10_000 {
        g.next().expect("an id");
    }
    fresh_millisecond();
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let g = g.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                loop {
                    for _ in 0..256 {
                        black_box(g.next().expect("an id"));
                    }
                    n += 256;
                    if start.elapsed() >= run {
                        return n;
                    }
                }
            })
        })
        .collect();
    let ids: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    ids as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    per_id(&mut c);
    batch(&mut c);
    c.final_summary();

    // `cargo bench` passes `--bench`; under `cargo test --benches` run the saturation code
    // briefly, as a smoke test. A name filter that excludes "saturation" skips it.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench_mode = args.iter().any(|a| a == "--bench");
    let filtered_out = args
        .iter()
        .filter(|a| !a.starts_with('-'))
        .any(|f| !"saturation".contains(f.as_str()) && f.parse::<f64>().is_err());
    if filtered_out {
        return;
    }
    let run = if bench_mode {
        Duration::from_secs(1)
    } else {
        Duration::from_millis(20)
    };
    let bound = Layout::MILLIS.max_ids_per_second() as f64;
    for threads in [1, 2] {
        let rate = saturation(threads, run);
        println!(
            "saturation/{threads} thread{}: {:.0} ids/s = {:.2}% of {:.0}/s (41/10/12)",
            if threads == 1 { "" } else { "s" },
            rate,
            100.0 * rate / bound,
            bound
        );
    }
}
