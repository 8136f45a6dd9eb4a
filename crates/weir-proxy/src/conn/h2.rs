//! The HTTP/2 connection driver (server side), over TLS with ALPN `h2` or cleartext with prior
//! knowledge (`h2c`). The `h2` crate speaks the protocol: frames, HPACK, flow control, and the
//! abuse limits weir sets from `entrypoints.NAME.http2` (concurrent streams, header list size,
//! pending and locally-caused resets). Each stream runs the normal lifecycle: its head becomes
//! weir's head at the edge (`:authority` as `Host`, cookies joined, a body without a length
//! declared chunked), [`exchange`] routes it and runs the action, and this driver writes the
//! reply as HEADERS and DATA frames under the client's flow control. The request body is lent
//! to the upstream side as its `RecvStream`: an HTTP/1 service gets it re-framed, an HTTP/2 one
//! (`upstream/h2.rs`) as DATA frames. Response bodies go through the same relay (and body
//! filters) as the HTTP/1 driver's.

use crate::actions::static_files::read_exact_at;
use crate::conn::h1::canonical_ip;
use crate::conn::ClientIo;
use crate::exchange::exchange;
use crate::exchange::plan::{BodyLength, LocalPlan, ResponsePlan};
use crate::http::codec::trailer_fields;
use crate::http::codec::{self, RequestHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::http::file_body::FileBody;
use crate::http::trace_context::TraceContext;
use crate::http::Scheme;
use crate::io::buffers::FILE_READ_CHUNK;
use crate::io::watch::{ConnWatch, Expired, Waiting, DATE_HEADER_LEN};
use crate::reply::body_filter::BodyFilter;
use crate::reply::client::{ClientConn, ClientSide, Outcome, Sent, TlsInfo, TlsSession};
use crate::reply::relay::{relay_body, relay_stream, BodyError, DataOut, Relay, Sink, FLUSH_AT};
use crate::reply::request_body::{BodySource, Outgoing};
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::state::runtime::SharedRuntime;
use crate::worker::Worker;
use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use std::cell::{Cell, RefCell};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, Empty};

/// The client connection preface: what an `h2c` connection starts with.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Streams the client may reset before weir has seen them, and resets weir may cause, before
/// the connection is closed (rapid reset, CVE-2023-44487).
const MAX_PENDING_RESETS: usize = 64;
const MAX_LOCAL_RESETS: usize = 256;

/// Serves one HTTP/2 connection until the client or weir ends it. A stop (or the idle timeout
/// with no stream open) sends GOAWAY and lets open streams finish.
pub async fn serve<S>(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    io: S,
    peer: SocketAddr,
    scheme: Scheme,
    watch: Rc<ConnWatch>,
) where
    S: ClientIo + 'static,
{
    let (settings, tls) = {
        let runtime = config.load();
        // The TLS session for the access log, kept only while it logs.
        let tls = (runtime.access_log.is_some())
            .then(|| io.tls().map(|info| Rc::new(TlsSession::of(info))))
            .flatten();
        match runtime.entrypoint(entrypoint) {
            Some(ep) => (ep.http2, tls),
            None => return,
        }
    };
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(settings.max_concurrent_streams)
        .initial_window_size(settings.initial_window_size)
        .initial_connection_window_size(settings.initial_window_size.saturating_mul(4))
        .max_frame_size(settings.max_frame_size)
        .max_header_list_size(settings.max_header_list_size)
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(Some(MAX_LOCAL_RESETS))
        .max_send_buffer_size(FLUSH_AT * 4);
    let idle = worker.timeouts.get().idle;
    let handshake = builder.handshake::<S, Bytes>(io);
    let mut conn = match watch
        .within(&worker.clock, Waiting::RequestHead, idle, handshake)
        .await
    {
        Ok(Ok(conn)) => conn,
        _ => return,
    };
    let ip = canonical_ip(peer.ip());
    // Formatted once for the connection's streams (per stream it cost 1,260 instructions).
    let ip_text: Rc<str> = ip.to_string().into();
    let open = Rc::new(Cell::new(0usize));
    let mut going_away = false;
    loop {
        if !going_away && worker.shutdown.is_requested() {
            conn.graceful_shutdown();
            going_away = true;
        }
        // With no stream open the connection is idle: the idle timeout and a stop end it.
        // Otherwise `accept` is polled without a deadline: it drives the open streams too.
        let accepted = if open.get() == 0 && !going_away {
            let accept = conn.accept();
            match watch
                .within(&worker.clock, Waiting::KeepAlive, idle, accept)
                .await
            {
                Ok(accepted) => accepted,
                Err(Expired) => {
                    conn.graceful_shutdown();
                    going_away = true;
                    continue;
                }
            }
        } else {
            let stopping = worker.shutdown.notify.notified();
            tokio::pin!(stopping);
            stopping.as_mut().enable();
            tokio::select! {
                accepted = conn.accept() => accepted,
                _ = &mut stopping, if !going_away => continue,
            }
        };
        match accepted {
            Some(Ok((request, respond))) => {
                open.set(open.get() + 1);
                let stream = Stream {
                    worker: worker.clone(),
                    config: config.clone(),
                    entrypoint,
                    ip,
                    ip_text: ip_text.clone(),
                    scheme,
                    tls: tls.clone(),
                    open: open.clone(),
                };
                tokio::task::spawn_local(stream.serve(request, respond));
            }
            // A connection error: h2 has sent GOAWAY with its code.
            Some(Err(_)) | None => break,
        }
    }
}

