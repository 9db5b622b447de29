//! The blocking face of the network stores: each store owns one small tokio runtime
//! (current-thread, IO and timers enabled) driven by one IO thread of its own, and the
//! `SlotStore` methods hand it a future and block until its answer comes back. Every call is
//! bounded by a timeout, so a slow or dead server gives a `Store` error, never a hang. Messages
//! name the store by its redacted URL and have any password scrubbed out of the client
//! library's own text, so no credential reaches an error, a log or `Debug` output.
//!
//! Why a thread rather than `block_on` in the caller: the caller's stack is not used to poll the
//! client's (deep, in debug builds) futures, so callers with small stacks are fine; the
//! connection's background work (PostgreSQL's connection task, gRPC keep-alives) runs between
//! calls too; many calling threads do not take turns driving the IO; and the methods may be
//! called from inside another tokio runtime.

use crate::error::{Error, Result};
use std::fmt;
use std::future::Future;
use std::time::Duration;

/// The default bound on one store operation (and on connecting).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// The IO thread's stack: client futures are deep in debug builds.
const IO_STACK: usize = 8 << 20;

/// A store's runtime, timeout and the names it uses in messages.
pub(crate) struct IoRuntime {
    handle: tokio::runtime::Handle,
    /// Dropped with the store: ends the IO thread (and with it the runtime and its tasks).
    _stop: tokio::sync::oneshot::Sender<()>,
    timeout: Duration,
    /// The store URL with its password replaced by `***`.
    name: String,
    /// Credentials that must never appear in a message (scrubbed from client errors).
    secrets: Vec<String>,
}

impl fmt::Debug for IoRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoRuntime")
            .field("store", &self.name)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl IoRuntime {
    pub(crate) fn new(name: String, secrets: Vec<String>, timeout: Duration) -> Result<Self> {
        if timeout.is_zero() {
            return Err(Error::config(format!(
                "store '{name}': the operation timeout must be more than 0"
            )));
        }
        let cannot = |e: &dyn fmt::Display| {
            Error::store(format!("store {name}: cannot start its IO runtime: {e}"))
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| cannot(&e))?;
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("cosid-store-io".into())
            .stack_size(IO_STACK)
            .spawn(move || {
                // Runs until the store (holding the sender) is dropped; dropping `rt` then
                // cancels the connection tasks and closes the sockets.
                rt.block_on(async move {
                    let _ = stopped.await;
                });
            })
            .map_err(|e| cannot(&e))?;
        let secrets = secrets.into_iter().filter(|s| !s.is_empty()).collect();
        Ok(IoRuntime {
            handle,
            _stop: stop,
            timeout,
            name,
            secrets,
        })
    }

    /// The redacted store URL.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The bound on one operation.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `text` with every credential replaced by `***`.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            out = out.replace(s.as_str(), "***");
        }
        out
    }

    /// A `Store` error: "store NAME: WHAT: DETAIL", credentials scrubbed.
    pub(crate) fn error(&self, what: &str, detail: &dyn fmt::Display) -> Error {
        Error::store(self.scrub(&format!("store {}: {what}: {detail}", self.name)))
    }

    /// Runs `fut` to completion on the store's IO thread, bounded by the operation timeout, and
    /// waits for it. `Err(Failure::TimedOut)` when the bound ran out.
    pub(crate) fn run<T, E, F>(&self, fut: F) -> Result<T, Failure<E>>
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let timeout = self.timeout;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let out = match tokio::time::timeout(timeout, fut).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(Failure::Failed(e)),
                Err(_) => Err(Failure::TimedOut),
            };
            let _ = tx.send(out);
        });
        // The task answers within `timeout`; the wait is bounded too, so that even a wedged IO
        // thread cannot hang the caller.
        match rx.recv_timeout(timeout.saturating_mul(2) + Duration::from_secs(1)) {
            Ok(out) => out,
            Err(_) => Err(Failure::TimedOut),
        }
    }

    /// The `Store` error for a failed or timed-out `what`.
    pub(crate) fn failure<E: fmt::Display>(&self, what: &str, f: Failure<E>) -> Error {
        match f {
            Failure::Failed(e) => self.error(what, &e),
            Failure::TimedOut => self.error(
                what,
                &format!(
                    "no answer within {} ms (server slow, unreachable or down)",
                    self.timeout.as_millis()
                ),
            ),
        }
    }
}

/// Why a bounded operation did not complete.
#[derive(Debug)]
pub(crate) enum Failure<E> {
    /// The client returned an error.
    Failed(E),
    /// The timeout ran out.
    TimedOut,
}
