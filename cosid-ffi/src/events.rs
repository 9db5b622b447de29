//! Event callbacks: the keeper's events (slot acquired, lost, renewal failed, …) delivered to a C
//! function pointer with the caller's `user_data`.

use crate::boundary::{guard, handle};
use crate::runtime::cosid_runtime;
use crate::status::{cosid_status, fail_with};
use cosid_core::Event;
use std::cell::Cell;
use std::ffi::{c_void, CString};
use std::os::raw::c_char;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// What happened. Values are explicit and never reused.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum cosid_event_kind {
    /// An event this version of the header has no name for (from a newer library); `message`
    /// describes it.
    COSID_EVENT_OTHER = 0,
    /// A slot was acquired and bound: ids are issued in `(floor_ms, ceiling_ms]` on `slot`
    /// (`fence` is the ownership's fence). Also after a lost lease was replaced.
    COSID_EVENT_SLOT_ACQUIRED = 1,
    /// The lease on `slot` was lost (taken over after expiry, or the store lost it); `detail`
    /// says why. Ids fail with `COSID_ERR_SLOT_LOST` until a new slot is acquired.
    COSID_EVENT_SLOT_LOST = 2,
    /// Another live process runs with the same owner key (`detail`) and holds `slot`; this
    /// runtime took another slot. Fix the deployment's owner keys.
    COSID_EVENT_DUPLICATE_OWNER_KEY = 3,
    /// The store's clock and this host's differ by `skew_ms` (positive: this host is ahead),
    /// more than half the namespace's tolerance.
    COSID_EVENT_CLOCK_SKEW = 4,
    /// Renewing `slot` failed (`attempt` consecutive failures; `detail` is the store's error).
    /// Retried with back-off; ids keep being issued up to the window's ceiling meanwhile.
    COSID_EVENT_RENEWAL_FAILED = 5,
    /// The store has no record of `slot` any more (it restarted empty). Later windows start above
    /// every ceiling granted before, so no id repeats.
    COSID_EVENT_STORE_RESET = 6,
    /// Acquiring a slot failed (`detail` is the error); retried with back-off.
    COSID_EVENT_ACQUIRE_FAILED = 7,
    /// `slot` was released on shutdown; its next holder starts above `floor_ms`.
    COSID_EVENT_SLOT_RELEASED = 8,
}

/// One event, passed by pointer to the callback. The pointer and the strings in it are valid
/// only during the callback: copy what you keep. Fields that do not apply to the `kind` are 0
/// (strings: `""`, never NULL).
#[repr(C)]
#[derive(Debug)]
pub struct cosid_event {
    /// What happened.
    pub kind: cosid_event_kind,
    /// The slot concerned (every kind but `CLOCK_SKEW` and `ACQUIRE_FAILED`).
    pub slot: u32,
    /// `RENEWAL_FAILED`: consecutive failures so far.
    pub attempt: u32,
    /// `SLOT_ACQUIRED`: the fence of the new ownership.
    pub fence: u64,
    /// `SLOT_ACQUIRED`: the window's floor (excluded), ms since the Unix epoch.
    /// `SLOT_RELEASED`: the floor the slot's next holder gets.
    pub floor_ms: i64,
    /// `SLOT_ACQUIRED`: the window's ceiling (included), ms since the Unix epoch.
    pub ceiling_ms: i64,
    /// `CLOCK_SKEW`: this host's clock minus the store's, ms.
    pub skew_ms: i64,
    /// `SLOT_LOST`: why; `RENEWAL_FAILED`, `ACQUIRE_FAILED`: the error;
    /// `DUPLICATE_OWNER_KEY`: the owner key. NUL-terminated UTF-8.
    pub detail: *const c_char,
    /// The whole event as one English line, e.g. `"slot 3 lost: now held by …"`.
    pub message: *const c_char,
}

/// An event callback: `event` is valid only during the call; `user_data` is the pointer given
/// to `cosid_runtime_set_event_callback`.
///
/// Called on the runtime's keeper thread (named `cosid-keeper`), or on the thread that calls
/// `cosid_runtime_close`/`cosid_runtime_free` for the final `COSID_EVENT_SLOT_RELEASED`. Never
/// called twice at once for one runtime. Keep it quick: the keeper renews the lease on the same
/// thread. It must not unwind (C++ exceptions, `longjmp`) out of the call, must not call
/// `cosid_runtime_close` on its own runtime (that returns `COSID_ERR_INVALID_ARGUMENT`), and
/// should not call `cosid_next` on its own runtime (a wait for the keeper would wait for itself).
pub type cosid_event_callback =
    Option<unsafe extern "C" fn(event: *const cosid_event, user_data: *mut c_void)>;

