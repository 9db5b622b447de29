//! Many threads let go at one instant, for the store tests of simultaneous calls.

use std::sync::{Arc, Barrier};
use std::thread;

/// Runs `f(i, go)` on `n` threads (`i` from 0) and returns their results in order. Each thread
/// prepares what it needs (its own store handle, say) and then calls `go.wait()`, so that the
/// calls under test start together: the one way every racing test starts its threads.
pub fn at_once<T, F>(n: usize, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize, &Barrier) -> T + Send + Sync + 'static,
{
    let go = Arc::new(Barrier::new(n));
    let f = Arc::new(f);
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (go, f) = (go.clone(), f.clone());
            thread::spawn(move || f(i, &go))
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("a racing thread"))
        .collect()
}
