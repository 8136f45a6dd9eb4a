//! Reading HTTP/1 messages off a byte stream, for the harness's clients and its scripted
//! upstreams alike: heads are parsed by weir's own codec by the caller, bodies read here as
//! their framing says (chunked ones with weir's `ChunkedDecoder`).

use crate::http::codec::{ChunkEvent, ChunkedDecoder, Framing};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Reads more bytes into `buf`: how many, 0 at the end of the stream (an error counts as the
/// end: a reset is a close to a test).
pub(crate) async fn fill<R: AsyncRead + Unpin>(io: &mut R, buf: &mut BytesMut) -> usize {
    buf.reserve(16 * 1024);
    io.read_buf(buf).await.unwrap_or(0)
}

/// Reads a body delimited by `framing` from `buf` and then `io`, consuming it from `buf`
/// (what follows it stays there). A body cut short by the end of the stream is what came.
pub(crate) async fn read_body<R: AsyncRead + Unpin>(
    io: &mut R,
    buf: &mut BytesMut,
    framing: Framing,
) -> Vec<u8> {
    match framing {
        Framing::None => Vec::new(),
        Framing::Length(n) => {
            while (buf.len() as u64) < n && fill(io, buf).await > 0 {}
            let n = buf.len().min(n as usize);
            buf.split_to(n).to_vec()
        }
        Framing::UntilClose => {
            while fill(io, buf).await > 0 {}
            buf.split().to_vec()
        }
        Framing::Chunked => {
            let mut body = Vec::new();
            let mut decoder = ChunkedDecoder::default();
            loop {
                let (event, used) = decoder.decode(buf).expect("a valid chunked body");
                match event {
                    ChunkEvent::Data(start, end) => body.extend_from_slice(&buf[start..end]),
                    ChunkEvent::End(..) => {
                        buf.advance(used);
                        return body;
                    }
                    ChunkEvent::NeedMore => {}
                }
                buf.advance(used);
                if event == ChunkEvent::NeedMore && fill(io, buf).await == 0 {
                    return body;
                }
            }
        }
    }
}
