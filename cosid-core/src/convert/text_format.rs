//! The text forms of ids by name, and their settings: one way to name a form and its options
//! (`radix62,pad-start=false,char-size=10`, `friendly,zone=Asia/Shanghai,pad-start=true`) for
//! the command line, the C API, Python and Node alike.

use super::affix::{self, Affixes, DatePattern};
use super::friendly::{self, FriendlyOptions};
use super::radix::Radix;
use super::zone::Zone;
use super::{check_width, parse_decimal, parse_hex, quoted, to_decimal, to_hex, Error, Result};
use crate::layout::Layout;

/// A text form of an id, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdFormat {
    /// `dec`: decimal digits.
    Decimal,
    /// `hex`: lower-case hex digits (parsing takes `0x` and upper case too).
    Hex,
    /// `base62` (also called `radix62`): CosId's radix-62 text; by default 11 characters of
    /// `0-9A-Za-z`, padded, sorting like the ids.
    Base62,
    /// `radix36`: CosId's radix-36 text; by default 13 characters of `0-9A-Z`, padded.
    Radix36,
    /// `friendly`: `yyyyMMddHHmmssSSS-slot-sequence` (`yyyyMMddHHmmss-…` for second layouts).
    Friendly,
}

const NAMES: &str = "dec, hex, base62 (or radix62), radix36 or friendly";

impl IdFormat {
    /// Every form.
    pub const ALL: [IdFormat; 5] = [
        IdFormat::Decimal,
        IdFormat::Hex,
        IdFormat::Base62,
        IdFormat::Radix36,
        IdFormat::Friendly,
    ];

    /// `dec`, `hex`, `base62`, `radix36` or `friendly`.
    pub const fn name(self) -> &'static str {
        match self {
            IdFormat::Decimal => "dec",
            IdFormat::Hex => "hex",
            IdFormat::Base62 => "base62",
            IdFormat::Radix36 => "radix36",
            IdFormat::Friendly => "friendly",
        }
    }

    /// The form called `name` (as [`IdFormat::name`] writes it; `radix62` is `base62`).
    pub fn from_name(name: &str) -> Result<IdFormat> {
        if name == "radix62" {
            return Ok(IdFormat::Base62);
        }
        IdFormat::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{} is not an id format; expected {NAMES}",
                    quoted(name)
                ))
            })
    }

    /// The text of `id` in this form with its default settings. Refuses an id wider than
    /// `layout`.
    pub fn format(self, layout: &Layout, id: u64) -> Result<String> {
        TextFormat::new(self).format(layout, id)
    }

    /// Parses `text` in this form with its default settings and refuses an id wider than
    /// `layout`.
    pub fn parse(self, layout: &Layout, text: &str) -> Result<u64> {
        TextFormat::new(self).parse_id(layout, text)
    }
}

impl std::fmt::Display for IdFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A text form with its settings. Written (and read by [`TextFormat::parse`]) as the form's
/// name followed by `,key=value` options:
///
/// | form | options (default) |
/// |---|---|
/// | `dec` | `pad-start` (`false`), `char-size` 1 to 20 (`11`): CosId's to-string converter |
/// | `hex` | none |
/// | `base62` / `radix62` | `pad-start` (`true`), `char-size` 1 to 11 (`11`) |
/// | `radix36` | `pad-start` (`true`), `char-size` 1 to 13 (`13`) |
/// | `friendly` | `zone` (`UTC`; an offset like `+08:00` or an IANA name), `pad-start` (`false`) |
/// | every form | `prefix`, `suffix` (none); `date-prefix` (none: a pattern like `yyMMdd`) with `date-delimiter` (`-`), `date-zone` (`UTC`) and `date-before-prefix` (`true`) |
///
/// The text options (`prefix`, `suffix`, `date-prefix`, `date-delimiter`) are
/// percent-decoded, so `%2C` writes a comma and `%25` a percent sign; [`Affixes`] says how they
/// are placed and read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextFormat {
    form: IdFormat,
    radix: Radix,
    friendly: FriendlyOptions,
    decimal: DecimalPadding,
    affixes: Affixes,
}

