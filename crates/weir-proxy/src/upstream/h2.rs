//! HTTP/2 to the servers (`protocol: h2`, over TLS with ALPN, or `h2c` in clear), on weir's
//! own codec (`weir-h2`'s client side, driven by `servers/h2_conn.rs`). Per worker,
//! each server has a few multiplexed connections ([`H2Pool`](crate::servers::h2_pool::H2Pool)), each carrying at most the
//! service's `http2.max_concurrent_streams` streams (fewer if the server says so); another
//! connection is opened when all are full. One try of a request is one stream: the head goes
//! out as HEADERS and the body follows, pumped by a task of its own when the client speaks
//! HTTP/2 too, so both directions flow at once (gRPC streaming). The response's body and
//! trailers stay on the stream ([`H2Body`]) for the client's driver to relay.

use crate::http::codec::{self, Framing, RequestHead, ResponseHead};
use crate::http::error::ErrorKind;
use crate::io::watch::{Expired, Waiting};
use crate::reply::client::ClientSide;
use crate::reply::h2_edge::pump_h2;
use crate::reply::h3_body::pump_h3;
use crate::reply::relay::{BodyError, DataOut, Relay};
use crate::reply::request_body::BodySource;
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::servers::balancer::{Server, Service};
use crate::servers::h2_conn::{self, ResponseHead as UpstreamHead, SendStream, UpConn};
use crate::servers::h2_pool::{BodyPump, ConnState, H2Body};
use crate::servers::pool::UpstreamIo;
use crate::upstream::forwarding::{self, Cause, Failed, FieldSink};
use crate::worker::Worker;
use bytes::Bytes;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use weir_config::UpstreamProtocol;

/// A request body up to this size that has arrived whole is sent to an HTTP/2 upstream at
/// once, without a task of its own.
const INLINE_BODY_LIMIT: usize = 16 * 1024;

/// A multiplexed connection that failed under a request.
const CONNECTION_FAILED: &str = "upstream HTTP/2 connection failed";

/// Sends the request to `server` as one HTTP/2 stream and waits for the response head: a
/// reply whose body is still on the stream.
pub(crate) async fn try_server<'r, C: ClientSide>(
    worker: &Worker,
    service: &Service,
    server: &Server,
    client: &mut C,
    head: &RequestHead,
    until: Option<Instant>,
) -> Result<Reply<'r>, Failed> {
    let within = |limit| forwarding::within(worker, until, limit);
    let fail = |status, kind, message, cause| {
        Err(Failed::new(status, kind, message, cause, String::new()))
    };
    if head.upgrade {
        let message = "a protocol upgrade needs an HTTP/1.1 service";
        return fail(502, ErrorKind::ProtocolMismatch, message, Cause::Other);
    }
    let cap = service.http2.max_concurrent_streams as usize;
    let (slot, opener) = worker
        .h2_pool
        .take_slot(server.id, cap, service.idle_timeout);
    let state = slot.0.clone();
    if opener {
        let opening = open_connection(worker, service, server, client, &within, &state);
        if let Err(failed) = Box::pin(opening).await {
            state.closed.set(true);
            state.opened.notify_waiters();
            return Err(failed);
        }
    } else if state.send.borrow().is_none() {
        // Another request is opening this connection: wait for it.
        let opened = state.opened.notified();
        let limit = within(service.connect_timeout);
        let waited = client
            .watch()
            .within(&worker.clock, Waiting::Connect, limit, opened)
            .await;
        if waited.is_err() {
            let message = forwarding::CONNECT_TIMED_OUT;
            return fail(504, ErrorKind::UpstreamUnreachable, message, Cause::Connect);
        }
    }
    let Some(up) = state.send.borrow().clone() else {
        let message = forwarding::CONNECT_FAILED;
        return fail(502, ErrorKind::UpstreamUnreachable, message, Cause::Connect);
    };
    let mut fields = FieldList::default();
    let Some(pseudo) = request_fields(head, service, server, client, &mut fields) else {
        let message = "request cannot be sent over HTTP/2";
        return fail(400, ErrorKind::ProtocolMismatch, message, Cause::Other);
    };
    let has_body = head.framing != Framing::None;
    let pseudo = [
        head.method().as_bytes(),
        pseudo.scheme.as_bytes(),
        pseudo.authority.as_bytes(),
        pseudo.path.as_bytes(),
    ];
    let sent = h2_conn::send_request(&up, pseudo, fields.iter(), !has_body);
    let Ok((response, stream)) = sent else {
        return fail(
            502,
            ErrorKind::UpstreamFailed,
            CONNECTION_FAILED,
            Cause::Reset,
        );
    };
    let pump = if has_body {
        let outgoing = client.outgoing(head);
        let relay = Relay::to_upstream(worker, outgoing.watch, service.write_timeout);
        match send_body(outgoing.body, outgoing.out, &relay, stream).await {
            Ok(pump) => pump,
            // The server may answer before the body ends and reset the stream (RFC 9113
            // 8.1): its answer is still awaited below.
            Err(BodyError::Sink) => None,
            Err(e) => return Err(forwarding::body_failed(e)),
        }
    } else {
        None
    };
    let per_try = service.retry.as_ref().and_then(|r| r.per_try_timeout);
    let limit = within(per_try.unwrap_or(service.response_header_timeout));
    let waited = client
        .watch()
        .within(&worker.clock, Waiting::ResponseHead, limit, response)
        .await;
    let response = match waited {
        Ok(Ok(response)) => response,
        // Refused streams were never processed; other errors may have been.
        Ok(Err(_)) => {
            let message = "upstream reset the stream";
            return fail(502, ErrorKind::UpstreamFailed, message, Cause::Reset);
        }
        Err(Expired) => {
            let message = "upstream response timed out";
            return fail(504, ErrorKind::UpstreamTimeout, message, Cause::Timeout);
        }
    };
    let (parts, recv) = response;
    let framing = response_framing(head, &parts);
    let response = ResponseHead::from_fields(parts.status, parts.fields.iter(), framing);
    Ok(Reply {
        head: ReplyHead::Response(response),
        body: ReplyBody::Stream(H2Body {
            recv,
            _pump: pump,
            _slot: slot,
        }),
        upstream: None,
        body_filter: None,
    })
}

