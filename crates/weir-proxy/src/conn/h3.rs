//! The HTTP/3 connection driver (server side): a QUIC endpoint per worker on an `http3`
//! entrypoint's UDP socket (quinn), HTTP/3 over it (the `h3` crate: frames, QPACK, GOAWAY),
//! and each request stream run through the same lifecycle as HTTP/1.1 and HTTP/2. The head
//! becomes weir's head at the edge as an HTTP/2 head does (`conn/h2.rs::request_head`),
//! [`exchange`] routes it and runs the action, and this driver writes the reply as HEADERS and
//! DATA frames, which QUIC's flow control paces. The request body is lent to the upstream side
//! as the stream's receiving half (`reply/h3_body.rs`). Response bodies go through the same
//! relay (and body filters) as the other drivers'.

use crate::actions::static_files::read_exact_at;
use crate::conn::h1::canonical_ip;
use crate::conn::h2::{date_value, local_head, request_head, response_head, DateValue};
use crate::exchange::exchange;
use crate::exchange::plan::{BodyLength, LocalPlan, ResponsePlan};
use crate::http::codec::{trailer_fields, RequestHead};
use crate::http::file_body::FileBody;
use crate::http::trace_context::TraceContext;
use crate::http::Scheme;
use crate::io::buffers::FILE_READ_CHUNK;
use crate::io::watch::{ConnWatch, Expired, Waiting};
use crate::listen::quic::QuicRuntime;
use crate::observe::metrics::{Abuse, HandshakeFailure};
use crate::reply::body_filter::BodyFilter;
use crate::reply::client::{ClientConn, ClientSide, Outcome, Sent, TlsInfo, TlsSession};
use crate::reply::h3_body::H3Recv;
use crate::reply::relay::{relay_body, relay_produced, relay_stream, BodyError, Relay, Sink};
use crate::reply::request_body::{BodySource, Outgoing};
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::state::runtime::SharedRuntime;
use crate::worker::{Active, Worker, DRAIN_GRACE};
use bytes::{Buf, Bytes, BytesMut};
use h3::error::Code;
use std::cell::Cell;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt, Empty};
use tokio::sync::Notify;

/// The largest decoded header section a client may send, as on HTTP/2: past it the `h3` crate
/// answers 431 on the stream (RFC 9114, section 4.2.2).
const MAX_FIELD_SECTION_SIZE: u64 = 32 << 10;

/// Streams a client may reset (or stop) before weir has answered them, on one connection,
/// before resets that outnumber the streams served close it (rapid reset, CVE-2023-44487; the
/// same allowance as HTTP/2's).
const RESET_ALLOWANCE: u32 = 64;

/// The sending half of a request stream.
type H3Send = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// Tells an endpoint's connections that it closes (a reload removed the entrypoint or its
/// `http3`): each sends GOAWAY and finishes its streams.
#[derive(Default)]
struct Closing {
    closed: Cell<bool>,
    notify: Notify,
}

