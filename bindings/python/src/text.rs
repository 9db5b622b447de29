//! `format_id` and `parse_id`: id text in a named form with options (`cosid_core::convert::
//! TextFormat`), the same spec text as `cosid --format` and the C and Node functions.

use crate::{errors, issue, records::PyLayout};
use cosid_core::convert::{self, TextFormat};
use cosid_core::Layout;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// A `str` argument as text; a `TypeError` naming `what` for another type.
pub(crate) fn str_arg(py: Python<'_>, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    let Ok(s) = obj.cast::<PyString>() else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{what} must be a str, not {}",
            errors::type_name(obj)
        )));
    };
    Ok(errors::text(py, s, what)?.into_owned())
}

/// A `Layout` (e.g. `Runtime.layout`) or a preset's name.
fn layout_arg(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Layout> {
    if let Ok(l) = obj.cast::<PyLayout>() {
        return l.get().to_core().map_err(|e| errors::to_py(py, e));
    }
    let name = str_arg(py, obj, "layout (a Layout or a preset name)")?;
    convert::preset_layout(&name).map_err(|e| errors::to_py(py, e))
}

fn spec_arg(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<TextFormat> {
    TextFormat::parse(&str_arg(py, obj, "format")?).map_err(|e| errors::to_py(py, e))
}

/// The text of `id` in `format` (`"dec"`, `"hex"`, `"base62"`/`"radix62"`, `"radix36"`,
/// `"friendly"`, with options such as `"friendly,zone=Asia/Shanghai,pad-start=true"`) for
/// `layout` (a `Layout` or a preset name; default `"millis"`).
#[pyfunction]
#[pyo3(signature = (id, format, /, *, layout = None))]
pub(crate) fn format_id(
    py: Python<'_>,
    id: &Bound<'_, PyAny>,
    format: &Bound<'_, PyAny>,
    layout: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let id = issue::id_arg(py, id)?;
    let f = spec_arg(py, format)?;
    let l = layout.map_or(Ok(Layout::MILLIS), |l| layout_arg(py, l))?;
    f.format(&l, id).map_err(|e| errors::to_py(py, e))
}

/// The id that `format_id` wrote as `text` with the same `format` and `layout`;
/// `InvalidArgumentError` for any other text.
#[pyfunction]
#[pyo3(signature = (text, format, /, *, layout = None))]
pub(crate) fn parse_id(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    format: &Bound<'_, PyAny>,
    layout: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    let text = str_arg(py, text, "id text")?;
    let f = spec_arg(py, format)?;
    let l = layout.map_or(Ok(Layout::MILLIS), |l| layout_arg(py, l))?;
    f.parse_id(&l, &text).map_err(|e| errors::to_py(py, e))
}
