//! Responses weir writes itself (`respond` routes, redirects, errors): serialized once at
//! config compile time where possible, so serving them is a buffer copy.

use bytes::Bytes;

#[derive(Debug, Clone)]
pub struct LocalResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Status line, headers and Content-Length, without the final CRLF.
    prebuilt: Vec<u8>,
}

impl LocalResponse {
    pub fn new(status: u16, headers: Vec<(String, String)>, body: impl Into<Bytes>) -> Self {
        let body = body.into();
        let mut prebuilt = Vec::with_capacity(128);
        status_line(&mut prebuilt, status, reason(status));
        for (name, value) in &headers {
            if !name.eq_ignore_ascii_case("content-length") {
                header(&mut prebuilt, name.as_bytes(), value.as_bytes());
            }
        }
        prebuilt.extend_from_slice(b"content-length: ");
        push_decimal(&mut prebuilt, body.len() as u64);
        prebuilt.extend_from_slice(b"\r\n");
        LocalResponse {
            status,
            headers,
            body,
            prebuilt,
        }
    }

    pub fn text(status: u16, message: &str) -> Self {
        LocalResponse::new(
            status,
            vec![("content-type".into(), "text/plain; charset=utf-8".into())],
            format!("{message}\n"),
        )
    }

    pub fn redirect(status: u16, location: &str) -> Self {
        LocalResponse::new(
            status,
            vec![("location".into(), location.into())],
            Bytes::new(),
        )
    }

    /// Appends the response to `out`. `extra` are headers added by response middlewares;
    /// `date_header` is the worker's current `Date` header line.
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

pub fn status_line(out: &mut Vec<u8>, status: u16, reason: &str) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub fn header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal, without allocating.
pub fn push_decimal(out: &mut Vec<u8>, n: u64) {
    push_radix(out, n, 10);
}

/// Appends `n` in lower-case hex (chunk sizes), without allocating.
pub fn push_hex(out: &mut Vec<u8>, n: u64) {
    push_radix(out, n, 16);
}

fn push_radix(out: &mut Vec<u8>, mut n: u64, radix: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[(n % radix) as usize];
        n /= radix;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
