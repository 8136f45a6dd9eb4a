//! The body relay both client drivers share: a body moves from a source (the client, an
//! upstream connection) to a sink (an upstream, the client, or nowhere when it is drained)
//! through the response's body filter, re-framed on the way, with each wait under its own
//! limit (the connection's watch fires it).

use crate::http::codec::{header, push_hex, trailer_fields, ChunkEvent, ChunkedDecoder, Framing};
use crate::http::error::{ErrorKind, LocalError};
use crate::io::buffers::make_room;
use crate::io::watch::{Clock, ConnWatch, Expired, Waiting};
use crate::reply::body_filter::BodyFilter;
use crate::reply::BodyProducer;
use crate::servers::h2_conn::{RecvStream, SendStream};
use crate::worker::Worker;
use bytes::{Buf, Bytes, BytesMut};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Buffered output is written once it reaches this size.
pub(crate) const FLUSH_AT: usize = 64 * 1024;
/// A body in memory up to this size is copied behind its head and sent in one write; a
/// larger one goes out from where it is, beside the head (a vectored write). At 16 KiB, an
/// 8 KB answer just stored by the cache was copied once more on its way out: at 4 KiB its
/// miss spent 0.9 µs less user time and 0.6 µs more system time (`writev` of two slices).
const COPY_BODY_UNDER: usize = 4 * 1024;

/// How a body transfer failed.
#[derive(Debug, Clone, Copy)]
pub enum BodyError {
    /// The sending side closed or failed before the body ended.
    Source,
    /// The sending side went quiet for longer than its limit.
    SourceStalled,
    /// The body's framing is invalid.
    Malformed,
    /// More than the allowed number of bytes.
    TooLarge,
    /// The receiving side failed.
    Sink,
    /// The receiving side took nothing for longer than its limit.
    SinkStalled,
}

impl BodyError {
    /// The answer owed to a client whose own request body failed: bad framing or silence.
    pub fn client_answer(self) -> Option<LocalError> {
        let (status, kind, message) = self.client_failure()?;
        Some(LocalError::new(status, kind, message))
    }

    /// The same as its parts.
    pub fn client_failure(self) -> Option<(u16, ErrorKind, &'static str)> {
        Some(match self {
            BodyError::Malformed => (400, ErrorKind::MalformedBody, "malformed request body"),
            BodyError::SourceStalled => (
                408,
                ErrorKind::BodyTimeout,
                "timed out reading the request body",
            ),
            BodyError::TooLarge => (
                413,
                ErrorKind::BodyTooLarge,
                "the request body is too large",
            ),
            _ => return None,
        })
    }
}

/// What a write under a deadline ended with, as a body transfer tells it.
#[inline]
pub(crate) fn written(result: Result<std::io::Result<()>, Expired>) -> Result<(), BodyError> {
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(BodyError::Sink),
        Err(Expired) => Err(BodyError::SinkStalled),
    }
}

/// The limits of one body relay: how long a read from the source and a write to the sink may
/// wait (each wait re-arms the connection's watch), and how many bytes may pass.
pub(crate) struct Relay<'a> {
    pub(crate) clock: &'a Clock,
    pub(crate) watch: &'a ConnWatch,
    pub(crate) read: (Waiting, Duration),
    pub(crate) write: (Waiting, Duration),
    pub(crate) max_bytes: u64,
}

