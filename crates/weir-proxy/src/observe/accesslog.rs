//! The access log: one line per request, JSON or nginx's `combined`, made at the end of the
//! exchange, only when `server.access_log.enabled` is true (nothing on the hot path otherwise).
//! Each worker gathers its lines in its own buffer and writes them in one `write` when it holds
//! `FLUSH_AT` bytes or at the worker's next tick (within 100 ms), so the file sees whole lines
//! and the workers share no lock per request. `sample` keeps a share of the lines (answers of
//! 500 and above always); `SIGUSR1` reopens the file after logrotate moved it.

use std::cell::RefCell;
use std::fs::OpenOptions;
use std::io::Write;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_config::{LogFormat, LogTarget};

/// A worker writes its buffered lines once they reach this size (else at its next tick).
const FLUSH_AT: usize = 32 * 1024;

pub struct AccessLog {
    out: Mutex<Box<dyn Write + Send>>,
    format: LogFormat,
    target: LogTarget,
    /// The share of requests logged, 0 to 1.
    sample: f64,
}

/// What the log keeps of a request, taken before the filters may rewrite it.
pub struct RequestLine {
    pub client: IpAddr,
    /// The entrypoint's name (`None`: a reload removed it).
    pub entrypoint: Option<String>,
    /// `server.request_id`'s id, when requests carry one.
    pub request_id: Option<String>,
    /// The TLS version and SNI, for a request that came over TLS.
    pub tls: Option<(&'static str, Option<String>)>,
    /// What the server answered, when one did (taken with the action's answer, before the
    /// response-head filters).
    pub upstream_status: Option<u16>,
    /// What the route's cache did (`hit`, `miss`, `stale`, `bypass`), on cached routes.
    pub cache: Option<&'static str>,
    /// When the action answered (for a proxied request, the upstream's response head).
    pub answered: Option<std::time::Instant>,
    pub method: String,
    pub host: String,
    /// The path and query as the client sent them.
    pub target: String,
    /// `HTTP/1.0`, `HTTP/1.1` or `HTTP/2.0` (as nginx logs it).
    pub version: &'static str,
    pub referer: Option<String>,
    pub user_agent: Option<String>,
    /// When the request has a trace: its id and weir's server span id.
    pub trace: Option<(u128, u64)>,
}

pub struct Entry<'a> {
    pub request: &'a RequestLine,
    pub status: u16,
    pub bytes: u64,
    pub duration: Duration,
    pub router: &'a str,
    pub upstream: &'a str,
    /// From the request head read to the upstream's response head, when proxied.
    pub upstream_time: Option<Duration>,
    /// Tries made, when proxied (more than 1 after retries).
    pub tries: Option<u16>,
}

impl AccessLog {
    pub fn open(settings: &weir_config::AccessLog) -> Result<AccessLog, String> {
        Ok(AccessLog {
            out: Mutex::new(open_target(&settings.path)?),
            format: settings.format,
            target: settings.path.clone(),
            sample: settings.sample,
        })
    }

    /// Whether a request is sampled in (decided when it starts; 5xx answers are logged anyway).
    pub fn samples(&self) -> bool {
        self.sample >= 1.0 || fastrand::f64() < self.sample
    }

    /// Writes what a worker has gathered in `buffer` and empties it.
    pub fn flush(&self, buffer: &RefCell<Vec<u8>>) {
        let mut buffer = buffer.borrow_mut();
        if buffer.is_empty() {
            return;
        }
        if let Ok(mut out) = self.out.lock() {
            let _ = out.write_all(&buffer);
            let _ = out.flush();
        }
        buffer.clear();
    }

    /// Opens the file again (by path: logrotate may have moved the old one away).
    pub fn reopen(&self) -> Result<(), String> {
        let fresh = open_target(&self.target)?;
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = out.flush();
        *out = fresh;
        Ok(())
    }

    /// Adds a request's line to the worker's `buffer`, writing the buffer out when it is full.
    pub fn record(&self, e: &Entry, buffer: &RefCell<Vec<u8>>) {
        let now = SystemTime::now();
        let r = e.request;
        let mut line = match self.format {
            LogFormat::Json => {
                let (path, query) = match r.target.split_once('?') {
                    Some((path, query)) => (path, Some(query)),
                    None => (r.target.as_str(), None),
                };
                serde_json::json!({
                    "time": rfc3339(now),
                    "client": r.client.to_string(),
                    "method": r.method,
                    "host": r.host,
                    "path": path,
                    "query": query,
                    "protocol": protocol(r.version),
                    "status": e.status,
                    "bytes": e.bytes,
                    "duration_ms": millis(e.duration),
                    "entrypoint": r.entrypoint,
                    "router": (!e.router.is_empty()).then_some(e.router),
                    "upstream": (!e.upstream.is_empty()).then_some(e.upstream),
                    "upstream_status": r.upstream_status,
                    "upstream_ms": e.upstream_time.map(millis),
                    "tries": e.tries,
                    "request_id": r.request_id,
                    "cache": r.cache,
                    "tls": r.tls.as_ref().map(|(version, sni)| serde_json::json!({
                        "version": version,
                        "sni": sni,
                    })),
                    "user_agent": r.user_agent,
                    "referer": r.referer,
                })
                .to_string()
            }
            // $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
            // "$http_referer" "$http_user_agent"
            LogFormat::Combined => format!(
                "{} - - [{}] \"{} {} {}\" {} {} \"{}\" \"{}\"",
                r.client,
                clf_time(now),
                escaped(&r.method),
                escaped(&r.target),
                r.version,
                e.status,
                e.bytes,
                or_dash(&escaped(r.referer.as_deref().unwrap_or(""))),
                or_dash(&escaped(r.user_agent.as_deref().unwrap_or(""))),
            ),
        };
        if let (LogFormat::Json, Some((trace_id, span_id))) = (self.format, r.trace) {
            // The JSON object's last `}` makes way for the trace's ids.
            line.pop();
            line.push_str(&format!(
                ",\"trace_id\":\"{trace_id:032x}\",\"span_id\":\"{span_id:016x}\"}}"
            ));
        }
        let full = {
            let mut buffer = buffer.borrow_mut();
            buffer.extend_from_slice(line.as_bytes());
            buffer.push(b'\n');
            buffer.len() >= FLUSH_AT
        };
        if full {
            self.flush(buffer);
        }
    }
}

