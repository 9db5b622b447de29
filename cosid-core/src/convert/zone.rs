//! The time zone friendly id text is written in: UTC, a fixed offset, or an IANA zone.
//!
//! IANA zones come from the Time Zone Database compiled into the library (jiff's bundled copy),
//! never from the system's files, so a static binary on a machine without `/usr/share/zoneinfo`
//! reads and writes the same text as any other, and the text of an id does not change with the
//! host it is read on. Updating the database is updating the crate.

use super::{quoted, Error, Result};
use jiff::tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase};

const ZONE_FORM: &str = "UTC, an offset from -18:00 to +18:00 like +08:00, or an IANA zone \
                         name like Asia/Shanghai";

/// A time zone for friendly text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Zone {
    /// UTC, the default.
    #[default]
    Utc,
    /// A fixed offset from UTC, in seconds (whole minutes).
    Offset(i32),
    /// An IANA zone, with its canonical name.
    Named(String, TimeZone),
}

/// How a local time reads in a zone.
pub(crate) enum Local {
    /// One instant: ms since the Unix epoch.
    One(i64),
    /// The local time was skipped (clocks went forward): no instant has it.
    Skipped,
    /// Past the zone database's range (the last hours of the year 9999).
    OutOfRange,
}

impl Zone {
    /// Parses `UTC` (or `Z`), `+HH:MM` / `-HH:MM`, or an IANA zone name (any letter case, as
    /// the database has it; the canonical name is kept).
    pub fn parse(text: &str) -> Result<Zone> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "{} is not a time zone ({why}); expected {ZONE_FORM}",
                quoted(text)
            ))
        };
        if text == "UTC" || text == "Z" {
            return Ok(Zone::Utc);
        }
        if let Some(rest) = text.strip_prefix(['+', '-']) {
            let b = rest.as_bytes();
            let two = |i: usize| -> Option<i32> {
                let (h, l) = (b[i].wrapping_sub(b'0'), b[i + 1].wrapping_sub(b'0'));
                (h < 10 && l < 10).then_some(h as i32 * 10 + l as i32)
            };
            if b.len() != 5 || b[2] != b':' {
                return Err(bad("an offset is written ±HH:MM"));
            }
            let (Some(h), Some(m)) = (two(0), two(3)) else {
                return Err(bad("an offset is written ±HH:MM"));
            };
            if m > 59 || h * 60 + m > 18 * 60 {
                return Err(bad("offset out of range"));
            }
            let secs = (h * 60 + m) * 60;
            return Ok(Zone::Offset(if text.starts_with('-') {
                -secs
            } else {
                secs
            }));
        }
        if text.is_empty() {
            return Err(bad("empty"));
        }
        match TimeZoneDatabase::bundled().get(text) {
            Ok(tz) if tz.is_unknown() => Err(bad("the database's name for an unknown zone")),
            // `utc` in another letter case is the database's UTC: the same zone as `UTC`.
            Ok(tz) if tz.iana_name() == Some("UTC") => Ok(Zone::Utc),
            Ok(tz) => {
                let name = tz.iana_name().unwrap_or(text).to_owned();
                Ok(Zone::Named(name, tz))
            }
            Err(_) => Err(bad("no such zone in the IANA Time Zone Database")),
        }
    }

    /// The zone's offset from UTC at instant `ms`, in seconds; `None` past the zone
    /// database's range (years -9999 to 9999, less a day at each end).
    pub fn offset_at(&self, ms: i64) -> Option<i32> {
        match self {
            Zone::Utc => Some(0),
            Zone::Offset(s) => Some(*s),
            Zone::Named(_, tz) => jiff::Timestamp::from_millisecond(ms)
                .ok()
                .map(|t| tz.to_offset(t).seconds()),
        }
    }

    /// The instant of local time `local_ms` (local calendar fields counted as if they were UTC).
    /// A local time that occurs twice (clocks went back) is the earlier instant, as CosId reads
    /// it (`java.time` takes the offset before the change); one that never occurs is
    /// [`Local::Skipped`].
    pub(crate) fn instant_of_local(&self, local_ms: i64) -> Local {
        let tz = match self {
            Zone::Utc => return Local::One(local_ms),
            Zone::Offset(s) => return Local::One(local_ms - *s as i64 * 1000),
            Zone::Named(_, tz) => tz,
        };
        let (y, mo, d, h, mi, s, milli) = crate::time::utc_fields(local_ms);
        let Ok(dt) = jiff::civil::DateTime::new(
            y as i16,
            mo as i8,
            d as i8,
            h as i8,
            mi as i8,
            s as i8,
            milli as i32 * 1_000_000,
        ) else {
            return Local::OutOfRange;
        };
        let offset = match tz.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { offset } => offset,
            AmbiguousOffset::Fold { before, .. } => before,
            AmbiguousOffset::Gap { .. } => return Local::Skipped,
        };
        let ms = local_ms - offset.seconds() as i64 * 1000;
        // The instant must be one the zone can also write back (see `offset_at`).
        match self.offset_at(ms) {
            Some(_) => Local::One(ms),
            None => Local::OutOfRange,
        }
    }
}

impl std::fmt::Display for Zone {
    /// The text [`Zone::parse`] reads back: `UTC`, `+08:00`, `Asia/Shanghai`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Zone::Utc => f.write_str("UTC"),
            Zone::Offset(s) => {
                let sign = if *s < 0 { '-' } else { '+' };
                let m = s.unsigned_abs() / 60;
                write!(f, "{sign}{:02}:{:02}", m / 60, m % 60)
            }
            Zone::Named(name, _) => f.write_str(name),
        }
    }
}
