//! The HTTP/2 connection driver (server side), over TLS with ALPN `h2` or cleartext with prior
//! knowledge (`h2c`). weir's own codec (`weir-h2`, sans-IO) speaks the protocol: frames, HPACK,
//! flow control, and the abuse limits weir sets from `entrypoints.NAME.http2` (concurrent
//! streams, header list size, client and server resets). This task owns the socket: it reads
//! into the codec, hands each stream's events to the stream's task, and writes the codec's
//! output with vectored writes. Each stream runs the normal lifecycle: its head becomes weir's
//! head at the edge (`:authority` as `Host`, cookies joined, a body without a length declared
//! chunked), [`exchange`] routes it and runs the action, and the stream's task queues the
//! reply as HEADERS and DATA frames under the client's flow control. The request body is lent
//! to the upstream side as the codec's payloads (`reply/h2_edge.rs`, no copy); its window is
//! given back as the relay uses it. A connection idle for `PARK_AFTER` gives its read and output
//! buffers back and parks (`io/idle.rs`): its task ends, and the socket and the codec's few
//! hundred bytes of state wait in the worker's idle set until the client writes again.

use crate::actions::static_files::read_exact_at;
use crate::conn::h1::canonical_ip;
use crate::conn::ClientIo;
use crate::exchange::exchange;
use crate::exchange::plan::{BodyLength, LocalPlan, ResponsePlan};
use crate::http::codec::trailer_fields;
use crate::http::codec::{self, RequestHead};
use crate::http::error::LocalError;
use crate::http::file_body::FileBody;
use crate::http::trace_context::TraceContext;
use crate::http::Scheme;
use crate::io::buffers::FILE_READ_CHUNK;
use crate::io::h2_output;
use crate::io::idle::{H2Io, ParkedH2, PARK_AFTER};
use crate::io::linger::{linger, LINGER_TIMEOUT};
use crate::io::watch::{ConnWatch, Expired, Waiting, DATE_HEADER_LEN, SWEEP_TICK};
use crate::observe::metrics::Abuse;
use crate::reply::body_filter::BodyFilter;
use crate::reply::client::{ClientConn, ClientSide, Outcome, Sent, TlsInfo, TlsSession};
use crate::reply::h2_edge::{EdgeBody, EdgeConn, SharedConn, Slot};
use crate::reply::relay::{
    relay_body, relay_produced, relay_stream, BodyError, Relay, Sink, FLUSH_AT,
};
use crate::reply::request_body::{BodySource, Outgoing};
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::state::runtime::SharedRuntime;
use crate::worker::Worker;
use bytes::{Bytes, BytesMut};
use std::cell::RefCell;

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, Empty, ReadBuf};
use weir_h2::{Connection, Event, Reason, StreamTable};

/// The client connection preface: what an `h2c` connection starts with.
pub const PREFACE: &[u8] = weir_h2::PREFACE;
/// Streams the client may reset before weir answered them, and resets weir may cause, before
/// the connection is closed (rapid reset, CVE-2023-44487).
const MAX_CLIENT_RESETS: u32 = 64;
const MAX_LOCAL_RESETS: u32 = 256;
/// Output not yet taken by the socket past which streams wait before queuing more (the `h2`
/// crate's send buffer was `FLUSH_AT * 4` per stream).
const OUTPUT_LIMIT: usize = FLUSH_AT * 4;
/// What an idle connection reads its next bytes into (on the stack: the codec's read buffer
/// is given back while it idles).
const IDLE_READ: usize = 4096;

/// Serves one HTTP/2 connection until the client or weir ends it, or it parks. A stop (or the
/// idle timeout with no stream open) sends GOAWAY and lets open streams finish. The loop's
/// own future, not one around it: a layer more cost every poll a few instructions.
pub fn serve<S>(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    io: S,
    peer: SocketAddr,
    scheme: Scheme,
    watch: Rc<ConnWatch>,
) -> impl std::future::Future<Output = ()>
where
    S: ClientIo + 'static,
{
    run(
        worker,
        config,
        entrypoint,
        (io, peer, scheme),
        watch,
        Start::New,
    )
}

/// Serves a parked HTTP/2 connection again: its client wrote, its idle timeout passed (it
/// says GOAWAY), or the worker stops.
pub async fn resume(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    parked: Box<ParkedH2>,
    peer: SocketAddr,
) {
    let ParkedH2 {
        io,
        codec,
        timed_out,
    } = *parked;
    let watch = worker.watch_connection();
    let start = Start::Parked(Rc::new(RefCell::new(EdgeConn::new(codec))), timed_out);
    match io {
        H2Io::Plain(socket) => match tokio::net::TcpStream::from_std(socket) {
            Ok(io) => {
                let io = (io, peer, Scheme::Http);
                run(worker, config, entrypoint, io, watch, start).await;
            }
            Err(e) => crate::log_error!("worker {}: cannot resume a connection: {e}", worker.id),
        },
        H2Io::Tls(stream) => {
            let io = (*stream, peer, Scheme::Https);
            // Boxed: the TLS stream would size every resumed cleartext connection's task.
            Box::pin(run(worker, config, entrypoint, io, watch, start)).await;
        }
    }
}

