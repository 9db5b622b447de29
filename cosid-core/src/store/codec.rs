//! The text form of the records in stores that keep opaque values (Redis, etcd): one line of
//! `name=value` fields after a format tag, readable with `redis-cli` or `etcdctl`, and cheap to
//! parse (a namespace snapshot parses up to 2^bits of them on every acquisition, so this is not
//! JSON):
//!
//! ```text
//! cosid-slot/1 slot=3 fence=1 expires_at=… floor=… ceiling=… next_floor=… owner_key=h%3A1 owner_incarnation=… last_owner_key=h%3A1
//! cosid-namespace/1 limit=1024 tolerance_ms=1000 not_before_ms=0 layout=1577203200000:ms:41/10/12 ttl_ms=30000
//! ```
//!
//! A namespace record written before layouts (or ttls) were recorded has no `layout` (`ttl_ms`)
//! field.
//!
//! Owner keys are percent-encoded (every byte outside `A-Z a-z 0-9 - _ . : / @ +`), so a line
//! never holds a space, `=`, `|` or a line break of its own. An absent owner or last owner is an
//! absent field; an empty key is an empty value.
//!
//! Parsing is strict: a line of another format or version, an unknown or repeated field, a
//! missing one or a malformed number is refused with an error naming the store and key. An
//! unknown field is refused rather than skipped because a record read and written back without
//! it would silently lose what a newer cosid meant by it.

use crate::error::{Error, Result};
use crate::lease::record::IdLayout;
use crate::lease::{NamespaceRecord, Owner, SlotRecord};
use std::fmt::Write as _;

const SLOT_FORMAT: &str = "cosid-slot/1";
const NAMESPACE_FORMAT: &str = "cosid-namespace/1";

/// The text of a slot record.
pub(crate) fn encode_slot(rec: &SlotRecord) -> String {
    let mut out = String::with_capacity(200);
    let _ = write!(
        out,
        "{SLOT_FORMAT} slot={} fence={} expires_at={} floor={} ceiling={} next_floor={}",
        rec.slot, rec.fence, rec.expires_at, rec.floor, rec.ceiling, rec.next_floor
    );
    if let Some(owner) = &rec.owner {
        out.push_str(" owner_key=");
        percent_encode(&owner.key, &mut out);
        let _ = write!(out, " owner_incarnation={}", owner.incarnation);
    }
    if let Some(last) = &rec.last_owner_key {
        out.push_str(" last_owner_key=");
        percent_encode(last, &mut out);
    }
    out
}

/// The text of a namespace record.
pub(crate) fn encode_namespace(rec: &NamespaceRecord) -> String {
    let mut out = format!(
        "{NAMESPACE_FORMAT} limit={} tolerance_ms={} not_before_ms={}",
        rec.limit, rec.tolerance_ms, rec.not_before_ms
    );
    if let Some(layout) = &rec.layout {
        let _ = write!(out, " layout={}", layout.encode());
    }
    if let Some(ttl_ms) = rec.ttl_ms {
        let _ = write!(out, " ttl_ms={ttl_ms}");
    }
    out
}

/// Reads what [`encode_slot`] wrote. `place` names the store and key for the error.
pub(crate) fn decode_slot(text: &[u8], place: &str) -> Result<SlotRecord> {
    let mut fields = Fields::new(text, SLOT_FORMAT, place)?;
    let mut slot = None;
    let mut fence = None;
    let mut expires_at = None;
    let mut floor = None;
    let mut ceiling = None;
    let mut next_floor = None;
    let mut owner_key = None;
    let mut owner_incarnation = None;
    let mut last_owner_key = None;
    while let Some((name, value)) = fields.next()? {
        let taken = match name {
            "slot" => set(&mut slot, fields.number::<u32>(name, value)?),
            "fence" => set(&mut fence, fields.number::<u64>(name, value)?),
            "expires_at" => set(&mut expires_at, fields.number::<i64>(name, value)?),
            "floor" => set(&mut floor, fields.number::<i64>(name, value)?),
            "ceiling" => set(&mut ceiling, fields.number::<i64>(name, value)?),
            "next_floor" => set(&mut next_floor, fields.number::<i64>(name, value)?),
            "owner_key" => set(&mut owner_key, fields.text(name, value)?),
            "owner_incarnation" => set(
                &mut owner_incarnation,
                uuid::Uuid::try_parse(value).map_err(|_| {
                    bad(place, &format!("owner_incarnation '{value}' is not a UUID"))
                })?,
            ),
            "last_owner_key" => set(&mut last_owner_key, fields.text(name, value)?),
            other => return Err(bad(place, &format!("unknown field '{other}'"))),
        };
        if !taken {
            return Err(bad(place, &format!("field '{name}' appears twice")));
        }
    }
    let owner = match (owner_key, owner_incarnation) {
        (Some(key), Some(incarnation)) => Some(Owner { key, incarnation }),
        (None, None) => None,
        _ => {
            return Err(bad(
                place,
                "owner_key and owner_incarnation must come together",
            ))
        }
    };
    let need = |v: Option<i64>, name: &str| v.ok_or_else(|| missing(place, name));
    Ok(SlotRecord {
        slot: slot.ok_or_else(|| missing(place, "slot"))?,
        owner,
        last_owner_key,
        fence: fence.ok_or_else(|| missing(place, "fence"))?,
        expires_at: need(expires_at, "expires_at")?,
        floor: need(floor, "floor")?,
        ceiling: need(ceiling, "ceiling")?,
        next_floor: need(next_floor, "next_floor")?,
    })
}

