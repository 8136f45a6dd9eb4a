//! An HTTP/3 client's request body as the upstream side sends it: the stream's DATA frames as
//! they arrive, framed for an HTTP/1 server (a length, or chunked), or pumped into an HTTP/2
//! stream by a task of its own while the response comes back. QUIC gives the client credit
//! back only as weir reads, so a slow upstream slows the client and memory stays bounded.

use crate::io::watch::Expired;
use crate::reply::relay::{push_data, BodyError, Relay, Sink, FLUSH_AT};
use crate::servers::h2_conn::{send_in_window, SendStream};
use bytes::{Buf, Bytes};
use tokio::io::AsyncWrite;

/// The receiving half of an HTTP/3 request stream.
pub(crate) type H3Stream = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// An HTTP/3 request body: what the driver read while deciding whether one follows, then the
/// rest of the stream.
pub(crate) struct H3Recv {
    pub(crate) first: Option<Bytes>,
    pub(crate) stream: H3Stream,
}

/// Relays the body into `sink` after the bytes `out` holds (the upstream head), chunked when
/// `chunked_out`; reads wait under the relay's read limit. Returns the body bytes relayed.
pub(crate) async fn relay_h3<W: AsyncWrite + Unpin>(
    recv: H3Recv,
    sink: &mut W,
    out: &mut Vec<u8>,
    chunked_out: bool,
    relay: &Relay<'_>,
) -> Result<u64, BodyError> {
    let H3Recv { first, mut stream } = recv;
    let mut sink = Sink::plain(Some(sink));
    let mut sent = 0u64;
    if let Some(first) = first {
        push_data(out, &first, chunked_out);
        sent += first.len() as u64;
    }
    loop {
        let next = std::future::poll_fn(|cx| stream.poll_recv_data(cx));
        let mut data = match relay
            .watch
            .within(relay.clock, relay.read.0, relay.read.1, next)
            .await
        {
            Ok(Ok(Some(data))) => data,
            Ok(Ok(None)) => break,
            Ok(Err(_)) => return Err(BodyError::Source),
            Err(Expired) => return Err(BodyError::SourceStalled),
        };
        while data.has_remaining() {
            let piece = data.chunk();
            push_data(out, piece, chunked_out);
            sent += piece.len() as u64;
            let len = piece.len();
            data.advance(len);
        }
        if out.len() >= FLUSH_AT {
            relay.flush(&mut sink, out).await?;
        }
    }
    if chunked_out {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    relay.flush(&mut sink, out).await?;
    Ok(sent)
}

/// Moves the body into an HTTP/2 upstream's stream as it arrives, each piece once the server's
/// window takes it, so a streaming call (gRPC's client and bidirectional streams) flows both
/// ways at once; trailers pass on, and a reset of the client's stream resets the upstream's.
pub(crate) async fn pump_h3(recv: H3Recv, mut send: SendStream) {
    let H3Recv { first, mut stream } = recv;
    if let Some(first) = first {
        if send_in_window(&mut send, first).await.is_err() {
            return;
        }
    }
    loop {
        match stream.recv_data().await {
            Ok(Some(mut data)) => {
                let piece = data.copy_to_bytes(data.remaining());
                if send_in_window(&mut send, piece).await.is_err() {
                    return;
                }
            }
            Ok(None) => break,
            Err(_) => return send.send_reset(weir_h2::Reason::CANCEL),
        }
    }
    match stream.recv_trailers().await {
        Ok(Some(trailers)) => {
            let _ = send.send_trailers(trailers);
        }
        Ok(None) => {
            let _ = send.send_data(Bytes::new(), true);
        }
        Err(_) => send.send_reset(weir_h2::Reason::CANCEL),
    }
}
