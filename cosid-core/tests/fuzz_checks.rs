//! The fuzz targets' checks (`fuzz/src/lib.rs`) driven by proptest, so the plain test command
//! runs them on every change; `cargo +nightly fuzz run …` (docs/fuzzing.md) drives the same
//! checks with libFuzzer's coverage guidance.

#[path = "../../fuzz/src/lib.rs"]
mod checks;

use proptest::prelude::*;

/// A selector byte (which layout) followed by text.
fn with_layout(text: impl Strategy<Value = String>) -> impl Strategy<Value = Vec<u8>> {
    (any::<u8>(), text).prop_map(|(sel, t)| {
        let mut v = vec![sel];
        v.extend_from_slice(t.as_bytes());
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn parse_id_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..48)) {
        checks::parse_id(&data);
    }

    #[test]
    fn parse_id_on_id_like_text(data in with_layout(
        "(0x)?[0-9a-fA-Z]{0,22}|[12][0-9]{16}-[0-9]{1,5}-[0-9]{1,8}|[0-9a-zA-Z]{11}"
    )) {
        checks::parse_id(&data);
    }

    #[test]
    fn parse_text_form_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..64)) {
        checks::parse_text_form(&data);
    }

    #[test]
    fn parse_text_form_on_id_like_text(sel in any::<u8>(), setting in 0u8..0x80, text in
        "[0-9A-Za-z]{1,13}|[12][0-9]{13,16}-[0-9]{1,4}-[0-9]{1,7}"
    ) {
        let mut data = vec![sel, setting];
        data.extend_from_slice(text.as_bytes());
        checks::parse_text_form(&data);
    }

    #[test]
    fn parse_text_form_with_affixes(sel in any::<u8>(), spec in
        "(dec|hex|radix62|radix36|friendly)(,(prefix|suffix|date-delimiter)=[-_A-Z%,=]{0,4}|,date-prefix=\
         (yyMMdd|yyyy-MM-dd|HHmm|yy|MM%2Cdd|yyyyy|x)|,date-zone=(UTC|\\+08:00)|,date-before-prefix=(true|false)){0,4}",
        text in "[A-Z_-]{0,3}[0-9]{0,8}[-_]?[0-9A-Za-z]{1,13}[A-Z_-]{0,3}"
    ) {
        let mut data = vec![sel, 0x80];
        data.extend_from_slice(format!("{spec}\n{text}").as_bytes());
        checks::parse_text_form(&data);
    }

    #[test]
    fn parse_text_form_on_spec_like_text(sel in any::<u8>(), spec in
        "(dec|hex|base62|radix62|radix36|friendly|radix)(,(pad-start|char-size|zone)=\
         (true|false|[0-9]{1,3}|UTC|utc|Etc/UTC|Etc/Unknown|[+-][0-9]{2}:[0-9]{2}|Asia/Shanghai|Europe/[A-Z][a-z]{3,6}))\
         {0,3}",
        text in "[0-9A-Za-z]{1,13}|[12][0-9]{13,16}-[0-9]{1,4}-[0-9]{1,7}"
    ) {
        let mut data = vec![sel, 0x80];
        data.extend_from_slice(format!("{spec}\n{text}").as_bytes());
        checks::parse_text_form(&data);
    }

    #[test]
    fn parse_time_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..40)) {
        checks::parse_time(&data);
    }

    #[test]
    fn parse_time_on_time_like_text(text in
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,9})?(Z|z|[+-][0-9]{2}:[0-9]{2})?\
         |[0-9]{0,21}(ms|s|m|h|d)?"
    ) {
        checks::parse_time(text.as_bytes());
    }

}

/// A password whose letter-and-digit runs are recognisable, joined by the characters that end a
/// part of a URL or a connection string (`/`, `?`, `#`, `@`, `:`, `&`, `=`, space, …).
fn password() -> impl Strategy<Value = String> {
    let run = "[A-Z][0-9][A-Z0-9]{3,6}";
    let sep = prop::sample::select(vec![
        "/", "?", "#", "@", ":", "&", "=", " ", "%", ";", ",", "'", "\"", "\\", "!", "[", "]",
        "@@", "?&", "//", "%40", "", "-", ".", "~",
    ]);
    (
        prop::option::of(sep.clone()),
        prop::collection::vec((run, sep), 1..4),
        run,
    )
        .prop_map(|(lead, parts, last)| {
            let mut p = lead.unwrap_or("").to_string();
            for (r, s) in parts {
                p.push_str(&r);
                p.push_str(s);
            }
            p.push_str(&last);
            p
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// A generated password in a store URL or connection string of any shape never appears in
    /// an error, `Display` or `Debug` of the URL parser, the store opener or the configuration.
    #[test]
    fn credentials_never_show(sel in any::<u8>(), pw in password()) {
        checks::credential_hidden(sel, &pw);
    }

    /// The same with the MySQL and Redis Cluster schemes, which the selector byte of the one
    /// above cannot reach.
    #[test]
    fn credentials_never_show_in_more_schemes(sel in any::<u8>(), pw in password(),
        which in 0..checks::MORE_CREDENTIAL_SCHEMES.len()) {
        checks::credential_hidden_in(checks::MORE_CREDENTIAL_SCHEMES[which], sel, &pw);
    }

    #[test]
    fn credentials_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..40)) {
        checks::credentials(&data);
    }

    #[test]
    fn credentials_more_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..40)) {
        checks::credentials_more(&data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn store_url_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..60)) {
        checks::store_url(&data);
    }

    /// URL-shaped text: user, password with stray and partial escapes and multi-byte
    /// characters, hosts, ports, a path and query parameters.
    #[test]
    fn store_url_on_url_like_text(sel in any::<u8>(), text in
        "([a-z%]{0,4}(:[a-zé%0-9A-F@/?]{0,8})?@)?[a-z0-9.\\[\\]:,]{0,16}(/[a-z]{0,4})?(\\?[a-z]{0,12}=[a-z%é0-9/]{0,8}(&[a-z]{0,12}=[a-z%0-9]{0,4})?)?"
    ) {
        let mut data = vec![sel];
        data.extend_from_slice(text.as_bytes());
        checks::store_url(&data);
    }

    /// Issue 32: whatever its name, a parameter given twice is refused by every network scheme,
    /// and so is one with a capital letter (every parameter a store takes is lower case); the
    /// message never holds a value.
    #[test]
    fn store_url_parameters_twice_or_capitalised_are_refused(sel in any::<u8>(), key in
        "[a-zA-Z_%0-9-]{1,16}"
    ) {
        const NETWORK: [&str; 12] = [
            "redis://", "rediss://", "redis+sentinel://", "rediss+sentinel://",
            "redis+cluster://", "rediss+cluster://", "postgres://", "postgresql://",
            "etcd://", "etcds://", "mysql://", "mariadb://",
        ];
        let scheme = NETWORK[sel as usize % NETWORK.len()];
        let mut refused = vec![format!("{scheme}h1/0?{key}=VALUE9&{key}=VALUE9")];
        if key.chars().any(|c| c.is_ascii_uppercase()) {
            refused.push(format!("{scheme}h1/0?{key}=VALUE9"));
        }
        for url in refused {
            let e = cosid_core::store::StoreUrl::parse(&url).expect_err(&url);
            prop_assert_eq!(e.kind(), cosid_core::ErrorKind::Config);
            prop_assert!(
                e.message().contains("twice") || e.message().contains("does not take"),
                "{}: {}", url, e
            );
            prop_assert!(!e.to_string().contains("VALUE9"), "{}: {}", url, e);
        }
    }
}

