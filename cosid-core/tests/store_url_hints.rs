//! The hints of a refused store URL: a mistyped or foreign scheme is named with the known scheme
//! it most likely means, a bare file path with the SQLite URL that names it; and a password,
//! host or anything past the scheme is never shown.

use cosid_core::store::StoreUrl;

fn refusal(text: &str) -> String {
    match StoreUrl::parse(text) {
        Ok(u) => panic!("{text:?} parsed as {u}"),
        Err(e) => e.message().to_string(),
    }
}

#[test]
fn an_unknown_scheme_is_named_with_the_closest_known_one() {
    for (text, scheme, known) in [
        ("reddis://:SECRET@cache.internal:6379/0", "reddis", "redis"),
        ("REDDIS://cache.internal", "REDDIS", "redis"),
        (
            "postgress://app:SECRET@db.internal/ids",
            "postgress",
            "postgres",
        ),
        ("sqllite:///var/lib/cosid/slots.db", "sqllite", "sqlite"),
        ("mysq://app:SECRET@db.internal/ids", "mysq", "mysql"),
        (
            "redis-sentinel://s1.internal,s2/m",
            "redis-sentinel",
            "redis+sentinel",
        ),
        ("http://etcd.internal:2379", "http", "etcd"),
        ("https://etcd.internal:2379", "https", "etcds"),
        ("psql://app@db.internal/ids", "psql", "postgres"),
        ("valkey://cache.internal:6379", "valkey", "redis"),
    ] {
        let m = refusal(text);
        assert!(
            m.contains(&format!(
                "unknown scheme '{scheme}': did you mean {known}://?"
            )),
            "{text}: {m}"
        );
        assert!(
            !m.contains("SECRET") && !m.contains(".internal"),
            "{text} shows more than its scheme: {m}"
        );
        // The suggestion parses where the rest of the URL does.
        let fixed = format!("{known}{}", &text[scheme.len()..]);
        StoreUrl::parse(&fixed).unwrap_or_else(|e| panic!("{fixed}: {e}"));
    }
}

#[test]
fn an_unknown_scheme_far_from_every_known_one_is_named_alone() {
    let m = refusal("ftp://files.internal/x");
    assert!(m.contains("unknown scheme 'ftp'"), "{m}");
    assert!(
        !m.contains("did you mean") && !m.contains(".internal"),
        "{m}"
    );
    // The accepted forms are still listed.
    assert!(
        m.contains("sqlite:///path/slots.db") && m.contains("mysql://"),
        "{m}"
    );
}

/// Text shaped like `user:password@host` has no scheme: what precedes the ':' may be a
/// credential, so nothing is shown and nothing is suggested.
#[test]
fn text_not_shaped_scheme_slash_slash_shows_nothing() {
    for text in ["SECRET:x@h", "reddis:SECRET@h", "SECRETx:pw@host:6379"] {
        let m = refusal(text);
        assert!(!m.contains("SECRET"), "{text}: {m}");
        assert!(!m.contains("did you mean"), "{text}: {m}");
    }
}

/// A database file in a directory that exists, or any file that exists, is echoed with the URL
/// that names it; other text that looks like a path is not (it may be a secret pasted in the
/// wrong place) and gets the general form.
#[test]
fn a_bare_file_path_suggests_its_sqlite_url() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("slots");
    std::fs::write(&existing, b"").unwrap();
    let existing = existing.to_str().unwrap().to_string();
    let existing_url = format!("sqlite://{existing}");
    for (text, url) in [
        ("/tmp/x.db", "sqlite:///tmp/x.db"),
        (existing.as_str(), existing_url.as_str()),
        ("./slots.db", "sqlite://./slots.db"),
        ("slots.db", "sqlite://slots.db"),
        ("/tmp/a:b.db", "sqlite:///tmp/a:b.db"),
    ] {
        let m = refusal(text);
        assert!(m.contains("has no scheme"), "{text}: {m}");
        assert!(m.contains(&format!("write {url} ")), "{text}: {m}");
        // The suggested URL names that file.
        match StoreUrl::parse(url).unwrap() {
            StoreUrl::Sqlite { path } => assert_eq!(path.to_str(), Some(text.trim())),
            other => panic!("{url} parsed as {other}"),
        }
    }
}

#[test]
fn text_that_may_be_a_connection_string_gets_no_path_hint() {
    for text in [
        "host=db user=app password=SECRET dbname=ids.db",
        "/SECRET@host.db",
        "~/slots.db",
        "cache.internal",
        "/SECRET0B1111",
        "/SECRET/internal",
    ] {
        let m = refusal(text);
        assert!(m.contains("has no scheme"), "{text}: {m}");
        assert!(
            !m.contains("sqlite://") || m.contains("sqlite:///path/slots.db"),
            "{text}: {m}"
        );
        assert!(
            !m.contains("SECRET") && !m.contains("internal"),
            "{text}: {m}"
        );
    }
}