/// One stream's task; counted as open until it ends.
struct Stream {
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    ip: IpAddr,
    ip_text: Rc<str>,
    scheme: Scheme,
    tls: Option<Rc<TlsSession>>,
    open: Rc<Cell<usize>>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.open.set(self.open.get() - 1);
    }
}

impl Stream {
    async fn serve(self, request: http::Request<RecvStream>, mut respond: SendResponse<Bytes>) {
        let (parts, body) = request.into_parts();
        let end_stream = body.is_end_stream();
        let head = match request_head(&parts, end_stream) {
            Ok(head) => head,
            Err(error) => {
                let answer = error.plain();
                let date = date_value(&self.worker);
                let plan = LocalPlan::new(false, &answer, answer.body.len() as u64);
                let _ = send_local(&mut respond, plan, &answer.body, &date).await;
                return;
            }
        };
        let watch = self.worker.watch_connection();
        let mut client = H2Client {
            body: (!end_stream).then_some(body),
            respond,
            watch,
            ip: self.ip,
            ip_text: self.ip_text.clone(),
            scheme: self.scheme,
            tls: self.tls.clone(),
            // Room for the upstream request's head, written once per stream (grown from
            // nothing, it cost six reallocations a request).
            out: Vec::with_capacity(1024),
        };
        let runtime = self.config.load_full();
        // Boxed: the exchange's state is large, and the stream's task is moved whole when it
        // is spawned (perf: memmove was 15% of an h2c worker's time unboxed).
        let exchanging = exchange(&self.worker, &runtime, self.entrypoint, &mut client, head);
        let _ = Box::pin(exchanging).await;
    }
}

