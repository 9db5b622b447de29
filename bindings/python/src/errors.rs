//! Core error kinds to Python exceptions.
//!
//! The exception classes are plain Python (`python/cosid/_errors.py`), so they can have two
//! bases (`InvalidArgumentError` is also a `ValueError`, `WaitTimeoutError` also the builtin
//! `TimeoutError`). This module maps a core [`ErrorKind`] — never the message text — to its
//! class; the status name (`COSID_ERR_…`) and the kind name are the core's
//! ([`ErrorKind::names`], the table every surface maps from). A kind added to the core without a
//! class here raises a `CosIdError` carrying the core's status and kind names, and fails the test
//! that walks `ErrorKind::ALL`.

use cosid_core::{Error, ErrorKind};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyType};

/// The Python class name of a core error kind.
pub(crate) fn class_name(kind: ErrorKind) -> Option<&'static str> {
    Some(match kind {
        ErrorKind::Config => "ConfigError",
        ErrorKind::Store => "StoreError",
        ErrorKind::WindowClosed => "WindowClosedError",
        ErrorKind::SlotLost => "SlotLostError",
        ErrorKind::ClockBehind => "ClockBehindError",
        ErrorKind::Timeout => "WaitTimeoutError",
        ErrorKind::Closed => "ClosedError",
        ErrorKind::Forked => "ForkedError",
        ErrorKind::InvalidArgument => "InvalidArgumentError",
        ErrorKind::Exhausted => "ExhaustedError",
        ErrorKind::NamespaceMismatch => "NamespaceMismatchError",
        ErrorKind::StateFile => "StateFileError",
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
    let Some(name) = class_name(kind) else {
        // A kind this build has no class for: a `CosIdError` with the core's names.
        return match class(py, "CosIdError") {
            Ok(cls) => {
                let err = PyErr::from_type(cls, (message,));
                let _ = err.value(py).setattr("status", kind.status_name());
                let _ = err.value(py).setattr("kind", kind.name());
                err
            }
            Err(e) => e,
        };
    };
    match class(py, name) {
        Ok(cls) => PyErr::from_type(cls, (message,)),
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
    ErrorKind::from_name(name)
}

/// The name of `obj`'s type for a `TypeError` message (`"?"` when it has none): every
/// argument check says what it got the same way.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
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