/// Where a connection's loop starts.
enum Start {
    /// A new connection: the codec is made from its entrypoint's settings.
    New,
    /// A parked one, its codec already shared (by value, its 448 bytes would stay in the task
    /// beside the shared copy); `true` when its idle timeout passed while it was parked.
    Parked(SharedConn, bool),
}

/// The connection's loop, from its first bytes or from where it parked.
async fn run<S>(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    (mut io, peer, scheme): (S, SocketAddr, Scheme),
    watch: Rc<ConnWatch>,
    start: Start,
) where
    S: ClientIo + 'static,
{
    let (conn, timed_out) = match start {
        Start::New => {
            let Some(settings) = config.load().entrypoint(entrypoint).map(|ep| ep.http2) else {
                return;
            };
            let codec = Connection::new(weir_h2::Config {
                max_concurrent_streams: settings.max_concurrent_streams,
                initial_window_size: settings.initial_window_size,
                connection_window_size: settings.initial_window_size.saturating_mul(4),
                max_frame_size: settings.max_frame_size,
                max_header_list_size: settings.max_header_list_size,
                max_client_resets: MAX_CLIENT_RESETS,
                max_local_resets: MAX_LOCAL_RESETS,
                ..weir_h2::Config::default()
            });
            let conn: SharedConn = Rc::new(RefCell::new(EdgeConn::new(codec)));
            (conn, false)
        }
        Start::Parked(conn, timed_out) => (conn, timed_out),
    };
    // The TLS session for the access log, kept only while it logs.
    let tls = (config.load().access_log.is_some())
        .then(|| io.tls().map(|info| Rc::new(TlsSession::of(info))))
        .flatten();
    let idle = worker.timeouts.get().idle;
    let ip = canonical_ip(peer.ip());
    let streams = Rc::new(StreamContext {
        worker: worker.clone(),
        config: config.clone(),
        entrypoint,
        ip,
        // Formatted once for the connection's streams (per stream it cost 1,260 instructions).
        ip_text: ip.to_string().into(),
        scheme,
        tls,
        conn: conn.clone(),
    });
    let mut going_away = false;
    if timed_out {
        conn.borrow_mut().codec.begin_graceful_shutdown();
        going_away = true;
    }
    let mut client_going_away = false;
    // Idle past `PARK_AFTER`: the codec's buffers are given back while it waits on.
    let mut long_idle = false;
    // Whether the client closed its side: otherwise weir ended the connection and lingers.
    let mut client_closed = false;
    let parked = loop {
        let ended = take_events(&streams, &mut client_going_away);
        if ended {
            break None;
        }
        if !going_away && worker.shutdown.is_requested() {
            conn.borrow_mut().codec.begin_graceful_shutdown();
            going_away = true;
        }
        let (idle_now, released) = {
            let mut state = conn.borrow_mut();
            let state = &mut *state;
            let nothing_open = state.slots.is_empty() && state.codec.open_streams() == 0;
            if nothing_open && client_going_away && !state.codec.is_done() {
                state.codec.send_goaway(Reason::NO_ERROR);
            }
            if state.codec.is_done() && !state.codec.has_output() {
                break None;
            }
            let idle_now = nothing_open && !state.codec.has_output();
            long_idle &= idle_now;
            let released = long_idle && state.codec.release_idle_buffers();
            if released {
                state.slots.release();
                state.reset_when_sent = Vec::new();
            }
            (idle_now, released)
        };
        let driving = std::future::poll_fn(|cx| drive(&mut io, &conn, (idle_now, released), cx));
        // With no stream open the connection is idle: the idle timeout and a stop end it.
        // Otherwise the socket is driven without a deadline: the streams keep their own.
        let step = if idle_now {
            // A busy client's next request comes within a second: the buffers stay for it
            // (given back and taken again per request, they cost allocations every time).
            let holds = !going_away && !long_idle && idle > PARK_AFTER;
            let limit = match (holds, long_idle) {
                (true, _) => PARK_AFTER,
                (false, true) => idle.saturating_sub(PARK_AFTER),
                (false, false) => idle,
            };
            let since = worker.clock.now();
            match watch
                .within(&worker.clock, Waiting::KeepAlive, limit, driving)
                .await
            {
                Ok(step) => step,
                // A stop ended the wait: the loop's start sends GOAWAY.
                Err(Expired) if !going_away && worker.shutdown.is_requested() => continue,
                Err(Expired) if holds => {
                    long_idle = true;
                    // Nothing but the codec's state and the socket left to keep: they leave
                    // the task. `since` may be a tick stale, so the idle timeout ends a tick
                    // later, as in `ConnWatch::check`.
                    if S::PARKS && parkable(&streams, &conn) {
                        break Some(since + idle + SWEEP_TICK);
                    }
                    continue;
                }
                // Idle again after a GOAWAY: the client did not answer its PING.
                Err(Expired) if going_away => break None,
                Err(Expired) => {
                    conn.borrow_mut().codec.begin_graceful_shutdown();
                    going_away = true;
                    continue;
                }
            }
        } else {
            let stopping = worker.shutdown.notify.notified();
            tokio::pin!(stopping);
            stopping.as_mut().enable();
            tokio::select! {
                step = driving => step,
                _ = &mut stopping, if !going_away => continue,
            }
        };
        if step == Step::Closed {
            client_closed = true;
            break None;
        }
    };
    if let Some(expires) = parked {
        drop(streams);
        if let Ok(state) = Rc::try_unwrap(conn) {
            let codec = state.into_inner().codec;
            io.park_h2(&worker.idle, codec, (peer, entrypoint), expires);
        }
        return;
    }
    let flushed = flush_rest(&worker, &watch, &mut io, &conn).await;
    {
        let mut state = conn.borrow_mut();
        for slot in state.slots.iter_mut() {
            fail(slot);
        }
    }
    // A client still sending (a flood of resets, say) would get a reset on close, which can
    // destroy the GOAWAY before it is read.
    if !client_closed && flushed.is_ok() {
        let quiet = if worker.shutdown.is_requested() {
            worker.drain_grace.get()
        } else {
            LINGER_TIMEOUT
        };
        let mut buf = BytesMut::new();
        Box::pin(linger(
            &mut io,
            &mut buf,
            (&worker.clock, &worker.buffers),
            &watch,
            quiet,
        ))
        .await;
        worker.buffers.give_read(buf);
    }
}

