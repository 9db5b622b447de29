//! The C boundary: panics stop here, pointers are checked here.
//!
//! Every export calls [`guard`] (or `catch_unwind` directly for the few that must not touch the
//! last-error detail), and reads its arguments through the checks below before using them.

use crate::status::{cosid_status, fail_with};
use std::any::Any;
use std::ffi::CStr;
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`, turning `Ok` into `COSID_OK`, `Err(status)` into `status` (the detail was recorded
/// where the error was found) and a panic into `COSID_ERR_PANIC` with the panic message as the
/// detail.
///
/// `AssertUnwindSafe`: after a panic the only state C can reach is the handle it passed in, and
/// every type behind a handle stays memory-safe when a panic interrupts it (the core's locks
/// recover from poisoning, its atomics have no torn states).
#[inline(always)]
pub(crate) fn guard(
    function: &'static str,
    f: impl FnOnce() -> Result<(), cosid_status>,
) -> cosid_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => cosid_status::COSID_OK,
        Ok(Err(status)) => status,
        Err(payload) => panicked(function, payload),
    }
}

/// Runs `f` for a function that returns nothing (the `_free` functions), swallowing a panic
/// after recording it.
pub(crate) fn guard_void(function: &'static str, f: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        let _ = panicked(function, payload);
    }
}

#[cold]
#[inline(never)]
fn panicked(function: &'static str, payload: Box<dyn Any + Send>) -> cosid_status {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".to_string());
    // Dropping a panic payload can itself panic; never let that escape.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    fail_with(
        function,
        cosid_status::COSID_ERR_PANIC,
        &format!("panicked: {what}; this is a bug in cosid, please report it"),
    )
}

/// Checks that `p` is non-NULL and aligned for `T`.
#[inline(always)]
pub(crate) fn check_ptr<T>(
    function: &'static str,
    what: &str,
    p: *const T,
) -> Result<(), cosid_status> {
    if p.is_null() {
        return Err(null_argument(function, what));
    }
    if !p.is_aligned() {
        return Err(misaligned::<T>(function, what, p.cast()));
    }
    Ok(())
}

#[cold]
#[inline(never)]
pub(crate) fn null_argument(function: &'static str, what: &str) -> cosid_status {
    fail_with(
        function,
        cosid_status::COSID_ERR_NULL_ARGUMENT,
        &format!("{what} is NULL; pass a valid pointer"),
    )
}

#[cold]
#[inline(never)]
fn misaligned<T>(function: &'static str, what: &str, p: *const u8) -> cosid_status {
    fail_with(
        function,
        cosid_status::COSID_ERR_INVALID_ARGUMENT,
        &format!(
            "{what} ({p:p}) is not aligned to {} bytes as a {} must be",
            std::mem::align_of::<T>(),
            std::any::type_name::<T>()
                .rsplit("::")
                .next()
                .unwrap_or("value")
        ),
    )
}

/// A NUL-terminated argument as bytes (without the NUL). NULL is refused.
pub(crate) fn c_bytes<'a>(
    function: &'static str,
    what: &str,
    p: *const c_char,
) -> Result<&'a [u8], cosid_status> {
    if p.is_null() {
        return Err(null_argument(function, what));
    }
    // SAFETY: the caller passes a NUL-terminated string that stays valid during the call (the
    // contract of every `const char *` argument, stated in the header).
    Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// A NUL-terminated UTF-8 argument. NULL is refused with `COSID_ERR_NULL_ARGUMENT`, invalid UTF-8
/// with `invalid` and a message naming the byte offset.
pub(crate) fn c_str<'a>(
    function: &'static str,
    what: &str,
    p: *const c_char,
    invalid: cosid_status,
) -> Result<&'a str, cosid_status> {
    let bytes = c_bytes(function, what, p)?;
    std::str::from_utf8(bytes).map_err(|e| {
        fail_with(
            function,
            invalid,
            &format!(
                "{what} is not valid UTF-8 (bad byte at offset {}); pass UTF-8 text",
                e.valid_up_to()
            ),
        )
    })
}

/// The `n` elements at `p` as a mutable slice, after checking the pointer and the size.
/// `n == 0` gives an empty slice whatever `p` is (NULL included).
pub(crate) fn out_slice<'a, T>(
    function: &'static str,
    what: &str,
    p: *mut T,
    n: usize,
) -> Result<&'a mut [T], cosid_status> {
    if n == 0 {
        return Ok(&mut []);
    }
    check_ptr(function, what, p.cast_const())?;
    if !fits_in_memory::<T>(n) {
        return Err(fail_with(
            function,
            cosid_status::COSID_ERR_INVALID_ARGUMENT,
            &format!("n = {n} elements do not fit in memory; pass the buffer's real length"),
        ));
    }
    // SAFETY: the caller gives `n` writable, initialised-or-not elements at `p` that no one else
    // touches during the call (the contract stated in the header); we only ever write them.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// Whether `n` elements of `T` can be one slice: at most `isize::MAX` bytes, the limit of
/// `slice::from_raw_parts_mut` (a longer `n` is a caller's mistake that no buffer can satisfy).
fn fits_in_memory<T>(n: usize) -> bool {
    n <= isize::MAX as usize / std::mem::size_of::<T>().max(1)
}

/// Tags an opaque handle's memory so a wrong or freed pointer is refused (best effort: a freed
/// handle is caught only while its memory is not reused; AddressSanitizer catches the rest).
pub(crate) trait Handle: Sized {
    /// The tag of a live handle of this type.
    const MAGIC: u64;
    /// The handle's tag field.
    fn magic(&self) -> u64;
    /// The C type name, for messages.
    const NAME: &'static str;
}

/// Borrows the handle at `p`, refusing NULL, a misaligned pointer and a pointer that is not a live
/// handle of type `H`.
#[inline(always)]
pub(crate) fn handle<'a, H: Handle>(
    function: &'static str,
    what: &str,
    p: *const H,
) -> Result<&'a H, cosid_status> {
    check_ptr(function, what, p)?;
    // SAFETY: non-NULL and aligned; the caller passes a handle made by this library and not
    // freed yet (stated in the header). The tag check below catches most violations.
    let h = unsafe { &*p };
    if h.magic() != H::MAGIC {
        return Err(not_a_handle::<H>(function, what));
    }
    Ok(h)
}

#[cold]
#[inline(never)]
fn not_a_handle<H: Handle>(function: &'static str, what: &str) -> cosid_status {
    fail_with(
        function,
        cosid_status::COSID_ERR_INVALID_ARGUMENT,
        &format!(
            "{what} does not point to a live {} (freed already, or another type?)",
            H::NAME
        ),
    )
}

/// Writes `value` through a checked out-pointer.
#[inline(always)]
pub(crate) fn write_out<T>(p: *mut T, value: T) {
    // SAFETY: callers checked `p` with `check_ptr` first; the caller of the export owns the
    // pointee for the duration of the call.
    unsafe { p.write(value) }
}

/// Checks the out-pointer `out`, then writes the value `make` gives there: every export that
/// returns one value through `out` checks it before doing the work, and writes nothing on an
/// error.
#[inline(always)]
pub(crate) fn out_value<T>(
    function: &'static str,
    out: *mut T,
    make: impl FnOnce() -> Result<T, cosid_status>,
) -> Result<(), cosid_status> {
    check_ptr(function, "out", out.cast_const())?;
    write_out(out, make()?);
    Ok(())
}

/// Checks the text buffer `buf` and the length pointer `out_len` of an export that writes text
/// (`cosid_format_id`, `cosid_id_to_base62`), before anything is written.
pub(crate) fn check_text_out(
    function: &'static str,
    buf: *mut c_char,
    out_len: *mut usize,
) -> Result<(), cosid_status> {
    if buf.is_null() {
        return Err(null_argument(function, "buf"));
    }
    check_ptr(function, "out_len", out_len.cast_const())
}

/// Copies `text` and a NUL into `buf` and stores `text.len()` in `*out_len`: the one way text
/// reaches a C buffer.
pub(crate) fn write_text(buf: *mut c_char, out_len: *mut usize, text: &[u8]) {
    // SAFETY: callers checked `buf` and `out_len` with `check_text_out` and that the buffer
    // holds more than `text.len()` bytes; the caller of the export owns them for the call.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
    }
    write_out(out_len, text.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::last_error;

    #[test]
    fn a_panic_becomes_a_status_with_its_message() {
        let s = guard("cosid_test", || panic!("boom {}", 7));
        assert_eq!(
            guard("x", || Err(cosid_status::COSID_ERR_CLOSED)),
            cosid_status::COSID_ERR_CLOSED
        );
        assert_eq!(s, cosid_status::COSID_ERR_PANIC);
        assert!(
            last_error().contains("cosid_test: panicked: boom 7"),
            "{}",
            last_error()
        );
        guard_void("cosid_test_void", || panic!("static boom"));
        assert!(last_error().contains("static boom"));
        assert_eq!(guard("x", || Ok(())), cosid_status::COSID_OK);
    }

    #[test]
    fn pointers_are_checked() {
        assert_eq!(
            check_ptr::<u64>("f", "out", std::ptr::null()),
            Err(cosid_status::COSID_ERR_NULL_ARGUMENT)
        );
        assert!(last_error().contains("f: out is NULL"));
        let words = [0u64; 2];
        let odd = (words.as_ptr() as *const u8).wrapping_add(1) as *const u64;
        assert_eq!(
            check_ptr("f", "out", odd),
            Err(cosid_status::COSID_ERR_INVALID_ARGUMENT)
        );
        assert!(
            last_error().contains("not aligned to 8 bytes as a u64"),
            "{}",
            last_error()
        );
        assert_eq!(check_ptr("f", "out", words.as_ptr()), Ok(()));
        assert!(out_slice::<u64>("f", "out", std::ptr::null_mut(), 0)
            .unwrap()
            .is_empty());
        assert_eq!(
            out_slice::<u64>("f", "out", std::ptr::null_mut(), 1).unwrap_err(),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        let mut buf = [0u64; 1];
        assert_eq!(
            out_slice("f", "out", buf.as_mut_ptr(), usize::MAX).unwrap_err(),
            cosid_status::COSID_ERR_INVALID_ARGUMENT
        );
        // The exact limit: isize::MAX bytes is one slice, a byte more is not (no buffer of
        // either size exists, so this is checked on the rule, not through a slice).
        let most = isize::MAX as usize / 8;
        assert!(fits_in_memory::<u64>(most));
        assert!(!fits_in_memory::<u64>(most + 1));
        assert!(fits_in_memory::<u8>(isize::MAX as usize));
        assert!(!fits_in_memory::<u8>(isize::MAX as usize + 1));
        let bad = b"a\xffb\0";
        assert_eq!(
            c_str(
                "f",
                "name",
                bad.as_ptr().cast(),
                cosid_status::COSID_ERR_CONFIG
            )
            .unwrap_err(),
            cosid_status::COSID_ERR_CONFIG
        );
        assert!(last_error().contains("offset 1"));
    }
}