impl<'a> Relay<'a> {
    /// Writes to the client under `client_send_timeout`, with nothing to read (a local or
    /// file body).
    pub(crate) fn to_client(worker: &'a Worker, watch: &'a ConnWatch) -> Relay<'a> {
        Relay {
            clock: &worker.clock,
            watch,
            read: (Waiting::ResponseBody, Duration::ZERO),
            write: (Waiting::ClientWrite, worker.timeouts.get().send),
            max_bytes: u64::MAX,
        }
    }

    /// A client's request body to an upstream: reads under `client_body_timeout`, writes
    /// under the service's `timeouts.write`.
    pub(crate) fn to_upstream(
        worker: &'a Worker,
        watch: &'a ConnWatch,
        write_limit: Duration,
    ) -> Relay<'a> {
        Relay {
            clock: &worker.clock,
            watch,
            read: (Waiting::RequestBody, worker.timeouts.get().body),
            write: (Waiting::UpstreamWrite, write_limit),
            max_bytes: u64::MAX,
        }
    }

    /// An upstream's response body to the client: reads under the service's `timeouts.read`,
    /// writes under `client_send_timeout`.
    pub(crate) fn to_client_from_upstream(
        worker: &'a Worker,
        watch: &'a ConnWatch,
        read_timeout: Duration,
    ) -> Relay<'a> {
        Relay {
            clock: &worker.clock,
            watch,
            read: (Waiting::ResponseBody, read_timeout),
            write: (Waiting::ClientWrite, worker.timeouts.get().send),
            max_bytes: u64::MAX,
        }
    }

    async fn fill<R: AsyncRead + Unpin>(
        &self,
        src: &mut R,
        buf: &mut BytesMut,
    ) -> Result<(), BodyError> {
        make_room(buf);
        let (what, limit) = self.read;
        let read = src.read_buf(buf);
        match self.watch.within(self.clock, what, limit, read).await {
            Ok(Ok(0)) | Ok(Err(_)) => Err(BodyError::Source),
            Ok(Ok(_)) => Ok(()),
            Err(Expired) => Err(BodyError::SourceStalled),
        }
    }

    pub(crate) async fn flush<W: AsyncWrite + Unpin>(
        &self,
        sink: &mut Sink<'_, W>,
        out: &mut Vec<u8>,
    ) -> Result<(), BodyError> {
        if !out.is_empty() {
            if let Some(io) = &mut sink.io {
                let (what, limit) = self.write;
                let write = io.write_all(out);
                written(self.watch.within(self.clock, what, limit, write).await)?;
            }
            out.clear();
        }
        Ok(())
    }

    /// Writes the head in `out`, then `body`, under the write limit.
    pub(crate) async fn send_bytes<W: AsyncWrite + Unpin>(
        &self,
        io: &mut W,
        out: &mut Vec<u8>,
        body: &[u8],
    ) -> Result<(), BodyError> {
        if body.len() < COPY_BODY_UNDER {
            out.extend_from_slice(body);
            return self.flush(&mut Sink::plain(Some(io)), out).await;
        }
        let (what, limit) = self.write;
        let write = write_all_vectored(io, out, body);
        let result = self.watch.within(self.clock, what, limit, write).await;
        out.clear();
        written(result)
    }
}

/// Writes `head` then `body` with as few calls as the socket allows.
async fn write_all_vectored<W: AsyncWrite + Unpin>(
    io: &mut W,
    mut head: &[u8],
    mut body: &[u8],
) -> io::Result<()> {
    while !head.is_empty() || !body.is_empty() {
        let slices = [io::IoSlice::new(head), io::IoSlice::new(body)];
        let written = io.write_vectored(&slices).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_head = written.min(head.len());
        head = &head[from_head..];
        body = &body[written - from_head..];
    }
    Ok(())
}

/// Where a relayed body goes: a stream (none when it is drained), through the response's
/// body filter if one is installed.
pub(crate) struct Sink<'a, W> {
    pub(crate) io: Option<&'a mut W>,
    pub(crate) filter: Option<&'a mut BodyFilter>,
    /// Bytes the filter produced (what the client gets, for the log).
    pub(crate) sent: u64,
    /// With `Some`, a chunked body's trailer fields are kept here instead of framed (an
    /// HTTP/2 client gets them as a HEADERS frame).
    pub(crate) trailers: Option<Vec<u8>>,
}