/// Reads what [`encode_namespace`] wrote.
pub(crate) fn decode_namespace(text: &[u8], place: &str) -> Result<NamespaceRecord> {
    let mut fields = Fields::new(text, NAMESPACE_FORMAT, place)?;
    let mut limit = None;
    let mut tolerance_ms = None;
    let mut not_before_ms = None;
    let mut layout = None;
    let mut ttl_ms = None;
    while let Some((name, value)) = fields.next()? {
        let taken = match name {
            "ttl_ms" => set(&mut ttl_ms, fields.number::<i64>(name, value)?),
            "limit" => set(&mut limit, fields.number::<u32>(name, value)?),
            "tolerance_ms" => set(&mut tolerance_ms, fields.number::<i64>(name, value)?),
            "not_before_ms" => set(&mut not_before_ms, fields.number::<i64>(name, value)?),
            "layout" => set(
                &mut layout,
                IdLayout::decode(value)
                    .ok_or_else(|| bad(place, &format!("layout '{value}' is malformed")))?,
            ),
            other => return Err(bad(place, &format!("unknown field '{other}'"))),
        };
        if !taken {
            return Err(bad(place, &format!("field '{name}' appears twice")));
        }
    }
    Ok(NamespaceRecord {
        limit: limit.ok_or_else(|| missing(place, "limit"))?,
        tolerance_ms: tolerance_ms.ok_or_else(|| missing(place, "tolerance_ms"))?,
        not_before_ms: not_before_ms.ok_or_else(|| missing(place, "not_before_ms"))?,
        layout,
        ttl_ms,
    })
}

fn set<T>(slot: &mut Option<T>, value: T) -> bool {
    if slot.is_some() {
        return false;
    }
    *slot = Some(value);
    true
}

fn bad(place: &str, why: &str) -> Error {
    // `why` quotes the record's own text (a name, a value), which is whatever the store holds:
    // cut and on one line, however long the record.
    let why = crate::bounds::quote_at_most(why, 300);
    Error::store(format!(
        "{place} does not hold a cosid record this version can read ({why}); was it written by \
         another program or a newer cosid?"
    ))
}

fn missing(place: &str, field: &str) -> Error {
    bad(place, &format!("field '{field}' is missing"))
}

/// The `name=value` fields of one line, after its format tag.
struct Fields<'a> {
    rest: std::str::Split<'a, char>,
    place: &'a str,
}

impl<'a> Fields<'a> {
    fn new(text: &'a [u8], format: &str, place: &'a str) -> Result<Self> {
        let text = std::str::from_utf8(text).map_err(|_| bad(place, "not UTF-8 text"))?;
        let mut rest = text.split(' ');
        match rest.next() {
            Some(tag) if tag == format => Ok(Fields { rest, place }),
            Some(tag) => Err(bad(
                place,
                &format!(
                    "format '{}', expected '{format}'",
                    crate::bounds::quote_at_most(tag, 40)
                ),
            )),
            None => Err(bad(place, "empty")),
        }
    }

    fn next(&mut self) -> Result<Option<(&'a str, &'a str)>> {
        match self.rest.next() {
            None => Ok(None),
            Some(field) => field
                .split_once('=')
                .map(Some)
                // Quoted cut: a record is whatever the store holds (20 MiB, newlines).
                .ok_or_else(|| {
                    bad(
                        self.place,
                        &format!("'{}' is not name=value", crate::bounds::quote(field)),
                    )
                }),
        }
    }

