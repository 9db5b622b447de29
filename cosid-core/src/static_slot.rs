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
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| {
                Error::new(
                    ErrorKind::StateFile,
                    format!("state file '{}' is not text; it is corrupt", path.display()),
                )
            })?;
            decode_state(&text, path).map(Some)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::new(
            ErrorKind::StateFile,
            format!(
                "cannot read state file '{}'; check its permissions",
                path.display()
            ),
        )
        .with_source(e)),
    }
}

/// Writes `ceiling_ms` to `path` durably: temp file, fsync, rename, fsync of the directory.
pub fn write_state(path: &Path, ceiling_ms: i64) -> Result<()> {
    let fail = |what: &str, e: std::io::Error| {
        Error::new(
            ErrorKind::StateFile,
            format!("cannot {what} for state file '{}'", path.display()),
        )
        .with_source(e)
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| fail("create the directory", e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp).map_err(|e| fail("create the temp file", e))?;
    f.write_all(encode_state(ceiling_ms).as_bytes())
        .map_err(|e| fail("write the temp file", e))?;
    f.sync_all().map_err(|e| fail("fsync the temp file", e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| fail("rename the temp file", e))?;
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail("fsync the directory", e))?;
    Ok(())
}

#[derive(Debug)]
struct State {
    ceiling: i64,
    failures: u32,
    closed: bool,
}

/// A static slot's window keeper. Thread-safe.
#[derive(Debug)]
pub struct StaticSlot {
    config: StaticConfig,
    window: Arc<Window>,
    clock: SharedClock,
    state: Mutex<State>,
    events: Arc<EventBus>,
    counters: Arc<Counters>,
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
        let ceiling = now.max(floor) + config.ahead.as_millis() as i64;
        if let Some(p) = &config.state_file {
            write_state(p, ceiling)?;
        }
        window.rebind(config.slot, floor, ceiling);
        Counters::bump(&counters.acquisitions);
        events.emit(Event::SlotAcquired {
            slot: config.slot,
            fence: 0,
            floor,
            ceiling,
        });
        Ok(StaticSlot {
            config,
            window,
            clock,
            state: Mutex::new(State {
                ceiling,
                failures: 0,
                closed: false,
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
        let ahead = self.config.ahead.as_millis() as i64;
        let now = self.clock.now_ms();
        let remaining = st.ceiling - now;
        if remaining >= ahead / 2 {
            return Duration::from_millis((remaining - ahead / 2).max(1) as u64);
        }
        let next = st.ceiling.max(now + ahead);
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
                self.events.emit(Event::RenewalFailed {
                    slot: self.config.slot,
                    attempt: st.failures,
                    error: e.to_string(),
                });
                Duration::from_millis(100u64 << st.failures.min(4))
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
        let next_floor = floor.max(last_issued.unwrap_or(floor).min(st.ceiling));
        if let Some(p) = &self.config.state_file {
            write_state(p, next_floor)?;
        }
        self.events.emit(Event::SlotReleased {
            slot: self.config.slot,
            next_floor,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
