//! docs/migrating-from-cosid.md, run: the layout block of the guide as a configuration, a 4.x id
//! composed in it, the cut-over with `cosid migrate --not-before T`, and the checks of its
//! section 4 (`cosid slots`, `cosid parse` of an old and a new id). Each step runs the built
//! binary as the guide writes it.

mod common;

use common::ok;
use std::time::{SystemTime, UNIX_EPOCH};

/// The guide's one YAML block: the layout a CosId 4.x service used.
fn guide_layout() -> String {
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/migrating-from-cosid.md"
    ))
    .unwrap();
    let start = guide.find("```yaml\n").expect("the guide has a YAML block") + 8;
    let len = guide[start..].find("```").unwrap();
    guide[start..start + len].to_string()
}

/// A field of `cosid parse`'s JSON line.
fn field(json: &str, name: &str) -> u64 {
    let at = json.find(&format!("\"{name}\":")).expect(json) + name.len() + 3;
    let digits: String = json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().expect(json)
}

#[test]
fn the_guide_s_cut_over_runs_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}/slots.db", dir.path().display());
    // Section 1: the 4.x layout, as the guide writes it, with a store.
    let layout = guide_layout();
    assert!(layout.contains("namespace: orders"), "{layout}");
    let config = dir.path().join("cosid.yaml");
    std::fs::write(
        &config,
        format!("{layout}  machine:\n    lease:\n      store: '{store}'\n"),
    )
    .unwrap();
    let config = config.to_str().unwrap();

    // A 4.x id of machine 7 from a moment ago, composed in that layout: 41/10/12 bits from the
    // epoch 2019-12-24T16:00:00Z.
    let epoch_ms = 1_577_203_200_000u64;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let old_id = ((now_ms - 1000 - epoch_ms) << 22) | (7 << 12) | 3;

    // Section 3: stop 4.x (nothing runs here), pick T, raise every floor to it. An SQLite
    // store's file must exist first (cosid migrate creates namespaces, not store files).
    ok(&["next", "--store", &store, "--namespace", "scratch"]);
    let t_ms = now_ms + 1500;
    let t = cosid_core::time::format_rfc3339_ms(t_ms as i64);
    ok(&[
        "migrate",
        "--store",
        &store,
        "--namespace",
        "orders",
        "--not-before",
        &t,
    ]);

    // Section 4: the namespace's floor is T.
    let slots = ok(&["slots", "--store", &store, "--namespace", "orders"]);
    assert!(slots.contains(&format!("not-before {t}")), "{slots}");

    // Start cosid: its ids are above T, and an old and a new id decode in one layout.
    let new_id: u64 = ok(&["next", "--config", config]).trim().parse().unwrap();
    let parsed = ok(&[
        "parse",
        "--config",
        config,
        &old_id.to_string(),
        &new_id.to_string(),
    ]);
    let lines: Vec<&str> = parsed.lines().collect();
    assert_eq!(lines.len(), 2, "{parsed}");
    assert_eq!(field(lines[0], "slot"), 7, "{parsed}");
    assert_eq!(field(lines[0], "sequence"), 3, "{parsed}");
    assert!(field(lines[0], "timestamp_ms") < t_ms, "{parsed}");
    assert!(field(lines[1], "timestamp_ms") > t_ms, "{parsed}");
    assert!(new_id > old_id);
}
