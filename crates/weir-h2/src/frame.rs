//! HTTP/2 frame layout (RFC 9113 §4.1, §6): the 9-byte header, frame types, flags, error codes
//! and the writers of each frame the server sends.

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const HEADER_LEN: usize = 9;
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
pub const MAX_WINDOW: i64 = (1 << 31) - 1;
pub const DEFAULT_WINDOW: u32 = 65_535;

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// An error code (RFC 9113 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reason(pub u32);

impl Reason {
    pub const NO_ERROR: Reason = Reason(0x0);
    pub const PROTOCOL_ERROR: Reason = Reason(0x1);
    pub const INTERNAL_ERROR: Reason = Reason(0x2);
    pub const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    pub const SETTINGS_TIMEOUT: Reason = Reason(0x4);
    pub const STREAM_CLOSED: Reason = Reason(0x5);
    pub const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    pub const REFUSED_STREAM: Reason = Reason(0x7);
    pub const CANCEL: Reason = Reason(0x8);
    pub const COMPRESSION_ERROR: Reason = Reason(0x9);
    pub const CONNECT_ERROR: Reason = Reason(0xa);
    pub const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
    pub const INADEQUATE_SECURITY: Reason = Reason(0xc);
    pub const HTTP_1_1_REQUIRED: Reason = Reason(0xd);
}

/// A received frame's header.
#[derive(Debug, Clone, Copy)]
pub struct Head {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream_id: u32,
}

impl Head {
    pub fn parse(b: &[u8]) -> Head {
        Head {
            len: (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize,
            kind: b[3],
            flags: b[4],
            // §4.1: the reserved bit is ignored on receipt.
            stream_id: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }
}

pub fn write_head(dst: &mut BytesMut, len: usize, kind: u8, flags: u8, stream_id: u32) {
    let len = len as u32;
    dst.put_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    dst.put_u32(stream_id);
}

pub fn write_settings(dst: &mut BytesMut, settings: &[(u16, u32)]) {
    write_head(dst, settings.len() * 6, SETTINGS, 0, 0);
    for &(id, value) in settings {
        dst.put_u16(id);
        dst.put_u32(value);
    }
}

pub fn write_window_update(dst: &mut BytesMut, stream_id: u32, increment: u32) {
    write_head(dst, 4, WINDOW_UPDATE, 0, stream_id);
    dst.put_u32(increment);
}

pub fn write_rst_stream(dst: &mut BytesMut, stream_id: u32, reason: Reason) {
    write_head(dst, 4, RST_STREAM, 0, stream_id);
    dst.put_u32(reason.0);
}

pub fn write_goaway(dst: &mut BytesMut, last_stream_id: u32, reason: Reason) {
    write_head(dst, 8, GOAWAY, 0, 0);
    dst.put_u32(last_stream_id);
    dst.put_u32(reason.0);
}

pub fn write_ping(dst: &mut BytesMut, flags: u8, payload: &[u8; 8]) {
    write_head(dst, 8, PING, flags, 0);
    dst.put_slice(payload);
}

/// Strips §6.1/§6.2 padding: the flag's length octet and that many octets at the end.
pub fn unpad(head: &Head, payload: &mut Bytes) -> Result<(), Reason> {
    if head.flags & PADDED == 0 {
        return Ok(());
    }
    let Some(&pad) = payload.first() else {
        return Err(Reason::FRAME_SIZE_ERROR);
    };
    if pad as usize >= payload.len() {
        return Err(Reason::PROTOCOL_ERROR);
    }
    payload.advance(1);
    payload.truncate(payload.len() - pad as usize);
    Ok(())
}

/// Writes the HEADERS frame header before the block that starts at `start + 9` in `tail`
/// (9 bytes reserved there), splitting it into CONTINUATION frames if it exceeds the peer's
/// frame size `max`.
pub fn frame_header_block(
    tail: &mut BytesMut,
    start: usize,
    stream_id: u32,
    flags: u8,
    max: usize,
) {
    let block_len = tail.len() - start - HEADER_LEN;
    if block_len <= max {
        let len = block_len as u32;
        tail[start..start + 5].copy_from_slice(&[
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            HEADERS,
            flags | END_HEADERS,
        ]);
        tail[start + 5..start + 9].copy_from_slice(&stream_id.to_be_bytes());
        return;
    }
    let block = tail.split_off(start + HEADER_LEN);
    tail.truncate(start);
    let mut kind = HEADERS;
    let mut chunks = block.chunks(max).peekable();
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        let f = if kind == HEADERS { flags } else { 0 } | if last { END_HEADERS } else { 0 };
        write_head(tail, chunk.len(), kind, f, stream_id);
        tail.extend_from_slice(chunk);
        kind = CONTINUATION;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_head_parses_back_and_the_reserved_bit_is_ignored() {
        let mut b = BytesMut::new();
        write_head(&mut b, 0x12345, HEADERS, END_HEADERS, 7);
        let h = Head::parse(&b);
        assert_eq!(
            (h.len, h.kind, h.flags, h.stream_id),
            (0x12345, HEADERS, END_HEADERS, 7)
        );
        b[5] |= 0x80;
        assert_eq!(Head::parse(&b).stream_id, 7);
    }
}