/// Serves one worker's QUIC socket of entrypoint `entrypoint` until the worker stops or the
/// control thread closes it (`stop`); then no connection is accepted, and open ones get
/// GOAWAY and finish their streams (the worker's drain waits for them, counted in `active`).
pub async fn serve_endpoint(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    socket: std::net::UdpSocket,
    stop: Rc<Notify>,
    active: Rc<Cell<usize>>,
) {
    let (server, mut retry_above, mut version) = {
        let runtime = config.load();
        match runtime
            .entrypoint(entrypoint)
            .and_then(|ep| ep.http3.as_ref())
        {
            Some(http3) => (
                http3.server.clone(),
                http3.settings.retry_above as usize,
                runtime.version,
            ),
            None => return,
        }
    };
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(server),
        socket,
        Arc::new(QuicRuntime),
    );
    let endpoint = match endpoint {
        Ok(endpoint) => endpoint,
        Err(e) => {
            crate::log_error!("worker {}: HTTP/3 endpoint: {e}", worker.id);
            return;
        }
    };
    let closing = Rc::new(Closing::default());
    let handshaking = Rc::new(Cell::new(0usize));
    loop {
        let stopping = worker.shutdown.notify.notified();
        tokio::pin!(stopping);
        stopping.as_mut().enable();
        if worker.shutdown.is_requested() {
            break;
        }
        let incoming = tokio::select! {
            incoming = endpoint.accept() => incoming,
            _ = &mut stopping => break,
            _ = stop.notified() => break,
        };
        let Some(incoming) = incoming else { break };
        // A reload may have brought new certificates: new connections get them.
        {
            let runtime = config.load();
            if runtime.version != version {
                version = runtime.version;
                let http3 = runtime
                    .entrypoint(entrypoint)
                    .and_then(|ep| ep.http3.as_ref());
                if let Some(http3) = http3 {
                    endpoint.set_server_config(Some(http3.server.clone()));
                    retry_above = http3.settings.retry_above as usize;
                }
            }
        }
        let Some(incoming) = retry_under_flood(incoming, handshaking.get(), retry_above) else {
            if let Some(ep) = config.load().entrypoint(entrypoint) {
                ep.cells[worker.id].abused(Abuse::QuicRetry);
            }
            continue;
        };
        let counted = Active::enter(&active);
        let connection = Connection {
            worker: worker.clone(),
            config: config.clone(),
            entrypoint,
            closing: closing.clone(),
            handshake: Some(Active::enter(&handshaking)),
            _counted: counted,
        };
        tokio::task::spawn_local(connection.serve(incoming));
    }
    endpoint.set_server_config(None);
    closing.closed.set(true);
    closing.notify.notify_waiters();
    endpoint.wait_idle().await;
}

/// Under a flood of new connections (more than `retry_above` handshakes in progress on this
/// worker), a client whose address is not yet validated gets a Retry and must come back with
/// its token (RFC 9000, section 8.1.2), so spoofed sources cost weir one stateless packet, not
/// a handshake. Returns the connection attempt to accept, `None` when a Retry answered it.
fn retry_under_flood(
    incoming: quinn::Incoming,
    handshaking: usize,
    retry_above: usize,
) -> Option<quinn::Incoming> {
    if handshaking < retry_above || incoming.remote_address_validated() {
        return Some(incoming);
    }
    incoming.retry().err().map(quinn::RetryError::into_incoming)
}

/// One QUIC connection's task; counted as active until it ends.
struct Connection {
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    closing: Rc<Closing>,
    /// Counted among the worker's handshakes in progress until the handshake ends.
    handshake: Option<Active>,
    _counted: Active,
}

