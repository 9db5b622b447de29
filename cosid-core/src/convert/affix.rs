//! Text around an id's text, as CosId's converters write it: a fixed prefix and suffix, and a
//! date prefix (the date the text was written, not the id's time: CosId's
//! `DatePrefixIdConverter` formats "now").
//!
//! The order is CosId's (its Spring starter wraps the converters in this order):
//!
//! ```text
//! date-before-prefix=true  (the default):  PREFIX DATE DELIMITER BODY SUFFIX
//! date-before-prefix=false:                DATE DELIMITER PREFIX BODY SUFFIX
//! ```
//!
//! Reading is strict, as every parser of [`crate::convert`] is: the prefix, suffix and delimiter
//! must be there exactly, and the date must have the pattern's shape (a digit for every pattern
//! letter, each literal character as written) and name a possible month, day, hour, minute and
//! second. The date's value is otherwise not checked (any day is accepted: the text may have
//! been written on any day).
//!
//! Every piece is bounded ([`MAX_AFFIX_BYTES`], [`MAX_DATE_PATTERN`], [`MAX_DELIMITER_BYTES`]),
//! so the longest text of any format still fits one fixed buffer (the C API's
//! `COSID_ID_TEXT_BUFFER_SIZE`).

use super::zone::Zone;
use super::{quoted, Error, Result};
use std::fmt::Write;

/// Longest prefix, and longest suffix, in bytes.
pub const MAX_AFFIX_BYTES: usize = 32;
/// Longest date pattern, in characters (every character of a pattern is one byte of text).
pub const MAX_DATE_PATTERN: usize = 16;
/// Longest date delimiter, in bytes.
pub const MAX_DELIMITER_BYTES: usize = 8;
/// The most bytes affixes add to an id's text.
pub const MAX_AFFIXES_BYTES: usize = 2 * MAX_AFFIX_BYTES + MAX_DATE_PATTERN + MAX_DELIMITER_BYTES;

/// One piece of a date pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// `yyyy`: the year, 4 digits.
    Year4,
    /// `yy`: the year's last 2 digits.
    Year2,
    /// `MM`, `dd`, `HH`, `mm`, `ss`: 2 digits each.
    Month,
    Day,
    Hour,
    Minute,
    Second,
    /// Any other ASCII character that is not a letter, as written.
    Literal(u8),
}

impl Part {
    fn width(self) -> usize {
        match self {
            Part::Year4 => 4,
            Part::Literal(_) => 1,
            _ => 2,
        }
    }
}

const PATTERN_HELP: &str = "a date pattern is made of yyyy, yy, MM, dd, HH, mm and ss, and \
     ASCII characters that are not letters (e.g. yyMMdd, yyyy-MM-dd)";

/// A date pattern in CosId's (`java.time`'s) letters, the subset whose text always has the
/// pattern's length (which is how CosId reads it back): `yyyy`, `yy`, `MM`, `dd`, `HH`, `mm`,
/// `ss`, and literal ASCII characters that are not letters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatePattern {
    text: String,
    parts: Vec<Part>,
}

