//! `Runtime(config)`: what the Python argument means, and a `dict` turned into the core's
//! configuration document.
//!
//! The rule that tells a path from a document, with no guessing:
//! - `None`: the embedded default (the SQLite store at `$XDG_STATE_HOME/cosid/slots.db`);
//! - an `os.PathLike` (e.g. `pathlib.Path`): always a path, which must name a readable file;
//! - a `str` with no newline that names an existing file: that file;
//! - any other `str`: a YAML (or JSON) document;
//! - a mapping (`dict`): the document itself, as `yaml.safe_load` would have returned it.

use crate::errors::{self, type_name};
use cosid_core::Config;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyMapping, PyString, PyTuple};
use serde_yaml_ng::{Mapping, Number, Value};
use std::path::PathBuf;

/// How deep a `dict` may nest (the schema needs 4 levels; this stops a self-referencing dict).
const MAX_DEPTH: usize = 16;

const ACCEPTED: &str = "None, a YAML/JSON str, a dict, or a path (str or os.PathLike)";

/// Reads the `config` argument of `Runtime`.
pub(crate) fn load(py: Python<'_>, config: Option<&Bound<'_, PyAny>>) -> PyResult<Config> {
    let core = |r: cosid_core::Result<Config>| r.map_err(|e| errors::to_py(py, e));
    let Some(obj) = config.filter(|c| !c.is_none()) else {
        return core(Config::embedded_default());
    };
    if let Ok(s) = obj.cast::<PyString>() {
        let text: &str = &errors::text(py, s, "the configuration")?;
        return core(Config::from_text(text));
    }
    if obj.hasattr(pyo3::intern!(py, "__fspath__"))? {
        let path: PathBuf = obj.extract()?;
        return core(Config::from_path(&path));
    }
    if obj.is_instance_of::<PyDict>() || obj.is_instance_of::<PyMapping>() {
        let doc = to_value(py, obj, "config", 0)?;
        return core(Config::from_value(&doc));
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "config must be {ACCEPTED}, not {}",
        type_name(obj)
    )))
}

/// A Python value as a YAML value. `path` names where it sits, for messages.
fn to_value(py: Python<'_>, obj: &Bound<'_, PyAny>, path: &str, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(errors::config(
            py,
            format!(
                "{path} nests more than {MAX_DEPTH} levels deep; is the dict referencing itself?"
            ),
        ));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(n) = obj.extract::<i64>() {
            return Ok(Value::Number(Number::from(n)));
        }
        if let Ok(n) = obj.extract::<u64>() {
            return Ok(Value::Number(Number::from(n)));
        }
        return Err(errors::config(
            py,
            format!("{path} = {} does not fit in 64 bits", obj.str()?),
        ));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::Number(Number::from(f.value())));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(errors::text(py, s, path)?.into_owned()));
    }
    if obj.is_instance_of::<PyDict>() || obj.is_instance_of::<PyMapping>() {
        let mut map = Mapping::new();
        let items = obj.call_method0(pyo3::intern!(py, "items"))?;
        for item in items.try_iter()? {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            let Ok(key) = k.cast::<PyString>() else {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "{path} has the key {} of type {}; configuration keys are str",
                    k.repr()?,
                    type_name(&k)
                )));
            };
            let key = errors::text(py, key, &format!("a key of {path}"))?.into_owned();
            let child = to_value(py, &v, &format!("{path}[{key:?}]"), depth + 1)?;
            map.insert(Value::String(key), child);
        }
        return Ok(Value::Mapping(map));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let mut seq = Vec::new();
        for (i, item) in obj.try_iter()?.enumerate() {
            seq.push(to_value(py, &item?, &format!("{path}[{i}]"), depth + 1)?);
        }
        return Ok(Value::Sequence(seq));
    }
    if obj.hasattr(pyo3::intern!(py, "__fspath__"))? {
        let p: PathBuf = obj.extract()?;
        return Ok(Value::String(p.to_string_lossy().into_owned()));
    }
    let datetime = py.import("datetime")?;
    if obj.is_instance(&datetime.getattr("timedelta")?)? {
        let days: i128 = obj.getattr("days")?.extract()?;
        let seconds: i128 = obj.getattr("seconds")?.extract()?;
        let us: i128 = obj.getattr("microseconds")?.extract()?;
        let micros = (days * 86_400 + seconds) * 1_000_000 + us;
        if micros < 0 || micros % 1000 != 0 {
            return Err(errors::config(
                py,
                format!(
                    "{path} = {} is not a whole, non-negative number of milliseconds",
                    obj.repr()?
                ),
            ));
        }
        return Ok(Value::String(format!("{}ms", micros / 1000)));
    }
    if obj.is_instance(&datetime.getattr("datetime")?)? {
        if obj.getattr("tzinfo")?.is_none() {
            return Err(errors::config(
                py,
                format!(
                    "{path} = {} has no time zone; give it one (e.g. tzinfo=datetime.timezone.utc)",
                    obj.repr()?
                ),
            ));
        }
        let text: String = obj.call_method0("isoformat")?.extract()?;
        return Ok(Value::String(text));
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "{path} is a {}; configuration values are str, int, float, bool, None, list, dict, \
         os.PathLike, datetime.timedelta or an aware datetime.datetime",
        type_name(obj)
    )))
}
