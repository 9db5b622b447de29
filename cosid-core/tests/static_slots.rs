//! Static slots through the public runtime: the state file keeps uniqueness across restarts,
//! even when the clock is set back, and a damaged file stops the runtime instead of guessing.

use cosid_core::clock::{Clock, ManualClock};
use cosid_core::config::{Config, Machine};
use cosid_core::{ErrorKind, Runtime};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const T0: i64 = 1_800_000_000_000;

fn config(state: &Path, not_before: Option<&str>) -> Config {
    let nb = not_before
        .map(|t| format!("      not-before: {t}\n"))
        .unwrap_or_default();
    Config::from_yaml(&format!(
        "cosid:\n  max-wait: 1s\n  machine:\n    static:\n      slot: 7\n      state-file: {}\n      ahead: 10s\n{nb}",
        state.display()
    ))
    .unwrap()
}

fn start(clock: &Arc<ManualClock>, cfg: Config) -> cosid_core::Result<Runtime> {
    Runtime::builder().config(cfg).clock(clock.clone()).build()
}

/// A state file path in a new directory (removed when the `TempDir` is dropped), and a manual
/// clock at `T0`.
fn fresh() -> (tempfile::TempDir, PathBuf, Arc<ManualClock>) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    (dir, state, ManualClock::shared(T0))
}

/// A runtime on the static slot of [`config`] with the state file `state`, no `not-before`.
fn start_on(clock: &Arc<ManualClock>, state: &Path) -> cosid_core::Result<Runtime> {
    start(clock, config(state, None))
}

fn unit_start(rt: &Runtime, id: u64) -> i64 {
    rt.layout()
        .unit_start_ms(rt.layout().decompose(id).unwrap().timestamp)
}

#[test]
fn the_first_ceiling_is_written_before_the_first_id() {
    let (_dir, state, clock) = fresh();
    let rt = start_on(&clock, &state).unwrap();
    assert_eq!(
        cosid_core::static_slot::read_state(&state).unwrap(),
        Some(T0 + 10_000)
    );
    let id = rt.next().unwrap();
    assert_eq!(rt.layout().decompose(id).unwrap().slot, 7);
    rt.close().unwrap();
    // A clean close writes the exact last issued timestamp.
    assert_eq!(
        cosid_core::static_slot::read_state(&state).unwrap(),
        Some(unit_start(&rt, id))
    );
}

const CHILD_STATE: &str = "COSID_TEST_CHILD_STATE";

/// Runs the ignored test `name` of this binary in a child process with `CHILD_STATE=state`
/// and returns its stdout; fails the test if the child failed.
fn child(name: &str, state: &Path) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_STATE, state)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {name} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn child_state() -> PathBuf {
    std::env::var_os(CHILD_STATE)
        .expect("run only as a child of another test")
        .into()
}

/// Not a test of its own: a runtime that issues 100 ids, prints them and dies without closing
/// (for `a_crash_then_a_clock_set_back_never_repeats_an_id`).
#[test]
#[ignore = "run as a child process"]
fn static_crash_child() {
    let clock = ManualClock::shared(T0);
    let rt = start_on(&clock, &child_state()).unwrap();
    for _ in 0..100 {
        println!("COSID-ID {}", rt.next().unwrap());
        clock.advance(Duration::from_millis(3));
    }
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    // SAFETY: ends the process at once, as a crash would: no close, no destructor.
    unsafe { libc::_exit(0) };
}

#[test]
fn a_crash_then_a_clock_set_back_never_repeats_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // The crash: the file holds the ceiling written at start.
    let before: Vec<u64> = child("static_crash_child", &state)
        .lines()
        .filter_map(|l| l[l.find("COSID-ID ")? + "COSID-ID ".len()..].parse().ok())
        .collect();
    assert_eq!(before.len(), 100);
    let clock = ManualClock::shared(T0);
    clock.step_back(Duration::from_secs(3600));
    let rt2 = start_on(&clock, &state).unwrap();
    // The floor is the old ceiling, an hour and more ahead of the clock: nothing can be issued.
    let e = rt2.next().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ClockBehind, "{e}");
    // Once the clock passes the old ceiling, ids resume above everything issued before.
    clock.set(T0 + 10_001);
    let id = rt2.next().unwrap();
    assert!(before.iter().all(|b| *b < id));
    rt2.close().unwrap();
}

