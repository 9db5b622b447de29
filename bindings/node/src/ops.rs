//! The id methods of `Runtime` and `Generator`: the one implementation that both the raw
//! own-property callbacks (the fast path) and the `#[napi]` prototype methods (the typed
//! declarations) call; `methods.rs` generates both from one table.
//!
//! The synchronous methods never wait on the store: they call the core's non-blocking
//! `try_next` / `try_reserve`. A wait for the next time unit (or a clock a hair behind the
//! floor) is at most [`SPIN`] and is spun through; any other wait (the window's ceiling, a lost
//! or unbound slot, a long clock step) throws at once with its code. The `...Async` methods
//! wait off the event loop, up to the configured `max-wait`.

use crate::error::{check, coded, range_error, type_error, Failure, Res};
use crate::offload::{self, IdValue};
use crate::raw::{self, bigint, display, made, type_name, type_of};
use cosid_core::convert::{self, BASE62_WIDTH};
use cosid_core::{Generator, Layout, TryNext, WaitReason};
use napi::sys;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a synchronous call spins for the next time unit before it gives up.
pub(crate) const SPIN: Duration = Duration::from_millis(2);
/// The largest `nextBatch(n)`: 16 time units of the default layout, so that spinning through
/// the units a batch spans stays short.
pub(crate) const MAX_BATCH: usize = 65_536;
/// The largest `nextBatchAsync(n)` (32 MiB of ids).
pub(crate) const MAX_ASYNC_BATCH: usize = 1 << 22;

/// What an id method works on: one generator, and the queue of its waiting async calls.
pub(crate) struct GenCtx {
    pub(crate) gen: Arc<Generator>,
    waiter: Arc<offload::Waiter>,
}

impl GenCtx {
    pub(crate) fn new(gen: Arc<Generator>) -> Arc<Self> {
        Arc::new(GenCtx {
            gen,
            waiter: Arc::default(),
        })
    }
}

/// One id, or why it would have to wait.
#[inline]
fn attempt(gen: &Generator) -> Res<Result<u64, (WaitReason, Duration)>> {
    match gen.try_next()? {
        TryNext::Ready(id) => Ok(Ok(id)),
        TryNext::Wait {
            reason,
            retry_after,
        } => spin(reason, retry_after, || gen.try_next()),
    }
}

/// The synchronous methods' wait: retries `again` (the non-blocking attempt that said "wait")
/// while the wait is [`spinnable`], for at most [`SPIN`]; what it got, or the last wait.
#[cold]
fn spin<T>(
    mut reason: WaitReason,
    mut retry_after: Duration,
    mut again: impl FnMut() -> cosid_core::Result<TryNext<T>>,
) -> Res<Result<T, (WaitReason, Duration)>> {
    let start = Instant::now();
    while spinnable(reason, retry_after) {
        // Time is checked before the attempt, never between an attempt and giving up: a thread
        // descheduled past the budget still makes one more attempt when it runs again.
        let out_of_time = start.elapsed() >= SPIN;
        std::hint::spin_loop();
        match again()? {
            TryNext::Ready(v) => return Ok(Ok(v)),
            TryNext::Wait {
                reason: r,
                retry_after: a,
            } => (reason, retry_after) = (r, a),
        }
        if out_of_time {
            break;
        }
    }
    Ok(Err((reason, retry_after)))
}

fn spinnable(reason: WaitReason, retry_after: Duration) -> bool {
    matches!(reason, WaitReason::NextTick | WaitReason::ClockBehind) && retry_after <= SPIN
}

/// The error of a synchronous call that would have had to wait.
#[cold]
fn would_wait(gen: &Generator, what: &str, reason: WaitReason, retry_after: Duration) -> Failure {
    let why = match reason {
        WaitReason::Ceiling => "the slot's window has reached its ceiling and the keeper has not \
                                extended it yet (the store may be slow or unreachable)"
            .to_string(),
        WaitReason::Unbound => "no slot is bound yet (the keeper is acquiring one)".to_string(),
        WaitReason::NextTick => format!(
            "every sequence number of this time unit is used and the next unit starts in {} ms",
            retry_after.as_millis()
        ),
        WaitReason::ClockBehind => format!(
            "the clock is behind the window's floor or the last issued id (about {} ms)",
            retry_after.as_millis()
        ),
    };
    let kind = reason.into_error(gen.max_wait()).kind();
    coded(
        kind,
        format!(
            "{what}: {why}; the synchronous methods never wait: await nextAsync(), \
             nextStrAsync() or nextBatchAsync(n), which wait up to max-wait ({})",
            cosid_core::time::format_duration(gen.max_wait())
        ),
    )
}