impl Connection {
    /// Completes the handshake (under `handshake_timeout`), then accepts request streams until
    /// the client or weir ends the connection. A stop sends GOAWAY and lets open streams
    /// finish; the connection's idle timeout is QUIC's (`http3.idle_timeout`).
    async fn serve(mut self, incoming: quinn::Incoming) {
        let worker = &self.worker;
        let (limit, zero_rtt, logs) = {
            let runtime = self.config.load();
            let Some(ep) = runtime.entrypoint(self.entrypoint) else {
                return;
            };
            ep.cells[worker.id].connections.add(1);
            let limit = ep
                .tls
                .as_ref()
                .map_or(Duration::ZERO, |t| t.handshake_timeout);
            let zero_rtt = ep.http3.as_ref().is_some_and(|h| h.settings.zero_rtt);
            (limit, zero_rtt, runtime.access_log.is_some())
        };
        let failed = |why| {
            if let Some(ep) = self.config.load().entrypoint(self.entrypoint) {
                ep.cells[worker.id].handshake_failed(why);
            }
        };
        let peer = incoming.remote_address();
        let Ok(connecting) = incoming.accept() else {
            return failed(HandshakeFailure::Error);
        };
        let watch = worker.watch_connection();
        let connecting = match zero_rtt {
            true => match connecting.into_0rtt() {
                Ok((connection, _)) => Ok(connection),
                Err(connecting) => Err(connecting),
            },
            false => Err(connecting),
        };
        let connection = match connecting {
            Ok(connection) => connection,
            Err(connecting) => match watch
                .within(&worker.clock, Waiting::Handshake, limit, connecting)
                .await
            {
                Ok(Ok(connection)) => connection,
                Ok(Err(_)) => return failed(HandshakeFailure::Error),
                Err(Expired) => return failed(HandshakeFailure::Timeout),
            },
        };
        // The TLS session for the access log, kept only while it logs.
        let tls = logs.then(|| Rc::new(tls_session(&connection)));
        let mut builder = h3::server::builder();
        // No GREASE frames: aioquic 1.2 loses a stream's end when one comes last on it.
        builder
            .max_field_section_size(MAX_FIELD_SECTION_SIZE)
            .send_grease(false);
        let quic = connection.clone();
        let building = builder.build::<_, Bytes>(h3_quinn::Connection::new(connection));
        let mut conn = match watch
            .within(&worker.clock, Waiting::Handshake, limit, building)
            .await
        {
            Ok(Ok(conn)) => conn,
            _ => return,
        };
        self.handshake = None;
        let ip = canonical_ip(peer.ip());
        let streams = Rc::new(OpenStreams::new(quic.clone()));
        let mut going_away = false;
        loop {
            // Enabled before the checks below, so a stop that comes between is not missed.
            let stopping = worker.shutdown.notify.notified();
            tokio::pin!(stopping);
            stopping.as_mut().enable();
            let closed = self.closing.notify.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            let ended = streams.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !going_away && (worker.shutdown.is_requested() || self.closing.closed.get()) {
                // GOAWAY naming the last stream accepted: those finish, later ones are refused.
                if conn.shutdown(0).await.is_err() {
                    break;
                }
                going_away = true;
            }
            // After GOAWAY, the last stream's end ends the connection: `h3` itself waits for
            // the client's own GOAWAY, which an idle client may never send.
            if going_away && streams.open.get() == 0 {
                close_when_acknowledged(worker, &watch, &quic).await;
                break;
            }
            let accepted = tokio::select! {
                accepted = conn.accept() => accepted,
                _ = &mut stopping, if !going_away => continue,
                _ = &mut closed, if !going_away => continue,
                _ = &mut ended, if going_away => continue,
            };
            match accepted {
                Ok(Some(resolver)) => {
                    streams.open.set(streams.open.get() + 1);
                    let stream = Stream {
                        worker: worker.clone(),
                        config: self.config.clone(),
                        entrypoint: self.entrypoint,
                        ip,
                        tls: tls.clone(),
                        streams: streams.clone(),
                    };
                    tokio::task::spawn_local(stream.serve(resolver));
                }
                // GOAWAY done and every stream finished, or a connection error (`h3` has
                // closed the connection with its code).
                Ok(None) | Err(_) => break,
            }
        }
    }
}

/// A connection's open request streams, a wake-up when one ends, and the streams its client
/// reset before weir answered them (rapid reset).
struct OpenStreams {
    open: Cell<usize>,
    ended: Notify,
    /// Streams that have ended, however.
    finished: Cell<u32>,
    reset_by_client: Cell<u32>,
    quic: quinn::Connection,
}

impl OpenStreams {
    fn new(quic: quinn::Connection) -> OpenStreams {
        OpenStreams {
            open: Cell::new(0),
            ended: Notify::new(),
            finished: Cell::new(0),
            reset_by_client: Cell::new(0),
            quic,
        }
    }

    /// Counts a stream the client reset or stopped before weir answered it; past the
    /// allowance, once such streams are most of those the connection has had, closes the
    /// connection with `H3_EXCESSIVE_LOAD` (RFC 9114, section 8.1): the open streams end
    /// with it, and the worker goes on serving other connections.
    /// `true` when it closed the connection (once: a closed connection resets no more).
    fn client_reset(&self) -> bool {
        let resets = self.reset_by_client.get() + 1;
        self.reset_by_client.set(resets);
        if resets > RESET_ALLOWANCE && resets * 2 > self.finished.get() + 1 {
            let code = Code::H3_EXCESSIVE_LOAD
                .value()
                .try_into()
                .unwrap_or_default();
            let first = self.quic.close_reason().is_none();
            self.quic.close(code, b"too many streams reset");
            return first;
        }
        false
    }
}

