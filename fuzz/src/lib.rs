//! The checks the fuzz targets run, one function per target.
//!
//! Each takes arbitrary bytes and panics only when a parser breaks its contract: a panic inside
//! a parser, an error of another kind than `InvalidArgument`, or accepted text that is not the
//! canonical text of the value it parsed to. `cargo fuzz` drives them with libFuzzer (see
//! `docs/fuzzing.md`); `cosid-core/tests/fuzz_checks.rs` includes this file and drives them with
//! proptest, so the plain test command runs them too.
//!
//! `credentials` feeds passwords of every shape to the URL parser, the store opener and the
//! configuration parser and checks that no message shows them.

use cosid_core::convert::{self, IdFormat, TextFormat};
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

/// Settings `parse_text_form` picks from with its second byte (beside the spec text it reads).
const SETTINGS: [&str; 12] = [
    "base62",
    "radix62,pad-start=false",
    "radix62,pad-start=false,char-size=4",
    "radix62,char-size=10",
    "radix36",
    "radix36,pad-start=false",
    "radix36,pad-start=false,char-size=12",
    "friendly,pad-start=true",
    "friendly,zone=Asia/Shanghai",
    "friendly,zone=America/New_York,pad-start=true",
    "friendly,zone=-03:30",
    "friendly,zone=Australia/Lord_Howe",
];

/// Target `parse_text_form`: `TextFormat::parse` (the spec of a form and its options) and every
/// setting's id parser. The first byte picks the layout (as in `parse_id`); the second picks a
/// setting from `SETTINGS` or (from 0x80) takes the text up to the first newline as a spec; the
/// rest is the id text.
pub fn parse_text_form(data: &[u8]) {
    let (layout, rest) = layout_from(data);
    let Some((&sel, rest)) = rest.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let (spec, id_text) = if sel < 0x80 {
        (SETTINGS[sel as usize % SETTINGS.len()], text.as_ref())
    } else {
        text.split_once('\n').unwrap_or((text.as_ref(), ""))
    };
    let Some(form) = invalid("TextFormat::parse", spec, TextFormat::parse(spec)) else {
        return;
    };
    // A spec's canonical text reads back as the same setting.
    assert_eq!(
        TextFormat::parse(&form.to_string()).unwrap(),
        form,
        "{spec:?}"
    );
    if let Some(id) = invalid(spec, id_text, form.parse_id(&layout, id_text)) {
        assert!(id <= layout.max_id(), "{spec}: {id_text:?}");
        let again = form.format(&layout, id).unwrap();
        if form.form() == IdFormat::Hex || form.affixes().date_pattern.is_some() {
            // Hex reads more than it writes; a date prefix is the date of writing, so the
            // text read may be of another day: the id comes back, not the text.
            assert_eq!(
                form.parse_id(&layout, &again).unwrap(),
                id,
                "{spec}: {again}"
            );
        } else {
            // One text per id, but friendly text of a repeated local hour, which reads as the
            // earlier instant and writes back the same text.
            assert_eq!(again, id_text, "{spec}: {id}");
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

/// The characters a fuzzed password is made of: upper-case letters and digits (so that a leaked
/// piece of it is recognisable in any message) and every character that ends a part of a URL or
/// a connection string.
const PASSWORD_CHARS: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ0123456789/?#@:&=%; ,'\"\\![]*+~-._\t";

/// The shapes a credential arrives in: `{s}` a scheme, `{u}` the user, `{p}` the password.
const CREDENTIAL_SHAPES: [&str; 20] = [
    "{s}://{u}:{p}@db.example:5432/ids",
    "{s}://:{p}@db.example",
    "{s}://{u}:{p}@db.example/ids?sslmode=require",
    "{s}://db.example/ids?password={p}",
    "{s}://db.example/ids?sslmode=require&password={p}&application_name=x",
    "{s}://{u}:{p}@a.example:2379,b.example:2379",
    "{s}:/{u}:{p}@db.example",
    "{s}//{u}:{p}@db.example",
    "host=db.example user={u} password={p} dbname=ids",
    "{s}:host=db.example password={p}",
    "{u}:{p}@db.example",
    "{s}://{u}:{p}@",
    "{s}://{p}@db.example",
    "{s}://{u}:{p}@db.example/ids?sslpassword={p}",
    " {s}://{u}:{p}@db.example:6379/0 ",
    "{s}://{u}:{p}@[::1]:5432/ids",
    "{s}://{u}:{p}@db.example/ids#frag",
    "{p}",
    "{p}@db.example",
    "{s}://db.example/?cacert=/x&password={p}",
];

const CREDENTIAL_SCHEMES: [&str; 13] = [
    "redis",
    "rediss",
    "redis+sentinel",
    "rediss+sentinel",
    "postgres",
    "postgresql",
    "etcd",
    "etcds",
    "REDIS",
    "memory",
    "sqlite",
    "ftp",
    "",
];

/// Schemes beyond [`CREDENTIAL_SCHEMES`], whose 13 entries are all a selector byte reaches with
/// 20 shapes (and whose order the saved regression cases depend on): checked through
/// [`credential_hidden_in`] by a proptest of their own.
pub const MORE_CREDENTIAL_SCHEMES: [&str; 4] =
    ["mysql", "mariadb", "redis+cluster", "rediss+cluster"];

/// The recognisable pieces of a password: its runs of five or more letters and digits that hold
/// both (no message of cosid's own has such a run).
pub fn password_marks(password: &str) -> Vec<String> {
    password
        .split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit()))
        .filter(|run| {
            run.len() >= 5
                && run.chars().any(|c| c.is_ascii_digit())
                && run.chars().any(|c| c.is_ascii_uppercase())
        })
        .map(str::to_string)
        .collect()
}

/// Target `credentials`: a password made of the bytes, embedded in store URLs and connection
/// strings of every shape (the first byte picks the shape and the scheme), given to the URL
/// parser, the store opener and the configuration parser. No error, `Display` or `Debug` of any
/// of them may hold a recognisable piece of the password.
pub fn credentials(data: &[u8]) {
    if let Some((&sel, rest)) = data.split_first() {
        credential_hidden(sel, &password_of(rest));
    }
}

/// A password of [`PASSWORD_CHARS`], one a byte.
fn password_of(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| PASSWORD_CHARS[*b as usize % PASSWORD_CHARS.len()] as char)
        .collect()
}

