//! A client's request as the upstream side sends it, whatever the client's protocol: what a
//! client side lends for one try ([`Outgoing`]) and where its body comes from
//! ([`BodySource`]: none, bytes in memory, an HTTP/1 connection's framed bytes, an HTTP/2
//! stream). The upstream side writes its own head and relays the body into its connection,
//! framed for its protocol (`upstream/mod.rs` for HTTP/1, `upstream/h2.rs` for HTTP/2).

use crate::http::codec::{Framing, RequestHead};
use crate::http::Scheme;
use crate::io::watch::{ConnWatch, Expired};
use crate::reply::h2_edge::EdgeBody;
use crate::reply::relay::BodyError;
use crate::reply::relay::{push_data, relay_body, Relay, Sink, FLUSH_AT};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// A body in memory up to this size goes out in the same write as the head.
const WITH_HEAD_UP_TO: usize = 16 * 1024;

/// What a client side lends the upstream side to send one try of its request.
pub(crate) struct Outgoing<'c, S> {
    /// The client's address as text and its scheme, for the forwarding headers.
    pub(crate) ip_text: &'c str,
    pub(crate) scheme: Scheme,
    pub(crate) watch: &'c ConnWatch,
    /// For the upstream head and the framed body: the client side's own output buffer.
    pub(crate) out: &'c mut Vec<u8>,
    pub(crate) body: BodySource<'c, S>,
}

/// Where a request body comes from.
pub(crate) enum BodySource<'c, S> {
    /// No body, or none left to send.
    None,
    /// In memory (a request weir makes itself): sent as it is, and again on a retry.
    Bytes(Bytes),
    /// Still on an HTTP/1 client connection.
    H1(H1Body<'c, S>),
    /// An HTTP/2 client's stream: DATA frames, then maybe trailers.
    H2(EdgeBody),
    /// An HTTP/3 client's request stream (`reply/h3_body.rs`); boxed, so that the other
    /// sources do not grow to its size.
    H3(Box<crate::reply::h3_body::H3Recv>),
    /// Held in a temporary file (`buffering` past its memory size): sent from there, and
    /// again on a retry.
    Spilled(Spilled),
}

/// A request body held in a file, from its start.
#[derive(Clone)]
pub(crate) struct Spilled {
    pub(crate) file: std::rc::Rc<std::fs::File>,
    pub(crate) len: u64,
}

/// Where an HTTP/1 request's body stands, for its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestBody {
    /// Still on the connection (local answers read and drop it before answering).
    Unread,
    /// Read completely (or there was none).
    Done,
    /// Abandoned part-way: the connection cannot carry another request.
    Broken,
}

/// A request body on an HTTP/1 connection: the bytes already read past the head, then the
/// stream, delimited by the head's framing.
pub(crate) struct H1Body<'c, S> {
    io: &'c mut S,
    buf: &'c mut BytesMut,
    framing: Framing,
    /// The client waits for `100 Continue` before it sends the body.
    owes_continue: bool,
    /// The connection's record of the body, set once it has been relayed.
    state: &'c mut RequestBody,
}

impl<'c, S: AsyncRead + AsyncWrite + Unpin> H1Body<'c, S> {
    pub(crate) fn new(
        io: &'c mut S,
        buf: &'c mut BytesMut,
        req: &RequestHead,
        state: &'c mut RequestBody,
    ) -> H1Body<'c, S> {
        H1Body {
            io,
            buf,
            framing: req.framing,
            owes_continue: req.expect_continue && *state == RequestBody::Unread,
            state,
        }
    }

    /// Relays the body into `sink` after the bytes `out` holds, chunked when `chunked_out`;
    /// first answers `100 Continue` when the client waits for it. Returns the body bytes read.
    pub(crate) async fn relay<W: AsyncWrite + Unpin>(
        self,
        sink: &mut Sink<'_, W>,
        out: &mut Vec<u8>,
        chunked_out: bool,
        relay: &Relay<'_>,
    ) -> Result<u64, BodyError> {
        if self.owes_continue
            && self
                .io
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
        {
            return Err(BodyError::Source);
        }
        let sent = relay_body(
            self.io,
            self.buf,
            self.framing,
            sink,
            out,
            chunked_out,
            relay,
        )
        .await;
        *self.state = match &sent {
            Ok(_) => RequestBody::Done,
            // Nothing of the body was taken: the connection can still carry it to a drain.
            Err(BodyError::Sink | BodyError::SinkStalled) if self.framing == Framing::None => {
                RequestBody::Done
            }
            Err(_) => RequestBody::Broken,
        };
        sent
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> BodySource<'_, S> {
    /// Relays the body into `sink` after the bytes `out` holds (the upstream head), chunked
    /// when `chunked_out`: reads wait under the relay's read limit, writes under its write
    /// limit. Returns the body bytes relayed.
    pub(crate) async fn relay<W: AsyncWrite + Unpin>(
        self,
        sink: &mut W,
        out: &mut Vec<u8>,
        chunked_out: bool,
        relay: &Relay<'_>,
    ) -> Result<u64, BodyError> {
        match self {
            BodySource::None => {
                relay.flush(&mut Sink::plain(Some(sink)), out).await?;
                Ok(0)
            }
            BodySource::Bytes(body) => relay_bytes(body, sink, out, chunked_out, relay).await,
            BodySource::H1(h1) => {
                h1.relay(&mut Sink::plain(Some(sink)), out, chunked_out, relay)
                    .await
            }
            BodySource::H2(frames) => relay_frames(frames, sink, out, chunked_out, relay).await,
            BodySource::H3(recv) => {
                crate::reply::h3_body::relay_h3(*recv, sink, out, chunked_out, relay).await
            }
            BodySource::Spilled(spilled) => {
                relay_spilled(&spilled, sink, out, chunked_out, relay).await
            }
        }
    }
}

