//! gRPC at the gateway: recognising a gRPC request, the deadline it carries (`grpc-timeout`),
//! and weir's own failures in gRPC form. A gRPC client cannot read an HTML or text error: a
//! request weir cannot route or forward is answered as gRPC answers errors, HTTP 200 with
//! `grpc-status` and `grpc-message` in a head that ends the stream (the trailers-only form).

use crate::http::codec::RequestHead;
use crate::http::error::LocalError;
use crate::http::local::LocalResponse;
use std::time::Duration;

/// gRPC goes over HTTP/2 with a `content-type` of `application/grpc` (or `+proto`, `+json`).
pub fn is_grpc(req: &RequestHead) -> bool {
    req.http2
        && req
            .head
            .get("content-type")
            .is_some_and(|v| v.starts_with(b"application/grpc"))
}

/// The call's deadline from `grpc-timeout` (digits then a unit: H, M, S, m, u, n).
pub fn timeout(req: &RequestHead) -> Option<Duration> {
    let value = req.head.get("grpc-timeout")?;
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// The gRPC status for an error weir answers with HTTP `status` (after gRPC's own HTTP
/// mapping, with weir's timeouts as DEADLINE_EXCEEDED).
fn status_code(status: u16) -> u8 {
    match status {
        400 => 13,             // INTERNAL
        401 => 16,             // UNAUTHENTICATED
        403 => 7,              // PERMISSION_DENIED
        404 | 501 => 12,       // UNIMPLEMENTED
        408 | 504 => 4,        // DEADLINE_EXCEEDED
        413 | 431 => 8,        // RESOURCE_EXHAUSTED
        429 | 502 | 503 => 14, // UNAVAILABLE
        499 => 1,              // CANCELLED
        _ => 2,                // UNKNOWN
    }
}

/// weir's own error in gRPC form: HTTP 200 whose head ends the stream (trailers-only) with
/// `grpc-status` and `grpc-message`, then the error's own header lines.
pub fn error_answer(error: &LocalError) -> LocalResponse {
    let mut headers = Vec::with_capacity(error.headers.len() + 3);
    headers.push(("content-type".into(), "application/grpc".into()));
    headers.push(("grpc-status".into(), status_code(error.status).to_string()));
    headers.push((
        "grpc-message".into(),
        percent_encode(error.message.trim_end()),
    ));
    headers.extend(error.headers.iter().cloned());
    LocalResponse::new(200, headers, bytes::Bytes::new())
}

/// `grpc-message` is percent-encoded UTF-8; printable ASCII other than `%` stays as it is.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn head(extra: &str) -> RequestHead {
        let raw = format!(
            "POST /a.B/C HTTP/1.1\r\nhost: x\r\ncontent-type: application/grpc\r\n{extra}\r\n"
        );
        let mut head = crate::http::codec::parse_request(&mut BytesMut::from(raw.as_bytes()))
            .unwrap()
            .unwrap();
        head.http2 = true;
        head
    }

    #[test]
    fn reads_grpc_timeout() {
        assert_eq!(
            timeout(&head("grpc-timeout: 250m\r\n")),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            timeout(&head("grpc-timeout: 2S\r\n")),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            timeout(&head("grpc-timeout: 1H\r\n")),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(timeout(&head("grpc-timeout: 123456789m\r\n")), None);
        assert_eq!(timeout(&head("grpc-timeout: m\r\n")), None);
        assert_eq!(timeout(&head("grpc-timeout: 5x\r\n")), None);
        assert!(is_grpc(&head("")));
    }

    #[test]
    fn encodes_messages() {
        assert_eq!(percent_encode("no server 100%"), "no server 100%25");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }
}