/// Sends the request body on the stream and ends it. A body in memory goes at once (the codec
/// queues what the server's window does not take yet). An HTTP/1 client's is relayed
/// into DATA frames before the response is awaited. An HTTP/2 client's that has already
/// arrived whole (a unary gRPC call's one message) goes at once too; any other, and an HTTP/3
/// client's, is pumped by a task of its own (`reply/h2_edge.rs::pump_h2`, `reply/h3_body.rs::pump_h3`), so
/// it flows while the response does (the returned pump is kept as long as the response body).
async fn send_body<S: AsyncRead + AsyncWrite + Unpin>(
    body: BodySource<'_, S>,
    out: &mut Vec<u8>,
    relay: &Relay<'_>,
    mut stream: SendStream,
) -> Result<Option<BodyPump>, BodyError> {
    let ended = |stream: &mut SendStream, last: Bytes| {
        stream.send_data(last, true).map_err(|_| BodyError::Sink)
    };
    match body {
        // The length was declared, but the client's stream had already ended.
        BodySource::None => ended(&mut stream, Bytes::new())?,
        BodySource::Bytes(body) => ended(&mut stream, body)?,
        BodySource::H2(mut frames) => {
            let arrived = std::future::poll_fn(|cx| Poll::Ready(frames.poll_data(cx))).await;
            let first = match arrived {
                Poll::Ready(Some(Ok(data)))
                    if frames.is_end_stream() && data.len() <= INLINE_BODY_LIMIT =>
                {
                    // Queued by the codec if the server's window is smaller: at most this.
                    let len = data.len();
                    ended(&mut stream, data)?;
                    frames.release_capacity(len);
                    return Ok(None);
                }
                Poll::Ready(Some(Ok(data))) => Some(data),
                Poll::Ready(Some(Err(_))) => return Err(BodyError::Source),
                Poll::Ready(None) | Poll::Pending => None,
            };
            return Ok(Some(BodyPump::spawn(pump_h2(frames, first, stream))));
        }
        // An HTTP/3 client's, as an HTTP/2 client's, by a task of its own.
        BodySource::H3(recv) => return Ok(Some(BodyPump::spawn(pump_h3(*recv, stream)))),
        relayed @ (BodySource::H1(_) | BodySource::Spilled(_)) => {
            out.clear();
            relayed
                .relay(&mut DataOut(&mut stream), out, false, relay)
                .await?;
            ended(&mut stream, Bytes::new())?;
        }
    }
    Ok(None)
}

