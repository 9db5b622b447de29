//! Thin, checked wrappers over the Node-API calls the addon makes directly.
//!
//! The id methods (`next`, `nextBatch`, `nextStr`, `parse`, `nextAsync`, ...) are plain
//! Node-API callbacks installed as own properties of each `Runtime` / `Generator` object, each
//! with the generator as its callback data. A `#[napi]` class method costs several hundred
//! nanoseconds per call in napi-rs 3 (its borrow tracking takes a global lock and a hash map per
//! call); a callback with data costs one `napi_get_cb_info`. The `#[napi]` methods of the same
//! names stay on the prototypes (they give `index.d.ts` its types and behave identically).

use crate::error::{check, type_error, Failure, Res};
use napi::bindgen_prelude::{ToNapiValue, TypeName, ValueType};
use napi::sys;
use std::ffi::{c_char, c_void, CStr};
use std::ptr;
use std::sync::Arc;

/// Calls the Node-API function `$f(env, args..., &mut value)` that makes or gets a value,
/// checked (a failure names `$f`): the value. `value` starts as `$init` when given (a number,
/// a bool), else as a null `napi_value`.
macro_rules! made {
    ($env:expr, $f:ident($($arg:expr),* $(,)?)) => {
        $crate::raw::made!($env, ::std::ptr::null_mut(), $f($($arg),*))
    };
    ($env:expr, $init:expr, $f:ident($($arg:expr),* $(,)?)) => {{
        let mut v = $init;
        $crate::error::check!($env, ::napi::sys::$f($env, $($arg,)* &mut v), stringify!($f))
            .map(|()| v)
    }};
}
pub(crate) use made;

/// A JavaScript value made by the addon, handed to napi-rs as it is.
pub struct Raw(pub(crate) sys::napi_value);

impl ToNapiValue for Raw {
    unsafe fn to_napi_value(_env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        Ok(val.0)
    }
}

impl TypeName for Raw {
    fn type_name() -> &'static str {
        "unknown"
    }

    fn value_type() -> ValueType {
        ValueType::Unknown
    }
}

pub(crate) fn undefined(env: sys::napi_env) -> Res<sys::napi_value> {
    made!(env, napi_get_undefined())
}

pub(crate) fn null(env: sys::napi_env) -> Res<sys::napi_value> {
    made!(env, napi_get_null())
}

#[inline]
pub(crate) fn bigint(env: sys::napi_env, n: u64) -> Res<sys::napi_value> {
    made!(env, napi_create_bigint_uint64(n))
}

pub(crate) fn number(env: sys::napi_env, n: f64) -> Res<sys::napi_value> {
    made!(env, napi_create_double(n))
}

pub(crate) fn boolean(env: sys::napi_env, b: bool) -> Res<sys::napi_value> {
    made!(env, napi_get_boolean(b))
}

/// A string of ASCII bytes (cheaper than UTF-8 validation on the engine side).
#[inline]
pub(crate) fn ascii(env: sys::napi_env, s: &[u8]) -> Res<sys::napi_value> {
    debug_assert!(s.is_ascii());
    made!(
        env,
        napi_create_string_latin1(s.as_ptr() as *const c_char, s.len() as isize)
    )
}

/// A string of any UTF-8 text.
pub(crate) fn utf8_string(env: sys::napi_env, s: &str) -> Res<sys::napi_value> {
    made!(
        env,
        napi_create_string_utf8(s.as_ptr() as *const c_char, s.len() as isize)
    )
}

/// `obj[key] = value` for a key given as Rust text (no NUL needed).
pub(crate) fn set_named(
    env: sys::napi_env,
    obj: sys::napi_value,
    key: &str,
    value: sys::napi_value,
) -> Res<()> {
    let k = utf8_string(env, key)?;
    check!(
        env,
        sys::napi_set_property(env, obj, k, value),
        "napi_set_property"
    )
}

pub(crate) fn object(env: sys::napi_env) -> Res<sys::napi_value> {
    made!(env, napi_create_object())
}

pub(crate) fn set(
    env: sys::napi_env,
    obj: sys::napi_value,
    key: &CStr,
    value: sys::napi_value,
) -> Res<()> {
    check!(
        env,
        sys::napi_set_named_property(env, obj, key.as_ptr(), value),
        "napi_set_named_property"
    )
}

/// The length of an array.
pub(crate) fn array_length(env: sys::napi_env, v: sys::napi_value) -> Res<u32> {
    made!(env, 0u32, napi_get_array_length(v))
}