impl DatePattern {
    /// Reads a pattern such as `yyMMdd` (CosId's default) or `yyyy-MM-dd`.
    pub fn parse(text: &str) -> Result<DatePattern> {
        let bad = |why: String| {
            Error::invalid(format!(
                "date-prefix={} is not a date pattern: {why}; {PATTERN_HELP}",
                quoted(text)
            ))
        };
        if text.is_empty() {
            return Err(bad("it is empty".into()));
        }
        if text.len() > MAX_DATE_PATTERN {
            return Err(bad(format!(
                "it has {} characters, more than {MAX_DATE_PATTERN}",
                text.len()
            )));
        }
        let b = text.as_bytes();
        let mut parts = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if !c.is_ascii_alphabetic() {
                if !c.is_ascii_graphic() && c != b' ' || c == b'\'' {
                    return Err(bad(format!(
                        "{} is not a literal a pattern may hold",
                        quoted(&text[i..].chars().next().unwrap_or_default().to_string())
                    )));
                }
                parts.push(Part::Literal(c));
                i += 1;
                continue;
            }
            let run = b[i..].iter().take_while(|&&x| x == c).count();
            let part = match (c, run) {
                (b'y', 4) => Part::Year4,
                (b'y', 2) => Part::Year2,
                (b'M', 2) => Part::Month,
                (b'd', 2) => Part::Day,
                (b'H', 2) => Part::Hour,
                (b'm', 2) => Part::Minute,
                (b's', 2) => Part::Second,
                _ => {
                    return Err(bad(format!(
                        "{} is not one of its fields",
                        quoted(&text[i..i + run])
                    )))
                }
            };
            parts.push(part);
            i += run;
        }
        Ok(DatePattern {
            text: text.to_string(),
            parts,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The text's length: every field and literal writes a fixed number of bytes.
    fn width(&self) -> usize {
        self.parts.iter().map(|p| p.width()).sum()
    }

    /// The date of local time `local_ms` (calendar fields counted as UTC), or `None` before
    /// the year 0000 or past 9999.
    fn render(&self, local_ms: i64) -> Option<String> {
        let (y, mo, d, h, mi, s, _) = crate::time::utc_fields(local_ms);
        if !(0..=9999).contains(&y) {
            return None;
        }
        let mut out = String::with_capacity(self.width());
        for p in &self.parts {
            // Writing into a String cannot fail.
            let _ = match *p {
                Part::Year4 => write!(out, "{y:04}"),
                Part::Year2 => write!(out, "{:02}", y % 100),
                Part::Month => write!(out, "{mo:02}"),
                Part::Day => write!(out, "{d:02}"),
                Part::Hour => write!(out, "{h:02}"),
                Part::Minute => write!(out, "{mi:02}"),
                Part::Second => write!(out, "{s:02}"),
                Part::Literal(c) => {
                    out.push(c as char);
                    Ok(())
                }
            };
        }
        Some(out)
    }

    /// Whether `text` is a date this pattern could have written: its shape, and every field in
    /// its range (a day up to its month's longest when the pattern has both, February 29
    /// included).
    fn matches(&self, text: &[u8]) -> bool {
        if text.len() != self.width() {
            return false;
        }
        let (mut at, mut month, mut day) = (0, None, None);
        for p in &self.parts {
            let field = &text[at..at + p.width()];
            at += p.width();
            if let Part::Literal(c) = *p {
                if field != [c] {
                    return false;
                }
                continue;
            }
            if !field.iter().all(u8::is_ascii_digit) {
                return false;
            }
            let n = field
                .iter()
                .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
            let in_range = match p {
                Part::Month => (1..=12).contains(&n),
                Part::Day => (1..=31).contains(&n),
                Part::Hour => n <= 23,
                Part::Minute | Part::Second => n <= 59,
                _ => true,
            };
            if !in_range {
                return false;
            }
            match p {
                Part::Month => month = Some(n),
                Part::Day => day = Some(n),
                _ => {}
            }
        }
        const LONGEST: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        match (month, day) {
            (Some(m), Some(d)) => d <= LONGEST[m as usize - 1],
            _ => true,
        }
    }
}

/// The text around an id's text: prefix, suffix and date prefix, none by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Affixes {
    /// Written before the id's text (outside a date applied before it).
    pub prefix: String,
    /// Written after the id's text.
    pub suffix: String,
    /// The date prefix's pattern; no date prefix if `None`. The three settings below apply
    /// only with one.
    pub date_pattern: Option<DatePattern>,
    /// Between the date and what follows it (`-` by default, as CosId's).
    pub date_delimiter: String,
    /// The zone the date is written in (UTC by default; CosId writes its JVM's zone).
    pub date_zone: Zone,
    /// CosId's `before-prefix` (true by default): the date is applied before the prefix, so the
    /// text is `PREFIX DATE DELIMITER BODY`; if false, `DATE DELIMITER PREFIX BODY`.
    pub date_before_prefix: bool,
}

impl Default for Affixes {
    fn default() -> Affixes {
        Affixes {
            prefix: String::new(),
            suffix: String::new(),
            date_pattern: None,
            date_delimiter: "-".into(),
            date_zone: Zone::Utc,
            date_before_prefix: true,
        }
    }
}

/// Checks a prefix, suffix or delimiter: at most `max` bytes, no control or format character.
pub(crate) fn check_piece(option: &str, value: &str, max: usize) -> Result<()> {
    if value.len() > max {
        return Err(Error::invalid(format!(
            "{option}={} has {} bytes, more than the {max} it may have",
            quoted(value),
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "{option}={} holds a control character; use printable text",
            quoted(value)
        )));
    }
    // A bidirectional override or another format character (U+202E, U+2066, a zero-width
    // space) reorders or hides what is shown around it: an id's text could read as another.
    if let Some(c) = value.chars().find(|c| crate::bounds::is_dangerous(*c)) {
        return Err(Error::invalid(format!(
            "{option}={} holds the format character U+{:04X}, which changes how the text \
             around it is shown; use printable text",
            quoted(value),
            c as u32
        )));
    }
    Ok(())
}

impl Affixes {
    /// Whether there is nothing around the id's text.
    pub fn is_empty(&self) -> bool {
        self.prefix.is_empty() && self.suffix.is_empty() && self.date_pattern.is_none()
    }

