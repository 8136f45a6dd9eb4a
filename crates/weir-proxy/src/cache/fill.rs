//! Filling the cache from an origin answer: whether it may be stored (`verdict`), reading its
//! body whole (a declared length, chunked, or until close; from HTTP/1 or HTTP/2), storing it
//! with its freshness, and refreshing a stored answer from a `304 Not Modified`. An answer that
//! turns out too large is passed on untouched: its raw bytes stay in the connection's buffer,
//! where the relay reads them from the start.

use super::object::{stored_fields, Object};
use super::store::{unix_now, ResponseCache};
use crate::balancer::UpstreamUse;
use crate::codec::{ChunkEvent, ChunkedDecoder, Framing, Head, RequestHead, ResponseHead};
use crate::conn::watch::{ConnWatch, Waiting};
use crate::pool::UpstreamConn;
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::upstream_h2::pool::H2Body;
use crate::worker::{make_room, Worker};
use bytes::{Buf, Bytes, BytesMut};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use weir_cache::{Directives, NotStorable, Stored};

/// An origin answer read for the cache.
pub(super) enum Filled<'r> {
    /// Stored, with the origin's head as it came; the connection (if any) went back to the
    /// pool.
    Stored(Arc<Object>, Option<UpstreamUse<'r>>, ResponseHead),
    /// Not stored, for this reason: the reply goes on as it came.
    Passed(Reply<'r>, NotStorable),
    /// The body failed midway: nothing to store or pass on.
    Failed(Option<UpstreamUse<'r>>),
}

/// Reads `reply` (the origin's answer to `req`, asked at `request_time`) and stores it under
/// `key` when it may be stored.
pub(super) async fn fill<'r>(
    worker: &Worker,
    watch: &ConnWatch,
    cache: &ResponseCache,
    key: &[u8],
    (req, asked): (&RequestHead, &Directives),
    reply: Reply<'r>,
    request_time: u64,
) -> Filled<'r> {
    let Reply {
        head,
        body,
        upstream,
        body_filter,
    } = reply;
    let response = match head {
        ReplyHead::Response(response) => response,
        // A local answer (no server, a timeout): never stored.
        head => {
            let reply = Reply {
                head,
                body,
                upstream,
                body_filter,
            };
            return Filled::Passed(reply, NotStorable::Status);
        }
    };
    let answered = Directives::parse(response.head.get_all("cache-control"));
    if let Err(why) = verdict(cache, req, asked, &response, &answered) {
        let reply = Reply {
            head: ReplyHead::Response(response),
            body,
            upstream,
            body_filter,
        };
        return Filled::Passed(reply, why);
    }
    let read_timeout = upstream
        .as_ref()
        .map_or(Duration::from_secs(60), |u| u.service.read_timeout);
    let reader = Reader {
        worker,
        watch,
        read_timeout,
        max: cache.max_object_size,
    };
    let read = match body {
        ReplyBody::Upstream(mut up) => match reader.h1(&mut up, response.framing).await {
            Whole::Body(bytes, reusable) => {
                if let (true, true, Some(used)) = (reusable, response.keep_alive, &upstream) {
                    used.check_in(&worker.pool, up);
                }
                Ok(bytes)
            }
            Whole::TooLarge => Err(ReplyBody::Upstream(up)),
            Whole::Failed => return Filled::Failed(upstream),
        },
        ReplyBody::Stream(stream) => match reader.h2(stream, response.framing).await {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => return Filled::Failed(upstream),
            Err(stream) => Err(ReplyBody::Stream(stream)),
        },
        ReplyBody::Local => Ok(Bytes::new()),
        other => Err(other),
    };
    let body = match read {
        Ok(body) => body,
        Err(body) => {
            let reply = Reply {
                head: ReplyHead::Response(response),
                body,
                upstream,
                body_filter,
            };
            return Filled::Passed(reply, NotStorable::TooLarge);
        }
    };
    let response_time = unix_now();
    let judged = (&response.head, &answered);
    let object = Arc::new(Object {
        status: response.status,
        meta: Stored::new(response.status, judged, request_time, response_time),
        fields: stored_fields(&response.head, response.connection_names_headers),
        body,
        secondary: weir_cache::secondary_key(&response.head, &req.head).unwrap_or_default(),
    });
    cache.store.put(key.to_vec(), object.clone());
    Filled::Stored(object, upstream, response)
}

