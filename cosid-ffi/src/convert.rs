//! Ids taken apart (`cosid_parse`), layouts, and the base-62 text form.

use crate::boundary::{c_bytes, c_str, check_ptr, check_text_out, guard, handle, out_value};
use crate::boundary::{write_out, write_text};
use crate::runtime::cosid_runtime;
use crate::status::{cosid_status, fail, fail_with};
use cosid_core::convert::{self, BASE62_WIDTH};
use cosid_core::{Layout, TimeUnit};
use std::os::raw::c_char;

/// Characters of a base-62 id (without the terminating NUL): every id is exactly this long.
pub const COSID_BASE62_LEN: usize = 11;

/// Bytes a buffer needs for `cosid_id_to_base62`: the text and its NUL.
pub const COSID_BASE62_BUFFER_SIZE: usize = COSID_BASE62_LEN + 1;

const _: () = assert!(COSID_BASE62_LEN == BASE62_WIDTH);

/// An id taken apart.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct cosid_id_parts {
    /// The start of the id's time unit, ms since the Unix epoch (UTC).
    pub timestamp_ms: i64,
    /// The raw timestamp field: time units since the layout's epoch.
    pub timestamp: u64,
    /// The slot (machine id) that issued the id.
    pub slot: u32,
    /// The sequence number within the time unit.
    pub sequence: u32,
}

/// A Snowflake bit layout: `| timestamp | slot | sequence |`, most significant bits first.
/// Filled by `cosid_runtime_layout` or `cosid_layout_preset`, or by hand.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct cosid_layout {
    /// The epoch, ms since the Unix epoch (CosId's: 1577203200000, 2019-12-24T16:00:00Z).
    pub epoch_ms: i64,
    /// The time unit in ms: 1 or 1000.
    pub unit_ms: u32,
    /// Bits of the timestamp field.
    pub timestamp_bits: u8,
    /// Bits of the slot field.
    pub node_bits: u8,
    /// Bits of the sequence field.
    pub sequence_bits: u8,
}

impl cosid_layout {
    fn of(l: &Layout) -> Self {
        cosid_layout {
            epoch_ms: l.epoch_ms(),
            unit_ms: l.unit().ms() as u32,
            timestamp_bits: l.timestamp_bits(),
            node_bits: l.node_bits(),
            sequence_bits: l.sequence_bits(),
        }
    }

    pub(crate) fn to_layout(self, function: &'static str) -> Result<Layout, cosid_status> {
        let unit = TimeUnit::from_ms(i64::from(self.unit_ms)).ok_or_else(|| {
            fail_with(
                function,
                cosid_status::COSID_ERR_INVALID_ARGUMENT,
                &format!(
                    "layout->unit_ms is {}; use 1 (milliseconds) or 1000 (seconds)",
                    self.unit_ms
                ),
            )
        })?;
        Layout::new(
            self.epoch_ms,
            unit,
            self.timestamp_bits,
            self.node_bits,
            self.sequence_bits,
            false,
        )
        .map_err(|e| {
            fail_with(
                function,
                cosid_status::COSID_ERR_INVALID_ARGUMENT,
                &format!("layout: {e}"),
            )
        })
    }
}

fn parse_with(
    function: &'static str,
    layout: &Layout,
    id: u64,
    out: *mut cosid_id_parts,
) -> Result<(), cosid_status> {
    let raw = layout.decompose(id).map_err(|e| fail(function, &e))?;
    let info = convert::decode(layout, id).map_err(|e| fail(function, &e))?;
    write_out(
        out,
        cosid_id_parts {
            timestamp_ms: info.timestamp_ms,
            timestamp: raw.timestamp,
            slot: info.slot,
            sequence: info.sequence,
        },
    );
    Ok(())
}

/// Takes `id` apart with the runtime's layout into `*out`.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT`; `COSID_ERR_INVALID_ARGUMENT` if `id` is wider than the
/// layout (made by another layout?). Works on a closed runtime.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_parse(
    rt: *const cosid_runtime,
    id: u64,
    out: *mut cosid_id_parts,
) -> cosid_status {
    const F: &str = "cosid_parse";
    guard(F, || {
        let h = handle(F, "rt", rt)?;
        check_ptr(F, "out", out.cast_const())?;
        parse_with(F, h.rt.layout(), id, out)
    })
}

/// Takes `id` apart with `layout` into `*out` (no runtime needed).
///
/// Errors: `COSID_ERR_NULL_ARGUMENT`; `COSID_ERR_INVALID_ARGUMENT` if the layout is invalid (the
/// detail says which field) or `id` is wider than it.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_layout_parse(
    layout: *const cosid_layout,
    id: u64,
    out: *mut cosid_id_parts,
) -> cosid_status {
    const F: &str = "cosid_layout_parse";
    guard(F, || {
        check_ptr(F, "layout", layout)?;
        check_ptr(F, "out", out.cast_const())?;
        // SAFETY: checked non-NULL and aligned; the caller's struct, read once by value.
        let layout = unsafe { layout.read() }.to_layout(F)?;
        parse_with(F, &layout, id, out)
    })
}