/// Whether `error` is the client resetting its side of a stream, or asking weir to stop its.
fn by_client(error: &h3::error::StreamError) -> bool {
    matches!(error, h3::error::StreamError::RemoteTerminate { .. })
}

/// Closes a connection weir has sent GOAWAY on once its streams have ended: the client gets a
/// moment (`DRAIN_GRACE`) to acknowledge the last answers and close first, as browsers do after
/// GOAWAY; then weir closes it with `H3_NO_ERROR`.
async fn close_when_acknowledged(worker: &Worker, watch: &ConnWatch, quic: &quinn::Connection) {
    let closed = quic.closed();
    let _ = watch
        .within(&worker.clock, Waiting::ClientWrite, DRAIN_GRACE, closed)
        .await;
    quic.close(
        Code::H3_NO_ERROR.value().try_into().unwrap_or_default(),
        b"",
    );
}

/// The negotiated TLS session as the access log shows it (QUIC always runs TLS 1.3).
fn tls_session(connection: &quinn::Connection) -> TlsSession {
    let sni = connection
        .handshake_data()
        .and_then(|data| data.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|data| data.server_name);
    TlsSession {
        version: "TLSv1.3",
        sni: sni.map(String::into_boxed_str),
    }
}

type Resolver = h3::server::RequestResolver<h3_quinn::Connection, Bytes>;

/// One request stream's task.
struct Stream {
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    ip: IpAddr,
    tls: Option<Rc<TlsSession>>,
    streams: Rc<OpenStreams>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.streams.open.set(self.streams.open.get() - 1);
        self.streams.finished.set(self.streams.finished.get() + 1);
        self.streams.ended.notify_one();
    }
}

impl Stream {
    async fn serve(self, resolver: Resolver) {
        let worker = &self.worker;
        let watch = worker.watch_connection();
        let idle = worker.timeouts.get().idle;
        let resolving = resolver.resolve_request();
        let (request, stream) = match watch
            .within(&worker.clock, Waiting::RequestHead, idle, resolving)
            .await
        {
            Ok(Ok(resolved)) => resolved,
            Ok(Err(error)) if by_client(&error) => return self.client_reset(),
            // A head over the limit was answered 431 by `h3`; a malformed one reset the stream.
            _ => return,
        };
        let (send, mut recv) = stream.split();
        let mut out = H3Out::new(send);
        // Whether a body follows: the client's FIN usually comes with the head. What arrived
        // already is kept for the upstream; an unknown rest is declared chunked.
        let peeked = std::future::poll_fn(|cx| Poll::Ready(recv.poll_recv_data(cx))).await;
        let (first, end_stream) = match peeked {
            Poll::Ready(Ok(None)) => (None, true),
            Poll::Ready(Ok(Some(mut data))) => (Some(data.copy_to_bytes(data.remaining())), false),
            Poll::Ready(Err(error)) => {
                if by_client(&error) {
                    self.client_reset();
                }
                return;
            }
            Poll::Pending => (None, false),
        };
        let (parts, ()) = request.into_parts();
        let head = match request_head(&parts, end_stream) {
            Ok(head) => head,
            Err(error) => {
                let answer = error.plain();
                let date = date_value(worker);
                let plan = LocalPlan::new(false, &answer, answer.body.len() as u64);
                let _ = send_local(&mut out, plan, &answer.body, &date).await;
                return;
            }
        };
        let mut client = H3Client {
            body: (!end_stream).then(|| {
                Box::new(H3Recv {
                    first,
                    stream: recv,
                })
            }),
            out,
            watch,
            ip: self.ip,
            ip_text: self.ip.to_string(),
            tls: self.tls.clone(),
            buf: Vec::new(),
        };
        let runtime = self.config.load_full();
        // Boxed, as on HTTP/2: the exchange's state is large.
        let exchanging = exchange(worker, &runtime, self.entrypoint, &mut client, head);
        let _ = Box::pin(exchanging).await;
        if client.out.stopped_by_client {
            self.client_reset();
        }
    }

