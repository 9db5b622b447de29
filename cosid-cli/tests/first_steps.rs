//! The mistakes of a first session with the command, each answered with the fix: a mistyped
//! store scheme, a file path given as the store, and a base62 id parsed as decimal. Each hint is
//! then followed as written, and works.

mod common;

use common::{ok, run};

fn stderr_of(args: &[&str]) -> String {
    let o = run(args);
    assert!(!o.status.success(), "{args:?} succeeded");
    String::from_utf8(o.stderr).unwrap()
}

#[test]
fn a_mistyped_scheme_is_echoed_with_the_known_one_and_no_password() {
    let e = stderr_of(&["next", "--store", "reddis://:SECRET@cache.internal:6379/0"]);
    assert!(
        e.contains("--store: the store URL has an unknown scheme 'reddis': did you mean redis://?"),
        "{e}"
    );
    assert!(
        !e.contains("SECRET") && !e.contains("cache.internal"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn a_file_path_as_the_store_names_its_sqlite_url_which_works() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    let path = path.to_str().unwrap();
    let e = stderr_of(&["next", "--store", path]);
    let url = format!("sqlite://{path}");
    assert!(e.contains(&format!("write {url} ")), "{e}");
    let id = ok(&["next", "--store", &url]);
    assert!(id.trim().parse::<u64>().is_ok(), "{id}");
}

#[test]
fn a_base62_id_parsed_as_decimal_names_the_format_which_works() {
    // The text form the README's `cosid next -n 3 --format base62` prints.
    let e = stderr_of(&["parse", "15ybFF0w6YT"]);
    assert!(e.contains("is not a decimal id"), "{e}");
    assert!(
        e.contains("it reads as a base62 id: add --format base62"),
        "{e}"
    );
    let json = ok(&["parse", "--format", "base62", "15ybFF0w6YT"]);
    assert!(json.starts_with("{\"id\":"), "{json}");

    // An id this command printed, read back the way the hint says.
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}/slots.db", dir.path().display());
    let text = ok(&["next", "--format", "base62", "--store", &store]);
    let text = text.trim();
    let e = stderr_of(&["parse", text]);
    assert!(e.contains("add --format base62"), "{text}: {e}");
    ok(&["parse", "--format", "base62", text]);
}

#[test]
fn text_no_form_reads_gets_no_format_hint() {
    let e = stderr_of(&["parse", "not-an-id!"]);
    assert!(e.contains("is not a decimal id"), "{e}");
    assert!(!e.contains("--format"), "{e}");
}