/// CosId's to-string converter: decimal text, zero-padded on the left to `char_size` digits
/// when `pad_start` (a longer id is written whole, never cut).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecimalPadding {
    /// Zero-pad to `char_size` digits.
    pub pad_start: bool,
    /// The digits padded text has at least (1 to 20; CosId's default 11).
    pub char_size: u8,
}

impl Default for DecimalPadding {
    fn default() -> DecimalPadding {
        DecimalPadding {
            pad_start: false,
            char_size: 11,
        }
    }
}

impl TextFormat {
    /// `form` with its default settings (CosId's defaults: radix text padded to the most
    /// characters; friendly text unpadded; UTC).
    pub fn new(form: IdFormat) -> TextFormat {
        TextFormat {
            form,
            radix: if form == IdFormat::Radix36 {
                Radix::BASE36
            } else {
                Radix::BASE62
            },
            friendly: FriendlyOptions::default(),
            decimal: DecimalPadding::default(),
            affixes: Affixes::default(),
        }
    }

    /// Reads `NAME[,KEY=VALUE]...`, e.g. `radix36`, `radix62,pad-start=false,char-size=10` or
    /// `friendly,zone=Asia/Shanghai,pad-start=true`. An option given twice, or one the form has
    /// not, is refused.
    pub fn parse(spec: &str) -> Result<TextFormat> {
        let mut parts = spec.split(',');
        let name = parts.next().unwrap_or_default();
        let mut f = TextFormat::new(IdFormat::from_name(name)?);
        let mut seen: Vec<&str> = Vec::new();
        for opt in parts {
            let Some((key, value)) = opt.split_once('=') else {
                return Err(Error::invalid(format!(
                    "{} in format {} is not an option; write KEY=VALUE ({})",
                    quoted(opt),
                    quoted(spec),
                    f.options_help()
                )));
            };
            if seen.contains(&key) {
                return Err(Error::invalid(format!(
                    "format {} gives {key} twice; give it once",
                    quoted(spec)
                )));
            }
            seen.push(key);
            f.set(key, value)?;
        }
        if f.affixes.date_pattern.is_none() {
            if let Some(k) = seen.iter().find(|k| k.starts_with("date-")) {
                return Err(Error::invalid(format!(
                    "format {} gives {k} without date-prefix; add date-prefix=PATTERN (e.g. \
                     date-prefix=yyMMdd) or leave {k} out",
                    quoted(spec)
                )));
            }
        }
        Ok(f)
    }