struct Registered {
    callback: unsafe extern "C" fn(*const cosid_event, *mut c_void),
    user_data: *mut c_void,
}

// SAFETY: the header's contract for `cosid_runtime_set_event_callback` is that `user_data` may
// be used from the keeper's thread; the pointer itself is only passed back to the callback.
unsafe impl Send for Registered {}

/// A runtime's callback slot. Lives in an `Arc` shared by the handle and the listener the core
/// calls.
#[derive(Default)]
pub(crate) struct EventSlot {
    current: Mutex<Option<Registered>>,
    disabled: AtomicBool,
    subscribed: OnceLock<()>,
}

thread_local! {
    /// The `EventSlot` whose callback this thread is running now (0: none).
    static INSIDE: Cell<usize> = const { Cell::new(0) };
}

impl EventSlot {
    fn id(&self) -> usize {
        self as *const EventSlot as usize
    }

    /// Whether this thread is running this slot's callback now.
    pub(crate) fn is_inside_callback(&self) -> bool {
        INSIDE.with(|c| c.get()) == self.id()
    }

    /// Refuses a call that would deadlock when made from inside this slot's callback.
    pub(crate) fn refuse_inside_callback(
        &self,
        function: &'static str,
    ) -> Result<(), cosid_status> {
        if self.is_inside_callback() {
            return Err(fail_with(
                function,
                cosid_status::COSID_ERR_INVALID_ARGUMENT,
                "called from inside the runtime's own event callback, which runs on the keeper's \
                 thread while the keeper waits for it; call it from another thread (or call \
                 cosid_runtime_free, which finishes in the background)",
            ));
        }
        Ok(())
    }

    /// Stops every later delivery.
    pub(crate) fn disable(&self) {
        self.disabled.store(true, Ordering::Release);
    }

    fn deliver(&self, event: &Event) {
        if self.disabled.load(Ordering::Acquire) || self.is_inside_callback() {
            // An event raised by a call the callback made on its own runtime is dropped rather
            // than delivered re-entrantly (the callback's lock is held by this very thread).
            return;
        }
        let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let Some(reg) = current.as_ref() else {
            return;
        };
        let (c_event, _strings) = convert(event);
        let previous = INSIDE.with(|c| c.replace(self.id()));
        // SAFETY: the callback and user_data were registered together by the caller, who
        // promised they stay valid until replaced or the runtime is freed; the event and its
        // strings live until after the call.
        unsafe { (reg.callback)(&c_event, reg.user_data) };
        INSIDE.with(|c| c.set(previous));
    }
}

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

/// The C view of `event`, with the strings it points into (keep them alive while it is used).
fn convert(event: &Event) -> (cosid_event, [CString; 2]) {
    let mut e = cosid_event {
        kind: cosid_event_kind::COSID_EVENT_OTHER,
        slot: 0,
        attempt: 0,
        fence: 0,
        floor_ms: 0,
        ceiling_ms: 0,
        skew_ms: 0,
        detail: std::ptr::null(),
        message: std::ptr::null(),
    };
    let mut detail = "";
    match event {
        Event::SlotAcquired {
            slot,
            fence,
            floor,
            ceiling,
        } => {
            e.kind = cosid_event_kind::COSID_EVENT_SLOT_ACQUIRED;
            (e.slot, e.fence, e.floor_ms, e.ceiling_ms) = (*slot, *fence, *floor, *ceiling);
        }
        Event::SlotLost { slot, reason } => {
            e.kind = cosid_event_kind::COSID_EVENT_SLOT_LOST;
            e.slot = *slot;
            detail = reason;
        }
        Event::DuplicateOwnerKey { slot, key } => {
            e.kind = cosid_event_kind::COSID_EVENT_DUPLICATE_OWNER_KEY;
            e.slot = *slot;
            detail = key;
        }
        Event::ClockSkew { skew_ms } => {
            e.kind = cosid_event_kind::COSID_EVENT_CLOCK_SKEW;
            e.skew_ms = *skew_ms;
        }
        Event::RenewalFailed {
            slot,
            attempt,
            error,
        } => {
            e.kind = cosid_event_kind::COSID_EVENT_RENEWAL_FAILED;
            (e.slot, e.attempt) = (*slot, *attempt);
            detail = error;
        }
        Event::StoreReset { slot } => {
            e.kind = cosid_event_kind::COSID_EVENT_STORE_RESET;
            e.slot = *slot;
        }
        Event::AcquireFailed { error } => {
            e.kind = cosid_event_kind::COSID_EVENT_ACQUIRE_FAILED;
            detail = error;
        }
        Event::SlotReleased { slot, next_floor } => {
            e.kind = cosid_event_kind::COSID_EVENT_SLOT_RELEASED;
            (e.slot, e.floor_ms) = (*slot, *next_floor);
        }
        // A kind added to the core later reaches C as OTHER with its message.
        _ => {}
    }
    let strings = [c_string(detail), c_string(&event.to_string())];
    e.detail = strings[0].as_ptr();
    e.message = strings[1].as_ptr();
    (e, strings)
}

