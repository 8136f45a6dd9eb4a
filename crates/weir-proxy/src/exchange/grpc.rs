//! weir's own failures in gRPC form (recognising a gRPC request and its deadline is
//! `http/grpc.rs`). A gRPC client cannot read an HTML or text error: a
//! request weir cannot route or forward is answered as gRPC answers errors, HTTP 200 with
//! `grpc-status` and `grpc-message` in a head that ends the stream (the trailers-only form).

use crate::http::error::LocalError;
use crate::http::local::LocalResponse;

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
    crate::http::ascii::percent_encode(text, |b| (0x20..=0x7e).contains(&b) && b != b'%')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_messages() {
        assert_eq!(percent_encode("no server 100%"), "no server 100%25");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }
}