/// Whether an idle connection can park: no stream's task holds its state any more, and the
/// codec could give its buffers back (nothing half-read or unwritten).
fn parkable(streams: &Rc<StreamContext>, conn: &SharedConn) -> bool {
    Rc::strong_count(streams) == 1
        && Rc::strong_count(conn) == 2
        && conn.borrow_mut().codec.release_idle_buffers()
}

/// Hands the codec's events to the streams; `true` on a connection error (GOAWAY is in the
/// output).
fn take_events(streams: &Rc<StreamContext>, client_going_away: &mut bool) -> bool {
    let mut state = streams.conn.borrow_mut();
    let state = &mut *state;
    while let Some(event) = state.codec.poll_event() {
        match event {
            Event::Request {
                stream_id,
                head,
                end_stream,
            } => {
                state.slots.push(
                    stream_id,
                    Slot {
                        recv_ended: end_stream,
                        ..Slot::default()
                    },
                );
                let stream = Stream::new(streams, stream_id);
                tokio::task::spawn_local(stream.serve(head, end_stream));
            }
            Event::HeadTooLarge {
                stream_id,
                end_stream,
            } => {
                let no_fields: [(&[u8], &[u8]); 0] = [];
                let _ = state.codec.send_head(stream_id, 431, &no_fields, true);
                if !end_stream {
                    state.codec.send_reset(stream_id, Reason::NO_ERROR);
                }
            }
            Event::Data {
                stream_id,
                data,
                end_stream,
            } => match state.slots.get_mut(stream_id) {
                Some(slot) if !slot.body_dropped => {
                    if !data.is_empty() {
                        slot.body.push_back(data);
                    }
                    slot.recv_ended |= end_stream;
                    if let Some(reader) = slot.reader.take() {
                        reader.wake();
                    }
                }
                // Nobody reads it: its window goes back at once.
                _ => state.codec.release_capacity(stream_id, data.len()),
            },
            Event::Trailers { stream_id, fields } => {
                if let Some(slot) = state.slots.get_mut(stream_id) {
                    let mut trailers = http::HeaderMap::new();
                    for (name, value) in fields.iter() {
                        append(&mut trailers, name, value);
                    }
                    slot.trailers = Some(trailers);
                    slot.recv_ended = true;
                    if let Some(reader) = slot.reader.take() {
                        reader.wake();
                    }
                }
            }
            Event::Reset { stream_id, .. } | Event::StreamError { stream_id, .. } => {
                if let Some(slot) = state.slots.get_mut(stream_id) {
                    fail(slot);
                }
            }
            Event::Settings | Event::WindowUpdate { .. } => wake_writers(&mut state.slots),
            Event::GoAway { .. } => *client_going_away = true,
            Event::Ping { .. } => {}
            Event::ConnectionError { reason } => {
                if reason == Reason::ENHANCE_YOUR_CALM {
                    let runtime = streams.config.load();
                    if let Some(ep) = runtime.entrypoint(streams.entrypoint) {
                        ep.cells[streams.worker.id].abused(Abuse::RapidReset);
                    }
                }
                return true;
            }
        }
    }
    false
}