    fn number<T: std::str::FromStr>(&self, name: &str, value: &str) -> Result<T> {
        value.parse().map_err(|_| {
            bad(
                self.place,
                &format!("{name}={value} is not a number in range"),
            )
        })
    }

    fn text(&self, name: &str, value: &str) -> Result<String> {
        crate::percent::decode(value).ok_or_else(|| {
            bad(
                self.place,
                &format!("{name}={value} is not percent-encoded UTF-8"),
            )
        })
    }
}

/// The bytes an owner key keeps as they are in a record line; every other is `%XX`.
fn kept_in_records(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_.:/@+".contains(&b)
}

fn percent_encode(s: &str, out: &mut String) {
    crate::percent::encode(s, kept_in_records, out)
}

/// An owner key as a record line spells it (for a store that looks for it on its side: Redis).
#[cfg(feature = "redis")]
pub(crate) fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    percent_encode(key, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut rec = SlotRecord::vacant(1023);
        rec.owner = Some(Owner::new("host:\"quoted\"|1 =%\nü"));
        rec.last_owner_key = Some(String::new());
        rec.fence = u64::MAX;
        rec.expires_at = -5;
        rec.floor = i64::MIN;
        rec.ceiling = i64::MAX;
        rec.next_floor = 1_700_000_000_000;
        let text = encode_slot(&rec);
        assert!(!text.contains(['\n', '|']), "{text}");
        assert_eq!(decode_slot(text.as_bytes(), "k").unwrap(), rec);
        let vacant = SlotRecord::vacant(0);
        assert_eq!(
            decode_slot(encode_slot(&vacant).as_bytes(), "k").unwrap(),
            vacant
        );
        let mut ns = NamespaceRecord {
            limit: 1 << 20,
            tolerance_ms: 1_000,
            not_before_ms: 42,
            layout: None,
            ttl_ms: None,
        };
        // A record written before layouts were recorded reads as one without a layout.
        let old = "cosid-namespace/1 limit=1048576 tolerance_ms=1000 not_before_ms=42";
        assert_eq!(encode_namespace(&ns), old);
        assert_eq!(decode_namespace(old.as_bytes(), "k").unwrap(), ns);
        ns.layout = Some(IdLayout::of(&crate::layout::Layout::SAFE_JS_SECONDS));
        assert_eq!(
            decode_namespace(encode_namespace(&ns).as_bytes(), "k").unwrap(),
            ns
        );
        ns.ttl_ms = Some(30_000);
        let text = encode_namespace(&ns);
        assert!(text.ends_with(" ttl_ms=30000"), "{text}");
        assert_eq!(decode_namespace(text.as_bytes(), "k").unwrap(), ns);
        let e = decode_namespace(format!("{text} ttl_ms=1").as_bytes(), "k").unwrap_err();
        assert!(e.message().contains("appears twice"), "{e}");
        let e = decode_namespace(format!("{old} layout=1:ms:41").as_bytes(), "k").unwrap_err();
        assert!(e.message().contains("layout '1:ms:41' is malformed"), "{e}");
    }

    #[test]
    fn foreign_values_are_refused_naming_the_key() {
        let mut held = SlotRecord::vacant(2);
        held.owner = Some(Owner::new("a"));
        let slot = encode_slot(&held);
        let inc = held.owner.as_ref().unwrap().incarnation.to_string();
        for (text, why) in [
            (String::new(), "format ''"),
            ("{\"slot\":1}".to_string(), "format"),
            ("cosid-slot/2 slot=1".to_string(), "expected 'cosid-slot/1'"),
            (slot.replace("fence=0", "fence=-1"), "fence=-1"),
            (slot.replace("floor=0", "floor=x"), "floor=x"),
            (slot.replace(" ceiling=0", ""), "'ceiling' is missing"),
            (format!("{slot} fence=3"), "appears twice"),
            (format!("{slot} color=blue"), "unknown field 'color'"),
            (format!("{slot} junk"), "not name=value"),
            (slot.replace(&inc, "x"), "not a UUID"),
            (
                slot.replace(&format!(" owner_incarnation={inc}"), ""),
                "together",
            ),
            (slot.replace("owner_key=a", "owner_key=%zz"), "percent"),
        ] {
            let e = decode_slot(text.as_bytes(), "store redis://h key 'cosid:{ns}:slots'[2]")
                .unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Store);
            assert!(e.message().contains("key 'cosid:{ns}:slots'[2]"), "{e}");
            assert!(e.message().contains(why), "{why}: {e}");
        }
        assert!(decode_namespace(slot.as_bytes(), "k").is_err());
        assert!(decode_slot(&[0xff, 0xfe], "k").is_err());
    }
}
