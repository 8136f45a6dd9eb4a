//! The error log: the one logger of weir's own lines (listening, reloads, failures), each
//! with its time (RFC 3339, UTC, milliseconds), level and target (the module that wrote it),
//! as text or JSON, on standard error, standard output or a file (`server.log`), the file
//! reopened on `SIGUSR1`. Writing one never fails or stops the caller: a closed pipe (`weir
//! run | head -1`, a log shipper that restarted) or a full disk loses the line, counted in
//! `weir_log_lines_lost_total`.

use super::accesslog::{append_to, rfc3339};
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;
pub use weir_config::LogLevel;
use weir_config::{LogTarget, ServerLog, ServerLogFormat};

/// Lines that could not be written since the process started.
static LOST: AtomicU64 = AtomicU64::new(0);
/// The least severe level written, as its number: the one check a disabled line costs.
static MAX_LEVEL: AtomicU8 = AtomicU8::new(LogLevel::Info as u8);
/// `weir run --log-level`: wins over `server.log.level`, at start and on every reload.
static LEVEL_OVERRIDE: AtomicU8 = AtomicU8::new(0);
/// Whether lines are JSON (else text).
static JSON: AtomicU8 = AtomicU8::new(0);
static SINK: Mutex<Sink> = Mutex::new(Sink {
    out: Out::Stderr,
    path: LogTarget::Stderr,
});

struct Sink {
    out: Out,
    /// Where `out` was opened, for a reopen.
    path: LogTarget,
}

enum Out {
    Stderr,
    Stdout,
    File(File),
}

impl Out {
    fn open(path: &LogTarget) -> Result<Out, String> {
        Ok(match path {
            LogTarget::Stderr => Out::Stderr,
            LogTarget::Stdout => Out::Stdout,
            LogTarget::File(file) => Out::File(append_to(file, "the log")?),
        })
    }

    /// One `write` per line (the file is in append mode), so lines of several threads do not
    /// interleave.
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Out::Stderr => std::io::stderr().lock().write_all(line),
            Out::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(line).and_then(|()| out.flush())
            }
            Out::File(file) => file.write_all(line),
        }
    }
}

/// `server.log` opened, ready to replace the one in use (a reload opens it before it commits,
/// so a log that cannot be opened refuses the reload).
pub struct Prepared {
    settings: ServerLog,
    out: Out,
}

pub fn prepare(settings: &ServerLog) -> Result<Prepared, String> {
    Ok(Prepared {
        settings: settings.clone(),
        out: Out::open(&settings.path)?,
    })
}

/// Puts a prepared log in service: its level (unless `--log-level` set one), format and output.
pub fn install(prepared: Prepared) {
    let level = match LEVEL_OVERRIDE.load(Ordering::Relaxed) {
        0 => prepared.settings.level as u8,
        forced => forced,
    };
    MAX_LEVEL.store(level, Ordering::Relaxed);
    let json = prepared.settings.format == ServerLogFormat::Json;
    JSON.store(u8::from(json), Ordering::Relaxed);
    let mut sink = SINK.lock().unwrap_or_else(|e| e.into_inner());
    *sink = Sink {
        out: prepared.out,
        path: prepared.settings.path,
    };
}