    /// `body` with the affixes around it, the date (if any) being that of instant `now_ms`
    /// (milliseconds since the Unix epoch) in the date's zone.
    pub fn wrap(&self, body: &str, now_ms: i64) -> Result<String> {
        if self.is_empty() {
            return Ok(body.to_string());
        }
        let date = match &self.date_pattern {
            None => None,
            Some(pattern) => Some(
                self.date_zone
                    .offset_at(now_ms)
                    .and_then(|off| now_ms.checked_add(i64::from(off) * 1000))
                    .and_then(|local| pattern.render(local))
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "the date prefix cannot write instant {now_ms} ms in {}: it is \
                             outside the years 0000 to 9999",
                            self.date_zone
                        ))
                    })?,
            ),
        };
        let mut out = String::with_capacity(body.len() + MAX_AFFIXES_BYTES);
        match &date {
            Some(date) if !self.date_before_prefix => {
                out.push_str(date);
                out.push_str(&self.date_delimiter);
                out.push_str(&self.prefix);
            }
            Some(date) => {
                out.push_str(&self.prefix);
                out.push_str(date);
                out.push_str(&self.date_delimiter);
            }
            None => out.push_str(&self.prefix),
        }
        out.push_str(body);
        out.push_str(&self.suffix);
        Ok(out)
    }

    /// The id's text inside `text`: the affixes checked and taken off, or an error naming the
    /// piece that is not there.
    pub fn unwrap<'a>(&self, text: &'a str) -> Result<&'a str> {
        if self.is_empty() {
            return Ok(text);
        }
        let missing = |what: String| {
            Error::invalid(format!(
                "{} does not {what}; give the options the text was written with",
                quoted(text)
            ))
        };
        let mut rest = text
            .strip_suffix(self.suffix.as_str())
            .ok_or_else(|| missing(format!("end with the suffix {}", quoted(&self.suffix))))?;
        if let Some(p) = self
            .date_pattern
            .as_ref()
            .filter(|_| !self.date_before_prefix)
        {
            rest = self.strip_date(text, rest, p)?;
        }
        rest = rest
            .strip_prefix(self.prefix.as_str())
            .ok_or_else(|| missing(format!("start with the prefix {}", quoted(&self.prefix))))?;
        if let Some(p) = self
            .date_pattern
            .as_ref()
            .filter(|_| self.date_before_prefix)
        {
            rest = self.strip_date(text, rest, p)?;
        }
        Ok(rest)
    }

    fn strip_date<'a>(&self, text: &str, rest: &'a str, pattern: &DatePattern) -> Result<&'a str> {
        let w = pattern.width();
        let date_ok = rest
            .as_bytes()
            .get(..w)
            .is_some_and(|date| pattern.matches(date));
        // A date is ASCII, so `w` is a character boundary when it matched.
        let after = if date_ok {
            rest[w..].strip_prefix(self.date_delimiter.as_str())
        } else {
            None
        };
        after.ok_or_else(|| {
            Error::invalid(format!(
                "{} has no date of the pattern {} followed by {} where one belongs; give the \
                 options the text was written with",
                quoted(text),
                quoted(pattern.as_str()),
                quoted(&self.date_delimiter)
            ))
        })
    }
}