/// After a `304` to a revalidation (RFC 9111 §4.3.4): the stored answer with the 304's fields
/// in place of its own of the same name, and the 304's times and freshness. Stored again.
pub(super) fn refresh(
    cache: &ResponseCache,
    key: &[u8],
    stale: &Object,
    response: &ResponseHead,
    request_time: u64,
) -> Arc<Object> {
    let update = stored_fields(&response.head, response.connection_names_headers);
    let mut fields = Head::default();
    for (name, value) in stale.fields.iter() {
        if !update.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            fields.append_field(name, value);
        }
    }
    for (name, value) in update.iter() {
        fields.append_field(name, value);
    }
    // Judged with the 304's `Age`, which is not kept among the fields.
    let mut judged = fields.clone();
    if let Some(age) = response.head.get("age") {
        judged.append("age", age);
    }
    let answered = Directives::parse(judged.get_all("cache-control"));
    let meta = Stored::new(stale.status, (&judged, &answered), request_time, unix_now());
    let object = Arc::new(Object {
        status: stale.status,
        meta,
        fields,
        body: stale.body.clone(),
        secondary: stale.secondary.clone(),
    });
    cache.store.put(key.to_vec(), object.clone());
    object
}

/// Whether the answer may be stored: the policy's verdict, a GET (HEAD answers have no body
/// to store), and, when declared, a length within `max_object_size`.
fn verdict(
    cache: &ResponseCache,
    req: &RequestHead,
    asked: &Directives,
    response: &ResponseHead,
    answered: &Directives,
) -> Result<(), NotStorable> {
    let request = (&req.head, asked);
    weir_cache::storable(
        req.method(),
        response.status,
        request,
        (&response.head, answered),
    )?;
    if req.is_head() {
        return Err(NotStorable::Method);
    }
    match response.framing {
        Framing::Length(n) if n > cache.max_object_size => Err(NotStorable::TooLarge),
        _ => Ok(()),
    }
}

enum Whole {
    /// The body, and whether the connection is left clean for reuse.
    Body(Bytes, bool),
    /// Over `max_object_size`: every byte read is still in the connection's buffer.
    TooLarge,
    /// The connection failed or went quiet before the body ended.
    Failed,
}

/// Reads bodies whole, at most `max` bytes, each read under `read_timeout`.
struct Reader<'a> {
    worker: &'a Worker,
    watch: &'a ConnWatch,
    read_timeout: Duration,
    max: u64,
}

impl Reader<'_> {
    /// Reads more of `up` into its buffer: how many bytes (0 at its end), or `None` when the
    /// read failed or went quiet.
    async fn read_more(&self, up: &mut UpstreamConn) -> Option<usize> {
        make_room(&mut up.buf);
        let read = up.io.read_buf(&mut up.buf);
        let waited = self.watch.within(
            &self.worker.clock,
            Waiting::ResponseBody,
            self.read_timeout,
            read,
        );
        waited.await.ok()?.ok()
    }

    /// An HTTP/1 body. The buffer is consumed only once the whole body is in hand.
    async fn h1(&self, up: &mut UpstreamConn, framing: Framing) -> Whole {
        match framing {
            Framing::None => Whole::Body(Bytes::new(), true),
            Framing::Length(n) => {
                while (up.buf.len() as u64) < n {
                    if !matches!(self.read_more(up).await, Some(1..)) {
                        return Whole::Failed;
                    }
                }
                // Copied out at its exact size: a split would pin the whole read buffer
                // (often twice the body) in the store, and make the connection allocate a
                // new one for its next answer.
                let body = Bytes::copy_from_slice(&up.buf[..n as usize]);
                up.buf.advance(n as usize);
                Whole::Body(body, true)
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
                            // Trailers are not stored.
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

    /// An HTTP/2 body with a declared length (others are passed on: `Err`); `None` when the
    /// stream failed.
    async fn h2(&self, mut stream: H2Body, framing: Framing) -> Result<Option<Bytes>, H2Body> {
        let Framing::Length(n) = framing else {
            return Err(stream);
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
                    let _ = stream.recv.flow_control().release_capacity(chunk.len());
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
