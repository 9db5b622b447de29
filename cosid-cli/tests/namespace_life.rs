//! A namespace's life from the command line: `cosid slots` (the summary, each holder's last
//! renewal, a free slot's previous holder as history), `cosid namespace raise-slots` and
//! `cosid namespace delete`, on an SQLite store (the store conformance suite runs the same
//! operations on every store).

mod common;

use common::{cosid, ok, run};
use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Stdio};

fn config(dir: &std::path::Path, name: &str, ns: &str, bits: u8) -> String {
    config_with(dir, name, ns, bits, "")
}

/// [`config`] with more lease settings (`extra`: `, key: value` pairs).
fn config_with(dir: &std::path::Path, name: &str, ns: &str, bits: u8, extra: &str) -> String {
    let store = format!("sqlite://{}/slots.db", dir.display());
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "cosid: {{namespace: {ns}, machine: {{lease: {{store: '{store}', bits: {bits}, \
             ttl: 30s, acquire-timeout: 100ms, owner-key: {name}{extra}}}}}}}\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// `cosid next --follow` on `config`, once it printed its first id (it holds its slot then).
fn holder(config: &str) -> (Child, Lines<BufReader<ChildStdout>>, String) {
    let mut child = cosid()
        .args(["next", "--follow", "--rate", "0.001", "--config", config])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the holder prints an id").unwrap();
    (child, lines, first)
}

/// Stops `child` with SIGTERM (it releases its slot) and returns the last id it printed.
fn stop(mut child: Child, lines: Lines<BufReader<ChildStdout>>, first: String) -> u64 {
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let last = lines.map(Result::unwrap).last().unwrap_or(first);
    assert!(child.wait().unwrap().success());
    last.trim().parse().unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A JSON field's text (number, `null`, or an object) in one line of `cosid slots --json`.
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let key = format!("\"{name}\":");
    let at = line
        .find(&key)
        .unwrap_or_else(|| panic!("{name} in {line}"))
        + key.len();
    let rest = &line[at..];
    let end = if rest.starts_with('{') {
        rest.find('}').unwrap() + 1
    } else {
        rest.find([',', '}']).unwrap()
    };
    &rest[..end]
}

#[test]
fn slots_shows_a_summary_each_holder_s_last_renewal_and_a_free_slot_s_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}/slots.db", dir.path().display());
    let a = config_with(dir.path(), "a", "orders", 2, ", preferred-slot: 0");
    // One holder that stopped (its slot free, with history), one that runs.
    ok(&["next", "--config", &a]);
    let b = config_with(dir.path(), "b", "orders", 2, ", preferred-slot: 3");
    let (h, lines, first) = holder(&b);

    let table = ok(&["slots", "--store", &store, "--namespace", "orders"]);
    let rows: Vec<&str> = table.lines().collect();
    assert!(
        rows[0].contains("limit 4") && rows[0].contains("ttl 30s"),
        "{table}"
    );
    assert!(
        rows[1].starts_with("held 1  expired 0  free 3  limit 4"),
        "{table}"
    );
    assert!(
        rows[1].contains("layout 1577203200000:ms:41/10/12") && rows[1].contains("1024 slots"),
        "{table}"
    );
    assert!(rows[2].contains("renewed") && rows[2].trim_end().ends_with("next-floor"));
    let held: Vec<&str> = rows[3..]
        .iter()
        .copied()
        .filter(|r| r.contains(" held "))
        .collect();
    let free: Vec<&str> = rows[3..]
        .iter()
        .copied()
        .filter(|r| r.contains(" free "))
        .collect();
    assert_eq!((held.len(), free.len()), (1, 1), "{table}");
    assert!(
        held[0].contains(" b ") && held[0].contains(" ago "),
        "{table}"
    );
    // The free slot: its previous holder and window in parentheses, its next floor plain.
    assert!(
        free[0].contains("(a)") && free[0].contains("(20"),
        "{table}"
    );
    assert!(!free[0].trim_end().ends_with(')'), "{table}");

    let json = ok(&[
        "slots",
        "--store",
        &store,
        "--namespace",
        "orders",
        "--json",
    ]);
    for line in json.lines() {
        if line.contains("\"state\":\"held\"") {
            assert_eq!(field(line, "previous_holder"), "null", "{line}");
            let expires: i64 = field(line, "expires_at").parse().unwrap();
            let renewed: i64 = field(line, "renewed_at").parse().unwrap();
            assert_eq!(renewed, expires - 30_000, "{line}");
        } else {
            assert_eq!(field(line, "renewed_at"), "null", "{line}");
            let previous = field(line, "previous_holder");
            assert!(previous.starts_with("{\"key\":\"a\",\"floor\":"), "{line}");
            assert!(previous.contains(&format!("\"ceiling\":{}", field(line, "ceiling"))));
        }
    }
    stop(h, lines, first);
}

