//! `ngx`'s utilities as lua-nginx-module 0.10 gives them: constants, `ngx.log`, time,
//! digests, base64, URI escaping, argument strings, `quote_sql_str`, `ngx.sleep`; and the
//! text forms the other `ngx` modules share (numbers as Lua prints them, decoded arguments).

use super::ngx_req::METHODS;
use base64::Engine;
use mlua::{Lua, Table, Value, Variadic};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `ngx.HTTP_*` statuses, as lua-nginx-module names them.
const STATUSES: &[(&str, i64)] = &[
    ("CONTINUE", 100),
    ("SWITCHING_PROTOCOLS", 101),
    ("OK", 200),
    ("CREATED", 201),
    ("ACCEPTED", 202),
    ("NO_CONTENT", 204),
    ("PARTIAL_CONTENT", 206),
    ("SPECIAL_RESPONSE", 300),
    ("MOVED_PERMANENTLY", 301),
    ("MOVED_TEMPORARILY", 302),
    ("SEE_OTHER", 303),
    ("NOT_MODIFIED", 304),
    ("TEMPORARY_REDIRECT", 307),
    ("PERMANENT_REDIRECT", 308),
    ("BAD_REQUEST", 400),
    ("UNAUTHORIZED", 401),
    ("PAYMENT_REQUIRED", 402),
    ("FORBIDDEN", 403),
    ("NOT_FOUND", 404),
    ("NOT_ALLOWED", 405),
    ("NOT_ACCEPTABLE", 406),
    ("REQUEST_TIMEOUT", 408),
    ("CONFLICT", 409),
    ("GONE", 410),
    ("UPGRADE_REQUIRED", 426),
    ("TOO_MANY_REQUESTS", 429),
    ("CLOSE", 444),
    ("ILLEGAL", 451),
    ("INTERNAL_SERVER_ERROR", 500),
    ("METHOD_NOT_IMPLEMENTED", 501),
    ("BAD_GATEWAY", 502),
    ("SERVICE_UNAVAILABLE", 503),
    ("GATEWAY_TIMEOUT", 504),
    ("VERSION_NOT_SUPPORTED", 505),
    ("INSUFFICIENT_STORAGE", 507),
];

/// `ngx.STDERR` .. `ngx.DEBUG`, nginx's log levels.
const LEVELS: &[(&str, i64)] = &[
    ("STDERR", 0),
    ("EMERG", 1),
    ("ALERT", 2),
    ("CRIT", 3),
    ("ERR", 4),
    ("WARN", 5),
    ("NOTICE", 6),
    ("INFO", 7),
    ("DEBUG", 8),
];

