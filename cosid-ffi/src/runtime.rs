//! `cosid_runtime`: a running id source (a slot, its keeper thread, its generators).

use crate::boundary::{c_str, guard, guard_void, handle, out_slice, out_value, Handle};
use crate::events::{cosid_event_callback, EventSlot};
use crate::status::{cosid_status, fail};
use cosid_core::{Config, Runtime};
use std::ffi::c_void;
use std::os::raw::c_char;
use std::sync::Arc;

/// A running id source: one slot (leased from the configured store, or static), one keeper
/// thread that keeps the lease alive, and the generators that issue ids in the slot's window.
///
/// Opaque. Made by `cosid_runtime_new`, released by `cosid_runtime_free`.
///
/// **Thread-safe**: `cosid_next`, `cosid_next_batch`, `cosid_generator_get`, `cosid_parse`,
/// `cosid_runtime_stats`, `cosid_runtime_set_event_callback` and `cosid_runtime_close` may be
/// called on one runtime from any number of threads at once. Only `cosid_runtime_free` must not
/// race with any other use of the same runtime (as with any `free`).
///
/// Guarantees: ids of one generator are unique across every process of the namespace, and
/// strictly increase per generator for as long as the slot stays bound.
pub struct cosid_runtime {
    magic: u64,
    pub(crate) rt: Runtime,
    pub(crate) events: Arc<EventSlot>,
}

impl Handle for cosid_runtime {
    const MAGIC: u64 = u64::from_be_bytes(*b"cosid:rt");
    const NAME: &'static str = "cosid_runtime";
    fn magic(&self) -> u64 {
        self.magic
    }
}

impl Drop for cosid_runtime {
    fn drop(&mut self) {
        self.magic = 0;
    }
}

/// A runtime's counters and current window, read by `cosid_runtime_stats`. The members are the
/// core's stats fields (`cosid_core::lease::stats::STATS_FIELDS`) in its order, the same names
/// as Python's `cosid.Stats` attributes (Node: their camelCase, `idsIssued`, `floorMs`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct cosid_stats {
    /// Ids issued by all generators of the runtime (exact after close; while running it may
    /// trail by the current millisecond's ids).
    pub ids_issued: u64,
    /// Calls that had to wait (for the next tick, the window's floor, or a renewal).
    pub waits: u64,
    /// Successful lease renewals.
    pub renewals: u64,
    /// Failed lease renewals (store errors; retried with back-off).
    pub renewal_failures: u64,
    /// Slots acquired: 1 at start, +1 per rebinding after a lost lease.
    pub acquisitions: u64,
    /// Leases lost.
    pub slots_lost: u64,
    /// Clock-skew events raised.
    pub clock_skew_events: u64,
    /// The bound slot (meaningful while `bound`).
    pub slot: u32,
    /// Whether a slot is bound now (false after close and while a lost lease is re-acquired).
    pub bound: bool,
    /// The current window's floor (excluded), ms since the Unix epoch.
    pub floor_ms: i64,
    /// The current window's ceiling (included), ms since the Unix epoch.
    pub ceiling_ms: i64,
}

/// Builds a runtime and acquires its slot; on success stores the new handle in `*out`.
///
/// `config` is a NUL-terminated YAML or JSON document in the schema of `docs/c-api.md`
/// (`cosid: {namespace: …, machine: {lease: {store: sqlite:///path/slots.db, …}}}`), or NULL for
/// the embedded default: the SQLite store at `$XDG_STATE_HOME/cosid/slots.db` (else
/// `~/.local/state/cosid/slots.db`). `${VAR}` and `${VAR:-default}` expand from the environment.
///
/// Blocks until a slot is acquired, for at most the configured `acquire-timeout` (default: the
/// lease's ttl, 30 s). Starts one keeper thread named `cosid-keeper`.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT` (`out` is NULL), `COSID_ERR_CONFIG` (the detail names the
/// key, e.g. `cosid.machine.lease: unknown key 'tll'`), `COSID_ERR_STORE`, `COSID_ERR_TIMEOUT`,
/// `COSID_ERR_EXHAUSTED`, `COSID_ERR_NAMESPACE_MISMATCH`, `COSID_ERR_STATE_FILE`.
///
/// Thread-safe. Release the handle with `cosid_runtime_free`.
#[no_mangle]
pub extern "C" fn cosid_runtime_new(
    config: *const c_char,
    out: *mut *mut cosid_runtime,
) -> cosid_status {
    new_runtime("cosid_runtime_new", config, None, std::ptr::null_mut(), out)
}

