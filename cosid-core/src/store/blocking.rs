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

    /// The bound on one operation, for the stores that also bound waits of their own with it
    /// (Redis, etcd).
    #[cfg(any(feature = "redis", feature = "etcd"))]
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The `Debug` of the store `store` (its type name) that runs on this runtime: the redacted
    /// URL, the one setting of its own that `own` names, and the timeout. Written once here so
    /// that every network store shows the same fields, and only the redacted URL: never a
    /// password, a connection or a client's state.
    pub(crate) fn debug_store(
        &self,
        f: &mut fmt::Formatter<'_>,
        store: &str,
        own: (&str, &dyn fmt::Debug),
    ) -> fmt::Result {
        f.debug_struct(store)
            .field("url", &self.name)
            .field(own.0, own.1)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }

    /// `text` with every credential replaced by `***`.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            out = out.replace(s.as_str(), "***");
        }
        out
    }

    /// A `Store` error: "store NAME: WHAT: DETAIL", credentials scrubbed, and the detail (a
    /// client's or a server's words: a 20 MiB error reply) cut after
    /// [`crate::bounds::MAX_DETAIL_CHARS`] characters, on one line.
    pub(crate) fn error(&self, what: &str, detail: &dyn fmt::Display) -> Error {
        // Scrubbed before it is cut, so that a cut cannot leave a piece of a password that the
        // scrub no longer recognises.
        let detail = self.scrub(&detail.to_string());
        let detail = crate::bounds::quote_at_most(&detail, crate::bounds::MAX_DETAIL_CHARS);
        Error::store(self.scrub(&format!("store {}: {what}: {detail}", self.name)))
    }

    /// The `Store` error of a SQL store (PostgreSQL, MySQL) that read a row it cannot make a
    /// record of, `why` naming the column or the value: one wording for both, as they keep the
    /// same tables.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(crate) fn bad_row(&self, what: &str, why: &str) -> Error {
        self.error(
            what,
            &format!("the database holds a row cosid cannot read ({why})"),
        )
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
        // A caller in an interruptible section gives up on an interrupt (the task finishes on
        // the IO thread; its outcome is unknown, as after a timeout).
        let end = std::time::Instant::now() + timeout.saturating_mul(2) + Duration::from_secs(1);
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left.min(crate::interrupt::POLL)) {
                Ok(out) => return out,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                    if !left.is_zero() && !crate::interrupt::stops_here() => {}
                Err(_) => return Err(Failure::TimedOut),
            }
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

/// Why a failed connect cannot be cured by trying again, read from the client's text: the
/// host name does not exist, or the two sides do not agree on TLS (a certificate the store does
/// not trust, TLS to a port without it). A resolver's temporary failure, a refused or reset
/// connection, a timeout are none of these: a server starting, a network coming back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Incurable {
    /// The resolver says the name does not exist (`getaddrinfo`'s `EAI_NONAME`: NXDOMAIN).
    UnknownHost,
    /// TLS failed: the certificate, or a server that does not speak it.
    Tls,
}

/// What to do about a host name that does not resolve, for the end of a message.
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "etcd"
))]
pub(crate) const UNKNOWN_HOST_FIX: &str =
    "the host name does not resolve (the resolver has no such name): check the host in the URL";

