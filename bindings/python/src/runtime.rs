//! `cosid.Runtime` and `cosid.Generator`.
//!
//! Thread-safe: one `Runtime` may be shared by any number of Python threads; ids of one
//! generator are unique across every process of the namespace and strictly increase per
//! generator within one binding (the core's contract).
//!
//! The GIL is released around every call that can block: construction (acquiring a slot in the
//! store), `close` (releasing it, joining the keeper thread), and every wait of an id call.
//! Construction and long id waits can be interrupted with Ctrl-C (`crate::interrupt`).
//!
//! Why `close` releases the GIL: not for any lock of the core (the keeper holds none while a
//! callback runs, and a callback may itself call `close`), but because `close` blocks on two
//! things that may need it or take long: it joins the keeper thread, which may be waiting for
//! the GIL to run an event callback (holding the GIL across the join would deadlock), and it
//! waits for the store to write the release (up to the store's timeout, during which other
//! Python threads should run).
//!
//! Fork: what an inherited runtime does in a `fork()` child is the core's rule (`cosid.fork`:
//! `new-slot` re-leases on first use, `fail` raises `ForkedError`). The binding adds nothing to
//! it; closing or dropping an inherited runtime is the core's `close`, which never touches the
//! parent's keeper thread or slot.

use crate::aio::{self, Waiter};
use crate::records::{PyEvent, PyIdParts, PyLayout, PyStats};
use crate::{config, errors, interrupt, issue};
use cosid_core::{Event, Generator};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Set by `_shutdown` (an `atexit` hook of the package): event callbacks stop calling into
/// Python once the interpreter starts to finalize.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// Whether the interpreter is going (no more calls into Python from other threads).
pub(crate) fn shutting_down() -> bool {
    SHUTTING_DOWN.load(Ordering::Relaxed)
}

/// Every live runtime, so `_shutdown` can close them (releasing their slots) before the
/// interpreter finalizes.
static LIVE: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// One core runtime, shared by the `Runtime` object and the `Generator`s it handed out.
struct Shared {
    rt: cosid_core::Runtime,
    namespace: String,
    /// The waiting thread's queue of each generator's `..._async` calls, by generator name.
    waiters: Mutex<HashMap<String, Arc<Waiter>>>,
}

impl Shared {
    fn waiter(&self, name: &str) -> Arc<Waiter> {
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        waiters.entry(name.to_string()).or_default().clone()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.rt.is_closed() {
            return;
        }
        // The last Python handle is gone without close(): close here, with the GIL released
        // (the keeper thread may be waiting for it). In a forked child this only closes the
        // generators and leaves the parent's slot alone (the core's rule).
        let rt = &self.rt;
        Python::attach(|py| py.detach(|| drop(rt.close())));
    }
}

/// Closes every live runtime. Registered with `atexit` by `cosid/__init__.py`.
#[pyfunction]
pub(crate) fn _shutdown(py: Python<'_>) {
    let live: Vec<Arc<Shared>> = {
        let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        let alive = live.iter().filter_map(Weak::upgrade).collect();
        live.clear();
        alive
    };
    py.detach(|| {
        for s in &live {
            if !s.rt.is_closed() {
                // Errors (a store gone, a forked child) cannot be reported at exit.
                let _ = s.rt.close();
            }
        }
    });
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
}

extern "C" {
    fn atexit(f: extern "C" fn()) -> std::os::raw::c_int;
}

/// Registers [`close_at_c_exit`] with the C library's `atexit` (once, at module import).
pub(crate) fn register_c_exit() {
    // SAFETY: `atexit` only stores the function pointer; the function is `extern "C"` and
    // never unwinds (the core's close returns errors, and panics are caught below).
    unsafe {
        atexit(close_at_c_exit);
    }
}

/// The C library's exit handler: closes every runtime still open, without calling into Python.
/// Python's own exit runs `_shutdown` first (through `atexit`), which leaves nothing to do here;
/// this one is for hosts that end the process with `exit()` without running Python's `atexit`,
/// such as uWSGI's master process at shutdown.
extern "C" fn close_at_c_exit() {
    // From here on, event listeners no longer call into Python.
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    let _ = std::panic::catch_unwind(|| {
        let live: Vec<Arc<Shared>> = {
            let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
            let alive = live.iter().filter_map(Weak::upgrade).collect();
            live.clear();
            alive
        };
        for s in &live {
            if !s.rt.is_closed() {
                let _ = s.rt.close();
            }
        }
        // `live` drops here: every runtime in it is closed, so `Shared::drop` does nothing.
    });
}

