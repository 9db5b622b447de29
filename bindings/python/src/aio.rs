//! The `..._async` id methods: coroutines for asyncio that never wait on the event loop.
//!
//! The fast path runs at the call, on the loop's thread: the core's non-blocking `try_next` /
//! `try_reserve`, and the ids in a coroutine that only returns them (`cosid._aio.ready`): no
//! future, no thread, no loop call. Only when the core says "wait" (the next time unit, a window
//! being renewed, no slot yet) is the request handed, when the coroutine is first awaited
//! (`cosid._aio.waiting`), to its generator's waiting thread ([`Waiter`]: one per generator,
//! serving its queue in order), which waits in the core (up to `max-wait`) without the GIL and
//! settles an asyncio future on the loop's thread with `loop.call_soon_threadsafe`; the loop runs
//! other tasks meanwhile. Errors arrive at the `await`, as the same exception classes as the
//! synchronous methods'.
//!
//! Cancelling the awaiting task cancels the future: a request whose future is done before its
//! wait starts is dropped, and ids issued for one cancelled during its wait are dropped when
//! it is settled (skipped ids, never an id twice).

use crate::buffer::U64Buffer;
use crate::{errors, issue};
use cosid_core::{Error, Generator, Reservation, TryNext};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyString};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// What a call asks for.
enum Job {
    One { text: bool },
    Batch,
    Into(Py<PyAny>),
}

/// `cosid._aio`'s `ready`, `failed` and `waiting`.
static COROUTINES: PyOnceLock<[Py<PyAny>; 3]> = PyOnceLock::new();

fn coroutine<'py>(py: Python<'py>, which: usize, arg: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let fs = COROUTINES.get_or_try_init(py, || -> PyResult<_> {
        let m = py.import("cosid._aio")?;
        Ok([
            m.getattr("ready")?.unbind(),
            m.getattr("failed")?.unbind(),
            m.getattr("waiting")?.unbind(),
        ])
    })?;
    fs[which].bind(py).call1((arg,))
}

fn ready(py: Python<'_>, value: Py<PyAny>) -> PyResult<Bound<'_, PyAny>> {
    coroutine(py, 0, value)
}

fn failed(py: Python<'_>, error: PyErr) -> PyResult<Bound<'_, PyAny>> {
    coroutine(py, 1, error.into_value(py).into_any())
}

/// A coroutine that hands `request` to the waiting thread when first awaited.
fn waiting<'py>(
    py: Python<'py>,
    g: &Arc<Generator>,
    waiter: &Arc<Waiter>,
    request: Request,
) -> PyResult<Bound<'py, PyAny>> {
    let start = Start(Mutex::new(Some((g.clone(), waiter.clone(), request))));
    coroutine(py, 2, Py::new(py, start)?.into_any())
}

/// `g.next_async()` (`text`: `next_str_async()`).
pub(crate) fn one<'py>(
    py: Python<'py>,
    g: &Arc<Generator>,
    waiter: &Arc<Waiter>,
    text: bool,
) -> PyResult<Bound<'py, PyAny>> {
    match g.try_next() {
        Ok(TryNext::Ready(id)) => ready(py, one_value(py, id, text)?),
        Ok(TryNext::Wait { .. }) => waiting(py, g, waiter, Request::new(Job::One { text }, 1)),
        Err(e) => failed(py, errors::to_py(py, e)),
    }
}

/// `g.next_batch_async(n)`.
pub(crate) fn batch<'py>(
    py: Python<'py>,
    g: &Arc<Generator>,
    waiter: &Arc<Waiter>,
    n: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    match issue::batch_size(py, n) {
        Ok(n) => many(py, g, waiter, Job::Batch, n),
        Err(e) => failed(py, e),
    }
}

/// `g.next_into_async(buffer)`.
pub(crate) fn into_buffer<'py>(
    py: Python<'py>,
    g: &Arc<Generator>,
    waiter: &Arc<Waiter>,
    buffer: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    match U64Buffer::get(buffer) {
        Ok(buf) => {
            let n = buf.len();
            drop(buf);
            many(py, g, waiter, Job::Into(buffer.clone().unbind()), n)
        }
        Err(e) => failed(py, e),
    }
}

