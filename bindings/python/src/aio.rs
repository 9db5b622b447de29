//! The `..._async` id methods: awaitables for asyncio that never wait on the event loop.
//!
//! An awaitable does nothing until it is first awaited, like a coroutine. Then comes the fast
//! path: the core's non-blocking `try_next` / `try_reserve` on the loop's thread, and the value
//! at once, with no future, no thread hop and no loop call. Only when the core says "wait" (the
//! next time unit, a window being renewed, no slot yet) does the request go to its generator's
//! waiting thread ([`Waiter`]: one per generator, serving its queue in order), which waits in the
//! core (up to `max-wait`) without the GIL and settles an asyncio future on the loop's thread
//! with `loop.call_soon_threadsafe`; the awaitable awaits that future, so the loop runs other
//! tasks meanwhile. Errors arrive at the `await`, as the same exception classes as the
//! synchronous methods'.
//!
//! Cancelling the awaiting task cancels the future: a request whose future is done before its
//! wait starts is dropped, and ids issued for one cancelled during its wait are dropped when
//! it is settled (skipped ids, never an id twice).

use crate::buffer::U64Buffer;
use crate::{errors, issue};
use cosid_core::{Error, Generator, Reservation, TryNext};
use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// What an awaitable asks for.
enum Job {
    One { text: bool },
    Batch(usize),
    Into(Py<PyAny>),
}

enum State {
    /// Not awaited yet.
    Start {
        g: Arc<Generator>,
        waiter: Arc<Waiter>,
        job: Job,
    },
    /// An error to raise at the first `await` (a bad argument).
    Failed(PyErr),
    /// Awaiting the future the waiting thread settles (`it` is its `__await__` iterator).
    Waiting { fut: Py<PyAny>, it: Py<PyAny> },
    Done,
}

/// The awaitable every `..._async` method returns. A coroutine as far as `asyncio` is
/// concerned (`__await__`, `send`, `throw`, `close`): `await` it, or pass it to
/// `asyncio.create_task`, `gather`, `wait_for` or `run`.
#[pyclass(module = "cosid._cosid", name = "IdAwaitable")]
pub(crate) struct IdAwaitable {
    state: State,
}

impl IdAwaitable {
    fn new(g: &Arc<Generator>, waiter: &Arc<Waiter>, job: Job) -> Self {
        IdAwaitable {
            state: State::Start {
                g: g.clone(),
                waiter: waiter.clone(),
                job,
            },
        }
    }
}

/// `g.next_async()` (`text`: `next_str_async()`).
pub(crate) fn one(g: &Arc<Generator>, waiter: &Arc<Waiter>, text: bool) -> IdAwaitable {
    IdAwaitable::new(g, waiter, Job::One { text })
}

/// `g.next_batch_async(n)`: `n` is checked now, its error raised at the `await`.
pub(crate) fn batch(
    py: Python<'_>,
    g: &Arc<Generator>,
    waiter: &Arc<Waiter>,
    n: &Bound<'_, PyAny>,
) -> IdAwaitable {
    match issue::batch_size(py, n) {
        Ok(n) => IdAwaitable::new(g, waiter, Job::Batch(n)),
        Err(e) => IdAwaitable {
            state: State::Failed(e),
        },
    }
}

/// `g.next_into_async(buffer)`.
pub(crate) fn into_buffer(
    g: &Arc<Generator>,
    waiter: &Arc<Waiter>,
    buffer: &Bound<'_, PyAny>,
) -> IdAwaitable {
    IdAwaitable::new(g, waiter, Job::Into(buffer.clone().unbind()))
}

fn stop(value: Py<PyAny>) -> PyErr {
    PyStopIteration::new_err((value,))
}

