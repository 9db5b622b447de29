//! Event callbacks: the keeper's events (slot acquired, lost, renewal failed, …) delivered to a C
//! function pointer with the caller's `user_data`.

use crate::boundary::{guard, handle};
use crate::runtime::cosid_runtime;
use crate::status::cosid_status;
use cosid_core::Event;
use parking_lot::ReentrantMutex;
use std::cell::Cell;
use std::ffi::{c_void, CString};
use std::os::raw::c_char;
use std::sync::{Arc, OnceLock};

/// What happened. Values are explicit and never reused: a kind's value is its place in the
/// core's vocabulary (`cosid_core::lease::events::EVENT_KINDS`) plus one, its name
/// (`cosid_event_kind_name`) the core's kind name.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum cosid_event_kind {
    /// An event this version of the header has no name for (from a newer library); `message`
    /// describes it.
    COSID_EVENT_OTHER = 0,
    /// A slot was acquired and bound: ids are issued in `(floor_ms, ceiling_ms]` on `slot`
    /// (`fence` is the ownership's fence). Also after a lost lease was replaced.
    COSID_EVENT_SLOT_ACQUIRED = 1,
    /// The lease on `slot` was lost (taken over after expiry, or the store lost it); `reason`
    /// says why. Ids fail with `COSID_ERR_SLOT_LOST` until a new slot is acquired.
    COSID_EVENT_SLOT_LOST = 2,
    /// Another live process runs with the same owner key (`key`) and holds `slot`; this
    /// runtime took another slot. Fix the deployment's owner keys.
    COSID_EVENT_DUPLICATE_OWNER_KEY = 3,
    /// The store's clock and this host's differ by `skew_ms` (positive: this host is ahead),
    /// more than half the namespace's tolerance.
    COSID_EVENT_CLOCK_SKEW = 4,
    /// Renewing `slot` failed (`attempt` consecutive failures; `error` is the store's error).
    /// Retried with back-off; ids keep being issued up to the window's ceiling meanwhile.
    COSID_EVENT_RENEWAL_FAILED = 5,
    /// The store has no record of `slot` any more (it restarted empty). Later windows start above
    /// every ceiling granted before, so no id repeats.
    COSID_EVENT_STORE_RESET = 6,
    /// Acquiring a slot failed (`error` says why); retried with back-off.
    COSID_EVENT_ACQUIRE_FAILED = 7,
    /// `slot` was released on shutdown; its next holder starts above `next_floor_ms`.
    COSID_EVENT_SLOT_RELEASED = 8,
    /// The runtime's start waits for `slot`'s window, which opens at `floor_ms` (later than
    /// now): the namespace's not-before, or the restart guard keeping it above every window a
    /// store that lost data may have granted. `reason` says why and how to avoid it where it can
    /// be.
    COSID_EVENT_WINDOW_AHEAD = 9,
    /// The runtime's start cannot reach its store, or the store fails it, with an error that
    /// may go away (`error`; a server starting, a network coming back): it tries again with
    /// back-off (`attempt` consecutive failures) and has waited `waited_ms` of at most
    /// `timeout_ms` (the acquire timeout). An error that cannot go away (a wrong password, a
    /// database that does not exist, TLS on one side only, a host name that does not resolve)
    /// fails `cosid_runtime_new` at once instead.
    COSID_EVENT_STORE_UNAVAILABLE = 10,
}

/// The kinds in the order of the core's `EVENT_KINDS` (value = index + 1).
const KINDS: [cosid_event_kind; 10] = [
    cosid_event_kind::COSID_EVENT_SLOT_ACQUIRED,
    cosid_event_kind::COSID_EVENT_SLOT_LOST,
    cosid_event_kind::COSID_EVENT_DUPLICATE_OWNER_KEY,
    cosid_event_kind::COSID_EVENT_CLOCK_SKEW,
    cosid_event_kind::COSID_EVENT_RENEWAL_FAILED,
    cosid_event_kind::COSID_EVENT_STORE_RESET,
    cosid_event_kind::COSID_EVENT_ACQUIRE_FAILED,
    cosid_event_kind::COSID_EVENT_SLOT_RELEASED,
    cosid_event_kind::COSID_EVENT_WINDOW_AHEAD,
    cosid_event_kind::COSID_EVENT_STORE_UNAVAILABLE,
];