/// `n` ids: all at once on the fast path, else the runs in hand and the rest from the waiting
/// thread.
fn many<'py>(
    py: Python<'py>,
    g: &Arc<Generator>,
    waiter: &Arc<Waiter>,
    job: Job,
    n: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let mut runs = Vec::new();
    let mut got = 0;
    while got < n {
        let want = (n - got).min(u32::MAX as usize) as u32;
        match g.try_reserve(want) {
            Ok(TryNext::Ready(r)) => {
                got += r.count as usize;
                runs.push(r);
            }
            Ok(TryNext::Wait { .. }) => break,
            // The runs in hand are dropped: skipped ids.
            Err(e) => return failed(py, errors::to_py(py, e)),
        }
    }
    if got == n {
        return match many_value(py, &job, compose(g, &runs, None)) {
            Ok(v) => ready(py, v),
            Err(e) => failed(py, e),
        };
    }
    let mut request = Request::new(job, n);
    request.runs = runs;
    waiting(py, g, waiter, request)
}

/// Called by `cosid._aio.waiting` when first awaited: a future of the running loop, and the
/// request for it in the waiting thread's queue.
#[pyclass(frozen, module = "cosid._cosid", name = "_Start")]
struct Start(Mutex<Option<Pending>>);

/// A request not handed to its waiting thread yet, with the generator and the thread's queue.
type Pending = (Arc<Generator>, Arc<Waiter>, Request);

#[pymethods]
impl Start {
    fn __call__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let taken = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some((g, waiter, mut request)) = taken else {
            return Err(PyRuntimeError::new_err("a cosid wait was started twice"));
        };
        let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
        let fut = event_loop.call_method0("create_future")?;
        request.fut = Some(fut.clone().unbind());
        request.event_loop = Some(event_loop.unbind());
        waiter.enqueue(&g, request)?;
        Ok(fut)
    }
}

fn one_value(py: Python<'_>, id: u64, text: bool) -> PyResult<Py<PyAny>> {
    if text {
        let mut buf = [0u8; cosid_core::convert::BASE62_WIDTH];
        Ok(
            PyString::new(py, cosid_core::convert::write_base62(id, &mut buf))
                .into_any()
                .unbind(),
        )
    } else {
        Ok(id.into_pyobject(py)?.into_any().unbind())
    }
}

/// The value of a batch (`list[int]`) or of `next_into_async` (the buffer filled, its count).
fn many_value(py: Python<'_>, job: &Job, ids: Vec<u64>) -> PyResult<Py<PyAny>> {
    match job {
        Job::Into(buffer) => {
            let mut buf = U64Buffer::get(buffer.bind(py))?;
            if buf.len() != ids.len() {
                return Err(errors::invalid(
                    py,
                    format!(
                        "the buffer passed to next_into_async changed length while the ids were \
                         awaited ({} ids issued, it now holds {}); do not resize it before the \
                         await returns",
                        ids.len(),
                        buf.len()
                    ),
                ));
            }
            for (i, id) in ids.iter().enumerate() {
                buf.write(i, *id);
            }
            Ok(ids.len().into_pyobject(py)?.into_any().unbind())
        }
        _ => Ok(PyList::new(py, ids)?.into_any().unbind()),
    }
}

fn compose(g: &Generator, runs: &[Reservation], more: Option<&cosid_core::Batch<'_>>) -> Vec<u64> {
    let mut ids: Vec<u64> = runs.iter().flat_map(|r| r.ids(g.layout())).collect();
    if let Some(b) = more {
        ids.extend(b.ids());
    }
    ids
}

/// A request waiting for its generator's waiting thread.
struct Request {
    job: Job,
    /// How many ids (1 for `One`).
    n: usize,
    /// The runs reserved on the fast path before it had to wait (a batch's first ids).
    runs: Vec<Reservation>,
    fut: Option<Py<PyAny>>,
    event_loop: Option<Py<PyAny>>,
}

impl Request {
    fn new(job: Job, n: usize) -> Self {
        Request {
            job,
            n,
            runs: Vec::new(),
            fut: None,
            event_loop: None,
        }
    }
}

/// The queue of one generator's `..._async` requests that have to wait, and whether a thread
/// (of which process: a fork child has no thread) is serving it.
#[derive(Default)]
pub(crate) struct Waiter {
    state: Mutex<WaiterState>,
}

#[derive(Default)]
struct WaiterState {
    queue: VecDeque<Request>,
    serving: bool,
    pid: u32,
}

