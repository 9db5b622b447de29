//! Work that may wait (store I/O, acquiring a slot, closing, waiting for a window) runs on its
//! own thread and settles a promise on the JavaScript thread. The event loop never waits.
//!
//! A dedicated thread, not the libuv pool: acquiring a slot may wait for `acquire-timeout`
//! (30 s by default), and four such waits would otherwise starve every `fs` call of the
//! process. The pending promise keeps the loop alive until it settles, like any I/O.

use crate::error::{Failure, Res, INTERNAL};
use crate::raw::Raw;
use napi::{sys, Env};

type Resolver = Box<dyn FnOnce(Env) -> napi::Result<Raw>>;

/// Runs `work` on a new thread and returns a promise settled with `settle(result)` on the
/// JavaScript thread (rejected with the failure if either fails).
pub(crate) fn promise<T, W, S>(
    env: sys::napi_env,
    name: &str,
    work: W,
    settle: S,
) -> Res<sys::napi_value>
where
    T: Send + 'static,
    W: FnOnce() -> Res<T> + Send + 'static,
    S: FnOnce(sys::napi_env, T) -> Res<sys::napi_value> + Send + 'static,
{
    let js_env = Env::from_raw(env);
    let (deferred, promise) = js_env.create_deferred::<Raw, Resolver>()?;
    let spawned = std::thread::Builder::new()
        .name(format!("cosid-{name}"))
        .spawn(move || {
            let outcome = work();
            deferred.resolve(Box::new(move |env: Env| {
                let env = env.raw();
                let settled = outcome.and_then(|value| settle(env, value));
                match settled {
                    Ok(v) => Ok(Raw(v)),
                    // SAFETY: resolvers run on the JavaScript thread of `env`.
                    Err(f) => Err(unsafe { f.into_rejection(env) }),
                }
            }));
        });
    if let Err(e) = spawned {
        // The closure (and the deferred in it) is dropped: the promise would never settle.
        return Err(Failure::Coded {
            code: INTERNAL,
            message: format!("cannot start a thread for {name}: {e}"),
        });
    }
    Ok(napi::JsValue::raw(&promise))
}