/// The stream can no longer be read or written: its waiters find out.
fn fail(slot: &mut Slot) {
    slot.failed = true;
    if let Some(reader) = slot.reader.take() {
        reader.wake();
    }
    if let Some(writer) = slot.writer.take() {
        writer.wake();
    }
}

fn wake_writers(slots: &mut StreamTable<Slot>) {
    for slot in slots.iter_mut() {
        if let Some(writer) = slot.writer.take() {
            writer.wake();
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Bytes were read, or a stream's task changed something: events to take, states to check.
    Progress,
    /// The client closed, or the socket failed.
    Closed,
}

/// Writes the codec's output and reads into it until there is something to look at: bytes
/// read, or a change a stream's task made that ends or idles the connection. `idle`: no
/// stream open; `released`: the codec gave its buffers back (the read goes to the stack).
fn drive<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    conn: &SharedConn,
    (idle, released): (bool, bool),
    cx: &mut Context<'_>,
) -> Poll<Step> {
    let mut state = conn.borrow_mut();
    let state = &mut *state;
    if write_output(io, state, cx).is_err() {
        return Poll::Ready(Step::Closed);
    }
    let read = if released {
        let mut scratch = [0u8; IDLE_READ];
        let mut buf = ReadBuf::new(&mut scratch);
        match Pin::new(&mut *io).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => {
                state.codec.receive(buf.filled());
                Poll::Ready(Ok(buf.filled().len()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    } else {
        tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, state.codec.input())
    };
    match read {
        Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => Poll::Ready(Step::Closed),
        Poll::Ready(Ok(_)) => Poll::Ready(Step::Progress),
        Poll::Pending => {
            // The last stream's task ended (the connection turns idle: the idle timeout
            // applies), or the final GOAWAY is out: the loop looks again.
            let written = !state.codec.has_output();
            let nothing_open = state.slots.is_empty() && state.codec.open_streams() == 0;
            if written && ((!idle && nothing_open) || state.codec.is_done()) {
                return Poll::Ready(Step::Progress);
            }
            state.task = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

/// Writes what the socket takes of the codec's output; wakes the streams waiting for room
/// and resets the streams whose answer went out while their body was left unread.
fn write_output<S: AsyncWrite + Unpin>(
    io: &mut S,
    state: &mut EdgeConn,
    cx: &mut Context<'_>,
) -> std::io::Result<()> {
    if h2_output::write_output(io, &mut state.codec, cx)? {
        wake_writers(&mut state.slots);
        if !state.reset_when_sent.is_empty() {
            reset_answered(state);
        }
    }
    Ok(())
}

/// RST_STREAM (NO_ERROR) for the streams in `reset_when_sent` whose answer is out.
fn reset_answered(state: &mut EdgeConn) {
    let codec = &mut state.codec;
    state
        .reset_when_sent
        .retain(|&id| match codec.stream_progress(id) {
            None => false,
            Some(progress) if progress.answer_sent => {
                codec.send_reset(id, Reason::NO_ERROR);
                false
            }
            Some(_) => true,
        });
}

/// Writes what is left of the output (a final GOAWAY) under the send timeout.
async fn flush_rest<S: AsyncRead + AsyncWrite + Unpin>(
    worker: &Worker,
    watch: &ConnWatch,
    io: &mut S,
    conn: &SharedConn,
) -> Result<(), Expired> {
    let flushing = std::future::poll_fn(|cx| {
        let mut state = conn.borrow_mut();
        if write_output(io, &mut state, cx).is_err() || !state.codec.has_output() {
            return Poll::Ready(());
        }
        Poll::Pending
    });
    let limit = worker.timeouts.get().send;
    watch
        .within(&worker.clock, Waiting::ClientWrite, limit, flushing)
        .await
}

/// What every stream of a connection is started with.
struct StreamContext {
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    ip: IpAddr,
    ip_text: Rc<str>,
    scheme: Scheme,
    tls: Option<Rc<TlsSession>>,
    conn: SharedConn,
}

/// One stream's task; its slot is removed when it ends.
struct Stream {
    context: Rc<StreamContext>,
    out: StreamOut,
}

impl Stream {
    fn new(context: &Rc<StreamContext>, id: u32) -> Stream {
        Stream {
            context: context.clone(),
            out: StreamOut {
                conn: context.conn.clone(),
                id,
            },
        }
    }

    async fn serve(self, head: weir_h2::RequestHead, end_stream: bool) {
        let context = &*self.context;
        let head = match edge_request_head(&head, end_stream) {
            Ok(head) => head,
            Err(error) => {
                let answer = error.plain();
                let date = date_value(&context.worker);
                let plan = LocalPlan::new(false, &answer, answer.body.len() as u64);
                let _ = send_local(&self.out, plan, &answer.body, &date);
                return;
            }
        };
        let watch = context.worker.watch_connection();
        let body = (!end_stream).then(|| EdgeBody::new(self.out.conn.clone(), self.out.id));
        let mut client = H2Client {
            body,
            send: StreamOut {
                conn: self.out.conn.clone(),
                id: self.out.id,
            },
            watch,
            ip: context.ip,
            ip_text: context.ip_text.clone(),
            scheme: context.scheme,
            tls: context.tls.clone(),
            // Room for the upstream request's head, written once per stream (grown from
            // nothing, it cost six reallocations a request).
            out: Vec::with_capacity(1024),
        };
        let runtime = context.config.load_full();
        // Boxed: the exchange's state is large, and the stream's task is moved whole when it
        // is spawned (perf: memmove was 15% of an h2c worker's time unboxed).
        let exchanging = exchange(
            &context.worker,
            &runtime,
            context.entrypoint,
            &mut client,
            head,
        );
        let _ = Box::pin(exchanging).await;
    }
}

impl Drop for Stream {
    /// The stream's task is over: an answer cut short is reset (CANCEL); a complete one whose
    /// request body the client is still sending is reset (NO_ERROR) once it is out.
    fn drop(&mut self) {
        let id = self.out.id;
        let mut state = self.out.conn.borrow_mut();
        let state = &mut *state;
        if let Some(i) = state.slots.position(id) {
            state.slots.swap_remove(i);
        }
        match state.codec.stream_progress(id) {
            None => {}
            Some(p) if !p.answer_queued => state.codec.send_reset(id, Reason::CANCEL),
            Some(p) if p.request_ended => {}
            Some(p) if p.answer_sent => state.codec.send_reset(id, Reason::NO_ERROR),
            Some(_) => state.reset_when_sent.push(id),
        }
        state.kick();
    }
}

/// A request head from weir-h2 as weir's head, built from its fields directly
/// ([`RequestHead::from_fields`]: an HTTP/1 head's checks, no text parsed back).
fn edge_request_head(
    head: &weir_h2::RequestHead,
    end_stream: bool,
) -> Result<RequestHead, LocalError> {
    let authority = match head.fields.get(b"host") {
        Some(_) => None,
        None => head.authority(),
    };
    let chunked = !end_stream && head.content_length.is_none();
    let target = head.path().unwrap_or(b"/");
    let fields = head.fields.iter();
    RequestHead::from_fields(head.method(), target, authority, fields, chunked)
        .map_err(|refused| LocalError::from(&refused))
}

/// An HTTP/2 (or HTTP/3) request head as the `http` crate holds it, as weir's head (see
/// [`RequestHead::from_fields`]).
pub(crate) fn request_head(
    parts: &http::request::Parts,
    end_stream: bool,
) -> Result<RequestHead, LocalError> {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = match parts.headers.contains_key(http::header::HOST) {
        true => None,
        false => parts.uri.authority().map(|a| a.as_str().as_bytes()),
    };
    let chunked = !end_stream && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
    let fields = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
    let method = parts.method.as_str().as_bytes();
    RequestHead::from_fields(method, target.as_bytes(), authority, fields, chunked)
        .map_err(|refused| LocalError::from(&refused))
}

/// A stream's send side: what its task queues in the codec, waiting for room first (the
/// client's window taking what was queued before, the socket the connection's output).
struct StreamOut {
    conn: SharedConn,
    id: u32,
}

impl StreamOut {
    fn head(&self, head: &AnswerHead, end_stream: bool) -> Result<(), BodyError> {
        let mut state = self.conn.borrow_mut();
        let sent = state
            .codec
            .send_head_fields(self.id, head.status, head.fields(), end_stream);
        state.kick();
        sent.map_err(|_| BodyError::Sink)
    }

    fn data(&self, data: Bytes, end_stream: bool) -> Result<(), BodyError> {
        let mut state = self.conn.borrow_mut();
        let sent = state.codec.send_data(self.id, data, end_stream);
        state.kick();
        sent.map_err(|_| BodyError::Sink)
    }

    fn trailers(&self, trailers: &http::HeaderMap) -> Result<(), BodyError> {
        let mut state = self.conn.borrow_mut();
        let fields = trailers
            .iter()
            .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
        let sent = state.codec.send_trailers_fields(self.id, fields);
        state.kick();
        sent.map_err(|_| BodyError::Sink)
    }

    fn reset(&self, reason: Reason) {
        let mut state = self.conn.borrow_mut();
        state.codec.send_reset(self.id, reason);
        state.kick();
    }

    /// Ready once the stream may queue more: what it queued went out to the connection's
    /// output (the client's window took it), and the output is within its bound. With
    /// `drained` (the answer is complete), only the first holds, and a reset since is no
    /// failure.
    fn poll_room(&self, cx: &mut Context<'_>, drained: bool) -> Poll<Result<(), BodyError>> {
        let mut state = self.conn.borrow_mut();
        let state = &mut *state;
        // An answer all handed to the output is sent, whatever the client did since.
        let queued = state.codec.queued_bytes(self.id);
        if drained && queued == 0 {
            return Poll::Ready(Ok(()));
        }
        let Some(slot) = state.slots.get_mut(self.id) else {
            return Poll::Ready(Err(BodyError::Sink));
        };
        if slot.failed {
            return Poll::Ready(Err(BodyError::Sink));
        }
        if queued == 0 && state.codec.output_len() < OUTPUT_LIMIT {
            return Poll::Ready(Ok(()));
        }
        // Woken by the connection's task when the socket or the client's window takes more.
        slot.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Waits for room under `client_send_timeout`; a client that gives none has the stream
    /// reset (CANCEL).
    async fn room(
        &self,
        worker: &Worker,
        watch: &ConnWatch,
        drained: bool,
    ) -> Result<(), BodyError> {
        let waiting = std::future::poll_fn(|cx| self.poll_room(cx, drained));
        let limit = worker.timeouts.get().send;
        match watch
            .within(&worker.clock, Waiting::ClientWrite, limit, waiting)
            .await
        {
            Ok(room) => room,
            Err(Expired) => {
                self.reset(Reason::CANCEL);
                Err(BodyError::SinkStalled)
            }
        }
    }
}

/// The relay's sink: each write is copied into one DATA payload once there is room, so a slow
/// reader slows the relay and the relay's deadline covers the wait.
impl AsyncWrite for StreamOut {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        match self.poll_room(cx, false) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
            Poll::Ready(Ok(())) => match self.data(Bytes::copy_from_slice(buf), false) {
                Ok(()) => Poll::Ready(Ok(buf.len())),
                Err(_) => Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
            },
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// One stream as the lifecycle sees it.
struct H2Client {
    /// The request body, until it is read (or dropped, unread, with the answer).
    body: Option<EdgeBody>,
    send: StreamOut,
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
                    body.release_capacity(data.len());
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
                let sending = self.send_local_body(worker, plan, &local.body, &date);
                (local.status, sending.await)
            }
            (ReplyHead::Shared(local), _) => {
                let plan = LocalPlan::new(head_only, &local, local.body.len() as u64);
                let sending = self.send_local_body(worker, plan, &local.body, &date);
                (local.status, sending.await)
            }
            // The exchange renders weir's errors before they get here (`render_error`); one
            // it did not is answered plainly.
            (ReplyHead::Error(error), _) => {
                let local = error.plain();
                let plan = LocalPlan::new(head_only, &local, local.body.len() as u64);
                let sending = self.send_local_body(worker, plan, &local.body, &date);
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
        // What is still queued behind the client's window goes out before the stream's task
        // ends (else it is reset).
        let sent = match sent {
            Ok(bytes) => self
                .send
                .room(worker, &self.watch, true)
                .await
                .map(|()| bytes),
            Err(e) => Err(e),
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
        (date, head_only, read_timeout): (&DateValue, bool, Duration),
        trace: Option<&TraceContext>,
    ) -> (
        Result<u64, BodyError>,
        Option<crate::servers::pool::UpstreamConn>,
    ) {
        // An answer that ends with its head (gRPC's trailers-only form) ends with its HEADERS
        // here too, and declares no length.
        let ended = plan.ends_with_head();
        let head = response_head(&plan, ended, date, head_only);
        let no_body = plan.length == BodyLength::None || ended;
        if self.send.head(&head, no_body).is_err() {
            return (Err(BodyError::Sink), None);
        }
        let send = &mut self.send;
        if no_body {
            return (Ok(0), None);
        }
        match plan.body {
            ReplyBody::Upstream(mut up) => {
                let relay = Relay::to_client_from_upstream(worker, &self.watch, read_timeout);
                let mut sink = Sink {
                    trailers: Some(Vec::new()),
                    ..Sink::through(&mut *send, plan.filter.as_mut())
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
                    Some(fields) if !fields.is_empty() => send.trailers(&fields),
                    _ => send.data(Bytes::new(), true),
                };
                match relayed {
                    Ok(sent) if ended.is_ok() => (Ok(sent), plan.head.keep_alive.then_some(up)),
                    Ok(_) => (Err(BodyError::Sink), None),
                    Err(e) => {
                        send.reset(Reason::INTERNAL_ERROR);
                        (Err(e), None)
                    }
                }
            }
            ReplyBody::Stream(mut stream) => {
                let relay = Relay::to_client_from_upstream(worker, &self.watch, read_timeout);
                let mut sink = Sink::through(&mut *send, plan.filter.as_mut());
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
                        send.trailers(&trailers).map(|()| sent)
                    }
                    Ok((bytes, None)) => {
                        let sent = sink.counted(bytes);
                        send.data(Bytes::new(), true).map(|()| sent)
                    }
                    Err(e) => {
                        send.reset(Reason::INTERNAL_ERROR);
                        return (Err(e), None);
                    }
                };
                (ended, None)
            }
            ReplyBody::Bytes(bytes) => {
                (send_all(worker, &self.watch, send, bytes, true).await, None)
            }
            ReplyBody::File(file) => {
                let sending = send_file_body(worker, &self.watch, send, &file, plan.filter);
                (sending.await, None)
            }
            ReplyBody::Produced(mut producer) => {
                let relay = Relay::to_client(worker, &self.watch);
                let mut sink = Sink::through(&mut *send, plan.filter.as_mut());
                self.out.clear();
                let relaying =
                    relay_produced(&mut *producer, &mut sink, &mut self.out, false, &relay);
                match relaying.await {
                    Ok(bytes) => {
                        let sent = sink.counted(bytes);
                        (send.data(Bytes::new(), true).map(|()| sent), None)
                    }
                    Err(e) => {
                        send.reset(Reason::INTERNAL_ERROR);
                        (Err(e), None)
                    }
                }
            }
            ReplyBody::Local | ReplyBody::Upgrade(_) => (
                send_all(worker, &self.watch, send, Bytes::new(), true).await,
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
        date: &DateValue,
    ) -> Result<u64, BodyError> {
        self.send
            .head(&local_head(&plan, date), !plan.body_follows)?;
        if !plan.body_follows {
            return Ok(0);
        }
        send_file_body(worker, &self.watch, &self.send, file, None).await
    }

    /// A local answer with its body in memory; one larger than a frame goes out as the
    /// client's window allows, under `client_send_timeout`.
    async fn send_local_body(
        &mut self,
        worker: &Worker,
        plan: LocalPlan<'_>,
        body: &Bytes,
        date: &DateValue,
    ) -> Result<u64, BodyError> {
        if body.len() <= LOCAL_BODY_IN_ONE_FRAME || !plan.body_follows {
            return send_local(&self.send, plan, body, date);
        }
        self.send.head(&local_head(&plan, date), false)?;
        send_all(worker, &self.watch, &self.send, body.clone(), true).await
    }
}

/// A local body up to this size is queued at once, in one DATA frame that ends the stream (the
/// smallest frame size a peer may set is 16 KiB; the initial window is 64 KiB).
const LOCAL_BODY_IN_ONE_FRAME: usize = 16 * 1024;

/// A local answer with its body in memory, queued at once: the body as it is kept (no copy)
/// and the stream's end in the same DATA frame. No deadline here: the codec sends it as the
/// client's window allows, and a larger one waits in `send_local_body`.
fn send_local(
    send: &StreamOut,
    plan: LocalPlan<'_>,
    body: &Bytes,
    date: &DateValue,
) -> Result<u64, BodyError> {
    send.head(&local_head(&plan, date), !plan.body_follows)?;
    if !plan.body_follows {
        return Ok(0);
    }
    send.data(body.clone(), true)?;
    Ok(body.len() as u64)
}

/// Queues `data` (without a copy) once the stream has room, under `client_send_timeout`;
/// the codec sends it as DATA frames as the client's window allows.
async fn send_all(
    worker: &Worker,
    watch: &ConnWatch,
    send: &StreamOut,
    data: Bytes,
    end: bool,
) -> Result<u64, BodyError> {
    let len = data.len() as u64;
    if !data.is_empty() {
        send.room(worker, watch, false).await?;
    }
    send.data(data, end)?;
    Ok(len)
}

/// A file body read in chunks (from the page cache, as the HTTP/1 driver's copy path does),
/// through `filter` when one is installed.
async fn send_file_body(
    worker: &Worker,
    watch: &ConnWatch,
    send: &StreamOut,
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
    send.data(Bytes::new(), true)?;
    Ok(sent)
}

/// The `date` line of the worker's clock (`date: ` + the date + CRLF), copied (it changes
/// once a second).
#[derive(Clone, Copy)]
pub(crate) struct DateValue([u8; DATE_HEADER_LEN]);

impl DateValue {
    fn value(&self) -> &[u8] {
        &self.0[6..DATE_HEADER_LEN - 2]
    }
}

pub(crate) fn date_value(worker: &Worker) -> DateValue {
    DateValue(worker.clock.date_header())
}

/// An answer's head as HTTP/2 and HTTP/3 carry it: the status and the fields, names
/// lowercased, one neither can carry (an invalid name or value) left out, in one buffer.
/// HTTP/2's codec takes the fields as they are; through an `http::HeaderMap` (a parse of
/// each name, an allocation for each value) the head cost 800 more instructions of an
/// `h2proxy` request, 340 of an `h2ping` (callgrind). HTTP/3's crate takes a map:
/// `into_response`.
pub(crate) struct AnswerHead {
    status: u16,
    bytes: Vec<u8>,
    /// Name start, value start (name end), value end in `bytes`.
    fields: Vec<[u32; 3]>,
}

impl AnswerHead {
    fn new(status: u16) -> AnswerHead {
        AnswerHead {
            status,
            bytes: Vec::with_capacity(512),
            fields: Vec::with_capacity(16),
        }
    }

    fn push(&mut self, name: &[u8], value: &[u8]) {
        let n = self.bytes.len();
        if !codec::is_field_value(value) || !codec::push_lowercase_name(&mut self.bytes, name) {
            self.bytes.truncate(n);
            return;
        }
        let n = n as u32;
        let v = self.bytes.len() as u32;
        self.bytes.extend_from_slice(value);
        self.fields.push([n, v, self.bytes.len() as u32]);
    }

    fn push_length(&mut self, len: u64) {
        let n = self.bytes.len() as u32;
        self.bytes.extend_from_slice(b"content-length");
        let v = self.bytes.len() as u32;
        codec::push_decimal(&mut self.bytes, len);
        self.fields.push([n, v, self.bytes.len() as u32]);
    }

    /// Name and value of each field, in order.
    fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields.iter().map(|&[n, v, e]| {
            (
                &self.bytes[n as usize..v as usize],
                &self.bytes[v as usize..e as usize],
            )
        })
    }

    /// The head as the `http` crate holds it (for HTTP/3).
    pub(crate) fn into_response(self) -> http::Response<()> {
        let mut response = http::Response::new(());
        *response.status_mut() =
            http::StatusCode::from_u16(self.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
        let headers = response.headers_mut();
        for (name, value) in self.fields() {
            append(headers, name, value);
        }
        response
    }
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

/// A status HTTP/2 and HTTP/3 can carry (three digits), else `fallback`.
fn carried_status(status: u16, fallback: u16) -> u16 {
    match status {
        100..=999 => status,
        _ => fallback,
    }
}

/// A local answer's head for HTTP/2 and HTTP/3: its status, the fields that cross, its length
/// and a date.
pub(crate) fn local_head(plan: &LocalPlan, date: &DateValue) -> AnswerHead {
    let mut head = AnswerHead::new(carried_status(plan.local.status, 200));
    plan.each_field(|name, value| head.push(name, value));
    if let Some(len) = plan.declared_length() {
        head.push_length(len);
    }
    head.push(b"date", date.value());
    head
}

/// A planned reply's head for HTTP/2 and HTTP/3: the fields that cross (RFC 9113 8.2.2),
/// names lowercased, the length when it is known (an answer to HEAD describes the one it would
/// have had), a date when the upstream sent none.
pub(crate) fn response_head(
    plan: &ResponsePlan,
    ended: bool,
    date: &DateValue,
    head_only: bool,
) -> AnswerHead {
    let resp = &plan.head;
    let mut head = AnswerHead::new(carried_status(resp.status, 502));
    plan.each_field(|name, value| head.push(name, value));
    match plan.length {
        BodyLength::Known(n) if !ended => head.push_length(n),
        // A 304's described length is not passed on over HTTP/2.
        _ if head_only => {
            if let Some(len) = plan.described_length() {
                head.push(b"content-length", len);
            }
        }
        _ => {}
    }
    if !resp.has_date {
        head.push(b"date", date.value());
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::local::LocalResponse;

    fn date() -> DateValue {
        let mut line = [0; DATE_HEADER_LEN];
        line.copy_from_slice(b"date: Thu, 26 Nov 2026 12:00:00 GMT\r\n");
        DateValue(line)
    }

    #[test]
    fn an_answer_head_carries_what_http2_can() {
        let headers = [
            ("X-Upper", "A"),
            ("connection", "close"),
            ("x-bad", "a\x01b"),
            ("Bad Name", "v"),
            ("set-cookie", "a=1"),
            ("x-between", "tab\there"),
            ("set-cookie", "b=2"),
        ];
        let headers = headers.map(|(n, v)| (n.to_string(), v.to_string()));
        let local = LocalResponse::new(1000, headers.to_vec(), "body");
        let head = local_head(&LocalPlan::new(false, &local, 4), &date());
        let fields: Vec<(&[u8], &[u8])> = head.fields().collect();
        let expected: [(&[u8], &[u8]); 6] = [
            (b"x-upper", b"A"),
            (b"set-cookie", b"a=1"),
            (b"x-between", b"tab\there"),
            (b"set-cookie", b"b=2"),
            (b"content-length", b"4"),
            (b"date", b"Thu, 26 Nov 2026 12:00:00 GMT"),
        ];
        assert_eq!(fields, expected);
        // A status HTTP/2 cannot carry is answered as a local answer's default.
        assert_eq!(head.status, 200);
        let response = head.into_response();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers().get_all("set-cookie").iter().count(), 2);
        assert_eq!(response.headers()["content-length"], "4");
    }
}