/// One event, passed by pointer to the callback. The pointer and the strings in it are valid
/// only during the callback: copy what you keep. The fields are the core's event vocabulary
/// (docs/c-api.md, "Events"), the same names as in Python and Node; those that do not belong to
/// the `kind` are 0 (strings: `""`, never NULL).
#[repr(C)]
#[derive(Debug)]
pub struct cosid_event {
    /// What happened.
    pub kind: cosid_event_kind,
    /// The slot concerned (every kind but `CLOCK_SKEW`, `ACQUIRE_FAILED` and
    /// `STORE_UNAVAILABLE`).
    pub slot: u32,
    /// `SLOT_ACQUIRED`: the fence of the new ownership (grows with every new owner of the slot).
    pub fence: u64,
    /// `SLOT_ACQUIRED`, `WINDOW_AHEAD`: the window's lower bound (excluded), ms since the Unix
    /// epoch.
    pub floor_ms: i64,
    /// `SLOT_ACQUIRED`: the window's upper bound (included), ms since the Unix epoch.
    pub ceiling_ms: i64,
    /// `SLOT_RELEASED`: the floor the slot's next holder gets, ms since the Unix epoch.
    pub next_floor_ms: i64,
    /// `CLOCK_SKEW`: this host's clock minus the store's, ms (positive: this host is ahead).
    pub skew_ms: i64,
    /// `RENEWAL_FAILED`, `STORE_UNAVAILABLE`: consecutive failures so far (1 the first time).
    pub attempt: u32,
    /// `SLOT_LOST`: why the lease was lost; `WINDOW_AHEAD`: why the window opens later than
    /// now. NUL-terminated UTF-8.
    pub reason: *const c_char,
    /// `RENEWAL_FAILED`, `ACQUIRE_FAILED`, `STORE_UNAVAILABLE`: the error. NUL-terminated UTF-8.
    pub error: *const c_char,
    /// `DUPLICATE_OWNER_KEY`: the owner key that two live runtimes hold. NUL-terminated UTF-8.
    pub key: *const c_char,
    /// `STORE_UNAVAILABLE`: how long the start has waited so far, ms.
    pub waited_ms: i64,
    /// `STORE_UNAVAILABLE`: how long the start waits at most (the acquire timeout), ms.
    pub timeout_ms: i64,
    /// The whole event as one English line, e.g. `"slot 3 lost: now held by …"`.
    pub message: *const c_char,
}

/// An event callback: `event` is valid only during the call; `user_data` is the pointer given
/// to `cosid_runtime_set_event_callback`.
///
/// Called on the runtime's keeper thread (named `cosid-keeper`), or on the thread that calls
/// `cosid_runtime_close`/`cosid_runtime_free` for the final `COSID_EVENT_SLOT_RELEASED`. Calls
/// on two threads never overlap for one runtime.
///
/// The callback may call any cosid function, on its own runtime too: `cosid_next`,
/// `cosid_runtime_stats`, `cosid_generator_get`, `cosid_runtime_set_event_callback` (the new
/// callback gets the next event), `cosid_runtime_close` and `cosid_runtime_free`. A close or
/// free of its own runtime releases the slot there and then, on the callback's thread, and the
/// final `COSID_EVENT_SLOT_RELEASED` reaches the callback *nested*, from inside that call, before
/// it returns: do not hold a lock of your own across it that the nested call would take again.
/// After `cosid_runtime_free` the handle is gone, and no event reaches the callback once the free
/// returns (not even one raised by the same step of the keeper).
///
/// Keep it quick: while it runs on the keeper's thread the keeper cannot renew the lease, so a
/// `cosid_next` that must wait for a renewal (the window's ceiling reached) fails after
/// `max-wait`. It must not wait for a thread that is inside `cosid_runtime_close`,
/// `cosid_runtime_free` or `cosid_runtime_set_event_callback` of the same runtime (each of those
/// waits for a callback running on another thread to return), and must not unwind (C++
/// exceptions, `longjmp`) out of the call.
pub type cosid_event_callback =
    Option<unsafe extern "C" fn(event: *const cosid_event, user_data: *mut c_void)>;

