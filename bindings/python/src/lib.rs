//! `cosid._cosid`: the private native module of the `cosid` Python package.
//!
//! A thin binding: every rule lives in `cosid-core`. This crate turns Python arguments into
//! core calls, core results into Python objects, and core error kinds into the exception
//! classes of `cosid._errors`. The public package is `python/cosid/`; its `_cosid.pyi` types
//! this module and `mypy.stubtest` checks the two agree.

mod aio;
mod buffer;
mod config;
mod errors;
mod interrupt;
mod issue;
mod records;
mod runtime;
mod text;

use pyo3::prelude::*;
use pyo3::types::PyString;

/// The fixed-width base-62 text of an id: 11 characters of `0-9A-Za-z`, ordered like the ids.
#[pyfunction]
#[pyo3(signature = (id, /))]
fn to_base62<'py>(py: Python<'py>, id: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
    let id = issue::id_arg(py, id)?;
    let mut buf = [0u8; cosid_core::convert::BASE62_WIDTH];
    Ok(PyString::new(
        py,
        cosid_core::convert::write_base62(id, &mut buf),
    ))
}

/// The id that `to_base62` wrote as `text`.
#[pyfunction]
#[pyo3(signature = (text, /))]
fn from_base62(py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<u64> {
    cosid_core::convert::parse_base62(&text::str_arg(py, text, "a base-62 id")?)
        .map_err(|e| errors::to_py(py, e))
}

/// Testing hook: the exception the binding raises for the core error kind called `kind`
/// (its snake_case name, one of `_ERROR_KINDS`), with `message`. Lets the tests check the
/// mapping for kinds that need a broken store or a stepped clock to happen for real.
#[pyfunction]
fn _error_for_kind(py: Python<'_>, kind: &str, message: &str) -> PyResult<Py<PyAny>> {
    let kind = errors::kind_named(kind)
        .ok_or_else(|| errors::invalid(py, format!("{kind:?} is not a core error kind")))?;
    let err = errors::for_kind(py, kind, message.to_string());
    Ok(err.into_value(py).into_any())
}

/// The C API status name of the core error kind called `kind`.
#[pyfunction]
fn _status_for_kind(py: Python<'_>, kind: &str) -> PyResult<&'static str> {
    errors::kind_named(kind)
        .map(|k| k.status_name())
        .ok_or_else(|| errors::invalid(py, format!("{kind:?} is not a core error kind")))
}

/// One event of every kind, converted as a callback receives it (for the vocabulary test).
#[pyfunction]
fn _sample_events() -> Vec<records::PyEvent> {
    cosid_core::Event::samples()
        .iter()
        .map(records::PyEvent::from)
        .collect()
}

#[pymodule]
fn _cosid(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MAX_BATCH", issue::MAX_BATCH)?;
    m.add(
        "_ERROR_KINDS",
        cosid_core::ErrorKind::ALL
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>(),
    )?;
    // The core's event vocabulary, {kind: (field, ...)}: the tests compare `Event` with it.
    let vocabulary = pyo3::types::PyDict::new(m.py());
    for kind in &cosid_core::lease::events::EVENT_KINDS {
        vocabulary.set_item(kind.name, pyo3::types::PyTuple::new(m.py(), kind.fields)?)?;
    }
    m.add("_EVENT_KINDS", vocabulary)?;
    // The core's stats fields, in order: the tests compare `Stats` with them.
    m.add(
        "_STATS_FIELDS",
        pyo3::types::PyTuple::new(
            m.py(),
            cosid_core::lease::stats::STATS_FIELDS
                .iter()
                .map(|f| f.name),
        )?,
    )?;
    runtime::register_c_exit();
    m.add_class::<runtime::PyRuntime>()?;
    m.add_class::<runtime::PyGenerator>()?;
    m.add_class::<records::PyIdParts>()?;
    m.add_class::<records::PyLayout>()?;
    m.add_class::<records::PyStats>()?;
    m.add_class::<records::PyEvent>()?;
    m.add_function(wrap_pyfunction!(to_base62, m)?)?;
    m.add_function(wrap_pyfunction!(_sample_events, m)?)?;
    m.add_function(wrap_pyfunction!(from_base62, m)?)?;
    m.add_function(wrap_pyfunction!(text::format_id, m)?)?;
    m.add_function(wrap_pyfunction!(text::parse_id, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(_error_for_kind, m)?)?;
    m.add_function(wrap_pyfunction!(_status_for_kind, m)?)?;
    // `add` appended every name, private ones too; export the public ones only, sorted (the
    // names the stub's `__all__` lists), so no second list of them is kept here.
    let mut public: Vec<String> = m
        .index()?
        .iter()
        .map(|name| name.extract::<String>())
        .collect::<PyResult<_>>()?;
    public.retain(|name| !name.starts_with('_'));
    public.sort();
    m.setattr("__all__", public)?;
    Ok(())
}
