//! Core error kinds to Python exceptions.
//!
//! The exception classes are plain Python (`python/cosid/_errors.py`), so they can have two
//! bases (`InvalidArgumentError` is also a `ValueError`, `WaitTimeoutError` also the builtin
//! `TimeoutError`). This module maps a core [`ErrorKind`] — never the message text — to the
//! class and to the C API status name, with an explicit table: a rename in the core cannot
//! silently change the Python API, and a kind added to the core without a row here still raises
//! a `CosIdError` (with a status derived from the kind's name) and fails the test that walks
//! `ErrorKind::ALL`.

use cosid_core::{Error, ErrorKind};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyType};

/// The C API status name and the Python class name of a core error kind.
pub(crate) fn names(kind: ErrorKind) -> Option<(&'static str, &'static str)> {
    Some(match kind {
        ErrorKind::Config => ("COSID_ERR_CONFIG", "ConfigError"),
        ErrorKind::Store => ("COSID_ERR_STORE", "StoreError"),
        ErrorKind::WindowClosed => ("COSID_ERR_WINDOW_CLOSED", "WindowClosedError"),
        ErrorKind::SlotLost => ("COSID_ERR_SLOT_LOST", "SlotLostError"),
        ErrorKind::ClockBehind => ("COSID_ERR_CLOCK_BEHIND", "ClockBehindError"),
        ErrorKind::Timeout => ("COSID_ERR_TIMEOUT", "WaitTimeoutError"),
        ErrorKind::Closed => ("COSID_ERR_CLOSED", "ClosedError"),
        ErrorKind::Forked => ("COSID_ERR_FORKED", "ForkedError"),
        ErrorKind::InvalidArgument => ("COSID_ERR_INVALID_ARGUMENT", "InvalidArgumentError"),
        ErrorKind::Exhausted => ("COSID_ERR_EXHAUSTED", "ExhaustedError"),
        ErrorKind::NamespaceMismatch => ("COSID_ERR_NAMESPACE_MISMATCH", "NamespaceMismatchError"),
        ErrorKind::StateFile => ("COSID_ERR_STATE_FILE", "StateFileError"),
        _ => return None,
    })
}

static ERRORS_MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS_MODULE
        .get_or_try_init(py, || py.import("cosid._errors").map(Bound::unbind))
        .map(|m| m.bind(py))
}

/// The exception class called `name` in `cosid._errors`.
pub(crate) fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    Ok(errors_module(py)?.getattr(name)?.cast_into::<PyType>()?)
}

/// A new exception of the class for `kind`, with `message`.
pub(crate) fn for_kind(py: Python<'_>, kind: ErrorKind, message: String) -> PyErr {
    let (status, class_name) = match names(kind) {
        Some((s, c)) => (s.to_string(), c),
        None => (
            format!("COSID_ERR_{}", kind.name().to_ascii_uppercase()),
            "CosIdError",
        ),
    };
    match class(py, class_name) {
        Ok(cls) => {
            let err = PyErr::from_type(cls, (message,));
            if class_name == "CosIdError" {
                // A kind this build has no class for: keep its status on the instance.
                let _ = err.value(py).setattr("status", status);
            }
            err
        }
        Err(e) => e,
    }
}

/// The Python exception for a core error.
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    for_kind(py, e.kind(), e.to_string())
}

/// An `InvalidArgumentError` (also a `ValueError`) with `message`.
pub(crate) fn invalid(py: Python<'_>, message: impl Into<String>) -> PyErr {
    for_kind(py, ErrorKind::InvalidArgument, message.into())
}

/// A `ConfigError` (also a `ValueError`) with `message`.
pub(crate) fn config(py: Python<'_>, message: impl Into<String>) -> PyErr {
    for_kind(py, ErrorKind::Config, message.into())
}

/// The kind whose stable snake_case name is `name`.
pub(crate) fn kind_named(name: &str) -> Option<ErrorKind> {
    ErrorKind::ALL.iter().copied().find(|k| k.name() == name)
}

/// The UTF-8 text of a `str` argument. A `str` holding a lone surrogate (`'\ud800'`, e.g. from
/// `os.fsdecode` of undecodable bytes) has no UTF-8 form: that is a bad value, so it raises
/// `InvalidArgumentError` naming `what`, not a `UnicodeEncodeError`.
pub(crate) fn text<'a>(
    py: Python<'_>,
    s: &'a Bound<'_, pyo3::types::PyString>,
    what: &str,
) -> PyResult<std::borrow::Cow<'a, str>> {
    s.to_cow().map_err(|e| {
        let repr = s
            .repr()
            .map(|r| r.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut shown: String = repr.chars().take(80).collect();
        if repr.chars().count() > 80 {
            shown.push_str("...");
        }
        invalid(
            py,
            format!(
                "{what} {shown} is not valid Unicode ({}); pass a str without lone surrogates",
                e.value(py)
            ),
        )
    })
}