/// [`Incurable`] as a client's text `text` of a failed connect says it, or `None`.
#[cfg(any(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "etcd"
))]
pub(crate) fn incurable(text: &str) -> Option<Incurable> {
    let said = text.to_ascii_lowercase();
    // EAI_AGAIN ("Temporary failure in name resolution"): the resolver may answer later.
    if said.contains("temporary failure") {
        return None;
    }
    // getaddrinfo's EAI_NONAME as glibc, musl and the BSDs word it.
    const UNKNOWN_HOST: [&str; 4] = [
        "name or service not known",
        "nodename nor servname provided",
        "no address associated with hostname",
        "name does not resolve",
    ];
    // rustls's words for a certificate it refuses and for a peer that answers a TLS handshake
    // with something else; the clients' for a server that refuses TLS.
    const TLS: [&str; 5] = [
        "invalid peer certificate",
        "unknownissuer",
        "corrupt message",
        "invalidcontenttype",
        "does not support tls",
    ];
    if UNKNOWN_HOST.iter().any(|w| said.contains(w)) {
        Some(Incurable::UnknownHost)
    } else if TLS.iter().any(|w| said.contains(w)) {
        Some(Incurable::Tls)
    } else {
        None
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

/// The one connection a network store shares among all its callers, numbered so that a failure
/// drops only the connection it happened on.
///
/// One caller connects at a time, and the callers that waited for it take its outcome: its
/// connection, or its error. So a thousand threads that call a fresh store at once open one
/// connection, not a thousand (past the server's client limit and listen backlog), and when the
/// server is unreachable they fail together after one connect timeout, not one after another.
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
pub(crate) struct SharedConnection<C> {
    state: std::sync::Mutex<Connection<C>>,
    /// Connect attempts ended so far; written under `state`'s lock, read before taking it.
    attempts: std::sync::atomic::AtomicU64,
}

#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
struct Connection<C> {
    /// The live connection and its number (the attempt that made it).
    current: Option<(u64, C)>,
    /// The error of the last attempt, if it failed: its kind, text and permanence.
    failed: Option<(crate::ErrorKind, String, bool)>,
}

#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
impl<C: Clone> SharedConnection<C> {
    pub(crate) fn new() -> Self {
        SharedConnection {
            state: std::sync::Mutex::new(Connection {
                current: None,
                failed: None,
            }),
            attempts: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The live connection (if `usable` says it still is) and its number, else one made by
    /// `connect`; if another caller's attempt ended while this one waited for it, that
    /// attempt's outcome.
    pub(crate) fn get(
        &self,
        usable: impl Fn(&C) -> bool,
        connect: impl FnOnce() -> Result<C>,
    ) -> Result<(u64, C)> {
        use std::sync::atomic::Ordering;
        let seen = self.attempts.load(Ordering::Acquire);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((number, conn)) = &state.current {
            if usable(conn) {
                return Ok((*number, conn.clone()));
            }
        }
        state.current = None;
        let attempts = self.attempts.load(Ordering::Acquire);
        if attempts != seen {
            if let Some((kind, message, permanent)) = &state.failed {
                let e = Error::new(*kind, message.clone());
                return Err(e.permanent_if(*permanent));
            }
        }
        // Counted when it ends: a caller that arrives while it runs sees the count change
        // once it is over, and takes its outcome.
        let number = attempts + 1;
        let outcome = connect();
        self.attempts.store(number, Ordering::Release);
        match outcome {
            Ok(conn) => {
                state.failed = None;
                state.current = Some((number, conn.clone()));
                Ok((number, conn))
            }
            Err(e) => {
                state.failed = Some((e.kind(), e.to_string(), e.is_permanent()));
                Err(e)
            }
        }
    }

    /// Forgets connection `number` (it failed), unless another has replaced it already.
    pub(crate) fn drop_if_current(&self, number: u64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.current.as_ref().is_some_and(|(n, _)| *n == number) {
            state.current = None;
        }
    }
}

#[cfg(all(test, any(feature = "redis", feature = "postgres", feature = "mysql")))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    /// `threads` callers at once on `shared`, each connecting if it must: a connect takes
    /// `connect_time`, then gives `outcome()`. Returns what each caller got and how many
    /// connects were made, what both tests of a connect shared by callers look at.
    fn callers(
        shared: &Arc<SharedConnection<u32>>,
        threads: usize,
        connect_time: Duration,
        outcome: impl Fn() -> Result<u32> + Send + Sync + 'static,
    ) -> (Vec<Result<(u64, u32)>>, usize) {
        let barrier = Arc::new(Barrier::new(threads));
        let connects = Arc::new(AtomicUsize::new(0));
        let counted = connects.clone();
        let connect = Arc::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(connect_time);
            outcome()
        });
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (shared, barrier, connect) = (shared.clone(), barrier.clone(), connect.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    shared.get(|_| true, || connect())
                })
            })
            .collect();
        let got = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (got, connects.load(Ordering::SeqCst))
    }

    #[test]
    fn a_huge_detail_is_cut_and_kept_on_one_line() {
        let io = IoRuntime::new(
            "redis://h".into(),
            vec!["pw1".into()],
            Duration::from_secs(1),
        )
        .unwrap();
        let reply = format!("ERR pw1 {}\nsecond line", "x".repeat(20 << 20));
        let e = io.error("reading", &reply);
        let m = e.message();
        assert!(
            m.starts_with("store redis://h: reading: ERR *** xxx"),
            "{}",
            &m[..60]
        );
        assert!(
            m.ends_with(&format!("… ({} bytes in all)", reply.len())),
            "{}",
            &m[m.len() - 60..]
        );
        assert!(
            m.len() < 1200 && !m.contains('\n') && !m.contains("pw1"),
            "{}",
            m.len()
        );
    }

    #[test]
    fn callers_at_once_share_one_connect() {
        let shared = Arc::new(SharedConnection::new());
        let (got, connects) = callers(&shared, 64, Duration::from_millis(50), || Ok(7));
        assert_eq!(connects, 1);
        assert!(got.iter().all(|r| matches!(r, Ok((1, 7)))), "{got:?}");
    }

    #[test]
    fn callers_that_waited_for_a_failed_connect_take_its_error() {
        let shared = Arc::new(SharedConnection::new());
        let (got, n) = callers(&shared, 64, Duration::from_millis(200), || {
            Err(Error::store("store redis://x: connecting: refused"))
        });
        // Callers that reached the lock only after the first attempt ended may try once more
        // each; on a loaded machine a few do, never one per caller in a row.
        assert!(n < 8, "{n} connect attempts for 64 callers");
        for r in &got {
            let e = r.as_ref().unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Store);
            assert_eq!(e.to_string(), "store redis://x: connecting: refused");
        }
        // A later caller tries again rather than taking an old error.
        assert!(matches!(shared.get(|_| true, || Ok(9)), Ok((_, 9))));
    }

    /// Callers that waited for a connect that failed for good take its error as permanent
    /// too: each start-up among them fails at once.
    #[test]
    fn callers_that_waited_for_a_permanent_failure_take_it_as_permanent() {
        let shared = Arc::new(SharedConnection::new());
        let (got, _) = callers(&shared, 16, Duration::from_millis(200), || {
            Err(Error::store("store redis://x: connecting: WRONGPASS").permanent())
        });
        for r in &got {
            assert!(r.as_ref().unwrap_err().is_permanent());
        }
    }

    #[test]
    fn a_name_that_does_not_exist_and_tls_on_one_side_are_incurable_a_busy_resolver_is_not() {
        for (text, expected) in [
            (
                "failed to lookup address information: Name or service not known",
                Some(Incurable::UnknownHost),
            ),
            (
                "failed to lookup address information: nodename nor servname provided, or not known",
                Some(Incurable::UnknownHost),
            ),
            (
                "failed to lookup address information: Temporary failure in name resolution",
                None,
            ),
            (
                "invalid peer certificate: UnknownIssuer",
                Some(Incurable::Tls),
            ),
            (
                "received corrupt message of type InvalidContentType",
                Some(Incurable::Tls),
            ),
            ("error performing TLS handshake: server does not support TLS", Some(Incurable::Tls)),
            ("Connection refused (os error 111)", None),
            ("Connection reset by peer (os error 104)", None),
        ] {
            assert_eq!(incurable(text), expected, "{text}");
        }
    }

    #[test]
    fn a_failure_drops_only_the_connection_it_happened_on() {
        let shared = SharedConnection::new();
        let (first, _) = shared.get(|_| true, || Ok(1u32)).unwrap();
        shared.drop_if_current(first);
        let (second, conn) = shared.get(|_| true, || Ok(2)).unwrap();
        assert_eq!((second, conn), (first + 1, 2));
        // A late report about the first connection leaves the second in place.
        shared.drop_if_current(first);
        assert_eq!(shared.get(|_| true, || Ok(3)).unwrap(), (second, 2));
        // An unusable connection is replaced.
        assert_eq!(shared.get(|c| *c != 2, || Ok(4)).unwrap(), (second + 1, 4));
    }
}