/// Opens the connection of a new pool entry (TLS with ALPN `h2`, or `h2c`), starts its task,
/// and wakes the requests waiting for it.
async fn open_connection<C: ClientSide>(
    worker: &Worker,
    service: &Service,
    server: &Server,
    client: &C,
    within: &impl Fn(Duration) -> Duration,
    state: &Rc<ConnState>,
) -> Result<(), Failed> {
    let limit = within(service.connect_timeout);
    let io = forwarding::connect(worker, server, client.watch(), limit).await?;
    let failed = |status, message| {
        let kind = ErrorKind::UpstreamUnreachable;
        Failed::new(status, kind, message, Cause::Connect, String::new())
    };
    if let UpstreamIo::Tls(tls) = &io {
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(failed(502, "upstream did not agree to HTTP/2 (ALPN)"));
        }
    }
    let settings = service.http2;
    let codec = weir_h2::ClientConnection::new(weir_h2::ClientConfig {
        initial_window_size: settings.initial_window_size,
        connection_window_size: settings.initial_window_size.saturating_mul(4),
        max_frame_size: settings.max_frame_size,
        max_header_list_size: settings.max_header_list_size,
        ..weir_h2::ClientConfig::default()
    });
    // The preface goes out with the first request: requests may follow it at once (RFC 9113
    // §3.4), so there is no handshake to wait for.
    let up = UpConn::new(codec);
    tokio::task::spawn_local(h2_conn::drive(io, up.clone()));
    *state.send.borrow_mut() = Some(up);
    state.opened.notify_waiters();
    Ok(())
}

/// The pseudo-header fields of a request, but `:method`.
struct Pseudo<'a> {
    scheme: &'static str,
    authority: &'a str,
    path: std::borrow::Cow<'a, str>,
}

/// The request head as an HTTP/2 upstream gets it: `:authority` from the Host weir would
/// send an HTTP/1 upstream, the same forwarded fields (into `fields`), the length when it is
/// known.
fn request_fields<'a, C: ClientSide>(
    req: &'a RequestHead,
    service: &Service,
    server: &'a Server,
    client: &C,
    fields: &mut FieldList,
) -> Option<Pseudo<'a>> {
    let target = req.target();
    let path: std::borrow::Cow<'a, str> = if target.starts_with('/') {
        target.into()
    } else if req.query().is_empty() {
        req.path().into()
    } else {
        format!("{}?{}", req.path(), req.query()).into()
    };
    let scheme = match service.protocol {
        UpstreamProtocol::Http2 => "https",
        _ => "http",
    };
    let authority = forwarding::upstream_host(req, service, server);
    let valid = |s: &str| !s.is_empty() && s.bytes().all(|b| b > b' ' && b != 0x7f);
    if !valid(authority) || !valid(&path) || !valid(req.method()) {
        return None;
    }
    forwarding::forwarded_fields(
        fields,
        req,
        client.ip_text(),
        client.scheme(),
        service.authorization.as_deref(),
    );
    if let Framing::Length(n) = req.framing {
        fields.field(b"content-length", n.to_string().as_bytes());
    }
    Some(Pseudo {
        scheme,
        authority,
        path,
    })
}

/// A request's fields for the codec, in one buffer: names lowercased (RFC 9113 §8.2.1).
#[derive(Default)]
struct FieldList {
    bytes: Vec<u8>,
    /// Name start, value start, value end.
    spans: Vec<[usize; 3]>,
}

impl FieldList {
    fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.spans
            .iter()
            .map(|&[n, v, e]| (&self.bytes[n..v], &self.bytes[v..e]))
    }
}

impl FieldSink for FieldList {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.field_with(name, |out| out.extend_from_slice(value));
    }

    fn field_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.bytes.len();
        // Names come from weir's own heads (tokens); one that is not is sent as it lies.
        if !codec::push_lowercase_name(&mut self.bytes, name) {
            self.bytes.truncate(start);
            self.bytes.extend(name.iter().map(u8::to_ascii_lowercase));
        }
        let value = self.bytes.len();
        write(&mut self.bytes);
        self.spans.push([start, value, self.bytes.len()]);
    }
}

/// How the response body is delimited, for the client's driver: none for HEAD and bodiless
/// statuses, the declared length, nothing when the head ended the stream, else unknown
/// (relayed as it comes, chunked to an HTTP/1.1 client).
fn response_framing(req: &RequestHead, parts: &UpstreamHead) -> Framing {
    let status = parts.status;
    if req.is_head() || (100..200).contains(&status) || status == 204 || status == 304 {
        return Framing::None;
    }
    let declared = parts
        .fields
        .get(b"content-length")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) => Framing::Length(n),
        None if parts.end_stream => Framing::Length(0),
        None => Framing::Chunked,
    }
}
