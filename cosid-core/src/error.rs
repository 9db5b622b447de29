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

    /// A short snake_case name, stable across releases (used in logs and by the bindings).
    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::Store => "store",
            ErrorKind::WindowClosed => "window_closed",
            ErrorKind::SlotLost => "slot_lost",
            ErrorKind::ClockBehind => "clock_behind",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Closed => "closed",
            ErrorKind::Forked => "forked",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::Exhausted => "exhausted",
            ErrorKind::NamespaceMismatch => "namespace_mismatch",
            ErrorKind::StateFile => "state_file",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of every fallible core operation: a [`ErrorKind`] plus a message that names the
/// offending value and, where there is one, the fix.
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
