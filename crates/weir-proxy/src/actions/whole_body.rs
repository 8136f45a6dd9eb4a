//! Reading an upstream answer's body whole into memory, at most `max` bytes: a declared
//! length, chunked, or until close over HTTP/1, or a declared length over HTTP/2. For the
//! cache's fill and the Elasticsearch `_bulk` merge. Over HTTP/1 a body of unknown length is
//! consumed from the connection's buffer only once it is whole, so one that turns out too
//! large can still be relayed from its first byte; a declared length is judged before reading.

use crate::http::codec::{ChunkEvent, ChunkedDecoder, Framing, ResponseHead};
use crate::io::buffers::make_room;
use crate::io::watch::{ConnWatch, Waiting};
use crate::reply::ReplyBody;
use crate::servers::balancer::UpstreamUse;
use crate::servers::h2_pool::H2Body;
use crate::servers::pool::UpstreamConn;
use crate::worker::Worker;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::time::Duration;
use tokio::io::AsyncReadExt;

pub(crate) enum Whole {
    /// The body, and whether the connection is left clean for reuse.
    Body(Bytes, bool),
    /// Over `max`: every byte read is still in the connection's buffer.
    TooLarge,
    /// The connection failed or went quiet before the body ended.
    Failed,
}

/// Reads bodies whole, at most `max` bytes, each read under `read_timeout`.
pub(crate) struct Reader<'a> {
    pub(crate) worker: &'a Worker,
    pub(crate) watch: &'a ConnWatch,
    pub(crate) read_timeout: Duration,
    pub(crate) max: u64,
}

impl Reader<'_> {
    /// Reads more of `up` into its buffer: how many bytes (0 at its end), or `None` when the
    /// read failed or went quiet.
    async fn read_more(&self, up: &mut UpstreamConn) -> Option<usize> {
        make_room(&mut up.buf);
        self.read_into(up, None).await
    }

    /// Reads from `up` into `body` up to its length `n` (into `up`'s buffer when `None`)
    /// under `read_timeout`: how many bytes, or `None` when the read failed or went quiet.
    async fn read_into(
        &self,
        up: &mut UpstreamConn,
        body: Option<(&mut Vec<u8>, usize)>,
    ) -> Option<usize> {
        let read = async {
            match body {
                // No further than the body's size: what follows is the connection's next answer.
                Some((body, n)) => {
                    let wanted = n - body.len();
                    up.io.read_buf(&mut body.limit(wanted)).await
                }
                None => up.io.read_buf(&mut up.buf).await,
            }
        };
        let waited = self.watch.within(
            &self.worker.clock,
            Waiting::ResponseBody,
            self.read_timeout,
            read,
        );
        waited.await.ok()?.ok()
    }

    /// An HTTP/1 body. One of unknown length is consumed from the buffer only once whole.
    pub(crate) async fn h1(&self, up: &mut UpstreamConn, framing: Framing) -> Whole {
        match framing {
            Framing::None => Whole::Body(Bytes::new(), true),
            Framing::Length(n) if n > self.max => Whole::TooLarge,
            Framing::Length(n) => {
                // Read into a body of its exact size: growing the connection's buffer to hold
                // a large answer and copying it out cost a 1,000-item `_bulk` answer a third
                // of weir's CPU in fresh pages and copies.
                let n = n as usize;
                if up.buf.len() >= n {
                    let body = Bytes::copy_from_slice(&up.buf[..n]);
                    up.buf.advance(n);
                    return Whole::Body(body, true);
                }
                let mut body = Vec::with_capacity(n);
                body.extend_from_slice(&up.buf);
                up.buf.clear();
                while body.len() < n {
                    if !matches!(self.read_into(up, Some((&mut body, n))).await, Some(1..)) {
                        return Whole::Failed;
                    }
                }
                Whole::Body(Bytes::from(body), true)
            }
            Framing::Chunked => {
                let mut decoder = ChunkedDecoder::default();
                let mut scanned = 0;
                let mut body = BytesMut::new();
                loop {
                    match decoder.decode(&up.buf[scanned..]) {
                        Ok((ChunkEvent::Data(start, end), used)) => {
                            body.extend_from_slice(&up.buf[scanned + start..scanned + end]);
                            scanned += used;
                            if body.len() as u64 > self.max {
                                return Whole::TooLarge;
                            }
                        }
                        Ok((ChunkEvent::End(..), used)) => {
                            // Trailers are dropped.
                            up.buf.advance(scanned + used);
                            return Whole::Body(Bytes::copy_from_slice(&body), true);
                        }
                        Ok((ChunkEvent::NeedMore, used)) => {
                            scanned += used;
                            if !matches!(self.read_more(up).await, Some(1..)) {
                                return Whole::Failed;
                            }
                        }
                        Err(_) => return Whole::Failed,
                    }
                }
            }
            Framing::UntilClose => loop {
                if up.buf.len() as u64 > self.max {
                    return Whole::TooLarge;
                }
                match self.read_more(up).await {
                    Some(0) => return Whole::Body(Bytes::copy_from_slice(&up.buf), false),
                    Some(_) => {}
                    None => return Whole::Failed,
                }
            },
        }
    }

    /// The body of a reply whose head is `response`, read whole: the bytes, the connection
    /// (when left clean) back in the pool. `Err(Some(body))`: over `max` (or not readable
    /// whole, such as an HTTP/2 body of unknown length), handed back untouched to be relayed
    /// from its first byte; `Err(None)`: the body failed midway.
    pub(crate) async fn reply_body(
        &self,
        response: &ResponseHead,
        body: ReplyBody,
        upstream: &Option<UpstreamUse<'_>>,
    ) -> Result<Bytes, Option<ReplyBody>> {
        match body {
            ReplyBody::Upstream(mut up) => match self.h1(&mut up, response.framing).await {
                Whole::Body(bytes, reusable) => {
                    if let (true, true, Some(used)) = (reusable, response.keep_alive, upstream) {
                        used.check_in(&self.worker.pool, up);
                    }
                    Ok(bytes)
                }
                Whole::TooLarge => Err(Some(ReplyBody::Upstream(up))),
                Whole::Failed => Err(None),
            },
            ReplyBody::Stream(stream) => match self.h2(stream, response.framing).await {
                Ok(Some(bytes)) => Ok(bytes),
                Ok(None) => Err(None),
                Err(stream) => Err(Some(ReplyBody::Stream(stream))),
            },
            ReplyBody::Local => Ok(Bytes::new()),
            other => Err(Some(other)),
        }
    }

    /// An HTTP/2 body with a declared length within `max` (others are handed back: `Err`); `None` when the
    /// stream failed.
    pub(crate) async fn h2(
        &self,
        mut stream: H2Body,
        framing: Framing,
    ) -> Result<Option<Bytes>, H2Body> {
        let n = match framing {
            Framing::Length(n) if n <= self.max => n,
            _ => return Err(stream),
        };
        let mut body = BytesMut::with_capacity(n as usize);
        loop {
            let data = stream.recv.data();
            let waited = self.watch.within(
                &self.worker.clock,
                Waiting::ResponseBody,
                self.read_timeout,
                data,
            );
            match waited.await {
                Ok(Some(Ok(chunk))) => {
                    stream.recv.release_capacity(chunk.len());
                    body.extend_from_slice(&chunk);
                    if body.len() as u64 > n {
                        return Ok(None);
                    }
                }
                Ok(None) if body.len() as u64 == n => return Ok(Some(body.freeze())),
                _ => return Ok(None),
            }
        }
    }
}