/// Target `credentials_more`: [`credentials`] under [`MORE_CREDENTIAL_SCHEMES`] (MySQL and
/// MariaDB), which the first target's one selector byte does not reach.
pub fn credentials_more(data: &[u8]) {
    if let Some((&sel, rest)) = data.split_first() {
        let scheme = MORE_CREDENTIAL_SCHEMES
            [sel as usize / CREDENTIAL_SHAPES.len() % MORE_CREDENTIAL_SCHEMES.len()];
        credential_hidden_in(scheme, sel, &password_of(rest));
    }
}

/// The check of [`credentials`] for one shape selector and password.
pub fn credential_hidden(sel: u8, password: &str) {
    let scheme =
        CREDENTIAL_SCHEMES[sel as usize / CREDENTIAL_SHAPES.len() % CREDENTIAL_SCHEMES.len()];
    credential_hidden_in(scheme, sel, password);
}

/// [`credential_hidden`] with the scheme given (the shape still from `sel`).
pub fn credential_hidden_in(scheme: &str, sel: u8, password: &str) {
    use cosid_core::config::Config;
    use cosid_core::store::StoreUrl;

    let marks = password_marks(password);
    if marks.is_empty() {
        return;
    }
    let shape = CREDENTIAL_SHAPES[sel as usize % CREDENTIAL_SHAPES.len()];
    let text = shape
        .replace("{s}", scheme)
        .replace("{u}", "app")
        .replace("{p}", password);

    let mut shown: Vec<String> = Vec::new();
    let error = |e: cosid_core::Error| [e.to_string(), format!("{e:?}")];
    match StoreUrl::parse(&text) {
        Ok(url) => {
            shown.push(url.to_string());
            shown.push(format!("{url:?}"));
            shown.push(url.redacted());
            // A SQLite URL would create a file; the others open without connecting.
            if !matches!(url, StoreUrl::Sqlite { .. }) {
                match cosid_core::store::open(&text) {
                    Ok(store) => {
                        shown.push(store.describe());
                        shown.push(format!("{store:?}"));
                    }
                    Err(e) => shown.extend(error(e)),
                }
            }
        }
        Err(e) => shown.extend(error(e)),
    }

    // The same text in a configuration: as the store, around an unclosed or invalid `${`, and
    // (when it is a URL or a connection string, not a bare word) pasted where a key goes.
    let quoted = text.replace('\'', "''");
    let lease = "cosid:\n  machine:\n    lease:\n";
    let mut docs = vec![
        format!("{lease}      store: '{quoted}'\n"),
        format!("{lease}      store: '{quoted}${{'\n"),
        format!("{lease}      store: '${{{quoted}'\n"),
        format!("{lease}      store: '{quoted}${{A B}}'\n"),
    ];
    if text.contains(['@', '=', ' ']) || text.contains("//") {
        docs.push(format!(
            "{lease}      store: 'memory:'\n      '{quoted}': 1\n"
        ));
    }
    for doc in docs {
        match Config::from_yaml(&doc) {
            Ok(c) => shown.push(format!("{c:?}")),
            Err(e) => shown.extend(error(e)),
        }
    }
    for s in &shown {
        for m in &marks {
            assert!(
                !s.contains(m.as_str()),
                "{text:?}: the password piece {m:?} shows in {s:?}"
            );
        }
    }
}