    /// The client reset or stopped this stream before it was answered; a connection closed
    /// for it is counted.
    fn client_reset(&self) {
        if self.streams.client_reset() {
            if let Some(ep) = self.config.load().entrypoint(self.entrypoint) {
                ep.cells[self.worker.id].abused(Abuse::RapidReset);
            }
        }
    }
}

/// One request stream as the lifecycle sees it.
struct H3Client {
    /// The request body, until it is read (or dropped, unread, with the answer).
    body: Option<Box<H3Recv>>,
    out: H3Out,
    watch: Rc<ConnWatch>,
    ip: IpAddr,
    ip_text: String,
    tls: Option<Rc<TlsSession>>,
    buf: Vec<u8>,
}

impl ClientSide for H3Client {
    type BodyIo = Empty;

    fn ip(&self) -> IpAddr {
        self.ip
    }

    fn http3(&self) -> bool {
        true
    }

    fn ip_text(&self) -> &str {
        &self.ip_text
    }

    fn scheme(&self) -> Scheme {
        Scheme::Https
    }

    fn tls(&self) -> Option<TlsInfo<'_>> {
        self.tls.as_deref().map(TlsSession::info)
    }

    fn watch(&self) -> &ConnWatch {
        &self.watch
    }

    /// The stream's DATA frames as they arrive (taken by the first try).
    fn outgoing(&mut self, _req: &RequestHead) -> Outgoing<'_, Empty> {
        Outgoing {
            ip_text: &self.ip_text,
            scheme: Scheme::Https,
            watch: &self.watch,
            out: &mut self.buf,
            body: self.body.take().map_or(BodySource::None, BodySource::H3),
        }
    }

    async fn read_body(
        &mut self,
        worker: &Worker,
        _req: &RequestHead,
        max: u64,
    ) -> Result<Bytes, BodyError> {
        let Some(H3Recv { first, mut stream }) = self.body.take().map(|body| *body) else {
            return Ok(Bytes::new());
        };
        let limit = worker.timeouts.get().body;
        let mut whole = BytesMut::new();
        whole.extend_from_slice(first.as_deref().unwrap_or_default());
        loop {
            if whole.len() as u64 > max {
                return Err(BodyError::TooLarge);
            }
            let next = std::future::poll_fn(|cx| stream.poll_recv_data(cx));
            match self
                .watch
                .within(&worker.clock, Waiting::RequestBody, limit, next)
                .await
            {
                Ok(Ok(None)) => return Ok(whole.freeze()),
                Ok(Ok(Some(mut data))) => {
                    while data.has_remaining() {
                        let piece = data.chunk();
                        whole.extend_from_slice(piece);
                        let len = piece.len();
                        data.advance(len);
                    }
                }
                Ok(Err(_)) => return Err(BodyError::Source),
                Err(Expired) => return Err(BodyError::SourceStalled),
            }
        }
    }
}