/// Stores the runtime's layout in `*out`.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT`. Works on a closed runtime.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_runtime_layout(
    rt: *const cosid_runtime,
    out: *mut cosid_layout,
) -> cosid_status {
    const F: &str = "cosid_runtime_layout";
    guard(F, || {
        let h = handle(F, "rt", rt)?;
        out_value(F, out, || Ok(cosid_layout::of(h.rt.layout())))
    })
}

/// Stores a named preset layout in `*out`: `"millis"` (41/10/12 bits, ms; the default),
/// `"seconds"` (31/10/22, s), `"safe-js-millis"` (41/3/9, ms; 53 bits) or `"safe-js-seconds"`
/// (31/3/19, s; 53 bits), all with CosId's epoch.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT`; `COSID_ERR_INVALID_ARGUMENT` for another name.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_layout_preset(name: *const c_char, out: *mut cosid_layout) -> cosid_status {
    const F: &str = "cosid_layout_preset";
    guard(F, || {
        let name = c_str(F, "name", name, cosid_status::COSID_ERR_INVALID_ARGUMENT)?;
        check_ptr(F, "out", out.cast_const())?;
        let layout = match name {
            "millis" => Layout::MILLIS,
            "seconds" => Layout::SECONDS,
            "safe-js-millis" => Layout::SAFE_JS_MILLIS,
            "safe-js-seconds" => Layout::SAFE_JS_SECONDS,
            other => {
                return Err(fail_with(
                    F,
                    cosid_status::COSID_ERR_INVALID_ARGUMENT,
                    &format!(
                        "{other:?} is not a preset; use millis, seconds, safe-js-millis or \
                         safe-js-seconds"
                    ),
                ))
            }
        };
        write_out(out, cosid_layout::of(&layout));
        Ok(())
    })
}

/// Writes the base-62 text of `id` into `buf` as a NUL-terminated string of exactly
/// `COSID_BASE62_LEN` (11) characters of `0-9A-Za-z` (sorting the strings as bytes sorts the
/// ids), and stores 11 in `*out_len`.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT`; `COSID_ERR_BUFFER_TOO_SMALL` if `len` is less than
/// `COSID_BASE62_BUFFER_SIZE` (12); nothing is written then.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_id_to_base62(
    id: u64,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> cosid_status {
    const F: &str = "cosid_id_to_base62";
    guard(F, || {
        check_text_out(F, buf, out_len)?;
        if len < COSID_BASE62_BUFFER_SIZE {
            return Err(fail_with(
                F,
                cosid_status::COSID_ERR_BUFFER_TOO_SMALL,
                &format!(
                    "buf holds {len} bytes; a base-62 id needs COSID_BASE62_BUFFER_SIZE \
                     ({COSID_BASE62_BUFFER_SIZE}) with its NUL"
                ),
            ));
        }
        let mut text = [0u8; BASE62_WIDTH];
        convert::encode_base62(id, &mut text);
        // The caller gives `len >= 12` writable bytes at `buf`.
        write_text(buf, out_len, &text);
        Ok(())
    })
}