impl Waiter {
    fn enqueue(self: &Arc<Self>, g: &Arc<Generator>, request: Request) -> PyResult<()> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let pid = std::process::id();
        if state.serving && state.pid != pid {
            // Inherited over fork: the parent's thread and requests are not this process's.
            state.queue.clear();
            state.serving = false;
        }
        state.queue.push_back(request);
        if state.serving {
            return Ok(());
        }
        let (waiter, g) = (self.clone(), g.clone());
        match std::thread::Builder::new()
            .name("cosid-wait".into())
            .spawn(move || waiter.serve(&g))
        {
            Ok(_) => {
                state.serving = true;
                state.pid = pid;
                Ok(())
            }
            Err(e) => {
                state.queue.clear();
                Err(PyRuntimeError::new_err(format!(
                    "cosid could not start a thread to wait for ids on ({e})"
                )))
            }
        }
    }

    /// Serves the queue in order until it is empty. When a wait fails (the window stayed closed
    /// for `max-wait`), every request taken with it fails with the same error: they waited for
    /// the same window.
    fn serve(&self, g: &Generator) {
        loop {
            let taken: Vec<Request> = {
                let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                if state.queue.is_empty() {
                    state.serving = false;
                    return;
                }
                state.queue.drain(..).collect()
            };
            if crate::runtime::shutting_down() {
                // The interpreter is going: nobody awaits any more.
                continue;
            }
            // Requests whose future is done already (their task was cancelled) take no ids.
            let taken: Vec<Request> = Python::attach(|py| {
                taken
                    .into_iter()
                    .filter(|r| !future_done(py, r.fut.as_ref()))
                    .collect()
            });
            let mut failed: Option<(cosid_core::ErrorKind, String)> = None;
            for request in taken {
                let outcome = match &failed {
                    Some((kind, message)) => Err(Error::new(*kind, message.clone())),
                    None => issue_waiting(g, &request),
                };
                if let Err(e) = &outcome {
                    failed.get_or_insert((e.kind(), e.to_string()));
                }
                settle(request, outcome);
            }
        }
    }
}

fn future_done(py: Python<'_>, fut: Option<&Py<PyAny>>) -> bool {
    let Some(fut) = fut else { return true };
    fut.bind(py)
        .call_method0("done")
        .and_then(|d| d.is_truthy())
        .unwrap_or(true)
}

/// The ids of a request, waiting for them (without the GIL) up to `max-wait`.
fn issue_waiting(g: &Generator, request: &Request) -> cosid_core::Result<Vec<u64>> {
    if let Job::One { .. } = request.job {
        return g.next().map(|id| vec![id]);
    }
    let got: usize = request.runs.iter().map(|r| r.count as usize).sum();
    let rest = g.reserve_batch(request.n - got, |want, _, _| g.reserve_waiting(want))?;
    Ok(compose(g, &request.runs, Some(&rest)))
}

/// Hands the outcome to the request's event loop, which settles the future (unless it was
/// cancelled meanwhile: the ids are dropped). A loop that is closed is skipped the same way.
fn settle(request: Request, outcome: cosid_core::Result<Vec<u64>>) {
    let (Some(fut), Some(event_loop)) = (request.fut, request.event_loop) else {
        return;
    };
    if crate::runtime::shutting_down() {
        return;
    }
    Python::attach(|py| {
        let settle = Settle {
            fut,
            job: request.job,
            outcome: Mutex::new(Some(outcome)),
        };
        let _ = Py::new(py, settle).and_then(|s| {
            event_loop
                .bind(py)
                .call_method1("call_soon_threadsafe", (s,))
                .map(drop)
        });
    });
}

/// Settles a future on its loop's thread (called by `loop.call_soon_threadsafe`).
#[pyclass(frozen, module = "cosid._cosid", name = "_Settle")]
struct Settle {
    fut: Py<PyAny>,
    job: Job,
    outcome: Mutex<Option<cosid_core::Result<Vec<u64>>>>,
}

#[pymethods]
impl Settle {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let fut = self.fut.bind(py);
        let outcome = self
            .outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(outcome) = outcome else {
            return Ok(());
        };
        if fut.call_method0("done")?.is_truthy()? {
            return Ok(()); // cancelled: the ids are skipped
        }
        let value = outcome
            .map_err(|e| errors::to_py(py, e))
            .and_then(|ids| match &self.job {
                Job::One { text } => one_value(py, ids[0], *text),
                job => many_value(py, job, ids),
            });
        match value {
            Ok(v) => fut.call_method1("set_result", (v,))?,
            Err(e) => fut.call_method1("set_exception", (e.into_value(py),))?,
        };
        Ok(())
    }
}