#[derive(Clone, Copy)]
struct Registered {
    callback: unsafe extern "C" fn(*const cosid_event, *mut c_void),
    user_data: *mut c_void,
}

// SAFETY: the header's contract for `cosid_runtime_set_event_callback` is that `user_data` may
// be used from the keeper's thread; the pointer itself is only passed back to the callback.
unsafe impl Send for Registered {}

/// A runtime's callback slot. Lives in an `Arc` shared by the handle and the listener the core
/// calls.
///
/// The lock is held while the callback runs: a thread that replaces the callback waits until a
/// call in progress on another thread has returned, and calls on two threads never overlap. It
/// is re-entrant, because the core runs listeners with none of its own locks held, so the
/// callback may call back into its runtime; the final `SLOT_RELEASED` of a close or free it
/// makes is delivered to it there, nested, on the same thread.
#[derive(Default)]
pub(crate) struct EventSlot {
    current: ReentrantMutex<Cell<Option<Registered>>>,
    subscribed: OnceLock<()>,
}

impl EventSlot {
    /// Sets (or with `None` removes) the callback; waits for a call in progress on another
    /// thread.
    fn set(&self, registered: Option<Registered>) {
        self.current.lock().set(registered);
    }

    /// Removes the callback: nothing reaches it once this returns (see [`EventSlot::set`]).
    pub(crate) fn clear(&self) {
        self.set(None);
    }

    /// A slot holding `callback` and subscribed: its listener goes to the runtime's builder,
    /// so the callback gets the events of the start too.
    pub(crate) fn before_start(
        callback: cosid_event_callback,
        user_data: *mut c_void,
    ) -> (Arc<EventSlot>, impl Fn(&Event) + Send + Sync + 'static) {
        let slot = Arc::new(EventSlot::default());
        slot.set(callback.map(|callback| Registered {
            callback,
            user_data,
        }));
        slot.subscribed.get_or_init(|| ());
        let listener = slot.clone();
        (slot, move |e: &Event| listener.deliver(e))
    }

    fn deliver(&self, event: &Event) {
        let current = self.current.lock();
        let Some(reg) = current.get() else {
            return;
        };
        let (c_event, _strings) = convert(event);
        // SAFETY: the callback and user_data were registered together by the caller, who
        // promised they stay valid until replaced or the runtime is freed; the event and its
        // strings live until after the call.
        unsafe { (reg.callback)(&c_event, reg.user_data) };
    }
}

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

/// The C view of `event`, with the strings it points into (keep them alive while it is used).
/// Filled from the core's `Event::fields`, so its names are the vocabulary's.
fn convert(event: &Event) -> (cosid_event, [CString; 4]) {
    use cosid_core::lease::events::{FieldValue, EVENT_KINDS};
    let mut e = cosid_event {
        kind: cosid_event_kind::COSID_EVENT_OTHER,
        slot: 0,
        fence: 0,
        floor_ms: 0,
        ceiling_ms: 0,
        next_floor_ms: 0,
        skew_ms: 0,
        attempt: 0,
        reason: std::ptr::null(),
        error: std::ptr::null(),
        key: std::ptr::null(),
        waited_ms: 0,
        timeout_ms: 0,
        message: std::ptr::null(),
    };
    // A kind added to the core later reaches C as OTHER with its message (a test fails first).
    if let Some(i) = EVENT_KINDS.iter().position(|k| k.name == event.kind_name()) {
        e.kind = KINDS
            .get(i)
            .copied()
            .unwrap_or(cosid_event_kind::COSID_EVENT_OTHER);
    }
    let (mut reason, mut error, mut key) = ("", "", "");
    for (name, value) in event.fields() {
        match (name, value) {
            ("slot", FieldValue::U32(v)) => e.slot = v,
            ("fence", FieldValue::U64(v)) => e.fence = v,
            ("floor_ms", FieldValue::I64(v)) => e.floor_ms = v,
            ("ceiling_ms", FieldValue::I64(v)) => e.ceiling_ms = v,
            ("next_floor_ms", FieldValue::I64(v)) => e.next_floor_ms = v,
            ("skew_ms", FieldValue::I64(v)) => e.skew_ms = v,
            ("attempt", FieldValue::U32(v)) => e.attempt = v,
            ("reason", FieldValue::Text(v)) => reason = v,
            ("error", FieldValue::Text(v)) => error = v,
            ("key", FieldValue::Text(v)) => key = v,
            ("waited_ms", FieldValue::I64(v)) => e.waited_ms = v,
            ("timeout_ms", FieldValue::I64(v)) => e.timeout_ms = v,
            // A field added to the core later: `message` still has it (a test fails first).
            _ => {}
        }
    }
    let strings = [
        c_string(reason),
        c_string(error),
        c_string(key),
        c_string(&event.to_string()),
    ];
    e.reason = strings[0].as_ptr();
    e.error = strings[1].as_ptr();
    e.key = strings[2].as_ptr();
    e.message = strings[3].as_ptr();
    (e, strings)
}

