//! Static slots (`machine.static`): the deployment guarantees the slot; the window comes from a
//! local state file instead of a store.
//!
//! Protocol (spec, "Static slots"):
//! - Before the first id, `ceiling = now + ahead` is written to the state file durably (temp
//!   file, fsync, rename, fsync of the directory). When less than `ahead/2` remains, the next
//!   ceiling is written the same way in the background (by the runtime's keeper thread); the
//!   window is extended only after the write is durable.
//! - On restart `floor = max(ceiling in the file, not-before)`: a crash followed by a clock set
//!   back cannot repeat an id, because nothing at or below a durably written ceiling is issued
//!   again.
//! - On a clean shutdown the exact last issued timestamp is written instead (it is below the
//!   ceiling and above everything issued), so a restart does not wait for the old ceiling.
//! - A missing file with no `not-before` starts at `floor = now` and says so; a truncated,
//!   corrupt or unreadable file is an error, never a floor of 0.
//!
//! File format, one line: `cosid-state 1 <ceiling_ms> <fnv1a64 of the text before it, hex>`.

use crate::clock::SharedClock;
use crate::config::StaticConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::lease::events::{Counters, Event, EventBus};
use crate::window::{Window, WindowStatus};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MAGIC: &str = "cosid-state 1";

fn fnv1a64(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The text of a state file holding `ceiling_ms`.
pub fn encode_state(ceiling_ms: i64) -> String {
    let body = format!("{MAGIC} {ceiling_ms}");
    format!("{body} {:016x}\n", fnv1a64(&body))
}

/// Parses a state file's text; every malformed input is an error naming the problem.
pub fn decode_state(text: &str, path: &Path) -> Result<i64> {
    let bad = |why: &str| {
        Error::new(
            ErrorKind::StateFile,
            format!(
                "state file '{}' is {why}; it may be truncated or corrupt. Do not delete it \
                 blindly: restore it, or set machine.static.not-before to a time after every id \
                 this slot ever issued and remove the file",
                path.display()
            ),
        )
    };
    let line = text
        .strip_suffix('\n')
        .ok_or_else(|| bad("not terminated by a newline"))?;
    if line.contains('\n') {
        return Err(bad("longer than one line"));
    }
    let (body, sum) = line
        .rsplit_once(' ')
        .ok_or_else(|| bad("missing its checksum"))?;
    if sum.len() != 16 || u64::from_str_radix(sum, 16).ok() != Some(fnv1a64(body)) {
        return Err(bad("failing its checksum"));
    }
    let ceiling = body
        .strip_prefix(MAGIC)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| bad("not a cosid state file of version 1"))?;
    ceiling
        .parse::<i64>()
        .map_err(|_| bad("holding a ceiling that is not a number"))
}

/// Reads the ceiling in `path`: `Ok(None)` if the file does not exist.
pub fn read_state(path: &Path) -> Result<Option<i64>> {
    // Through the bounded reader: a state path naming a FIFO or a device fails at once.
    match crate::bounds::read_file(path, crate::bounds::MAX_STATE_FILE_BYTES) {
        Ok(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| {
                Error::new(
                    ErrorKind::StateFile,
                    format!("state file '{}' is not text; it is corrupt", path.display()),
                )
            })?;
            decode_state(&text, path).map(Some)
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(crate::bounds::FileError::Io(e)) => Err(Error::new(
            ErrorKind::StateFile,
            format!(
                "cannot read state file '{}'; check its permissions",
                path.display()
            ),
        )
        .with_source(e)),
        Err(e) => Err(Error::new(
            ErrorKind::StateFile,
            format!("cannot read state file '{}': {e}", path.display()),
        )),
    }
}

/// Creates `dir` and any missing parents with mode 0700 (whatever the umask).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The directory of `path` (`.` for a bare file name).
fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// How the state file's temp files and its lock file are opened: mode 0600 (only the owner
/// reads or writes them), never through a symlink (`O_NOFOLLOW`), and not inherited by a program
/// a child execs (`O_CLOEXEC`). The caller adds the access and creation it needs.
fn private_file() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    options
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    options
}

