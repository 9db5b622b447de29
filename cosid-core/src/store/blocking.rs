//! The blocking face of the network stores: each store owns one small tokio runtime
//! (current-thread, IO and timers enabled) and blocks on it inside the `SlotStore` methods.
//! Every call is bounded by a timeout, so a slow or dead server gives a `Store` error, never a
//! hang. Messages name the store by its redacted URL and have any password scrubbed out of the
//! client library's own text, so no credential reaches an error, a log or `Debug` output.
//!
//! The trait methods must not be called from inside another tokio runtime's worker (tokio
//! refuses to block there); the keeper, the CLI and the bindings call them from plain threads.

use crate::error::{Error, Result};
use std::fmt;
use std::future::Future;
use std::time::Duration;

/// The default bound on one store operation (and on connecting).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// A store's runtime, timeout and the names it uses in messages.
pub(crate) struct IoRuntime {
    rt: tokio::runtime::Runtime,
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
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::store(format!("store {name}: cannot start its IO runtime: {e}")))?;
        let secrets = secrets.into_iter().filter(|s| !s.is_empty()).collect();
        Ok(IoRuntime {
            rt,
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

    /// Runs `fut` to completion on the store's runtime, bounded by the operation timeout.
    /// `Err(Failure::TimedOut)` when the bound ran out.
    pub(crate) fn run<T, E>(
        &self,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, Failure<E>> {
        let timeout = self.timeout;
        self.rt.block_on(async move {
            match tokio::time::timeout(timeout, fut).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(Failure::Failed(e)),
                Err(_) => Err(Failure::TimedOut),
            }
        })
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
