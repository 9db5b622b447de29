//! Id text: decimal, hex, fixed-width base-62 and a friendly `time-slot-sequence` form, with
//! their parsers, and decoding an id into its parts.
//!
//! Contracts:
//! - Every encoder is total and every parser is strict: a parser accepts exactly the text its
//!   encoder writes (plus the documented leniencies of hex: an optional `0x`, upper-case digits
//!   and leading zeros, so `{:#018x}` text parses too) and refuses everything else with
//!   [`ErrorKind::InvalidArgument`] and a message that names the value and the expected form.
//!   No parser panics, whatever the input.
//! - Base-62 text is always [`BASE62_WIDTH`] characters of `0-9A-Za-z` (ASCII order), so
//!   sorting the strings as bytes sorts the ids numerically.
//! - Functions that take a [`Layout`] refuse an id wider than the layout.
//! - The `write_*` encoders write into a caller's fixed-size buffer and never allocate (the C
//!   API writes into callers' buffers with them).
//!
//! All functions are pure and thread-safe.
//!
//! [`ErrorKind::InvalidArgument`]: crate::error::ErrorKind::InvalidArgument

pub mod affix;
pub mod friendly;
pub mod radix;
mod text_format;
pub mod zone;

pub use affix::{Affixes, DatePattern};
pub use friendly::FriendlyOptions;
pub use radix::Radix;
pub use text_format::{DecimalPadding, IdFormat, TextFormat};
pub use zone::Zone;

use crate::error::{Error, Result};
use crate::layout::Layout;

/// The base-62 digits, in ASCII (and so in lexicographic) order.
pub const BASE62_ALPHABET: &[u8; 62] = radix::ALPHABET;

/// Characters of a base-62 id: the fewest that hold every `u64` (62^11 > 2^64).
pub const BASE62_WIDTH: usize = 11;

/// Longest decimal text of a `u64`.
pub const DECIMAL_MAX_WIDTH: usize = 20;

/// Longest hex text of a `u64` (without `0x`).
pub const HEX_MAX_WIDTH: usize = 16;

/// Length of the time part of the friendly form of a millisecond layout, `yyyyMMddHHmmssSSS`
/// (a second layout's is 14, `yyyyMMddHHmmss`: [`friendly::time_width`]).
pub const FRIENDLY_TIME_WIDTH: usize = 17;

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// The value quoted for an error message, cut short if long so a fuzzed megabyte does not end
/// up in a log line.
pub(crate) fn quoted(text: &str) -> String {
    const MAX: usize = 48;
    if text.chars().count() <= MAX {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(MAX).collect();
        format!("{head:?}... ({} bytes)", text.len())
    }
}

fn refuse(text: &str, what: &str, why: &str, expected: &str) -> Error {
    Error::invalid(format!(
        "{} is not {what} ({why}); expected {expected}",
        quoted(text)
    ))
}

// ---------------------------------------------------------------------------------------------
// Decimal

const DECIMAL_FORM: &str = "1 to 20 digits 0-9 with no sign, spaces or leading zeros, at most \
                            18446744073709551615";

/// Writes the decimal text of `id` into the end of `buf` and returns it. No allocation.
#[inline]
pub fn write_decimal(id: u64, buf: &mut [u8; DECIMAL_MAX_WIDTH]) -> &str {
    let mut n = id;
    let mut i = DECIMAL_MAX_WIDTH;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[i..]).expect("ASCII digits")
}

/// The decimal text of `id`.
pub fn to_decimal(id: u64) -> String {
    let mut buf = [0u8; DECIMAL_MAX_WIDTH];
    write_decimal(id, &mut buf).to_owned()
}

/// Parses canonical decimal text: `0`, or digits without a leading zero, sign or spaces.
pub fn parse_decimal(text: &str) -> Result<u64> {
    let bad = |why: &str| refuse(text, "a decimal id", why, DECIMAL_FORM);
    parse_decimal_field(text.as_bytes()).map_err(bad)
}

