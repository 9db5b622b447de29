//! The id methods of `Runtime` and `Generator`, generated from one table.
//!
//! Each method exists twice, with the same name and behaviour:
//! - a plain Node-API callback, installed by [`install_methods`] as an own property of every
//!   `Runtime` and `Generator` object with the generator as its callback data: the fast path
//!   (one `napi_get_cb_info` per call);
//! - a `#[napi]` method on the class prototype, which gives `index.d.ts` its declaration (a
//!   `#[napi]` class method costs several hundred nanoseconds more per call in napi-rs 3: its
//!   borrow tracking takes a global lock and a hash map per call).
//!
//! Both call the same function of [`crate::ops`], so they cannot differ.

use crate::error::{throwing, Res};
use crate::ops::{self, GenCtx};
use crate::raw::{self, callback, data, guard, Method, Raw};
use crate::{Generator, Runtime};
use napi::bindgen_prelude::Unknown;
use napi::{sys, Env, JsValue};
use napi_derive::napi;
use std::sync::Arc;

/// One row per method: its doc (as `#[doc = "..."]`: a `///` comment would reach napi-rs's
/// typings as a raw string) and `#[napi]` attributes, its Rust name (the function of
/// [`crate::ops`] it calls, and the prototype method napi-rs names in camelCase), its
/// arguments, its JavaScript name and the name of its raw callback.
macro_rules! id_methods {
    (@impl $class:ident $([$(#$attr:tt)*] $name:ident($($arg:ident),*))*) => {
        #[napi]
        impl $class {
            $(
                $(#$attr)*
                pub fn $name(&self, env: Env $(, $arg: Unknown)*) -> napi::Result<Raw> {
                    let env = env.raw();
                    throwing(env, ops::$name(env, &self.ctx $(, $arg.raw())*).map(Raw))
                }
            )*
        }
    };
    ($(
        $(#$attr:tt)*
        fn $name:ident($($arg:ident),*) => $js:literal, $raw:ident;
    )*) => {
        $(
            unsafe extern "C" fn $raw(
                env: sys::napi_env,
                info: sys::napi_callback_info,
            ) -> sys::napi_value {
                guard(env, || {
                    // SAFETY: Node-API calls this callback on the JavaScript thread of `env`
                    // with this call's `info`; `install_methods` created the function with a
                    // strong `Arc<GenCtx>` as its data, released only by the function's
                    // finalizer, so the data outlives every call.
                    let ([$($arg),*], d) = unsafe { callback(env, info)? };
                    // SAFETY: `d` is that `Arc<GenCtx>` (see above).
                    let g = unsafe { data::<GenCtx>(d) };
                    ops::$name(env, g $(, $arg)*)
                })
            }
        )*

        /// The raw methods, as [`install_methods`] defines them.
        const METHODS: &[Method] = &[$(($js, Some($raw))),*];

        id_methods!(@impl Runtime $([$(#$attr)*] $name($($arg),*))*);
        id_methods!(@impl Generator $([$(#$attr)*] $name($($arg),*))*);
    };
}

id_methods! {
    #[doc = " One id, now. Never waits on the store: throws `COSID_ERR_WINDOW_CLOSED` (the window's"]
    #[doc = " ceiling is reached and not yet extended), `COSID_ERR_SLOT_LOST`, `COSID_ERR_CLOSED`, ..."]
    #[doc = " at once; `nextAsync()` waits instead."]
    #[napi(ts_return_type = "bigint")]
    fn next() => c"next", js_next;

    #[doc = " One id, waiting off the event loop (up to `max-wait`) when the window requires it."]
    #[napi(ts_return_type = "Promise<bigint>")]
    fn next_async() => c"nextAsync", js_next_async;

    #[doc = " `n` ids (0 to 65536), now, in one `BigUint64Array`; consecutive ids of one time unit are"]
    #[doc = " reserved in one atomic step. Throws like `next()`. All or nothing: a throw returns no id"]
    #[doc = " (ids reserved before it are issued and dropped, never reissued)."]
    #[napi(ts_args_type = "n: number", ts_return_type = "BigUint64Array")]
    fn next_batch(n) => c"nextBatch", js_next_batch;

    #[doc = " `n` ids (0 to 4194304), waiting off the event loop when the window requires it. All or"]
    #[doc = " nothing, like `nextBatch(n)`: a rejection returns no id."]
    #[napi(ts_args_type = "n: number", ts_return_type = "Promise<BigUint64Array>")]
    fn next_batch_async(n) => c"nextBatchAsync", js_next_batch_async;

    #[doc = " One id as fixed-width base-62 text (11 characters of `0-9A-Za-z`, ordered like the ids;"]
    #[doc = " `fromBase62` reads it back): a string, so `JSON.stringify` takes it as it is. Throws"]
    #[doc = " like `next()`."]
    #[napi(ts_return_type = "string")]
    fn next_str() => c"nextStr", js_next_str;

    #[doc = " `nextStr()`, waiting off the event loop (up to `max-wait`) like `nextAsync()`."]
    #[napi(ts_return_type = "Promise<string>")]
    fn next_str_async() => c"nextStrAsync", js_next_str_async;

    #[doc = " Takes an id of this layout apart."]
    #[napi(ts_args_type = "id: bigint", ts_return_type = "IdInfo")]
    fn parse(id) => c"parse", js_parse;
}

/// Gives `obj` the fast id methods of generator `g`.
pub(crate) fn install_methods(
    env: sys::napi_env,
    obj: sys::napi_value,
    g: &Arc<GenCtx>,
) -> Res<()> {
    raw::install(env, obj, g, METHODS)
}

/// Benchmark hooks, only in a build with the `bench-hooks` feature (`bench/bench.mjs`): never
/// part of the published addon or of `index.d.ts`.
#[cfg(feature = "bench-hooks")]
pub(crate) mod bench {
    use crate::raw::{self, callback, guard};
    use napi::sys;

    /// The floor of the benchmark: an empty native call through the same dispatch as `next()`.
    pub(crate) unsafe extern "C" fn js_noop(
        env: sys::napi_env,
        info: sys::napi_callback_info,
    ) -> sys::napi_value {
        guard(env, || {
            // SAFETY: Node-API calls this callback on the JavaScript thread of `env` with this
            // call's `info`.
            let ([], _) = unsafe { callback::<0>(env, info)? };
            raw::undefined(env)
        })
    }

    /// `exports.__bench = { noop }` (a non-enumerable property, so it stays out of every listing
    /// of the exports).
    pub(crate) fn export(env: sys::napi_env, exports: sys::napi_value) -> crate::error::Res<()> {
        let mut f = std::ptr::null_mut();
        crate::error::check!(
            env,
            sys::napi_create_function(
                env,
                c"noop".as_ptr(),
                4,
                Some(js_noop),
                std::ptr::null_mut(),
                &mut f
            ),
            "napi_create_function"
        )?;
        let hooks = raw::object(env)?;
        raw::set(env, hooks, c"noop", f)?;
        let prop = sys::napi_property_descriptor {
            utf8name: c"__bench".as_ptr(),
            name: std::ptr::null_mut(),
            method: None,
            getter: None,
            setter: None,
            value: hooks,
            attributes: sys::PropertyAttributes::default,
            data: std::ptr::null_mut(),
        };
        crate::error::check!(
            env,
            sys::napi_define_properties(env, exports, 1, &prop),
            "napi_define_properties"
        )
    }
}
