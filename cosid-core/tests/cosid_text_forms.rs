//! CosId's text forms: radix-62 and radix-36 with padding and a char size, friendly text of
//! millisecond and second layouts in a time zone with pad-start. Fixed cases are the values
//! CosId's own converter tests expect; the properties cover every setting.

use cosid_core::convert::{IdFormat, Radix, TextFormat, Zone};
use cosid_core::{ErrorKind, Layout};
use proptest::prelude::*;

fn refused<T: std::fmt::Debug>(r: cosid_core::Result<T>, what: &str, needle: &str) {
    let e = r.expect_err(what);
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{what}: {e}");
    assert!(e.message().contains(needle), "{what}: {e}");
}

fn spec(s: &str) -> TextFormat {
    TextFormat::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// `f` writes `id` as `text` and reads `text` back as `id`.
fn round_trips(f: &TextFormat, l: &Layout, id: u64, text: &str) {
    assert_eq!(f.format(l, id).unwrap(), text, "{f}");
    assert_eq!(f.parse_id(l, text).unwrap(), id, "{f}");
}

const I64_MAX: u64 = i64::MAX as u64;

#[test]
fn radix62_and_radix36_write_what_cosid_writes() {
    // CosId's unpadded converters (its RadixIdConverter tests).
    let r62 = Radix::new(62, false, 11).unwrap();
    let r36 = Radix::new(36, false, 13).unwrap();
    for (id, text) in [(0, "0"), (35, "Z"), (36, "a"), (3843, "zz"), (3844, "100")] {
        assert_eq!(r62.format(id).unwrap(), text);
        assert_eq!(r62.parse(text).unwrap(), id);
    }
    for (id, text) in [(0, "0"), (35, "Z"), (36, "10"), (1295, "ZZ"), (1296, "100")] {
        assert_eq!(r36.format(id).unwrap(), text);
        assert_eq!(r36.parse(text).unwrap(), id);
    }
    // Radix 36 is Java's Long.toString(id, 36) in upper case.
    for id in [1u64, 5, 62, 63, 124, i32::MAX as u64, I64_MAX] {
        let t = r36.format(id).unwrap();
        assert_eq!(r36.parse(&t).unwrap(), id);
        assert!(t.len() <= 13);
        assert!(t
            .bytes()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
    }
    assert_eq!(r62.format(I64_MAX).unwrap(), "AzL8n0Y58m7");
    assert_eq!(r36.format(I64_MAX).unwrap(), "1Y2P0IJ32E8E7");
    assert_eq!(Radix::BASE36.format(5).unwrap(), "0000000000005");
    assert_eq!(Radix::BASE62.format(I64_MAX).unwrap(), "AzL8n0Y58m7");
    // A lower-case letter is no radix-36 digit.
    refused(r36.parse("z"), "z", "lower-case");
    refused(Radix::BASE36.parse("000000000000a"), "a", "lower-case");
    // 2^63, one past a Java long: CosId overflows; no cosid layout holds it.
    refused(
        spec("radix62,pad-start=false").parse_id(&Layout::MILLIS, "AzL8n0Y58m8"),
        "2^63",
        "wider than this 63-bit layout",
    );
    refused(
        Radix::BASE62.parse("zzzzzzzzzzz"),
        "zzz",
        "larger than a 64-bit id",
    );
}

#[test]
fn char_size_limits_as_cosid() {
    // CosId: char size 10 of radix 62 holds ids below 62^10; 12 of radix 36 below 36^12.
    for (radix, size) in [(62u8, 10u8), (36, 12)] {
        let r = Radix::new(radix, false, size).unwrap();
        let max = (radix as u64).pow(size as u32);
        refused(r.format(max), "radix^size", "does not fit");
        let t = r.format(max - 1).unwrap();
        assert_eq!(t.len(), size as usize);
        assert_eq!(r.parse(&t).unwrap(), max - 1);
        assert_eq!(r.format(1).unwrap(), "1");
        let padded = Radix::new(radix, true, size).unwrap();
        assert_eq!(padded.format(1).unwrap().len(), size as usize);
    }
    // Char size 2: "-1", "111", "1_" are refused (CosId's cases).
    let r = Radix::new(62, false, 2).unwrap();
    refused(r.parse("-1"), "-1", "a sign");
    refused(r.parse("111"), "111", "too long");
    refused(r.parse("1_"), "1_", "outside 0-9A-Za-z");
    refused(Radix::new(62, false, 12), "12", "1 to 11");
    refused(Radix::new(36, false, 0), "0", "1 to 13");
    refused(Radix::new(16, false, 4), "16", "62 or 36");
}

#[test]
fn parsing_takes_exactly_what_the_setting_writes() {
    let unpadded = Radix::new(62, false, 11).unwrap();
    // CosId's parser would take these; cosid takes one text per id.
    refused(unpadded.parse("05"), "05", "leading zero");
    refused(unpadded.parse("00000000005"), "padded", "leading zero");
    refused(Radix::BASE62.parse("5"), "5", "wrong length");
    refused(unpadded.parse(""), "empty", "empty");
    refused(unpadded.parse(" 5"), "space", "whitespace");
    assert_eq!(unpadded.parse("0").unwrap(), 0);
}

#[test]
fn friendly_in_a_zone_as_cosid() {
    // CosId's SnowflakeFriendlyIdConverter test: this id in Asia/Shanghai.
    let id = 295_913_926_632_165_376;
    let l = Layout::MILLIS;
    let sh = spec("friendly,zone=Asia/Shanghai");
    round_trips(&sh, &l, id, "20220320133617924-5-0");
    // The same instant in UTC and at a fixed +08:00.
    assert_eq!(
        IdFormat::Friendly.format(&l, id).unwrap(),
        "20220320053617924-5-0"
    );
    assert_eq!(
        spec("friendly,zone=+08:00").format(&l, id).unwrap(),
        "20220320133617924-5-0"
    );
    // Refused by CosId too: before the epoch in Shanghai, past 41 bits, slot 1024, sequence 4096.
    for (text, needle) in [
        ("20191224235959999-5-0", "outside this layout's range"),
        ("99991231235959999-5-0", "outside this layout's range"),
        ("20220320133617924-1024-0", "slots 0 to 1023"),
        ("20220320133617924-5-4096", "sequences 0 to 4095"),
    ] {
        refused(sh.parse_id(&l, text), text, needle);
    }
    // Pad-start: slot and sequence to the digits of 1023 and 4095.
    let padded = spec("friendly,zone=Asia/Shanghai,pad-start=true");
    assert_eq!(
        padded.format(&l, id).unwrap(),
        "20220320133617924-0005-0000"
    );
    assert_eq!(
        padded.parse_id(&l, "20220320133617924-0005-0000").unwrap(),
        id
    );
    refused(
        padded.parse_id(&l, "20220320133617924-5-0"),
        "unpadded",
        "not exactly 4 digits",
    );
    refused(
        sh.parse_id(&l, "20220320133617924-0005-0000"),
        "padded",
        "leading zero",
    );
}

#[test]
fn friendly_of_second_layouts_has_14_digits() {
    let l = Layout::SECONDS; // 31/10/22 bits: sequence up to 4194303 (7 digits)
    let id = l.compose(86_400, 3, 42);
    let f = IdFormat::Friendly;
    assert_eq!(f.format(&l, id).unwrap(), "20191225160000-3-42");
    assert_eq!(f.parse(&l, "20191225160000-3-42").unwrap(), id);
    let sh = spec("friendly,zone=Asia/Shanghai,pad-start=true");
    round_trips(&sh, &l, id, "20191226000000-0003-0000042");
    refused(
        f.parse(&l, "20191225160000000-3-42"),
        "17",
        "not exactly 14 digits",
    );
    refused(
        f.parse(&Layout::MILLIS, "20191225160000-3-42"),
        "14",
        "not exactly 17 digits",
    );
    // The JavaScript-safe second layout: 3 node bits (1 digit), 19 sequence bits (6 digits).
    let js = Layout::SAFE_JS_SECONDS;
    let id = js.compose(1, 7, 9);
    let p = spec("friendly,pad-start=true");
    assert_eq!(p.format(&js, id).unwrap(), "20191224160001-7-000009");
}

#[test]
fn local_times_at_clock_changes() {
    let l = Layout::MILLIS;
    let ny = spec("friendly,zone=America/New_York");
    // 2021-11-07 01:30 happens twice in New York (EDT, then EST an hour later). The text reads
    // as the earlier instant (05:30Z), as CosId reads it.
    let earlier = l.compose((1_636_263_000_000 - l.epoch_ms()) as u64, 1, 0);
    let later = l.compose((1_636_266_600_000 - l.epoch_ms()) as u64, 1, 0);
    let text = "20211107013000000-1-0";
    assert_eq!(ny.format(&l, earlier).unwrap(), text);
    assert_eq!(ny.format(&l, later).unwrap(), text);
    assert_eq!(ny.parse_id(&l, text).unwrap(), earlier);
    // The hour after the repeated one reads as written.
    let after = l.compose((1_636_270_200_000 - l.epoch_ms()) as u64, 1, 0);
    round_trips(&ny, &l, after, "20211107023000000-1-0");
    // 2021-03-14 02:30 never happens in New York (clocks jump from 02:00 to 03:00): refused.
    refused(
        ny.parse_id(&l, "20210314023000000-1-0"),
        "gap",
        "does not exist in America/New_York",
    );
    assert!(ny.parse_id(&l, "20210314033000000-1-0").is_ok());
    assert!(ny.parse_id(&l, "20210314015959999-1-0").is_ok());
}

#[test]
fn option_text_is_checked() {
    for (s, needle) in [
        (
            "radix16",
            "expected dec, hex, base62 (or radix62), radix36 or friendly",
        ),
        ("radix62,char-size=12", "use a number from 1 to 11"),
        ("radix36,char-size=14", "from 1 to 13"),
        ("radix36,char-size=+5", "from 1 to 13"),
        (
            "radix62,pad-start=yes",
            "use pad-start=true or pad-start=false",
        ),
        (
            "radix62,zone=UTC",
            "its options are pad-start=true|false, char-size=1..11, prefix=TEXT",
        ),
        (
            "hex,pad-start=true",
            "its options are prefix=TEXT, suffix=TEXT",
        ),
        (
            "dec,zone=UTC",
            "its options are pad-start=true|false, char-size=1..20",
        ),
        ("dec,char-size=21", "use a number from 1 to 20"),
        (
            "friendly,char-size=3",
            "its options are zone=ZONE, pad-start",
        ),
        ("friendly,zone=Mars/Olympus", "no such zone"),
        ("friendly,zone=Etc/Unknown", "unknown zone"),
        ("friendly,zone=+8", "written ±HH:MM"),
        ("friendly,zone=+19:00", "out of range"),
        ("friendly,zone=", "empty"),
        ("friendly,zone", "write KEY=VALUE"),
        ("friendly,zone=UTC,zone=UTC", "gives zone twice"),
        ("", "is not an id format"),
    ] {
        refused(TextFormat::parse(s), s, needle);
    }
    for (s, canonical) in [
        ("radix62", "base62"),
        ("base62,pad-start=true,char-size=11", "base62"),
        ("radix62,pad-start=false", "base62,pad-start=false"),
        (
            "radix36,char-size=8,pad-start=false",
            "radix36,pad-start=false,char-size=8",
        ),
        ("friendly,zone=asia/shanghai", "friendly,zone=Asia/Shanghai"),
        (
            "friendly,zone=-03:30,pad-start=true",
            "friendly,zone=-03:30,pad-start=true",
        ),
        ("friendly,zone=Z", "friendly"),
        ("friendly,zone=utc", "friendly"),
        ("friendly,zone=Etc/UTC", "friendly,zone=Etc/UTC"),
    ] {
        let f = spec(s);
        assert_eq!(f.to_string(), canonical, "{s}");
        assert_eq!(spec(canonical), f, "{s}");
    }
    assert_eq!(Zone::parse("UTC").unwrap(), Zone::Utc);
    assert_eq!(Zone::parse("+05:45").unwrap(), Zone::Offset(20_700));
}

fn zone() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "UTC",
        "+08:00",
        "-03:30",
        "+14:00",
        "Asia/Shanghai",
        "America/New_York",
        "Europe/London",
        "Australia/Lord_Howe",
        "Asia/Kathmandu",
        "America/Sao_Paulo",
    ])
}