impl ClientConn for H3Client {
    async fn send_reply<'r>(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        reply: Reply<'r>,
    ) -> Sent<'r> {
        // A body nobody read: the client is told to stop sending (RFC 9114, section 4.1).
        if let Some(mut body) = self.body.take() {
            body.stream.stop_sending(Code::H3_NO_ERROR);
        }
        let upstream = reply.upstream;
        let read_timeout = upstream
            .as_ref()
            .map_or(Duration::ZERO, |u| u.service.read_timeout);
        let date = date_value(worker);
        let head_only = req.is_head();
        let mut reusable = None;
        let (status, sent) = match (reply.head, reply.body) {
            (ReplyHead::Local(local), ReplyBody::File(file)) => {
                let plan = LocalPlan::new(head_only, &local, file.len);
                let sending = self.send_file(worker, plan, &file, &date);
                (local.status, sending.await)
            }
            (ReplyHead::Shared(local), ReplyBody::File(file)) => {
                let plan = LocalPlan::new(head_only, &local, file.len);
                let sending = self.send_file(worker, plan, &file, &date);
                (local.status, sending.await)
            }
            (ReplyHead::Local(local), _) => {
                let plan = LocalPlan::new(head_only, &local, local.body.len() as u64);
                let sending = send_local(&mut self.out, plan, &local.body, &date);
                (local.status, sending.await)
            }
            (ReplyHead::Shared(local), _) => {
                let plan = LocalPlan::new(head_only, &local, local.body.len() as u64);
                let sending = send_local(&mut self.out, plan, &local.body, &date);
                (local.status, sending.await)
            }
            // The exchange renders weir's errors before they get here; one it did not is
            // answered plainly.
            (ReplyHead::Error(error), _) => {
                let local = error.plain();
                let plan = LocalPlan::new(head_only, &local, local.body.len() as u64);
                let sending = send_local(&mut self.out, plan, &local.body, &date);
                (local.status, sending.await)
            }
            (ReplyHead::Response(response), body) => {
                let status = response.status;
                let sent = match ResponsePlan::new(req, response, body, reply.body_filter, false) {
                    Ok(plan) => {
                        let trace = req.trace.as_deref();
                        let timing = (&date, head_only, read_timeout);
                        let (sent, conn) = self.send_response(worker, plan, timing, trace).await;
                        reusable = conn;
                        sent
                    }
                    Err(e) => Err(e),
                };
                (status, sent)
            }
        };
        if sent.is_err() {
            self.out.reset();
        }
        let outcome = Outcome {
            keep_alive: true,
            linger: false,
            status,
            bytes: sent.unwrap_or(0),
        };
        Sent {
            outcome,
            reusable,
            upstream,
        }
    }
}

impl H3Client {
    /// Frames a planned reply as HTTP/3: HEADERS, then the body as DATA frames (bytes, a file,
    /// or the relay from an upstream, through the body filter if one applies), then trailers,
    /// and the stream's end. Returns the body bytes sent and the upstream connection when its
    /// response was read completely.
    async fn send_response(
        &mut self,
        worker: &Worker,
        mut plan: ResponsePlan,
        (date, head_only, read_timeout): (&DateValue, bool, Duration),
        trace: Option<&TraceContext>,
    ) -> (
        Result<u64, BodyError>,
        Option<crate::servers::pool::UpstreamConn>,
    ) {
        let ended = plan.ends_with_head();
        let parts = response_head(&plan, ended, date, head_only).into_response();
        if let Err(e) = self.out.head(parts).await {
            return (Err(e), None);
        }
        if plan.length == BodyLength::None || ended {
            return (self.out.end(None).await.map(|()| 0), None);
        }
        let relay = Relay::to_client_from_upstream(worker, &self.watch, read_timeout);
        self.buf.clear();
        match plan.body {
            ReplyBody::Upstream(mut up) => {
                let mut sink = Sink {
                    trailers: Some(Vec::new()),
                    ..Sink::through(&mut self.out, plan.filter.as_mut())
                };
                let relaying = relay_body(
                    &mut up.io,
                    &mut up.buf,
                    plan.read,
                    &mut sink,
                    &mut self.buf,
                    false,
                    &relay,
                );
                let relayed = relaying.await.map(|bytes| sink.counted(bytes));
                // A chunked body's trailers end the stream as its trailers.
                let trailers = sink.trailers.take().map(|raw| trailer_fields(&raw));
                let trailers = trailers.filter(|fields| !fields.is_empty());
                match relayed {
                    Ok(sent) => match self.out.end(trailers).await {
                        Ok(()) => (Ok(sent), plan.head.keep_alive.then_some(up)),
                        Err(e) => (Err(e), None),
                    },
                    Err(e) => (Err(e), None),
                }
            }
            ReplyBody::Stream(mut stream) => {
                let mut sink = Sink::through(&mut self.out, plan.filter.as_mut());
                let relaying =
                    relay_stream(&mut stream.recv, &mut sink, &mut self.buf, false, &relay);
                let (bytes, trailers) = match relaying.await {
                    Ok(relayed) => relayed,
                    Err(e) => return (Err(e), None),
                };
                let sent = sink.counted(bytes);
                if let (Some(trace), Some(status)) =
                    (trace, trailers.as_ref().and_then(|t| t.get("grpc-status")))
                {
                    trace.note_grpc_status(status.as_bytes());
                }
                (self.out.end(trailers).await.map(|()| sent), None)
            }
            ReplyBody::Bytes(bytes) => (self.send_body(worker, &bytes).await, None),
            ReplyBody::File(file) => {
                let sending =
                    send_file_body(worker, &self.watch, &mut self.out, &file, plan.filter);
                (sending.await, None)
            }
            ReplyBody::Produced(mut producer) => {
                let mut sink = Sink::through(&mut self.out, plan.filter.as_mut());
                let relaying =
                    relay_produced(&mut *producer, &mut sink, &mut self.buf, false, &relay);
                match relaying.await.map(|bytes| sink.counted(bytes)) {
                    Ok(sent) => (self.out.end(None).await.map(|()| sent), None),
                    Err(e) => (Err(e), None),
                }
            }
            ReplyBody::Local | ReplyBody::Upgrade(_) => {
                (self.out.end(None).await.map(|()| 0), None)
            }
        }
    }

