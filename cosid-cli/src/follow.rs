//! `cosid next --follow`: print ids until SIGTERM or SIGINT, then stop in order.
//!
//! The signal handler only sets a flag. The loop checks it between ids, so the last id printed
//! is flushed before the runtime closes and releases the slot with that id's timestamp.

use crate::{render, OutFormat};
use cosid_core::{ErrorKind, Runtime};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
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

pub(crate) fn run(rt: &Runtime, format: OutFormat, rate: Option<f64>) -> cosid_core::Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    let interval = rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let start = Instant::now();
    let mut issued: u64 = 0;
    let mut last_flush = Instant::now();
    let mut last_error: Option<ErrorKind> = None;
    while !STOP.load(Ordering::SeqCst) {
        if let Some(iv) = interval {
            let due = start + iv.mul_f64(issued as f64);
            let now = Instant::now();
            if due > now {
                let _ = out.flush();
                std::thread::sleep((due - now).min(Duration::from_millis(50)));
                continue;
            }
        }
        match rt.next() {
            Ok(id) => {
                last_error = None;
                issued += 1;
                if writeln!(out, "{}", render(rt.layout(), format, id)?).is_err() {
                    return Ok(()); // stdout closed: stop like a signal would.
                }
                if interval.is_some() || last_flush.elapsed() >= Duration::from_millis(20) {
                    if out.flush().is_err() {
                        return Ok(());
                    }
                    last_flush = Instant::now();
                }
            }
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
                    eprintln!("cosid: waiting: {e}");
                    last_error = Some(e.kind());
                }
                std::thread::sleep(Duration::from_millis(10));
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
