//! gRPC's request headers as the gateway reads them: whether a request is gRPC, and the
//! deadline it carries (`grpc-timeout`). Answering a gRPC request's errors is `exchange/grpc.rs`.

use crate::http::codec::RequestHead;
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
}
