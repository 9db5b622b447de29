//! Id text in a named form with options (`cosid_core::convert::TextFormat`): the same format
//! spec as `cosid --format`, Python's `format_id`/`parse_id` and Node's `formatId`/`parseId`.

use crate::boundary::{c_bytes, c_str, check_ptr, check_text_out, guard, out_value, write_text};
use crate::convert::cosid_layout;
use crate::status::{cosid_status, fail, fail_with};
use cosid_core::convert::TextFormat;
use cosid_core::Layout;
use std::os::raw::c_char;

/// Bytes a buffer needs for `cosid_format_id` in any format and layout: the longest text (a
/// friendly id of a 20-bit slot and a 30-bit sequence, 36 characters), the most a prefix, a
/// suffix and a date prefix add (88 bytes: 32, 32, 16 and a delimiter of 8), and its NUL.
pub const COSID_ID_TEXT_BUFFER_SIZE: usize = 128;

fn layout_or_default(
    function: &'static str,
    layout: *const cosid_layout,
) -> Result<Layout, cosid_status> {
    if layout.is_null() {
        return Ok(Layout::MILLIS);
    }
    check_ptr(function, "layout", layout)?;
    // SAFETY: checked non-NULL and aligned; the caller's struct, read once by value.
    unsafe { layout.read() }.to_layout(function)
}

fn spec(function: &'static str, format: *const c_char) -> Result<TextFormat, cosid_status> {
    let text = c_str(
        function,
        "format",
        format,
        cosid_status::COSID_ERR_INVALID_ARGUMENT,
    )?;
    TextFormat::parse(text).map_err(|e| fail(function, &e))
}

/// Writes the text of `id` in `format` into `buf` as a NUL-terminated string and stores its
/// length (without the NUL) in `*out_len`. `format` is a form's name with options after commas:
/// `"dec"`, `"hex"`, `"base62"` (or `"radix62"`), `"radix36"`, `"friendly"`, e.g.
/// `"radix62,pad-start=false,char-size=10"` or `"friendly,zone=Asia/Shanghai,pad-start=true"`
/// (docs/id-text.md), and text around it in every form: `"dec,prefix=ORD-,date-prefix=yyMMdd"`
/// writes `ORD-240618-42` (a date prefix is the date of the call, in UTC unless `date-zone`
/// says otherwise). `layout` NULL is the millisecond preset.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT` (`buf`, `format`, `out_len`); `COSID_ERR_INVALID_ARGUMENT`
/// for a bad format or layout, an id wider than the layout, or one the setting cannot write
/// (radix text shorter than the id needs; friendly text past the year 9999), the detail says
/// which; `COSID_ERR_BUFFER_TOO_SMALL` if the text and its NUL do not fit `len` bytes (nothing
/// is written then; the detail says the size needed; `COSID_ID_TEXT_BUFFER_SIZE` always fits).
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_format_id(
    layout: *const cosid_layout,
    id: u64,
    format: *const c_char,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> cosid_status {
    const F: &str = "cosid_format_id";
    guard(F, || {
        check_text_out(F, buf, out_len)?;
        let l = layout_or_default(F, layout)?;
        let text = spec(F, format)?.format(&l, id).map_err(|e| fail(F, &e))?;
        if text.len() >= len {
            return Err(fail_with(
                F,
                cosid_status::COSID_ERR_BUFFER_TOO_SMALL,
                &format!(
                    "buf holds {len} bytes; {text:?} needs {} with its NUL \
                     (COSID_ID_TEXT_BUFFER_SIZE always fits)",
                    text.len() + 1
                ),
            ));
        }
        // The caller gives `len > text.len()` writable bytes at `buf`.
        write_text(buf, out_len, text.as_bytes());
        Ok(())
    })
}

/// Parses `text` (NUL-terminated) written in `format` (as `cosid_format_id` takes it) for
/// `layout` (NULL: the millisecond preset) into `*out`. Takes exactly the text that setting
/// writes: a friendly id must be in the zone and padding it was written with.
///
/// Errors: `COSID_ERR_NULL_ARGUMENT`; `COSID_ERR_INVALID_ARGUMENT` for a bad format or layout,
/// or any other text (the detail quotes it and says what was expected); `*out` is unchanged then.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn cosid_parse_id(
    layout: *const cosid_layout,
    text: *const c_char,
    format: *const c_char,
    out: *mut u64,
) -> cosid_status {
    const F: &str = "cosid_parse_id";
    guard(F, || {
        let bytes = c_bytes(F, "text", text)?;
        out_value(F, out, || {
            let l = layout_or_default(F, layout)?;
            let f = spec(F, format)?;
            // Non-UTF-8 bytes fit no form anyway; show them lossily in the message.
            f.parse_id(&l, &String::from_utf8_lossy(bytes))
                .map_err(|e| fail(F, &e))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{CStr, CString};

    #[test]
    fn every_setting_round_trips_through_a_caller_buffer() {
        let id = 295_913_926_632_165_376u64;
        for (format, want) in [
            ("friendly,zone=Asia/Shanghai", "20220320133617924-5-0"),
            ("friendly,pad-start=true", "20220320053617924-0005-0000"),
            ("radix36", "028XOQD7HM874"),
            ("radix62,pad-start=false", "LrHucXALbs"),
        ] {
            let f = CString::new(format).unwrap();
            let mut buf = [0 as c_char; COSID_ID_TEXT_BUFFER_SIZE];
            let mut n = 0usize;
            let st = cosid_format_id(
                std::ptr::null(),
                id,
                f.as_ptr(),
                buf.as_mut_ptr(),
                buf.len(),
                &mut n,
            );
            assert_eq!(st, cosid_status::COSID_OK, "{format}");
            let text = unsafe { CStr::from_ptr(buf.as_ptr()) };
            assert_eq!(text.to_str().unwrap(), want);
            assert_eq!(n, want.len());
            let mut back = 0u64;
            let st = cosid_parse_id(std::ptr::null(), buf.as_ptr(), f.as_ptr(), &mut back);
            assert_eq!(st, cosid_status::COSID_OK, "{format}");
            assert_eq!(back, id);
        }
    }

    #[test]
    fn the_buffer_size_fits_the_longest_texts() {
        // The widest slot (20 bits, 7 digits) and sequence (up to 30 bits, 10 digits) a layout
        // that still runs can have, in every form; the 17-digit time of a millisecond layout;
        // and every affix at its longest around the longest form.
        let affixes = format!(
            "friendly,pad-start=true,prefix={x},suffix={x},date-prefix=yyyyMMddHHmmssyy,\
             date-delimiter=12345678",
            x = "x".repeat(32)
        );
        let epoch = cosid_core::layout::COSID_EPOCH_MS;
        let (ms, s) = (cosid_core::TimeUnit::Millis, cosid_core::TimeUnit::Seconds);
        for (unit, ts, node, seq) in [(ms, 41, 20, 2), (ms, 41, 1, 21), (s, 31, 2, 30)] {
            let l = Layout::new(epoch, unit, ts, node, seq, false).unwrap();
            for spec in [
                affixes.as_str(),
                "friendly,pad-start=true",
                "friendly",
                "dec",
                "radix36",
                "hex",
            ] {
                let text = TextFormat::parse(spec)
                    .unwrap()
                    .format(&l, l.max_id())
                    .unwrap();
                assert!(text.len() < COSID_ID_TEXT_BUFFER_SIZE, "{spec}: {text}");
            }
        }
    }
}
