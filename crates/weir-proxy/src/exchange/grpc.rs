//! weir's own failures in gRPC form (recognising a gRPC request and its deadline is
//! `http/grpc.rs`). A gRPC client cannot read an HTML or text error: a
//! request weir cannot route or forward is answered as gRPC answers errors, HTTP 200 with
//! `grpc-status` and `grpc-message` in a head that ends the stream (the trailers-only form).

use crate::http::codec::RequestHead;
use crate::http::grpc::is_grpc;
use crate::http::local::LocalResponse;
use crate::reply::{Reply, ReplyHead};
use std::borrow::Cow;

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

/// Turns a local error reply (status 400 and up) to a gRPC request into gRPC form; any
/// other reply stays as it is.
pub fn local_errors_in_grpc_form(req: &RequestHead, reply: &mut Reply<'_>) {
    let (status, message) = match &reply.head {
        ReplyHead::Local(local) if local.status >= 400 && is_grpc(req) => {
            (local.status, local.body.clone())
        }
        _ => return,
    };
    let message = String::from_utf8_lossy(&message);
    let answer = LocalResponse::new(
        200,
        vec![
            ("content-type".into(), "application/grpc".into()),
            ("grpc-status".into(), status_code(status).to_string()),
            ("grpc-message".into(), percent_encode(message.trim_end())),
        ],
        bytes::Bytes::new(),
    );
    reply.head = ReplyHead::Local(Cow::Owned(answer));
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

    #[test]
    fn encodes_messages() {
        assert_eq!(percent_encode("no server 100%"), "no server 100%25");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }
}