pub(super) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    for (name, status) in STATUSES {
        ngx.set(format!("HTTP_{name}"), *status)?;
    }
    for (name, method) in METHODS {
        ngx.set(format!("HTTP_{name}"), *method)?;
    }
    for (name, level) in LEVELS {
        ngx.set(*name, *level)?;
    }
    for (name, code) in [
        ("OK", 0),
        ("ERROR", -1),
        ("AGAIN", -2),
        ("DONE", -4),
        ("DECLINED", -5),
    ] {
        ngx.set(name, code)?;
    }
    ngx.set("null", Value::NULL)?;
    ngx.set(
        "log",
        lua.create_function(|_, (level, args): (i64, Variadic<Value>)| {
            let mut line = String::new();
            for arg in args.iter() {
                match arg {
                    Value::String(s) => line.push_str(&s.to_string_lossy()),
                    Value::Integer(n) => line.push_str(&format_number(*n as f64)),
                    Value::Number(n) => line.push_str(&format_number(*n)),
                    Value::Nil => line.push_str("nil"),
                    Value::Boolean(b) => line.push_str(&b.to_string()),
                    Value::LightUserData(p) if p.0.is_null() => line.push_str("null"),
                    other => {
                        return Err(mlua::Error::runtime(format!(
                        "bad argument to 'log' (string, number, boolean or nil expected, got {})",
                        other.type_name()
                    )))
                    }
                }
            }
            match level {
                0..=4 => crate::log_error!("lua: {line}"),
                5 => crate::log_warn!("lua: {line}"),
                6 | 7 => crate::log_info!("lua: {line}"),
                _ => crate::log_debug!("lua: {line}"),
            }
            Ok(())
        })?,
    )?;
    ngx.set(
        "time",
        lua.create_function(|_, ()| Ok(now_seconds().floor() as i64))?,
    )?;
    ngx.set(
        "now",
        lua.create_function(|_, ()| Ok((now_seconds() * 1000.0).floor() / 1000.0))?,
    )?;
    ngx.set("update_time", lua.create_function(|_, ()| Ok(()))?)?;
    ngx.set(
        "today",
        lua.create_function(|_, ()| {
            let (y, m, d, ..) = local_time(now_seconds() as i64);
            Ok(format!("{y:04}-{m:02}-{d:02}"))
        })?,
    )?;
    ngx.set(
        "localtime",
        lua.create_function(|_, ()| Ok(civil_text(local_time(now_seconds() as i64))))?,
    )?;
    ngx.set(
        "utctime",
        lua.create_function(|_, ()| Ok(civil_text(utc_time(now_seconds() as i64))))?,
    )?;
    ngx.set(
        "http_time",
        lua.create_function(|_, secs: f64| {
            Ok(httpdate::fmt_http_date(
                UNIX_EPOCH + Duration::from_secs(secs.max(0.0) as u64),
            ))
        })?,
    )?;
    ngx.set(
        "cookie_time",
        lua.create_function(|_, secs: f64| {
            let secs = secs.max(0.0) as i64;
            let (y, m, d, hh, mm, ss) = utc_time(secs);
            let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
                [(secs.div_euclid(86_400) % 7) as usize];
            let month = MONTHS[(m - 1) as usize];
            // As nginx writes it: a two-digit year up to 2037 (for old Netscape clients).
            let year = if y > 2037 {
                y.to_string()
            } else {
                format!("{:02}", y % 100)
            };
            Ok(format!(
                "{weekday}, {d:02}-{month}-{year} {hh:02}:{mm:02}:{ss:02} GMT"
            ))
        })?,
    )?;
    ngx.set(
        "parse_http_time",
        lua.create_function(|_, text: String| {
            Ok(httpdate::parse_http_date(&text).ok().and_then(|t| {
                t.duration_since(UNIX_EPOCH)
                    .ok()
                    .map(|d| d.as_secs() as i64)
            }))
        })?,
    )?;
    ngx.set(
        "md5",
        lua.create_function(|_, data: mlua::String| {
            use md5::Digest;
            Ok(hex(&md5::Md5::digest(&*data.as_bytes())))
        })?,
    )?;
    ngx.set(
        "md5_bin",
        lua.create_function(|lua, data: mlua::String| {
            use md5::Digest;
            lua.create_string(md5::Md5::digest(&*data.as_bytes()))
        })?,
    )?;
    ngx.set(
        "sha1_bin",
        lua.create_function(|lua, data: mlua::String| {
            let digest =
                ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &data.as_bytes());
            lua.create_string(digest.as_ref())
        })?,
    )?;
    ngx.set(
        "hmac_sha1",
        lua.create_function(|lua, (key, data): (mlua::String, mlua::String)| {
            let key =
                ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, &key.as_bytes());
            lua.create_string(ring::hmac::sign(&key, &data.as_bytes()).as_ref())
        })?,
    )?;
    let crc32 = lua.create_function(|_, data: mlua::String| {
        Ok(i64::from(crc32fast::hash(&data.as_bytes())))
    })?;
    ngx.set("crc32_short", crc32.clone())?;
    ngx.set("crc32_long", crc32)?;
    ngx.set(
        "encode_base64",
        lua.create_function(|_, (data, no_padding): (mlua::String, Option<bool>)| {
            Ok(if no_padding.unwrap_or(false) {
                base64::engine::general_purpose::STANDARD_NO_PAD.encode(&*data.as_bytes())
            } else {
                base64::engine::general_purpose::STANDARD.encode(&*data.as_bytes())
            })
        })?,
    )?;
    ngx.set(
        "decode_base64",
        lua.create_function(|lua, text: mlua::String| {
            // nginx decodes with or without padding.
            let engine = base64::engine::GeneralPurpose::new(
                &base64::alphabet::STANDARD,
                base64::engine::GeneralPurposeConfig::new()
                    .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
            );
            match engine.decode(&*text.as_bytes()) {
                Ok(bytes) => Ok(Value::String(lua.create_string(bytes)?)),
                Err(_) => Ok(Value::Nil),
            }
        })?,
    )?;
    ngx.set(
        "escape_uri",
        lua.create_function(|lua, value: Value| {
            let bytes = text_of(&value)?;
            lua.create_string(escape_uri(&bytes))
        })?,
    )?;
    ngx.set(
        "unescape_uri",
        lua.create_function(|lua, value: Value| {
            let bytes = text_of(&value)?;
            lua.create_string(unescape(&bytes, true))
        })?,
    )?;
    ngx.set(
        "encode_args",
        lua.create_function(|lua, args: Table| encode_args(lua, &args))?,
    )?;
    ngx.set(
        "decode_args",
        lua.create_function(|lua, (text, max): (mlua::String, Option<usize>)| {
            args_table(lua, &text.as_bytes(), max.unwrap_or(100))
        })?,
    )?;
    ngx.set(
        "quote_sql_str",
        lua.create_function(|lua, text: mlua::String| {
            let mut out = vec![b'\''];
            for &b in text.as_bytes().iter() {
                match b {
                    0 => out.extend_from_slice(b"\\0"),
                    b'\x08' => out.extend_from_slice(b"\\b"),
                    b'\n' => out.extend_from_slice(b"\\n"),
                    b'\r' => out.extend_from_slice(b"\\r"),
                    b'\t' => out.extend_from_slice(b"\\t"),
                    b'\x1a' => out.extend_from_slice(b"\\Z"),
                    b'\\' | b'\'' | b'"' => out.extend_from_slice(&[b'\\', b]),
                    b => out.push(b),
                }
            }
            out.push(b'\'');
            lua.create_string(out)
        })?,
    )?;
    ngx.set(
        "sleep",
        lua.create_async_function(|_, seconds: f64| async move {
            if seconds.is_nan() || seconds < 0.0 {
                return Err(mlua::Error::runtime("invalid sleeping time"));
            }
            // Workers run tokio without its timer: a one-shot timerfd.
            let timer = crate::io::ticker::Ticker::once(Duration::from_secs_f64(seconds))
                .map_err(|e| mlua::Error::runtime(format!("ngx.sleep: {e}")))?;
            timer
                .tick()
                .await
                .map_err(|e| mlua::Error::runtime(format!("ngx.sleep: {e}")))?;
            Ok(())
        })?,
    )?;
    Ok(())
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Seconds since the epoch, with the fraction.
pub(super) fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `secs` since the epoch as UTC (year, month, day, hour, minute, second).
fn utc_time(secs: i64) -> (i64, i64, i64, i64, i64, i64) {
    let at = UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64);
    let (y, m, d, rest, _) = crate::observe::accesslog::civil(at);
    (y, m, d, rest / 3600, rest % 3600 / 60, rest % 60)
}