/// Parses base-62 id text (exactly 11 characters of `0-9A-Za-z`, NUL-terminated, as
/// `cosid_id_to_base62` writes it) into `*out`.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT`; `COSID_ERR_INVALID_ARGUMENT` for any other text (the
/// detail quotes it and says what is wrong).
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_id_from_base62(text: *const c_char, out: *mut u64) -> cosid_status {
    const F: &str = "cosid_id_from_base62";
    guard(F, || {
        let bytes = c_bytes(F, "text", text)?;
        out_value(F, out, || {
            // Non-UTF-8 bytes are outside the alphabet anyway; show them lossily in the message.
            convert::parse_base62(&String::from_utf8_lossy(bytes)).map_err(|e| fail(F, &e))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::tests::memory_runtime;
    use crate::runtime::{cosid_next, cosid_runtime_close, cosid_runtime_free};
    use crate::status::last_error;
    use std::ffi::{CStr, CString};
    use std::ptr;

    #[test]
    fn base62_round_trips_through_a_caller_buffer() {
        for id in [0u64, 1, 61, 62, 1 << 40, u64::MAX] {
            let mut buf = [0x7f as c_char; COSID_BASE62_BUFFER_SIZE];
            let mut n = 0usize;
            assert_eq!(
                cosid_id_to_base62(id, buf.as_mut_ptr(), buf.len(), &mut n),
                cosid_status::COSID_OK
            );
            assert_eq!(n, COSID_BASE62_LEN);
            // SAFETY: NUL-terminated by the call.
            let text = unsafe { CStr::from_ptr(buf.as_ptr()) };
            assert_eq!(text.to_str().unwrap(), convert::to_base62(id));
            let mut back = 0;
            assert_eq!(
                cosid_id_from_base62(buf.as_ptr(), &mut back),
                cosid_status::COSID_OK
            );
            assert_eq!(back, id);
        }
    }

    #[test]
    fn base62_refuses_small_buffers_and_bad_text() {
        let mut buf = [0x7f as c_char; COSID_BASE62_LEN];
        let mut n = 99usize;
        assert_eq!(
            cosid_id_to_base62(5, buf.as_mut_ptr(), buf.len(), &mut n),
            cosid_status::COSID_ERR_BUFFER_TOO_SMALL
        );
        assert!(buf.iter().all(|&b| b == 0x7f) && n == 99, "nothing written");
        assert!(last_error().contains("COSID_BASE62_BUFFER_SIZE (12)"));
        assert_eq!(
            cosid_id_to_base62(5, buf.as_mut_ptr(), 0, &mut n),
            cosid_status::COSID_ERR_BUFFER_TOO_SMALL
        );
        assert_eq!(
            cosid_id_to_base62(5, ptr::null_mut(), 12, &mut n),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            cosid_id_to_base62(5, buf.as_mut_ptr(), 12, ptr::null_mut()),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
        let mut id = 3u64;
        for bad in ["", "abc", "0000000000+", "zzzzzzzzzzz", "00000000000 "] {
            let c = CString::new(bad).unwrap();
            assert_eq!(
                cosid_id_from_base62(c.as_ptr(), &mut id),
                cosid_status::COSID_ERR_INVALID_ARGUMENT,
                "{bad:?}"
            );
            assert!(
                last_error().contains(&format!("{bad:?}")),
                "{}",
                last_error()
            );
        }
        assert_eq!(id, 3);
        assert_eq!(
            cosid_id_from_base62(ptr::null(), &mut id),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
    }

    #[test]
    fn parse_uses_the_runtime_layout_and_presets_agree() {
        let rt = memory_runtime("ffi-parse1");
        let mut id = 0;
        assert_eq!(cosid_next(rt, &mut id), cosid_status::COSID_OK);
        let mut p = cosid_id_parts::default();
        assert_eq!(cosid_parse(rt, id, &mut p), cosid_status::COSID_OK);
        let now = cosid_core::clock::system_now_ms();
        assert!((now - 10_000..=now).contains(&p.timestamp_ms), "{p:?}");
        let mut layout = cosid_layout::default();
        assert_eq!(
            cosid_runtime_layout(rt, &mut layout),
            cosid_status::COSID_OK
        );
        let mut preset = cosid_layout::default();
        let millis = CString::new("millis").unwrap();
        assert_eq!(
            cosid_layout_preset(millis.as_ptr(), &mut preset),
            cosid_status::COSID_OK
        );
        assert_eq!(layout, preset);
        let mut q = cosid_id_parts::default();
        assert_eq!(
            cosid_layout_parse(&layout, id, &mut q),
            cosid_status::COSID_OK
        );
        assert_eq!(p, q);
        assert_eq!(
            p.timestamp_ms,
            layout.epoch_ms + p.timestamp as i64 * layout.unit_ms as i64
        );
        assert_eq!(cosid_runtime_close(rt), cosid_status::COSID_OK);
        assert_eq!(cosid_parse(rt, id, &mut q), cosid_status::COSID_OK);
        // An id wider than the 63-bit layout.
        let mut r = cosid_id_parts::default();
        assert_eq!(
            cosid_parse(rt, u64::MAX, &mut r),
            cosid_status::COSID_ERR_INVALID_ARGUMENT
        );
        assert_eq!(r, cosid_id_parts::default());
        cosid_runtime_free(rt);
    }

    #[test]
    fn bad_layouts_are_refused() {
        let mut l = cosid_layout::default();
        let seconds = CString::new("seconds").unwrap();
        assert_eq!(
            cosid_layout_preset(seconds.as_ptr(), &mut l),
            cosid_status::COSID_OK
        );
        assert_eq!(l.unit_ms, 1000);
        let mut p = cosid_id_parts::default();
        let mut bad = l;
        bad.unit_ms = 7;
        assert_eq!(
            cosid_layout_parse(&bad, 1, &mut p),
            cosid_status::COSID_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("unit_ms is 7"));
        let mut bad = l;
        bad.sequence_bits = 40;
        assert_eq!(
            cosid_layout_parse(&bad, 1, &mut p),
            cosid_status::COSID_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("sequence"), "{}", last_error());
        let nope = CString::new("minutes").unwrap();
        assert_eq!(
            cosid_layout_preset(nope.as_ptr(), &mut l),
            cosid_status::COSID_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            cosid_layout_parse(ptr::null(), 1, &mut p),
            cosid_status::COSID_ERR_NULL_ARGUMENT
        );
    }
}
