//! The `cosid` command against hostile or careless input: each test runs the built binary.
//!
//! Waits on a child process are bounded by the test program's own timeout (scripts/test runs
//! every test program under `timeout`), never by a timing assertion here.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStderr, Output, Stdio};

mod common;

use common::{cosid, run};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A SQLite store in a new temporary directory (removed when the handle is dropped) and its URL:
/// where most of these tests hold and list slots.
fn sqlite_store() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/s.db", dir.path().display());
    (dir, url)
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill failed");
}

/// Reads `stderr` line by line until one contains `needle`; returns the lines read.
fn wait_for_line(stderr: &mut BufReader<ChildStderr>, needle: &str) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = stderr.read_line(&mut line).expect("read stderr");
        assert!(n > 0, "stderr ended before a line with {needle:?}: {seen}");
        seen.push_str(&line);
        if line.contains(needle) {
            return seen;
        }
    }
}

/// A `cosid next --follow --rate 1` that holds the namespace's slot, returned once it printed
/// its first id.
fn holder(args: &[&str]) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = cosid()
        .args(["next", "--follow", "--rate", "1"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn holder");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(
        first.trim().parse::<u64>().is_ok(),
        "the holder printed no id: {first:?}"
    );
    (child, out)
}

fn stop(mut child: Child, sig: libc::c_int) -> std::process::ExitStatus {
    signal(&child, sig);
    child.wait().expect("wait")
}