/// One id now, or a failure.
#[inline]
pub(crate) fn next_id(gen: &Generator, what: &str) -> Res<u64> {
    match attempt(gen)? {
        Ok(id) => Ok(id),
        Err((reason, after)) => Err(would_wait(gen, what, reason, after)),
    }
}

/// Fills `out` with ids now, or fails: the core's batch loop (`Generator::fill_with`, all or
/// nothing) with the synchronous methods' wait, [`spin`] for each run that has to wait.
fn fill(gen: &Generator, out: &mut [u64]) -> Res<()> {
    gen.fill_with(out, |want, reason, retry_after| {
        spin(reason, retry_after, || gen.try_reserve(want))?
            .map_err(|(reason, after)| would_wait(gen, "nextBatch(n)", reason, after))
    })
}

// ---------------------------------------------------------------------------------------------
// Arguments

/// A `bigint` id argument.
pub(crate) fn read_id(env: sys::napi_env, v: sys::napi_value, what: &str) -> Res<u64> {
    let t = type_of(env, v)?;
    if t != sys::ValueType::napi_bigint {
        let hint = match t {
            sys::ValueType::napi_string => {
                "; parse text first with fromBase62(s) or BigInt(s)".to_string()
            }
            sys::ValueType::napi_number => "; ids do not fit in a number: pass a bigint like 123n \
                                            or BigInt(s)"
                .to_string(),
            _ => String::new(),
        };
        return Err(type_error(format!(
            "{what}: id must be a bigint, got {} ({}){hint}",
            type_name(t),
            display(env, v)
        )));
    }
    let (id, lossless) = raw::bigint_value(env, v)?;
    if !lossless {
        return Err(range_error(format!(
            "{what}: id {}n is not an unsigned 64-bit integer (0n to 18446744073709551615n)",
            display(env, v)
        )));
    }
    Ok(id)
}

/// A count argument: an integer from 0 to `max`.
pub(crate) fn read_count(
    env: sys::napi_env,
    v: sys::napi_value,
    what: &str,
    max: usize,
    bigger: &str,
) -> Res<usize> {
    let t = type_of(env, v)?;
    if t != sys::ValueType::napi_number {
        return Err(type_error(format!(
            "{what}: n must be a number, got {} ({})",
            type_name(t),
            display(env, v)
        )));
    }
    let x = made!(env, 0f64, napi_get_value_double(v))?;
    if !(x.fract() == 0.0 && (0.0..=max as f64).contains(&x)) {
        return Err(range_error(format!(
            "{what}: n must be an integer from 0 to {max}, got {x}{bigger}"
        )));
    }
    Ok(x as usize)
}

// ---------------------------------------------------------------------------------------------
// Values

/// A `BigUint64Array` of `n` fresh ids, filled in place in a new `ArrayBuffer`.
fn fresh_ids(env: sys::napi_env, gen: &Generator, n: usize) -> Res<sys::napi_value> {
    typed_array(env, n, |out| fill(gen, out))
}

/// A `BigUint64Array` holding a copy of `ids`.
pub(crate) fn copy_ids(env: sys::napi_env, ids: &[u64]) -> Res<sys::napi_value> {
    typed_array(env, ids.len(), |out| {
        out.copy_from_slice(ids);
        Ok(())
    })
}

