//! Radix-62 and radix-36 text with CosId's converter settings: its alphabet, padding on or off
//! and a char size.
//!
//! What CosId's radix converters do, and what is kept here:
//! - One alphabet, `0-9A-Za-z` in ASCII order; radix 36 uses its first 36 characters, so its
//!   letters are upper case and a lower-case letter is no radix-36 digit.
//! - The char size is 1 to the most a radix needs for any id (11 for radix 62, 13 for radix 36;
//!   both also hold every `u64`). With the most, every id fits; with fewer, an id of
//!   `radix^size` or more does not fit and is refused rather than cut.
//! - Padded text is exactly `char size` characters, with leading `0`s; unpadded text is the
//!   shortest (`0` for zero).
//!
//! Parsing is stricter than CosId's (which takes any 1 to `char size` characters, leading zeros
//! or not, whatever the padding setting): it takes exactly what the encoder writes under the
//! same setting, so one id has one text and a changed character is caught.

use super::{quoted, Error, Result};

/// The digits of every radix here, in ASCII (and so in lexicographic) order.
pub const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Radix-62 or radix-36 text with a padding setting and a char size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Radix {
    radix: u8,
    pad_start: bool,
    char_size: u8,
}

const INVALID: u8 = 0xff;

/// Maps a byte to its digit value (up to 61), or `INVALID`.
static DECODE: [u8; 256] = {
    let mut t = [INVALID; 256];
    let mut i = 0;
    while i < 62 {
        t[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    t
};

impl Radix {
    /// CosId's default radix-62 text (and cosid's `base62`): 11 characters, padded.
    pub const BASE62: Radix = Radix {
        radix: 62,
        pad_start: true,
        char_size: 11,
    };

    /// CosId's default radix-36 text: 13 characters, padded.
    pub const BASE36: Radix = Radix {
        radix: 36,
        pad_start: true,
        char_size: 13,
    };

    /// The most characters radix `radix` needs for any id (62: 11, 36: 13).
    pub const fn max_char_size(radix: u8) -> u8 {
        if radix == 62 {
            11
        } else {
            13
        }
    }

    /// Radix `radix` (62 or 36), padded or not, `char_size` characters at most (1 to
    /// [`Radix::max_char_size`]).
    pub fn new(radix: u8, pad_start: bool, char_size: u8) -> Result<Radix> {
        if radix != 62 && radix != 36 {
            return Err(Error::invalid(format!(
                "radix {radix} is not supported; use 62 or 36"
            )));
        }
        let max = Radix::max_char_size(radix);
        if !(1..=max).contains(&char_size) {
            return Err(Error::invalid(format!(
                "char-size {char_size} is out of range for radix {radix}; use 1 to {max}"
            )));
        }
        Ok(Radix {
            radix,
            pad_start,
            char_size,
        })
    }

    /// 62 or 36.
    pub const fn radix(&self) -> u8 {
        self.radix
    }

    /// Whether the text is padded with leading `0`s to the char size.
    pub const fn pad_start(&self) -> bool {
        self.pad_start
    }

    /// The char size: the length of padded text, the longest unpadded text.
    pub const fn char_size(&self) -> u8 {
        self.char_size
    }

    /// The largest id the char size holds.
    pub fn max_value(&self) -> u64 {
        (self.radix as u64)
            .checked_pow(self.char_size as u32)
            .map_or(u64::MAX, |p| p - 1)
    }

    /// The text of `id`. Refuses an id that does not fit the char size.
    pub fn format(&self, id: u64) -> Result<String> {
        if id > self.max_value() {
            return Err(Error::invalid(format!(
                "id {id} does not fit {} radix-{} characters (at most {}); use a larger char-size \
                 (up to {})",
                self.char_size,
                self.radix,
                self.max_value(),
                Radix::max_char_size(self.radix)
            )));
        }
        let mut buf = [b'0'; 13];
        let mut i = buf.len();
        let mut n = id;
        let r = self.radix as u64;
        loop {
            i -= 1;
            buf[i] = ALPHABET[(n % r) as usize];
            n /= r;
            if n == 0 {
                break;
            }
        }
        let start = if self.pad_start {
            buf.len() - self.char_size as usize
        } else {
            i
        };
        Ok(std::str::from_utf8(&buf[start..])
            .expect("ASCII digits")
            .to_owned())
    }

    /// What text this setting writes, for error messages.
    fn form(&self) -> String {
        let chars = if self.radix == 62 {
            "0-9A-Za-z"
        } else {
            "0-9A-Z"
        };
        if self.pad_start {
            format!(
                "exactly {} characters of {chars} (radix {}, padded with leading 0s)",
                self.char_size, self.radix
            )
        } else {
            format!(
                "1 to {} characters of {chars} with no leading 0 (radix {}, not padded)",
                self.char_size, self.radix
            )
        }
    }

    /// Parses text as [`Radix::format`] writes it with this setting, and nothing else.
    pub fn parse(&self, text: &str) -> Result<u64> {
        let what = format!("a radix-{0} (base-{0}) id", self.radix);
        let bad = |why: &str| {
            Error::invalid(format!(
                "{} is not {what} ({why}); expected {}",
                quoted(text),
                self.form()
            ))
        };
        let b = text.as_bytes();
        if b.is_empty() {
            return Err(bad("empty"));
        }
        let n = self.char_size as usize;
        if self.pad_start && b.len() != n {
            return Err(bad("wrong length"));
        }
        if b.len() > n {
            return Err(bad("too long"));
        }
        let mut value: u64 = 0;
        for &c in b {
            let d = DECODE[c as usize];
            if d >= self.radix {
                return Err(bad(match c {
                    b'+' | b'-' => "a sign",
                    c if c.is_ascii_whitespace() => "whitespace",
                    b'a'..=b'z' => "a lower-case letter, which is no radix-36 digit",
                    _ if self.radix == 62 => "a character outside 0-9A-Za-z",
                    _ => "a character outside 0-9A-Z",
                }));
            }
            value = value
                .checked_mul(self.radix as u64)
                .and_then(|v| v.checked_add(d as u64))
                .ok_or_else(|| bad("larger than a 64-bit id"))?;
        }
        if !self.pad_start && b.len() > 1 && b[0] == b'0' {
            return Err(bad("leading zero"));
        }
        Ok(value)
    }
}
