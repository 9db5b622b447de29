//! The C API of cosid: `libcosid.so` / `libcosid.a` and the header `include/cosid.h`
//! (generated from this crate by cbindgen; `docs/c-api.md` is the user's guide).
//!
//! Conventions (rustls-ffi is the model):
//! - Opaque handles (`cosid_runtime`, `cosid_generator`) made by `_new`/`_get` and released by
//!   `_free`; `_free(NULL)` does nothing.
//! - Every fallible function returns a [`cosid_status`], takes its outputs last as out-pointers
//!   and writes them only when it returns `COSID_OK`.
//! - Every export runs behind [`boundary`]: a panic never unwinds into C (it becomes
//!   `COSID_ERR_PANIC`), and every pointer is checked (NULL, alignment) before use.
//! - A failing call leaves a detail message in a thread-local slot, read with
//!   `cosid_last_error_message`.
//!
//! This crate holds no logic of its own beyond the boundary: ids, leases, parsing and text forms
//! all come from `cosid-core`, so C users see exactly the semantics of the Rust, Python and Node
//! users.

#![allow(non_camel_case_types)]
#![warn(missing_docs)]
// Every export checks its pointers itself and documents the contract in the header; marking them
// `unsafe` would change nothing for C callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

// In the order the header lists them (blank lines keep rustfmt from sorting them).
mod status;

mod runtime;

mod generator;

mod convert;

mod text;

mod events;

mod boundary;
mod interrupt;

pub use convert::{
    cosid_id_from_base62, cosid_id_parts, cosid_id_to_base62, cosid_layout, cosid_layout_parse,
    cosid_layout_preset, cosid_parse, cosid_runtime_layout, COSID_BASE62_BUFFER_SIZE,
    COSID_BASE62_LEN,
};
pub use events::{
    cosid_event, cosid_event_callback, cosid_event_kind, cosid_event_kind_name,
    cosid_runtime_set_event_callback,
};
pub use generator::{
    cosid_generator, cosid_generator_free, cosid_generator_get, cosid_generator_next,
    cosid_generator_next_batch,
};
pub use interrupt::{cosid_interrupt, cosid_interrupt_clear};
pub use runtime::{
    cosid_next, cosid_next_batch, cosid_runtime, cosid_runtime_close, cosid_runtime_free,
    cosid_runtime_new, cosid_runtime_new_with_callback, cosid_runtime_stats, cosid_stats,
};
pub use status::{
    cosid_last_error_length, cosid_last_error_message, cosid_status, cosid_status_name,
};
pub use text::{cosid_format_id, cosid_parse_id, COSID_ID_TEXT_BUFFER_SIZE};

use std::os::raw::c_char;

/// The major version of the library this header belongs to (`COSID_VERSION_STRING` is
/// `"MAJOR.MINOR.PATCH"`). Compare with `cosid_version()` to detect a header/library mismatch.
pub const COSID_VERSION_MAJOR: u32 = 0;
/// The minor version of the library this header belongs to.
pub const COSID_VERSION_MINOR: u32 = 1;
/// The patch version of the library this header belongs to.
pub const COSID_VERSION_PATCH: u32 = 0;

// The three numbers above are what cbindgen writes into the header; Cargo's version is the
// truth. A version bump that forgets them fails to compile here.
const _: () = {
    assert!(
        COSID_VERSION_MAJOR == parse_u32(env!("CARGO_PKG_VERSION_MAJOR")),
        "update COSID_VERSION_MAJOR in cosid-ffi/src/lib.rs to Cargo's version, then regenerate include/cosid.h"
    );
    assert!(
        COSID_VERSION_MINOR == parse_u32(env!("CARGO_PKG_VERSION_MINOR")),
        "update COSID_VERSION_MINOR in cosid-ffi/src/lib.rs to Cargo's version, then regenerate include/cosid.h"
    );
    assert!(
        COSID_VERSION_PATCH == parse_u32(env!("CARGO_PKG_VERSION_PATCH")),
        "update COSID_VERSION_PATCH in cosid-ffi/src/lib.rs to Cargo's version, then regenerate include/cosid.h"
    );
    assert!(
        env!("CARGO_PKG_VERSION_PRE").is_empty(),
        "COSID_VERSION_STRING is built from MAJOR.MINOR.PATCH only; teach cbindgen.toml a pre-release suffix"
    );
};

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut n = 0u32;
    let mut i = 0;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}

static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// The version of the linked library, `"MAJOR.MINOR.PATCH"` (a static string; do not free it).
/// It equals `COSID_VERSION_STRING` when the header and the library match.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_version() -> *const c_char {
    VERSION.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn version_is_cargos() {
        // SAFETY: cosid_version returns a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(cosid_version()) }.to_str().unwrap();
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
        assert_eq!(
            v,
            format!("{COSID_VERSION_MAJOR}.{COSID_VERSION_MINOR}.{COSID_VERSION_PATCH}")
        );
    }
}