/// Sets (or, with `callback` NULL, removes) the function called with the runtime's events,
/// replacing the previous one. `user_data` is passed back to every call unchanged.
///
/// The callback runs on the keeper's thread (see `cosid_event_callback` for what it may do).
/// When this function returns, the previous callback is not called again, and it is not running
/// either (unless it is the caller: this function may be called from inside the callback, which
/// then runs on until it returns), so its `user_data` may be released. The last callback is
/// called for the final `COSID_EVENT_SLOT_RELEASED` during `cosid_runtime_close` (or
/// `cosid_runtime_free` without close) and never after `cosid_runtime_free` returns. Events
/// raised before the callback was set (the first `COSID_EVENT_SLOT_ACQUIRED`, during
/// `cosid_runtime_new`) are not replayed: read `cosid_runtime_stats` for the current slot.
///
/// `user_data` must be usable from the keeper's thread for as long as the callback is set.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT` (`rt`).
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
        h.events.subscribed.get_or_init(|| {
            let listener = h.events.clone();
            h.rt.subscribe(move |e| listener.deliver(e));
        });
        h.events.set(callback.map(|callback| Registered {
            callback,
            user_data,
        }));
        Ok(())
    })
}

/// The event kind's stable snake_case name (`"slot_acquired"`, `"slot_lost"`, …, `"other"`),
/// `"unknown"` for a value that is no kind. The names are the core's, the same as Python's
/// `Event.kind` and Node's `event.kind`. A static string; never NULL.
///
/// `kind` is a `cosid_event_kind` value (declared as `uint32_t` so any value is safe).
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_event_kind_name(kind: u32) -> *const c_char {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        use cosid_core::lease::events::EVENT_KINDS;
        let mut names = vec![c_string("other")];
        names.extend(
            EVENT_KINDS
                .iter()
                .take(KINDS.len())
                .map(|k| c_string(k.name)),
        );
        names
    });
    match names.get(kind as usize) {
        Some(name) => name.as_ptr(),
        None => c"unknown".as_ptr(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::tests::memory_runtime;
    use crate::runtime::{cosid_runtime_close, cosid_runtime_free};
    use crate::status::last_error;
    use std::ffi::CStr;
    use std::sync::Mutex;

    /// kind, slot, next_floor_ms, reason + error + key, message
    type Record = (cosid_event_kind, u32, i64, String, String);

    #[derive(Default)]
    struct Seen {
        events: Mutex<Vec<Record>>,
    }

    /// A string of an event (valid during the callback) as an owned `String`.
    ///
    /// # Safety
    /// `s` is a valid NUL-terminated string.
    unsafe fn text(s: *const c_char) -> String {
        // SAFETY: as promised by the caller.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }

    unsafe extern "C" fn record(event: *const cosid_event, user_data: *mut c_void) {
        // SAFETY: the library passes a valid event and our `Seen`.
        let (e, seen) = unsafe { (&*event, &*(user_data as *const Seen)) };
        // SAFETY: the strings are valid NUL-terminated during the call.
        let (texts, message) = unsafe {
            (
                text(e.reason) + &text(e.error) + &text(e.key),
                text(e.message),
            )
        };
        seen.events
            .lock()
            .unwrap()
            .push((e.kind, e.slot, e.next_floor_ms, texts, message));
    }

    /// A memory runtime on `ns` whose events `seen` records (`seen` must outlive it).
    fn recorded_runtime(ns: &str, seen: &Seen) -> *mut cosid_runtime {
        let rt = memory_runtime(ns);
        let user = seen as *const Seen as *mut c_void;
        assert_eq!(
            cosid_runtime_set_event_callback(rt, Some(record), user),
            cosid_status::COSID_OK
        );
        rt
    }

    /// A callback given to `cosid_runtime_new_with_callback` gets the events of the start
    /// itself (here the first `SLOT_ACQUIRED`; `STORE_UNAVAILABLE` the same way) before the call
    /// returns, and the later ones too.
    #[test]
    fn a_callback_given_at_the_start_gets_the_events_of_the_start() {
        let seen = Seen::default();
        let cfg = std::ffi::CString::new(
            "cosid:\n  namespace: ffi\n  machine:\n    lease:\n      store: 'memory:ffi-start'\n",
        )
        .unwrap();
        let mut rt = std::ptr::null_mut();
        let user = &seen as *const Seen as *mut c_void;
        assert_eq!(
            crate::runtime::cosid_runtime_new_with_callback(
                cfg.as_ptr(),
                Some(record),
                user,
                &mut rt
            ),
            cosid_status::COSID_OK,
            "{}",
            last_error()
        );
        let kinds =
            |seen: &Seen| -> Vec<_> { seen.events.lock().unwrap().iter().map(|e| e.0).collect() };
        assert_eq!(kinds(&seen), [cosid_event_kind::COSID_EVENT_SLOT_ACQUIRED]);
        assert_eq!(cosid_runtime_close(rt), cosid_status::COSID_OK);
        assert_eq!(
            kinds(&seen).last(),
            Some(&cosid_event_kind::COSID_EVENT_SLOT_RELEASED)
        );
        cosid_runtime_free(rt);
    }

    #[test]
    fn the_release_on_close_reaches_the_callback() {
        let seen = Seen::default();
        let rt = recorded_runtime("ffi-ev1", &seen);
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
        let seen = Seen::default();
        let rt = recorded_runtime("ffi-ev2", &seen);
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
    fn closing_again_from_the_release_callback_says_closed() {
        let rt = memory_runtime("ffi-ev3");
        assert_eq!(
            cosid_runtime_set_event_callback(rt, Some(close_own_runtime), rt.cast()),
            cosid_status::COSID_OK
        );
        // The release event is delivered on this thread, inside close, and the callback's close
        // finds the runtime closed already (no deadlock, no refusal).
        assert_eq!(cosid_runtime_close(rt), cosid_status::COSID_OK);
        let got = RESULT.lock().unwrap().clone();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, cosid_status::COSID_ERR_CLOSED, "{}", got[0].1);
        assert!(got[0].1.contains("already closed"), "{}", got[0].1);
        cosid_runtime_free(rt);
    }

    unsafe extern "C" fn free_on_release(event: *const cosid_event, user_data: *mut c_void) {
        // SAFETY: a valid event during the call.
        if unsafe { (*event).kind } == cosid_event_kind::COSID_EVENT_SLOT_RELEASED {
            cosid_runtime_free(user_data as *mut cosid_runtime);
        }
    }

    #[test]
    fn freeing_from_the_callback_during_close_leaves_the_close_to_finish() {
        // Hold the store so the release can be checked after the runtime is gone.
        let store = cosid_core::store::open("memory:ffi-ev4").unwrap();
        let rt = memory_runtime("ffi-ev4");
        let mut id = 0;
        assert_eq!(crate::cosid_next(rt, &mut id), cosid_status::COSID_OK);
        assert_eq!(
            cosid_runtime_set_event_callback(rt, Some(free_on_release), rt.cast()),
            cosid_status::COSID_OK
        );
        // The callback frees `rt` inside this close; the close finishes on its own handle.
        assert_eq!(cosid_runtime_close(rt), cosid_status::COSID_OK);
        let snap = store.snapshot("ffi").unwrap();
        assert!(snap.slots.slots.iter().all(|r| r.value.owner.is_none()));
    }

    /// Every member of `cosid_event` with its value as text ("" for 0 and for an empty
    /// string), by the member's name.
    fn members(e: &cosid_event) -> Vec<(&'static str, String)> {
        let n = |v: i128| if v == 0 { String::new() } else { v.to_string() };
        // SAFETY: `convert` points every string at a live NUL-terminated string.
        let t = |s: *const c_char| unsafe { text(s) };
        vec![
            ("kind", n(e.kind as i128)),
            ("slot", n(e.slot.into())),
            ("fence", n(e.fence.into())),
            ("floor_ms", n(e.floor_ms.into())),
            ("ceiling_ms", n(e.ceiling_ms.into())),
            ("next_floor_ms", n(e.next_floor_ms.into())),
            ("skew_ms", n(e.skew_ms.into())),
            ("attempt", n(e.attempt.into())),
            ("reason", t(e.reason)),
            ("error", t(e.error)),
            ("key", t(e.key)),
            ("waited_ms", n(e.waited_ms.into())),
            ("timeout_ms", n(e.timeout_ms.into())),
            ("message", t(e.message)),
        ]
    }

    #[test]
    fn the_c_event_carries_exactly_the_core_vocabulary() {
        use cosid_core::lease::events::{FieldValue, EVENT_FIELDS, EVENT_KINDS};
        let name = |k: u32| {
            // SAFETY: a static NUL-terminated string.
            unsafe { CStr::from_ptr(cosid_event_kind_name(k)) }
                .to_str()
                .unwrap()
        };
        // The struct's members are `kind`, the vocabulary's fields in its order, `message`.
        let mut vocabulary = vec!["kind"];
        vocabulary.extend(EVENT_FIELDS.iter().map(|f| f.name));
        vocabulary.push("message");
        let sample = convert(&Event::samples()[0]);
        let names: Vec<_> = members(&sample.0).iter().map(|m| m.0).collect();
        assert_eq!(names, vocabulary);
        // ... in the header too.
        assert_eq!(
            crate::runtime::tests::header_members("cosid_event"),
            vocabulary,
            "include/cosid.h is stale"
        );

        assert_eq!(KINDS.len(), EVENT_KINDS.len(), "a core kind has no C value");
        for (i, event) in Event::samples().iter().enumerate() {
            let (c, strings) = convert(event);
            assert_eq!(c.kind, KINDS[i]);
            assert_eq!(c.kind as usize, i + 1);
            assert_eq!(name(c.kind as u32), event.kind_name());
            // Exactly the kind's fields are set, each to the core's value.
            let set: Vec<_> = members(&c)
                .into_iter()
                .filter(|(n, v)| !v.is_empty() && *n != "kind" && *n != "message")
                .collect();
            let want: Vec<_> = event
                .fields()
                .into_iter()
                .map(|(n, v)| {
                    let v = match v {
                        FieldValue::U32(v) => v.to_string(),
                        FieldValue::U64(v) => v.to_string(),
                        FieldValue::I64(v) => v.to_string(),
                        FieldValue::Text(t) => t.to_string(),
                    };
                    (n, v)
                })
                .collect();
            let mut set_sorted = set.clone();
            let mut want_sorted = want.clone();
            set_sorted.sort();
            want_sorted.sort();
            assert_eq!(set_sorted, want_sorted, "{event:?}");
            // SAFETY: points into `strings`, alive here.
            let msg = unsafe { CStr::from_ptr(c.message) }.to_str().unwrap();
            assert_eq!(msg, event.to_string());
            drop(strings);
        }
        assert_eq!(name(0), "other");
        assert_eq!(name(EVENT_KINDS.len() as u32 + 1), "unknown");
        assert_eq!(name(u32::MAX), "unknown");
    }
}