/// `secs` in the local time zone (nginx's `ngx.today` and `ngx.localtime`).
#[allow(unsafe_code)]
fn local_time(secs: i64) -> (i64, i64, i64, i64, i64, i64) {
    let time = secs as nix::libc::time_t;
    // SAFETY: `tm` is plain data (all zeroes is a valid value), filled by localtime_r from a
    // valid time_t; the standard library has no time zones.
    let mut tm: nix::libc::tm = unsafe { std::mem::zeroed() };
    let filled = unsafe { !nix::libc::localtime_r(&time, &mut tm).is_null() };
    if !filled {
        return utc_time(secs);
    }
    (
        i64::from(tm.tm_year) + 1900,
        i64::from(tm.tm_mon) + 1,
        i64::from(tm.tm_mday),
        i64::from(tm.tm_hour),
        i64::from(tm.tm_min),
        i64::from(tm.tm_sec),
    )
}

fn civil_text((y, m, d, hh, mm, ss): (i64, i64, i64, i64, i64, i64)) -> String {
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02}")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A string or number argument's bytes (`nil` as empty, as lua-nginx-module takes it).
fn text_of(value: &Value) -> mlua::Result<Vec<u8>> {
    match value {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Integer(n) => Ok(format_number(*n as f64).into_bytes()),
        Value::Number(n) => Ok(format_number(*n).into_bytes()),
        Value::Nil => Ok(Vec::new()),
        other => Err(mlua::Error::runtime(format!(
            "string argument only, got {}",
            other.type_name()
        ))),
    }
}