/// `cosid_runtime_new` with the event callback set before the start, so that it also gets the
/// events of the start itself, on the calling thread before this function returns:
/// `COSID_EVENT_STORE_UNAVAILABLE` at each attempt while the store cannot be reached (what the
/// start waits for, and for how long at most), `COSID_EVENT_WINDOW_AHEAD`, the first
/// `COSID_EVENT_SLOT_ACQUIRED`. Later events reach it as if `cosid_runtime_set_event_callback`
/// had set it (which replaces it as usual). A NULL `callback` is `cosid_runtime_new`.
///
/// `user_data` must be usable from the keeper's thread for as long as the callback is set.
///
/// Errors: those of `cosid_runtime_new`.
///
/// Thread-safe. Release the handle with `cosid_runtime_free`.
#[no_mangle]
pub extern "C" fn cosid_runtime_new_with_callback(
    config: *const c_char,
    callback: cosid_event_callback,
    user_data: *mut c_void,
    out: *mut *mut cosid_runtime,
) -> cosid_status {
    new_runtime(
        "cosid_runtime_new_with_callback",
        config,
        callback,
        user_data,
        out,
    )
}

fn new_runtime(
    f: &'static str,
    config: *const c_char,
    callback: cosid_event_callback,
    user_data: *mut c_void,
    out: *mut *mut cosid_runtime,
) -> cosid_status {
    guard(f, || {
        out_value(f, out, || {
            let config = if config.is_null() {
                Config::embedded_default()
            } else {
                Config::from_yaml(c_str(f, "config", config, cosid_status::COSID_ERR_CONFIG)?)
            }
            .map_err(|e| fail(f, &e))?;
            let mut builder = Runtime::builder().config(config);
            let events = match callback {
                None => Arc::default(),
                Some(_) => {
                    let (events, listener) = EventSlot::before_start(callback, user_data);
                    builder = builder.on_event(listener);
                    events
                }
            };
            let rt = builder.build().map_err(|e| fail(f, &e))?;
            Ok(Box::into_raw(Box::new(cosid_runtime {
                magic: cosid_runtime::MAGIC,
                rt,
                events,
            })))
        })
    })
}

/// Issues one id from the runtime's default generator into `*out`.
///
/// Returns at once in the common case (lock-free; no system call). Waits, for at most the
/// configured `max-wait` (default 3 s), only when the current millisecond's sequence numbers are
/// used up, when the clock is behind the window, or when the window's ceiling is reached before
/// a renewal.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT`, `COSID_ERR_CLOSED` (after `cosid_runtime_close`),
/// `COSID_ERR_FORKED` (in a `fork()` child of the process that built the runtime, when the
/// runtime may not take a slot of its own there: see `cosid.fork`),
/// `COSID_ERR_SLOT_LOST`, `COSID_ERR_WINDOW_CLOSED`, `COSID_ERR_CLOCK_BEHIND`,
/// `COSID_ERR_TIMEOUT`.
///
/// Thread-safe: call it from any number of threads at once.
#[no_mangle]
pub extern "C" fn cosid_next(rt: *const cosid_runtime, out: *mut u64) -> cosid_status {
    const F: &str = "cosid_next";
    guard(F, || {
        let h = handle(F, "rt", rt)?;
        out_value(F, out, || h.rt.next().map_err(|e| fail(F, &e)))
    })
}

