//! HTTP/2 to the servers (`protocol: h2`, over TLS with ALPN, or `h2c` in clear). Per worker,
//! each server has a few multiplexed connections ([`H2Pool`](crate::servers::h2_pool::H2Pool)), each carrying at most the
//! service's `http2.max_concurrent_streams` streams (fewer if the server says so); another
//! connection is opened when all are full. One try of a request is one stream: the head goes
//! out as HEADERS and the body follows, pumped by a task of its own when the client speaks
//! HTTP/2 too, so both directions flow at once (gRPC streaming). The response's body and
//! trailers stay on the stream ([`H2Body`]) for the client's driver to relay.

use crate::http::codec::{Framing, RequestHead, ResponseHead};
use crate::http::error::ErrorKind;
use crate::io::watch::{Expired, Waiting};
use crate::reply::client::ClientSide;
use crate::reply::h2_edge::pump_h2;
use crate::reply::h3_body::pump_h3;
use crate::reply::relay::{BodyError, DataOut, Relay};
use crate::reply::request_body::BodySource;
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::servers::balancer::{Server, Service};
use crate::servers::h2_pool::{BodyPump, ConnState, H2Body};
use crate::servers::pool::UpstreamIo;
use crate::upstream::forwarding::{self, Cause, Failed, FieldSink};
use crate::worker::Worker;
use bytes::Bytes;
use h2::{RecvStream, SendStream};
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
    let Some(mut send) = state.send.borrow().clone() else {
        let message = forwarding::CONNECT_FAILED;
        return fail(502, ErrorKind::UpstreamUnreachable, message, Cause::Connect);
    };
    let request = match request_parts(head, service, server, client) {
        Some(request) => request,
        None => {
            let message = "request cannot be sent over HTTP/2";
            return fail(400, ErrorKind::ProtocolMismatch, message, Cause::Other);
        }
    };
    let has_body = head.framing != Framing::None;
    let ready = std::future::poll_fn(|cx| send.poll_ready(cx));
    let limit = within(service.connect_timeout);
    let watch = client.watch();
    match watch
        .within(&worker.clock, Waiting::Connect, limit, ready)
        .await
    {
        Ok(Ok(())) => {}
        Ok(Err(_)) => {
            return fail(
                502,
                ErrorKind::UpstreamFailed,
                CONNECTION_FAILED,
                Cause::Reset,
            )
        }
        Err(Expired) => {
            let message = "upstream HTTP/2 connection timed out";
            return fail(504, ErrorKind::UpstreamTimeout, message, Cause::Reset);
        }
    }
    let Ok((response, stream)) = send.send_request(request, !has_body) else {
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
    let (parts, recv) = response.into_parts();
    let framing = response_framing(head, &parts, &recv);
    let fields = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
    let response = ResponseHead::from_fields(parts.status.as_u16(), fields, framing);
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

/// Sends the request body on the stream and ends it. A body in memory goes at once (the h2
/// crate buffers what the server's window does not take yet). An HTTP/1 client's is relayed
/// into DATA frames before the response is awaited. An HTTP/2 client's that has already
/// arrived whole (a unary gRPC call's one message) goes at once too; any other, and an HTTP/3
/// client's, is pumped by a task of its own (`reply/h2_edge.rs::pump_h2`, `reply/h3_body.rs::pump_h3`), so
/// it flows while the response does (the returned pump is kept as long as the response body).
async fn send_body<S: AsyncRead + AsyncWrite + Unpin>(
    body: BodySource<'_, S>,
    out: &mut Vec<u8>,
    relay: &Relay<'_>,
    mut stream: SendStream<Bytes>,
) -> Result<Option<BodyPump>, BodyError> {
    let ended = |stream: &mut SendStream<Bytes>, last: Bytes| {
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
                    // Buffered by the h2 crate if the server's window is smaller: at most this.
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
    let mut builder = h2::client::Builder::new();
    builder
        .enable_push(false)
        .initial_window_size(settings.initial_window_size)
        .initial_connection_window_size(settings.initial_window_size.saturating_mul(4))
        .max_frame_size(settings.max_frame_size)
        .max_header_list_size(settings.max_header_list_size)
        .max_send_buffer_size(crate::reply::relay::FLUSH_AT * 4);
    let handshake = builder.handshake::<UpstreamIo, Bytes>(io);
    let (send, connection) = match client
        .watch()
        .within(&worker.clock, Waiting::Connect, limit, handshake)
        .await
    {
        Ok(Ok(done)) => done,
        Ok(Err(_)) => return Err(failed(502, "upstream HTTP/2 handshake failed")),
        Err(Expired) => return Err(failed(504, "upstream HTTP/2 handshake timed out")),
    };
    let ended = state.clone();
    tokio::task::spawn_local(async move {
        let _ = connection.await;
        ended.closed.set(true);
    });
    *state.send.borrow_mut() = Some(send);
    state.opened.notify_waiters();
    Ok(())
}

/// The request head as an HTTP/2 upstream gets it: `:authority` from the Host weir would
/// send an HTTP/1 upstream, the same forwarded fields, the length when it is known.
fn request_parts<C: ClientSide>(
    req: &RequestHead,
    service: &Service,
    server: &Server,
    client: &C,
) -> Option<http::Request<()>> {
    let target = req.target();
    let path_and_query = if target.starts_with('/') {
        target.to_string()
    } else if req.query().is_empty() {
        req.path().to_string()
    } else {
        format!("{}?{}", req.path(), req.query())
    };
    let scheme = match service.protocol {
        UpstreamProtocol::Http2 => "https",
        _ => "http",
    };
    let uri = http::Uri::builder()
        .scheme(scheme)
        .authority(forwarding::upstream_host(req, service, server))
        .path_and_query(path_and_query)
        .build()
        .ok()?;
    let mut request = http::Request::new(());
    *request.method_mut() = http::Method::from_bytes(req.method().as_bytes()).ok()?;
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    forwarding::forwarded_fields(
        headers,
        req,
        client.ip_text(),
        client.scheme(),
        service.authorization.as_deref(),
    );
    if let Framing::Length(n) = req.framing {
        headers.insert(http::header::CONTENT_LENGTH, n.into());
    }
    Some(request)
}

impl FieldSink for http::HeaderMap {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(value),
        ) {
            self.append(name, value);
        }
    }

    fn field_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
        let mut value = Vec::with_capacity(64);
        write(&mut value);
        self.field(name, &value);
    }
}

/// How the response body is delimited, for the client's driver: none for HEAD and bodiless
/// statuses, the declared length, nothing when the head ended the stream, else unknown
/// (relayed as it comes, chunked to an HTTP/1.1 client).
fn response_framing(
    req: &RequestHead,
    parts: &http::response::Parts,
    recv: &RecvStream,
) -> Framing {
    let status = parts.status.as_u16();
    if req.is_head() || (100..200).contains(&status) || status == 204 || status == 304 {
        return Framing::None;
    }
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) => Framing::Length(n),
        None if recv.is_end_stream() => Framing::Length(0),
        None => Framing::Chunked,
    }
}