/// A bigint's value as a `u64`, and whether it fits one exactly.
pub(crate) fn bigint_value(env: sys::napi_env, v: sys::napi_value) -> Res<(u64, bool)> {
    let mut n = 0u64;
    let mut lossless = false;
    check!(
        env,
        sys::napi_get_value_bigint_uint64(env, v, &mut n, &mut lossless),
        "napi_get_value_bigint_uint64"
    )?;
    Ok((n, lossless))
}

/// The text of a string argument; a `TypeError` naming `what` (`"fn(arg): arg"`) for any other
/// type: one check for every argument that must be a string.
pub(crate) fn string_arg(env: sys::napi_env, v: sys::napi_value, what: &str) -> Res<String> {
    let t = type_of(env, v)?;
    if t != sys::ValueType::napi_string {
        return Err(type_error(format!(
            "{what} must be a string, got {}",
            type_name(t)
        )));
    }
    string_value(env, v)
}

pub(crate) fn type_of(env: sys::napi_env, v: sys::napi_value) -> Res<sys::napi_valuetype> {
    made!(env, 0, napi_typeof(v))
}

/// A short description of a value's type for error messages.
pub(crate) fn type_name(t: sys::napi_valuetype) -> &'static str {
    use sys::ValueType as T;
    match t {
        T::napi_undefined => "undefined",
        T::napi_null => "null",
        T::napi_boolean => "a boolean",
        T::napi_number => "a number",
        T::napi_string => "a string",
        T::napi_symbol => "a symbol",
        T::napi_object => "an object",
        T::napi_function => "a function",
        T::napi_bigint => "a bigint",
        _ => "an unsupported value",
    }
}

/// `String(v)` for error messages (best effort).
pub(crate) fn display(env: sys::napi_env, v: sys::napi_value) -> String {
    let mut s = ptr::null_mut();
    // SAFETY: `v` is a live value of `env`; coercion of a symbol fails and we say so.
    if unsafe { sys::napi_coerce_to_string(env, v, &mut s) } != sys::Status::napi_ok {
        let mut ignored = ptr::null_mut();
        // SAFETY: `env` is live on this thread (as above); `ignored` is a local.
        unsafe { sys::napi_get_and_clear_last_exception(env, &mut ignored) };
        return "(a value that has no string form)".into();
    }
    let mut text = string_value(env, s).unwrap_or_default();
    if text.len() > 80 {
        let mut cut = 77;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

pub(crate) fn is_array(env: sys::napi_env, v: sys::napi_value) -> Res<bool> {
    made!(env, false, napi_is_array(v))
}

/// The own enumerable string-keyed properties of object `v`, `(name, value)` in order.
pub(crate) fn own_properties(
    env: sys::napi_env,
    v: sys::napi_value,
) -> Res<Vec<(String, sys::napi_value)>> {
    let keys = made!(
        env,
        napi_get_all_property_names(
            v,
            sys::KeyCollectionMode::own_only,
            sys::KeyFilter::enumerable | sys::KeyFilter::skip_symbols,
            sys::KeyConversion::numbers_to_strings,
        )
    )?;
    let len = array_length(env, keys)?;
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..len {
        let key = made!(env, napi_get_element(keys, i))?;
        let name = string_value(env, key)?;
        out.push((name, made!(env, napi_get_property(v, key))?));
    }
    Ok(out)
}

/// The UTF-8 contents of a string value.
pub(crate) fn string_value(env: sys::napi_env, v: sys::napi_value) -> Res<String> {
    let mut len = 0usize;
    check!(
        env,
        sys::napi_get_value_string_utf8(env, v, ptr::null_mut(), 0, &mut len),
        "napi_get_value_string_utf8"
    )?;
    let mut buf = vec![0u8; len + 1];
    let mut written = 0usize;
    check!(
        env,
        sys::napi_get_value_string_utf8(
            env,
            v,
            buf.as_mut_ptr() as *mut c_char,
            len + 1,
            &mut written
        ),
        "napi_get_value_string_utf8"
    )?;
    buf.truncate(written);
    String::from_utf8(buf).map_err(|_| crate::error::type_error("a string is not valid UTF-16"))
}

/// The callback's `this`, data pointer and up to `N` arguments (missing ones are `undefined`).
///
/// # Safety
/// Called from a Node-API callback with its `env` and `info`.
#[inline]
pub(crate) unsafe fn callback<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Res<([sys::napi_value; N], *mut c_void)> {
    let mut args = [ptr::null_mut(); N];
    let mut argc = N;
    let mut data = ptr::null_mut();
    check!(
        env,
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            args.as_mut_ptr(),
            ptr::null_mut(),
            &mut data
        ),
        "napi_get_cb_info"
    )?;
    if argc < N {
        let u = undefined(env)?;
        for a in &mut args[argc..] {
            *a = u;
        }
    }
    Ok((args, data))
}

/// Ends a raw callback: the value, or `null` after throwing the failure.
#[inline]
pub(crate) fn finish(env: sys::napi_env, r: Res<sys::napi_value>) -> sys::napi_value {
    match r {
        Ok(v) => v,
        Err(f) => {
            // SAFETY: we are in a callback on the JavaScript thread of `env`.
            unsafe { f.throw(env) };
            ptr::null_mut()
        }
    }
}

/// Runs a raw callback body, turning a panic into a thrown `Error` instead of an abort.
#[inline]
pub(crate) fn guard(
    env: sys::napi_env,
    body: impl FnOnce() -> Res<sys::napi_value>,
) -> sys::napi_value {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(r) => finish(env, r),
        Err(_) => finish(
            env,
            Err(Failure::Coded {
                code: crate::error::PANIC,
                message: "cosid: internal panic (a bug; please report it)".into(),
            }),
        ),
    }
}