/// The digits of a canonical decimal number, or why not.
pub(crate) fn parse_decimal_field(b: &[u8]) -> std::result::Result<u64, &'static str> {
    if b.is_empty() {
        return Err("empty");
    }
    if b.len() > 1 && b[0] == b'0' {
        return Err("leading zero");
    }
    let mut n: u64 = 0;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return Err(match c {
                b'+' | b'-' => "a sign",
                c if c.is_ascii_whitespace() => "whitespace",
                _ => "a character that is not a digit",
            });
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(d as u64))
            .ok_or("larger than a 64-bit id")?;
    }
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// Hex

const HEX_FORM: &str = "1 to 16 hex digits 0-9a-f, optionally after 0x, with no sign or spaces";

/// Writes the lower-case hex text of `id` (no prefix, no leading zeros) into the end of `buf`
/// and returns it. No allocation.
#[inline]
pub fn write_hex(id: u64, buf: &mut [u8; HEX_MAX_WIDTH]) -> &str {
    let mut n = id;
    let mut i = HEX_MAX_WIDTH;
    loop {
        i -= 1;
        buf[i] = HEX_DIGITS[(n & 0xf) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[i..]).expect("ASCII digits")
}

/// The lower-case hex text of `id`, without a prefix.
pub fn to_hex(id: u64) -> String {
    let mut buf = [0u8; HEX_MAX_WIDTH];
    write_hex(id, &mut buf).to_owned()
}

/// Parses hex text: an optional `0x` (or `0X`), then 1 to 16 hex digits of either case
/// (leading zeros allowed, so zero-padded text parses).
pub fn parse_hex(text: &str) -> Result<u64> {
    let bad = |why: &str| refuse(text, "a hex id", why, HEX_FORM);
    let b = text.as_bytes();
    let digits = match b {
        [b'0', b'x' | b'X', rest @ ..] => rest,
        _ => b,
    };
    if digits.is_empty() {
        return Err(bad("no digits"));
    }
    if digits.len() > HEX_MAX_WIDTH {
        return Err(bad("more than 16 digits, larger than a 64-bit id"));
    }
    let mut n: u64 = 0;
    for &c in digits {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            b'+' | b'-' => return Err(bad("a sign")),
            c if c.is_ascii_whitespace() => return Err(bad("whitespace")),
            _ => return Err(bad("a character that is not a hex digit")),
        };
        n = (n << 4) | d as u64;
    }
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// Base 62

/// Writes the fixed-width base-62 text of `id` into `buf`. No allocation, no branch on the
/// value.
#[inline]
pub fn encode_base62(id: u64, buf: &mut [u8; BASE62_WIDTH]) {
    // 62^5 fits in a u32, so split once into a high part (at most 7 digits, ~2^35) and two
    // 5-digit u32 chunks: the per-digit divisions then run on 32-bit values.
    const P5: u64 = 62 * 62 * 62 * 62 * 62; // 916,132,832
    let mut lo = (id % P5) as u32;
    let rest = id / P5;
    let mut mid = (rest % P5) as u32;
    let hi = (rest / P5) as usize; // id / 62^10 <= 21
    for i in (6..BASE62_WIDTH).rev() {
        buf[i] = BASE62_ALPHABET[(lo % 62) as usize];
        lo /= 62;
    }
    for i in (1..6).rev() {
        buf[i] = BASE62_ALPHABET[(mid % 62) as usize];
        mid /= 62;
    }
    buf[0] = BASE62_ALPHABET[hi];
}

/// [`encode_base62`] returning the text as a `&str` borrowed from `buf`.
#[inline]
pub fn write_base62(id: u64, buf: &mut [u8; BASE62_WIDTH]) -> &str {
    encode_base62(id, buf);
    std::str::from_utf8(buf).expect("base-62 digits are ASCII")
}

/// The fixed-width base-62 text of `id`: 11 characters, ordered like the ids.
pub fn to_base62(id: u64) -> String {
    let mut buf = [0u8; BASE62_WIDTH];
    write_base62(id, &mut buf).to_owned()
}

/// Parses fixed-width base-62 text: exactly 11 characters of `0-9A-Za-z` ([`Radix::BASE62`]).
pub fn parse_base62(text: &str) -> Result<u64> {
    Radix::BASE62.parse(text)
}

// ---------------------------------------------------------------------------------------------
// Layout-aware: width checks, friendly form, decoding

pub(crate) fn check_width(layout: &Layout, text: &str, id: u64) -> Result<u64> {
    if id > layout.max_id() {
        return Err(Error::invalid(format!(
            "{} is id {id}, wider than this {}-bit layout (max {}); was it made by another layout?",
            quoted(text),
            layout.total_bits(),
            layout.max_id()
        )));
    }
    Ok(id)
}

/// The unit start (ms since the Unix epoch) of timestamp field `t`, or `None` if it does not
/// fit an `i64` (only possible for layouts wider in time than any clock will reach).
pub(crate) fn unit_start_ms_checked(layout: &Layout, t: u64) -> Option<i64> {
    i64::try_from(t)
        .ok()?
        .checked_mul(layout.unit().ms())?
        .checked_add(layout.epoch_ms())
}

/// The friendly text of `id` with the default options (UTC, no padding): see [`friendly`].
pub fn to_friendly(layout: &Layout, id: u64) -> Result<String> {
    friendly::format(layout, id, &FriendlyOptions::default())
}

/// Parses friendly text written with the default options (UTC, no padding): see [`friendly`].
pub fn parse_friendly(layout: &Layout, text: &str) -> Result<u64> {
    friendly::parse(layout, text, &FriendlyOptions::default())
}

/// The preset layout called `name` (`millis`, `seconds`, `safe-js-millis`, `safe-js-seconds`),
/// for the bindings' `layout` arguments of [`TextFormat`] text.
pub fn preset_layout(name: &str) -> Result<Layout> {
    match name {
        "millis" => Ok(Layout::MILLIS),
        "seconds" => Ok(Layout::SECONDS),
        "safe-js-millis" => Ok(Layout::SAFE_JS_MILLIS),
        "safe-js-seconds" => Ok(Layout::SAFE_JS_SECONDS),
        _ => Err(Error::invalid(format!(
            "{} is not a preset layout; use millis, seconds, safe-js-millis or safe-js-seconds",
            quoted(name)
        ))),
    }
}

/// An id taken apart, as `cosid parse` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdInfo {
    /// The id.
    pub id: u64,
    /// The start of the id's time unit, ms since the Unix epoch.
    pub timestamp_ms: i64,
    /// `timestamp_ms` as RFC 3339 in UTC with milliseconds.
    pub time_rfc3339: String,
    /// The slot that issued it.
    pub slot: u32,
    /// Its sequence number within the time unit.
    pub sequence: u32,
}

