//! `cosid next --format` and `cosid parse --format` with CosId's text forms: each test runs the
//! built binary.

mod common;

use common::{ok, run};

fn refused(args: &[&str], needle: &str) {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
}

/// The `"id":N` of each JSON line.
fn ids(json: &str) -> Vec<u64> {
    json.lines()
        .map(|l| {
            let rest = l.strip_prefix("{\"id\":").expect(l);
            rest[..rest.find(',').unwrap()].parse().unwrap()
        })
        .collect()
}

#[test]
fn parse_reads_cosid_text_in_every_setting() {
    // The id of CosId's friendly converter test, in each form.
    let id = 295_913_926_632_165_376u64;
    for (format, text) in [
        ("friendly,zone=Asia/Shanghai", "20220320133617924-5-0"),
        (
            "friendly,zone=+08:00,pad-start=true",
            "20220320133617924-0005-0000",
        ),
        ("friendly", "20220320053617924-5-0"),
        ("radix62,pad-start=false", "LrHucXALbs"),
        ("base62", "0LrHucXALbs"),
        ("radix36", "028XOQD7HM874"),
        ("radix36,pad-start=false,char-size=12", "28XOQD7HM874"),
        ("radix62,prefix=ORD-,suffix=.x", "ORD-0LrHucXALbs.x"),
        ("dec,pad-start=true,char-size=19", "0295913926632165376"),
        (
            "dec,prefix=P,date-prefix=yyMMdd,date-before-prefix=false",
            "240618-P295913926632165376",
        ),
    ] {
        let out = ok(&["parse", "--format", format, text]);
        assert_eq!(ids(&out), [id], "{format} {text}");
    }
}

#[test]
fn next_writes_what_parse_reads() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}/s.db", dir.path().display());
    for format in [
        "radix36",
        "radix62,pad-start=false",
        "friendly,zone=Asia/Shanghai,pad-start=true",
        "friendly,zone=America/New_York",
        "base62,char-size=11",
        "dec,prefix=ORD%2C,date-prefix=yyyy-MM-dd,date-zone=Asia/Shanghai",
    ] {
        let text = ok(&["next", "-n", "3", "--store", &store, "--format", format]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{format}: {text}");
        let mut args = vec!["parse", "--format", format];
        args.extend(&lines);
        let parsed = ids(&ok(&args));
        // Three distinct, increasing ids came back.
        assert!(
            parsed.windows(2).all(|w| w[0] < w[1]),
            "{format}: {parsed:?}"
        );
        if format.starts_with("friendly,zone=Asia") {
            assert!(
                lines
                    .iter()
                    .all(|l| l.split('-').nth(1).unwrap().len() == 4),
                "{text}"
            );
        }
    }
}

#[test]
fn bad_formats_are_refused_with_the_accepted_forms() {
    refused(
        &["next", "--format", "radix16", "--store", "memory:"],
        "expected json (one decoded id a line), dec, hex, base62 (or radix62), radix36 or friendly",
    );
    refused(
        &["parse", "--format", "friendly,zone=Mars/Base", "1"],
        "--format: \"Mars/Base\" is not a time zone",
    );
    refused(
        &["parse", "--format", "radix62,char-size=12", "1"],
        "use a number from 1 to 11",
    );
    // Text written in one setting is refused in another, with what was expected.
    refused(
        &[
            "parse",
            "--format",
            "friendly",
            "20220320133617924-0005-0000",
        ],
        "slot and sequence in decimal with no leading zeros",
    );
    refused(
        &["parse", "--format", "radix36", "28XOQD7HM874"],
        "exactly 13 characters of 0-9A-Z",
    );
}