/// Fills `out[0..n]` with `n` ids from the runtime's default generator, reserving whole runs of
/// sequence numbers per atomic step (much cheaper per id than `n` calls of `cosid_next`). The ids
/// increase along the array.
///
/// All or nothing: on an error nothing is written to `out` (ids reserved before the error are
/// issued and dropped, never reissued), the same contract as every binding's batch call.
/// `n == 0` returns `COSID_OK` and writes nothing (`out` may then be NULL). Waits like
/// `cosid_next`, at most `max-wait` per time unit it needs.
///
/// Errors: those of `cosid_next`; `COSID_ERR_INVALID_ARGUMENT` if `out` is not aligned for
/// `uint64_t` or `n` exceeds the address space.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_next_batch(
    rt: *const cosid_runtime,
    out: *mut u64,
    n: usize,
) -> cosid_status {
    const F: &str = "cosid_next_batch";
    guard(F, || {
        let h = handle(F, "rt", rt)?;
        let out = out_slice(F, "out", out, n)?;
        h.rt.next_batch(out).map_err(|e| fail(F, &e))
    })
}

/// Ordered shutdown: every generator of the runtime closes (no id is issued after this call
/// returns), the keeper thread stops, and the slot is released to the store with the exact last
/// issued timestamp, so the next holder of the slot starts above it. In a `fork()` child it
/// releases the child's own slot if it took one, and leaves the parent's slot to the parent. The
/// event callback, if any, sees `COSID_EVENT_SLOT_RELEASED` on the calling thread.
///
/// The handle stays valid: later calls return `COSID_ERR_CLOSED` (`cosid_parse` and
/// `cosid_runtime_stats` keep working) until `cosid_runtime_free`.
///
/// May be called from inside the runtime's own event callback, on any thread (see
/// `cosid_event_callback`): the final `COSID_EVENT_SLOT_RELEASED` then reaches the callback
/// nested, before this returns. The callback may even free the runtime from there; this close
/// then finishes on its own and `rt` is invalid once it returns.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT`; `COSID_ERR_CLOSED` if the runtime was already closed (a
/// second close is harmless); `COSID_ERR_STORE` if the release could not be written (the lease
/// then expires after its ttl, and no id is lost or duplicated); `COSID_ERR_STATE_FILE` if a
/// static slot's state file could not be written.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_runtime_close(rt: *mut cosid_runtime) -> cosid_status {
    const F: &str = "cosid_runtime_close";
    guard(F, || {
        let h = handle(F, "rt", rt.cast_const())?;
        // The close runs on a handle of its own: the event callback may free `rt` during it (on
        // the final release event), and the runtime then lives on in this one until the close
        // returns. `h` is not used again.
        let runtime = h.rt.clone();
        runtime.close().map_err(|e| fail(F, &e))
    })
}

/// Releases the runtime. If it was not closed, does the ordered shutdown of
/// `cosid_runtime_close` first (ignoring its errors; close explicitly to see them). NULL is fine.
///
/// After this call `rt` is invalid. Generator handles from `cosid_generator_get` stay valid and
/// return `COSID_ERR_CLOSED`; free them too.
///
/// Do not call it while another thread still uses `rt`. It may be called from inside this
/// runtime's own event callback, on any thread (see `cosid_event_callback`). If the runtime was
/// not closed, the callback is called once more, nested inside this call, with the final
/// `COSID_EVENT_SLOT_RELEASED`; `rt` is already invalid there (pass it to no cosid function). The
/// callback is never called after this returns.
#[no_mangle]
pub extern "C" fn cosid_runtime_free(rt: *mut cosid_runtime) {
    const F: &str = "cosid_runtime_free";
    guard_void(F, || {
        if rt.is_null() || handle(F, "rt", rt.cast_const()).is_err() {
            // NULL, or not a live runtime: freeing it would corrupt memory. Leave it (the detail
            // says why).
            return;
        }
        // SAFETY: `rt` is a live handle made by `Box::into_raw` in `cosid_runtime_new`; the
        // caller gives up its ownership with this call.
        let boxed = unsafe { Box::from_raw(rt) };
        let events = boxed.events.clone();
        // The handle's tag is cleared first, then the runtime drops: without a close before, that
        // is the ordered shutdown, whose release event reaches the callback (which the header
        // tells not to use `rt` there; a call that does is most likely refused by the tag).
        drop(boxed);
        // Nothing reaches the callback after this returns, even from a keeper step that called
        // it and is still running (this very free may run inside that callback).
        events.clear();
    })
}

