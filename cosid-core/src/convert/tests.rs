use super::*;
use crate::error::ErrorKind;
use crate::layout::strategies::{self, PRESETS};
use crate::layout::{IdParts, COSID_EPOCH_MS};
use proptest::prelude::*;

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
    assert_eq!(to_friendly(&s, id).unwrap(), "20191224160003-1-0");
    assert_eq!(parse_friendly(&s, "20191224160003-1-0").unwrap(), id);
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
        ("2019122416000100-5-7", "exactly 17 digits"),
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
    // A second layout's time has no milliseconds: 17 digits are another layout's text.
    refused(
        parse_friendly(&Layout::SECONDS, "20191224160001000-5-7"),
        "17 digits",
        "not exactly 14 digits",
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

fn layout() -> impl Strategy<Value = Layout> {
    strategies::preset_or(strategies::custom(any::<bool>()))
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
                    prop_assert!(ms > friendly::MAX_FRIENDLY_MS);
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
        if info.timestamp_ms <= friendly::MAX_FRIENDLY_MS {
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
