//! gRPC-Web's answer body as the `grpc_web` middleware's body filter writes it: the gRPC
//! service's messages as they come, then its trailers as one last length-prefixed frame whose
//! flag byte is 0x80, holding lower-case `name: value\r\n` lines (gRPC-Web has no HTTP
//! trailers). The text form carries the same bytes in base64, both ways: the answer is
//! encoded as it goes, each pause of the service closing a padded piece (as the wrapper's
//! flushes do), and a request body is decoded here. Deciding which requests are converted is
//! `middlewares/grpc_web.rs`.

use crate::http::ascii::eq_ignore_case;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
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
    /// The trailer frame's lines, once the trailers are handed over.
    lines: Vec<u8>,
    out: Vec<u8>,
    /// The text form: what goes out is base64.
    text: bool,
    /// In the text form, the bytes not encoded yet (fewer than three until a flush).
    held: Vec<u8>,
}

impl GrpcWebBody {
    /// A body for an answer whose head carried the fields in `head_names` (`name\n` each,
    /// lower-case), in base64 when `text`.
    pub fn new(head_names: Vec<u8>, text: bool) -> GrpcWebBody {
        GrpcWebBody {
            head_names,
            text,
            ..GrpcWebBody::default()
        }
    }

    /// The next piece of the service's body: passed on as it is, or its whole groups of
    /// three bytes in base64.
    pub fn write(&mut self, data: &[u8]) -> io::Result<&[u8]> {
        self.out.clear();
        if !self.text {
            self.out.extend_from_slice(data);
            return Ok(&self.out);
        }
        self.held.extend_from_slice(data);
        let whole = self.held.len() / 3 * 3;
        encode(&self.held[..whole], &mut self.out);
        self.held.drain(..whole);
        Ok(&self.out)
    }

    /// The service has nothing more for now: the text form closes its piece (padded).
    pub fn flush(&mut self) -> io::Result<&[u8]> {
        self.out.clear();
        encode(&self.held, &mut self.out);
        self.held.clear();
        Ok(&self.out)
    }

    /// The service's trailers, taken before the body's end is written.
    pub fn take_trailers(&mut self, trailers: Option<http::HeaderMap>) {
        let Some(trailers) = trailers else {
            return;
        };
        // Sorted by name, as Go's `Header.Write` writes them; a name's values in order.
        let mut fields: Vec<(&str, &[u8])> = trailers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_bytes()))
            .filter(|(name, _)| !self.in_head(name.as_bytes()))
            .collect();
        fields.sort_by_key(|(name, _)| *name);
        for (name, value) in fields {
            self.lines.extend_from_slice(name.as_bytes());
            self.lines.extend_from_slice(b": ");
            self.lines.extend_from_slice(value.trim_ascii());
            self.lines.extend_from_slice(b"\r\n");
        }
    }

    /// The body has ended: the trailer frame.
    pub fn finish(&mut self) -> io::Result<&[u8]> {
        let mut frame = Vec::with_capacity(5 + self.lines.len());
        frame.push(TRAILER_FLAG);
        frame.extend_from_slice(&(self.lines.len() as u32).to_be_bytes());
        frame.extend_from_slice(&self.lines);
        self.out.clear();
        if self.text {
            self.held.extend_from_slice(&frame);
            encode(&self.held, &mut self.out);
            self.held.clear();
        } else {
            self.out = frame;
        }
        Ok(&self.out)
    }

    fn in_head(&self, name: &[u8]) -> bool {
        self.head_names
            .split(|&b| b == b'\n')
            .any(|listed| !listed.is_empty() && eq_ignore_case(listed, name))
    }
}

/// Appends `data` in padded base64 to `out`.
fn encode(data: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + data.len().div_ceil(3) * 4, 0);
    // Sized above: the slice cannot be too short.
    let _ = STANDARD.encode_slice(data, &mut out[start..]);
}

/// A text-form request body decoded: padded base64, possibly several padded pieces one after
/// the other, line breaks ignored (as Go's decoder ignores them). `None` when it is not.
pub fn decode_text(text: &[u8]) -> Option<Vec<u8>> {
    let clean: Vec<u8> = text
        .iter()
        .copied()
        .filter(|b| !matches!(b, b'\r' | b'\n'))
        .collect();
    if clean.len() % 4 != 0 {
        return None;
    }
    let mut decoded = Vec::with_capacity(clean.len() / 4 * 3);
    let mut start = 0;
    for (i, quantum) in clean.chunks(4).enumerate() {
        let end = (i + 1) * 4;
        if quantum.contains(&b'=') || end == clean.len() {
            STANDARD.decode_vec(&clean[start..end], &mut decoded).ok()?;
            start = end;
        }
    }
    Some(decoded)
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

    /// The lower-case names wrapper_test.go reads the frame by (through trailer_test.go's
    /// `Trailer`), and grpc_web_response.go's frame: flag 0x80, the length big-endian,
    /// `name: value\r\n` lines sorted by name.
    #[test]
    fn trailers_become_the_last_frame() {
        let mut body = GrpcWebBody::new(b"content-type\n".to_vec(), false);
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
        let mut body =
            GrpcWebBody::new(b"content-type\ngrpc-status\ngrpc-message\n".to_vec(), false);
        assert_eq!(body.finish().unwrap(), [0x80, 0, 0, 0, 0]);
        let mut body = GrpcWebBody::new(b"grpc-status\n".to_vec(), false);
        body.take_trailers(Some(trailers(&[("grpc-status", "0"), ("x-a", "1")])));
        assert_eq!(body.finish().unwrap(), b"\x80\0\0\0\x08x-a: 1\r\n");
    }

    /// wrapper_test.go `TestPing` (text form) and its `decodeMultipleBase64Chunks`: the
    /// answer in base64, a padded piece at each pause, the trailer frame last.
    #[test]
    fn the_text_form_is_base64_in_padded_pieces() {
        let mut body = GrpcWebBody::new(Vec::new(), true);
        let mut out = Vec::new();
        out.extend_from_slice(body.write(b"\0\0\0\0\x02h").unwrap());
        out.extend_from_slice(body.write(b"i").unwrap());
        out.extend_from_slice(body.flush().unwrap());
        assert_eq!(out, b"AAAAAAJoaQ==");
        body.take_trailers(Some(trailers(&[("grpc-status", "0")])));
        out.extend_from_slice(body.finish().unwrap());
        let decoded = decode_text(&out).unwrap();
        assert_eq!(decoded, b"\0\0\0\0\x02hi\x80\0\0\0\x10grpc-status: 0\r\n");
    }

    #[test]
    fn text_request_bodies_decode() {
        assert_eq!(decode_text(b"AAAAAAJoaQ==").unwrap(), b"\0\0\0\0\x02hi");
        assert_eq!(
            decode_text(b"AAAA\r\nAAJo\naQ==").unwrap(),
            b"\0\0\0\0\x02hi"
        );
        assert_eq!(decode_text(b"aGk=aGk=").unwrap(), b"hihi");
        assert_eq!(decode_text(b"").unwrap(), b"");
        assert!(decode_text(b"aGk").is_none());
        assert!(decode_text(b"a*k=").is_none());
    }
}
