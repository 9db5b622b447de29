//! The C API against the Rust API and the floor, in one run (issue "C API"):
//! - `Runtime::next()` (Rust) against the exported `extern "C" fn cosid_next` called through the
//!   rlib, per call;
//! - `Runtime::next_batch` against `cosid_next_batch`, 4096 ids per call, in CPU time per id
//!   (the thread's CPU clock) of calls started at a fresh millisecond, so that none waits for
//!   the next tick (the target excludes that wait);
//! - the floor: reading the wall clock (every id reads it once) and one uncontended
//!   compare-and-swap (every call does at least one).
//!
//! - with `COSID_BENCH_C_LOOP` naming the shared object `benches/c/run.sh` builds from
//!   `benches/c/loop.c`: the same calls made by C-compiled code through the PLT into the
//!   installed `libcosid.so`, loaded with `dlopen` into this process.
//!
//! The per-call rows use a layout with 20 sequence bits so they measure the call, not the
//! layout's rate cap (the default 12 sequence bits issue at most 4096 ids per ms per slot, 244 ns
//! per id sustained).
//!
//! `benches/c/run.sh` (everything), or `cargo bench -p cosid-ffi --bench c_api` (no C rows).

use cosid::{cosid_next, cosid_next_batch, cosid_runtime, cosid_runtime_free, cosid_runtime_new};
use cosid_core::Runtime;
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use std::ffi::{c_void, CStr, CString};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// 41 timestamp bits (ms), 2 node bits, 20 sequence bits: about a million ids per ms per slot.
const WIDE: &str = "cosid:\n  namespace: bench\n  snowflake: {timestamp-bits: 41, node-bits: 2, sequence-bits: 20}\n  machine:\n    lease: {store: 'memory:bench-wide', bits: 2}\n";
/// The default 41/10/12 layout.
const DEFAULT: &str =
    "cosid:\n  namespace: bench\n  machine:\n    lease: {store: 'memory:bench-default', bits: 2}\n";

fn c_runtime(config: &str) -> *mut cosid_runtime {
    let c = CString::new(config).unwrap();
    let mut rt = std::ptr::null_mut();
    assert_eq!(cosid_runtime_new(c.as_ptr(), &mut rt) as u32, 0);
    rt
}

/// CPU time of this thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

type RuntimeNew = unsafe extern "C" fn(*const libc::c_char) -> *mut c_void;
type RuntimeFree = unsafe extern "C" fn(*mut c_void);
type NextLoop = unsafe extern "C" fn(*const c_void, u64, *mut u64) -> u32;
type Batch = unsafe extern "C" fn(*const c_void, *mut u64, usize) -> u32;

/// The C-compiled loops of `benches/c/loop.c`, linked with the installed `libcosid.so`.
struct CLoop {
    runtime_new: RuntimeNew,
    runtime_free: RuntimeFree,
    next_loop: NextLoop,
    batch: Batch,
}

impl CLoop {
    fn load() -> Option<CLoop> {
        let Some(path) = std::env::var_os("COSID_BENCH_C_LOOP") else {
            eprintln!("COSID_BENCH_C_LOOP is not set: no C-compiled rows (run benches/c/run.sh)");
            return None;
        };
        let path = CString::new(path.into_encoded_bytes()).unwrap();
        // SAFETY: loading a shared object we built; RTLD_LOCAL keeps its libcosid.so's symbols
        // apart from the rlib linked into this binary.
        let lib = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            // SAFETY: dlerror returns a NUL-terminated message after a failed dlopen.
            let why = unsafe { CStr::from_ptr(libc::dlerror()) };
            panic!("dlopen {path:?}: {why:?}");
        }
        let sym = |name: &str| {
            let name = CString::new(name).unwrap();
            // SAFETY: a symbol of the object loaded above, which stays loaded for the process.
            let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
            assert!(!p.is_null(), "{name:?} missing from the C loop object");
            p
        };
        // SAFETY: the symbols are the functions of benches/c/loop.c with these signatures.
        unsafe {
            Some(CLoop {
                runtime_new: std::mem::transmute::<*mut c_void, RuntimeNew>(sym(
                    "cosid_bench_runtime_new",
                )),
                runtime_free: std::mem::transmute::<*mut c_void, RuntimeFree>(sym(
                    "cosid_bench_runtime_free",
                )),
                next_loop: std::mem::transmute::<*mut c_void, NextLoop>(sym(
                    "cosid_bench_next_loop",
                )),
                batch: std::mem::transmute::<*mut c_void, Batch>(sym("cosid_bench_batch")),
            })
        }
    }

    fn runtime(&self, config: &str) -> *mut c_void {
        let c = CString::new(config).unwrap();
        // SAFETY: the loop object's wrapper of cosid_runtime_new.
        let rt = unsafe { (self.runtime_new)(c.as_ptr()) };
        assert!(!rt.is_null(), "the C loop's cosid_runtime_new failed");
        rt
    }
}

