//! A local answer ([`LocalResponse`]): what weir answers itself (`respond` routes, redirects,
//! errors once rendered, see `http/error.rs`), its HTTP/1 head prebuilt once so the h1 driver
//! writes it with one copy.

use crate::http::codec::{header, push_decimal, reason, status_line};
use bytes::Bytes;

/// An answer weir makes itself (`respond` routes, redirects, errors): serialized once at config
/// compile time where possible, so serving it is a buffer copy.
#[derive(Debug, Clone)]
pub struct LocalResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Status line, headers and Content-Length, without the final CRLF.
    prebuilt: Vec<u8>,
}

impl LocalResponse {
    /// A status whose answer has no content (1xx, 204, 304: RFC 9110 6.4.1) drops `body`.
    pub fn new(status: u16, headers: Vec<(String, String)>, body: impl Into<Bytes>) -> Self {
        let body = match status {
            100..=199 | 204 | 304 => Bytes::new(),
            _ => body.into(),
        };
        let prebuilt = prebuild(status, &headers, body.len() as u64);
        LocalResponse {
            status,
            headers,
            body,
            prebuilt,
        }
    }

    /// The head of an answer whose body (`len` bytes) comes from elsewhere, a file say: the
    /// reply carries the body, and the prebuilt head declares its length.
    pub fn head_for(status: u16, headers: Vec<(String, String)>, len: u64) -> Self {
        LocalResponse {
            prebuilt: prebuild(status, &headers, len),
            status,
            headers,
            body: Bytes::new(),
        }
    }

    pub fn redirect(status: u16, location: &str) -> Self {
        LocalResponse::new(
            status,
            vec![("location".into(), location.into())],
            Bytes::new(),
        )
    }

    /// Appends the response as HTTP/1 to `out` (for the h1 driver). `extra` are more header
    /// lines; `date_header` is the worker's current `Date` header line.
    pub fn write(
        &self,
        out: &mut Vec<u8>,
        keep_alive: bool,
        head_only: bool,
        extra: &[u8],
        date_header: &[u8],
    ) {
        out.extend_from_slice(&self.prebuilt);
        out.extend_from_slice(date_header);
        out.extend_from_slice(extra);
        if !keep_alive {
            out.extend_from_slice(b"connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if !head_only {
            out.extend_from_slice(&self.body);
        }
    }
}

/// Status line, headers and a Content-Length of `len`, without the final CRLF.
fn prebuild(status: u16, headers: &[(String, String)], len: u64) -> Vec<u8> {
    // Sized for the lines it will hold: a refusal's few extra lines cost no regrowth.
    let lines: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    let mut prebuilt = Vec::with_capacity(64 + lines + 40);
    status_line(&mut prebuilt, status, reason(status));
    for (name, value) in headers {
        if !name.eq_ignore_ascii_case("content-length") {
            header(&mut prebuilt, name.as_bytes(), value.as_bytes());
        }
    }
    // RFC 9110 8.6: none on a 1xx or a 204.
    if !matches!(status, 100..=199 | 204) {
        prebuilt.extend_from_slice(b"content-length: ");
        push_decimal(&mut prebuilt, len);
        prebuilt.extend_from_slice(b"\r\n");
    }
    prebuilt
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::codec::{push_decimal, push_hex};

    #[test]
    fn a_204_has_no_body_and_no_length() {
        let r = LocalResponse::new(204, vec![("x-a".into(), "1".into())], "dropped");
        assert!(r.body.is_empty());
        let head = String::from_utf8(r.prebuilt.clone()).unwrap();
        assert_eq!(head, "HTTP/1.1 204 No Content\r\nx-a: 1\r\n");
        let not_modified = LocalResponse::new(304, Vec::new(), "dropped");
        assert!(not_modified.body.is_empty());
    }

    #[test]
    fn writes_prebuilt_response() {
        let r = LocalResponse::new(
            200,
            vec![("content-type".into(), "text/plain".into())],
            "pong",
        );
        let mut out = Vec::new();
        r.write(
            &mut out,
            false,
            false,
            b"x-a: 1\r\n",
            b"date: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 4\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\nx-a: 1\r\nconnection: close\r\n\r\npong"
        );
        let mut digits = Vec::new();
        push_decimal(&mut digits, 1234567);
        push_decimal(&mut digits, 0);
        push_hex(&mut digits, 0x1f0);
        assert_eq!(digits, b"123456701f0");
    }
}
