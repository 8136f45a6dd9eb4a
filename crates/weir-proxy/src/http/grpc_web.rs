//! gRPC-Web's answer body as the `grpc_web` middleware's body filter writes it: the gRPC
//! service's messages as they come, then its trailers as one last length-prefixed frame whose
//! flag byte is 0x80, holding lower-case `name: value\r\n` lines (gRPC-Web has no HTTP
//! trailers). Deciding which requests are converted is `middlewares/grpc_web.rs`.

use crate::http::ascii::eq_ignore_case;
use std::io;

/// The flag byte of the frame that carries the trailers.
const TRAILER_FLAG: u8 = 0x80;

/// One gRPC-Web answer's body: the messages pass as they are; the trailers, handed over once
/// the service's body ends, are written as the last frame.
#[derive(Debug, Default)]
pub struct GrpcWebBody {
    /// The answer head's field names, lower-case, each followed by `\n`: a trailer by one of
    /// these names was already sent in the head and is not repeated (as the wrapper skips the
    /// trailer keys it flushed with the head; a trailers-only answer's frame is empty).
    head_names: Vec<u8>,
    trailers: Option<http::HeaderMap>,
    out: Vec<u8>,
}

impl GrpcWebBody {
    /// A body for an answer whose head carried the fields in `head_names` (`name\n` each,
    /// lower-case).
    pub fn new(head_names: Vec<u8>) -> GrpcWebBody {
        GrpcWebBody {
            head_names,
            ..GrpcWebBody::default()
        }
    }

    /// The next piece of the service's body: passed on as it is.
    pub fn write(&mut self, data: &[u8]) -> io::Result<&[u8]> {
        self.out.clear();
        self.out.extend_from_slice(data);
        Ok(&self.out)
    }

    /// The service's trailers, taken before the body's end is written.
    pub fn take_trailers(&mut self, trailers: Option<http::HeaderMap>) {
        self.trailers = trailers;
    }

    /// The body has ended: the trailer frame.
    pub fn finish(&mut self) -> io::Result<&[u8]> {
        let mut lines = Vec::new();
        if let Some(trailers) = self.trailers.take() {
            // Sorted by name, as Go's `Header.Write` writes them; a name's values in order.
            let mut fields: Vec<(&str, &[u8])> = trailers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_bytes()))
                .filter(|(name, _)| !self.in_head(name.as_bytes()))
                .collect();
            fields.sort_by_key(|(name, _)| *name);
            for (name, value) in fields {
                lines.extend_from_slice(name.as_bytes());
                lines.extend_from_slice(b": ");
                lines.extend_from_slice(value.trim_ascii());
                lines.extend_from_slice(b"\r\n");
            }
        }
        self.out.clear();
        self.out.push(TRAILER_FLAG);
        self.out
            .extend_from_slice(&(lines.len() as u32).to_be_bytes());
        self.out.extend_from_slice(&lines);
        Ok(&self.out)
    }

    fn in_head(&self, name: &[u8]) -> bool {
        self.head_names
            .split(|&b| b == b'\n')
            .any(|listed| !listed.is_empty() && eq_ignore_case(listed, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trailers(fields: &[(&'static str, &'static str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for (name, value) in fields {
            map.append(*name, http::HeaderValue::from_static(value));
        }
        map
    }

    /// trailer_test.go's lower-case names, and grpc_web_response.go's frame: flag 0x80, the
    /// length big-endian, `name: value\r\n` lines sorted by name.
    #[test]
    fn trailers_become_the_last_frame() {
        let mut body = GrpcWebBody::new(b"content-type\n".to_vec());
        assert_eq!(body.write(b"\0\0\0\0\x02hi").unwrap(), b"\0\0\0\0\x02hi");
        body.take_trailers(Some(trailers(&[
            ("grpc-status", "0"),
            ("grpc-message", ""),
            ("Trailer-Key", "v1"),
            ("trailer-key", "v2"),
        ])));
        let lines = "grpc-message: \r\ngrpc-status: 0\r\ntrailer-key: v1\r\ntrailer-key: v2\r\n";
        let mut frame = vec![0x80, 0, 0, 0, lines.len() as u8];
        frame.extend_from_slice(lines.as_bytes());
        assert_eq!(body.finish().unwrap(), &frame[..]);
    }

    /// A trailers-only answer (its status in the head) ends with an empty trailer frame, and
    /// a trailer by a name the head carried is not repeated.
    #[test]
    fn names_sent_in_the_head_are_not_repeated() {
        let mut body = GrpcWebBody::new(b"content-type\ngrpc-status\ngrpc-message\n".to_vec());
        assert_eq!(body.finish().unwrap(), [0x80, 0, 0, 0, 0]);
        let mut body = GrpcWebBody::new(b"grpc-status\n".to_vec());
        body.take_trailers(Some(trailers(&[("grpc-status", "0"), ("x-a", "1")])));
        assert_eq!(body.finish().unwrap(), b"\x80\0\0\0\x08x-a: 1\r\n");
    }
}