#[cfg(any(feature = "redis", feature = "etcd"))]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn decode_slot_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..120)) {
        checks::decode_slot(&data);
    }

    /// A record a store wrote, with one byte changed, removed or repeated.
    #[test]
    fn decode_slot_on_damaged_records(
        slot in 0u32..1024, fence in any::<u64>(), floor in any::<i64>(),
        owner in proptest::option::of("[ -~é%]{0,12}"),
        at in any::<prop::sample::Index>(), byte in any::<u8>(), how in 0u8..3,
    ) {
        use cosid_core::lease::{Owner, SlotRecord};
        let mut rec = SlotRecord::vacant(slot);
        rec.owner = owner.map(Owner::new);
        rec.fence = fence;
        rec.floor = floor;
        let text = cosid_core::store::fuzzing::encode_slot(&rec);
        prop_assert_eq!(cosid_core::store::fuzzing::decode_slot(text.as_bytes()).unwrap(), rec);
        checks::decode_slot(&damaged(text, at, byte, how));
    }

    #[test]
    fn decode_namespace_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..120)) {
        checks::decode_namespace(&data);
    }

    /// Namespace-shaped text: the tag, known and unknown fields in any order, repeated or
    /// missing, with numbers in and out of range and layouts well and badly formed.
    #[test]
    fn decode_namespace_on_record_like_text(fields in prop::collection::vec(
        "(limit|tolerance_ms|not_before_ms|layout|color)=([+-]?[0-9]{0,20}|[0-9]{1,13}:(ms|s|us):[0-9]{1,3}(/[0-9]{1,3}){0,3}(:x)?|%zz)?",
        0..6,
    )) {
        let text = format!("cosid-namespace/1 {}", fields.join(" "));
        checks::decode_namespace(text.as_bytes());
    }

    /// A namespace record a store wrote reads back as the same record, and with one byte
    /// changed, removed or repeated is refused or read as a record that round-trips.
    #[test]
    fn decode_namespace_on_damaged_records(
        limit in any::<u32>(), tolerance_ms in any::<i64>(), not_before_ms in any::<i64>(),
        layout in proptest::option::of((any::<i64>(), any::<bool>(), any::<[u8; 3]>())),
        at in any::<prop::sample::Index>(), byte in any::<u8>(), how in 0u8..3,
    ) {
        use cosid_core::lease::{IdLayout, NamespaceRecord};
        use cosid_core::TimeUnit;
        let rec = NamespaceRecord {
            limit,
            tolerance_ms,
            not_before_ms,
            layout: layout.map(|(epoch_ms, seconds, [ts, node, seq])| IdLayout {
                epoch_ms,
                unit: if seconds { TimeUnit::Seconds } else { TimeUnit::Millis },
                timestamp_bits: ts,
                node_bits: node,
                sequence_bits: seq,
            }),
            ttl_ms: None,
        };
        let text = cosid_core::store::fuzzing::encode_namespace(&rec);
        prop_assert_eq!(
            cosid_core::store::fuzzing::decode_namespace(text.as_bytes()).unwrap(),
            rec
        );
        checks::decode_namespace(&damaged(text, at, byte, how));
    }
}

/// `text` with one byte changed to `byte` (`how` 0), removed (1) or repeated (2).
#[cfg(any(feature = "redis", feature = "etcd"))]
fn damaged(text: String, at: prop::sample::Index, byte: u8, how: u8) -> Vec<u8> {
    let mut text = text.into_bytes();
    let i = at.index(text.len());
    match how {
        0 => text[i] = byte,
        1 => {
            text.remove(i);
        }
        _ => text.insert(i, text[i]),
    }
    text
}
