//! Runtime-level figures (issue "slot lease"), side by side in one run:
//! - start to first id on the embedded SQLite store;
//! - `Runtime::next()` with the keeper renewing all the time, against the bare generator;
//! - 64 runtimes starting at once on one SQLite namespace: time until the last has its first id.
//!
//! `cargo bench -p cosid-core --bench runtime`

use cosid_core::clock::SystemClock;
use cosid_core::config::Config;
use cosid_core::{Generator, Layout, Runtime, Window};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn sqlite_config(dir: &std::path::Path, ns: &str) -> Config {
    Config::from_yaml(&format!(
        "cosid:\n  namespace: {ns}\n  machine:\n    lease:\n      store: sqlite://{}/slots.db\n",
        dir.display()
    ))
    .unwrap()
}

fn start_to_first_id(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    // The store file and its schema exist already, as on any host after the first start.
    Runtime::new(sqlite_config(dir.path(), "warm"))
        .unwrap()
        .close()
        .unwrap();
    c.bench_function("runtime/start_to_first_id_sqlite", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let rt = Runtime::new(sqlite_config(dir.path(), "warm")).unwrap();
                black_box(rt.next().unwrap());
                total += t.elapsed();
                rt.close().unwrap();
            }
            total
        })
    });
}

fn keeper_overhead(c: &mut Criterion) {
    let mut g = c.benchmark_group("runtime/next");
    let now = cosid_core::clock::system_now_ms();
    let window = Arc::new(Window::bound(1, now - 1, now + 3_600_000));
    let bare = Generator::new(
        "",
        Layout::MILLIS,
        window,
        Arc::new(SystemClock),
        Duration::from_secs(1),
    );
    g.bench_function("bare_generator", |b| {
        b.iter(|| black_box(bare.next().unwrap()))
    });
    // ttl 90ms: the keeper renews every 30ms, i.e. constantly during the measurement.
    let rt = Runtime::from_yaml(
        "cosid: {namespace: bench, machine: {lease: {store: 'memory:bench', ttl: 90ms, tolerance: 1s}}}",
    )
    .unwrap();
    g.bench_function("runtime_with_keeper_renewing", |b| {
        b.iter(|| black_box(rt.next().unwrap()))
    });
    g.finish();
    let s = rt.stats();
    println!(
        "keeper renewals during the run: {}, waits: {}, renewal failures: {}",
        s.renewals, s.waits, s.renewal_failures
    );
    rt.close().unwrap();
}

fn many_runtimes_at_once(c: &mut Criterion) {
    let mut g = c.benchmark_group("runtime/64_at_once_sqlite");
    g.sample_size(10);
    g.bench_function("time_to_last_first_id", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for i in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                let ns = format!("burst{i}");
                // Create the file and namespace first, as a deployment would have.
                Runtime::new(sqlite_config(dir.path(), &ns))
                    .unwrap()
                    .close()
                    .unwrap();
                let barrier = Arc::new(Barrier::new(64));
                let t = Instant::now();
                let handles: Vec<_> = (0..64)
                    .map(|_| {
                        let (barrier, cfg) = (barrier.clone(), sqlite_config(dir.path(), &ns));
                        std::thread::spawn(move || {
                            barrier.wait();
                            let rt = Runtime::new(cfg).unwrap();
                            let id = rt.next().unwrap();
                            (rt, id, Instant::now())
                        })
                    })
                    .collect();
                let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
                let last = results.iter().map(|r| r.2).max().unwrap();
                total += last - t;
                let mut slots: Vec<u32> = results
                    .iter()
                    .map(|r| r.0.layout().decompose(r.1).unwrap().slot)
                    .collect();
                slots.sort_unstable();
                slots.dedup();
                assert_eq!(slots.len(), 64, "64 runtimes must hold 64 distinct slots");
                for (rt, _, _) in results {
                    rt.close().unwrap();
                }
            }
            total
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    keeper_overhead,
    start_to_first_id,
    many_runtimes_at_once
);
criterion_main!(benches);