/// Sets (or, with `callback` NULL, removes) the function called with the runtime's events,
/// replacing the previous one. `user_data` is passed back to every call unchanged.
///
/// The callback runs on the keeper's thread (see `cosid_event_callback` for what it may do).
/// When this function returns, the previous callback is neither running nor called again, so its
/// `user_data` may be released. The last callback is called for the final
/// `COSID_EVENT_SLOT_RELEASED` during `cosid_runtime_close` (or `cosid_runtime_free` without
/// close) and never after `cosid_runtime_free` returns. Events raised before the callback was set
/// (the first `COSID_EVENT_SLOT_ACQUIRED`, during `cosid_runtime_new`) are not replayed: read
/// `cosid_runtime_stats` for the current slot.
///
/// `user_data` must be usable from the keeper's thread for as long as the callback is set.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT` (`rt`); `COSID_ERR_INVALID_ARGUMENT` when called from inside
/// this runtime's own callback.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_runtime_set_event_callback(
    rt: *mut cosid_runtime,
    callback: cosid_event_callback,
    user_data: *mut c_void,
) -> cosid_status {
    const F: &str = "cosid_runtime_set_event_callback";
    guard(F, || {
        let h = handle(F, "rt", rt.cast_const())?;
        h.events.refuse_inside_callback(F)?;
        let slot = h.events.clone();
        h.events.subscribed.get_or_init(|| {
            let listener = slot.clone();
            h.rt.subscribe(move |e| listener.deliver(e));
        });
        let mut current = slot.current.lock().unwrap_or_else(|p| p.into_inner());
        *current = callback.map(|callback| Registered {
            callback,
            user_data,
        });
        Ok(())
    })
}