fn layout() -> impl Strategy<Value = Layout> {
    prop::sample::select(vec![
        Layout::MILLIS,
        Layout::SECONDS,
        Layout::SAFE_JS_MILLIS,
        Layout::SAFE_JS_SECONDS,
    ])
}

/// Every setting of every form, as spec text.
fn setting() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("dec".to_string()),
        Just("hex".to_string()),
        (any::<bool>(), 1u8..=11).prop_map(|(p, n)| format!("radix62,pad-start={p},char-size={n}")),
        (any::<bool>(), 1u8..=13).prop_map(|(p, n)| format!("radix36,pad-start={p},char-size={n}")),
        (zone(), any::<bool>()).prop_map(|(z, p)| format!("friendly,zone={z},pad-start={p}")),
    ]
}

fn layout_and_id() -> impl Strategy<Value = (Layout, u64)> {
    (
        layout(),
        any::<u64>(),
        0u64..(1 << 33),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(|(l, raw, t, s, q)| {
            // Half raw ids, half ids in the next ~100 years (ms) or ~270 years (s).
            let id = if raw & 1 == 0 {
                raw & l.max_id()
            } else {
                l.compose(
                    t.min(l.max_timestamp()),
                    s & l.max_slot(),
                    q & l.max_sequence(),
                )
            };
            (l, id)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn every_setting_round_trips((l, id) in layout_and_id(), s in setting()) {
        let f = spec(&s);
        match f.format(&l, id) {
            Ok(text) => {
                let back = f.parse_id(&l, &text).unwrap();
                // The text always reads back to itself; the id too, but for the later pass of a
                // repeated local hour, which reads as the earlier one.
                prop_assert_eq!(f.format(&l, back).unwrap(), text.clone());
                if back != id {
                    prop_assert_eq!(f.form(), IdFormat::Friendly);
                    prop_assert!(back < id, "{} {} {}", s, text, id);
                    let (a, b) = (cosid_core::convert::decode(&l, back).unwrap(),
                                  cosid_core::convert::decode(&l, id).unwrap());
                    prop_assert!(b.timestamp_ms - a.timestamp_ms <= 3 * 3_600_000);
                    prop_assert_eq!((a.slot, a.sequence), (b.slot, b.sequence));
                }
                if f.radix().pad_start() && f.form() == IdFormat::Radix36 {
                    prop_assert_eq!(text.len(), f.radix().char_size() as usize);
                }
            }
            Err(e) => {
                prop_assert_eq!(e.kind(), ErrorKind::InvalidArgument);
                let m = e.message();
                prop_assert!(m.contains("does not fit") || m.contains("9999"), "{}", m);
            }
        }
        // The spec itself round-trips through its canonical text.
        prop_assert_eq!(spec(&f.to_string()), f);
    }

    #[test]
    fn radix_text_sorts_like_the_ids_when_padded(a in any::<u64>(), b in any::<u64>(), r in
        prop::sample::select(vec![62u8, 36])) {
        let p = Radix::new(r, true, Radix::max_char_size(r)).unwrap();
        prop_assert_eq!(a.cmp(&b), p.format(a).unwrap().cmp(&p.format(b).unwrap()));
    }

    #[test]
    fn a_changed_character_is_refused_or_another_ids_text(
        (l, id) in layout_and_id(), s in setting(), at in any::<prop::sample::Index>(),
        c in 0x20u8..0x7f,
    ) {
        let f = spec(&s);
        let Ok(text) = f.format(&l, id) else { return Ok(()) };
        let mut bytes = text.into_bytes();
        let i = at.index(bytes.len());
        bytes[i] = c;
        let mutated = String::from_utf8(bytes).unwrap();
        match f.parse_id(&l, &mutated) {
            // Hex is lenient by design (0x, upper case, leading zeros).
            Ok(other) if f.form() != IdFormat::Hex => {
                prop_assert_eq!(f.format(&l, other).unwrap(), mutated)
            }
            Ok(_) => {}
            Err(e) => prop_assert_eq!(e.kind(), ErrorKind::InvalidArgument),
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Prefix, suffix and date prefix (CosId's PrefixIdConverter, SuffixIdConverter and
// DatePrefixIdConverter, in the order its Spring starter wraps them).

/// 2024-06-18T09:30:00Z: a Tuesday morning in UTC, 17:30 in Shanghai.
const JUNE_18_MS: i64 = 1_718_703_000_000;

#[test]
fn to_string_padding_as_cosid() {
    // CosId's ToStringIdConverter: decimal, zero-padded to char-size when pad-start, a longer
    // id written whole.
    let l = Layout::MILLIS;
    let padded = spec("dec,pad-start=true,char-size=11");
    for (id, text) in [
        (0, "00000000000"),
        (42, "00000000042"),
        (12_345_678_901, "12345678901"),
        (295_913_926_632_165_376, "295913926632165376"),
    ] {
        assert_eq!(padded.format(&l, id).unwrap(), text);
        assert_eq!(padded.parse_id(&l, text).unwrap(), id);
    }
    // Only the text it writes: no short text, no padding beyond the width, no sign.
    for bad in [
        "42",
        "000000000042",
        "0295913926632165376",
        "",
        "+0000000042",
        "0000000004x",
    ] {
        refused(padded.parse_id(&l, bad), bad, "pad-start=true");
    }
    // Unpadded (the default) is canonical decimal; char-size alone changes nothing.
    assert_eq!(spec("dec,char-size=5").format(&l, 42).unwrap(), "42");
    refused(
        spec("dec").parse_id(&l, "0042"),
        "leading zeros",
        "leading zero",
    );
    assert_eq!(spec("dec,pad-start=true").to_string(), "dec,pad-start=true");
    assert_eq!(
        spec("dec,pad-start=true").format(&l, 7).unwrap(),
        "00000000007"
    );
}

#[test]
fn prefix_and_suffix_as_cosid() {
    let l = Layout::MILLIS;
    // Each alone: written around the id, read back, and another affix refused.
    for (format, text, other, needle) in [
        (
            "dec,prefix=prefix_",
            "prefix_42",
            "other_42",
            "start with the prefix \"prefix_\"",
        ),
        (
            "dec,suffix=-suffix",
            "42-suffix",
            "42-other",
            "end with the suffix \"-suffix\"",
        ),
    ] {
        let f = spec(format);
        round_trips(&f, &l, 42, text);
        refused(f.parse_id(&l, other), format, needle);
    }
    // Both, around every form; the body is still read strictly.
    let id = 295_913_926_632_165_376;
    for (f, text) in [
        ("radix62", "ORD-0LrHucXALbs.x"),
        ("radix36", "ORD-028XOQD7HM874.x"),
        ("friendly", "ORD-20220320053617924-5-0.x"),
        ("hex", "ORD-41b4c2601005000.x"),
    ] {
        let both = spec(&format!("{f},prefix=ORD-,suffix=.x"));
        round_trips(&both, &l, id, text);
        refused(both.parse_id(&l, "ORD-.x"), f, "");
    }
    refused(
        spec("radix62,prefix=ORD-").parse_id(&l, "ORD-0LrHucXALb!"),
        "a bad body",
        "",
    );
}

#[test]
fn date_prefix_as_cosid() {
    let l = Layout::MILLIS;
    // CosId's default pattern and delimiter: "yyMMdd" and "-".
    let d = spec("dec,date-prefix=yyMMdd");
    assert_eq!(d.format_at(&l, 1, JUNE_18_MS).unwrap(), "240618-1");
    assert_eq!(d.parse_id(&l, "240618-1").unwrap(), 1);
    // The date is when the text was written, any day: another day reads the same.
    assert_eq!(d.parse_id(&l, "991231-1").unwrap(), 1);
    // In a zone, with another delimiter, and a pattern with literals.
    let sh = spec("dec,date-prefix=yyyy/MM/dd%20HH,date-delimiter=:,date-zone=Asia/Shanghai");
    assert_eq!(sh.format_at(&l, 7, JUNE_18_MS).unwrap(), "2024/06/18 17:7");
    assert_eq!(sh.parse_id(&l, "2024/06/18 17:7").unwrap(), 7);
    // Around a prefix and a suffix: CosId's before-prefix (true by default) puts the date
    // after the prefix; false puts it first.
    let inner = spec("dec,prefix=P,suffix=S,date-prefix=yyMMdd");
    assert_eq!(inner.format_at(&l, 5, JUNE_18_MS).unwrap(), "P240618-5S");
    assert_eq!(inner.parse_id(&l, "P240618-5S").unwrap(), 5);
    let outer = spec("dec,prefix=P,suffix=S,date-prefix=yyMMdd,date-before-prefix=false");
    assert_eq!(outer.format_at(&l, 5, JUNE_18_MS).unwrap(), "240618-P5S");
    assert_eq!(outer.parse_id(&l, "240618-P5S").unwrap(), 5);
    refused(
        outer.parse_id(&l, "P240618-5S"),
        "the other order",
        "no date",
    );
    // What the pattern could not have written is refused, naming the pattern.
    for bad in [
        "241318-1", // month 13
        "240431-1", // April 31
        "240600-1", // day 0
        "24O618-1", // a letter for a digit
        "240618+1", // another delimiter
        "24061-1",  // too short
        "",
    ] {
        refused(
            d.parse_id(&l, bad),
            bad,
            "no date of the pattern \"yyMMdd\"",
        );
    }
    assert_eq!(d.parse_id(&l, "240229-1").unwrap(), 1, "February 29");
    let hours = spec("dec,date-prefix=HHmmss");
    refused(hours.parse_id(&l, "240000-1"), "hour 24", "no date");
    refused(hours.parse_id(&l, "236000-1"), "minute 60", "no date");
    assert_eq!(hours.parse_id(&l, "235959-1").unwrap(), 1);
}

#[test]
fn affix_options_are_checked_and_written_back() {
    for (s, needle) in [
        (
            "dec,date-delimiter=_",
            "gives date-delimiter without date-prefix",
        ),
        ("dec,date-zone=UTC", "gives date-zone without date-prefix"),
        (
            "dec,date-prefix=yyyMMdd",
            "\"yyy\" is not one of its fields",
        ),
        ("dec,date-prefix=YYMMdd", "\"YY\" is not one of its fields"),
        ("dec,date-prefix=yyMMdd'T'", "is not a literal"),
        ("dec,date-prefix=", "it is empty"),
        ("dec,date-prefix=yyyyMMddHHmmssyyy", "more than 16"),
        (
            "dec,date-prefix=yyMMdd,date-before-prefix=yes",
            "date-before-prefix=true or",
        ),
        ("dec,date-prefix=yyMMdd,date-zone=Mars/Base", "Mars/Base"),
        (
            "dec,date-prefix=yyMMdd,date-delimiter=123456789",
            "more than the 8",
        ),
        (
            "dec,prefix=123456789012345678901234567890123",
            "more than the 32",
        ),
        ("dec,suffix=%0A", "control character"),
        // Bidirectional overrides and isolates, zero-width characters: format characters.
        ("dec,prefix=A%E2%80%AEB", "format character U+202E"),
        ("dec,suffix=%E2%81%A6x", "format character U+2066"),
        ("dec,prefix=a%E2%80%8Bb", "format character U+200B"),
        (
            "dec,date-prefix=yyMMdd,date-delimiter=%E2%80%8F",
            "format character U+200F",
        ),
        ("dec,prefix=%zz", "percent-encoded"),
        ("dec,prefix=a,prefix=b", "gives prefix twice"),
        ("dec,prefx=a", "date-before-prefix=true|false"),
    ] {
        refused(TextFormat::parse(s), s, needle);
    }
    // Display writes a spec that reads back to the same setting, encoding what a spec gives
    // meaning to.
    for s in [
        "base62,pad-start=false,prefix=a%2Cb%3Dc%25d,suffix=%20end",
        "friendly,zone=Asia/Shanghai,prefix=ORD,date-prefix=yyMMdd,date-delimiter=%2C,date-zone=+08:00,date-before-prefix=false",
        "dec,date-prefix=yyyy-MM-dd",
        "hex,suffix=%C3%A9",
    ] {
        let f = spec(s);
        assert_eq!(f.to_string(), s);
        assert_eq!(spec(&f.to_string()), f);
    }
    assert_eq!(spec("dec,prefix=a%2Cb").affixes().prefix, "a,b");
}

#[test]
fn the_longest_text_of_any_spec_is_bounded() {
    // Every affix at its longest around a long body (friendly of the widest slot, padded):
    // the affixes add at most MAX_AFFIXES_BYTES, which the C API's fixed buffer counts in.
    let l = Layout::new(
        cosid_core::layout::COSID_EPOCH_MS,
        cosid_core::TimeUnit::Millis,
        41,
        20,
        2,
        false,
    )
    .unwrap();
    let bare = spec("friendly,pad-start=true");
    let f = spec(&format!(
        "friendly,pad-start=true,prefix={p},suffix={p},date-prefix=yyyyMMddHHmmssyy,date-delimiter=12345678",
        p = "x".repeat(32)
    ));
    let id = l.max_id();
    let text = f.format_at(&l, id, JUNE_18_MS).unwrap();
    assert_eq!(
        text.len(),
        bare.format(&l, id).unwrap().len() + cosid_core::convert::affix::MAX_AFFIXES_BYTES
    );
    assert_eq!(f.parse_id(&l, &text).unwrap(), id);
}

proptest! {
    #[test]
    fn affixes_round_trip_every_form(
        id in any::<u64>(),
        form in prop::sample::select(vec![
            "dec", "dec,pad-start=true,char-size=19", "hex", "radix62", "radix36", "friendly"
        ]),
        prefix in "[A-Za-z0-9_.:-]{0,8}",
        suffix in "[A-Za-z0-9_.:-]{0,8}",
        date in prop::option::of(prop::sample::select(vec!["yyMMdd", "yyyy-MM-dd", "HHmmss", "yy"])),
        before in any::<bool>(),
        now in 0i64..253_402_300_799_999,
    ) {
        let l = Layout::MILLIS;
        let id = id & l.max_id();
        let mut s = format!("{form},prefix={prefix},suffix={suffix}");
        if let Some(d) = date {
            s += &format!(",date-prefix={d},date-before-prefix={before}");
        }
        let f = TextFormat::parse(&s).unwrap();
        if let Ok(text) = f.format_at(&l, id, now) {
            prop_assert_eq!(f.parse_id(&l, &text).unwrap(), id, "{} {}", s, text);
        }
    }
}