impl<'a, W> Sink<'a, W> {
    pub(crate) fn plain(io: Option<&'a mut W>) -> Sink<'a, W> {
        Sink {
            io,
            filter: None,
            sent: 0,
            trailers: None,
        }
    }

    /// A sink through the reply's body filter, if it has one (trailers framed in the body).
    pub(crate) fn through(io: &'a mut W, filter: Option<&'a mut BodyFilter>) -> Sink<'a, W> {
        Sink {
            io: Some(io),
            filter,
            sent: 0,
            trailers: None,
        }
    }

    /// The body bytes the client got: the filter's output when there is one, else the
    /// `relayed` bytes as they came.
    #[inline]
    pub(crate) fn counted(&self, relayed: u64) -> u64 {
        if self.filter.is_some() {
            self.sent
        } else {
            relayed
        }
    }

    /// Frames a piece of the body into `out`, filtered if a filter is installed.
    pub(crate) fn push(
        &mut self,
        out: &mut Vec<u8>,
        data: &[u8],
        chunked: bool,
    ) -> Result<(), BodyError> {
        if self.filter.is_none() {
            push_data(out, data, chunked);
            return Ok(());
        }
        self.filtered(out, chunked, |filter| filter.write(data))
    }

    /// The source has nothing more for now: a filter emits what it holds back, so a stream
    /// that pauses (server-sent events) reaches the client.
    fn pause(&mut self, out: &mut Vec<u8>, chunked: bool) -> Result<(), BodyError> {
        self.filtered(out, chunked, BodyFilter::flush)
    }

    /// The body's trailers: kept by a filter that writes them into the body (gRPC-Web),
    /// else returned to be sent as trailers.
    fn hand_trailers(&mut self, trailers: Option<http::HeaderMap>) -> Option<http::HeaderMap> {
        match &mut self.filter {
            Some(filter) if filter.takes_trailers() => {
                filter.take_trailers(trailers);
                None
            }
            _ => trailers,
        }
    }

    /// The same for an HTTP/1 chunked body's trailer section: whether a filter took it.
    fn hand_trailer_section(&mut self, raw: &[u8]) -> bool {
        match &mut self.filter {
            Some(filter) if filter.takes_trailers() => {
                filter.take_trailers(Some(trailer_fields(raw)));
                true
            }
            _ => false,
        }
    }

    /// The body has ended: a filter emits its last bytes.
    pub(crate) fn end(&mut self, out: &mut Vec<u8>, chunked: bool) -> Result<(), BodyError> {
        self.filtered(out, chunked, BodyFilter::finish)
    }

    /// Frames what `step` makes the filter produce (nothing without a filter), counting it.
    fn filtered(
        &mut self,
        out: &mut Vec<u8>,
        chunked: bool,
        step: impl FnOnce(&mut BodyFilter) -> std::io::Result<&[u8]>,
    ) -> Result<(), BodyError> {
        if let Some(filter) = &mut self.filter {
            let produced = step(filter).map_err(|_| BodyError::Sink)?;
            self.sent += produced.len() as u64;
            push_data(out, produced, chunked);
        }
        Ok(())
    }
}