impl IdInfo {
    /// One line of JSON, no trailing newline, keys in this order:
    /// `{"id":…,"timestamp_ms":…,"time":"…","slot":…,"sequence":…}`. The id is a JSON number
    /// (exact in any parser with 64-bit integers).
    pub fn to_json(&self) -> String {
        // Every value is a number or an RFC 3339 string of [0-9T:.Z-] characters: nothing to
        // escape.
        format!(
            "{{\"id\":{},\"timestamp_ms\":{},\"time\":\"{}\",\"slot\":{},\"sequence\":{}}}",
            self.id, self.timestamp_ms, self.time_rfc3339, self.slot, self.sequence
        )
    }
}

/// Takes `id` apart with `layout`. Refuses an id wider than the layout.
pub fn decode(layout: &Layout, id: u64) -> Result<IdInfo> {
    let p = layout.decompose(id)?;
    let timestamp_ms = unit_start_ms_checked(layout, p.timestamp).ok_or_else(|| {
        Error::invalid(format!(
            "id {id} has timestamp {} which is past any representable time",
            p.timestamp
        ))
    })?;
    Ok(IdInfo {
        id,
        timestamp_ms,
        time_rfc3339: crate::time::format_rfc3339_ms(timestamp_ms),
        slot: p.slot,
        sequence: p.sequence,
    })
}

// ---------------------------------------------------------------------------------------------
// One entry point per text form

#[cfg(test)]
mod tests;