/// Not a test of its own: tries to start a runtime on the state file its parent holds.
#[test]
#[ignore = "run as a child process"]
fn static_second_process_child() {
    let clock = ManualClock::shared(T0);
    match start_on(&clock, &child_state()) {
        Ok(_) => println!("COSID-CHILD started"),
        Err(e) => println!("COSID-CHILD kind={} message={e}", e.kind()),
    }
}

/// Two processes on one static slot and state file would issue the same ids: the second is
/// refused with an error naming the file and the holder's pid, and starts once the first
/// closed.
#[test]
fn a_second_process_on_one_state_file_is_refused() {
    let (_dir, state, clock) = fresh();
    let rt = start_on(&clock, &state).unwrap();
    let out = child("static_second_process_child", &state);
    let line = out
        .lines()
        .find_map(|l| Some(&l[l.find("COSID-CHILD ")? + "COSID-CHILD ".len()..]))
        .unwrap_or_else(|| panic!("no result from the child:\n{out}"));
    assert!(line.starts_with("kind=state_file "), "{line}");
    assert!(line.contains(&state.display().to_string()), "{line}");
    assert!(
        line.contains(&format!("process {}", std::process::id())),
        "names the holder: {line}"
    );
    rt.close().unwrap();
    let out = child("static_second_process_child", &state);
    assert!(out.contains("COSID-CHILD started"), "{out}");
}

/// A second runtime of the same process on the same state file is refused too.
#[test]
fn a_second_runtime_on_one_state_file_is_refused() {
    let (_dir, state, clock) = fresh();
    let rt = start_on(&clock, &state).unwrap();
    let e = start_on(&clock, &state).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StateFile, "{e}");
    assert!(e.message().contains(&state.display().to_string()), "{e}");
    assert!(e.message().contains("this process"), "{e}");
    rt.close().unwrap();
    // Closed: the file is free again.
    start_on(&clock, &state).unwrap().close().unwrap();
}

/// A child forked (by any thread) while the runtime held the state file, and not yet exec'ed or
/// exited, has a copy of the lock's descriptor: closing the runtime must still free the file.
#[test]
fn a_closed_state_file_is_free_while_a_forked_child_lives_on() {
    let (_dir, state, clock) = fresh();
    let rt = start_on(&clock, &state).unwrap();
    // SAFETY: the child only sleeps and exits; it calls nothing that takes a lock.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        // SAFETY: sleep and _exit are async-signal-safe.
        unsafe {
            libc::sleep(5);
            libc::_exit(0)
        };
    }
    rt.close().unwrap();
    let again = start_on(&clock, &state);
    // SAFETY: kill and waitpid on the child we forked.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    again
        .expect("the state file stayed locked by the forked child's copy")
        .close()
        .unwrap();
}

/// Not a test of its own: starts and closes a runtime under umask 000.
#[test]
#[ignore = "run as a child process"]
fn static_umask_child() {
    // SAFETY: umask only changes the process's file-creation mask.
    unsafe { libc::umask(0) };
    let clock = ManualClock::shared(T0);
    start_on(&clock, &child_state()).unwrap().close().unwrap();
    println!("COSID-CHILD done");
}

/// Under umask 000 the state file's directories are created 0700 and the state and lock files
/// 0600: no other user may read or replace them.
#[test]
fn state_files_are_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("a/b/state");
    assert!(child("static_umask_child", &state).contains("COSID-CHILD done"));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&dir.path().join("a")), 0o700);
    assert_eq!(mode(&dir.path().join("a/b")), 0o700);
    assert_eq!(mode(&state), 0o600);
    assert_eq!(mode(&dir.path().join("a/b/state.lock")), 0o600);
}

