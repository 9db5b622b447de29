//! The cost of `fork()` to a runtime, side by side in one run, per store:
//! - the first `next()` in a forked child through the inherited runtime (it takes a slot of its
//!   own: `cosid.fork: new-slot`), against
//! - building a new runtime in the child and issuing its first id (what a child had to do
//!   before), and
//! - the second `next()` in the child (the id path once the child has its slot).
//!
//! Each figure is the median (and the slowest) of `COSID_FORK_BENCH_CHILDREN` children (default
//! 40), forked one after another from one parent whose runtime holds its slot. Redis and
//! PostgreSQL are the throwaway servers `cosid-testkit` starts.
//!
//! `cargo bench -p cosid-core --features redis,postgres,etcd --bench fork`

use cosid_core::{Config, Runtime};
use cosid_testkit::Server;
use std::path::Path;
use std::time::Instant;

fn config(store: &str, ns: &str) -> Config {
    Config::from_yaml(&format!(
        "cosid:\n  namespace: {ns}\n  machine:\n    lease:\n      store: '{store}'\n      ttl: 10s\n"
    ))
    .unwrap()
}

/// Runs `f` in a forked child and returns the nanoseconds it reports.
fn in_child(dir: &Path, f: impl FnOnce() -> [u64; 3]) -> [u64; 3] {
    let out = dir.join("child.out");
    let _ = std::fs::remove_file(&out);
    // SAFETY: the child runs `f`, writes a file and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let r = f();
        std::fs::write(&out, format!("{} {} {}", r[0], r[1], r[2])).unwrap();
        // SAFETY: ends the child without the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    let text = std::fs::read_to_string(&out).unwrap();
    let v: Vec<u64> = text.split(' ').map(|x| x.parse().unwrap()).collect();
    [v[0], v[1], v[2]]
}

fn median_max(mut v: Vec<u64>) -> (f64, f64) {
    v.sort_unstable();
    (v[v.len() / 2] as f64 / 1e6, v[v.len() - 1] as f64 / 1e6)
}

fn measure(label: &str, store: &str, children: usize) {
    let dir = tempfile::tempdir().unwrap();
    let ns = format!("forkbench{}", std::process::id());
    let rt = Runtime::new(config(store, &ns)).unwrap();
    rt.next().unwrap();
    let (mut first, mut second, mut fresh) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..children {
        let (rt, store, ns) = (rt.clone(), store.to_string(), ns.clone());
        let r = in_child(dir.path(), move || {
            let t = Instant::now();
            rt.next().unwrap();
            let first = t.elapsed().as_nanos() as u64;
            let t = Instant::now();
            rt.next().unwrap();
            let second = t.elapsed().as_nanos() as u64;
            rt.close().unwrap();
            let t = Instant::now();
            let own = Runtime::new(config(&store, &ns)).unwrap();
            own.next().unwrap();
            let fresh = t.elapsed().as_nanos() as u64;
            own.close().unwrap();
            [first, second, fresh]
        });
        first.push(r[0]);
        second.push(r[1]);
        fresh.push(r[2]);
    }
    rt.close().unwrap();
    let (f, fm) = median_max(first);
    let (n, nm) = median_max(fresh);
    let (s, sm) = median_max(second);
    println!(
        "| {label} | {f:.2} ms (max {fm:.2}) | {n:.2} ms (max {nm:.2}) | {:.0} ns (max {:.0}) |",
        s * 1e6,
        sm * 1e6
    );
}

fn main() {
    // `cargo bench` passes --bench; a filter argument is not supported here.
    let children: usize = std::env::var("COSID_FORK_BENCH_CHILDREN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    println!("{children} children per store, one after another; median (slowest)\n");
    println!("| store | first next() in the child (takes a new slot) | new runtime + first id in the child | second next() in the child |");
    println!("|---|---|---|---|");
    let dir = tempfile::tempdir().unwrap();
    measure(
        "sqlite",
        &format!("sqlite://{}", dir.path().join("slots.db").display()),
        children,
    );
    let redis = Server::redis();
    measure("redis", &redis.url(), children);
    let pg = Server::postgres();
    measure("postgres", &pg.url(), children);
}