/// A core event listener that calls a Python callable with an `Event`. It takes the GIL (it
/// runs on the keeper's thread); an exception the callable raises goes to
/// `sys.unraisablehook` (printed by default) and never reaches the keeper.
fn python_listener(callback: Py<PyAny>) -> impl Fn(&Event) + Send + Sync + 'static {
    move |event: &Event| {
        if SHUTTING_DOWN.load(Ordering::Relaxed) {
            return;
        }
        Python::attach(|py| {
            let result = Py::new(py, PyEvent::from(event))
                .and_then(|ev| callback.bind(py).call1((ev,)).map(drop));
            if let Err(err) = result {
                err.write_unraisable(py, Some(callback.bind(py)));
            }
        });
    }
}

fn check_callable(callback: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    if !callback.is_callable() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "an event callback must be callable (a function taking one Event), not {}",
            errors::type_name(callback)
        )));
    }
    Ok(callback.clone().unbind())
}

/// A running id source: a slot (leased from the configured store, or static) kept by a
/// background thread, and any number of named generators sharing it.
#[pyclass(frozen, weakref, module = "cosid._cosid", name = "Runtime")]
pub(crate) struct PyRuntime {
    shared: Arc<Shared>,
    /// The default generator, kept apart so `next()` reaches it with one pointer.
    default: Arc<Generator>,
    waiter: Arc<Waiter>,
}

#[pymethods]
impl PyRuntime {
    #[new]
    #[pyo3(signature = (config=None, *, on_event=None))]
    fn new(
        py: Python<'_>,
        config: Option<&Bound<'_, PyAny>>,
        on_event: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let config = config::load(py, config)?;
        let namespace = config.namespace.clone();
        let mut builder = cosid_core::Runtime::builder().config(config);
        if let Some(cb) = on_event.filter(|c| !c.is_none()) {
            builder = builder.on_event(python_listener(check_callable(cb)?));
        }
        // Acquiring a slot can wait up to `acquire-timeout`: interruptible. A runtime built after
        // the caller was interrupted is closed at once, releasing its slot.
        let rt = interrupt::wait(
            py,
            move || builder.build(),
            |rt: cosid_core::Runtime| drop(rt.close()),
        )?
        .map_err(|e| errors::to_py(py, e))?;
        let default = rt.default_generator().clone();
        let shared = Arc::new(Shared {
            rt,
            namespace,
            waiters: Mutex::default(),
        });
        let waiter = shared.waiter(default.name());
        {
            let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&shared));
        }
        Ok(PyRuntime {
            shared,
            default,
            waiter,
        })
    }

    /// One id.
    fn next(&self, py: Python<'_>) -> PyResult<u64> {
        issue::one(py, &self.default)
    }

    /// `n` ids, in increasing order; all or nothing (an error returns no id).
    fn next_batch<'py>(
        &self,
        py: Python<'py>,
        n: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        issue::batch(py, &self.default, n)
    }

    /// Fills a writable buffer of 64-bit integers with ids, without a copy; returns the count.
    /// All or nothing: on an error the buffer is left as it was.
    fn next_into(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<usize> {
        issue::into_buffer(py, &self.default, buffer)
    }

    /// One id as 11 base-62 characters (sorting the strings sorts the ids).
    fn next_str<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        issue::one_str(py, &self.default)
    }

    /// A coroutine of one id: taken at once when one is available, else awaited off the event
    /// loop.
    fn next_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        aio::one(py, &self.default, &self.waiter, false)
    }

    /// A coroutine of `n` ids (as `next_batch`), awaited off the event loop when they must wait.
    fn next_batch_async<'py>(
        &self,
        py: Python<'py>,
        n: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio::batch(py, &self.default, &self.waiter, n)
    }

    /// A coroutine filling a buffer with ids (as `next_into`), awaited off the event loop when
    /// they must wait.
    fn next_into_async<'py>(
        &self,
        py: Python<'py>,
        buffer: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio::into_buffer(py, &self.default, &self.waiter, buffer)
    }

    /// A coroutine of one id as base-62 text (as `next_str`).
    fn next_str_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        aio::one(py, &self.default, &self.waiter, true)
    }

    /// An id (int, or the base-62 text `next_str` returns) taken apart with this runtime's
    /// layout.
    fn parse(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<PyIdParts> {
        let id = if let Ok(s) = id.cast::<PyString>() {
            cosid_core::convert::parse_base62(&errors::text(py, s, "the base-62 id")?)
                .map_err(|e| errors::to_py(py, e))?
        } else {
            issue::id_arg(py, id)?
        };
        cosid_core::convert::decode(self.shared.rt.layout(), id)
            .map(PyIdParts::from)
            .map_err(|e| errors::to_py(py, e))
    }

    /// The generator called `name` (created on first use), sharing this runtime's slot. Each
    /// name is its own id space. `""` is the default generator.
    fn generator(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<PyGenerator> {
        let Ok(name) = name.cast::<PyString>() else {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "a generator name must be a str, not {}",
                errors::type_name(name)
            )));
        };
        let name = errors::text(py, name, "the generator name")?;
        let generator = self
            .shared
            .rt
            .generator(&name)
            .map_err(|e| errors::to_py(py, e))?;
        Ok(PyGenerator {
            waiter: self.shared.waiter(&name),
            _shared: self.shared.clone(),
            generator,
        })
    }

    /// The runtime's counters.
    fn stats(&self) -> PyStats {
        PyStats::from(self.shared.rt.stats())
    }

    /// Calls `callback(event)` on every later event (on the keeper's thread, with the GIL).
    fn on_event(&self, callback: &Bound<'_, PyAny>) -> PyResult<()> {
        let cb = check_callable(callback)?;
        self.shared.rt.subscribe(python_listener(cb));
        Ok(())
    }

    /// Ordered shutdown: generators stop, the slot is released with the exact last timestamp.
    /// Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let rt = &self.shared.rt;
        // Without the GIL: the join of the keeper thread and the store's release (module docs).
        match py.detach(|| rt.close()) {
            Ok(()) => Ok(()),
            // Closed before, by this call's caller or another thread: closed is what the caller
            // asked for.
            Err(e) if e.kind() == cosid_core::ErrorKind::Closed => Ok(()),
            Err(e) => Err(errors::to_py(py, e)),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (_exc_type, _exc, _tb, /))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// The id layout.
    #[getter]
    fn layout(&self) -> PyLayout {
        PyLayout::from(self.shared.rt.layout())
    }

    /// The namespace whose slots this runtime leases.
    #[getter]
    fn namespace(&self) -> &str {
        &self.shared.namespace
    }

    /// The slot ids are issued with now (`None` while no slot is bound).
    #[getter]
    fn slot(&self) -> Option<u32> {
        let b = self.shared.rt.binding();
        (b.status == cosid_core::WindowStatus::Active).then_some(b.slot)
    }

    /// Whether `close()` ran.
    #[getter]
    fn closed(&self) -> bool {
        self.shared.rt.is_closed()
    }

    fn __repr__(&self) -> String {
        let slot = self.slot().map_or("None".to_string(), |s| s.to_string());
        format!(
            "<cosid.Runtime namespace={:?} slot={slot} closed={}>",
            self.shared.namespace,
            if self.closed() { "True" } else { "False" }
        )
    }
}

