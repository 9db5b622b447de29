//! Friendly id text, `time-slot-sequence`, as CosId's friendly converter writes it.
//!
//! - The time is the start of the id's time unit as local time in a [`Zone`] (UTC by default):
//!   `yyyyMMddHHmmssSSS` (17 digits) for a millisecond layout, `yyyyMMddHHmmss` (14 digits)
//!   for a second layout.
//! - Slot and sequence are decimal; with pad-start, zero-padded to the digits of the layout's
//!   largest slot and sequence (4 and 4 for the millisecond preset: `…-0005-0000`).
//!
//! Parsing takes exactly that text for the same layout and options (CosId's parser also trims
//! spaces, skips empty parts and takes `+5` or `05`; this one does not). A local time that
//! occurs twice in the zone (clocks set back) reads as the earlier instant, as CosId reads it;
//! ids from the later pass of that hour cannot be told from their text (write such ids in UTC or
//! a fixed offset). A local time that never occurs (clocks set forward) is refused: no id has it.

use super::zone::{Local, Zone};
use super::{parse_decimal_field, quoted, unit_start_ms_checked, Error, Result};
use crate::layout::{Layout, TimeUnit};
use std::fmt::Write as _;

/// Settings of the friendly form: the zone of its time, and zero-padded slot and sequence.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FriendlyOptions {
    /// The zone the time is written in (default UTC).
    pub zone: Zone,
    /// Zero-pad slot and sequence to the digits of the layout's largest (default off).
    pub pad_start: bool,
}

/// 9999-12-31T23:59:59.999 (local), the last time `yyyy` can write.
pub(crate) const MAX_FRIENDLY_MS: i64 = 253_402_300_799_999;

/// 0000-01-01T00:00:00.000 (local), the first time `yyyy` can write.
const MIN_FRIENDLY_MS: i64 = -62_167_219_200_000;

/// Digits of `n` in decimal.
fn digits(n: u32) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Digits of the time part for `layout`: 17 for milliseconds, 14 for seconds.
pub const fn time_width(layout: &Layout) -> usize {
    match layout.unit() {
        TimeUnit::Millis => 17,
        TimeUnit::Seconds => 14,
    }
}

fn form(layout: &Layout, o: &FriendlyOptions) -> String {
    let time = match layout.unit() {
        TimeUnit::Millis => "yyyyMMddHHmmssSSS",
        TimeUnit::Seconds => "yyyyMMddHHmmss",
    };
    let pad = if o.pad_start {
        format!(
            "slot and sequence zero-padded to {} and {} digits",
            digits(layout.max_slot()),
            digits(layout.max_sequence())
        )
    } else {
        "slot and sequence in decimal with no leading zeros".into()
    };
    format!("{time}-slot-sequence with the time in {}, {pad}", o.zone)
}

/// The friendly text of `id`. Refuses an id wider than `layout`, or one whose local time falls
/// outside the years 0000 to 9999.
pub fn format(layout: &Layout, id: u64, o: &FriendlyOptions) -> Result<String> {
    let p = layout.decompose(id)?;
    let local = unit_start_ms_checked(layout, p.timestamp)
        .filter(|ms| (MIN_FRIENDLY_MS..=MAX_FRIENDLY_MS).contains(ms))
        .and_then(|ms| Some(ms + o.zone.offset_at(ms)? as i64 * 1000))
        .filter(|ms| (MIN_FRIENDLY_MS..=MAX_FRIENDLY_MS).contains(ms))
        .ok_or_else(|| {
            Error::invalid(format!(
                "id {id} has a time outside the years 0000 to 9999 in {}, which friendly text \
                 cannot write; use the decimal, hex or radix form",
                o.zone
            ))
        })?;
    let (y, mo, d, h, mi, s, milli) = crate::time::utc_fields(local);
    let mut out = String::with_capacity(17 + 2 + 7 + 10);
    // Writing into a String cannot fail.
    let _ = write!(out, "{y:04}{mo:02}{d:02}{h:02}{mi:02}{s:02}");
    if layout.unit() == TimeUnit::Millis {
        let _ = write!(out, "{milli:03}");
    }
    let (ws, wq) = if o.pad_start {
        (digits(layout.max_slot()), digits(layout.max_sequence()))
    } else {
        (0, 0)
    };
    let _ = write!(out, "-{:0ws$}-{:0wq$}", p.slot, p.sequence);
    Ok(out)
}