/// Streams one message body from `src` (its buffered bytes first) to `sink`, re-framing it
/// as chunked when `chunked_out`. Bytes already in `out` (a head) go out first, in the
/// same write when the body is small. Returns the body bytes read from `src`.
pub(crate) async fn relay_body<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    src: &mut R,
    buf: &mut BytesMut,
    framing: Framing,
    sink: &mut Sink<'_, W>,
    out: &mut Vec<u8>,
    chunked_out: bool,
    relay: &Relay<'_>,
) -> Result<u64, BodyError> {
    let mut relayed: u64 = 0;
    match framing {
        Framing::None => {}
        Framing::Length(total) => {
            let mut remaining = total;
            while remaining > 0 {
                if buf.is_empty() {
                    sink.pause(out, chunked_out)?;
                    relay.flush(sink, out).await?;
                    relay.fill(src, buf).await?;
                }
                let take = remaining.min(buf.len() as u64) as usize;
                sink.push(out, &buf[..take], chunked_out)?;
                buf.advance(take);
                remaining -= take as u64;
                relayed += take as u64;
                if relayed > relay.max_bytes {
                    return Err(BodyError::TooLarge);
                }
                if out.len() >= FLUSH_AT {
                    relay.flush(sink, out).await?;
                }
            }
            sink.end(out, chunked_out)?;
            if chunked_out {
                out.extend_from_slice(b"0\r\n\r\n");
            }
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::default();
            loop {
                let (event, used) = decoder.decode(buf).map_err(|_| BodyError::Malformed)?;
                match event {
                    ChunkEvent::Data(start, end) => {
                        sink.push(out, &buf[start..end], chunked_out)?;
                        relayed += (end - start) as u64;
                        buf.advance(used);
                        if relayed > relay.max_bytes {
                            return Err(BodyError::TooLarge);
                        }
                        if out.len() >= FLUSH_AT {
                            relay.flush(sink, out).await?;
                        }
                    }
                    ChunkEvent::End(start, end) => {
                        let taken = sink.hand_trailer_section(&buf[start..end]);
                        sink.end(out, chunked_out)?;
                        // Trailers pass on when the output is chunked too (HTTP/1.0 has none).
                        if taken {
                            if chunked_out {
                                out.extend_from_slice(b"0\r\n\r\n");
                            }
                        } else if chunked_out {
                            out.extend_from_slice(b"0\r\n");
                            out.extend_from_slice(&buf[start..end]);
                            out.extend_from_slice(b"\r\n");
                        } else if let Some(kept) = &mut sink.trailers {
                            kept.extend_from_slice(&buf[start..end]);
                        }
                        buf.advance(used);
                        break;
                    }
                    ChunkEvent::NeedMore => {
                        buf.advance(used);
                        sink.pause(out, chunked_out)?;
                        relay.flush(sink, out).await?;
                        relay.fill(src, buf).await?;
                    }
                }
            }
        }
        Framing::UntilClose => loop {
            if !buf.is_empty() {
                sink.push(out, buf, chunked_out)?;
                relayed += buf.len() as u64;
                buf.clear();
            }
            sink.pause(out, chunked_out)?;
            relay.flush(sink, out).await?;
            if relayed > relay.max_bytes {
                return Err(BodyError::TooLarge);
            }
            match relay.fill(src, buf).await {
                Ok(()) => {}
                Err(BodyError::SourceStalled) => return Err(BodyError::SourceStalled),
                Err(_) => {
                    sink.end(out, chunked_out)?;
                    if chunked_out {
                        out.extend_from_slice(b"0\r\n\r\n");
                    }
                    break;
                }
            }
        },
    }
    relay.flush(sink, out).await?;
    Ok(relayed)
}