/// A number as LuaJIT prints it (`%.14g`).
pub(super) fn format_number(n: f64) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if n.is_infinite() {
        return if n > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if n == n.trunc() && n.abs() < 1e14 {
        return format!("{}", n as i64);
    }
    const PRECISION: i32 = 14;
    let scientific = format!("{:.*e}", (PRECISION - 1) as usize, n);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..PRECISION).contains(&exponent) {
        let mantissa = strip_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = (PRECISION - 1 - exponent).max(0) as usize;
        strip_zeros(&format!("{n:.decimals$}")).to_string()
    }
}

/// `1.2500` → `1.25`, `3.000` → `3`.
fn strip_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// `ngx.escape_uri`: every byte but letters, digits and `-._~!*'()` as `%XX` (lua-nginx-module
/// 0.10's table for a URI component).
fn escape_uri(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.' | b'_' | b'~' | b'!' | b'*' | b'\'' | b'(' | b')'
            )
        {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// `%XX` decoded (a malformed escape kept as it is); with `plus`, `+` as a space.
pub(super) fn unescape(bytes: &[u8], plus: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' if plus => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// `ngx.encode_args`: `k=v` pairs joined by `&`, escaped; `true` as the bare key, `false`
/// left out, a list as the key repeated.
pub(super) fn encode_args(_lua: &Lua, args: &Table) -> mlua::Result<String> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for pair in args.pairs::<Value, Value>() {
        let (key, value) = pair?;
        let key = match &key {
            Value::String(s) => escape_uri(&s.as_bytes()),
            Value::Integer(_) | Value::Number(_) => escape_uri(&text_of(&key)?),
            other => {
                return Err(mlua::Error::runtime(format!(
                    "attempt to use a {} as query arg key",
                    other.type_name()
                )))
            }
        };
        let mut push = |value: &Value| -> mlua::Result<()> {
            match value {
                Value::Boolean(true) => parts.push(key.clone()),
                Value::Boolean(false) => {}
                value => {
                    let mut part = key.clone();
                    part.push(b'=');
                    part.extend(escape_uri(&text_of(value)?));
                    parts.push(part);
                }
            }
            Ok(())
        };
        match &value {
            Value::Table(list) => {
                for item in list.clone().sequence_values::<Value>() {
                    push(&item?)?;
                }
            }
            value => push(value)?,
        }
    }
    Ok(String::from_utf8_lossy(&parts.join(&b'&')).into_owned())
}

/// `ngx.decode_args` and `get_uri_args`: `a=1&b&c=2&c=3` as `{a="1", b=true, c={"2","3"}}`
/// (unescaped, `+` as a space), at most `max` arguments (0: all).
pub(super) fn args_table(lua: &Lua, text: &[u8], max: usize) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    let mut count = 0;
    for pair in text.split(|&b| b == b'&') {
        if pair.is_empty() {
            continue;
        }
        if max != 0 && count >= max {
            break;
        }
        count += 1;
        let (key, value) = match pair.iter().position(|&b| b == b'=') {
            Some(eq) => (&pair[..eq], Some(&pair[eq + 1..])),
            None => (pair, None),
        };
        if key.is_empty() {
            continue;
        }
        let key = lua.create_string(unescape(key, true))?;
        let value = match value {
            Some(v) => Value::String(lua.create_string(unescape(v, true))?),
            None => Value::Boolean(true),
        };
        match table.raw_get::<Value>(&key)? {
            Value::Nil => table.raw_set(key, value)?,
            Value::Table(list) => list.raw_push(value)?,
            first => table.raw_set(key, lua.create_sequence_from([first, value])?)?,
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_luajit_prints_them() {
        assert_eq!(format_number(1.0), "1");
        assert_eq!(format_number(-3.0), "-3");
        assert_eq!(format_number(0.1), "0.1");
        assert_eq!(format_number(1.0 / 3.0), "0.33333333333333");
        assert_eq!(format_number(1e20), "1e+20");
        assert_eq!(format_number(1.5e-7), "1.5e-07");
        assert_eq!(format_number(123456.789), "123456.789");
    }

    #[test]
    fn civil_dates_come_from_epoch_seconds() {
        assert_eq!(utc_time(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(utc_time(1_290_079_655), (2010, 11, 18, 11, 27, 35));
    }

    #[test]
    fn uri_escapes_go_both_ways() {
        assert_eq!(escape_uri(b"a b/c~"), b"a%20b%2Fc~");
        assert_eq!(unescape(b"a%20b+c%zz%4", true), b"a b c%zz%4".to_vec());
    }
}