/// A number field: canonical decimal, or with pad-start exactly `width` digits.
fn field(b: &[u8], pad: Option<usize>) -> std::result::Result<u64, String> {
    match pad {
        None => parse_decimal_field(b).map_err(str::to_owned),
        Some(w) => {
            if b.len() != w || !b.iter().all(u8::is_ascii_digit) {
                return Err(format!("not exactly {w} digits"));
            }
            // At most 10 digits (a 30-bit sequence): fits a u64.
            Ok(b.iter().fold(0u64, |n, c| n * 10 + (c - b'0') as u64))
        }
    }
}

/// Parses friendly text as [`format()`] writes it for `layout` and `o`: a local time that starts
/// one of the layout's time units inside its range, and a slot and sequence that fit its bits.
pub fn parse(layout: &Layout, text: &str, o: &FriendlyOptions) -> Result<u64> {
    let bad = |why: &str| {
        Error::invalid(format!(
            "{} is not a friendly id ({why}); expected {}",
            quoted(text),
            form(layout, o)
        ))
    };
    let b = text.as_bytes();
    if b.is_empty() {
        return Err(bad("empty"));
    }
    let mut parts = b.splitn(3, |&c| c == b'-');
    let (time, slot, seq) = match (parts.next(), parts.next(), parts.next()) {
        (Some(t), Some(s), Some(q)) => (t, s, q),
        _ => return Err(bad("expected three parts separated by '-'")),
    };
    let width = time_width(layout);
    if time.len() != width || !time.iter().all(u8::is_ascii_digit) {
        return Err(bad(&format!("the time part is not exactly {width} digits")));
    }
    let num = |r: std::ops::Range<usize>| -> u32 {
        time[r]
            .iter()
            .fold(0u32, |acc, c| acc * 10 + (c - b'0') as u32)
    };
    let milli = if width == 17 { num(14..17) } else { 0 };
    let fields = (
        num(0..4) as i64,
        num(4..6),
        num(6..8),
        num(8..10),
        num(10..12),
        num(12..14),
        milli,
    );
    let local = fields_to_ms(fields).ok_or_else(|| bad("no such date or time of day"))?;
    let (ws, wq) = (digits(layout.max_slot()), digits(layout.max_sequence()));
    let slot =
        field(slot, o.pad_start.then_some(ws)).map_err(|why| bad(&format!("slot: {why}")))?;
    let sequence =
        field(seq, o.pad_start.then_some(wq)).map_err(|why| bad(&format!("sequence: {why}")))?;
    let range_error = || {
        Error::invalid(format!(
            "{} has a time outside this layout's range ({} to {}); was it made by another layout \
             or in another zone than {}?",
            quoted(text),
            crate::time::format_rfc3339_ms(layout.epoch_ms()),
            crate::time::format_rfc3339_ms(layout.runs_out_at_ms() - 1),
            o.zone
        ))
    };
    let ms = match o.zone.instant_of_local(local) {
        Local::One(ms) => ms,
        Local::OutOfRange => return Err(range_error()),
        Local::Skipped => {
            return Err(Error::invalid(format!(
                "{} has a local time that does not exist in {} (skipped when clocks were set \
                 forward), so no id has it; was it written in another zone?",
                quoted(text),
                o.zone
            )))
        }
    };
    // A second layout's text drops the epoch's milliseconds (if any): add them back.
    let ms = ms + (layout.epoch_ms() % layout.unit().ms()).rem_euclid(layout.unit().ms());
    let Some(t) = layout.timestamp_at(ms) else {
        return Err(range_error());
    };
    if unit_start_ms_checked(layout, t) != Some(ms) {
        // Only reachable for a layout whose epoch has a fraction of its unit (ms layouts have
        // none; second layouts are handled above); kept as a guard.
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

/// Milliseconds since the Unix epoch of calendar fields counted as UTC, or `None` if the
/// fields name no time (month 13, February 30, hour 24, second 60).
fn fields_to_ms(f: (i64, u32, u32, u32, u32, u32, u32)) -> Option<i64> {
    let (y, mo, d, h, mi, s, milli) = f;
    if !(1..=12).contains(&mo) || d == 0 || d > 31 || h > 23 || mi > 59 || s > 59 || milli > 999 {
        return None;
    }
    let days = crate::time::days_from_civil(y, mo, d);
    let ms = days * 86_400_000
        + h as i64 * 3_600_000
        + mi as i64 * 60_000
        + s as i64 * 1000
        + milli as i64;
    // A day past the month's end (April 31) normalises to another date: refuse it.
    (crate::time::utc_fields(ms) == f).then_some(ms)
}
