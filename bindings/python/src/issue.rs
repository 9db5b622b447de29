//! Issuing ids into Python objects, with the GIL held on the fast path and released around
//! every wait.
//!
//! Releasing and re-taking the GIL costs more than an id (about 100 ns against 20 ns), so the
//! fast path calls the core's non-blocking `try_next` / `try_reserve` with the GIL held; only
//! when the core says "wait" (next tick, floor, ceiling, no slot yet) is the GIL released around
//! the core's bounded, blocking wait, so other Python threads run meanwhile. A wait that can be
//! long (anything but the next millisecond) runs so that Ctrl-C interrupts it (`interrupt`).

use crate::buffer::U64Buffer;
use crate::{errors, interrupt};
use cosid_core::{Batch, Generator, TryNext, WaitReason};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList, PyString};
use std::sync::Arc;
use std::time::Duration;

/// The most ids one `next_batch` call returns (a list of this many ints is about 40 MB).
/// `next_into` has no such limit: the caller owns the memory.
pub(crate) const MAX_BATCH: usize = 1 << 20;

/// One id.
#[inline]
pub(crate) fn one(py: Python<'_>, g: &Arc<Generator>) -> PyResult<u64> {
    match g.try_next() {
        Ok(TryNext::Ready(id)) => Ok(id),
        Ok(TryNext::Wait {
            reason,
            retry_after,
        }) => one_waiting(py, g, short_wait(reason, retry_after)),
        Err(e) => Err(errors::to_py(py, e)),
    }
}

/// Whether a wait is for the next millisecond (too short to be worth interrupting).
fn short_wait(reason: WaitReason, retry_after: Duration) -> bool {
    matches!(reason, WaitReason::NextTick) && retry_after <= Duration::from_millis(1)
}

#[cold]
#[inline(never)]
fn one_waiting(py: Python<'_>, g: &Arc<Generator>, short: bool) -> PyResult<u64> {
    let r = if short {
        py.detach(|| g.next())
    } else {
        let g = g.clone();
        interrupt::wait(py, move || g.next(), drop)?
    };
    r.map_err(|e| errors::to_py(py, e))
}

/// Why a batch stopped, as Python's exception: a core error becomes one at once (the batch loop
/// runs with the GIL held), a signal handler's exception during a long wait stays as it is.
struct Stop(PyErr);

impl From<cosid_core::Error> for Stop {
    fn from(e: cosid_core::Error) -> Self {
        Stop(Python::attach(|py| errors::to_py(py, e)))
    }
}

/// `n` fresh ids, reserved by the core's batch loop (`Generator::reserve_batch`), all or
/// nothing. A run that has to wait waits with the GIL released (interruptibly when the wait can
/// be long); the ids are composed only once all are in hand.
fn reserve<'g>(py: Python<'_>, g: &'g Arc<Generator>, n: usize) -> PyResult<Batch<'g>> {
    let wait = |want: u32, reason, retry_after| {
        let r = if short_wait(reason, retry_after) {
            // A batch of short waits can be long (a layout of 1 sequence bit issues 2 ids a
            // millisecond): Ctrl-C is looked for before each one (a flag read, some 10 ns
            // against a wait of up to 1 ms), before anything is reserved by it.
            py.check_signals().map_err(Stop)?;
            py.detach(|| g.reserve_waiting(want))
        } else {
            let g = g.clone();
            interrupt::wait(py, move || g.reserve_waiting(want), drop).map_err(Stop)?
        };
        Ok(r?)
    };
    g.reserve_batch(n, wait).map_err(|Stop(e)| e)
}

/// `n` ids as a new list of ints (made once every id is issued).
pub(crate) fn batch<'py>(
    py: Python<'py>,
    g: &Arc<Generator>,
    n: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let n = batch_size(py, n)?;
    let ids = reserve(py, g, n)?;
    // SAFETY: PyList_New returns a new reference (or NULL with an exception set), owned here.
    let list = unsafe {
        Bound::from_owned_ptr_or_err(py, ffi::PyList_New(n as ffi::Py_ssize_t))?
            .cast_into_unchecked::<PyList>()
    };
    for (i, id) in ids.ids().enumerate() {
        // SAFETY: PyLong_FromUnsignedLongLong returns a new reference or NULL with an
        // exception set; PyList_SetItem steals it into slot `i` < n of our fresh list (a NULL
        // slot left by an error is fine: the list's dealloc skips NULL items).
        unsafe {
            let item = ffi::PyLong_FromUnsignedLongLong(id);
            if item.is_null() {
                return Err(PyErr::fetch(py));
            }
            if ffi::PyList_SetItem(list.as_ptr(), i as ffi::Py_ssize_t, item) != 0 {
                return Err(PyErr::fetch(py));
            }
        }
    }
    Ok(list)
}

/// Fills `buffer` with ids, all or nothing; returns how many.
pub(crate) fn into_buffer(
    py: Python<'_>,
    g: &Arc<Generator>,
    buffer: &Bound<'_, PyAny>,
) -> PyResult<usize> {
    let mut buf = U64Buffer::get(buffer)?;
    let ids = reserve(py, g, buf.len())?;
    for (i, id) in ids.ids().enumerate() {
        buf.write(i, id);
    }
    Ok(ids.len())
}

/// One id as its 11-character base-62 text.
pub(crate) fn one_str<'py>(py: Python<'py>, g: &Arc<Generator>) -> PyResult<Bound<'py, PyString>> {
    let id = one(py, g)?;
    let mut buf = [0u8; cosid_core::convert::BASE62_WIDTH];
    Ok(PyString::new(
        py,
        cosid_core::convert::write_base62(id, &mut buf),
    ))
}

/// A batch size: an int (not a bool) from 0 to `MAX_BATCH`.
pub(crate) fn batch_size(py: Python<'_>, n: &Bound<'_, PyAny>) -> PyResult<usize> {
    let n = index(py, n, "the batch size")?;
    match n.extract::<i64>() {
        Ok(v) if v < 0 => Err(errors::invalid(
            py,
            format!("the batch size {v} is negative; ask for 0 to {MAX_BATCH} ids"),
        )),
        Ok(v) if v as u64 <= MAX_BATCH as u64 => Ok(v as usize),
        _ => {
            let negative = n.lt(0)?;
            Err(errors::invalid(
                py,
                format!(
                    "the batch size {} is {}; ask for 0 to {MAX_BATCH} ids per call (or fill \
                     a buffer of any size with next_into)",
                    n.str()?,
                    if negative { "negative" } else { "too large" }
                ),
            ))
        }
    }
}

/// `obj` as an int: a Python int or anything with `__index__` (numpy integers), not a bool
/// (`next_batch(True)` is a bug, not a request for one id).
pub(crate) fn index<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<Bound<'py, PyInt>> {
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{what} must be an int, not bool"
        )));
    }
    if let Ok(i) = obj.cast::<PyInt>() {
        return Ok(i.clone());
    }
    // SAFETY: PyNumber_Index returns a new reference or NULL with an exception set.
    let as_int = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyNumber_Index(obj.as_ptr())) };
    match as_int {
        Ok(i) => Ok(i.cast_into::<PyInt>()?),
        Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{what} must be an int, not {}",
            errors::type_name(obj)
        ))),
    }
}

/// An id argument: an int from 0 to 2**64 - 1.
pub(crate) fn id_arg(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    let n = index(py, obj, "an id")?;
    n.extract::<u64>().map_err(|_| {
        errors::invalid(
            py,
            format!(
                "{} is not an id; ids are integers from 0 to 18446744073709551615",
                n.str().map(|s| s.to_string()).unwrap_or_default()
            ),
        )
    })
}
