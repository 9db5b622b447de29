//! Wall-time text: RFC 3339 timestamps and durations such as `500ms`, `3s`, `1m`.
//!
//! Written here rather than pulled from a date crate because the core needs only these two
//! conversions, in UTC, and must reject every malformed input with a message that names it.

use crate::error::{Error, Result};
use std::time::Duration;

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// The calendar fields of `ms` since the Unix epoch, in UTC:
/// `(year, month, day, hour, minute, second, millisecond)`.
pub fn utc_fields(ms: i64) -> (i64, u32, u32, u32, u32, u32, u32) {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, mo, d) = civil_from_days(days);
    let secs = (rem / 1000) as u32;
    (
        y,
        mo,
        d,
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        (rem % 1000) as u32,
    )
}

/// `ms` since the Unix epoch as RFC 3339 in UTC with milliseconds: `2019-12-24T16:00:00.000Z`.
pub fn format_rfc3339_ms(ms: i64) -> String {
    let (y, mo, d, h, mi, s, milli) = utc_fields(ms);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

/// Parses an RFC 3339 timestamp (`2026-12-01T00:00:00Z`, optional fraction, `Z` or `±HH:MM`)
/// into ms since the Unix epoch. Digits past the millisecond are truncated.
pub fn parse_rfc3339(text: &str) -> Result<i64> {
    let bad = |why: &str| {
        Error::invalid(format!(
            "'{text}' is not an RFC 3339 time ({why}); write it like 2026-12-01T00:00:00Z"
        ))
    };
    let b = text.trim().as_bytes();
    let num = |range: std::ops::Range<usize>| -> Result<u32> {
        let part = b.get(range).ok_or_else(|| bad("too short"))?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err(bad("expected digits"));
        }
        Ok(part
            .iter()
            .fold(0u32, |acc, c| acc * 10 + (c - b'0') as u32))
    };
    if b.len() < 20 {
        return Err(bad("too short"));
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad("expected YYYY-MM-DDTHH:MM:SS"));
    }
    if b[13] != b':' || b[16] != b':' {
        return Err(bad("expected HH:MM:SS"));
    }
    if !(1..=12).contains(&mo) || d == 0 || d > days_in_month(y as i64, mo) {
        return Err(bad("no such date"));
    }
    if h > 23 || mi > 59 || s > 60 {
        return Err(bad("no such time of day"));
    }
    let mut i = 19;
    let mut milli = 0u32;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 3 {
                milli = milli * 10 + (b[i] - b'0') as u32;
            }
            i += 1;
        }
        if i == start {
            return Err(bad("empty fraction"));
        }
        for _ in (i - start)..3 {
            milli *= 10;
        }
    }
    let offset_min: i64 = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let oh = num(i + 1..i + 3)? as i64;
            let om = num(i + 4..i + 6)? as i64;
            if oh > 23 || om > 59 {
                return Err(bad("no such offset"));
            }
            let off = oh * 60 + om;
            if *sign == b'-' {
                -off
            } else {
                off
            }
        }
        _ => return Err(bad("expected Z or an offset like +02:00 at the end")),
    };
    let days = days_from_civil(y as i64, mo, d);
    let secs = days * 86_400 + h as i64 * 3600 + mi as i64 * 60 + s.min(59) as i64;
    Ok((secs - offset_min * 60) * 1000 + milli as i64)
}

/// Parses a duration written with a unit: `250ms`, `3s`, `1m`, `2h` (whole numbers), or `0`.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let bad = |why: &str| {
        Error::invalid(format!(
            "'{text}' is not a duration ({why}); write it like 500ms, 3s or 1m"
        ))
    };
    if digits.is_empty() {
        return Err(bad("no number"));
    }
    let n: u64 = digits.parse().map_err(|_| bad("number too large"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "" => return Err(bad("missing unit")),
        _ => return Err(bad("unknown unit")),
    }
    .ok_or_else(|| bad("too large"))?;
    if ms > 365 * 86_400_000 {
        return Err(bad("longer than a year"));
    }
    Ok(Duration::from_millis(ms))
}

/// A duration in the largest whole unit that represents it exactly: `30s`, `1500ms`, `2m`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0".into()
    } else if ms % 3_600_000 == 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_instants() {
        assert_eq!(
            parse_rfc3339("2019-12-24T16:00:00Z").unwrap(),
            1_577_203_200_000
        );
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00.5Z").unwrap(), 500);
        assert_eq!(parse_rfc3339("1970-01-01T02:00:00+02:00").unwrap(), 0);
        assert_eq!(parse_rfc3339("1969-12-31T23:00:00-01:00").unwrap(), 0);
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00.123456Z").unwrap() % 1000,
            123
        );
        assert_eq!(
            format_rfc3339_ms(1_577_203_200_000),
            "2019-12-24T16:00:00.000Z"
        );
    }

    #[test]
    fn malformed_times_are_refused() {
        for bad in [
            "",
            "2019-12-24",
            "2019-12-24T16:00:00",
            "2019-13-24T16:00:00Z",
            "2023-02-29T16:00:00Z",
            "2019-12-24T24:00:00Z",
            "2019-12-24T16:00:00.Z",
            "2019-12-24T16:00:00+2:00",
            "2019/12/24T16:00:00Z",
            "yyyy-12-24T16:00:00Z",
            "2019-12-24T16:00:00Zjunk",
        ] {
            let e = parse_rfc3339(bad).unwrap_err();
            assert!(e.message().contains("RFC 3339"), "{bad}: {e}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("3s").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        for bad in [
            "",
            "s",
            "10",
            "1.5s",
            "-1s",
            "3 days",
            "99999999999999999999s",
            "400d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(format_duration(Duration::from_secs(30)), "30s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }

    proptest! {
        #[test]
        fn rfc3339_round_trips(ms in -62_135_596_800_000i64..253_402_300_799_999i64) {
            prop_assert_eq!(parse_rfc3339(&format_rfc3339_ms(ms)).unwrap(), ms);
        }

        #[test]
        fn durations_round_trip(ms in 0u64..365 * 86_400_000) {
            let d = Duration::from_millis(ms);
            prop_assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }

        #[test]
        fn parsers_never_panic(s in "\\PC{0,40}") {
            let _ = parse_rfc3339(&s);
            let _ = parse_duration(&s);
        }
    }
}