/// An HTTP/2 request head as weir's head: the pseudo-headers become a request line and `Host`,
/// `cookie` fields are joined with `; ` (RFC 9113 8.2.3), a body of unknown length is declared
/// chunked (so an HTTP/1 upstream gets it chunked). Parsed by the HTTP/1 codec, so the same
/// checks apply to both protocols.
pub(crate) fn request_head(
    parts: &http::request::Parts,
    end_stream: bool,
) -> Result<RequestHead, LocalError> {
    // Written where the parsed head will keep it (no copy).
    let mut raw = BytesMut::with_capacity(512);
    let header = |raw: &mut BytesMut, name: &[u8], value: &[u8]| {
        raw.extend_from_slice(name);
        raw.extend_from_slice(b": ");
        raw.extend_from_slice(value);
        raw.extend_from_slice(b"\r\n");
    };
    raw.extend_from_slice(parts.method.as_str().as_bytes());
    raw.extend_from_slice(b" ");
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    raw.extend_from_slice(target.as_bytes());
    raw.extend_from_slice(b" HTTP/1.1\r\n");
    if !parts.headers.contains_key(http::header::HOST) {
        if let Some(authority) = parts.uri.authority() {
            header(&mut raw, b"host", authority.as_str().as_bytes());
        }
    }
    let mut cookies: Vec<&[u8]> = Vec::new();
    for (name, value) in &parts.headers {
        if name == http::header::COOKIE {
            cookies.push(value.as_bytes());
        } else {
            header(&mut raw, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    if !cookies.is_empty() {
        header(&mut raw, b"cookie", &cookies.join(&b"; "[..]));
    }
    if !end_stream && !parts.headers.contains_key(http::header::CONTENT_LENGTH) {
        raw.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    raw.extend_from_slice(b"\r\n");
    match codec::parse_request(&mut raw) {
        Ok(Some(mut head)) => {
            head.http2 = true;
            Ok(head)
        }
        Ok(None) => Err(LocalError::new(
            400,
            ErrorKind::MalformedHead,
            "invalid request head",
        )),
        Err(e) => Err(LocalError::from(&e)),
    }
}

/// One stream as the lifecycle sees it.
struct H2Client {
    /// The request body, until it is read (or dropped, unread, with the answer).
    body: Option<RecvStream>,
    respond: SendResponse<Bytes>,
    watch: Rc<ConnWatch>,
    ip: IpAddr,
    ip_text: Rc<str>,
    scheme: Scheme,
    tls: Option<Rc<TlsSession>>,
    out: Vec<u8>,
}

impl ClientSide for H2Client {
    type BodyIo = Empty;

    fn ip(&self) -> IpAddr {
        self.ip
    }

    fn ip_text(&self) -> &str {
        &self.ip_text
    }

    fn scheme(&self) -> Scheme {
        self.scheme
    }

    fn tls(&self) -> Option<TlsInfo<'_>> {
        self.tls.as_deref().map(TlsSession::info)
    }

    fn watch(&self) -> &ConnWatch {
        &self.watch
    }

    /// The DATA frames as they arrive (taken by the first try).
    fn outgoing(&mut self, _req: &RequestHead) -> Outgoing<'_, Empty> {
        Outgoing {
            ip_text: &self.ip_text,
            scheme: self.scheme,
            watch: &self.watch,
            out: &mut self.out,
            body: self.body.take().map_or(BodySource::None, BodySource::H2),
        }
    }

    async fn read_body(
        &mut self,
        worker: &Worker,
        _req: &RequestHead,
        max: u64,
    ) -> Result<Bytes, BodyError> {
        let Some(mut body) = self.body.take() else {
            return Ok(Bytes::new());
        };
        let limit = worker.timeouts.get().body;
        let mut whole = BytesMut::new();
        loop {
            let next = std::future::poll_fn(|cx| body.poll_data(cx));
            match self
                .watch
                .within(&worker.clock, Waiting::RequestBody, limit, next)
                .await
            {
                Ok(None) => return Ok(whole.freeze()),
                Ok(Some(Ok(data))) => {
                    let _ = body.flow_control().release_capacity(data.len());
                    if (whole.len() + data.len()) as u64 > max {
                        return Err(BodyError::TooLarge);
                    }
                    whole.extend_from_slice(&data);
                }
                Ok(Some(Err(_))) => return Err(BodyError::Source),
                Err(Expired) => return Err(BodyError::SourceStalled),
            }
        }
    }
}

impl ClientConn for H2Client {
    async fn send_reply<'r>(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        reply: Reply<'r>,
    ) -> Sent<'r> {
        // A body nobody read: dropping it tells the client (RST_STREAM once the answer ends).
        self.body = None;
        let upstream = reply.upstream;
        let read_timeout = upstream
            .as_ref()
            .map_or(Duration::ZERO, |u| u.service.read_timeout);
        let date = date_value(worker);
        let head_only = req.is_head();
        let mut outcome = Outcome {
            keep_alive: true,
            linger: false,
            status: 0,
            bytes: 0,
        };
        let mut reusable = None;
        let (status, sent) = match (reply.head, reply.body) {
            (ReplyHead::Local(local), ReplyBody::File(file)) => {
                let plan = LocalPlan::new(head_only, &local, file.len);
                (
                    local.status,
                    self.send_file(worker, plan, &file, &date).await,
                )
            }
            (ReplyHead::Shared(local), ReplyBody::File(file)) => {
                let plan = LocalPlan::new(head_only, &local, file.len);
                (
                    local.status,
                    self.send_file(worker, plan, &file, &date).await,
                )
            }
            (ReplyHead::Local(local), _) => {
                let plan = LocalPlan::new(head_only, &local, local.body.len() as u64);
                let sending = send_local(&mut self.respond, plan, &local.body, &date);
                (local.status, sending.await)
            }
            (ReplyHead::Shared(local), _) => {
                let plan = LocalPlan::new(head_only, &local, local.body.len() as u64);
                let sending = send_local(&mut self.respond, plan, &local.body, &date);
                (local.status, sending.await)
            }
            // The exchange renders weir's errors before they get here (`render_error`); one
            // it did not is answered plainly.
            (ReplyHead::Error(error), _) => {
                let local = error.plain();
                let plan = LocalPlan::new(head_only, &local, local.body.len() as u64);
                let sending = send_local(&mut self.respond, plan, &local.body, &date);
                (local.status, sending.await)
            }
            (ReplyHead::Response(response), body) => {
                let status = response.status;
                // HTTP/2 never uses `sendfile`.
                let sent = match ResponsePlan::new(req, response, body, reply.body_filter, false) {
                    Ok(plan) => {
                        let trace = req.trace.as_deref();
                        let relaying = self.send_response(
                            worker,
                            plan,
                            (&date, head_only, read_timeout),
                            trace,
                        );
                        let (sent, conn) = relaying.await;
                        reusable = conn;
                        sent
                    }
                    Err(e) => Err(e),
                };
                (status, sent)
            }
        };
        outcome.status = status;
        outcome.bytes = sent.unwrap_or(0);
        Sent {
            outcome,
            reusable,
            upstream,
        }
    }
}

