//! The hints of a namespace that refuses a runtime, followed as written: a layout mismatch names
//! the recorded layout's key and a namespace of the layout's own, never a command that cannot
//! change a layout. (An exhausted namespace names `cosid namespace raise-slots`, which
//! `namespace_life.rs` follows.)

mod common;

use common::{ok, run};

fn config(dir: &std::path::Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_layout_mismatch_names_the_recorded_layout_s_key_and_a_namespace_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}/slots.db", dir.path().display());
    let with_epoch = |ns: &str, epoch: &str| {
        format!(
            "cosid: {{namespace: {ns}, snowflake: {{epoch: '{epoch}'}}, machine: {{lease: \
             {{store: '{store}'}}}}}}\n"
        )
    };
    let first = config(
        dir.path(),
        "a.yaml",
        &with_epoch("orders", "2019-12-24T16:00:00Z"),
    );
    let other = config(
        dir.path(),
        "b.yaml",
        &with_epoch("orders", "2020-01-01T00:00:00Z"),
    );
    ok(&["next", "--config", &first]);
    let o = run(&["next", "--config", &other]);
    assert!(!o.status.success());
    let e = String::from_utf8(o.stderr).unwrap();
    assert!(e.contains("records the id layout"), "{e}");
    assert!(
        e.contains(
            "a namespace's layout never changes and ids of two layouts collide, so give this \
             runtime the recorded layout (cosid.snowflake), or give the other layout a \
             namespace of its own"
        ),
        "{e}"
    );
    assert!(!e.contains("cosid migrate"), "{e}");
    // Both ways out work: the recorded layout in this namespace, the other in its own.
    ok(&["next", "--config", &first]);
    let own = config(
        dir.path(),
        "c.yaml",
        &with_epoch("orders-2020", "2020-01-01T00:00:00Z"),
    );
    ok(&["next", "--config", &own]);
}