#[pymethods]
impl IdAwaitable {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.step(py, None)
    }

    fn send(&mut self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.step(py, Some(value))
    }

    #[pyo3(signature = (typ, val=None, tb=None))]
    fn throw(
        &mut self,
        py: Python<'_>,
        typ: &Bound<'_, PyAny>,
        val: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Waiting { fut, it } => {
                // Into the future's iterator (which raises it: the future stays as it is; a
                // task being cancelled has cancelled it already).
                let r = match (val, tb) {
                    (None, None) => it.bind(py).call_method1("throw", (typ,)),
                    _ => it.bind(py).call_method1("throw", (typ, val, tb)),
                };
                if r.is_ok() {
                    self.state = State::Waiting { fut, it };
                }
                r.map(Bound::unbind)
            }
            _ => Err(thrown(typ, val)),
        }
    }

    /// Stops waiting: the future (if any) is cancelled, the ids issued for it are dropped.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if let State::Waiting { fut, .. } = std::mem::replace(&mut self.state, State::Done) {
            fut.bind(py).call_method0("cancel")?;
        }
        Ok(())
    }
}

/// The exception `throw(typ, val)` raises.
fn thrown(typ: &Bound<'_, PyAny>, val: Option<&Bound<'_, PyAny>>) -> PyErr {
    if typ.is_instance_of::<pyo3::exceptions::PyBaseException>() {
        return PyErr::from_value(typ.clone());
    }
    let made = match val {
        Some(v) if v.is_instance_of::<pyo3::exceptions::PyBaseException>() => Ok(v.clone()),
        Some(v) if !v.is_none() => typ.call1((v,)),
        _ => typ.call0(),
    };
    match made {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

impl IdAwaitable {
    fn step(&mut self, py: Python<'_>, value: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Start { g, waiter, job } => self.start(py, g, waiter, job),
            State::Failed(e) => Err(e),
            State::Waiting { fut, it } => {
                let r = match value {
                    Some(v) if !v.is_none() => it.bind(py).call_method1("send", (v,)),
                    _ => it.bind(py).call_method0("__next__"),
                };
                if r.is_ok() {
                    self.state = State::Waiting { fut, it };
                }
                r.map(Bound::unbind)
            }
            State::Done => Err(PyRuntimeError::new_err(
                "this awaitable of a cosid ..._async call was awaited already; call the \
                 method again for more ids",
            )),
        }
    }

    /// The first `await`: the fast path, or the request handed to the waiting thread.
    fn start(
        &mut self,
        py: Python<'_>,
        g: Arc<Generator>,
        waiter: Arc<Waiter>,
        job: Job,
    ) -> PyResult<Py<PyAny>> {
        let mut runs = Vec::new();
        match &job {
            Job::One { text } => match g.try_next() {
                Ok(TryNext::Ready(id)) => return Err(stop(one_value(py, id, *text)?)),
                Ok(TryNext::Wait { .. }) => {}
                Err(e) => return Err(errors::to_py(py, e)),
            },
            Job::Batch(_) | Job::Into(_) => {
                let n = match &job {
                    Job::Into(buffer) => U64Buffer::get(buffer.bind(py))?.len(),
                    Job::Batch(n) => *n,
                    Job::One { .. } => unreachable!(),
                };
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
                        Err(e) => return Err(errors::to_py(py, e)),
                    }
                }
                if got == n {
                    let ids = compose(&g, &runs, None);
                    return Err(stop(many_value(py, &job, ids)?));
                }
                return self.wait(py, g, waiter, Request::new(job, n, runs));
            }
        }
        self.wait(py, g, waiter, Request::new(job, 1, runs))
    }

    fn wait(
        &mut self,
        py: Python<'_>,
        g: Arc<Generator>,
        waiter: Arc<Waiter>,
        mut request: Request,
    ) -> PyResult<Py<PyAny>> {
        let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
        let fut = event_loop.call_method0("create_future")?;
        let it = fut.call_method0("__await__")?;
        request.fut = Some(fut.clone().unbind());
        request.event_loop = Some(event_loop.unbind());
        waiter.enqueue(&g, request)?;
        self.state = State::Waiting {
            fut: fut.unbind(),
            it: it.clone().unbind(),
        };
        self.step(py, None)
    }
}

fn one_value(py: Python<'_>, id: u64, text: bool) -> PyResult<Py<PyAny>> {
    if text {
        let mut buf = [0u8; cosid_core::convert::BASE62_WIDTH];
        Ok(PyString::new(py, cosid_core::convert::write_base62(id, &mut buf)).into_any().unbind())
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
    fn new(job: Job, n: usize, runs: Vec<Reservation>) -> Self {
        Request {
            job,
            n,
            runs,
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
        let outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner()).take();
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