#[test]
fn the_background_writer_moves_the_ceiling_before_it_is_reached() {
    let (_dir, state, clock) = fresh();
    let rt = start_on(&clock, &state).unwrap();
    for _ in 0..30 {
        clock.advance(Duration::from_secs(1));
        // The keeper thread polls at least every 200 ms; give it time to write.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while rt.binding().ceiling - clock.now_ms() < 5_000 && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        rt.next().unwrap();
    }
    let on_disk = cosid_core::static_slot::read_state(&state)
        .unwrap()
        .unwrap();
    assert!(
        on_disk >= rt.binding().ceiling,
        "the window never runs ahead of the file"
    );
    assert!(rt.stats().renewals > 0);
    rt.close().unwrap();
}

#[test]
fn a_corrupt_or_truncated_file_is_an_error_not_a_floor_of_zero() {
    let (_dir, state, clock) = fresh();
    for bad in [
        "",
        "cosid-state 1 1800000000000",
        "garbage\n",
        "cosid-state 1 1800000000000 0000000000000000\n",
    ] {
        std::fs::write(&state, bad).unwrap();
        let e = start_on(&clock, &state).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::StateFile, "{bad:?}: {e}");
        assert!(e.message().contains(&state.display().to_string()), "{e}");
    }
    std::fs::write(&state, [0xff, 0xfe, 0x00]).unwrap();
    assert_eq!(
        start_on(&clock, &state).unwrap_err().kind(),
        ErrorKind::StateFile
    );
}

#[test]
fn a_missing_file_starts_at_not_before_or_now() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::shared(T0);
    // With not-before in the future: the floor is not-before.
    let state = dir.path().join("a");
    let rt = start(&clock, config(&state, Some("2027-01-15T08:00:00Z"))).unwrap();
    let nb = cosid_core::time::parse_rfc3339("2027-01-15T08:00:00Z").unwrap();
    assert_eq!(rt.binding().floor, nb);
    rt.close().unwrap();
    // Without: the floor is now.
    let state = dir.path().join("b");
    let rt = start_on(&clock, &state).unwrap();
    assert_eq!(rt.binding().floor, T0);
    rt.close().unwrap();
    // An existing file wins over an older not-before.
    let rt = start(&clock, config(&state, Some("2020-01-01T00:00:00Z"))).unwrap();
    assert!(rt.binding().floor >= T0);
    rt.close().unwrap();
}

#[test]
fn a_slot_outside_the_layout_is_refused() {
    let e = Config::from_yaml(
        "cosid:\n  snowflake: {preset: safe-js-millis}\n  machine: {static: {slot: 8}}",
    )
    .unwrap_err();
    assert!(e.message().contains("cosid.machine.static.slot 8"), "{e}");
    let ok = Config::from_yaml(
        "cosid:\n  snowflake: {preset: safe-js-millis}\n  machine: {static: {slot: 7}}",
    )
    .unwrap();
    assert!(matches!(ok.machine, Machine::Static(_)));
}

/// `cosid migrate --state-file` takes the state file's lock: refused while a runtime uses the
/// file (the runtime's next write would undo the raise), done once it has stopped.
#[test]
fn migrate_raises_the_floor_only_while_no_runtime_holds_the_file() {
    let (_dir, state, clock) = fresh();
    let rt = start_on(&clock, &state).unwrap();
    rt.next().unwrap();
    let e = cosid_core::static_slot::raise_not_before(&state, T0 + 60_000).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StateFile, "{e}");
    assert!(e.message().contains("in use by"), "{e}");
    rt.close().unwrap();
    let floor = cosid_core::static_slot::raise_not_before(&state, T0 + 60_000).unwrap();
    assert_eq!(floor, T0 + 60_000);
    assert_eq!(
        cosid_core::static_slot::read_state(&state).unwrap(),
        Some(T0 + 60_000)
    );
    // A later start begins above it.
    let rt = start_on(&clock, &state).unwrap();
    assert!(rt.binding().floor >= T0 + 60_000);
    rt.close().unwrap();
}
