//! The JSON access log: one line per request, written at the end of the exchange, only when
//! `server.access_log.enabled` is true (nothing on the hot path otherwise).

use std::fs::OpenOptions;
use std::io::{LineWriter, Write};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_config::LogTarget;

pub struct AccessLog {
    out: Mutex<Box<dyn Write + Send>>,
}

pub struct Entry<'a> {
    pub client: IpAddr,
    pub method: &'a str,
    pub host: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub bytes: u64,
    pub duration: Duration,
    pub router: &'a str,
    pub upstream: &'a str,
}

impl AccessLog {
    pub fn open(target: &LogTarget) -> Result<AccessLog, String> {
        let out: Box<dyn Write + Send> = match target {
            LogTarget::Stdout => Box::new(LineWriter::new(std::io::stdout())),
            LogTarget::Stderr => Box::new(std::io::stderr()),
            LogTarget::File(path) => Box::new(LineWriter::new(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("cannot open access log {}: {e}", path.display()))?,
            )),
        };
        Ok(AccessLog {
            out: Mutex::new(out),
        })
    }

    pub fn record(&self, e: &Entry) {
        let line = serde_json::json!({
            "time": rfc3339(SystemTime::now()),
            "client": e.client.to_string(),
            "method": e.method,
            "host": e.host,
            "path": e.path,
            "status": e.status,
            "bytes": e.bytes,
            "duration_ms": e.duration.as_secs_f64() * 1000.0,
            "router": e.router,
            "upstream": e.upstream,
        });
        if let Ok(mut out) = self.out.lock() {
            let _ = writeln!(out, "{line}");
        }
    }
}

/// UTC timestamp with milliseconds, e.g. `2026-11-22T01:58:23.120Z`.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_312_703_120);
        assert_eq!(rfc3339(t), "2026-11-22T01:58:23.120Z");
    }
}
