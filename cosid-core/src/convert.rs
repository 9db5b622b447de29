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

use crate::error::{Error, Result};
use crate::layout::Layout;
use std::fmt::Write as _;

/// The base-62 digits, in ASCII (and so in lexicographic) order.
pub const BASE62_ALPHABET: &[u8; 62] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Characters of a base-62 id: the fewest that hold every `u64` (62^11 > 2^64).
pub const BASE62_WIDTH: usize = 11;

/// Longest decimal text of a `u64`.
pub const DECIMAL_MAX_WIDTH: usize = 20;

/// Longest hex text of a `u64` (without `0x`).
pub const HEX_MAX_WIDTH: usize = 16;

/// Length of the time part of the friendly form, `yyyyMMddHHmmssSSS`.
pub const FRIENDLY_TIME_WIDTH: usize = 17;

const INVALID: u8 = 0xff;

/// Maps a byte to its base-62 digit value, or `INVALID`.
static BASE62_DECODE: [u8; 256] = {
    let mut t = [INVALID; 256];
    let mut i = 0;
    while i < 62 {
        t[BASE62_ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    t
};

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// The value quoted for an error message, cut short if long so a fuzzed megabyte does not end
/// up in a log line.
fn quoted(text: &str) -> String {
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
fn parse_decimal_field(b: &[u8]) -> std::result::Result<u64, &'static str> {
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

const BASE62_FORM: &str = "exactly 11 characters of 0-9A-Za-z, at most LygHa16AHYF";

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

/// Parses fixed-width base-62 text: exactly 11 characters of `0-9A-Za-z`.
pub fn parse_base62(text: &str) -> Result<u64> {
    let bad = |why: &str| refuse(text, "a base-62 id", why, BASE62_FORM);
    let b = text.as_bytes();
    if b.len() != BASE62_WIDTH {
        return Err(bad(if b.is_empty() {
            "empty"
        } else {
            "wrong length"
        }));
    }
    let mut n: u64 = 0;
    for &c in b {
        let d = BASE62_DECODE[c as usize];
        if d == INVALID {
            return Err(bad(match c {
                b'+' | b'-' => "a sign",
                c if c.is_ascii_whitespace() => "whitespace",
                _ => "a character outside 0-9A-Za-z",
            }));
        }
        n = n
            .checked_mul(62)
            .and_then(|n| n.checked_add(d as u64))
            .ok_or_else(|| bad("larger than a 64-bit id"))?;
    }
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// Layout-aware: width checks, friendly form, decoding

fn check_width(layout: &Layout, text: &str, id: u64) -> Result<u64> {
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
fn unit_start_ms_checked(layout: &Layout, t: u64) -> Option<i64> {
    i64::try_from(t)
        .ok()?
        .checked_mul(layout.unit().ms())?
        .checked_add(layout.epoch_ms())
}

const FRIENDLY_FORM: &str = "yyyyMMddHHmmssSSS-slot-sequence in UTC, like \
                             20191224160000000-5-0, with slot and sequence in decimal";

/// The friendly form of `id`: `yyyyMMddHHmmssSSS-slot-sequence`, the time being the start of
/// the id's time unit in UTC. Refuses an id wider than `layout` or one whose time falls outside
/// the years 0000 to 9999.
pub fn to_friendly(layout: &Layout, id: u64) -> Result<String> {
    let p = layout.decompose(id)?;
    let ms = unit_start_ms_checked(layout, p.timestamp)
        .filter(|ms| (0..=MAX_FRIENDLY_MS).contains(ms))
        .ok_or_else(|| {
            Error::invalid(format!(
                "id {id} has a time outside the years 1970 to 9999, which the friendly form \
                 yyyyMMddHHmmssSSS cannot write; use the decimal, hex or base-62 form"
            ))
        })?;
    let (y, mo, d, h, mi, s, milli) = crate::time::utc_fields(ms);
    let mut out = String::with_capacity(FRIENDLY_TIME_WIDTH + 2 + 10 + 10);
    // Writing into a String cannot fail.
    let _ = write!(
        out,
        "{y:04}{mo:02}{d:02}{h:02}{mi:02}{s:02}{milli:03}-{}-{}",
        p.slot, p.sequence
    );
    Ok(out)
}

/// 9999-12-31T23:59:59.999Z, the last instant `yyyy` can write.
const MAX_FRIENDLY_MS: i64 = 253_402_300_799_999;

/// Parses the friendly form for `layout`: the time must be the start of one of the layout's
/// time units inside its range, the slot and sequence must fit its bits.
pub fn parse_friendly(layout: &Layout, text: &str) -> Result<u64> {
    let bad = |why: &str| refuse(text, "a friendly id", why, FRIENDLY_FORM);
    let b = text.as_bytes();
    if b.is_empty() {
        return Err(bad("empty"));
    }
    let mut parts = b.splitn(3, |&c| c == b'-');
    let (time, slot, seq) = match (parts.next(), parts.next(), parts.next()) {
        (Some(t), Some(s), Some(q)) => (t, s, q),
        _ => return Err(bad("expected three parts separated by '-'")),
    };
    if time.len() != FRIENDLY_TIME_WIDTH || !time.iter().all(u8::is_ascii_digit) {
        return Err(bad("the time part is not exactly 17 digits"));
    }
    let num = |r: std::ops::Range<usize>| -> u32 {
        time[r]
            .iter()
            .fold(0u32, |acc, c| acc * 10 + (c - b'0') as u32)
    };
    let fields = (
        num(0..4) as i64,
        num(4..6),
        num(6..8),
        num(8..10),
        num(10..12),
        num(12..14),
        num(14..17),
    );
    let ms = friendly_fields_to_ms(fields).ok_or_else(|| bad("no such date or time of day"))?;
    let slot = parse_decimal_field(slot).map_err(|why| bad(&format!("slot: {why}")))?;
    let sequence = parse_decimal_field(seq).map_err(|why| bad(&format!("sequence: {why}")))?;
    let Some(t) = layout.timestamp_at(ms) else {
        return Err(Error::invalid(format!(
            "{} has a time outside this layout's range ({} to {}); was it made by another layout?",
            quoted(text),
            crate::time::format_rfc3339_ms(layout.epoch_ms()),
            crate::time::format_rfc3339_ms(layout.runs_out_at_ms() - 1)
        )));
    };
    if unit_start_ms_checked(layout, t) != Some(ms) {
        return Err(Error::invalid(format!(
            "{} has a time that is not the start of a time unit of this layout (unit {}); \
             was it made by another layout?",
            quoted(text),
            layout.unit().name()
        )));
    }
    if slot > layout.max_slot() as u64 || sequence > layout.max_sequence() as u64 {
        return Err(Error::invalid(format!(
            "{} has slot {slot} and sequence {sequence}; this layout allows slots 0 to {} and \
             sequences 0 to {}; was it made by another layout?",
            quoted(text),
            layout.max_slot(),
            layout.max_sequence()
        )));
    }
    Ok(layout.compose(t, slot as u32, sequence as u32))
}

/// Milliseconds since the Unix epoch of UTC calendar fields, or `None` if the fields name no
/// instant (month 13, February 30, hour 24, second 60, a year before 1970).
fn friendly_fields_to_ms(f: (i64, u32, u32, u32, u32, u32, u32)) -> Option<i64> {
    let (y, mo, d, h, mi, s, milli) = f;
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&mo) || d == 0 || d > 31 {
        return None;
    }
    if h > 23 || mi > 59 || s > 59 || milli > 999 {
        return None;
    }
    // Days since 1970-01-01 (proleptic Gregorian, as in `crate::time`).
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let mp = (mo as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = days * 86_400_000
        + h as i64 * 3_600_000
        + mi as i64 * 60_000
        + s as i64 * 1000
        + milli as i64;
    // A day past the month's end (April 31) normalises to another date: refuse it.
    (crate::time::utc_fields(ms) == f).then_some(ms)
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

/// A text form of an id, as chosen on the command line (`--format`) or through the C API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdFormat {
    /// `dec`: decimal digits.
    Decimal,
    /// `hex`: lower-case hex digits (parsing takes `0x` and upper case too).
    Hex,
    /// `base62`: 11 characters of `0-9A-Za-z`, sorting like the ids.
    Base62,
    /// `friendly`: `yyyyMMddHHmmssSSS-slot-sequence`.
    Friendly,
}

impl IdFormat {
    /// Every form.
    pub const ALL: [IdFormat; 4] = [
        IdFormat::Decimal,
        IdFormat::Hex,
        IdFormat::Base62,
        IdFormat::Friendly,
    ];

    /// `dec`, `hex`, `base62` or `friendly`.
    pub const fn name(self) -> &'static str {
        match self {
            IdFormat::Decimal => "dec",
            IdFormat::Hex => "hex",
            IdFormat::Base62 => "base62",
            IdFormat::Friendly => "friendly",
        }
    }

    /// The form called `name` (as [`IdFormat::name`] writes it).
    pub fn from_name(name: &str) -> Result<IdFormat> {
        IdFormat::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{} is not an id format; expected dec, hex, base62 or friendly",
                    quoted(name)
                ))
            })
    }

    /// The text of `id` in this form. Refuses an id wider than `layout`.
    pub fn format(self, layout: &Layout, id: u64) -> Result<String> {
        match self {
            IdFormat::Friendly => to_friendly(layout, id),
            _ => {
                layout.decompose(id)?;
                Ok(match self {
                    IdFormat::Decimal => to_decimal(id),
                    IdFormat::Hex => to_hex(id),
                    _ => to_base62(id),
                })
            }
        }
    }

    /// Parses `text` in this form and refuses an id wider than `layout`.
    pub fn parse(self, layout: &Layout, text: &str) -> Result<u64> {
        match self {
            IdFormat::Decimal => check_width(layout, text, parse_decimal(text)?),
            IdFormat::Hex => check_width(layout, text, parse_hex(text)?),
            IdFormat::Base62 => check_width(layout, text, parse_base62(text)?),
            IdFormat::Friendly => parse_friendly(layout, text),
        }
    }
}