/// The schemes [`store_url`] puts in front of its input (the first byte chooses).
const STORE_SCHEMES: [&str; 15] = [
    "redis://",
    "rediss://",
    "redis+sentinel://",
    "rediss+sentinel://",
    "redis+cluster://",
    "rediss+cluster://",
    "postgres://",
    "postgresql://",
    "etcd://",
    "etcds://",
    "mysql://",
    "mariadb://",
    "memory:",
    "sqlite://",
    "",
];

/// A store URL, through the URL parser and (except SQLite, which would create a file) the store
/// opener, which parses every part of it without connecting: each either accepts it or fails
/// with a configuration error; nothing panics.
pub fn store_url(data: &[u8]) {
    use cosid_core::store::StoreUrl;
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let text = format!(
        "{}{}",
        STORE_SCHEMES[sel as usize % STORE_SCHEMES.len()],
        String::from_utf8_lossy(rest)
    );
    let config_error = |what: &str, e: cosid_core::Error| {
        assert_eq!(
            e.kind(),
            ErrorKind::Config,
            "{what}({text:?}) failed with {e}"
        );
        assert!(!e.message().is_empty());
        // One line, of a readable length, whatever the URL holds.
        assert!(
            !e.message().contains('\n') && e.message().len() <= 2000,
            "{what}({text:?}): {e}"
        );
    };
    match StoreUrl::parse(&text) {
        Ok(StoreUrl::Sqlite { .. }) => {}
        Ok(_) => {
            if let Err(e) = cosid_core::store::open(&text) {
                config_error("store::open", e);
            }
        }
        Err(e) => config_error("StoreUrl::parse", e),
    }
}

/// A slot record as Redis and etcd keep it: see [`record_round_trip`].
#[cfg(any(feature = "redis", feature = "etcd"))]
pub fn decode_slot(data: &[u8]) {
    use cosid_core::store::fuzzing;
    record_round_trip(data, fuzzing::decode_slot, fuzzing::encode_slot);
}

/// A namespace record as Redis and etcd keep it: see [`record_round_trip`].
#[cfg(any(feature = "redis", feature = "etcd"))]
pub fn decode_namespace(data: &[u8]) {
    use cosid_core::store::fuzzing;
    record_round_trip(data, fuzzing::decode_namespace, fuzzing::encode_namespace);
}

/// A record in the text form of Redis and etcd: read either to a record that writes back to text
/// reading as the same record, or refused with a store error (a record this version cannot
/// read); nothing panics. One check for both kinds of record, so neither codec gets a weaker one.
#[cfg(any(feature = "redis", feature = "etcd"))]
fn record_round_trip<R: PartialEq + std::fmt::Debug>(
    data: &[u8],
    decode: fn(&[u8]) -> cosid_core::Result<R>,
    encode: fn(&R) -> String,
) {
    match decode(data) {
        Ok(rec) => {
            let text = encode(&rec);
            let again = decode(text.as_bytes())
                .unwrap_or_else(|e| panic!("{text:?}, written from {rec:?}, does not read: {e}"));
            assert_eq!(again, rec, "{text:?}");
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Store, "{e}");
            assert!(!e.message().is_empty());
        }
    }
}
