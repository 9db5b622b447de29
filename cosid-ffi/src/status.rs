//! Status codes and the thread-local detail message of the last error.

use cosid_core::{Error, ErrorKind};
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::sync::OnceLock;

/// The result of every fallible function. `COSID_OK` is 0; every other value is an error whose
/// detail is in `cosid_last_error_message`.
///
/// Values are explicit and never reused: codes 1 to 99 are the error kinds of the core, in the
/// core's order (a new kind gets the next number); codes from 100 are the C API's own. Any
/// value may be passed to `cosid_status_name`, including ones a newer library adds.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub enum cosid_status {
    /// Success; the out-pointers were written.
    COSID_OK = 0,
    /// The configuration is malformed or out of range, or names a store this build does not
    /// have. The message names the key (e.g. `cosid.machine.lease.ttl`) and the fix.
    COSID_ERR_CONFIG = 1,
    /// The slot store failed or could not be reached. The message names the store (never with
    /// its password).
    COSID_ERR_STORE = 2,
    /// The window's ceiling was reached and no renewal extended it within `max-wait`.
    COSID_ERR_WINDOW_CLOSED = 3,
    /// The lease on the slot was lost; the runtime is acquiring a new slot. Retry later.
    COSID_ERR_SLOT_LOST = 4,
    /// The clock is behind the window's floor or the last issued id for longer than `max-wait`.
    COSID_ERR_CLOCK_BEHIND = 5,
    /// A bounded wait ran out (acquiring a slot at start-up, waiting for the next tick).
    COSID_ERR_TIMEOUT = 6,
    /// The runtime or generator is closed (`cosid_runtime_close` ran, or the runtime was freed
    /// while a generator handle lived on). Also returned by a second `cosid_runtime_close`.
    COSID_ERR_CLOSED = 7,
    /// This process is a `fork()` child of the process that built the runtime, which still holds
    /// the slot, and the runtime may not take a slot of its own here (`cosid.fork: fail`, a
    /// `memory:` store, or a static slot). Build a new runtime in the child.
    COSID_ERR_FORKED = 8,
    /// An argument is out of range or malformed: an id string, a generator name, a layout, a
    /// misaligned pointer, or a call that is not allowed where it was made.
    COSID_ERR_INVALID_ARGUMENT = 9,
    /// Every slot of the namespace is held by a live lease (start-up retried for
    /// `acquire-timeout`).
    COSID_ERR_EXHAUSTED = 10,
    /// The namespace records other `{limit, tolerance}` values than this configuration asks for.
    COSID_ERR_NAMESPACE_MISMATCH = 11,
    /// A static slot's state file is missing, truncated, corrupt or unwritable.
    COSID_ERR_STATE_FILE = 12,
    /// A required pointer argument is NULL.
    COSID_ERR_NULL_ARGUMENT = 100,
    /// The caller's buffer is too small; nothing was written. The message says the size needed.
    COSID_ERR_BUFFER_TOO_SMALL = 101,
    /// The library panicked (a bug in cosid: please report the message). The panic was stopped
    /// at the C boundary; the handle involved may be unusable, but no memory was corrupted.
    COSID_ERR_PANIC = 102,
    /// An error of the core that this build of the C API has no code for. A test checks that
    /// every core error kind has its own code, so this is never returned by a released build.
    COSID_ERR_INTERNAL = 103,
    /// The call waited (building a runtime: the start-up acquisition and its store calls; an id
    /// call waiting for its window or the next tick) and `cosid_interrupt` ended the wait. Nothing
    /// was issued or is held for it. Every such wait ends so until `cosid_interrupt_clear`.
    COSID_ERR_INTERRUPTED = 104,
}

