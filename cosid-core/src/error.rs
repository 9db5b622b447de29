//! The one error type of the core.
//!
//! Every binding maps [`ErrorKind`] (never the message text) to its own codes: the C status
//! enum, the Python exception classes, the Node `code` strings. A new kind is added at the end
//! of the enum and never renumbered, because the C status values are derived from it.

use std::fmt;

/// What went wrong, as a category that callers (and bindings) can branch on.
///
/// The discriminants are stable: `cosid-ffi` turns them into `cosid_status` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum ErrorKind {
    /// A configuration value is missing, malformed or out of range. The message names the key.
    Config = 1,
    /// The slot store failed or could not be reached. The message names the store (without
    /// credentials).
    Store = 2,
    /// The issuance window's ceiling is reached and no extension came within the wait limit.
    WindowClosed = 3,
    /// The lease on the slot was lost; the keeper is acquiring a new one. Fail fast.
    SlotLost = 4,
    /// The clock is behind: before the window's floor, or stepped back past the last issued
    /// timestamp, for longer than the wait limit.
    ClockBehind = 5,
    /// A bounded wait ran out (acquiring a slot, waiting for the next tick).
    Timeout = 6,
    /// The runtime or generator is closed.
    Closed = 7,
    /// This process is a fork of the one that built the runtime; it must build its own.
    Forked = 8,
    /// An argument is out of range or malformed (an id string, a batch size, a layout).
    InvalidArgument = 9,
    /// Every slot of the namespace is held by a live lease.
    Exhausted = 10,
    /// The namespace records another `{limit, tolerance, layout}` than this runtime asks for.
    NamespaceMismatch = 11,
    /// A static-slot state file is missing, truncated, corrupt or unwritable.
    StateFile = 12,
}

impl ErrorKind {
    /// Every kind, in discriminant order.
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::Config,
        ErrorKind::Store,
        ErrorKind::WindowClosed,
        ErrorKind::SlotLost,
        ErrorKind::ClockBehind,
        ErrorKind::Timeout,
        ErrorKind::Closed,
        ErrorKind::Forked,
        ErrorKind::InvalidArgument,
        ErrorKind::Exhausted,
        ErrorKind::NamespaceMismatch,
        ErrorKind::StateFile,
    ];

    /// The kind's names on every surface, `(snake_case name, C status name)`: the one table the
    /// bindings map from (the C status names, Python's `status` and `kind`, Node's `code`).
    /// Stable across releases; a kind added to the core gets its row here, and every surface
    /// names it from this row.
    pub const fn names(self) -> (&'static str, &'static str) {
        match self {
            ErrorKind::Config => ("config", "COSID_ERR_CONFIG"),
            ErrorKind::Store => ("store", "COSID_ERR_STORE"),
            ErrorKind::WindowClosed => ("window_closed", "COSID_ERR_WINDOW_CLOSED"),
            ErrorKind::SlotLost => ("slot_lost", "COSID_ERR_SLOT_LOST"),
            ErrorKind::ClockBehind => ("clock_behind", "COSID_ERR_CLOCK_BEHIND"),
            ErrorKind::Timeout => ("timeout", "COSID_ERR_TIMEOUT"),
            ErrorKind::Closed => ("closed", "COSID_ERR_CLOSED"),
            ErrorKind::Forked => ("forked", "COSID_ERR_FORKED"),
            ErrorKind::InvalidArgument => ("invalid_argument", "COSID_ERR_INVALID_ARGUMENT"),
            ErrorKind::Exhausted => ("exhausted", "COSID_ERR_EXHAUSTED"),
            ErrorKind::NamespaceMismatch => ("namespace_mismatch", "COSID_ERR_NAMESPACE_MISMATCH"),
            ErrorKind::StateFile => ("state_file", "COSID_ERR_STATE_FILE"),
        }
    }

    /// A short snake_case name, stable across releases (used in logs and by the bindings).
    pub const fn name(self) -> &'static str {
        self.names().0
    }

    /// The C API status name of the kind (`"COSID_ERR_SLOT_LOST"`): the C enumerator, Python's
    /// `status` attribute and Node's `code`.
    pub const fn status_name(self) -> &'static str {
        self.names().1
    }

    /// The kind whose C status value (its discriminant) is `code`.
    pub fn from_code(code: u32) -> Option<ErrorKind> {
        ErrorKind::ALL.iter().copied().find(|k| *k as u32 == code)
    }

    /// The kind whose snake_case name is `name`.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.iter().copied().find(|k| k.name() == name)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of every fallible core operation: a [`ErrorKind`] plus a message that names the
/// offending value and, where there is one, the fix.
///
/// ```
/// use cosid_core::{ErrorKind, Runtime};
///
/// let err = Runtime::from_yaml("cosid: {machine: {lease: {tll: 3s}}}").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Config);
/// assert!(err.to_string().contains("did you mean 'ttl'"));
/// ```
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    permanent: bool,
}

/// `Result` with the core [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            source: None,
            permanent: false,
        }
    }

    /// Marks the error as one that trying again cannot cure (a read-only file, a permission
    /// refused, a file of another application): start-up fails at once instead of retrying it
    /// for the whole acquire timeout.
    pub fn permanent(mut self) -> Self {
        self.permanent = true;
        self
    }

    /// [`Error::permanent`] when `permanent`, else the error as it is.
    #[cfg_attr(
        not(any(
            feature = "redis",
            feature = "postgres",
            feature = "mysql",
            feature = "etcd"
        )),
        allow(dead_code)
    )]
    pub(crate) fn permanent_if(self, permanent: bool) -> Self {
        if permanent {
            self.permanent()
        } else {
            self
        }
    }

    /// Whether trying again cannot cure the error (see [`Error::permanent`]).
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// Attaches the underlying cause (kept out of the message, reachable via `source()`).
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The category of the error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human-readable message (without the kind prefix).
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Config, message)
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    pub(crate) fn store(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Store, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("source", &self.source.as_ref().map(|s| s.to_string()))
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|s| s.as_ref() as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_numbered_in_order_and_named_uniquely() {
        for (i, kind) in ErrorKind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, i + 1);
        }
        let mut names: Vec<_> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ErrorKind::ALL.len());
        for kind in ErrorKind::ALL {
            let status = format!("COSID_ERR_{}", kind.name().to_ascii_uppercase());
            assert_eq!(kind.status_name(), status, "{kind:?}");
            assert_eq!(ErrorKind::from_code(kind as u32), Some(kind));
            assert_eq!(ErrorKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(ErrorKind::from_code(0), None);
    }

    #[test]
    fn display_includes_the_source() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = Error::new(ErrorKind::StateFile, "cannot read '/x'").with_source(io);
        assert_eq!(e.to_string(), "cannot read '/x': no such file");
        assert_eq!(e.kind(), ErrorKind::StateFile);
        assert!(std::error::Error::source(&e).is_some());
    }
}