    /// A body in memory, under `client_send_timeout`, then the stream's end.
    async fn send_body(&mut self, worker: &Worker, body: &[u8]) -> Result<u64, BodyError> {
        let sent = send_all(worker, &self.watch, &mut self.out, body).await?;
        self.out.end(None).await?;
        Ok(sent)
    }

    /// A local head with a file body (the `static` action).
    async fn send_file(
        &mut self,
        worker: &Worker,
        plan: LocalPlan<'_>,
        file: &FileBody,
        date: &DateValue,
    ) -> Result<u64, BodyError> {
        self.out
            .head(local_head(&plan, date).into_response())
            .await?;
        if !plan.body_follows {
            return self.out.end(None).await.map(|()| 0);
        }
        send_file_body(worker, &self.watch, &mut self.out, file, None).await
    }
}

/// A local answer with its body in memory (small: no deadline, as on HTTP/2).
async fn send_local(
    out: &mut H3Out,
    plan: LocalPlan<'_>,
    body: &Bytes,
    date: &DateValue,
) -> Result<u64, BodyError> {
    out.head(local_head(&plan, date).into_response()).await?;
    if plan.body_follows {
        out.write_all(body).await.map_err(|_| BodyError::Sink)?;
    }
    out.end(None).await?;
    Ok(if plan.body_follows {
        body.len() as u64
    } else {
        0
    })
}

/// Writes `data` as QUIC's flow control allows, under `client_send_timeout`.
async fn send_all(
    worker: &Worker,
    watch: &ConnWatch,
    out: &mut H3Out,
    data: &[u8],
) -> Result<u64, BodyError> {
    let limit = worker.timeouts.get().send;
    let write = out.write_all(data);
    match watch
        .within(&worker.clock, Waiting::ClientWrite, limit, write)
        .await
    {
        Ok(Ok(())) => Ok(data.len() as u64),
        Ok(Err(_)) => Err(BodyError::Sink),
        Err(Expired) => Err(BodyError::SinkStalled),
    }
}

/// A file body read in chunks (from the page cache, as the HTTP/2 driver does), through
/// `filter` when one is installed, then the stream's end.
async fn send_file_body(
    worker: &Worker,
    watch: &ConnWatch,
    out: &mut H3Out,
    file: &FileBody,
    mut filter: Option<BodyFilter>,
) -> Result<u64, BodyError> {
    let mut offset = file.offset;
    let end = file.offset + file.len;
    let mut sent = 0;
    let mut chunk = Vec::new();
    while offset < end {
        let take = FILE_READ_CHUNK.min(end - offset) as usize;
        chunk.resize(take, 0);
        read_exact_at(&file.file, &mut chunk, offset).map_err(|_| BodyError::Source)?;
        offset += take as u64;
        let data = match &mut filter {
            Some(filter) => filter.write(&chunk).map_err(|_| BodyError::Sink)?,
            None => &chunk[..],
        };
        sent += send_all(worker, watch, out, data).await?;
    }
    if let Some(filter) = &mut filter {
        let last = filter.finish().map_err(|_| BodyError::Sink)?;
        sent += send_all(worker, watch, out, last).await?;
    }
    out.end(None).await?;
    Ok(sent)
}

