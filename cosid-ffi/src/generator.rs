//! `cosid_generator`: a named generator sharing its runtime's slot.

use crate::boundary::{c_str, guard, guard_void, handle, out_slice, out_value, Handle};
use crate::runtime::cosid_runtime;
use crate::status::{cosid_status, fail};
use cosid_core::Generator;
use std::os::raw::c_char;
use std::sync::Arc;

/// A named generator: its own id space (ids are unique per name across the namespace) on its
/// runtime's slot. Opaque. Made by `cosid_generator_get`, released by `cosid_generator_free`.
///
/// **Thread-safe**: `cosid_generator_next` and `cosid_generator_next_batch` may be called from
/// any number of threads at once. Ids of one generator strictly increase for as long as the slot
/// stays bound.
///
/// A generator handle may outlive its runtime: once the runtime is closed or freed it returns
/// `COSID_ERR_CLOSED`.
pub struct cosid_generator {
    magic: u64,
    generator: Arc<Generator>,
}

impl Handle for cosid_generator {
    const MAGIC: u64 = u64::from_be_bytes(*b"cosid:gn");
    const NAME: &'static str = "cosid_generator";
    fn magic(&self) -> u64 {
        self.magic
    }
}

impl Drop for cosid_generator {
    fn drop(&mut self) {
        self.magic = 0;
    }
}

/// Gets the generator called `name` (created on first use; every handle to one name shares one
/// generator) and stores a new handle to it in `*out`. `""` is the runtime's default generator,
/// the one `cosid_next` uses.
///
/// `name`: NUL-terminated UTF-8, at most 128 bytes, no control characters.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT`; `COSID_ERR_INVALID_ARGUMENT` (a bad name; the detail
/// shows it); `COSID_ERR_CLOSED`.
///
/// Thread-safe. Release the handle with `cosid_generator_free`.
#[no_mangle]
pub extern "C" fn cosid_generator_get(
    rt: *const cosid_runtime,
    name: *const c_char,
    out: *mut *mut cosid_generator,
) -> cosid_status {
    const F: &str = "cosid_generator_get";
    guard(F, || {
        let h = handle(F, "rt", rt)?;
        let name = c_str(F, "name", name, cosid_status::COSID_ERR_INVALID_ARGUMENT)?;
        out_value(F, out, || {
            if h.rt.is_closed() {
                // The core hands out the default generator even when closed; a handle that can
                // only fail is no use, so say it now.
                return Err(fail(
                    F,
                    &cosid_core::Error::new(cosid_core::ErrorKind::Closed, "the runtime is closed"),
                ));
            }
            let generator = h.rt.generator(name).map_err(|e| fail(F, &e))?;
            Ok(Box::into_raw(Box::new(cosid_generator {
                magic: cosid_generator::MAGIC,
                generator,
            })))
        })
    })
}

/// Issues one id from the generator into `*out`. Like `cosid_next` (same waits and errors).
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_generator_next(g: *const cosid_generator, out: *mut u64) -> cosid_status {
    const F: &str = "cosid_generator_next";
    guard(F, || {
        let h = handle(F, "g", g)?;
        out_value(F, out, || h.generator.next().map_err(|e| fail(F, &e)))
    })
}

/// Fills `out[0..n]` with ids from the generator. Like `cosid_next_batch` (`n == 0` is a no-op;
/// all or nothing: nothing is written on an error).
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_generator_next_batch(
    g: *const cosid_generator,
    out: *mut u64,
    n: usize,
) -> cosid_status {
    const F: &str = "cosid_generator_next_batch";
    guard(F, || {
        let h = handle(F, "g", g)?;
        let out = out_slice(F, "out", out, n)?;
        h.generator.next_batch(out).map_err(|e| fail(F, &e))
    })
}

/// Releases a generator handle (the generator itself lives on in its runtime; getting the same
/// name again continues its id sequence). NULL is fine. Do not call it while another thread
/// still uses `g`.
#[no_mangle]
pub extern "C" fn cosid_generator_free(g: *mut cosid_generator) {
    const F: &str = "cosid_generator_free";
    guard_void(F, || {
        if g.is_null() || handle(F, "g", g.cast_const()).is_err() {
            return;
        }
        // SAFETY: a live handle made by `Box::into_raw` in `cosid_generator_get`; the caller
        // gives up its ownership.
        drop(unsafe { Box::from_raw(g) });
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::tests::memory_runtime;
    use crate::runtime::{cosid_runtime_close, cosid_runtime_free};
    use crate::status::last_error;
    use std::ffi::CString;
    use std::ptr;

    #[test]
    fn named_generators_share_the_slot_and_outlive_their_runtime() {
        let rt = memory_runtime("ffi-gen1");
        let name = CString::new("orders").unwrap();
        let (mut a, mut b) = (ptr::null_mut(), ptr::null_mut());
        assert_eq!(
            cosid_generator_get(rt, name.as_ptr(), &mut a),
            cosid_status::COSID_OK
        );
        assert_eq!(
            cosid_generator_get(rt, name.as_ptr(), &mut b),
            cosid_status::COSID_OK
        );
        let (mut x, mut y) = (0u64, 0u64);
        assert_eq!(cosid_generator_next(a, &mut x), cosid_status::COSID_OK);
        assert_eq!(cosid_generator_next(b, &mut y), cosid_status::COSID_OK);
        assert!(y > x, "one generator behind both handles");
        let mut batch = [0u64; 5000];
        assert_eq!(
            cosid_generator_next_batch(a, batch.as_mut_ptr(), batch.len()),
            cosid_status::COSID_OK
        );
        assert!(batch[0] > y && batch.windows(2).all(|w| w[0] < w[1]));
        cosid_generator_free(b);
        assert_eq!(cosid_runtime_close(rt), cosid_status::COSID_OK);
        assert_eq!(
            cosid_generator_next(a, &mut x),
            cosid_status::COSID_ERR_CLOSED
        );
        assert_eq!(
            cosid_generator_get(rt, name.as_ptr(), &mut b),
            cosid_status::COSID_ERR_CLOSED
        );
        cosid_runtime_free(rt);
        assert_eq!(
            cosid_generator_next(a, &mut x),
            cosid_status::COSID_ERR_CLOSED
        );
        cosid_generator_free(a);
        cosid_generator_free(ptr::null_mut());
    }

    #[test]
    fn bad_names_and_pointers_are_refused() {
        let rt = memory_runtime("ffi-gen2");
        let mut g = ptr::null_mut();
        let bad = CString::new("bad\nname").unwrap();
        assert_eq!(
            cosid_generator_get(rt, bad.as_ptr(), &mut g),
            cosid_status::COSID_ERR_INVALID_ARGUMENT
        );
        assert!(g.is_null());
        assert!(last_error().contains("bad\\nname"), "{}", last_error());
        assert_eq!(
            cosid_generator_get(rt, ptr::null(), &mut g),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        let ok = CString::new("x").unwrap();
        assert_eq!(
            cosid_generator_get(rt, ok.as_ptr(), ptr::null_mut()),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            cosid_generator_get(ptr::null(), ok.as_ptr(), &mut g),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        let mut id = 0;
        assert_eq!(
            cosid_generator_next(ptr::null(), &mut id),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        // A runtime is not a generator.
        assert_eq!(
            cosid_generator_next(rt.cast(), &mut id),
            cosid_status::COSID_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("cosid_generator"));
        cosid_runtime_free(rt);
    }
}