/// The access log's word for a `Cache-Status` value (RFC 9211): `hit` (section 2.1), `stale`
/// for a hit served past its freshness (a negative `ttl`, 2.4) or a stale answer revalidated
/// (`fwd=stale`, 2.2), `bypass` when the request or configuration kept the cache out
/// (`fwd=bypass`, `method`, `request`), else `miss` (`uri-miss`, `vary-miss`, `miss`,
/// `partial`).
pub fn cache_outcome(value: &[u8]) -> &'static str {
    let params = value.split(|b| *b == b';').map(<[u8]>::trim_ascii);
    let mut outcome = "miss";
    for param in params.skip(1) {
        match param {
            b"hit" => outcome = "hit",
            _ if param.starts_with(b"ttl=-") && outcome == "hit" => return "stale",
            b"detail=stale-while-revalidate" => return "stale",
            b"fwd=stale" => return "stale",
            b"fwd=bypass" | b"fwd=method" | b"fwd=request" => return "bypass",
            _ => {}
        }
    }
    outcome
}

/// Whole microseconds in milliseconds: `0.028`, not `0.028051999999999997`.
fn millis(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

/// The JSON format's protocol: `h1`, `h2` or `h3`.
fn protocol(version: &str) -> &'static str {
    match version {
        "HTTP/2.0" => "h2",
        "HTTP/3.0" => "h3",
        _ => "h1",
    }
}

/// nginx writes `"`, `\` and bytes outside printable ASCII as `\xHH`.
fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.push_str(&format!("\\x{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

fn or_dash(text: &str) -> &str {
    if text.is_empty() {
        "-"
    } else {
        text
    }
}

/// Civil UTC time: (year, month, day, seconds of the day, milliseconds).
pub(crate) fn civil(t: SystemTime) -> (i64, i64, i64, i64, u32) {
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
    (year, month, day, rem, d.subsec_millis())
}

/// The common log format's time, in UTC: `22/Nov/2026:01:58:23 +0000`.
fn clf_time(t: SystemTime) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (year, month, day, rem, _) = civil(t);
    format!(
        "{day:02}/{}/{year:04}:{:02}:{:02}:{:02} +0000",
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// UTC timestamp with milliseconds, e.g. `2026-11-22T01:58:23.120Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let (year, month, day, rem, millis) = civil(t);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The writer for a log target (a file opened for appending).
fn open_target(target: &LogTarget) -> Result<Box<dyn Write + Send>, String> {
    let out: Box<dyn Write + Send> = match target {
        LogTarget::Stdout => Box::new(std::io::stdout()),
        LogTarget::Stderr => Box::new(std::io::stderr()),
        LogTarget::File(path) => Box::new(append_to(path, "access log")?),
    };
    Ok(out)
}

/// A log file opened for appending (created if missing): each `write` lands whole at its end.
pub(crate) fn append_to(path: &std::path::Path, log: &str) -> Result<std::fs::File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {log} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_312_703_120);
        assert_eq!(rfc3339(t), "2026-11-22T01:58:23.120Z");
        assert_eq!(clf_time(t), "22/Nov/2026:01:58:23 +0000");
    }

    #[test]
    fn cache_status_in_a_word() {
        assert_eq!(cache_outcome(b"weir; hit; ttl=30"), "hit");
        assert_eq!(cache_outcome(b"weir; hit; ttl=-2"), "stale");
        let revalidating = b"weir; hit; ttl=3; detail=stale-while-revalidate";
        assert_eq!(cache_outcome(revalidating), "stale");
        assert_eq!(
            cache_outcome(b"weir; fwd=uri-miss; fwd-status=200; stored"),
            "miss"
        );
        assert_eq!(
            cache_outcome(b"weir; fwd=vary-miss; fwd-status=200"),
            "miss"
        );
        assert_eq!(cache_outcome(b"weir; fwd=stale; fwd-status=304"), "stale");
        assert_eq!(cache_outcome(b"weir; fwd=method; fwd-status=200"), "bypass");
        assert_eq!(
            cache_outcome(b"weir; fwd=request; fwd-status=200"),
            "bypass"
        );
    }

    #[test]
    fn escapes_as_nginx_does() {
        assert_eq!(escaped("a \"b\" \\ é"), "a \\x22b\\x22 \\x5C \\xC3\\xA9");
        assert_eq!(or_dash(""), "-");
    }
}