/// Per-call groups: many short samples of equal length (about 1 ms each), so that on a loaded
/// machine many samples run without being preempted; `benches/c/run.sh` reports the best sample
/// beside criterion's mean.
fn short_samples(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(1000)
        .nresamples(2000)
        .measurement_time(Duration::from_secs(2));
}

fn floor(c: &mut Criterion) {
    let mut g = c.benchmark_group("c_api/floor");
    short_samples(&mut g);
    g.bench_function("SystemTime::now", |b| {
        b.iter(|| black_box(SystemTime::now()))
    });
    let word = AtomicU64::new(0);
    g.bench_function("uncontended_cas", |b| {
        b.iter(|| {
            let cur = word.load(Ordering::Acquire);
            black_box(word.compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire))
        })
    });
    g.finish();
}

fn next(c: &mut Criterion) {
    let mut g = c.benchmark_group("c_api/next");
    short_samples(&mut g);
    let rust = Runtime::from_yaml(WIDE).unwrap();
    g.bench_function("rust_Runtime::next", |b| {
        b.iter(|| black_box(rust.next().unwrap()))
    });
    let rt = c_runtime(WIDE);
    g.bench_function("extern_C_cosid_next", |b| {
        let mut id = 0u64;
        b.iter(|| {
            let s = cosid_next(black_box(rt), &mut id);
            black_box((s, id))
        })
    });
    if let Some(cl) = CLoop::load() {
        // Its own memory store: the loaded libcosid.so has its own copy of the core.
        let crt = cl.runtime(WIDE);
        g.bench_function("C_compiled_cosid_next", |b| {
            b.iter_custom(|iters| {
                let mut acc = 0u64;
                let start = Instant::now();
                // SAFETY: a live runtime of the loop object's library; acc is ours.
                let s = unsafe { (cl.next_loop)(crt, iters, &mut acc) };
                let t = start.elapsed();
                assert_eq!(s, 0);
                black_box(acc);
                t
            })
        });
        // SAFETY: made by runtime_new above, freed once.
        unsafe { (cl.runtime_free)(crt) };
    }
    g.finish();
    cosid_runtime_free(rt);
    rust.close().unwrap();
}

/// Waits (untimed) until the wall clock enters a new millisecond: a batch of 4096 started there
/// finds the whole millisecond's sequence numbers free and never waits for the next tick.
fn wait_for_fresh_ms() {
    let ms = cosid_core::clock::system_now_ms();
    while cosid_core::clock::system_now_ms() == ms {
        std::hint::spin_loop();
    }
}

/// CPU time of `iters` calls of `f`, each started at a fresh millisecond.
fn cpu_per_fresh_call(iters: u64, mut f: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        wait_for_fresh_ms();
        let start = thread_cpu();
        f();
        total += thread_cpu() - start;
    }
    total
}