/// The temporary file of one write: removed when dropped unless it was renamed into place.
struct TempFile {
    path: PathBuf,
    renamed: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Writes `ceiling_ms` to `path` durably: temp file, fsync, rename, fsync of the directory.
///
/// The temp file is `.<name>.tmp.<pid>.<random>` in the same directory, created exclusively
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600): a file or link planted under any name is never
/// followed or overwritten. It is removed on every failure.
pub fn write_state(path: &Path, ceiling_ms: i64) -> Result<()> {
    let fail = |what: &str, e: std::io::Error| {
        Error::new(
            ErrorKind::StateFile,
            format!("cannot {what} for state file '{}'", path.display()),
        )
        .with_source(e)
    };
    let dir = dir_of(path);
    create_private_dir(&dir).map_err(|e| fail("create the directory", e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp_path = dir.join(format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let mut f = private_file()
        .write(true)
        .create_new(true)
        .open(&tmp_path)
        .map_err(|e| fail("create the temp file", e))?;
    let mut tmp = TempFile {
        path: tmp_path,
        renamed: false,
    };
    f.write_all(encode_state(ceiling_ms).as_bytes())
        .map_err(|e| fail("write the temp file", e))?;
    f.sync_all().map_err(|e| fail("fsync the temp file", e))?;
    drop(f);
    std::fs::rename(&tmp.path, path).map_err(|e| fail("rename the temp file", e))?;
    tmp.renamed = true;
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail("fsync the directory", e))?;
    Ok(())
}

/// `cosid migrate --state-file`: raises the floor a static slot restarts from to at least
/// `not_before` and returns it. Takes the state file's lock first, so it is refused while a
/// runtime uses the file (the runtime's next write would undo it).
pub fn raise_not_before(path: &Path, not_before: i64) -> Result<i64> {
    let _lock = lock_state_file(path)?;
    let current = read_state(path)?;
    let next = current.unwrap_or(i64::MIN).max(not_before);
    if Some(next) != current {
        write_state(path, next)?;
    }
    Ok(next)
}

/// The lock file beside a state file: `<state-file>.lock`. Never renamed or removed, so every
/// runtime of the file locks the same inode.
pub fn lock_path(state: &Path) -> PathBuf {
    let mut name = state.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    state.with_file_name(name)
}

/// Takes the exclusive lock of a state file for the runtime's life (`flock`, released when the
/// returned file is closed, or by the kernel when the process ends). A second runtime on the
/// same state file, in this process or another, is refused naming the file and the holder's pid.
/// A held lock on a state file's lock file. Dropping it unlocks explicitly before closing: a
/// child process forked by another thread between its `fork` and its `exec` holds a copy of the
/// descriptor (the lock belongs to the open file, not to the descriptor), and closing ours alone
/// would leave the file locked until that child execs or exits.
#[derive(Debug)]
struct StateLock(std::fs::File);

impl Drop for StateLock {
    fn drop(&mut self) {
        // SAFETY: flock on a file descriptor we own; no memory is passed.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

fn lock_state_file(state: &Path) -> Result<StateLock> {
    let lock = lock_path(state);
    let fail = |what: &str, e: std::io::Error| {
        Error::new(
            ErrorKind::StateFile,
            format!(
                "cannot {what} '{}' of state file '{}'",
                lock.display(),
                state.display()
            ),
        )
        .with_source(e)
    };
    create_private_dir(&dir_of(state)).map_err(|e| fail("create the directory of the lock", e))?;
    let mut file = private_file()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
        .map_err(|e| fail("open the lock file", e))?;
    // SAFETY: flock on a file descriptor we own; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(fail("lock the lock file", e));
        }
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut file, &mut text);
        let holder = match text.trim().parse::<u32>() {
            Ok(pid) if pid == std::process::id() => {
                format!("another runtime of this process (pid {pid})")
            }
            Ok(pid) => format!("process {pid}"),
            Err(_) => "another process".to_string(),
        };
        return Err(Error::new(
            ErrorKind::StateFile,
            format!(
                "state file '{}' is in use by {holder}, which holds its lock '{}'; two runtimes \
                 on one static slot would issue the same ids: give each process its own slot \
                 and state file, or stop the other one first",
                state.display(),
                lock.display()
            ),
        ));
    }
    // Ours now: record who holds it, for the message above.
    file.set_len(0)
        .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .map_err(|e| fail("write the lock file", e))?;
    Ok(StateLock(file))
}

#[derive(Debug)]
struct State {
    ceiling: i64,
    failures: u32,
    closed: bool,
    /// The state file's lock, held until release.
    lock: Option<StateLock>,
}

/// A static slot's window keeper. Thread-safe.
#[derive(Debug)]
pub struct StaticSlot {
    config: StaticConfig,
    window: Arc<Window>,
    clock: SharedClock,
    /// The writers' turn: `tick` and `release` hold it across their state-file write, so two
    /// writes never race and a release is the last. Nothing that issues ids or reads the lease
    /// takes it (they read the window), and listeners run after it is dropped.
    state: Mutex<State>,
    events: Arc<EventBus>,
    counters: Arc<Counters>,
}

/// `ahead` in whole milliseconds, at most `i64::MAX` (a config allows at most a year).
fn ahead_ms(config: &StaticConfig) -> i64 {
    i64::try_from(config.ahead.as_millis()).unwrap_or(i64::MAX)
}

/// The first ceiling, `ahead` above the later of `floor` and `now`; an error naming where the
/// floor came from when that lies past the last millisecond an `i64` counts (a damaged state
/// file, or one written by a clock far in the future), never a ceiling that wrapped below it.
fn first_ceiling(config: &StaticConfig, floor: i64, now: i64) -> Result<i64> {
    if let Some(ceiling) = now.max(floor).checked_add(ahead_ms(config)) {
        return Ok(ceiling);
    }
    let from = match &config.state_file {
        Some(p) => format!("state file '{}'", p.display()),
        None => "not-before and the clock".to_string(),
    };
    Err(Error::new(
        ErrorKind::StateFile,
        format!(
            "static slot {}: the floor {floor} ms (from the {from}) or the clock {now} ms plus \
             ahead {} ms is past the last millisecond cosid counts to; the file is damaged or \
             was written by a clock far in the future: check the host's clock, and replace the \
             file only with a floor no id of this slot was issued above",
            config.slot,
            config.ahead.as_millis()
        ),
    ))
}

impl StaticSlot {
    /// Reads the state file, computes the floor, writes the first ceiling durably, binds the
    /// window.
    pub(crate) fn start(
        config: StaticConfig,
        window: Arc<Window>,
        clock: SharedClock,
        events: Arc<EventBus>,
        counters: Arc<Counters>,
    ) -> Result<StaticSlot> {
        let lock = config
            .state_file
            .as_deref()
            .map(lock_state_file)
            .transpose()?;
        let now = clock.now_ms();
        let from_file = match &config.state_file {
            Some(p) => read_state(p)?,
            None => None,
        };
        let floor = match (from_file, config.not_before_ms) {
            (Some(c), nb) => c.max(nb.unwrap_or(i64::MIN)),
            (None, Some(nb)) => nb,
            (None, None) => {
                match &config.state_file {
                    Some(p) => eprintln!(
                        "cosid: warning: state file '{}' does not exist and no not-before is set; \
                         starting at floor = now ({})",
                        p.display(),
                        crate::time::format_rfc3339_ms(now)
                    ),
                    None => eprintln!(
                        "cosid: warning: static slot {} has no state-file: a clock set back across \
                         a restart can repeat ids; set machine.static.state-file in production",
                        config.slot
                    ),
                }
                now
            }
        };
        let ceiling = first_ceiling(&config, floor, now)?;
        if let Some(p) = &config.state_file {
            write_state(p, ceiling)?;
        }
        window.rebind(config.slot, floor, ceiling);
        Counters::bump(&counters.acquisitions);
        events.emit(Event::SlotAcquired {
            slot: config.slot,
            fence: 0,
            floor_ms: floor,
            ceiling_ms: ceiling,
        });
        Ok(StaticSlot {
            config,
            window,
            clock,
            state: Mutex::new(State {
                ceiling,
                failures: 0,
                closed: false,
                lock,
            }),
            events,
            counters,
        })
    }

    /// Writes the next ceiling when less than `ahead/2` remains. Returns how long until the
    /// next check is due.
    pub fn tick(&self) -> Duration {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.closed {
            return Duration::from_secs(3600);
        }
        let ahead = ahead_ms(&self.config);
        let now = self.clock.now_ms();
        let remaining = st.ceiling.saturating_sub(now);
        if remaining >= ahead / 2 {
            return Duration::from_millis((remaining - ahead / 2).max(1) as u64);
        }
        let next = st.ceiling.max(now.saturating_add(ahead));
        let written = match &self.config.state_file {
            Some(p) => write_state(p, next),
            None => Ok(()),
        };
        match written {
            Ok(()) => {
                st.ceiling = next;
                st.failures = 0;
                self.window.extend(next);
                Counters::bump(&self.counters.renewals);
                Duration::from_millis((ahead / 2).max(1) as u64)
            }
            Err(e) => {
                st.failures += 1;
                Counters::bump(&self.counters.renewal_failures);
                let (attempt, wait) = (st.failures, 100u64 << st.failures.min(4));
                // Listeners run with no lock of ours held: they may call back into the runtime.
                drop(st);
                self.events.emit(Event::RenewalFailed {
                    slot: self.config.slot,
                    attempt,
                    error: e.to_string(),
                });
                Duration::from_millis(wait)
            }
        }
    }

    /// Closes the window and writes the exact last issued timestamp (all generators are
    /// closed), so a restart starts right after it.
    pub(crate) fn release(&self, last_issued: Option<i64>) -> Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.closed {
            return Ok(());
        }
        st.closed = true;
        self.window.set_status(WindowStatus::Closed);
        let floor = self.window.read().floor;
        let next_floor = crate::lease::rules::handed_over_floor(floor, st.ceiling, last_issued);
        let written = match &self.config.state_file {
            Some(p) => write_state(p, next_floor),
            None => Ok(()),
        };
        // This runtime writes no more: another may take the file now (if the last write
        // failed, the file keeps a higher ceiling, which is as safe).
        st.lock = None;
        drop(st);
        written?;
        self.events.emit(Event::SlotReleased {
            slot: self.config.slot,
            next_floor_ms: next_floor,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_file_that_cannot_be_read_is_an_error_not_a_missing_file() {
        // Only a file that does not exist may start from not-before (or now); one that exists
        // and cannot be read (here: a directory) must stop the start, not be ignored.
        let dir = tempfile::tempdir().unwrap();
        let e = read_state(dir.path()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::StateFile);
        assert!(e.message().contains("cannot read"), "{e}");
        assert_eq!(read_state(&dir.path().join("missing")).unwrap(), None);
    }

    /// A static slot over `state` (1 s ahead) at `now`, or its start-up error.
    fn start_at(state: &Path, now: i64, ahead: Duration) -> Result<StaticSlot> {
        StaticSlot::start(
            StaticConfig {
                slot: 1,
                state_file: Some(state.to_path_buf()),
                ahead,
                not_before_ms: None,
            },
            Arc::new(Window::new()),
            crate::clock::ManualClock::shared(now),
            Arc::default(),
            Arc::default(),
        )
    }

    #[test]
    fn a_state_file_at_the_end_of_time_is_an_error_naming_it_not_an_overflow() {
        // A damaged file (its checksum matches: it was written so) or one from a clock far in
        // the future: adding `ahead` to it cannot be done, and the start says why.
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        for held in [i64::MAX, i64::MAX - 500] {
            write_state(&state, held).unwrap();
            let e = start_at(&state, 1_800_000_000_000, Duration::from_secs(1))
                .map(drop)
                .expect_err("no ceiling lies above the end of time");
            assert_eq!(e.kind(), ErrorKind::StateFile, "{e}");
            assert!(
                e.message().contains(&state.display().to_string())
                    && e.message().contains(&held.to_string()),
                "{e}"
            );
            assert_eq!(read_state(&state).unwrap(), Some(held), "the file is kept");
        }
        // A clock at the end of time, with a sane file: the same, never a wrapped ceiling.
        write_state(&state, 5).unwrap();
        let e = start_at(&state, i64::MAX - 10, Duration::from_secs(1))
            .map(drop)
            .expect_err("no ceiling lies above the end of time");
        assert_eq!(e.kind(), ErrorKind::StateFile, "{e}");
        // An `ahead` no config accepts, given by a Rust caller: no wrap to a negative ceiling.
        let e = start_at(&state, 1_800_000_000_000, Duration::from_secs(u64::MAX))
            .map(drop)
            .expect_err("an ahead beyond i64 milliseconds");
        assert_eq!(e.kind(), ErrorKind::StateFile, "{e}");
    }

    #[test]
    fn tick_writes_the_next_ceiling_half_way_and_backs_off_when_it_cannot() {
        use crate::clock::ManualClock;
        const T0: i64 = 1_800_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let clock = ManualClock::shared(T0);
        let window = Arc::new(Window::new());
        let events: Arc<EventBus> = Arc::default();
        let seen: Arc<Mutex<Vec<Event>>> = Arc::default();
        events.subscribe(Arc::new({
            let seen = seen.clone();
            move |e: &Event| seen.lock().unwrap().push(e.clone())
        }));
        let counters: Arc<Counters> = Arc::default();
        let config = StaticConfig {
            slot: 1,
            state_file: Some(state.clone()),
            ahead: Duration::from_secs(10),
            not_before_ms: Some(T0 - 1),
        };
        let s = StaticSlot::start(
            config,
            window.clone(),
            clock.clone(),
            events,
            counters.clone(),
        )
        .unwrap();
        assert_eq!(window.read().ceiling, T0 + 10_000);
        // 10 s ahead: nothing to write until half of it is left, 5 s from now.
        assert_eq!(s.tick(), Duration::from_secs(5));
        clock.advance(Duration::from_millis(4_000));
        assert_eq!(s.tick(), Duration::from_secs(1));
        assert_eq!(
            read_state(&state).unwrap(),
            Some(T0 + 10_000),
            "not written yet"
        );
        // Less than half left: the next ceiling is now + ahead, written, then bound.
        clock.advance(Duration::from_millis(1_001));
        assert_eq!(s.tick(), Duration::from_secs(5));
        let next = T0 + 5_001 + 10_000;
        assert_eq!(read_state(&state).unwrap(), Some(next));
        assert_eq!(window.read().ceiling, next);
        assert_eq!(
            counters.renewals.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        // A file stands where the state file's directory was: every attempt fails, backing off
        // 200, 400, 800, 1600, 1600 ms, and the window keeps its ceiling.
        let dir_path = dir.path().to_path_buf();
        std::fs::remove_dir_all(&dir_path).unwrap();
        std::fs::write(&dir_path, "not a directory").unwrap();
        clock.advance(Duration::from_millis(5_001));
        let waits: Vec<u64> = (0..5).map(|_| s.tick().as_millis() as u64).collect();
        assert_eq!(waits, [200, 400, 800, 1600, 1600]);
        assert_eq!(window.read().ceiling, next);
        let attempts: Vec<u32> = seen
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Event::RenewalFailed { attempt, .. } => Some(*attempt),
                _ => None,
            })
            .collect();
        assert_eq!(attempts, [1, 2, 3, 4, 5]);
        std::fs::remove_file(&dir_path).unwrap();
    }

    #[test]
    fn a_symlink_in_place_of_the_lock_file_is_refused_and_its_target_left_alone() {
        // Taking the lock truncates the lock file and writes our pid into it: through a planted
        // symlink that would overwrite whatever it points at.
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let victim = planted_link(&lock_path(&state));
        let e = lock_state_file(&state).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::StateFile, "{e}");
        assert_untouched(&victim);
    }

    /// A file `victim` next to `link` holding [`PRECIOUS`], and a symlink to it planted at `link`;
    /// returns the victim's path.
    fn planted_link(link: &Path) -> PathBuf {
        let victim = link.with_file_name("victim");
        std::fs::write(&victim, PRECIOUS).unwrap();
        std::os::unix::fs::symlink(&victim, link).unwrap();
        victim
    }

    const PRECIOUS: &str = "precious\n";

    fn assert_untouched(victim: &Path) {
        assert_eq!(std::fs::read_to_string(victim).unwrap(), PRECIOUS);
    }

    #[test]
    fn the_directory_of_a_bare_file_name_is_the_current_one() {
        assert_eq!(dir_of(Path::new("state")), PathBuf::from("."));
        assert_eq!(
            dir_of(Path::new("/var/lib/cosid/state")),
            PathBuf::from("/var/lib/cosid")
        );
        assert_eq!(dir_of(Path::new("rel/state")), PathBuf::from("rel"));
    }

    #[test]
    fn state_round_trips_and_corruption_is_refused() {
        let p = Path::new("/x/state");
        assert_eq!(
            decode_state(&encode_state(1_800_000_000_123), p).unwrap(),
            1_800_000_000_123
        );
        let good = encode_state(42);
        let cases = [
            String::new(),
            good[..good.len() - 1].to_string(),
            good[..10].to_string(),
            good.replace("42", "43"),
            good.replace("cosid-state 1", "cosid-state 2"),
            format!("{good}{good}"),
            "\n".into(),
        ];
        for c in cases {
            let e = decode_state(&c, p).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::StateFile, "{c:?}");
            assert!(e.message().contains("/x/state"), "{e}");
        }
    }

    #[test]
    fn a_link_planted_at_the_temp_name_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state");
        // The name every earlier version used for its temp file.
        let victim = planted_link(&p.with_file_name(format!(".state.tmp.{}", std::process::id())));
        write_state(&p, 5).unwrap();
        assert_untouched(&victim);
        assert_eq!(read_state(&p).unwrap(), Some(5));
    }

    #[test]
    fn a_failed_write_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory where the state file should be: the rename fails.
        let p = dir.path().join("state");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("x"), "x").unwrap();
        let e = write_state(&p, 5).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::StateFile);
        assert!(e.to_string().contains("rename the temp file"), "{e}");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["state"], "the temp file is removed");
    }

    #[test]
    fn write_then_read_is_durable_and_atomic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/state");
        assert_eq!(read_state(&p).unwrap(), None);
        write_state(&p, 77).unwrap();
        write_state(&p, 78).unwrap();
        assert_eq!(read_state(&p).unwrap(), Some(78));
        let leftovers: Vec<_> = std::fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temp file left behind");
    }
}