    /// Sets one option by name: `pad-start` (`true` or `false`), `char-size` (a number) or
    /// `zone` (`UTC`, `+08:00`, `Asia/Shanghai`). Refuses an option this form has not.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let radix = matches!(self.form, IdFormat::Base62 | IdFormat::Radix36);
        let friendly = self.form == IdFormat::Friendly;
        let decimal = self.form == IdFormat::Decimal;
        match key {
            "pad-start" if radix || friendly || decimal => {
                let on = match value {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(Error::invalid(format!(
                            "pad-start={} is not a setting; use pad-start=true or pad-start=false",
                            quoted(value)
                        )))
                    }
                };
                if radix {
                    self.radix = Radix::new(self.radix.radix(), on, self.radix.char_size())?;
                } else if decimal {
                    self.decimal.pad_start = on;
                } else {
                    self.friendly.pad_start = on;
                }
            }
            "char-size" if radix || decimal => {
                let max = if decimal {
                    super::DECIMAL_MAX_WIDTH as u8
                } else {
                    Radix::max_char_size(self.radix.radix())
                };
                let size = value
                    .parse::<u8>()
                    .ok()
                    .filter(|n| (1..=max).contains(n) && !value.starts_with('+'))
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "char-size={} is not a setting of {}; use a number from 1 to {max}",
                            quoted(value),
                            self.form
                        ))
                    })?;
                if decimal {
                    self.decimal.char_size = size;
                } else {
                    self.radix = Radix::new(self.radix.radix(), self.radix.pad_start(), size)?;
                }
            }
            "zone" if friendly => self.friendly.zone = Zone::parse(value)?,
            "prefix" | "suffix" => {
                let text = text_option(key, value)?;
                affix::check_piece(key, &text, affix::MAX_AFFIX_BYTES)?;
                if key == "prefix" {
                    self.affixes.prefix = text;
                } else {
                    self.affixes.suffix = text;
                }
            }
            "date-prefix" => {
                self.affixes.date_pattern = Some(DatePattern::parse(&text_option(key, value)?)?)
            }
            "date-delimiter" => {
                let text = text_option(key, value)?;
                affix::check_piece(key, &text, affix::MAX_DELIMITER_BYTES)?;
                self.affixes.date_delimiter = text;
            }
            "date-zone" => self.affixes.date_zone = Zone::parse(value)?,
            "date-before-prefix" => {
                self.affixes.date_before_prefix = match value {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(Error::invalid(format!(
                            "date-before-prefix={} is not a setting; use \
                             date-before-prefix=true or date-before-prefix=false",
                            quoted(value)
                        )))
                    }
                }
            }
            _ => {
                return Err(Error::invalid(format!(
                    "{} is not an option of {}; {}",
                    quoted(key),
                    self.form,
                    self.options_help()
                )))
            }
        }
        Ok(())
    }

    fn options_help(&self) -> String {
        let own = match self.form {
            IdFormat::Decimal => "pad-start=true|false, char-size=1..20, ",
            IdFormat::Hex => "",
            IdFormat::Base62 => "pad-start=true|false, char-size=1..11, ",
            IdFormat::Radix36 => "pad-start=true|false, char-size=1..13, ",
            IdFormat::Friendly => "zone=ZONE, pad-start=true|false, ",
        };
        format!(
            "its options are {own}prefix=TEXT, suffix=TEXT, date-prefix=PATTERN, \
             date-delimiter=TEXT, date-zone=ZONE and date-before-prefix=true|false"
        )
    }

    /// The form.
    pub fn form(&self) -> IdFormat {
        self.form
    }

    /// The radix setting (meaningful for `base62` and `radix36`).
    pub fn radix(&self) -> Radix {
        self.radix
    }

    /// The padding of decimal text (meaningful for `dec`).
    pub fn decimal(&self) -> DecimalPadding {
        self.decimal
    }

    /// The friendly settings (meaningful for `friendly`).
    pub fn friendly(&self) -> &FriendlyOptions {
        &self.friendly
    }

    /// The prefix, suffix and date prefix around the id's text.
    pub fn affixes(&self) -> &Affixes {
        &self.affixes
    }

    /// The text of `id`, a date prefix being today's (the system clock's). Refuses an id wider
    /// than `layout`, and one the setting cannot write (radix text shorter than the id needs;
    /// friendly text past the year 9999).
    pub fn format(&self, layout: &Layout, id: u64) -> Result<String> {
        let now_ms = if self.affixes.date_pattern.is_some() {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        } else {
            0
        };
        self.format_at(layout, id, now_ms)
    }

    /// [`TextFormat::format`] with the date prefix of instant `now_ms` (milliseconds since the
    /// Unix epoch) instead of the system clock's.
    pub fn format_at(&self, layout: &Layout, id: u64, now_ms: i64) -> Result<String> {
        let body = self.format_body(layout, id)?;
        self.affixes.wrap(&body, now_ms)
    }

    fn format_body(&self, layout: &Layout, id: u64) -> Result<String> {
        if self.form == IdFormat::Friendly {
            return friendly::format(layout, id, &self.friendly);
        }
        layout.decompose(id)?;
        match self.form {
            IdFormat::Decimal => Ok(self.decimal.pad(to_decimal(id))),
            IdFormat::Hex => Ok(to_hex(id)),
            _ => self.radix.format(id),
        }
    }

    /// Parses `text` written with this setting, and refuses an id wider than `layout`.
    pub fn parse_id(&self, layout: &Layout, text: &str) -> Result<u64> {
        let text = self.affixes.unwrap(text)?;
        let id = match self.form {
            IdFormat::Decimal => self.decimal.parse(text)?,
            IdFormat::Hex => parse_hex(text)?,
            IdFormat::Base62 | IdFormat::Radix36 => self.radix.parse(text)?,
            IdFormat::Friendly => return friendly::parse(layout, text, &self.friendly),
        };
        check_width(layout, text, id)
    }
}