/// A `BigUint64Array` of `n` elements in a new `ArrayBuffer`, filled in place by `fill`.
fn typed_array(
    env: sys::napi_env,
    n: usize,
    fill: impl FnOnce(&mut [u64]) -> Res<()>,
) -> Res<sys::napi_value> {
    let mut bytes: *mut c_void = ptr::null_mut();
    let mut buffer = ptr::null_mut();
    check!(
        env,
        sys::napi_create_arraybuffer(env, n * 8, &mut bytes, &mut buffer),
        "napi_create_arraybuffer"
    )?;
    if n > 0 {
        // SAFETY: V8 allocates ArrayBuffer memory aligned for any element type, `n * 8` bytes
        // long, and nothing else can see the buffer until we return it.
        fill(unsafe { std::slice::from_raw_parts_mut(bytes as *mut u64, n) })?;
    }
    made!(
        env,
        napi_create_typedarray(sys::TypedarrayType::biguint64_array, n, buffer, 0)
    )
}

/// `{ id, timestamp, time, slot, sequence }` of an id.
pub(crate) fn id_info(env: sys::napi_env, layout: &Layout, id: u64) -> Res<sys::napi_value> {
    let info = convert::decode(layout, id)?;
    let obj = raw::object(env)?;
    raw::set(env, obj, c"id", bigint(env, id)?)?;
    raw::set(
        env,
        obj,
        c"timestamp",
        raw::number(env, info.timestamp_ms as f64)?,
    )?;
    raw::set(
        env,
        obj,
        c"time",
        raw::ascii(env, info.time_rfc3339.as_bytes())?,
    )?;
    raw::set(env, obj, c"slot", raw::number(env, info.slot as f64)?)?;
    raw::set(
        env,
        obj,
        c"sequence",
        raw::number(env, info.sequence as f64)?,
    )?;
    Ok(obj)
}

#[inline]
pub(crate) fn base62(env: sys::napi_env, id: u64) -> Res<sys::napi_value> {
    let mut buf = [0u8; BASE62_WIDTH];
    convert::encode_base62(id, &mut buf);
    raw::ascii(env, &buf)
}

// ---------------------------------------------------------------------------------------------
// The methods

#[inline]
pub(crate) fn next(env: sys::napi_env, g: &GenCtx) -> Res<sys::napi_value> {
    bigint(env, next_id(&g.gen, "next()")?)
}

pub(crate) fn next_str(env: sys::napi_env, g: &GenCtx) -> Res<sys::napi_value> {
    base62(env, next_id(&g.gen, "nextStr()")?)
}

pub(crate) fn next_batch(
    env: sys::napi_env,
    g: &GenCtx,
    n: sys::napi_value,
) -> Res<sys::napi_value> {
    let n = read_count(
        env,
        n,
        "nextBatch(n)",
        MAX_BATCH,
        "; for more, call it again or await nextBatchAsync(n)",
    )?;
    fresh_ids(env, &g.gen, n)
}

pub(crate) fn parse(env: sys::napi_env, g: &GenCtx, id: sys::napi_value) -> Res<sys::napi_value> {
    let id = read_id(env, id, "parse(id)")?;
    id_info(env, g.gen.layout(), id)
}

pub(crate) fn next_async(env: sys::napi_env, g: &GenCtx) -> Res<sys::napi_value> {
    one_async(env, g, bigint)
}

pub(crate) fn next_str_async(env: sys::napi_env, g: &GenCtx) -> Res<sys::napi_value> {
    one_async(env, g, base62)
}

/// A promise of one id as `value` gives it: settled at once when the id comes at once, else by
/// the generator's waiting thread.
fn one_async(env: sys::napi_env, g: &GenCtx, value: IdValue) -> Res<sys::napi_value> {
    match attempt(&g.gen) {
        Ok(Ok(id)) => raw::resolved(env, value(env, id)?),
        Err(f) => raw::rejected(env, f),
        Ok(Err(_)) => g.waiter.next(env, &g.gen, value),
    }
}

pub(crate) fn next_batch_async(
    env: sys::napi_env,
    g: &GenCtx,
    n: sys::napi_value,
) -> Res<sys::napi_value> {
    match read_count(
        env,
        n,
        "nextBatchAsync(n)",
        MAX_ASYNC_BATCH,
        "; call it again for more",
    ) {
        Ok(n) => g.waiter.batch(env, &g.gen, n),
        Err(f) => raw::rejected(env, f),
    }
}
