//! The hints of a namespace that refuses a runtime, followed as written: an exhausted namespace
//! (every slot held) names the move to a namespace with more slots through `cosid migrate`,
//! which this test runs; a layout mismatch names the recorded layout's key and a namespace of
//! the layout's own, never a command that cannot change a layout.

mod common;

use common::{cosid, ok, run};
use std::io::{BufRead, BufReader};
use std::process::Stdio;

fn config(dir: &std::path::Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.to_str().unwrap().to_string()
}

/// The "time" field of `cosid parse`'s JSON line.
fn time_of(id: &str) -> String {
    let json = ok(&["parse", id]);
    let at = json.find("\"time\":\"").expect(&json) + 8;
    json[at..].split('"').next().unwrap().to_string()
}

#[test]
fn an_exhausted_namespace_names_the_move_to_more_slots_which_works() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}/slots.db", dir.path().display());
    let lease = |ns: &str, bits: u8| {
        format!(
            "cosid: {{namespace: {ns}, machine: {{lease: {{store: '{store}', bits: {bits}, \
             acquire-timeout: 100ms}}}}}}\n"
        )
    };
    let one_slot = config(dir.path(), "one.yaml", &lease("orders", 0));

    // The namespace's one slot, held by a running process (its first id says it holds it).
    let mut holder = cosid()
        .args(["next", "--follow", "--rate", "0.001", "--config", &one_slot])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the holder prints an id").unwrap();

    let o = run(&["next", "--config", &one_slot]);
    assert!(!o.status.success());
    let e = String::from_utf8(o.stderr).unwrap();
    assert!(
        e.contains("all 1 slots of namespace 'orders' are held"),
        "{e}"
    );
    assert!(
        e.contains(
            "a namespace's cosid.machine.lease.bits never changes): stop this namespace's \
             runtimes, run `cosid migrate --store URL --namespace NEW --not-before T` with T \
             the time of their last id, then start them on NEW with larger bits"
        ),
        "{e}"
    );
    assert!(!e.contains("can grow"), "{e}");
    // The bits never change: the same namespace with more is refused.
    let two_slots_same = config(dir.path(), "same.yaml", &lease("orders", 1));
    let o = run(&["next", "--config", &two_slots_same]);
    assert!(!o.status.success());
    let e = String::from_utf8(o.stderr).unwrap();
    assert!(e.contains("records limit 1 (bits 0)"), "{e}");

    // The hint, step by step: stop the runtimes (SIGTERM: the holder prints its last id and
    // releases the slot), migrate to a new namespace above the last id, start it with more bits.
    let pid = holder.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let last = lines
        .map(Result::unwrap)
        .last()
        .unwrap_or_else(|| first.clone());
    assert!(holder.wait().unwrap().success());
    let t = time_of(&last);
    ok(&[
        "migrate",
        "--store",
        &store,
        "--namespace",
        "orders-2",
        "--not-before",
        &t,
    ]);
    let two_slots = config(dir.path(), "two.yaml", &lease("orders-2", 1));
    let ids = ok(&["next", "-n", "3", "--config", &two_slots]);
    let last: u64 = last.trim().parse().unwrap();
    for id in ids.lines() {
        assert!(id.parse::<u64>().unwrap() > last, "{id} <= {last}");
    }
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
