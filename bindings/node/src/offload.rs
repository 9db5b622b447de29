//! Work that may wait (store I/O, acquiring a slot, closing, waiting for a window) runs on its
//! own thread and settles a promise on the JavaScript thread. The event loop never waits.
//!
//! A dedicated thread, not the libuv pool: acquiring a slot may wait for `acquire-timeout`
//! (30 s by default), and four such waits would otherwise starve every `fs` call of the
//! process. The pending promise keeps the loop alive until it settles, like any I/O.
//!
//! The `...Async` id methods share one waiting thread per generator ([`Waiter`]): while the
//! window is closed, a flood of `nextAsync()` calls queues up behind it instead of starting a
//! thread each.

use crate::error::{Failure, Res, INTERNAL};
use crate::raw::Raw;
use cosid_core::Generator;
use napi::JsDeferred;
use napi::{sys, Env, JsValue};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

type Resolver = Box<dyn FnOnce(Env) -> napi::Result<Raw>>;
type Deferred = JsDeferred<Raw, Resolver>;

/// A new promise and the handle that settles it from any thread.
fn deferred(env: sys::napi_env) -> Res<(Deferred, sys::napi_value)> {
    let js_env = Env::from_raw(env);
    let (deferred, promise) = js_env.create_deferred::<Raw, Resolver>()?;
    let promise = promise.raw();
    Ok((deferred, promise))
}

/// Settles `deferred` on the JavaScript thread with `settle(value)`, or rejects it.
fn settle<T, S>(deferred: Deferred, outcome: Res<T>, settle: S)
where
    T: Send + 'static,
    S: FnOnce(sys::napi_env, T) -> Res<sys::napi_value> + Send + 'static,
{
    deferred.resolve(Box::new(move |env: Env| {
        let env = env.raw();
        match outcome.and_then(|value| settle(env, value)) {
            Ok(v) => Ok(Raw(v)),
            // SAFETY: resolvers run on the JavaScript thread of `env`.
            Err(f) => Err(unsafe { f.into_rejection(env) }),
        }
    }));
}

fn no_thread(what: &str, e: std::io::Error) -> Failure {
    Failure::Coded {
        code: INTERNAL,
        message: format!("cannot start a thread for {what}: {e}"),
    }
}

/// Runs `work` on a new thread and returns a promise settled with `settle(result)` on the
/// JavaScript thread (rejected with the failure if either fails).
pub(crate) fn promise<T, W, S>(
    env: sys::napi_env,
    name: &str,
    work: W,
    finish: S,
) -> Res<sys::napi_value>
where
    T: Send + 'static,
    W: FnOnce() -> Res<T> + Send + 'static,
    S: FnOnce(sys::napi_env, T) -> Res<sys::napi_value> + Send + 'static,
{
    let (deferred, promise) = deferred(env)?;
    // Shared with the thread, so that the promise can still be rejected if it cannot start.
    let slot = Arc::new(Mutex::new(Some(deferred)));
    let theirs = slot.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("cosid-{name}"))
        .spawn(move || {
            let d = theirs.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(d) = d {
                settle(d, work(), finish);
            }
        });
    if let Err(e) = spawned {
        let d = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(d) = d {
            settle::<(), _>(d, Err(no_thread(name, e)), |env, ()| {
                crate::raw::undefined(env)
            });
        }
    }
    Ok(promise)
}

/// How a waiting call gives its one id to JavaScript: a `bigint` (`nextAsync`) or its base-62
/// text (`nextStrAsync`).
pub(crate) type IdValue = fn(sys::napi_env, u64) -> Res<sys::napi_value>;

/// What a waiting `...Async` call asked for.
enum Request {
    One(Deferred, IdValue),
    Batch(usize, Deferred),
}

/// The queue of `...Async` calls of one generator that could not be served at once, and
/// whether a thread is serving it.
#[derive(Default)]
pub(crate) struct Waiter {
    state: Mutex<(VecDeque<Request>, bool)>,
}

impl Waiter {
    /// A promise of one id, issued off the event loop (waiting up to `max-wait`), given to
    /// JavaScript as `value` makes it.
    pub(crate) fn next(
        self: &Arc<Self>,
        env: sys::napi_env,
        gen: &Arc<Generator>,
        value: IdValue,
    ) -> Res<sys::napi_value> {
        let (d, promise) = deferred(env)?;
        self.enqueue(Request::One(d, value), gen)?;
        Ok(promise)
    }

    /// A promise of `n` ids, issued off the event loop.
    pub(crate) fn batch(
        self: &Arc<Self>,
        env: sys::napi_env,
        gen: &Arc<Generator>,
        n: usize,
    ) -> Res<sys::napi_value> {
        let (d, promise) = deferred(env)?;
        self.enqueue(Request::Batch(n, d), gen)?;
        Ok(promise)
    }

    fn enqueue(self: &Arc<Self>, request: Request, gen: &Arc<Generator>) -> Res<()> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0.push_back(request);
        if state.1 {
            return Ok(());
        }
        let (waiter, gen) = (self.clone(), gen.clone());
        match std::thread::Builder::new()
            .name("cosid-wait".into())
            .spawn(move || waiter.serve(&gen))
        {
            Ok(_) => {
                state.1 = true;
                Ok(())
            }
            Err(e) => {
                // Nothing serves the queue: fail what it holds (this request included).
                let failure = no_thread("waiting for ids", e);
                let queued: Vec<Request> = state.0.drain(..).collect();
                drop(state);
                for r in queued {
                    reject(r, failure.clone());
                }
                Ok(())
            }
        }
    }

    /// Serves the queue in order until it is empty. When a wait fails (the window stayed closed
    /// for `max-wait`), every request queued behind it fails with the same error: they waited
    /// for the same window.
    fn serve(&self, gen: &Generator) {
        loop {
            let taken: Vec<Request> = {
                let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                if state.0.is_empty() {
                    state.1 = false;
                    return;
                }
                state.0.drain(..).collect()
            };
            let mut failed: Option<Failure> = None;
            for request in taken {
                if let Some(f) = &failed {
                    reject(request, f.clone());
                    continue;
                }
                match request {
                    Request::One(d, value) => match gen.next() {
                        Ok(id) => settle(d, Ok(id), value),
                        Err(e) => {
                            let f = Failure::from(e);
                            failed = Some(f.clone());
                            settle::<u64, _>(d, Err(f), value);
                        }
                    },
                    Request::Batch(n, d) => {
                        let mut ids = vec![0u64; n];
                        match gen.next_batch(&mut ids) {
                            Ok(()) => settle(d, Ok(ids), |env, ids: Vec<u64>| {
                                crate::ops::copy_ids(env, &ids)
                            }),
                            Err(e) => {
                                let f = Failure::from(e);
                                failed = Some(f.clone());
                                reject(Request::Batch(n, d), f);
                            }
                        }
                    }
                }
            }
        }
    }
}

fn reject(request: Request, failure: Failure) {
    let d = match request {
        Request::One(d, _) | Request::Batch(_, d) => d,
    };
    settle::<(), _>(d, Err(failure), |env, ()| crate::raw::undefined(env));
}