#[test]
fn an_exhausted_namespace_names_raise_slots_which_works_while_its_holder_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}/slots.db", dir.path().display());
    let one = config(dir.path(), "one", "orders", 0);
    let (h, lines, first) = holder(&one);

    let o = run(&["next", "--config", &one]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert!(
        e.contains("all 1 slots of namespace 'orders' are held"),
        "{e}"
    );
    assert!(
        e.contains("`cosid namespace raise-slots --store URL"),
        "{e}"
    );
    // More bits than recorded are refused until the limit is raised.
    let two = config(dir.path(), "two", "orders", 1);
    let e = stderr(&run(&["next", "--config", &two]));
    assert!(
        e.contains("records limit 1 slots; this runtime asks for 2"),
        "{e}"
    );

    // Lowering and going past the layout's node bits are refused, naming the values.
    let raise = |n: &str| {
        run(&[
            "namespace",
            "raise-slots",
            "--store",
            &store,
            "--namespace",
            "orders",
            "--slots",
            n,
        ])
    };
    let o = raise("0");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--slots 0 is below namespace 'orders''s limit of 1"));
    let o = raise("2048");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("node-bits 10 give 1024 slots"),
        "{}",
        stderr(&o)
    );

    let o = raise("3");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("the limit is now 3 slots (was 1)"));
    // The old configuration (bits 0) and the new one (bits 1) both start now, beside the holder.
    let id: u64 = ok(&["next", "--config", &one]).trim().parse().unwrap();
    ok(&["next", "--config", &two]);
    let parsed = ok(&["parse", &id.to_string()]);
    assert!(!parsed.contains("\"slot\":0,"), "{parsed}");
    stop(h, lines, first);
}

#[test]
fn delete_needs_yes_is_refused_while_a_lease_lives_and_a_namespace_made_again_starts_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}/slots.db", dir.path().display());
    let a = config(dir.path(), "a", "orders", 1);
    let (h, lines, first) = holder(&a);
    let delete = |yes: bool| {
        let mut args = vec![
            "namespace",
            "delete",
            "--store",
            &store,
            "--namespace",
            "orders",
        ];
        if yes {
            args.push("--yes");
        }
        run(&args)
    };
    let o = delete(false);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("add --yes"), "{}", stderr(&o));
    let o = delete(true);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("is held by 'a' until 20"), "{e}");
    assert!(ok(&["slots", "--store", &store, "--namespace", "orders"]).contains(" held "));

    let last = stop(h, lines, first);
    let o = delete(true);
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(said.contains("deleted (1 slot records)"), "{said}");
    let table = ok(&["slots", "--store", &store, "--namespace", "orders"]);
    assert!(table.contains("no slot limit"), "{table}");
    assert_eq!(table.lines().count(), 3, "no slot record is left: {table}");

    // Made again with other bits: every id lies above the last one of its first life.
    let b = config(dir.path(), "b", "orders", 3);
    for id in ok(&["next", "-n", "5", "--config", &b]).lines() {
        assert!(id.parse::<u64>().unwrap() > last, "{id} <= {last}");
    }
    let o = run(&[
        "namespace",
        "delete",
        "--store",
        &store,
        "--namespace",
        "nothing",
        "--yes",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("namespace 'nothing' does not exist"),
        "{}",
        stderr(&o)
    );
}
