//! The checks the fuzz targets run, one function per target.
//!
//! Each takes arbitrary bytes and panics only when a parser breaks its contract: a panic inside
//! a parser, an error of another kind than `InvalidArgument`, or accepted text that is not the
//! canonical text of the value it parsed to. `cargo fuzz` drives them with libFuzzer (see
//! `docs/fuzzing.md`); `cosid-core/tests/fuzz_checks.rs` includes this file and drives them with
//! proptest, so the plain test command runs them too.
//!
//! A `parse_config` check (the configuration parser) belongs beside these.

use cosid_core::convert::{self, IdFormat};
use cosid_core::time;
use cosid_core::{ErrorKind, Layout};

const PRESETS: [Layout; 4] = [
    Layout::MILLIS,
    Layout::SECONDS,
    Layout::SAFE_JS_MILLIS,
    Layout::SAFE_JS_SECONDS,
];

fn invalid<T: std::fmt::Debug>(what: &str, text: &str, r: cosid_core::Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            assert_eq!(
                e.kind(),
                ErrorKind::InvalidArgument,
                "{what}({text:?}) failed with {e}"
            );
            assert!(!e.message().is_empty());
            None
        }
    }
}

/// The layout the first byte chooses: a preset, or (from the next bytes) a custom layout that
/// `Layout::new` accepted.
fn layout_from(data: &[u8]) -> (Layout, &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return (Layout::MILLIS, data);
    };
    if sel < 0xf0 {
        return (PRESETS[sel as usize % 4], rest);
    }
    let [ts, node, seq, flags, rest @ ..] = rest else {
        return (PRESETS[sel as usize % 4], rest);
    };
    let unit = if flags & 1 == 0 {
        cosid_core::TimeUnit::Millis
    } else {
        cosid_core::TimeUnit::Seconds
    };
    // 54+ bits of seconds once overflowed `Layout::new` (found by this target); it now refuses
    // them, so every width is fed in.
    let ts = *ts;
    let epoch = cosid_core::layout::COSID_EPOCH_MS;
    match Layout::new(epoch, unit, ts, *node, *seq, flags & 2 != 0) {
        Ok(l) => (l, rest),
        Err(_) => (PRESETS[sel as usize % 4], rest),
    }
}

/// Target `parse_id`: every id parser, `IdFormat::parse`, decoding and `Layout::decompose`.
pub fn parse_id(data: &[u8]) {
    let (layout, rest) = layout_from(data);
    let text = String::from_utf8_lossy(rest);
    let text = text.as_ref();

    if let Some(id) = invalid("parse_decimal", text, convert::parse_decimal(text)) {
        assert_eq!(convert::to_decimal(id), text);
    }
    if let Some(id) = invalid("parse_hex", text, convert::parse_hex(text)) {
        let digits = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))
            .unwrap_or(text);
        assert_eq!(u64::from_str_radix(digits, 16).ok(), Some(id), "{text:?}");
    }
    if let Some(id) = invalid("parse_base62", text, convert::parse_base62(text)) {
        assert_eq!(convert::to_base62(id), text);
    }
    if let Some(id) = invalid(
        "parse_friendly",
        text,
        convert::parse_friendly(&layout, text),
    ) {
        assert_eq!(convert::to_friendly(&layout, id).unwrap(), text);
    }
    for f in IdFormat::ALL {
        if let Some(id) = invalid(f.name(), text, f.parse(&layout, text)) {
            assert!(id <= layout.max_id());
            let again = f.format(&layout, id).unwrap();
            assert_eq!(f.parse(&layout, &again).unwrap(), id);
        }
    }
    invalid("IdFormat::from_name", text, IdFormat::from_name(text));

    // The raw bytes as an id: decompose, compose back, decode.
    let mut word = [0u8; 8];
    let n = rest.len().min(8);
    word[..n].copy_from_slice(&rest[..n]);
    let id = u64::from_le_bytes(word);
    for l in PRESETS.iter().chain([&layout]) {
        match invalid("decompose", text, l.decompose(id)) {
            Some(p) => {
                assert!(id <= l.max_id());
                assert_eq!(l.try_compose(p).unwrap(), id);
                let info = convert::decode(l, id).unwrap();
                assert_eq!((info.slot, info.sequence), (p.slot, p.sequence));
                let json = info.to_json();
                assert!(
                    json.starts_with("{\"id\":") && json.ends_with('}'),
                    "{json}"
                );
            }
            None => assert!(id > l.max_id()),
        }
    }
}

/// Target `parse_time`: RFC 3339 timestamps and durations.
pub fn parse_time(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    if let Some(ms) = invalid("parse_rfc3339", text, time::parse_rfc3339(text)) {
        // Whatever was accepted means one instant; its canonical text means the same one.
        let canonical = time::format_rfc3339_ms(ms);
        // Years 0000 to 9999, the range RFC 3339 text can write.
        if (-62_167_219_200_000..=253_402_300_799_999).contains(&ms) {
            assert_eq!(time::parse_rfc3339(&canonical).unwrap(), ms, "{text:?}");
        }
    }
    if let Some(d) = invalid("parse_duration", text, time::parse_duration(text)) {
        assert_eq!(
            time::parse_duration(&time::format_duration(d)).unwrap(),
            d,
            "{text:?}"
        );
    }
}
