//! Clocks: the wall clock ids are stamped with, and a manual clock for tests and simulations.
//!
//! Uniqueness never depends on a clock being right (the window check does that); clocks only
//! decide when ids can be issued. The generator reads [`Clock::now_ms`] once per id, measures its
//! bounded waits with [`Clock::monotonic`], and waits with [`Clock::sleep`], so a
//! [`ManualClock`] makes every wait deterministic: its `sleep` moves virtual time instead of
//! blocking.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of wall time and of waiting. Thread-safe.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Wall time in ms since the Unix epoch. May jump in either direction.
    fn now_ms(&self) -> i64;
    /// Time elapsed since some fixed point; never goes back. Used only to bound waits.
    fn monotonic(&self) -> Duration;
    /// Blocks (or, for a manual clock, moves virtual time) for about `d`. A zero `d` yields.
    fn sleep(&self, d: Duration);
}

/// A shared, dynamically chosen clock.
pub type SharedClock = Arc<dyn Clock>;

/// Wall time from the operating system (`CLOCK_REALTIME`), in ms since the Unix epoch.
#[inline]
pub fn system_now_ms() -> i64 {
    // clock_gettime directly: a quarter of the instructions of SystemTime -> Duration -> ms,
    // and this is on every id's path. Times before 1970 round down (toward the past).
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; CLOCK_REALTIME always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    if rc != 0 {
        return match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_millis() as i64,
            Err(e) => -(e.duration().as_millis() as i64),
        };
    }
    // time_t and c_long are not i64 on every target.
    #[allow(clippy::unnecessary_cast)]
    let ms = ts.tv_sec as i64 * 1000 + ts.tv_nsec as i64 / 1_000_000;
    ms
}

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

fn process_start() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

impl Clock for SystemClock {
    #[inline]
    fn now_ms(&self) -> i64 {
        system_now_ms()
    }

    fn monotonic(&self) -> Duration {
        process_start().elapsed()
    }

    fn sleep(&self, d: Duration) {
        // Waits for the next millisecond are far shorter than the scheduler's sleep granularity;
        // yielding keeps a saturated generator at its layout's full rate.
        if d < Duration::from_millis(2) {
            let end = Instant::now() + d;
            loop {
                std::thread::yield_now();
                if Instant::now() >= end {
                    break;
                }
            }
        } else {
            std::thread::sleep(d);
        }
    }
}

/// A clock that moves only when told to: set, advanced, stepped back, jumped, frozen.
///
/// `sleep(d)` advances the monotonic time by `d` and, unless frozen, the wall time too, so code
/// that waits under a manual clock runs instantly and deterministically.
#[derive(Debug)]
pub struct ManualClock {
    wall_ms: AtomicI64,
    mono_ns: AtomicU64,
    frozen: AtomicBool,
}

impl ManualClock {
    /// A clock showing `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        ManualClock {
            wall_ms: AtomicI64::new(now_ms),
            mono_ns: AtomicU64::new(0),
            frozen: AtomicBool::new(false),
        }
    }

    /// A shared clock showing `now_ms`.
    pub fn shared(now_ms: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock::new(now_ms))
    }

    /// Sets the wall time (a jump, either way). Monotonic time does not move.
    pub fn set(&self, now_ms: i64) {
        self.wall_ms.store(now_ms, Ordering::SeqCst);
    }

    /// Moves both wall and monotonic time forward by `d` (wall time even when frozen).
    pub fn advance(&self, d: Duration) {
        self.mono_ns
            .fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
        self.wall_ms
            .fetch_add(d.as_millis() as i64, Ordering::SeqCst);
    }

    /// Moves wall time back by `d` (an NTP step back). Monotonic time does not move.
    pub fn step_back(&self, d: Duration) {
        self.wall_ms
            .fetch_sub(d.as_millis() as i64, Ordering::SeqCst);
    }

    /// Stops wall time from following `sleep`: a stuck clock.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Lets wall time follow `sleep` again.
    pub fn unfreeze(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.wall_ms.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.mono_ns.load(Ordering::SeqCst))
    }

    fn sleep(&self, d: Duration) {
        // A zero sleep still moves time: otherwise a waiter polling a manual clock would spin.
        let d = d.max(Duration::from_millis(1));
        self.mono_ns
            .fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
        if !self.frozen.load(Ordering::SeqCst) {
            self.wall_ms
                .fetch_add(d.as_millis() as i64, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.sleep(Duration::from_millis(5));
        assert_eq!(
            (c.now_ms(), c.monotonic()),
            (1_005, Duration::from_millis(5))
        );
        c.step_back(Duration::from_secs(3600));
        assert_eq!(c.now_ms(), 1_005 - 3_600_000);
        assert_eq!(c.monotonic(), Duration::from_millis(5));
        c.freeze();
        c.sleep(Duration::from_millis(10));
        assert_eq!(c.now_ms(), 1_005 - 3_600_000);
        assert_eq!(c.monotonic(), Duration::from_millis(15));
        c.unfreeze();
        c.set(42);
        c.advance(Duration::from_millis(8));
        assert_eq!(c.now_ms(), 50);
    }

    #[test]
    fn system_clock_is_near_system_time() {
        let a = SystemClock.now_ms();
        let b = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!((b - a).abs() < 1_000, "clock_gettime {a} vs SystemTime {b}");
        assert!(a > 1_700_000_000_000);
        let m1 = SystemClock.monotonic();
        SystemClock.sleep(Duration::from_millis(1));
        assert!(SystemClock.monotonic() > m1);
    }
}
