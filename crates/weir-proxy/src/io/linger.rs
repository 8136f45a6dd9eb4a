//! Lingering close: how a connection weir ends is closed without destroying what it last sent.

use crate::io::buffers::{make_room, Buffers};
use crate::io::watch::{Clock, ConnWatch, Waiting};
use bytes::BytesMut;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The most a lingering connection may still send before it is dropped.
pub const LINGER_MAX_BYTES: usize = 8 << 20;
/// How long a lingering connection may stay quiet before it is dropped.
pub const LINGER_TIMEOUT: Duration = Duration::from_secs(5);

/// Shuts down weir's side, then reads and drops input until the client closes, goes quiet for
/// `quiet`, or has sent `LINGER_MAX_BYTES`. Closing a socket with unread input sends a reset,
/// and a reset can destroy the answer (or the HTTP/2 GOAWAY) before the client reads it.
/// `buf` is used as the read buffer; one is lent from `buffers` when it has no room.
pub async fn linger<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    (clock, buffers): (&Clock, &Buffers),
    watch: &ConnWatch,
    quiet: Duration,
) {
    if io.shutdown().await.is_err() {
        return;
    }
    if buf.capacity() == 0 {
        *buf = buffers.take_read();
    }
    let mut discarded = 0;
    while discarded < LINGER_MAX_BYTES {
        buf.clear();
        make_room(buf);
        let read = io.read_buf(buf);
        match watch.within(clock, Waiting::RequestBody, quiet, read).await {
            Ok(Ok(n)) if n > 0 => discarded += n,
            _ => return,
        }
    }
}