impl cosid_status {
    /// Every status, in value order.
    #[cfg(test)]
    pub(crate) const ALL: [cosid_status; 18] = [
        cosid_status::COSID_OK,
        cosid_status::COSID_ERR_CONFIG,
        cosid_status::COSID_ERR_STORE,
        cosid_status::COSID_ERR_WINDOW_CLOSED,
        cosid_status::COSID_ERR_SLOT_LOST,
        cosid_status::COSID_ERR_CLOCK_BEHIND,
        cosid_status::COSID_ERR_TIMEOUT,
        cosid_status::COSID_ERR_CLOSED,
        cosid_status::COSID_ERR_FORKED,
        cosid_status::COSID_ERR_INVALID_ARGUMENT,
        cosid_status::COSID_ERR_EXHAUSTED,
        cosid_status::COSID_ERR_NAMESPACE_MISMATCH,
        cosid_status::COSID_ERR_STATE_FILE,
        cosid_status::COSID_ERR_NULL_ARGUMENT,
        cosid_status::COSID_ERR_BUFFER_TOO_SMALL,
        cosid_status::COSID_ERR_PANIC,
        cosid_status::COSID_ERR_INTERNAL,
        cosid_status::COSID_ERR_INTERRUPTED,
    ];

    /// The code of a core error kind: the kind's discriminant, one code per kind.
    pub fn of_kind(kind: ErrorKind) -> cosid_status {
        match kind {
            ErrorKind::Config => cosid_status::COSID_ERR_CONFIG,
            ErrorKind::Store => cosid_status::COSID_ERR_STORE,
            ErrorKind::WindowClosed => cosid_status::COSID_ERR_WINDOW_CLOSED,
            ErrorKind::SlotLost => cosid_status::COSID_ERR_SLOT_LOST,
            ErrorKind::ClockBehind => cosid_status::COSID_ERR_CLOCK_BEHIND,
            ErrorKind::Timeout => cosid_status::COSID_ERR_TIMEOUT,
            ErrorKind::Closed => cosid_status::COSID_ERR_CLOSED,
            ErrorKind::Forked => cosid_status::COSID_ERR_FORKED,
            ErrorKind::InvalidArgument => cosid_status::COSID_ERR_INVALID_ARGUMENT,
            ErrorKind::Exhausted => cosid_status::COSID_ERR_EXHAUSTED,
            ErrorKind::NamespaceMismatch => cosid_status::COSID_ERR_NAMESPACE_MISMATCH,
            ErrorKind::StateFile => cosid_status::COSID_ERR_STATE_FILE,
            // `ErrorKind` is non-exhaustive; `every_core_kind_has_its_own_code` fails as soon as
            // the core adds a kind this match does not name.
            _ => cosid_status::COSID_ERR_INTERNAL,
        }
    }

    /// The status's name as a static C string: a core kind's C status name from the core's
    /// table (`ErrorKind::status_name`), the C API's own statuses named here.
    fn c_name(value: u32) -> &'static CStr {
        static KIND_NAMES: OnceLock<Vec<CString>> = OnceLock::new();
        match value {
            0 => c"COSID_OK",
            100 => c"COSID_ERR_NULL_ARGUMENT",
            101 => c"COSID_ERR_BUFFER_TOO_SMALL",
            102 => c"COSID_ERR_PANIC",
            103 => c"COSID_ERR_INTERNAL",
            104 => c"COSID_ERR_INTERRUPTED",
            _ => {
                let names = KIND_NAMES.get_or_init(|| {
                    // The names of the kinds this build has a code for, by value.
                    let last = ErrorKind::ALL
                        .iter()
                        .map(|k| *k as u32)
                        .filter(|v| Self::of_kind_code(*v).is_some())
                        .max()
                        .unwrap_or(0);
                    (1..=last)
                        .map(|v| {
                            let name = ErrorKind::from_code(v)
                                .filter(|_| Self::of_kind_code(v).is_some())
                                .map_or("COSID_UNKNOWN_STATUS", ErrorKind::status_name);
                            CString::new(name).unwrap_or_default()
                        })
                        .collect()
                });
                value
                    .checked_sub(1)
                    .and_then(|i| names.get(i as usize))
                    .map_or(c"COSID_UNKNOWN_STATUS", |n| n.as_c_str())
            }
        }
    }

    /// The status of the core kind whose code is `value`, when this build has one.
    fn of_kind_code(value: u32) -> Option<cosid_status> {
        ErrorKind::from_code(value)
            .map(cosid_status::of_kind)
            .filter(|s| *s != cosid_status::COSID_ERR_INTERNAL)
    }

    /// The status's name, e.g. `COSID_ERR_SLOT_LOST`.
    pub fn name(self) -> &'static str {
        Self::c_name(self as u32)
            .to_str()
            .unwrap_or("COSID_UNKNOWN_STATUS")
    }
}

