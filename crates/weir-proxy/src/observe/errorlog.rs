//! The error log: weir's own lines (listening, reloads, failures) on standard error. Writing
//! one never fails or stops the caller: a closed pipe (`weir run | head -1`, a log shipper
//! that restarted) or a full disk loses the line, counted in `weir_log_lines_lost_total`.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Lines that could not be written since the process started.
static LOST: AtomicU64 = AtomicU64::new(0);

/// Writes one line (a newline is added) in a single write, so lines of several threads do
/// not interleave. `eprintln!` panics when the write fails, and the release build aborts on
/// a panic: that took the gateway down with its log pipe.
pub fn write_line(args: std::fmt::Arguments) {
    let mut line = Vec::with_capacity(128);
    if line.write_fmt(args).is_err() {
        LOST.fetch_add(1, Ordering::Relaxed);
        return;
    }
    line.push(b'\n');
    if std::io::stderr().lock().write_all(&line).is_err() {
        LOST.fetch_add(1, Ordering::Relaxed);
    }
}

/// Lines lost so far.
pub fn lost() -> u64 {
    LOST.load(Ordering::Relaxed)
}

/// `log_line!("weir: ...", args)`: one line on the error log, as `eprintln!` but never
/// panicking.
#[macro_export]
macro_rules! log_line {
    ($($arg:tt)*) => {
        $crate::errorlog::write_line(format_args!($($arg)*))
    };
}