/// Stores the runtime's counters and current window in `*out`.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT`. Works on a closed runtime (the counters are then exact).
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_runtime_stats(
    rt: *const cosid_runtime,
    out: *mut cosid_stats,
) -> cosid_status {
    const F: &str = "cosid_runtime_stats";
    guard(F, || {
        let h = handle(F, "rt", rt)?;
        out_value(F, out, || {
            // The core's fields one for one (`the_c_stats_carry_exactly_the_core_fields` fails
            // when the core's table and this struct part).
            let s = h.rt.stats();
            Ok(cosid_stats {
                ids_issued: s.ids_issued,
                waits: s.waits,
                renewals: s.renewals,
                renewal_failures: s.renewal_failures,
                acquisitions: s.acquisitions,
                slots_lost: s.slots_lost,
                clock_skew_events: s.clock_skew_events,
                slot: s.slot,
                bound: s.bound,
                floor_ms: s.floor_ms,
                ceiling_ms: s.ceiling_ms,
            })
        })
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::status::last_error;
    use std::ffi::CString;
    use std::ptr;

    /// The members of `struct NAME` in include/cosid.h, in order (cbindgen writes one member
    /// per line: `type name;`).
    pub(crate) fn header_members(name: &str) -> Vec<&'static str> {
        let header = include_str!("../../include/cosid.h");
        let body = header
            .split(&format!("typedef struct {name} {{"))
            .nth(1)
            .and_then(|b| b.split('}').next())
            .unwrap_or_else(|| panic!("include/cosid.h defines struct {name}"));
        body.lines()
            .map(str::trim)
            .filter(|l| l.ends_with(';'))
            .filter_map(|l| l.trim_end_matches(';').rsplit([' ', '*']).next())
            .collect()
    }

    /// A runtime on a private in-memory store.
    pub(crate) fn memory_runtime(name: &str) -> *mut cosid_runtime {
        let cfg = CString::new(format!(
            "cosid:\n  namespace: ffi\n  machine:\n    lease:\n      store: 'memory:{name}'\n      bits: 3\n"
        ))
        .unwrap();
        let mut rt = ptr::null_mut();
        assert_eq!(
            cosid_runtime_new(cfg.as_ptr(), &mut rt),
            cosid_status::COSID_OK,
            "{}",
            last_error()
        );
        assert!(!rt.is_null());
        rt
    }

    #[test]
    fn issues_increasing_ids_then_closes_in_order() {
        let rt = memory_runtime("ffi-rt1");
        let (mut a, mut b) = (0u64, 0u64);
        assert_eq!(cosid_next(rt, &mut a), cosid_status::COSID_OK);
        assert_eq!(cosid_next(rt, &mut b), cosid_status::COSID_OK);
        assert!(b > a);
        let mut batch = vec![0u64; 10_000];
        assert_eq!(
            cosid_next_batch(rt, batch.as_mut_ptr(), batch.len()),
            cosid_status::COSID_OK
        );
        assert!(batch[0] > b && batch.windows(2).all(|w| w[0] < w[1]));
        let mut stats = cosid_stats::default();
        assert_eq!(cosid_runtime_stats(rt, &mut stats), cosid_status::COSID_OK);
        assert!(stats.bound && stats.acquisitions == 1 && stats.ceiling_ms > stats.floor_ms);
        assert_eq!(cosid_runtime_close(rt), cosid_status::COSID_OK);
        assert_eq!(cosid_runtime_close(rt), cosid_status::COSID_ERR_CLOSED);
        assert!(last_error().starts_with("cosid_runtime_close: "));
        let mut c = 7u64;
        assert_eq!(cosid_next(rt, &mut c), cosid_status::COSID_ERR_CLOSED);
        assert_eq!(c, 7, "not written on failure");
        assert_eq!(
            cosid_next_batch(rt, batch.as_mut_ptr(), 1),
            cosid_status::COSID_ERR_CLOSED
        );
        assert_eq!(cosid_runtime_stats(rt, &mut stats), cosid_status::COSID_OK);
        assert_eq!(stats.ids_issued, 10_002);
        assert!(!stats.bound);
        cosid_runtime_free(rt);
        cosid_runtime_free(ptr::null_mut());
    }

    #[test]
    fn null_and_misaligned_pointers_are_refused() {
        let rt = memory_runtime("ffi-rt2");
        let mut id = 0u64;
        assert_eq!(
            cosid_next(ptr::null(), &mut id),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        assert_eq!(last_error(), "cosid_next: rt is NULL; pass a valid pointer");
        assert_eq!(
            cosid_next(rt, ptr::null_mut()),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            cosid_runtime_new(ptr::null(), ptr::null_mut()),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            cosid_next_batch(rt, ptr::null_mut(), 4),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            cosid_next_batch(rt, ptr::null_mut(), 0),
            cosid_status::COSID_OK
        );
        let mut words = [0u64; 3];
        let odd = (words.as_mut_ptr() as *mut u8).wrapping_add(4) as *mut u64;
        assert_eq!(
            cosid_next(rt, odd),
            cosid_status::COSID_ERR_INVALID_ARGUMENT
        );
        assert_eq!(words, [0; 3]);
        assert_eq!(
            cosid_runtime_stats(rt, ptr::null_mut()),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            cosid_runtime_close(ptr::null_mut()),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        // Something that is not a runtime is refused, not dereferenced as one.
        let fake = [0u64; 8];
        assert_eq!(
            cosid_next(fake.as_ptr().cast(), &mut id),
            cosid_status::COSID_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("does not point to a live cosid_runtime"));
        cosid_runtime_free(rt);
    }

    #[test]
    fn malformed_configs_name_the_key() {
        let mut rt = ptr::null_mut();
        let bad = CString::new("cosid: {machine: {lease: {tll: 3s}}}").unwrap();
        assert_eq!(
            cosid_runtime_new(bad.as_ptr(), &mut rt),
            cosid_status::COSID_ERR_CONFIG
        );
        assert!(rt.is_null(), "not written on failure");
        assert!(last_error().contains("tll"), "{}", last_error());
        let not_utf8 = b"cosid: {namespace: \xff}\0";
        assert_eq!(
            cosid_runtime_new(not_utf8.as_ptr().cast(), &mut rt),
            cosid_status::COSID_ERR_CONFIG
        );
        assert!(last_error().contains("UTF-8"));
        let yaml = CString::new("cosid: [unclosed").unwrap();
        assert_eq!(
            cosid_runtime_new(yaml.as_ptr(), &mut rt),
            cosid_status::COSID_ERR_CONFIG
        );
        assert!(rt.is_null());
    }

    #[test]
    fn an_unreachable_store_is_a_clear_error() {
        let mut rt = ptr::null_mut();
        let cfg = CString::new(
            "cosid:\n  machine:\n    lease:\n      store: redis://127.0.0.1:1\n      acquire-timeout: 200ms\n",
        )
        .unwrap();
        let s = cosid_runtime_new(cfg.as_ptr(), &mut rt);
        assert!(rt.is_null());
        // Whether cosid-core has its redis store depends on feature unification across the
        // whole build (cosid-ffi's own `redis` feature, or another crate's), so accept either
        // honest answer: no such store in this build, or the store is unreachable.
        if s == cosid_status::COSID_ERR_CONFIG {
            assert!(last_error().contains("'redis' feature"), "{}", last_error());
        } else {
            assert!(
                matches!(
                    s,
                    cosid_status::COSID_ERR_STORE | cosid_status::COSID_ERR_TIMEOUT
                ),
                "{s:?}: {}",
                last_error()
            );
            assert!(last_error().contains("127.0.0.1:1"), "{}", last_error());
        }
        let cfg = CString::new(
            "cosid:\n  machine:\n    lease:\n      store: sqlite:///dev/null/cosid/slots.db\n      acquire-timeout: 200ms\n",
        )
        .unwrap();
        assert_eq!(
            cosid_runtime_new(cfg.as_ptr(), &mut rt),
            cosid_status::COSID_ERR_STORE
        );
        assert!(last_error().contains("/dev/null/cosid/slots.db"));
    }

    #[test]
    fn shared_between_threads() {
        let rt = memory_runtime("ffi-rt3");
        let addr = rt as usize;
        let ids: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(move || {
                        let rt = addr as *const cosid_runtime;
                        let mut v = vec![0u64; 20_000];
                        for x in v.iter_mut().take(10_000) {
                            assert_eq!(cosid_next(rt, x), cosid_status::COSID_OK);
                        }
                        assert_eq!(
                            cosid_next_batch(rt, v[10_000..].as_mut_ptr(), 10_000),
                            cosid_status::COSID_OK
                        );
                        v
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 80_000);
        cosid_runtime_free(rt);
    }

    #[test]
    fn the_c_stats_carry_exactly_the_core_fields() {
        use cosid_core::lease::stats::STATS_FIELDS;
        let names: Vec<_> = STATS_FIELDS.iter().map(|f| f.name).collect();
        assert_eq!(
            header_members("cosid_stats"),
            names,
            "include/cosid.h is stale"
        );
        // Each member holds the core's value of the same name.
        let rt = memory_runtime("ffi-rt5");
        let mut id = 0;
        assert_eq!(cosid_next(rt, &mut id), cosid_status::COSID_OK);
        let mut c = cosid_stats::default();
        assert_eq!(cosid_runtime_stats(rt, &mut c), cosid_status::COSID_OK);
        // SAFETY: a live handle.
        let core = unsafe { &*rt }.rt.stats();
        let c_fields = [
            c.ids_issued as i128,
            c.waits.into(),
            c.renewals.into(),
            c.renewal_failures.into(),
            c.acquisitions.into(),
            c.slots_lost.into(),
            c.clock_skew_events.into(),
            c.slot.into(),
            i128::from(c.bound),
            c.floor_ms.into(),
            c.ceiling_ms.into(),
        ];
        use cosid_core::lease::stats::StatsValue;
        let core_fields: Vec<i128> = core
            .fields()
            .iter()
            .map(|(_, v)| match *v {
                StatsValue::U32(v) => v.into(),
                StatsValue::U64(v) => v.into(),
                StatsValue::I64(v) => v.into(),
                StatsValue::Bool(v) => v.into(),
            })
            .collect();
        assert_eq!(c_fields.to_vec(), core_fields);
        assert!(c.ids_issued == 1 && c.bound && c.floor_ms < c.ceiling_ms);
        cosid_runtime_free(rt);
    }

    #[test]
    fn free_without_close_releases_the_slot() {
        let rt = memory_runtime("ffi-rt4");
        // Hold the in-memory store so it outlives the runtime.
        let store = cosid_core::store::open("memory:ffi-rt4").unwrap();
        let mut stats = cosid_stats::default();
        assert_eq!(cosid_runtime_stats(rt, &mut stats), cosid_status::COSID_OK);
        let mut id = 0;
        assert_eq!(cosid_next(rt, &mut id), cosid_status::COSID_OK);
        cosid_runtime_free(rt);
        let (_, rec) = store.read_slot("ffi", stats.slot).unwrap();
        assert_eq!(rec.unwrap().value.owner, None, "the slot was released");
    }
}