impl H2Client {
    /// Frames a planned reply as HTTP/2: HEADERS (ending the stream when no body follows),
    /// then the body as DATA frames: bytes, a file, or the relay from an upstream (through the
    /// body filter, if one applies), then trailers or an empty DATA frame with END_STREAM.
    /// Returns the body bytes sent and the upstream connection when its response was read
    /// completely.
    /// `trace`: a traced request's context, told a gRPC answer's status from its trailers.
    async fn send_response(
        &mut self,
        worker: &Worker,
        mut plan: ResponsePlan,
        (date, head_only, read_timeout): (&http::HeaderValue, bool, Duration),
        trace: Option<&TraceContext>,
    ) -> (
        Result<u64, BodyError>,
        Option<crate::servers::pool::UpstreamConn>,
    ) {
        // An answer that ends with its head (gRPC's trailers-only form) ends with its HEADERS
        // here too, and declares no length.
        let ended = plan.ends_with_head();
        let parts = response_parts(&plan, ended, date, head_only);
        let no_body = plan.length == BodyLength::None || ended;
        let mut send = match self.respond.send_response(parts, no_body) {
            Ok(send) => send,
            Err(_) => return (Err(BodyError::Sink), None),
        };
        if no_body {
            return (Ok(0), None);
        }
        match plan.body {
            ReplyBody::Upstream(mut up) => {
                let relay = Relay::to_client_from_upstream(worker, &self.watch, read_timeout);
                let mut out = DataOut(&mut send);
                let mut sink = Sink {
                    io: Some(&mut out),
                    filter: plan.filter.as_mut(),
                    sent: 0,
                    trailers: Some(Vec::new()),
                };
                self.out.clear();
                let relayed = relay_body(
                    &mut up.io,
                    &mut up.buf,
                    plan.read,
                    &mut sink,
                    &mut self.out,
                    false,
                    &relay,
                )
                .await;
                let relayed = relayed.map(|bytes| sink.counted(bytes));
                // A chunked body's trailers end the stream as its trailers.
                let trailers = sink.trailers.take().map(|raw| trailer_fields(&raw));
                let ended = match trailers {
                    Some(fields) if !fields.is_empty() => send.send_trailers(fields),
                    _ => send.send_data(Bytes::new(), true),
                };
                match relayed {
                    Ok(sent) if ended.is_ok() => (Ok(sent), plan.head.keep_alive.then_some(up)),
                    Ok(_) => (Err(BodyError::Sink), None),
                    Err(e) => {
                        send.send_reset(h2::Reason::INTERNAL_ERROR);
                        (Err(e), None)
                    }
                }
            }
            ReplyBody::Stream(mut stream) => {
                let relay = Relay::to_client_from_upstream(worker, &self.watch, read_timeout);
                let mut out = DataOut(&mut send);
                let mut sink = Sink {
                    io: Some(&mut out),
                    filter: plan.filter.as_mut(),
                    sent: 0,
                    trailers: None,
                };
                self.out.clear();
                let relaying =
                    relay_stream(&mut stream.recv, &mut sink, &mut self.out, false, &relay);
                let relayed = relaying.await;
                let ended = match relayed {
                    Ok((bytes, Some(trailers))) => {
                        if let (Some(trace), Some(status)) = (trace, trailers.get("grpc-status")) {
                            trace.note_grpc_status(status.as_bytes());
                        }
                        let sent = sink.counted(bytes);
                        send.send_trailers(trailers).map(|()| sent)
                    }
                    Ok((bytes, None)) => {
                        let sent = sink.counted(bytes);
                        send.send_data(Bytes::new(), true).map(|()| sent)
                    }
                    Err(e) => {
                        send.send_reset(h2::Reason::INTERNAL_ERROR);
                        return (Err(e), None);
                    }
                };
                (ended.map_err(|_| BodyError::Sink), None)
            }
            ReplyBody::Bytes(bytes) => (
                send_all(worker, &self.watch, &mut send, bytes, true).await,
                None,
            ),
            ReplyBody::File(file) => {
                let sending = send_file_body(worker, &self.watch, &mut send, &file, plan.filter);
                (sending.await, None)
            }
            ReplyBody::Local | ReplyBody::Upgrade(_) => (
                send_all(worker, &self.watch, &mut send, Bytes::new(), true).await,
                None,
            ),
        }
    }