/// The event kind's stable snake_case name (`"slot_acquired"`, `"slot_lost"`, …, `"other"`),
/// `"unknown"` for a value that is no kind. A static string; never NULL.
///
/// `kind` is a `cosid_event_kind` value (declared as `uint32_t` so any value is safe).
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_event_kind_name(kind: u32) -> *const c_char {
    let name: &'static str = match kind {
        0 => "other\0",
        1 => "slot_acquired\0",
        2 => "slot_lost\0",
        3 => "duplicate_owner_key\0",
        4 => "clock_skew\0",
        5 => "renewal_failed\0",
        6 => "store_reset\0",
        7 => "acquire_failed\0",
        8 => "slot_released\0",
        _ => "unknown\0",
    };
    name.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::tests::memory_runtime;
    use crate::runtime::{cosid_runtime_close, cosid_runtime_free};
    use crate::status::last_error;
    use std::ffi::CStr;

    /// kind, slot, floor_ms, detail, message
    type Record = (cosid_event_kind, u32, i64, String, String);

    #[derive(Default)]
    struct Seen {
        events: Mutex<Vec<Record>>,
    }

    unsafe extern "C" fn record(event: *const cosid_event, user_data: *mut c_void) {
        // SAFETY: the library passes a valid event and our `Seen`.
        let (e, seen) = unsafe { (&*event, &*(user_data as *const Seen)) };
        // SAFETY: the strings are valid NUL-terminated during the call.
        let (detail, message) = unsafe {
            (
                CStr::from_ptr(e.detail).to_string_lossy().into_owned(),
                CStr::from_ptr(e.message).to_string_lossy().into_owned(),
            )
        };
        seen.events
            .lock()
            .unwrap()
            .push((e.kind, e.slot, e.floor_ms, detail, message));
    }

    #[test]
    fn the_release_on_close_reaches_the_callback() {
        let rt = memory_runtime("ffi-ev1");
        let seen = Seen::default();
        let user = &seen as *const Seen as *mut c_void;
        assert_eq!(
            cosid_runtime_set_event_callback(rt, Some(record), user),
            cosid_status::COSID_OK
        );
        let mut id = 0;
        assert_eq!(crate::cosid_next(rt, &mut id), cosid_status::COSID_OK);
        assert_eq!(cosid_runtime_close(rt), cosid_status::COSID_OK);
        let events = seen.events.lock().unwrap().clone();
        let released = events
            .iter()
            .find(|e| e.0 == cosid_event_kind::COSID_EVENT_SLOT_RELEASED)
            .expect("released");
        assert!(released.2 > 0 && released.3.is_empty(), "{released:?}");
        assert!(released.4.contains("released with next floor"));
        cosid_runtime_free(rt);
    }

    #[test]
    fn a_removed_callback_is_not_called() {
        let rt = memory_runtime("ffi-ev2");
        let seen = Seen::default();
        let user = &seen as *const Seen as *mut c_void;
        assert_eq!(
            cosid_runtime_set_event_callback(rt, Some(record), user),
            cosid_status::COSID_OK
        );
        assert_eq!(
            cosid_runtime_set_event_callback(rt, None, std::ptr::null_mut()),
            cosid_status::COSID_OK
        );
        cosid_runtime_free(rt);
        assert!(seen.events.lock().unwrap().is_empty());
        assert_eq!(
            cosid_runtime_set_event_callback(std::ptr::null_mut(), None, std::ptr::null_mut()),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
    }

    unsafe extern "C" fn close_own_runtime(event: *const cosid_event, user_data: *mut c_void) {
        let _ = event;
        let rt = user_data as *mut cosid_runtime;
        let s = cosid_runtime_close(rt);
        // Record what close said where the test can read it.
        RESULT.lock().unwrap().push((s, last_error()));
    }

    static RESULT: Mutex<Vec<(cosid_status, String)>> = Mutex::new(Vec::new());

    #[test]
    fn closing_from_the_callback_is_refused() {
        let rt = memory_runtime("ffi-ev3");
        assert_eq!(
            cosid_runtime_set_event_callback(rt, Some(close_own_runtime), rt.cast()),
            cosid_status::COSID_OK
        );
        // The release event is delivered on this thread, inside close.
        assert_eq!(cosid_runtime_close(rt), cosid_status::COSID_OK);
        let got = RESULT.lock().unwrap().clone();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, cosid_status::COSID_ERR_INVALID_ARGUMENT);
        assert!(got[0].1.contains("own event callback"), "{}", got[0].1);
        cosid_runtime_free(rt);
    }

    unsafe extern "C" fn free_on_release(event: *const cosid_event, user_data: *mut c_void) {
        // SAFETY: a valid event during the call.
        if unsafe { (*event).kind } == cosid_event_kind::COSID_EVENT_SLOT_RELEASED {
            cosid_runtime_free(user_data as *mut cosid_runtime);
        }
    }

    #[test]
    fn freeing_from_the_callback_during_close_is_deferred_to_the_close() {
        // Hold the store so the release can be checked after the runtime is gone.
        let store = cosid_core::store::open("memory:ffi-ev4").unwrap();
        let rt = memory_runtime("ffi-ev4");
        let mut id = 0;
        assert_eq!(crate::cosid_next(rt, &mut id), cosid_status::COSID_OK);
        assert_eq!(
            cosid_runtime_set_event_callback(rt, Some(free_on_release), rt.cast()),
            cosid_status::COSID_OK
        );
        // The callback frees `rt` inside this close; close frees it when it is done with it.
        assert_eq!(cosid_runtime_close(rt), cosid_status::COSID_OK);
        let snap = store.snapshot("ffi").unwrap();
        assert!(snap.slots.slots.iter().all(|r| r.value.owner.is_none()));
    }

    #[test]
    fn kind_names_are_the_cores() {
        let name = |k: u32| {
            // SAFETY: a static NUL-terminated string.
            unsafe { CStr::from_ptr(cosid_event_kind_name(k)) }
                .to_str()
                .unwrap()
        };
        let core = [
            Event::SlotAcquired {
                slot: 1,
                fence: 2,
                floor: 3,
                ceiling: 4,
            },
            Event::SlotLost {
                slot: 1,
                reason: "r".into(),
            },
            Event::DuplicateOwnerKey {
                slot: 1,
                key: "k".into(),
            },
            Event::ClockSkew { skew_ms: 5 },
            Event::RenewalFailed {
                slot: 1,
                attempt: 2,
                error: "e".into(),
            },
            Event::StoreReset { slot: 1 },
            Event::AcquireFailed { error: "e".into() },
            Event::SlotReleased {
                slot: 1,
                next_floor: 9,
            },
        ];
        for e in &core {
            let (c, strings) = convert(e);
            assert_ne!(c.kind, cosid_event_kind::COSID_EVENT_OTHER, "{e:?}");
            assert_eq!(name(c.kind as u32), e.name());
            // SAFETY: points into `strings`, alive here.
            let msg = unsafe { CStr::from_ptr(c.message) }.to_str().unwrap();
            assert_eq!(msg, e.to_string());
            drop(strings);
        }
        assert_eq!(name(0), "other");
        assert_eq!(name(99), "unknown");
    }
}