/// `weir run --log-level`: this level from now on, whatever `server.log.level` says.
pub fn override_level(level: LogLevel) {
    LEVEL_OVERRIDE.store(level as u8, Ordering::Relaxed);
    MAX_LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Opens the log file again by its path (logrotate moved the old one away); false when the
/// log is not a file.
pub fn reopen() -> Result<bool, String> {
    let mut sink = SINK.lock().unwrap_or_else(|e| e.into_inner());
    if !matches!(sink.path, LogTarget::File(_)) {
        return Ok(false);
    }
    sink.out = Out::open(&sink.path)?;
    Ok(true)
}

/// Whether a line of `level` is written: the macros ask before they evaluate the message.
#[inline]
pub fn enabled(level: LogLevel) -> bool {
    level as u8 <= MAX_LEVEL.load(Ordering::Relaxed)
}

/// Writes one line (a newline is added). `eprintln!` panics when the write fails, and the
/// release build aborts on a panic: that took the gateway down with its log pipe.
pub fn write(level: LogLevel, target: &str, args: std::fmt::Arguments) {
    let time = rfc3339(SystemTime::now());
    let mut line = Vec::with_capacity(160);
    let formatted = if JSON.load(Ordering::Relaxed) == 1 {
        // Time, level and target need no escaping; written in this order, the time first.
        let _ = write!(
            line,
            "{{\"time\":\"{time}\",\"level\":\"{}\",\"target\":\"{target}\",\"message\":",
            level.name()
        );
        let written = serde_json::to_writer(&mut line, &args.to_string()).map_err(|_| ());
        line.push(b'}');
        written
    } else {
        write!(line, "{time} {:<5} {target}: {args}", label(level)).map_err(|_| ())
    };
    line.push(b'\n');
    let written = formatted.is_ok() && {
        let mut sink = SINK.lock().unwrap_or_else(|e| e.into_inner());
        sink.out.write_line(&line).is_ok()
    };
    if !written {
        LOST.fetch_add(1, Ordering::Relaxed);
    }
}

/// The text format's level, upper case as most servers write it.
fn label(level: LogLevel) -> &'static str {
    match level {
        LogLevel::Error => "ERROR",
        LogLevel::Warn => "WARN",
        LogLevel::Info => "INFO",
        LogLevel::Debug => "DEBUG",
    }
}

/// Lines lost so far.
pub fn lost() -> u64 {
    LOST.load(Ordering::Relaxed)
}

/// `log_at!(LogLevel::Warn, "...", args)`: one line of that level, its target the calling
/// module. The message is formatted only when the level is written.
#[macro_export]
macro_rules! log_at {
    ($level:expr, $($arg:tt)*) => {
        if $crate::errorlog::enabled($level) {
            $crate::errorlog::write($level, module_path!(), format_args!($($arg)*))
        }
    };
}

/// Something failed that an operator should look at (a 502, a refused reload).
#[macro_export]
macro_rules! log_error {
    ($($arg:tt)*) => { $crate::log_at!($crate::errorlog::LogLevel::Error, $($arg)*) };
}

/// Something degraded that weir works around (a server down, a breaker open).
#[macro_export]
macro_rules! log_warn {
    ($($arg:tt)*) => { $crate::log_at!($crate::errorlog::LogLevel::Warn, $($arg)*) };
}

/// What weir does (listening, reloaded, stopping).
#[macro_export]
macro_rules! log_info {
    ($($arg:tt)*) => { $crate::log_at!($crate::errorlog::LogLevel::Info, $($arg)*) };
}

/// Detail for finding a fault.
#[macro_export]
macro_rules! log_debug {
    ($($arg:tt)*) => { $crate::log_at!($crate::errorlog::LogLevel::Debug, $($arg)*) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Counts how often it is formatted.
    struct Counted<'a>(&'a Cell<u32>);

    impl std::fmt::Display for Counted<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.set(self.0.get() + 1);
            f.write_str("counted")
        }
    }

    #[test]
    fn a_disabled_level_neither_formats_nor_evaluates() {
        let formatted = Cell::new(0);
        let evaluated = Cell::new(0);
        let argument = || {
            evaluated.set(evaluated.get() + 1);
            Counted(&formatted)
        };
        // The default level is info: debug is off.
        assert!(!enabled(LogLevel::Debug));
        assert!(enabled(LogLevel::Info) && enabled(LogLevel::Error));
        crate::log_debug!("test: {}", argument());
        assert_eq!((evaluated.get(), formatted.get()), (0, 0));
        crate::log_error!("test: {}", argument());
        assert_eq!((evaluated.get(), formatted.get()), (1, 1));
    }

    #[test]
    fn levels_are_ordered_by_severity() {
        assert!(LogLevel::Error < LogLevel::Warn);
        assert!(LogLevel::Info < LogLevel::Debug);
        assert_eq!(label(LogLevel::Warn), "WARN");
    }
}