/// Streams an HTTP/2 upstream's response body (DATA frames, then trailers) to `sink`. What
/// has arrived goes out together and a pause flushes it, so streamed messages (gRPC,
/// server-sent events) are not held back; each frame's window is given back once it has been
/// written, so a slow client slows the upstream. With `chunked_out` the trailers end the
/// chunked body; otherwise they are returned, for an HTTP/2 client's HEADERS frame; a body
/// filter that takes them (gRPC-Web) gets them before the body's end instead.
pub(crate) async fn relay_stream<W: AsyncWrite + Unpin>(
    recv: &mut RecvStream,
    sink: &mut Sink<'_, W>,
    out: &mut Vec<u8>,
    chunked_out: bool,
    relay: &Relay<'_>,
) -> Result<(u64, Option<http::HeaderMap>), BodyError> {
    let mut relayed = 0u64;
    let mut unreleased = 0usize;
    let (what, limit) = relay.read;
    loop {
        let now = std::future::poll_fn(|cx| Poll::Ready(recv.poll_data(cx))).await;
        let next = match now {
            Poll::Ready(next) => next,
            Poll::Pending => {
                sink.pause(out, chunked_out)?;
                relay.flush(sink, out).await?;
                recv.release_capacity(unreleased);
                unreleased = 0;
                let later = std::future::poll_fn(|cx| recv.poll_data(cx));
                match relay.watch.within(relay.clock, what, limit, later).await {
                    Ok(next) => next,
                    Err(Expired) => return Err(BodyError::SourceStalled),
                }
            }
        };
        match next {
            None => break,
            Some(Err(_)) => return Err(BodyError::Source),
            Some(Ok(data)) => {
                sink.push(out, &data, chunked_out)?;
                relayed += data.len() as u64;
                unreleased += data.len();
                if out.len() >= FLUSH_AT {
                    relay.flush(sink, out).await?;
                    recv.release_capacity(unreleased);
                    unreleased = 0;
                }
            }
        }
    }
    let trailers = std::future::poll_fn(|cx| recv.poll_trailers(cx));
    let trailers = match relay.watch.within(relay.clock, what, limit, trailers).await {
        Ok(Ok(trailers)) => trailers,
        Ok(Err(_)) => return Err(BodyError::Source),
        Err(Expired) => return Err(BodyError::SourceStalled),
    };
    let trailers = sink.hand_trailers(trailers);
    sink.end(out, chunked_out)?;
    let trailers = if chunked_out {
        out.extend_from_slice(b"0\r\n");
        for (name, value) in trailers.iter().flatten() {
            header(out, name.as_str().as_bytes(), value.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        None
    } else {
        trailers
    };
    relay.flush(sink, out).await?;
    recv.release_capacity(unreleased);
    Ok((relayed, trailers))
}

/// Streams a body its producer makes as it is pulled (a Lua script's streamed answer) to
/// `sink`: each piece is framed, the filter flushed and the piece written before the next is
/// asked for. When the client is gone, the producer is told and run to its own end (as after
/// the body's end: a script may go on after `ngx.eof`). Returns the body bytes produced.
pub(crate) async fn relay_produced<W: AsyncWrite + Unpin>(
    producer: &mut dyn BodyProducer,
    sink: &mut Sink<'_, W>,
    out: &mut Vec<u8>,
    chunked_out: bool,
    relay: &Relay<'_>,
) -> Result<u64, BodyError> {
    let mut relayed = 0u64;
    let mut written = Ok(());
    let mut ahead = Ahead::default();
    loop {
        let piece = match ahead.pieces.pop_front() {
            Some(piece) => {
                ahead.bytes -= piece.as_ref().map_or(0, Bytes::len);
                Some(piece)
            }
            None if ahead.ended => None,
            None => std::future::poll_fn(|cx| producer.poll_piece(cx)).await,
        };
        let Some(piece) = piece else {
            break;
        };
        let Ok(piece) = piece else {
            return Err(BodyError::Source);
        };
        relayed += piece.len() as u64;
        written = sink.push(out, &piece, chunked_out);
        if written.is_ok() {
            written = sink.pause(out, chunked_out);
        }
        if written.is_ok() {
            let write = relay.flush(sink, out);
            written = ahead.write_running(producer, write).await;
        }
        if written.is_err() {
            break;
        }
    }
    if written.is_ok() {
        written = sink.end(out, chunked_out);
        if chunked_out {
            out.extend_from_slice(b"0\r\n\r\n");
        }
        if written.is_ok() {
            written = relay.flush(sink, out).await;
        }
    }
    let gone = written.is_err();
    std::future::poll_fn(|cx| producer.poll_rest(cx, gone)).await;
    written.map(|()| relayed)
}

/// Pieces a producer that runs on while its output is written made ahead of the writes.
#[derive(Default)]
struct Ahead {
    pieces: std::collections::VecDeque<Result<Bytes, ()>>,
    /// Their bytes: past `AHEAD_UP_TO`, the producer waits for the writes.
    bytes: usize,
    /// The producer said its body ended.
    ended: bool,
}

/// How far a producer that runs on may get ahead of the client (nginx keeps no bound: a
/// script flushing to a client that reads nothing would fill the worker's memory).
const AHEAD_UP_TO: usize = 1 << 20;

impl Ahead {
    /// Awaits `write`, meanwhile asking a producer that `runs_on` for its next pieces.
    async fn write_running<F: std::future::Future<Output = Result<(), BodyError>>>(
        &mut self,
        producer: &mut dyn BodyProducer,
        write: F,
    ) -> Result<(), BodyError> {
        let mut write = std::pin::pin!(write);
        std::future::poll_fn(|cx| {
            while !self.ended && self.bytes < AHEAD_UP_TO && producer.runs_on() {
                match producer.poll_piece(cx) {
                    Poll::Ready(Some(piece)) => {
                        self.bytes += piece.as_ref().map_or(0, Bytes::len);
                        self.pieces.push_back(piece);
                    }
                    Poll::Ready(None) => self.ended = true,
                    Poll::Pending => break,
                }
            }
            write.as_mut().poll(cx)
        })
        .await
    }
}

/// Appends a piece of body, as a chunk when `chunked`.
pub(crate) fn push_data(out: &mut Vec<u8>, data: &[u8], chunked: bool) {
    if data.is_empty() {
        return;
    }
    if chunked {
        push_hex(out, data.len() as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    } else {
        out.extend_from_slice(data);
    }
}

/// A stream's send side as a byte sink: each write is queued as DATA once the stream's queue
/// has room, waiting while the server's window and the socket hold it full (so a slow reader
/// slows the relay, and the relay's deadline covers the wait).
pub(crate) struct DataOut<'a>(pub(crate) &'a mut SendStream);

impl AsyncWrite for DataOut<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let send = &mut *self.get_mut().0;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        match send.poll_room(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(_)) => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            Poll::Ready(Ok(())) => {}
        }
        send.send_data(Bytes::copy_from_slice(buf), false)
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Waker};

    /// Hands 100,000-byte pieces, each as soon as asked, and runs on while they are written.
    struct Eager {
        asked: usize,
        runs_on: bool,
    }

    impl BodyProducer for Eager {
        fn poll_piece(&mut self, _: &mut Context<'_>) -> Poll<Option<Result<Bytes, ()>>> {
            self.asked += 1;
            Poll::Ready(Some(Ok(Bytes::from(vec![b'x'; 100_000]))))
        }
        fn poll_rest(&mut self, _: &mut Context<'_>, _: bool) -> Poll<()> {
            Poll::Ready(())
        }
        fn runs_on(&self) -> bool {
            self.runs_on
        }
    }

    /// Polls `write_running` once with a write that never finishes (a client reading nothing).
    fn ahead_of_a_stuck_write(producer: &mut Eager) -> Ahead {
        let mut ahead = Ahead::default();
        let stuck = std::future::pending::<Result<(), BodyError>>();
        let mut cx = Context::from_waker(Waker::noop());
        {
            let running = std::pin::pin!(ahead.write_running(producer, stuck));
            assert!(running.poll(&mut cx).is_pending());
        }
        ahead
    }

    #[test]
    fn a_producer_that_runs_on_gets_at_most_a_mebibyte_ahead_of_the_client() {
        let mut producer = Eager {
            asked: 0,
            runs_on: true,
        };
        let ahead = ahead_of_a_stuck_write(&mut producer);
        // Asked until 1 MiB is queued: 11 pieces of 100,000 bytes.
        assert_eq!(producer.asked, 11);
        assert_eq!(ahead.pieces.len(), 11);
        assert_eq!(ahead.bytes, 1_100_000);
    }

    #[test]
    fn a_producer_that_waits_for_its_writes_is_not_asked_meanwhile() {
        let mut producer = Eager {
            asked: 0,
            runs_on: false,
        };
        let ahead = ahead_of_a_stuck_write(&mut producer);
        assert_eq!(producer.asked, 0);
        assert!(ahead.pieces.is_empty());
    }
}