impl std::fmt::Display for IdFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::layout::{IdParts, TimeUnit, COSID_EPOCH_MS};
    use proptest::prelude::*;

    const PRESETS: [Layout; 4] = [
        Layout::MILLIS,
        Layout::SECONDS,
        Layout::SAFE_JS_MILLIS,
        Layout::SAFE_JS_SECONDS,
    ];

    fn refused<T: std::fmt::Debug>(r: Result<T>, text: &str, needle: &str) {
        let e = r.expect_err(text);
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{text:?}: {e}");
        assert!(e.message().contains(needle), "{text:?}: {e}");
    }

    #[test]
    fn known_values() {
        assert_eq!(to_decimal(0), "0");
        assert_eq!(to_decimal(u64::MAX), "18446744073709551615");
        assert_eq!(to_hex(0), "0");
        assert_eq!(to_hex(0xdead_beef), "deadbeef");
        assert_eq!(to_hex(u64::MAX), "ffffffffffffffff");
        assert_eq!(to_base62(0), "00000000000");
        assert_eq!(to_base62(61), "0000000000z");
        assert_eq!(to_base62(62), "00000000010");
        assert_eq!(to_base62(u64::MAX), "LygHa16AHYF");
        assert_eq!(parse_base62("LygHa16AHYF").unwrap(), u64::MAX);
        assert_eq!(parse_hex("0xDEADbeef").unwrap(), 0xdead_beef);
        assert_eq!(parse_hex("ffffffffffffffff").unwrap(), u64::MAX);
        assert_eq!(parse_decimal("18446744073709551615").unwrap(), u64::MAX);
        assert_eq!(parse_decimal("0").unwrap(), 0);
    }

    #[test]
    fn friendly_and_decode_of_a_known_id() {
        let l = Layout::MILLIS;
        // 1 s after the epoch, slot 5, sequence 7.
        let id = l.compose(1000, 5, 7);
        assert_eq!(to_friendly(&l, id).unwrap(), "20191224160001000-5-7");
        assert_eq!(parse_friendly(&l, "20191224160001000-5-7").unwrap(), id);
        let info = decode(&l, id).unwrap();
        assert_eq!(info.timestamp_ms, COSID_EPOCH_MS + 1000);
        assert_eq!(
            info.to_json(),
            format!(
                "{{\"id\":{id},\"timestamp_ms\":1577203201000,\
                 \"time\":\"2019-12-24T16:00:01.000Z\",\"slot\":5,\"sequence\":7}}"
            )
        );
        let s = Layout::SECONDS;
        let id = s.compose(3, 1, 0);
        assert_eq!(to_friendly(&s, id).unwrap(), "20191224160003000-1-0");
    }

    #[test]
    fn malformed_decimal_is_refused() {
        for (text, needle) in [
            ("", "empty"),
            (" 1", "whitespace"),
            ("1 ", "whitespace"),
            ("+1", "sign"),
            ("-1", "sign"),
            ("01", "leading zero"),
            ("18446744073709551616", "larger"),
            ("99999999999999999999999", "larger"),
            ("1x", "not a digit"),
            ("١", "not a digit"),
        ] {
            refused(parse_decimal(text), text, needle);
            refused(parse_decimal(text), text, "expected 1 to 20 digits");
        }
    }

    #[test]
    fn malformed_hex_is_refused() {
        for (text, needle) in [
            ("", "no digits"),
            ("0x", "no digits"),
            (" ff", "whitespace"),
            ("-ff", "sign"),
            ("0x-1", "sign"),
            ("10000000000000000", "more than 16"),
            ("0xg", "not a hex digit"),
            ("x12", "not a hex digit"),
            ("00x1", "not a hex digit"),
        ] {
            refused(parse_hex(text), text, needle);
            refused(parse_hex(text), text, "hex digits");
        }
    }

    #[test]
    fn malformed_base62_is_refused() {
        for (text, needle) in [
            ("", "empty"),
            ("0000000000", "wrong length"),
            ("000000000000", "wrong length"),
            ("0000000000 ", "whitespace"),
            ("-0000000001", "sign"),
            ("0000000000_", "outside"),
            ("LygHa16AHYG", "larger"),
            ("zzzzzzzzzzz", "larger"),
            ("0000000000é", "wrong length"),
        ] {
            refused(parse_base62(text), text, needle);
            refused(parse_base62(text), text, "exactly 11 characters");
        }
    }

    #[test]
    fn malformed_friendly_is_refused() {
        let l = Layout::MILLIS;
        for (text, needle) in [
            ("", "empty"),
            ("20191224160001000", "three parts"),
            ("20191224160001000-5", "three parts"),
            ("2019122416000100-5-7", "17 digits"),
            ("201912241600010000-5-7", "17 digits"),
            ("2019122416000100x-5-7", "17 digits"),
            ("20191324160001000-5-7", "no such date"),
            ("20190230160001000-5-7", "no such date"),
            ("20190431160001000-5-7", "no such date"),
            ("20191224240001000-5-7", "no such date"),
            ("20191224166001000-5-7", "no such date"),
            ("20191224160060000-5-7", "no such date"),
            ("20191224160001000-+5-7", "slot: a sign"),
            ("20191224160001000-5--7", "sequence: a sign"),
            ("20191224160001000-05-7", "slot: leading zero"),
            ("20191224160001000-5-", "sequence: empty"),
            ("20191224160001000-5-7-", "sequence: a sign"),
            ("20191224160001000-5-7 ", "sequence: whitespace"),
            (" 20191224160001000-5-7", "17 digits"),
            ("20191224160001000-1024-0", "slots 0 to 1023"),
            ("20191224160001000-5-4096", "sequences 0 to 4095"),
            ("20191224160001000-5-99999999999999999999", "larger"),
            ("20191224155959999-5-7", "outside this layout's range"),
            ("20900101000000000-5-7", "outside this layout's range"),
        ] {
            refused(parse_friendly(&l, text), text, needle);
        }
        refused(
            parse_friendly(&Layout::SECONDS, "20191224160001500-5-7"),
            "half a second",
            "not the start of a time unit",
        );
        // The JavaScript-safe layouts have 3 node bits: slots 0 to 7.
        refused(
            parse_friendly(&Layout::SAFE_JS_MILLIS, "20191224160001000-8-0"),
            "slot 8",
            "slots 0 to 7",
        );
    }

    #[test]
    fn wrong_layout_width_is_refused() {
        let js = Layout::SAFE_JS_MILLIS;
        // Slot 1000 fits 10 node bits, not 3: every form of this id is foreign to `js`.
        let wide = Layout::MILLIS.compose(Layout::MILLIS.max_timestamp(), 1000, 1);
        for f in IdFormat::ALL {
            let text = f.format(&Layout::MILLIS, wide).unwrap();
            refused(f.parse(&js, &text), &text, "another layout");
            refused(
                f.format(&js, wide),
                f.name(),
                "wider than this 53-bit layout",
            );
        }
        refused(decode(&js, wide), "decode", "wider");
        // An id with bit 63 set fits no layout.
        for text in ["9223372036854775808", "8000000000000000"] {
            let f = if text.len() == 16 {
                IdFormat::Hex
            } else {
                IdFormat::Decimal
            };
            refused(
                f.parse(&Layout::MILLIS, text),
                text,
                "wider than this 63-bit",
            );
        }
    }

    #[test]
    fn format_names() {
        for f in IdFormat::ALL {
            assert_eq!(IdFormat::from_name(f.name()).unwrap(), f);
        }
        refused(IdFormat::from_name("json"), "json", "dec, hex, base62");
    }

    fn any_layout() -> impl Strategy<Value = Layout> {
        // At most 53 timestamp bits: past that, a seconds layout's end no longer fits an i64
        // of ms and `Layout::runs_out_at_ms` overflows (reported to the layout's owner).
        (
            0..=COSID_EPOCH_MS,
            any::<bool>(),
            20u8..=53,
            1u8..=20,
            1u8..=30,
            any::<bool>(),
        )
            .prop_filter_map("a valid layout", |(epoch, ms, ts, node, seq, js)| {
                let unit = if ms {
                    TimeUnit::Millis
                } else {
                    TimeUnit::Seconds
                };
                Layout::new(epoch, unit, ts, node, seq, js).ok()
            })
    }

    fn layout() -> impl Strategy<Value = Layout> {
        prop_oneof![
            Just(Layout::MILLIS),
            Just(Layout::SECONDS),
            Just(Layout::SAFE_JS_MILLIS),
            Just(Layout::SAFE_JS_SECONDS),
            any_layout(),
        ]
    }

    fn layout_and_id() -> impl Strategy<Value = (Layout, u64)> {
        (
            layout(),
            any::<bool>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(|(l, use_raw, raw, t, s, q)| {
                // Half the time a raw id, half the time one built from fields (so a
                // timestamp in the layout's real range comes up often).
                let id = if use_raw {
                    raw & l.max_id()
                } else {
                    let now_t = l
                        .timestamp_at(crate::clock::system_now_ms())
                        .unwrap_or(l.max_timestamp());
                    l.compose(t % (now_t + 1), s & l.max_slot(), q & l.max_sequence())
                };
                (l, id)
            })
    }

    #[test]
    fn every_preset_round_trips_its_extremes() {
        for l in PRESETS {
            for id in [0, 1, l.max_id(), l.max_id() - 1, l.compose(12345, 1, 2)] {
                for f in IdFormat::ALL {
                    let text = f.format(&l, id).unwrap();
                    assert_eq!(f.parse(&l, &text).unwrap(), id, "{l} {f} {text}");
                }
                let info = decode(&l, id).unwrap();
                let p = l.decompose(id).unwrap();
                assert_eq!((info.slot, info.sequence), (p.slot, p.sequence));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn plain_forms_round_trip(id in any::<u64>()) {
            prop_assert_eq!(parse_decimal(&to_decimal(id)).unwrap(), id);
            prop_assert_eq!(to_decimal(id), id.to_string());
            prop_assert_eq!(parse_hex(&to_hex(id)).unwrap(), id);
            prop_assert_eq!(parse_hex(&format!("0x{}", to_hex(id))).unwrap(), id);
            prop_assert_eq!(parse_hex(&to_hex(id).to_uppercase()).unwrap(), id);
            prop_assert_eq!(to_hex(id), format!("{id:x}"));
            let b = to_base62(id);
            prop_assert_eq!(b.len(), BASE62_WIDTH);
            prop_assert_eq!(parse_base62(&b).unwrap(), id);
        }

        #[test]
        fn every_form_round_trips_on_every_layout((l, id) in layout_and_id()) {
            for f in IdFormat::ALL {
                match f.format(&l, id) {
                    Ok(text) => prop_assert_eq!(f.parse(&l, &text).unwrap(), id, "{} {}", f, text),
                    Err(e) => {
                        // Only the friendly form has a limit: the year 9999.
                        prop_assert_eq!(f, IdFormat::Friendly);
                        prop_assert!(e.message().contains("9999"), "{}", e);
                        let ms = decode(&l, id).map(|i| i.timestamp_ms).unwrap_or(i64::MAX);
                        prop_assert!(ms > MAX_FRIENDLY_MS);
                    }
                }
            }
            let info = decode(&l, id).unwrap();
            let p = l.decompose(id).unwrap();
            prop_assert_eq!(info.id, id);
            prop_assert_eq!(info.timestamp_ms, l.unit_start_ms(p.timestamp));
            prop_assert_eq!((info.slot, info.sequence), (p.slot, p.sequence));
            prop_assert_eq!(
                l.try_compose(IdParts { timestamp: p.timestamp, slot: info.slot,
                    sequence: info.sequence }).unwrap(),
                id
            );
            if info.timestamp_ms <= MAX_FRIENDLY_MS {
                prop_assert_eq!(
                    crate::time::parse_rfc3339(&info.time_rfc3339).unwrap(),
                    info.timestamp_ms
                );
            }
        }

        #[test]
        fn base62_sorts_like_the_ids(a in any::<u64>(), b in any::<u64>()) {
            prop_assert_eq!(a.cmp(&b), to_base62(a).cmp(&to_base62(b)));
        }

        #[test]
        fn base62_sorts_like_the_ids_when_close(a in any::<u64>(), d in 0u64..100_000) {
            let b = a.saturating_add(d);
            prop_assert_eq!(a.cmp(&b), to_base62(a).cmp(&to_base62(b)));
        }

        #[test]
        fn parsers_never_panic_and_accept_only_canonical_text(s in "\\PC{0,30}", l in layout()) {
            check_parsers_on(&l, &s);
        }

        #[test]
        fn one_changed_character_is_refused_or_is_another_ids_canonical_text(
            (l, id) in layout_and_id(), at in any::<prop::sample::Index>(), c in 0x20u8..0x7f
        ) {
            for f in IdFormat::ALL {
                let Ok(text) = f.format(&l, id) else { continue };
                let mut bytes = text.clone().into_bytes();
                let i = at.index(bytes.len());
                bytes[i] = c;
                let mutated = String::from_utf8(bytes).unwrap();
                check_parsers_on(&l, &mutated);
                if let Ok(other) = f.parse(&l, &mutated) {
                    // Hex is lenient by design (checked by value in `check_parsers_on`).
                    if f != IdFormat::Hex {
                        prop_assert_eq!(f.format(&l, other).unwrap(), mutated);
                    }
                }
            }
        }

        #[test]
        fn parsers_never_panic_on_near_misses(s in "[0-9a-zA-Z+\\- x_]{0,24}", l in layout()) {
            check_parsers_on(&l, &s);
        }
    }

    /// Every parser on arbitrary text: no panic, only `InvalidArgument`, and whatever is
    /// accepted is the canonical text of the id (or a documented hex variant of it).
    fn check_parsers_on(l: &Layout, s: &str) {
        match parse_decimal(s) {
            Ok(id) => assert_eq!(to_decimal(id), s),
            Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument),
        }
        match parse_hex(s) {
            Ok(id) => {
                let digits = s.strip_prefix("0x").or(s.strip_prefix("0X")).unwrap_or(s);
                assert_eq!(
                    u64::from_str_radix(digits, 16).ok(),
                    Some(id),
                    "{s:?} parsed as {id}"
                );
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument),
        }
        match parse_base62(s) {
            Ok(id) => assert_eq!(to_base62(id), s),
            Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument),
        }
        match parse_friendly(l, s) {
            Ok(id) => assert_eq!(to_friendly(l, id).unwrap(), s),
            Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument),
        }
        for f in IdFormat::ALL {
            if let Ok(id) = f.parse(l, s) {
                assert!(id <= l.max_id());
            }
        }
    }
}