/// A body held in a file, read a piece at a time (from the page cache, where it was just
/// written) and framed as the head declares.
async fn relay_spilled<W: AsyncWrite + Unpin>(
    spilled: &Spilled,
    sink: &mut W,
    out: &mut Vec<u8>,
    chunked_out: bool,
    relay: &Relay<'_>,
) -> Result<u64, BodyError> {
    use std::os::unix::fs::FileExt;
    let mut sink = Sink::plain(Some(sink));
    let mut piece = vec![0u8; FLUSH_AT];
    let mut sent = 0u64;
    while sent < spilled.len {
        let want = piece.len().min((spilled.len - sent) as usize);
        let read = spilled
            .file
            .read_at(&mut piece[..want], sent)
            .map_err(|_| BodyError::Source)?;
        if read == 0 {
            return Err(BodyError::Source);
        }
        push_data(out, &piece[..read], chunked_out);
        sent += read as u64;
        relay.flush(&mut sink, out).await?;
    }
    if chunked_out {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    relay.flush(&mut sink, out).await?;
    Ok(sent)
}

/// A body in memory: with the head in one write when it is small, all under one write limit.
async fn relay_bytes<W: AsyncWrite + Unpin>(
    body: Bytes,
    sink: &mut W,
    out: &mut Vec<u8>,
    chunked_out: bool,
    relay: &Relay<'_>,
) -> Result<u64, BodyError> {
    let writing = async {
        if chunked_out || body.len() <= WITH_HEAD_UP_TO {
            push_data(out, &body, chunked_out);
            if chunked_out {
                out.extend_from_slice(b"0\r\n\r\n");
            }
            sink.write_all(out).await
        } else {
            sink.write_all(out).await?;
            sink.write_all(&body).await
        }
    };
    let (what, limit) = relay.write;
    match relay.watch.within(relay.clock, what, limit, writing).await {
        Ok(Ok(())) => Ok(body.len() as u64),
        Ok(Err(_)) => Err(BodyError::Sink),
        Err(_) => Err(BodyError::SinkStalled),
    }
}

/// An HTTP/2 client's DATA frames as they arrive, framed as the head declares (a length, or
/// chunked). A frame's flow-control window is given back once it has been written, so a slow
/// upstream slows the client.
async fn relay_frames<W: AsyncWrite + Unpin>(
    mut frames: EdgeBody,
    sink: &mut W,
    out: &mut Vec<u8>,
    chunked_out: bool,
    relay: &Relay<'_>,
) -> Result<u64, BodyError> {
    let mut sink = Sink::plain(Some(sink));
    let mut sent = 0u64;
    let mut unreleased = 0usize;
    loop {
        let next = std::future::poll_fn(|cx| frames.poll_data(cx));
        let data = match relay
            .watch
            .within(relay.clock, relay.read.0, relay.read.1, next)
            .await
        {
            Ok(None) => break,
            Ok(Some(Ok(data))) => data,
            Ok(Some(Err(_))) => return Err(BodyError::Source),
            Err(Expired) => return Err(BodyError::SourceStalled),
        };
        push_data(out, &data, chunked_out);
        sent += data.len() as u64;
        unreleased += data.len();
        if out.len() >= FLUSH_AT {
            relay.flush(&mut sink, out).await?;
            frames.release_capacity(unreleased);
            unreleased = 0;
        }
    }
    if chunked_out {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    relay.flush(&mut sink, out).await?;
    Ok(sent)
}