impl std::fmt::Display for TextFormat {
    /// The spec [`TextFormat::parse`] reads back, with only the options that differ from the
    /// form's defaults: `radix62,pad-start=false`, `friendly,zone=Asia/Shanghai`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = TextFormat::new(self.form);
        f.write_str(self.form.name())?;
        if self.radix.pad_start() != d.radix.pad_start() {
            write!(f, ",pad-start={}", self.radix.pad_start())?;
        }
        if self.radix.char_size() != d.radix.char_size() {
            write!(f, ",char-size={}", self.radix.char_size())?;
        }
        if self.friendly.zone != d.friendly.zone {
            write!(f, ",zone={}", self.friendly.zone)?;
        }
        if self.friendly.pad_start != d.friendly.pad_start {
            write!(f, ",pad-start={}", self.friendly.pad_start)?;
        }
        if self.decimal.pad_start != d.decimal.pad_start {
            write!(f, ",pad-start={}", self.decimal.pad_start)?;
        }
        if self.decimal.char_size != d.decimal.char_size {
            write!(f, ",char-size={}", self.decimal.char_size)?;
        }
        let (a, da) = (&self.affixes, &d.affixes);
        if !a.prefix.is_empty() {
            write!(f, ",prefix={}", encoded(&a.prefix))?;
        }
        if !a.suffix.is_empty() {
            write!(f, ",suffix={}", encoded(&a.suffix))?;
        }
        if let Some(p) = &a.date_pattern {
            write!(f, ",date-prefix={}", encoded(p.as_str()))?;
            if a.date_delimiter != da.date_delimiter {
                write!(f, ",date-delimiter={}", encoded(&a.date_delimiter))?;
            }
            if a.date_zone != da.date_zone {
                write!(f, ",date-zone={}", a.date_zone)?;
            }
            if a.date_before_prefix != da.date_before_prefix {
                write!(f, ",date-before-prefix={}", a.date_before_prefix)?;
            }
        }
        Ok(())
    }
}

/// A text option's value, percent-decoded (`%2C` is a comma): the spec separates options with
/// commas and keys from values with `=`.
fn text_option(key: &str, value: &str) -> Result<String> {
    crate::percent::decode(value).ok_or_else(|| {
        Error::invalid(format!(
            "{key}={} is not valid percent-encoded text: every % starts two hex digits (%2C is \
             a comma, %25 a percent sign) and the result is UTF-8",
            quoted(value)
        ))
    })
}

/// A text option's value as a spec writes it: the characters a spec gives meaning to (`,`,
/// `=`, `%`), spaces and every byte outside printable ASCII percent-encoded.
fn encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    crate::percent::encode(
        text,
        |b| b.is_ascii_graphic() && !matches!(b, b',' | b'=' | b'%'),
        &mut out,
    );
    out
}

impl DecimalPadding {
    /// `digits` (canonical decimal) padded as set.
    fn pad(self, digits: String) -> String {
        let width = usize::from(self.char_size);
        if self.pad_start && digits.len() < width {
            format!("{digits:0>width$}")
        } else {
            digits
        }
    }

    /// The id of `text` written with this padding: canonical decimal unpadded; padded, at
    /// least `char_size` digits, with leading zeros only to make up that width.
    fn parse(self, text: &str) -> Result<u64> {
        if !self.pad_start {
            return parse_decimal(text);
        }
        let width = usize::from(self.char_size);
        let digits = text.trim_start_matches('0');
        let digits = if digits.is_empty() && !text.is_empty() {
            "0"
        } else {
            digits
        };
        let id = parse_decimal(digits).map_err(|_| {
            Error::invalid(format!(
                "{} is not a decimal id zero-padded to {width} digits (pad-start=true, \
                 char-size={width})",
                quoted(text)
            ))
        })?;
        if self.pad(to_decimal(id)) != text {
            return Err(Error::invalid(format!(
                "{} is not the text of pad-start=true, char-size={width}: that writes {} for id \
                 {id}; give the options the text was written with",
                quoted(text),
                quoted(&self.pad(to_decimal(id)))
            )));
        }
        Ok(id)
    }
}
