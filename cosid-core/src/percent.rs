//! Percent-encoding (`%XX`, RFC 3986), the one codec behind store URLs (user names, passwords,
//! file parameters) and the text records of the stores (owner keys).
//!
//! Decoding is strict: every `%` must start two hexadecimal digits, and the bytes must be UTF-8.
//! Anything else is refused, never guessed at or replaced, so that a mistyped password fails
//! with a clear error instead of becoming another password. It works on bytes, so no input can
//! make it slice through a character.

/// Appends `s` to `out`, with every byte for which `keep` is false written as `%XX` (the text
/// records of Redis and etcd, and the text options of an id format's spec).
pub(crate) fn encode(s: &str, keep: impl Fn(u8) -> bool, out: &mut String) {
    use std::fmt::Write;
    for b in s.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// `s` with every `%XX` decoded; `None` when a `%` does not start two hex digits or the result
/// is not UTF-8.
pub(crate) fn decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_string());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let (hi, lo) = (bytes.get(i + 1)?, bytes.get(i + 2)?);
            out.push(hex(*hi)? << 4 | hex(*lo)?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(any(feature = "redis", feature = "etcd"))]
    #[test]
    fn decodes_what_it_encodes() {
        for s in ["", "plain", "p@ss:w/rd?&=%", "ü €", "%zz", "\n\u{0}"] {
            let mut out = String::new();
            encode(s, |b| b.is_ascii_alphanumeric(), &mut out);
            assert!(out.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'%'));
            assert_eq!(decode(&out).as_deref(), Some(s));
        }
        assert_eq!(decode("a%40b%3a").as_deref(), Some("a@b:"));
    }

    #[test]
    fn refuses_what_is_not_percent_encoded_utf8_without_panicking() {
        // "%a" followed by a two-byte character: slicing the text at byte 3 would split it.
        for bad in [
            "%", "%4", "x%g0", "%a\u{e9}", "%\u{e9}", "%ff", "%C3", "%C3%28",
        ] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