/// A named generator of a `Runtime` (`Runtime.generator(name)`): its own id space on the
/// runtime's slot. Keeps the runtime alive; closed when the runtime closes.
#[pyclass(frozen, module = "cosid._cosid", name = "Generator")]
pub(crate) struct PyGenerator {
    _shared: Arc<Shared>,
    generator: Arc<Generator>,
    waiter: Arc<Waiter>,
}

#[pymethods]
impl PyGenerator {
    /// One id.
    fn next(&self, py: Python<'_>) -> PyResult<u64> {
        issue::one(py, &self.generator)
    }

    /// `n` ids, in increasing order; all or nothing (an error returns no id).
    fn next_batch<'py>(
        &self,
        py: Python<'py>,
        n: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        issue::batch(py, &self.generator, n)
    }

    /// Fills a writable buffer of 64-bit integers with ids; returns the count. All or nothing:
    /// on an error the buffer is left as it was.
    fn next_into(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<usize> {
        issue::into_buffer(py, &self.generator, buffer)
    }

    /// One id as 11 base-62 characters.
    fn next_str<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        issue::one_str(py, &self.generator)
    }

    /// A coroutine of one id: taken at once when one is available, else awaited off the event
    /// loop.
    fn next_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        aio::one(py, &self.generator, &self.waiter, false)
    }

    /// A coroutine of `n` ids (as `next_batch`), awaited off the event loop when they must wait.
    fn next_batch_async<'py>(
        &self,
        py: Python<'py>,
        n: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio::batch(py, &self.generator, &self.waiter, n)
    }

    /// A coroutine filling a buffer with ids (as `next_into`), awaited off the event loop when
    /// they must wait.
    fn next_into_async<'py>(
        &self,
        py: Python<'py>,
        buffer: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aio::into_buffer(py, &self.generator, &self.waiter, buffer)
    }

    /// A coroutine of one id as base-62 text (as `next_str`).
    fn next_str_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        aio::one(py, &self.generator, &self.waiter, true)
    }

    /// The generator's name.
    #[getter]
    fn name(&self) -> &str {
        self.generator.name()
    }

    fn __repr__(&self) -> String {
        format!("<cosid.Generator name={:?}>", self.generator.name())
    }
}