    /// A local head with a file body (the `static` action).
    async fn send_file(
        &mut self,
        worker: &Worker,
        plan: LocalPlan<'_>,
        file: &FileBody,
        date: &http::HeaderValue,
    ) -> Result<u64, BodyError> {
        let parts = local_parts(&plan, date);
        let mut send = self
            .respond
            .send_response(parts, !plan.body_follows)
            .map_err(|_| BodyError::Sink)?;
        if !plan.body_follows {
            return Ok(0);
        }
        send_file_body(worker, &self.watch, &mut send, file, None).await
    }
}

/// A local body up to this size goes out in one DATA frame that ends the stream (the
/// smallest frame size a peer may set is 16 KiB; the initial window is 64 KiB).
const LOCAL_BODY_IN_ONE_FRAME: usize = 16 * 1024;

/// A local answer with its body in memory.
async fn send_local(
    respond: &mut SendResponse<Bytes>,
    plan: LocalPlan<'_>,
    body: &Bytes,
    date: &http::HeaderValue,
) -> Result<u64, BodyError> {
    let parts = local_parts(&plan, date);
    let mut send = respond
        .send_response(parts, !plan.body_follows)
        .map_err(|_| BodyError::Sink)?;
    if !plan.body_follows {
        return Ok(0);
    }
    // No deadline here: a local body is small, and the stream's window holds it.
    if body.len() <= LOCAL_BODY_IN_ONE_FRAME {
        // The body as it is kept (no copy) and the stream's end in the same DATA frame.
        send.send_data(body.clone(), true)
            .map_err(|_| BodyError::Sink)?;
        return Ok(body.len() as u64);
    }
    let mut out = DataOut(&mut send);
    out.write_all(body).await.map_err(|_| BodyError::Sink)?;
    send.send_data(Bytes::new(), true)
        .map_err(|_| BodyError::Sink)?;
    Ok(body.len() as u64)
}

/// Sends `data` as DATA frames as the client's window allows, under `client_send_timeout`.
async fn send_all(
    worker: &Worker,
    watch: &ConnWatch,
    send: &mut SendStream<Bytes>,
    data: Bytes,
    end: bool,
) -> Result<u64, BodyError> {
    let len = data.len() as u64;
    let mut out = DataOut(send);
    let write = out.write_all(&data);
    let limit = worker.timeouts.get().send;
    match watch
        .within(&worker.clock, Waiting::ClientWrite, limit, write)
        .await
    {
        Ok(Ok(())) => {}
        Ok(Err(_)) => return Err(BodyError::Sink),
        Err(Expired) => {
            send.send_reset(h2::Reason::CANCEL);
            return Err(BodyError::SinkStalled);
        }
    }
    if end {
        send.send_data(Bytes::new(), true)
            .map_err(|_| BodyError::Sink)?;
    }
    Ok(len)
}

