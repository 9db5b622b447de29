//! A writable buffer of 64-bit integers, borrowed through the buffer protocol for `next_into`.
//!
//! PyO3 offers `PyBuffer` only for the limited API of Python 3.11+, and this wheel is abi3 for
//! 3.9+. `PyObject_GetBuffer`, `PyBuffer_Release` and the `Py_buffer` struct have had the same
//! ABI since Python 3.3, every CPython exports them, and 3.11 added them to the stable ABI
//! unchanged; so they are declared here (like `pyo3-ffi` does for non-abi3 builds).

use crate::errors::type_name;
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_char, c_int, c_void, CStr};

#[repr(C)]
struct RawBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut RawBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
}

const PYBUF_WRITABLE: c_int = 0x0001;
const PYBUF_FORMAT: c_int = 0x0004;
const PYBUF_ND: c_int = 0x0008;
const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;
const PYBUF_C_CONTIGUOUS: c_int = 0x0020 | PYBUF_STRIDES;

const WANTED: &str = "a writable, C-contiguous buffer of 64-bit integers, such as \
                      array.array('Q'), a numpy.uint64 (or int64) array, or \
                      memoryview(...).cast('Q')";

/// A borrowed buffer of 8-byte integers. Released on drop; the GIL must be held then (it is:
/// every user keeps the guard in a scope that holds the GIL).
pub(crate) struct U64Buffer {
    // Boxed: exporters may point into the struct (e.g. `shape` at `len`), so it must not move.
    raw: Box<RawBuffer>,
}

impl U64Buffer {
    /// Borrows `obj`'s buffer if it is writable, C-contiguous, and of 8-byte unsigned or signed
    /// integers in native byte order; a `TypeError` naming what is wrong otherwise.
    pub(crate) fn get(obj: &Bound<'_, PyAny>) -> PyResult<U64Buffer> {
        let py = obj.py();
        let mut raw = Box::new(RawBuffer {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        });
        let flags = PYBUF_WRITABLE | PYBUF_FORMAT | PYBUF_C_CONTIGUOUS;
        // SAFETY: `obj` is a live object and the GIL is held; `raw` is a valid, pinned
        // (boxed) Py_buffer that the call fills in on success.
        let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *raw, flags) };
        if rc != 0 {
            let cause = PyErr::take(py);
            let err = pyo3::exceptions::PyTypeError::new_err(format!(
                "next_into needs {WANTED}; got {}{}",
                type_name(obj),
                cause
                    .as_ref()
                    .map(|c| format!(" ({})", c.value(py)))
                    .unwrap_or_default()
            ));
            err.set_cause(py, cause);
            return Err(err);
        }
        let buffer = U64Buffer { raw };
        let format = if buffer.raw.format.is_null() {
            "B".to_string()
        } else {
            // SAFETY: a non-null format of a filled Py_buffer is a NUL-terminated string that
            // lives as long as the buffer.
            unsafe { CStr::from_ptr(buffer.raw.format) }
                .to_string_lossy()
                .into_owned()
        };
        if buffer.raw.itemsize != 8 || !is_u64_format(&format) {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "next_into needs {WANTED}; got {} of format '{format}' with {}-byte items",
                type_name(obj),
                buffer.raw.itemsize
            )));
        }
        if buffer.raw.readonly != 0 {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "next_into needs {WANTED}; got a read-only {}",
                type_name(obj)
            )));
        }
        Ok(buffer)
    }

    /// How many 8-byte items the buffer holds.
    pub(crate) fn len(&self) -> usize {
        (self.raw.len / 8) as usize
    }

    /// Writes `value` at item `index` (`index < len()`). The memory may be unaligned (a
    /// memoryview of a byte buffer at an odd offset), so the write is unaligned.
    #[inline]
    pub(crate) fn write(&mut self, index: usize, value: u64) {
        assert!(index < self.len());
        // SAFETY: the buffer is writable, C-contiguous and `len()` 8-byte items long, and the
        // exporter keeps it alive and unresized until release; index is in bounds.
        unsafe { (self.raw.buf as *mut u64).add(index).write_unaligned(value) }
    }
}

impl Drop for U64Buffer {
    fn drop(&mut self) {
        // SAFETY: the buffer was filled by a successful PyObject_GetBuffer and is released
        // once; the GIL is held (see the type's contract).
        unsafe { PyBuffer_Release(&mut *self.raw) }
    }
}

/// `Q`, `L` (unsigned) or `q`, `l` (signed: ids fit in 63 bits) in native byte order, with an
/// optional byte-order prefix that means native order here. The item size is checked apart.
fn is_u64_format(format: &str) -> bool {
    let native_prefix: &[char] = if cfg!(target_endian = "little") {
        &['@', '=', '<']
    } else {
        &['@', '=', '>', '!']
    };
    let body = format.strip_prefix(native_prefix).unwrap_or(format);
    matches!(body, "Q" | "L" | "q" | "l")
}