/// Batches of 4096: CPU time per id of calls that do not wait for the next tick (the target
/// excludes that wait, which the core spends yielding the CPU).
fn batch(c: &mut Criterion) {
    for (layout, config) in [("default_layout", DEFAULT), ("20_sequence_bits", WIDE)] {
        let mut g = c.benchmark_group(format!("c_api/batch4096_cpu/{layout}"));
        g.throughput(Throughput::Elements(4096));
        let rust = Runtime::from_yaml(config).unwrap();
        let mut ids = vec![0u64; 4096];
        g.bench_function("rust_Runtime::next_batch", |b| {
            b.iter_custom(|iters| {
                cpu_per_fresh_call(iters, || {
                    rust.next_batch(&mut ids).unwrap();
                    black_box(&ids);
                })
            })
        });
        rust.close().unwrap();
        let rt = c_runtime(config);
        g.bench_function("extern_C_cosid_next_batch", |b| {
            b.iter_custom(|iters| {
                cpu_per_fresh_call(iters, || {
                    assert_eq!(cosid_next_batch(rt, ids.as_mut_ptr(), ids.len()) as u32, 0);
                    black_box(&ids);
                })
            })
        });
        cosid_runtime_free(rt);
        if let Some(cl) = CLoop::load() {
            let crt = cl.runtime(config);
            g.bench_function("C_compiled_cosid_next_batch", |b| {
                b.iter_custom(|iters| {
                    cpu_per_fresh_call(iters, || {
                        // SAFETY: a live runtime of the loop object's library; 4096 ids of room.
                        let s = unsafe { (cl.batch)(crt, ids.as_mut_ptr(), ids.len()) };
                        assert_eq!(s, 0);
                        black_box(&ids);
                    })
                })
            });
            // SAFETY: made by runtime_new above, freed once.
            unsafe { (cl.runtime_free)(crt) };
        }
        g.finish();
    }
}

/// `next` per call, the three callers interleaved: each round runs 1000 calls of each, in a
/// rotating order, so slow changes of the machine's load hit all three alike. Prints the best
/// round, the median round, and the median of the per-round differences to Rust (paired, so the
/// load mostly cancels). Needs `COSID_BENCH_C_LOOP`.
fn interleaved(_c: &mut Criterion) {
    let Some(cl) = CLoop::load() else {
        return;
    };
    const ROUNDS: usize = 3001;
    const CALLS: u64 = 1000;
    let rust = Runtime::from_yaml(WIDE).unwrap();
    let rt = c_runtime(WIDE);
    let crt = cl.runtime(WIDE);
    let mut t = vec![[0f64; 3]; ROUNDS];
    for (r, row) in t.iter_mut().enumerate() {
        for k in 0..3 {
            let v = (r + k) % 3;
            let start = Instant::now();
            match v {
                0 => {
                    for _ in 0..CALLS {
                        black_box(rust.next().unwrap());
                    }
                }
                1 => {
                    let mut id = 0u64;
                    for _ in 0..CALLS {
                        let s = cosid_next(black_box(rt), &mut id);
                        black_box((s as u32, id));
                    }
                }
                _ => {
                    let mut acc = 0u64;
                    // SAFETY: a live runtime of the loop object's library.
                    let s = unsafe { (cl.next_loop)(crt, CALLS, &mut acc) };
                    assert_eq!(s, 0);
                    black_box(acc);
                }
            }
            row[v] = start.elapsed().as_nanos() as f64 / CALLS as f64;
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("\n| `next`, interleaved rounds of 1000 calls | best round ns | median round ns | median paired difference to Rust ns |");
    println!("| --- | ---: | ---: | ---: |");
    for (v, name) in [
        "Rust `Runtime::next()`",
        "`extern \"C\" cosid_next` called from Rust",
        "C-compiled `cosid_next` through the PLT",
    ]
    .iter()
    .enumerate()
    {
        let col: Vec<f64> = t.iter().map(|r| r[v]).collect();
        let best = col.iter().copied().fold(f64::INFINITY, f64::min);
        let diff = median(t.iter().map(|r| r[v] - r[0]).collect());
        println!(
            "| {name} | {best:.2} | {:.2} | {diff:+.2} |",
            median(col.clone())
        );
    }
    // SAFETY: made by runtime_new above, freed once.
    unsafe { (cl.runtime_free)(crt) };
    cosid_runtime_free(rt);
    rust.close().unwrap();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = floor, next, interleaved, batch
}
criterion_main!(benches);
