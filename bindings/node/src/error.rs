//! Errors as JavaScript sees them.
//!
//! Every error the addon throws or rejects with is an `Error` (or a `TypeError` / `RangeError`
//! for a bad argument) whose `code` is the C API's status name: `COSID_ERR_CONFIG`,
//! `COSID_ERR_STORE`, ... The code is derived from the core [`ErrorKind`], never from a message.

use cosid_core::{Error as CoreError, ErrorKind};
use napi::bindgen_prelude::Unknown;
use napi::sys;
use std::ptr;

/// The code of a bad argument (a `TypeError` or `RangeError` carries it too).
pub(crate) const INVALID_ARGUMENT: &str = "COSID_ERR_INVALID_ARGUMENT";
/// The code of a failure inside Node-API itself (out of memory, an environment tearing down):
/// the C API's name for the same.
pub(crate) const INTERNAL: &str = "COSID_ERR_INTERNAL";
/// The code of a panic stopped at the JavaScript boundary (a bug; the C API's name).
pub(crate) const PANIC: &str = "COSID_ERR_PANIC";

/// Declares [`ErrorCode`] (the union type of `index.d.ts`) and [`ERROR_CODES`] from one list.
macro_rules! error_codes {
    ($(#$attr:tt)* $($variant:ident = $code:literal,)*) => {
        $(#$attr)*
        #[napi_derive::napi(string_enum)]
        #[allow(dead_code)]
        pub enum ErrorCode {
            $(#[napi(value = $code)] $variant,)*
        }

        /// Every `code` an error of the addon can carry, as [`ErrorCode`] lists them.
        #[cfg(test)]
        pub(crate) const ERROR_CODES: &[&str] = &[$($code,)*];
    };
}

error_codes! {
    #[doc = " The `code` of every error the addon throws or rejects with: the C API's status names, one"]
    #[doc = " per core error kind, and `COSID_ERR_INTERNAL` (a Node-API call failed) and"]
    #[doc = " `COSID_ERR_PANIC` (a bug stopped at the boundary). Later versions may add codes."]
    Config = "COSID_ERR_CONFIG",
    Store = "COSID_ERR_STORE",
    WindowClosed = "COSID_ERR_WINDOW_CLOSED",
    SlotLost = "COSID_ERR_SLOT_LOST",
    ClockBehind = "COSID_ERR_CLOCK_BEHIND",
    Timeout = "COSID_ERR_TIMEOUT",
    Closed = "COSID_ERR_CLOSED",
    Forked = "COSID_ERR_FORKED",
    InvalidArgument = "COSID_ERR_INVALID_ARGUMENT",
    Exhausted = "COSID_ERR_EXHAUSTED",
    NamespaceMismatch = "COSID_ERR_NAMESPACE_MISMATCH",
    StateFile = "COSID_ERR_STATE_FILE",
    Internal = "COSID_ERR_INTERNAL",
    Panic = "COSID_ERR_PANIC",
}

/// The code of a core error kind: its C API status name, from the core's table
/// (`ErrorKind::status_name`), the same name as C's status and Python's `status`.
pub(crate) fn code(kind: ErrorKind) -> &'static str {
    kind.status_name()
}

/// Why a call failed, before it becomes a JavaScript value.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// An `Error` with `code`.
    Coded { code: &'static str, message: String },
    /// A `TypeError` (wrong type of argument), code `COSID_ERR_INVALID_ARGUMENT`.
    Type(String),
    /// A `RangeError` (argument out of range), code `COSID_ERR_INVALID_ARGUMENT`.
    Range(String),
    /// A JavaScript exception is already pending (thrown by user code or by Node-API).
    Pending,
}

pub(crate) type Res<T> = Result<T, Failure>;

impl From<CoreError> for Failure {
    fn from(e: CoreError) -> Self {
        Failure::Coded {
            code: code(e.kind()),
            message: e.to_string(),
        }
    }
}

impl From<napi::Error> for Failure {
    fn from(e: napi::Error) -> Self {
        if e.status == napi::Status::PendingException {
            return Failure::Pending;
        }
        Failure::Coded {
            code: INTERNAL,
            message: format!("Node-API call failed ({}): {}", e.status, e.reason),
        }
    }
}

pub(crate) fn type_error(message: impl Into<String>) -> Failure {
    Failure::Type(message.into())
}

pub(crate) fn range_error(message: impl Into<String>) -> Failure {
    Failure::Range(message.into())
}

pub(crate) fn coded(kind: ErrorKind, message: impl Into<String>) -> Failure {
    Failure::Coded {
        code: code(kind),
        message: message.into(),
    }
}

/// Turns a Node-API status into a failure (a pending exception stays pending).
pub(crate) fn napi_failure(env: sys::napi_env, status: sys::napi_status, what: &str) -> Failure {
    let mut pending = false;
    // SAFETY: `env` is the live environment of the calling JavaScript thread.
    unsafe { sys::napi_is_exception_pending(env, &mut pending) };
    if pending || status == sys::Status::napi_pending_exception {
        return Failure::Pending;
    }
    Failure::Coded {
        code: INTERNAL,
        message: format!("Node-API call {what} failed with status {status}"),
    }
}

/// Checks a Node-API status: `check!(env, napi_call(...), "what")?`.
macro_rules! check {
    ($env:expr, $call:expr, $what:expr) => {{
        #[allow(unused_unsafe)]
        // SAFETY: every caller passes a Node-API call whose `env` is the live environment of
        // the calling JavaScript thread and whose pointers are locals valid for the call.
        let status = unsafe { $call };
        if status == napi::sys::Status::napi_ok {
            Ok(())
        } else {
            Err($crate::error::napi_failure($env, status, $what))
        }
    }};
}
pub(crate) use check;

impl Failure {
    /// The JavaScript error object (`None`: the exception is already pending, or the
    /// environment could not build one).
    ///
    /// # Safety
    /// `env` is the live environment of the calling JavaScript thread.
    pub(crate) unsafe fn to_js(&self, env: sys::napi_env) -> Option<sys::napi_value> {
        let (code, message) = match self {
            Failure::Coded { code, message } => (*code, message),
            Failure::Type(m) | Failure::Range(m) => (INVALID_ARGUMENT, m),
            Failure::Pending => return None,
        };
        let c = utf8(env, code)?;
        let m = utf8(env, message)?;
        let mut e = ptr::null_mut();
        // SAFETY: both values were just created in `env`.
        let status = unsafe {
            match self {
                Failure::Type(_) => sys::napi_create_type_error(env, c, m, &mut e),
                Failure::Range(_) => sys::napi_create_range_error(env, c, m, &mut e),
                _ => sys::napi_create_error(env, c, m, &mut e),
            }
        };
        (status == sys::Status::napi_ok).then_some(e)
    }

    /// Throws the error in `env` (a pending exception is left as it is).
    ///
    /// # Safety
    /// `env` is the live environment of the calling JavaScript thread.
    pub(crate) unsafe fn throw(self, env: sys::napi_env) {
        let mut pending = false;
        // SAFETY: `env` is live on this thread (the caller's contract); `pending` is a local.
        unsafe { sys::napi_is_exception_pending(env, &mut pending) };
        if pending {
            return;
        }
        // SAFETY: the same contract as this function's.
        if let Some(error) = unsafe { self.to_js(env) } {
            // SAFETY: `error` was just created in `env`, live on this thread.
            unsafe { sys::napi_throw(env, error) };
        }
    }

    /// A `napi::Error` that, given back to napi-rs as a promise rejection, rejects with exactly
    /// this JavaScript error (napi-rs hands a referenced error back verbatim).
    ///
    /// # Safety
    /// `env` is the live environment of the calling JavaScript thread.
    pub(crate) unsafe fn into_rejection(self, env: sys::napi_env) -> napi::Error {
        // SAFETY: the same contract as this function's.
        let value = match unsafe { self.to_js(env) } {
            Some(v) => v,
            None => {
                // A pending exception (or none could be built): reject with it.
                let mut v = ptr::null_mut();
                // SAFETY: `env` is live on this thread (the caller's contract); `v` is a local.
                unsafe { sys::napi_get_and_clear_last_exception(env, &mut v) };
                v
            }
        };
        if value.is_null() {
            return napi::Error::new(napi::Status::GenericFailure, "cosid: rejection failed");
        }
        // SAFETY: `value` is a live value of `env`.
        napi::Error::from(unsafe { Unknown::from_raw_unchecked(env, value) })
    }
}

fn utf8(env: sys::napi_env, s: &str) -> Option<sys::napi_value> {
    crate::raw::utf8_string(env, s).ok()
}

/// For `#[napi]` functions: throws the failure and hands napi-rs an error it will not throw
/// again (`PendingException` with the exception pending).
pub(crate) fn throwing<T>(env: sys::napi_env, r: Res<T>) -> napi::Result<T> {
    r.map_err(|f| {
        // SAFETY: napi-rs calls us on the JavaScript thread of `env`.
        unsafe { f.throw(env) };
        napi::Error::new(napi::Status::PendingException, String::new())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_the_cores_status_name() {
        for kind in ErrorKind::ALL {
            assert_eq!(code(kind), kind.status_name());
            assert_eq!(
                code(kind),
                format!("COSID_ERR_{}", kind.name().to_uppercase())
            );
        }
        assert_eq!(code(ErrorKind::InvalidArgument), INVALID_ARGUMENT);
    }

    #[test]
    fn the_error_code_type_lists_every_code_and_no_other() {
        let mut expected: Vec<&str> = ErrorKind::ALL.iter().map(|k| code(*k)).collect();
        expected.extend([INTERNAL, PANIC]);
        expected.sort_unstable();
        let mut listed = ERROR_CODES.to_vec();
        listed.sort_unstable();
        assert_eq!(listed, expected);
    }
}