/// A raw method: its name and callback.
pub(crate) type Method = (&'static CStr, sys::napi_callback);

/// Defines `methods` as own, non-enumerable, writable properties of `obj`, each a function
/// whose callback data is a strong reference to `data` (released when the function is
/// collected).
pub(crate) fn install<T: Send + Sync + 'static>(
    env: sys::napi_env,
    obj: sys::napi_value,
    data: &Arc<T>,
    methods: &[Method],
) -> Res<()> {
    let mut props = Vec::with_capacity(methods.len());
    for (name, cb) in methods {
        let ptr = Arc::into_raw(data.clone()) as *mut c_void;
        let mut f = ptr::null_mut();
        let made = check!(
            env,
            sys::napi_create_function(
                env,
                name.as_ptr(),
                name.count_bytes() as isize,
                *cb,
                ptr,
                &mut f
            ),
            "napi_create_function"
        )
        .and_then(|()| {
            check!(
                env,
                sys::napi_add_finalizer(
                    env,
                    f,
                    ptr,
                    Some(release_arc::<T>),
                    ptr::null_mut(),
                    ptr::null_mut()
                ),
                "napi_add_finalizer"
            )
        });
        if let Err(e) = made {
            // SAFETY: no finalizer owns the reference: take it back.
            drop(unsafe { Arc::from_raw(ptr as *const T) });
            return Err(e);
        }
        props.push(sys::napi_property_descriptor {
            utf8name: name.as_ptr(),
            name: ptr::null_mut(),
            method: None,
            getter: None,
            setter: None,
            value: f,
            attributes: sys::PropertyAttributes::writable | sys::PropertyAttributes::configurable,
            data: ptr::null_mut(),
        });
    }
    check!(
        env,
        sys::napi_define_properties(env, obj, props.len(), props.as_ptr()),
        "napi_define_properties"
    )
}

unsafe extern "C" fn release_arc<T>(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Arc::into_raw` made in `install` for this function.
    drop(unsafe { Arc::from_raw(data as *const T) });
}

/// The data of a raw callback installed by [`install`].
///
/// # Safety
/// `data` is the callback data of a function installed with an `Arc<T>`.
#[inline]
pub(crate) unsafe fn data<'a, T>(data: *mut c_void) -> &'a T {
    // SAFETY: the caller's contract: `data` came from `Arc::into_raw` of an `Arc<T>` that the
    // function's finalizer releases, so it points to a live `T` for the whole call.
    unsafe { &*(data as *const T) }
}

/// A promise already resolved with `value`.
pub(crate) fn resolved(env: sys::napi_env, value: sys::napi_value) -> Res<sys::napi_value> {
    settled(env, value, true)
}

/// A promise already rejected with `failure`.
pub(crate) fn rejected(env: sys::napi_env, failure: Failure) -> Res<sys::napi_value> {
    // SAFETY: on the JavaScript thread of `env`.
    let Some(error) = (unsafe { failure.to_js(env) }) else {
        return Err(Failure::Pending);
    };
    settled(env, error, false)
}

/// A promise already settled with `value`: resolved with it, or rejected (`resolve` false).
fn settled(env: sys::napi_env, value: sys::napi_value, resolve: bool) -> Res<sys::napi_value> {
    let mut deferred = ptr::null_mut();
    let mut promise = ptr::null_mut();
    check!(
        env,
        sys::napi_create_promise(env, &mut deferred, &mut promise),
        "napi_create_promise"
    )?;
    if resolve {
        check!(
            env,
            sys::napi_resolve_deferred(env, deferred, value),
            "napi_resolve_deferred"
        )?;
    } else {
        check!(
            env,
            sys::napi_reject_deferred(env, deferred, value),
            "napi_reject_deferred"
        )?;
    }
    Ok(promise)
}