/// A file body read in chunks (from the page cache, as the HTTP/1 driver's copy path does),
/// through `filter` when one is installed.
async fn send_file_body(
    worker: &Worker,
    watch: &ConnWatch,
    send: &mut SendStream<Bytes>,
    file: &FileBody,
    mut filter: Option<BodyFilter>,
) -> Result<u64, BodyError> {
    let mut offset = file.offset;
    let end = file.offset + file.len;
    let mut sent = 0;
    while offset < end {
        let take = FILE_READ_CHUNK.min(end - offset) as usize;
        let mut chunk = vec![0; take];
        read_exact_at(&file.file, &mut chunk, offset).map_err(|_| BodyError::Source)?;
        offset += take as u64;
        let data = match &mut filter {
            Some(filter) => filter.write(&chunk).map_err(|_| BodyError::Sink)?.to_vec(),
            None => chunk,
        };
        sent += send_all(worker, watch, send, data.into(), false).await?;
    }
    if let Some(filter) = &mut filter {
        let last = filter.finish().map_err(|_| BodyError::Sink)?.to_vec();
        sent += send_all(worker, watch, send, last.into(), false).await?;
    }
    send.send_data(Bytes::new(), true)
        .map_err(|_| BodyError::Sink)?;
    Ok(sent)
}

/// The `date` value of the worker's clock, made once a second per worker thread (made per
/// answer, it cost two strings and a field-name parse, 800 instructions).
pub(crate) fn date_value(worker: &Worker) -> http::HeaderValue {
    thread_local! {
        static MADE: RefCell<Option<([u8; DATE_HEADER_LEN], http::HeaderValue)>> =
            const { RefCell::new(None) };
    }
    let line = worker.clock.date_header();
    MADE.with(|made| {
        let mut made = made.borrow_mut();
        match &*made {
            Some((at, value)) if *at == line => value.clone(),
            _ => {
                // `date: ` + the date + CRLF.
                let value = http::HeaderValue::from_bytes(&line[6..DATE_HEADER_LEN - 2]).unwrap_or(
                    http::HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"),
                );
                *made = Some((line, value.clone()));
                value
            }
        }
    })
}

/// A local answer's head for HTTP/2: its status, the fields that cross, its length and a
/// date.
pub(crate) fn local_parts(plan: &LocalPlan, date: &http::HeaderValue) -> http::Response<()> {
    let mut response = http::Response::new(());
    *response.status_mut() =
        http::StatusCode::from_u16(plan.local.status).unwrap_or(http::StatusCode::OK);
    let headers = response.headers_mut();
    plan.each_field(|name, value| append(headers, name, value));
    if let Some(len) = plan.declared_length() {
        headers.append(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
    }
    headers.append(http::header::DATE, date.clone());
    response
}

/// A planned reply's head for HTTP/2: the fields that cross (RFC 9113 8.2.2), names
/// lowercased, the length when it is known (an answer to HEAD describes the one it would have
/// had), a date when the upstream sent none.
pub(crate) fn response_parts(
    plan: &ResponsePlan,
    ended: bool,
    date: &http::HeaderValue,
    head_only: bool,
) -> http::Response<()> {
    let resp = &plan.head;
    let mut response = http::Response::new(());
    *response.status_mut() =
        http::StatusCode::from_u16(resp.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    let headers = response.headers_mut();
    plan.each_field(|name, value| append(headers, name, value));
    match plan.length {
        BodyLength::Known(n) if !ended => {
            headers.append(http::header::CONTENT_LENGTH, http::HeaderValue::from(n));
        }
        // A 304's described length is not passed on over HTTP/2.
        _ if head_only => {
            if let Some(len) = plan.described_length() {
                append(headers, b"content-length", len);
            }
        }
        _ => {}
    }
    if !resp.has_date {
        headers.append(http::header::DATE, date.clone());
    }
    response
}

/// Adds a field, skipping one HTTP/2 cannot carry (an invalid name or value).
fn append(headers: &mut http::HeaderMap, name: &[u8], value: &[u8]) {
    if let (Ok(name), Ok(value)) = (
        http::HeaderName::from_bytes(name),
        http::HeaderValue::from_bytes(value),
    ) {
        headers.append(name, value);
    }
}