/// The name of a status as a static string, e.g. `"COSID_ERR_SLOT_LOST"` for
/// `COSID_ERR_SLOT_LOST`; `"COSID_UNKNOWN_STATUS"` for a value that is not a status. Never NULL;
/// do not free it.
///
/// `status` is any `cosid_status` value (declared as `uint32_t` so that any value, even one a
/// newer library returns, can be passed safely).
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_status_name(status: u32) -> *const c_char {
    cosid_status::c_name(status).as_ptr()
}

thread_local! {
    static LAST_ERROR: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Records `message` as this thread's last error detail, prefixed with the function's name.
pub(crate) fn set_last_error(function: &str, message: &str) {
    LAST_ERROR.with(|m| {
        let mut m = m.borrow_mut();
        m.clear();
        m.extend_from_slice(function.as_bytes());
        m.extend_from_slice(b": ");
        // A NUL inside the message would cut it short in C; show it instead.
        for &b in message.as_bytes() {
            if b == 0 {
                m.extend_from_slice(b"\\0");
            } else {
                m.push(b);
            }
        }
    });
}

/// Records a core error and returns its status.
pub(crate) fn fail(function: &str, error: &Error) -> cosid_status {
    set_last_error(function, &error.to_string());
    if cosid_core::interrupt::is_interrupted(error) {
        return cosid_status::COSID_ERR_INTERRUPTED;
    }
    cosid_status::of_kind(error.kind())
}

/// Records a C API error (null argument, buffer too small, bad pointer) and returns `status`.
pub(crate) fn fail_with(function: &str, status: cosid_status, message: &str) -> cosid_status {
    set_last_error(function, message);
    status
}

fn last_error_len() -> usize {
    LAST_ERROR.with(|m| m.borrow().len())
}

/// Copies this thread's last error detail into `buf` as a NUL-terminated string and stores its
/// length (without the NUL) in `*out_len`.
///
/// The detail is set by every call that returns a status other than `COSID_OK` on this thread,
/// starts with the function's name (`"cosid_runtime_new: cosid.machine.lease: unknown key
/// 'tll'…"`), names the offending value and the fix, and stays until the next failing call on
/// this thread. Successful calls leave it alone, so read it right after the failing call. It is
/// `""` on a thread where nothing failed yet. Reading it never changes it.
///
/// Returns `COSID_ERR_NULL_ARGUMENT` if `buf` or `out_len` is NULL, and
/// `COSID_ERR_BUFFER_TOO_SMALL` (writing nothing) if `len` is less than
/// `cosid_last_error_length() + 1`.
///
/// Thread-safe (each thread has its own detail).
#[no_mangle]
pub extern "C" fn cosid_last_error_message(
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> cosid_status {
    // This function must not overwrite the detail it is asked for, so it reports its own
    // failures through the status only.
    let r = std::panic::catch_unwind(|| {
        if buf.is_null() || out_len.is_null() {
            return cosid_status::COSID_ERR_NULL_ARGUMENT;
        }
        if !out_len.is_aligned() {
            return cosid_status::COSID_ERR_INVALID_ARGUMENT;
        }
        LAST_ERROR.with(|m| {
            let m = m.borrow();
            if len < m.len() + 1 {
                return cosid_status::COSID_ERR_BUFFER_TOO_SMALL;
            }
            // SAFETY: the caller gives `len` writable bytes at `buf`; we write m.len() + 1 <= len.
            unsafe {
                std::ptr::copy_nonoverlapping(m.as_ptr(), buf.cast::<u8>(), m.len());
                *buf.add(m.len()) = 0;
                *out_len = m.len();
            }
            cosid_status::COSID_OK
        })
    });
    r.unwrap_or(cosid_status::COSID_ERR_PANIC)
}

/// The length in bytes (without the terminating NUL) of this thread's last error detail, so a
/// buffer of `cosid_last_error_length() + 1` bytes always holds it. 0 if nothing failed yet.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_last_error_length() -> usize {
    std::panic::catch_unwind(last_error_len).unwrap_or(0)
}

/// This thread's last error detail (for Rust tests).
#[cfg(test)]
pub(crate) fn last_error() -> String {
    LAST_ERROR.with(|m| String::from_utf8_lossy(&m.borrow()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn every_core_kind_has_its_own_code_equal_to_its_discriminant() {
        let mut seen = std::collections::HashSet::new();
        for kind in ErrorKind::ALL {
            let s = cosid_status::of_kind(kind);
            assert_ne!(s, cosid_status::COSID_ERR_INTERNAL, "{kind:?} has no code");
            assert_eq!(s as u32, kind as u32, "{kind:?}");
            assert!(seen.insert(s), "{kind:?} shares a code");
        }
        // Codes from 100 are the C API's own and can never meet a core kind.
        assert!(ErrorKind::ALL.len() < 100);
    }

    #[test]
    fn every_status_has_a_distinct_static_name() {
        let mut names = std::collections::HashSet::new();
        for s in cosid_status::ALL {
            // SAFETY: cosid_status_name returns a static NUL-terminated string.
            let name = unsafe { CStr::from_ptr(cosid_status_name(s as u32)) }
                .to_str()
                .unwrap();
            assert_eq!(name, s.name());
            assert_eq!(name, format!("{s:?}"), "the name is the enumerator");
            assert!(names.insert(name));
        }
        for unknown in [13u32, 99, 105, u32::MAX] {
            // SAFETY: as above.
            let name = unsafe { CStr::from_ptr(cosid_status_name(unknown)) };
            assert_eq!(name.to_str().unwrap(), "COSID_UNKNOWN_STATUS");
        }
    }

    #[test]
    fn last_error_is_per_thread_and_checks_its_buffer() {
        set_last_error("cosid_test", "bad\0value");
        assert_eq!(last_error(), "cosid_test: bad\\0value");
        let want = cosid_last_error_length();
        assert_eq!(want, "cosid_test: bad\\0value".len());
        let mut buf = vec![0x55 as c_char; want + 1];
        let mut n = 0usize;
        assert_eq!(
            cosid_last_error_message(buf.as_mut_ptr(), want, &mut n),
            cosid_status::COSID_ERR_BUFFER_TOO_SMALL
        );
        assert_eq!((n, buf[0]), (0, 0x55), "nothing written on failure");
        assert_eq!(
            cosid_last_error_message(std::ptr::null_mut(), 10, &mut n),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            cosid_last_error_message(buf.as_mut_ptr(), buf.len(), std::ptr::null_mut()),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            cosid_last_error_message(buf.as_mut_ptr(), buf.len(), &mut n),
            cosid_status::COSID_OK
        );
        assert_eq!(n, want);
        // SAFETY: the buffer was NUL-terminated by the call.
        let got = unsafe { CStr::from_ptr(buf.as_ptr()) };
        assert_eq!(got.to_str().unwrap(), "cosid_test: bad\\0value");
        // Failed reads did not clobber it; another thread has its own (empty) detail.
        assert_eq!(cosid_last_error_length(), want);
        std::thread::spawn(|| assert_eq!(cosid_last_error_length(), 0))
            .join()
            .unwrap();
    }
}
