//! Long waits that Ctrl-C (`KeyboardInterrupt`) can interrupt.
//!
//! A core call that can wait long (acquiring a slot for up to `acquire-timeout`, an id call
//! waiting for a renewal for up to `max-wait`) runs on a helper thread while the calling thread,
//! with the GIL released, wakes every few milliseconds to let Python run its signal handlers. If
//! a handler raises (`KeyboardInterrupt`), the call returns that exception at once and the
//! helper thread finishes the core call on its own (the core bounds it): a runtime it still
//! builds is closed, releasing its slot; ids it still reserves are dropped (ids may have gaps).
//!
//! Only slow paths come here: the fast path of an id never leaves the calling thread.

use pyo3::prelude::*;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How often the waiting thread checks for signals.
const POLL: Duration = Duration::from_millis(20);

enum State<T> {
    Running,
    Done(cosid_core::Result<T>),
    /// The caller went away (a signal handler raised); the helper disposes of the result.
    Abandoned,
}

/// Runs `work` on a helper thread and waits for it, running Python's signal handlers meanwhile.
/// `abandon` disposes of a successful result nobody waits for any more.
pub(crate) fn wait<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce() -> cosid_core::Result<T> + Send + 'static,
    abandon: impl FnOnce(T) + Send + 'static,
) -> PyResult<cosid_core::Result<T>> {
    let shared = Arc::new((Mutex::new(State::Running), Condvar::new()));
    let theirs = shared.clone();
    // Whichever side finds the result abandoned disposes of it.
    let abandon = Arc::new(Mutex::new(Some(abandon)));
    let their_abandon = abandon.clone();
    let spawned = std::thread::Builder::new()
        .name("cosid-wait".into())
        .spawn(move || {
            let result = work();
            let (lock, cond) = &*theirs;
            let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
            if matches!(*state, State::Abandoned) {
                drop(state);
                if let Ok(value) = result {
                    dispose(&their_abandon, value);
                }
                return;
            }
            *state = State::Done(result);
            cond.notify_all();
        });
    if let Err(e) = spawned {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
            "cosid could not start a thread to wait on ({e})"
        )));
    }
    let (lock, cond) = &*shared;
    loop {
        let done = py.detach(|| {
            let state = lock.lock().unwrap_or_else(|p| p.into_inner());
            let (mut state, _) = cond
                .wait_timeout_while(state, POLL, |s| matches!(s, State::Running))
                .unwrap_or_else(|p| p.into_inner());
            match std::mem::replace(&mut *state, State::Running) {
                State::Done(r) => Some(r),
                other => {
                    *state = other;
                    None
                }
            }
        });
        if let Some(result) = done {
            return Ok(result);
        }
        if let Err(err) = py.check_signals() {
            let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
            // Finished meanwhile: the caller still gets the exception, but the result is
            // disposed of here (no thread is left to do it).
            if let State::Done(Ok(value)) = std::mem::replace(&mut *state, State::Abandoned) {
                drop(state);
                py.detach(|| dispose(&abandon, value));
            }
            return Err(err);
        }
    }
}

fn dispose<T, F: FnOnce(T)>(slot: &Mutex<Option<F>>, value: T) {
    let f = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(f) = f {
        f(value);
    }
}
