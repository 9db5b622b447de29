//! `cosid next --follow`: print ids until SIGTERM or SIGINT, then stop in order. Also the
//! signal handling of `cosid next -n COUNT`, which stops early at a signal, releases its slot and
//! exits with 128 + the signal's number.
//!
//! The signal handler only sets a flag. The loop checks it between ids, so the last id printed
//! is flushed before the runtime closes and releases the slot with that id's timestamp.
//!
//! Every wait answers the flag within a fraction of a second: the runtime is built with
//! [`StopClock`], whose sleeps end when the flag is set and whose monotonic time then jumps past
//! every deadline, so the start-up acquisition (an exhausted namespace, an unreachable store) and
//! a waiting `next()` give up at once instead of at their timeouts. Nothing is held afterwards:
//! a start-up that gave up holds no slot, and a running loop closes the runtime, which releases
//! its slot.

use crate::{render, OutFormat};
use cosid_core::{Clock, ErrorKind, Runtime, SystemClock};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);
/// The signal that set `STOP`.
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The lowest and highest `--rate`, ids per second.
pub(crate) const MIN_RATE: f64 = 0.001;
pub(crate) const MAX_RATE: f64 = 1e9;

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

pub(crate) fn install_signal_handlers() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Whether SIGTERM or SIGINT arrived.
pub(crate) fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// The exit status of a command cut short by the signal: 128 + its number (130 for SIGINT).
pub(crate) fn signal_exit_status() -> u8 {
    (128 + SIGNAL.load(Ordering::SeqCst)).clamp(129, 255) as u8
}

/// How far monotonic time jumps once a signal arrived: past any acquire-timeout or max-wait.
const PAST_EVERY_DEADLINE: Duration = Duration::from_secs(100 * 365 * 86_400);

/// The system clock, with waits that end at SIGTERM or SIGINT. Wall time is the system's
/// (uniqueness never depends on a clock); only waiting and its deadlines change.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StopClock;

impl Clock for StopClock {
    #[inline]
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms()
    }

    fn monotonic(&self) -> Duration {
        let t = SystemClock.monotonic();
        if stopped() {
            t + PAST_EVERY_DEADLINE
        } else {
            t
        }
    }

    fn sleep(&self, d: Duration) {
        if d < Duration::from_millis(2) {
            return SystemClock.sleep(d);
        }
        let end = Instant::now() + d;
        while !stopped() {
            let now = Instant::now();
            if now >= end {
                break;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(20)));
        }
    }
}

/// `--rate`: at most one id per interval. The next id may go one interval after the last one
/// **or after now, whichever is later**, so a pause (a store outage, a stopped process) is never
/// followed by a burst to catch up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pacer {
    interval: Duration,
    next: Option<Instant>,
}

impl Pacer {
    /// A pacer of `rate` ids per second (`MIN_RATE..=MAX_RATE`, checked by the caller).
    pub(crate) fn new(rate: f64) -> Pacer {
        Pacer {
            interval: Duration::from_secs_f64(1.0 / rate),
            next: None,
        }
    }

    /// How long to wait at `now` before the next id may go (zero: now).
    pub(crate) fn wait(&self, now: Instant) -> Duration {
        self.next
            .map_or(Duration::ZERO, |n| n.saturating_duration_since(now))
    }

    /// Records an id issued at `now`.
    pub(crate) fn issued(&mut self, now: Instant) {
        let base = self.next.map_or(now, |n| n.max(now));
        self.next = Some(base + self.interval);
    }
}

pub(crate) fn run(rt: &Runtime, format: &OutFormat, rate: Option<f64>) -> cosid_core::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    let mut pacer = rate.map(Pacer::new);
    let mut last_flush = Instant::now();
    let mut last_error: Option<ErrorKind> = None;
    while !stopped() {
        if let Some(p) = &pacer {
            let wait = p.wait(Instant::now());
            if !wait.is_zero() {
                let _ = out.flush();
                std::thread::sleep(wait.min(Duration::from_millis(50)));
                continue;
            }
        }
        match rt.next() {
            Ok(id) => {
                last_error = None;
                if let Some(p) = &mut pacer {
                    p.issued(Instant::now());
                }
                if writeln!(out, "{}", render(rt.layout(), format, id)?).is_err() {
                    return Ok(()); // stdout closed: stop like a signal would.
                }
                if pacer.is_some() || last_flush.elapsed() >= Duration::from_millis(20) {
                    if out.flush().is_err() {
                        return Ok(());
                    }
                    last_flush = Instant::now();
                }
            }
            // A wait cut short by a signal: stop.
            Err(_) if stopped() => break,
            // The keeper is working on it (renewal, rebinding, clock): report once, retry.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::SlotLost
                        | ErrorKind::WindowClosed
                        | ErrorKind::ClockBehind
                        | ErrorKind::Timeout
                ) =>
            {
                let _ = out.flush();
                if last_error != Some(e.kind()) {
                    eprintln!("cosid: waiting: {}", crate::one_line(&e.to_string()));
                    last_error = Some(e.kind());
                }
                StopClock.sleep(Duration::from_millis(10));
            }
            Err(e) => {
                let _ = out.flush();
                return Err(e);
            }
        }
    }
    let _ = out.flush();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_not_followed_by_a_burst() {
        let mut p = Pacer::new(10.0);
        let t0 = Instant::now();
        assert_eq!(p.wait(t0), Duration::ZERO);
        p.issued(t0);
        assert_eq!(p.wait(t0), Duration::from_millis(100));
        // Ten seconds pass without an id (a store outage): one id goes at once, the next one
        // a whole interval later, not a hundred to catch up.
        let late = t0 + Duration::from_secs(10);
        assert_eq!(p.wait(late), Duration::ZERO);
        p.issued(late);
        assert_eq!(p.wait(late), Duration::from_millis(100));
        assert_eq!(
            p.wait(late + Duration::from_millis(40)),
            Duration::from_millis(60)
        );
    }

    #[test]
    fn ids_on_time_keep_the_exact_rate() {
        let mut p = Pacer::new(4.0);
        let t0 = Instant::now();
        p.issued(t0);
        // An id exactly on time: the next is one interval later, the schedule does not drift.
        p.issued(t0 + Duration::from_millis(250));
        assert_eq!(
            p.wait(t0 + Duration::from_millis(250)),
            Duration::from_millis(250)
        );
    }

    #[test]
    fn the_extreme_rates_make_a_pacer() {
        for rate in [MIN_RATE, 1.0, MAX_RATE] {
            let p = Pacer::new(rate);
            assert!(p.interval > Duration::ZERO, "{rate}");
        }
    }
}