fn exhausted_config(dir: &Path) -> String {
    let path = dir.join("exhausted.yaml");
    std::fs::write(
        &path,
        format!(
            "cosid:\n  namespace: hold\n  machine:\n    lease:\n      store: sqlite://{}/s.db\n      bits: 0\n      ttl: 30s\n      acquire-timeout: 300s\n",
            dir.display()
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn a_rate_out_of_range_is_a_clear_error_not_a_panic() {
    for rate in [
        "1e-300", "1e-19", "5e-324", "0", "-1", "NaN", "inf", "2e9", "0.0009",
    ] {
        let flag = format!("--rate={rate}");
        let o = run(&["next", "--follow", "--store", "memory:", &flag]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "--rate {rate}: {e}");
        assert!(e.contains("--rate") && e.contains("out of range"), "{e}");
        assert!(e.contains("0.001 to 1000000000"), "{e}");
        assert!(e.len() < 200, "{e}");
        assert!(!e.contains("panicked"), "{e}");
    }
}

#[test]
fn ttl_and_tolerance_flags_get_the_configuration_checks() {
    let o = run(&["next", "--store", "memory:", "--ttl", "0s"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("--ttl 0") && e.contains("too short"), "{e}");
    assert!(o.stdout.is_empty(), "an id was issued");
    let o = run(&["next", "--store", "memory:", "--ttl", "10ms"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = run(&["next", "--store", "memory:", "--tolerance", "400d"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--tolerance"), "{}", stderr(&o));
    let o = run(&["next", "--store", "memory:", "--ttl", "2s"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn read_only_commands_refuse_a_missing_store_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo").join("slots.db");
    let url = format!("sqlite://{}", missing.display());
    let o = run(&["slots", "--store", &url]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("no store file") && e.contains("typo"), "{e}");
    let o = run(&[
        "migrate",
        "--store",
        &url,
        "--not-before",
        "2026-01-01T00:00:00Z",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        !dir.path().join("typo").exists(),
        "a directory was created for a mistyped path"
    );
}

#[test]
fn migrate_refuses_what_a_runtime_refuses() {
    let (_dir, url) = sqlite_store();
    let o = run(&["next", "--store", &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    for ns in ["a/b", "x{y}", "tab\there"] {
        let o = run(&[
            "migrate",
            "--store",
            &url,
            "--namespace",
            ns,
            "--not-before",
            "2026-01-01T00:00:00Z",
        ]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{ns:?}: {e}");
        assert!(e.contains("--namespace"), "{e}");
    }
    let o = run(&[
        "migrate",
        "--store",
        "memory:",
        "--not-before",
        "2026-01-01T00:00:00Z",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("memory:"), "{}", stderr(&o));
}

/// `--not-before 9999-12-31` once bricked a namespace for good (not-before never goes back):
/// a time outside the layout, or more than a day ahead of the store's clock, is refused in one
/// line naming `--force`, and written with it.
#[test]
fn migrate_refuses_a_not_before_far_ahead_unless_forced() {
    let (_dir, url) = sqlite_store();
    let o = run(&["next", "--store", &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let in_two_days =
        cosid_core::time::format_rfc3339_ms(cosid_core::clock::system_now_ms() + 2 * 86_400_000);
    for (t, says) in [
        ("9999-12-31T00:00:00Z", "outside the time"),
        (in_two_days.as_str(), "more than a day ahead"),
        ("2001-01-01T00:00:00Z", "outside the time"),
    ] {
        let o = run(&["migrate", "--store", &url, "--not-before", t]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{t}: {e}");
        assert!(e.contains(says) && e.contains("--force"), "{t}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    }
    let o = run(&[
        "migrate",
        "--store",
        &url,
        "--not-before",
        &in_two_days,
        "--force",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn slots_escapes_owner_keys_in_the_table_and_in_json() {
    let (_dir, url) = sqlite_store();
    let key = "evil\n    9  held      forged\x1b[2J\u{9b}31m\u{202e}";
    let (h, _out) = holder(&["--store", &url, "--owner-key", key]);

    let o = run(&["slots", "--store", &url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json = String::from_utf8(o.stdout).unwrap();
    assert!(
        !json.contains(['\x1b', '\u{9b}', '\u{202e}']),
        "raw control characters in {json:?}"
    );
    assert!(
        json.contains(r"evil\u000a") && json.contains(r"\u009b31m\u202e"),
        "{json}"
    );
    let slots = json.lines().count();

    let o = run(&["slots", "--store", &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8(o.stdout).unwrap();
    // Three header lines, then one line per slot, each starting with its number.
    assert_eq!(table.lines().count(), 3 + slots, "{table}");
    for row in table.lines().skip(3) {
        let first = row.split_whitespace().next().unwrap_or("");
        assert!(first.parse::<u32>().is_ok(), "a forged row: {row:?}");
    }
    assert!(
        !table.contains(['\x1b', '\u{9b}', '\u{202e}']),
        "raw control characters in {table:?}"
    );
    assert!(table.contains(r"evil\u{000a}"), "{table}");
    assert_eq!(stop(h, libc::SIGTERM).code(), Some(0));
}

/// Sends `sig` to `waiter` (`cosid next --follow` with its stderr piped) once its keeper says
/// it waits (the event `said`: for a slot, or for the store), and checks that it stops at once,
/// exiting 0 and saying nothing is held: the end of every wait a signal cuts short.
fn interrupt_the_wait(waiter: &mut Child, sig: libc::c_int, said: &str) {
    let mut err = BufReader::new(waiter.stderr.take().unwrap());
    // The keeper's event says it is waiting: the signal arrives during the wait.
    wait_for_line(&mut err, said);
    signal(waiter, sig);
    let status = waiter.wait().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(rest.contains("nothing is held"), "{rest}");
}

/// `cosid next --follow` waiting for a slot of an exhausted namespace (another process holds the
/// only one) stops at SIGTERM, not at the acquire timeout, and holds nothing afterwards.
#[test]
fn sigterm_ends_a_wait_for_a_slot_and_leaves_nothing_held() {
    let dir = tempfile::tempdir().unwrap();
    let config = exhausted_config(dir.path());
    let (h, _out) = holder(&["--config", &config]);

    let mut waiter = cosid()
        .args(["next", "--follow", "--config", &config])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    interrupt_the_wait(&mut waiter, libc::SIGTERM, "acquire_failed");
    let mut printed = String::new();
    waiter
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut printed)
        .unwrap();
    assert!(printed.is_empty(), "the waiter issued ids: {printed}");

    // The holder still holds the one slot; the waiter left no record of its own.
    let url = format!("sqlite://{}/s.db", dir.path().display());
    let o = run(&["slots", "--store", &url, "--namespace", "hold", "--json"]);
    let json = String::from_utf8(o.stdout).unwrap();
    assert_eq!(json.lines().count(), 1, "{json}");
    assert!(json.contains(&format!(":{}\"", h.id())), "{json}");
    assert!(json.contains("\"state\":\"held\""), "{json}");
    assert_eq!(stop(h, libc::SIGTERM).code(), Some(0));
    let o = run(&["slots", "--store", &url, "--namespace", "hold", "--json"]);
    let json = String::from_utf8(o.stdout).unwrap();
    assert!(json.contains("\"state\":\"free\""), "{json}");
}

/// The same for SIGINT while the store cannot be reached.
#[test]
fn sigint_ends_a_wait_for_an_unreachable_store() {
    let mut waiter = cosid()
        .args([
            "next",
            "--follow",
            "--store",
            "redis://127.0.0.1:1/0",
            "--ttl",
            "300s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    interrupt_the_wait(&mut waiter, libc::SIGINT, "store_unavailable");
}

/// `cosid next -n COUNT` stops early at SIGINT, releases its slot and exits with 130 (before,
/// the default action killed it and the slot stayed held until its ttl ran out).
#[test]
fn sigint_stops_a_long_count_and_releases_the_slot() {
    let (_dir, url) = sqlite_store();
    let mut child = cosid()
        .args(["next", "--store", &url, "-n", "100000000000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.trim().parse::<u64>().is_ok(), "{first:?}");
    signal(&child, libc::SIGINT);
    // Drain stdout so that the child is never blocked on a full pipe.
    std::io::copy(&mut out, &mut std::io::sink()).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("the slot is released"), "{err}");
    let o = run(&["slots", "--store", &url, "--json"]);
    let json = String::from_utf8(o.stdout).unwrap();
    assert!(!json.is_empty() && !json.contains("\"held\""), "{json}");
}

/// Keeper events and errors on stderr carry owner keys another process chose: escaped, one line.
/// A second process with the holder's owner key takes another slot and reports the duplicate.
#[test]
fn owner_keys_in_events_on_stderr_are_escaped() {
    let (_dir, url) = sqlite_store();
    let key = "dup\n\x1b[2Jforged\u{9b}";
    let (h, _out) = holder(&["--store", &url, "--owner-key", key]);
    let mut second = cosid()
        .args([
            "next",
            "--follow",
            "--rate",
            "1",
            "--store",
            &url,
            "--owner-key",
            key,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(second.stderr.take().unwrap());
    let seen = wait_for_line(&mut err, "duplicate_owner_key");
    signal(&second, libc::SIGTERM);
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert_eq!(second.wait().unwrap().code(), Some(0), "{seen}{rest}");
    let all = format!("{seen}{rest}");
    assert!(!all.contains(['\x1b', '\u{9b}']), "{all:?}");
    assert!(!all.contains("\nforged"), "{all:?}");
    assert!(
        all.contains(r"dup\u{000a}\u{001b}[2Jforged\u{009b}"),
        "{all}"
    );
    assert_eq!(stop(h, libc::SIGTERM).code(), Some(0));
}

/// `--config` naming a FIFO (whose plain open waits for a writer forever) or a device that
/// never ends: one error line at once, naming the file and what it is.
#[test]
fn a_config_that_is_a_fifo_or_a_device_fails_at_once_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let fifo = fifo.to_str().unwrap();
    for (args, says) in [
        (vec!["next", "--config", fifo], "a FIFO, not a regular file"),
        (
            vec!["parse", "--config", fifo, "1"],
            "a FIFO, not a regular file",
        ),
        (
            vec!["next", "--config", "/dev/zero"],
            "a character device, not a regular file",
        ),
    ] {
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("cosid: error: "), "{args:?}: {err}");
        assert!(
            err.contains(says) && err.contains(args[2]),
            "{args:?}: {err}"
        );
    }
}

/// `--namespace` and `--owner-key` past their limits: one short line naming the flag and the
/// limit, not the whole value.
#[test]
fn namespace_and_owner_key_flags_past_their_limits_fail_in_one_short_line() {
    let (_dir, store) = sqlite_store();
    let long = "x".repeat(100_000); // one argument: under the kernel's 128 KiB
    for (flag, says) in [
        (
            "--namespace",
            "--namespace is 100000 bytes long, more than the limit of 128",
        ),
        (
            "--owner-key",
            "--owner-key is 100000 bytes long, more than the limit of 512",
        ),
    ] {
        let o = run(&["next", "--store", &store, flag, &long]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{flag}: {err}");
        assert_eq!(err.lines().count(), 1, "{flag}: {err}");
        assert!(err.contains(says) && err.len() < 300, "{flag}: {err}");
    }
}

/// A non-UTF-8 argument, or any argument clap refuses: one `cosid: error:` line, exit 2, not
/// clap's usage text.
#[test]
fn argument_errors_are_one_line() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"caf\xe9");
    let o = cosid()
        .args([std::ffi::OsStr::new("parse"), bad])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("cosid: error: argument 2 ('caf\u{fffd}') is not valid UTF-8"),
        "{err}"
    );
    let o = cosid()
        .args([
            std::ffi::OsStr::new("next"),
            std::ffi::OsStr::new("--config"),
            bad,
        ])
        .output()
        .unwrap();
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    for args in [
        &["next", "--countt", "1"][..],
        &["nope"],
        &["parse", "--format"],
    ] {
        let o = run(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("cosid: error: ") && err.contains("cosid --help"),
            "{err}"
        );
    }
    // Help and version stay clap's.
    let o = run(&["--version"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("cosid "));
    let o = run(&["next", "--help"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("Usage"));
}

/// `cosid slots` shows each slot's next floor (docs/migrating-from-cosid.md, section 4): after
/// a migration every next floor is at least the cut-over time.
#[test]
fn slots_shows_each_slots_next_floor() {
    let (_dir, store) = sqlite_store();
    common::ok(&[
        "next",
        "--store",
        &store,
        "--namespace",
        "nf",
        "--ttl",
        "1s",
    ]);
    // A time far ahead, so that every floor shown is it (past a day ahead: --force).
    let t = "2080-01-01T00:00:00.000Z";
    common::ok(&[
        "migrate",
        "--store",
        &store,
        "--namespace",
        "nf",
        "--not-before",
        t,
        "--force",
    ]);
    let table = common::ok(&["slots", "--store", &store, "--namespace", "nf"]);
    let mut lines = table.lines().skip(2);
    let header = lines.next().unwrap();
    assert!(header.trim_end().ends_with("next-floor"), "{table}");
    let rows: Vec<&str> = lines.collect();
    assert!(!rows.is_empty(), "{table}");
    for row in rows {
        assert!(row.trim_end().ends_with(t), "{table}");
    }
}