/// A DATA frame on its way into the QUIC stream: the stream comes back with the result.
type Sending = Pin<Box<dyn Future<Output = (H3Send, Result<(), h3::error::StreamError>)>>>;

/// The sending half of a request stream as a byte sink, so the relays that feed the other
/// drivers feed this one: each write becomes a DATA frame, and a write is done once QUIC has
/// taken the frame (its flow control holds the next one back).
struct H3Out {
    /// `None` while a frame is on its way (`sending` holds the stream), or once it failed.
    stream: Option<H3Send>,
    sending: Option<(Sending, usize)>,
    /// The stream has been finished or reset: dropping it must not do it again.
    done: bool,
    /// A send failed because the client reset the stream or sent STOP_SENDING.
    stopped_by_client: bool,
}

impl H3Out {
    fn new(stream: H3Send) -> H3Out {
        H3Out {
            stream: Some(stream),
            sending: None,
            done: false,
            stopped_by_client: false,
        }
    }

    /// Waits for the frame on its way; the stream is back afterwards (unless it failed).
    fn poll_sent(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some((sending, len)) = &mut self.sending else {
            return Poll::Ready(Ok(0));
        };
        let len = *len;
        let (stream, result) = std::task::ready!(sending.as_mut().poll(cx));
        self.sending = None;
        self.stream = Some(stream);
        Poll::Ready(result.map(|()| len).map_err(|e| {
            self.stopped_by_client |= by_client(&e);
            io::Error::other(e)
        }))
    }

    /// The stream, once no frame is on its way.
    async fn settled(&mut self) -> Result<&mut H3Send, BodyError> {
        std::future::poll_fn(|cx| self.poll_sent(cx))
            .await
            .map_err(|_| BodyError::Sink)?;
        self.stream.as_mut().ok_or(BodyError::Sink)
    }

    /// Sends the response's HEADERS.
    async fn head(&mut self, parts: http::Response<()>) -> Result<(), BodyError> {
        let stream = self.settled().await?;
        let sent = stream.send_response(parts).await;
        sent.map_err(|e| self.failed(&e))
    }

    /// A send's error; notes whether the client caused it.
    fn failed(&mut self, error: &h3::error::StreamError) -> BodyError {
        self.stopped_by_client |= by_client(error);
        BodyError::Sink
    }

    /// Ends the stream, after `trailers` when there are any.
    async fn end(&mut self, trailers: Option<http::HeaderMap>) -> Result<(), BodyError> {
        let stream = self.settled().await?;
        if let Some(trailers) = trailers {
            if let Err(e) = stream.send_trailers(trailers).await {
                return Err(self.failed(&e));
            }
        }
        let finished = stream.finish().await;
        self.done = true;
        finished.map_err(|e| self.failed(&e))
    }

    /// Resets the stream: an answer that failed half-way must not look complete.
    fn reset(&mut self) {
        if let Some(stream) = self.stream.as_mut().filter(|_| !self.done) {
            stream.stop_stream(Code::H3_INTERNAL_ERROR);
        }
        self.done = true;
    }
}

impl Drop for H3Out {
    /// A stream dropped before its end (the task ended on an error) is reset, not finished.
    fn drop(&mut self) {
        self.reset();
    }
}

impl AsyncWrite for H3Out {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // A frame already on its way is this same write, asked again after `Pending`.
        if this.sending.is_some() {
            return this.poll_sent(cx);
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let Some(mut stream) = this.stream.take() else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        let data = Bytes::copy_from_slice(buf);
        let sending: Sending = Box::pin(async move {
            let result = stream.send_data(data).await;
            (stream, result)
        });
        this.sending = Some((sending, buf.len()));
        this.poll_sent(cx)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_sent(cx).map_ok(|_| ())
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_sent(cx).map_ok(|_| ())
    }
}
