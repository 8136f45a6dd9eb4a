//! The HTTP/1.1 connection driver, generic over the client stream. It reads request heads
//! (phase read_head), hands each to [`exchange`](crate::exchange), and is the only code that
//! writes HTTP/1 to the client: reply heads and bodies (the fused h1→h1 relay), tunnels after
//! `101`, refusals, and the lingering close; the interim `100 Continue` goes out through the
//! body source it lends the upstream side (`reply/request_body.rs`). An idle keep-alive
//! connection holds no buffer: one is taken from the worker's pool when bytes arrive; after a
//! second of idleness it is parked ([`idle`](crate::io::idle)) and its task ends.

use crate::actions::static_files::read_exact_at;
use crate::conn::ClientIo;
use crate::exchange::exchange;
use crate::exchange::plan::{BodyLength, ResponsePlan};
use crate::http::codec::{
    self, push_decimal, reason, status_line, Framing, RequestHead, ResponseHead,
};
use crate::http::error::{ErrorKind, LocalError};
use crate::http::file_body::FileBody;
use crate::http::local::LocalResponse;
use crate::http::Scheme;
use crate::io::buffers::{make_room, FILE_READ_CHUNK};
use crate::io::idle::PARK_AFTER;
use crate::io::linger::{linger, LINGER_TIMEOUT};
use crate::io::relay;
use crate::io::watch::{ConnWatch, Expired, Waiting, DATE_HEADER_LEN, SWEEP_TICK};
use crate::reply::body_filter::BodyFilter;
use crate::reply::client::{ClientConn, ClientSide, Outcome, Sent, TlsInfo, CLIENT_CLOSED};
use crate::reply::relay::{
    relay_body, relay_produced, relay_stream, written, BodyError, Relay, Sink, FLUSH_AT,
};
use crate::reply::request_body::{BodySource, H1Body, Outgoing, RequestBody};
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::servers::pool::{UpstreamConn, UpstreamIo};
use crate::state::runtime::SharedRuntime;
use crate::worker::Worker;
use bytes::Bytes;
use bytes::BytesMut;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Largest request body weir reads and discards when it answers a request itself.
const LOCAL_DRAIN_LIMIT: u64 = 1 << 20;
/// A local answer's body up to this size is copied after its head, one write; a larger one
/// is written from its own buffer.
const LOCAL_BODY_COPIED_UP_TO: usize = 16 * 1024;
/// Bytes sent by `sendfile` between turns given to the worker's other connections.
const SENDFILE_CHUNK: u64 = 1 << 20;
/// What the kernel's `sendfile` moves per round (its internal pipe's 16 pages).
const SPLICE_ROUND: u64 = 64 * 1024;
/// Files over two splice rounds and up to `SEGMENTED_UP_TO` go in `sendfile` calls of whole
/// segments (`sendfile_call`); others in calls of `SENDFILE_CHUNK`. Under wrk (50
/// connections, cache hits), whole-segment calls against one call: 256 KB 31.0–32.3k req/s at
/// 27.7–28.8 µs of CPU against 10.4–12.9k at 77–95 µs, 512 KB 17.2k at 49.7 µs against 10.7k
/// at 91.8 µs; but 1 MB 2.5k at 391 µs against 4.1k at 223 µs (nginx 2.4k at 156 µs):
/// unpaced, a connection's megabyte bursts stall on loopback. At 100 KB the CPU fell under wrk
/// (12.6 against 14.2–14.7 µs) and rose against a client that drops bodies (11.2 against
/// 9.4 µs, 88k against 106k req/s): one round more is not worth a second call.
const SEGMENTED_FROM: u64 = 2 * SPLICE_ROUND;
const SEGMENTED_UP_TO: u64 = 512 * 1024;
/// One client connection speaking HTTP/1.1.
pub struct H1Client<S> {
    pub io: S,
    /// Request bytes read and not yet used; capacity 0 while the connection is idle.
    pub buf: BytesMut,
    /// Output being assembled; capacity 0 while the connection is idle.
    pub out: Vec<u8>,
    pub watch: Rc<ConnWatch>,
    pub ip: IpAddr,
    pub ip_text: String,
    pub body: RequestBody,
    pub scheme: Scheme,
    /// The most one `sendfile` call sends (`sendfile_call`); 0 until a file needs it.
    pub sendfile_call: u64,
}

/// Serves one client connection until it closes: read a head, run the exchange, repeat.
pub async fn serve<S: ClientIo>(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    io: S,
    peer: SocketAddr,
    scheme: Scheme,
    watch: Rc<ConnWatch>,
) {
    let ip = canonical_ip(peer.ip());
    let mut client = H1Client {
        io,
        buf: BytesMut::new(),
        out: Vec::new(),
        watch,
        ip,
        ip_text: ip.to_string(),
        body: RequestBody::Done,
        scheme,
        sendfile_call: 0,
    };
    loop {
        // Idle between requests: only a small wait for the first bytes lives in the
        // connection's task; reading the rest of the head and the exchange are boxed and exist
        // only while a request is in flight.
        if client.buf.is_empty() {
            match client.await_request(&worker).await {
                Idle::Request => {}
                Idle::Close => break,
                Idle::Drained => {
                    Box::pin(client.linger(&worker, worker.drain_grace.get())).await;
                    break;
                }
                Idle::Park { expires } => {
                    // The task ends; the socket waits in the worker's idle set (`idle.rs`).
                    client.io.park(&worker.idle, peer, entrypoint, expires);
                    return;
                }
            }
        }
        match Box::pin(client.serve_request(&worker, &config, entrypoint)).await {
            Next::KeepAlive => {}
            Next::Close => break,
            Next::Linger => {
                Box::pin(client.linger(&worker, LINGER_TIMEOUT)).await;
                break;
            }
        }
    }
    worker.buffers.give_read(std::mem::take(&mut client.buf));
}

/// What the connection does after a request.
enum Next {
    KeepAlive,
    Close,
    /// Close gently: the client may still be sending.
    Linger,
}

pub(crate) fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// What an idle wait for the next request ended with.
enum Idle {
    /// Its first bytes are buffered.
    Request,
    /// EOF or idle timeout.
    Close,
    /// Stopping, and no request came within the grace: close gently.
    Drained,
    /// Idle for `PARK_AFTER`: park the connection until the client writes or `expires`.
    Park { expires: Instant },
}

/// What waiting for a request head ended with.
enum HeadRead {
    Head(RequestHead),
    /// EOF, idle timeout or stop: close.
    End,
    /// A refused head has been answered: close gently.
    Refused,
}

impl<S: ClientIo> H1Client<S> {
    /// Waits, idle, for the first bytes of the next request (or of a new connection's first),
    /// parking the connection once it has waited `PARK_AFTER` with time left before the idle
    /// timeout. A stop ends the wait: what follows is `await_last_request`.
    async fn await_request(&mut self, worker: &Worker) -> Idle {
        if !worker.shutdown.is_requested() {
            let read = read_lent(&mut self.io, &mut self.buf, worker);
            let idle = worker.timeouts.get().idle;
            let parks = S::PARKS && idle > PARK_AFTER;
            let limit = if parks { PARK_AFTER } else { idle };
            let since = worker.clock.now();
            let waiting = Waiting::KeepAlive;
            match self.watch.within(&worker.clock, waiting, limit, read).await {
                Ok(Ok(n)) if n > 0 => return Idle::Request,
                Err(Expired) if worker.shutdown.is_requested() => {}
                // `since` may be a tick stale, so the idle timeout ends a tick later, as in
                // `ConnWatch::check`.
                Err(Expired) if parks => {
                    return Idle::Park {
                        expires: since + idle + SWEEP_TICK,
                    }
                }
                _ => return Idle::Close,
            }
        }
        // Boxed: only a stop gets here.
        Box::pin(self.await_last_request(worker)).await
    }

    /// Stopping: the client may have sent its next request already (a busy keep-alive client
    /// sends it as soon as it has read an answer), and closing now would fail it. So the
    /// request gets `Worker::drain_grace` to arrive, and is answered with `Connection: close`;
    /// a connection still idle then is closed gently, its client seeing a FIN, not a reset.
    async fn await_last_request(&mut self, worker: &Worker) -> Idle {
        let read = read_lent(&mut self.io, &mut self.buf, worker);
        let grace = worker.drain_grace.get();
        // Not `KeepAlive`: the stop must not end this wait too; its deadline does.
        let waiting = Waiting::RequestHead;
        match self.watch.within(&worker.clock, waiting, grace, read).await {
            Ok(Ok(n)) if n > 0 => Idle::Request,
            Err(Expired) => Idle::Drained,
            _ => Idle::Close,
        }
    }

    /// Reads the rest of a request head and runs its exchange.
    async fn serve_request(
        &mut self,
        worker: &Rc<Worker>,
        config: &SharedRuntime,
        entrypoint: usize,
    ) -> Next {
        let head = match self.read_request_head(worker).await {
            HeadRead::Head(head) => head,
            HeadRead::End => return Next::Close,
            HeadRead::Refused => return Next::Linger,
        };
        self.out = worker.buffers.take_out();
        let runtime = config.load_full();
        let outcome = exchange(worker, &runtime, entrypoint, self, head).await;
        worker.buffers.give_out(std::mem::take(&mut self.out));
        if outcome.linger {
            Next::Linger
        } else if !outcome.keep_alive || runtime.entrypoint(entrypoint).is_none() {
            // An answer that promised keep-alive before a stop keeps the connection: its
            // client's next request is already coming, and gets `Connection: close`.
            Next::Close
        } else {
            Next::KeepAlive
        }
    }

    /// Phase read_head: once the first bytes are buffered (`await_request`), reads until the
    /// whole head is, answering a head that is refused or too slow.
    async fn read_request_head(&mut self, worker: &Worker) -> HeadRead {
        loop {
            match codec::parse_request(&mut self.buf) {
                Ok(Some(head)) => {
                    self.body = if head.framing == Framing::None {
                        RequestBody::Done
                    } else {
                        RequestBody::Unread
                    };
                    return HeadRead::Head(head);
                }
                Ok(None) => {}
                Err(e) => {
                    Box::pin(self.refuse(worker, LocalError::from(&e))).await;
                    return HeadRead::Refused;
                }
            }
            let read = read_lent(&mut self.io, &mut self.buf, worker);
            let idle = worker.timeouts.get().idle;
            match self
                .watch
                .within(&worker.clock, Waiting::RequestHead, idle, read)
                .await
            {
                Ok(Ok(0)) | Ok(Err(_)) => return HeadRead::End,
                Ok(Ok(_)) => {}
                // Part of a head arrived and the rest is too slow: 408 (unless stopping).
                Err(Expired) if !worker.shutdown.is_requested() => {
                    let message = "timed out reading the request head";
                    let error = LocalError::new(408, ErrorKind::HeadTimeout, message);
                    Box::pin(self.refuse(worker, error)).await;
                    return HeadRead::Refused;
                }
                Err(Expired) => return HeadRead::End,
            }
        }
    }

    /// Writes a plain-text error that closes the connection, for a request that cannot go on.
    async fn refuse(&mut self, worker: &Worker, error: LocalError) {
        let mut out = worker.buffers.take_out();
        let date = worker.clock.date_header();
        error.plain().write(&mut out, false, false, b"", &date);
        let _ = self.io.write_all(&out).await;
        worker.buffers.give_out(out);
    }

    /// Closes a connection whose request may still be arriving without resetting it
    /// (`io::linger`).
    async fn linger(&mut self, worker: &Worker, quiet: Duration) {
        let worker_io = (&worker.clock, &worker.buffers);
        linger(&mut self.io, &mut self.buf, worker_io, &self.watch, quiet).await;
    }
}

impl<S: ClientIo> ClientSide for H1Client<S> {
    type BodyIo = S;

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
        self.io.tls()
    }

    fn watch(&self) -> &ConnWatch {
        &self.watch
    }

    /// The body still on the connection, re-framed by the upstream side as it declares
    /// (chunked stays chunked); `100 Continue` goes out before its first read.
    fn outgoing(&mut self, req: &RequestHead) -> Outgoing<'_, S> {
        let body = if req.framing == Framing::None {
            BodySource::None
        } else {
            BodySource::H1(H1Body::new(
                &mut self.io,
                &mut self.buf,
                req,
                &mut self.body,
            ))
        };
        Outgoing {
            ip_text: &self.ip_text,
            scheme: self.scheme,
            watch: &self.watch,
            out: &mut self.out,
            body,
        }
    }

    /// The connection cannot carry another request after a body left on it: it closes
    /// gently once answered (the lingering close).
    fn abandon_body(&mut self) {
        if self.body == RequestBody::Unread {
            self.body = RequestBody::Broken;
        }
    }

    async fn read_body(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        max: u64,
    ) -> Result<Bytes, BodyError> {
        if self.body != RequestBody::Unread {
            return Ok(Bytes::new());
        }
        let relay = Relay {
            clock: &worker.clock,
            watch: &self.watch,
            read: (Waiting::RequestBody, worker.timeouts.get().body),
            // Never waited on: memory takes every write at once.
            write: (Waiting::UpstreamWrite, Duration::ZERO),
            max_bytes: max,
        };
        let mut body = match req.framing {
            Framing::Length(n) if n > max => Vec::new(),
            Framing::Length(n) => Vec::with_capacity(n as usize),
            _ => Vec::new(),
        };
        self.out.clear();
        let source = H1Body::new(&mut self.io, &mut self.buf, req, &mut self.body);
        let mut sink = Sink::plain(Some(&mut body));
        let read = source.relay(&mut sink, &mut self.out, false, &relay).await;
        read.map(|_| Bytes::from(body))
    }
}

impl<S: ClientIo> ClientConn for H1Client<S> {
    async fn send_reply<'r>(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        reply: Reply<'r>,
    ) -> Sent<'r> {
        self.write_reply(worker, req, reply).await
    }
}

impl<S: ClientIo> H1Client<S> {
    /// Reads and drops a request body nobody consumed (local answers), so the connection can
    /// carry the next request. Returns the error when the body itself was bad or too slow.
    async fn drain_body(&mut self, worker: &Worker, req: &RequestHead) -> Option<BodyError> {
        if self.body != RequestBody::Unread {
            return None;
        }
        let relay = Relay {
            clock: &worker.clock,
            watch: &self.watch,
            read: (Waiting::RequestBody, worker.timeouts.get().body),
            // Never used: a drained body has no sink.
            write: (Waiting::UpstreamWrite, Duration::ZERO),
            max_bytes: LOCAL_DRAIN_LIMIT,
        };
        self.out.clear();
        let drained = relay_body(
            &mut self.io,
            &mut self.buf,
            req.framing,
            &mut Sink::<S>::plain(None),
            &mut self.out,
            false,
            &relay,
        )
        .await;
        self.body = if drained.is_ok() {
            RequestBody::Done
        } else {
            RequestBody::Broken
        };
        drained.err()
    }

    /// Writes a reply in HTTP/1.1 (phase response_body: the body is relayed here). Local
    /// answers first drain an unread request body.
    async fn write_reply<'r>(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        mut reply: Reply<'r>,
    ) -> Sent<'r> {
        // Boxed: only local answers to requests with a body get here.
        let bad_body = if self.body == RequestBody::Unread {
            Box::pin(self.drain_body(worker, req)).await
        } else {
            None
        };
        if let Some(error) = bad_body.and_then(BodyError::client_answer) {
            reply.head = ReplyHead::Local(std::borrow::Cow::Owned(error.plain()));
            reply.body = ReplyBody::Local;
        }
        let upstream = reply.upstream;
        // The client closed its side mid-body: 499 is for the log (nginx's code), nothing is
        // owed to a client that left, and the connection ends now.
        if matches!(&reply.head, ReplyHead::Local(local) if local.status == CLIENT_CLOSED) {
            let outcome = Outcome {
                keep_alive: false,
                linger: false,
                status: CLIENT_CLOSED,
                bytes: 0,
            };
            return Sent {
                outcome,
                reusable: None,
                upstream,
            };
        }
        let broken = self.body == RequestBody::Broken;
        let keep_alive = req.keep_alive && !broken && !worker.shutdown.is_requested();
        // Only upstream bodies are read under a limit; local ones are already in memory.
        let read_timeout = upstream
            .as_ref()
            .map_or(Duration::ZERO, |u| u.service.read_timeout);
        self.out.clear();
        let (outcome, reusable) = match (reply.head, reply.body) {
            (ReplyHead::Local(local), ReplyBody::File(file)) => {
                let sending = self.send_local_file(worker, req, &local, file, keep_alive, broken);
                (sending.await, None)
            }
            (ReplyHead::Shared(local), ReplyBody::File(file)) => {
                let sending = self.send_local_file(worker, req, &local, file, keep_alive, broken);
                (sending.await, None)
            }
            // A large body (a Lua script's, say) is not copied after its head into the
            // output buffer, which would grow to twice its size.
            (ReplyHead::Local(local), _) if large_local_body(req, &local) => {
                let sending = self.send_large_local(worker, req, &local, keep_alive, broken);
                (Box::pin(sending).await, None)
            }
            (ReplyHead::Shared(local), _) if large_local_body(req, &local) => {
                let sending = self.send_large_local(worker, req, &local, keep_alive, broken);
                (Box::pin(sending).await, None)
            }
            (ReplyHead::Local(local), _) => {
                let mut outcome = self.local_answer(worker, req, &local, keep_alive, broken);
                // Under client_send_timeout, as every other body: a client that stops reading
                // a local answer is disconnected too.
                if self.write_out(worker).await.is_err() {
                    outcome.keep_alive = false;
                }
                (outcome, None)
            }
            (ReplyHead::Shared(local), _) => {
                let mut outcome = self.local_answer(worker, req, &local, keep_alive, broken);
                // Under client_send_timeout, as every other body: a client that stops reading
                // a local answer is disconnected too.
                if self.write_out(worker).await.is_err() {
                    outcome.keep_alive = false;
                }
                (outcome, None)
            }
            // The exchange renders weir's errors before they get here (`render_error`); one
            // it did not is answered plainly.
            (ReplyHead::Error(error), _) => {
                let plain = error.plain();
                let mut outcome = self.local_answer(worker, req, &plain, keep_alive, broken);
                if self.write_out(worker).await.is_err() {
                    outcome.keep_alive = false;
                }
                (outcome, None)
            }
            (ReplyHead::Response(response), ReplyBody::Upgrade(up)) => {
                let idle = upstream
                    .as_ref()
                    .and_then(|u| u.service.websocket_idle_timeout)
                    .unwrap_or(worker.timeouts.get().idle);
                (
                    Box::pin(self.tunnel(worker, up, &response, idle)).await,
                    None,
                )
            }
            (ReplyHead::Response(response), body) => {
                let status = response.status;
                let sends_files = self.io.as_tcp().is_some();
                match ResponsePlan::new(req, response, body, reply.body_filter, sends_files) {
                    Ok(plan) => {
                        let sending =
                            self.send_response(worker, req, plan, keep_alive, broken, read_timeout);
                        sending.await
                    }
                    // The head is not sent yet, but it promises a body that cannot be
                    // produced: close.
                    Err(_) => {
                        let outcome = Outcome {
                            keep_alive: false,
                            linger: broken,
                            status,
                            bytes: 0,
                        };
                        (outcome, None)
                    }
                }
            }
        };
        Sent {
            outcome,
            reusable,
            upstream,
        }
    }

    /// Frames a planned reply in HTTP/1: the head (`write_client_head`), then its body: bytes,
    /// a file, or the relay from an upstream (fused when no body filter applies). An unknown
    /// length goes chunked, or close-delimited to HTTP/1.0.
    async fn send_response(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        mut plan: ResponsePlan,
        keep_alive: bool,
        broken: bool,
        read_timeout: Duration,
    ) -> (Outcome, Option<UpstreamConn>) {
        let chunked_out = plan.chunked();
        let keep_alive = keep_alive && plan.keeps_connection();
        let date = worker.clock.date_header();
        let date = (!plan.head.has_date).then_some(&date);
        write_client_head(
            &mut self.out,
            &plan,
            keep_alive,
            chunked_out,
            req.minor_version,
            date,
        );
        let mut outcome = Outcome {
            keep_alive,
            linger: broken,
            status: plan.head.status,
            bytes: 0,
        };
        match plan.body {
            ReplyBody::Upstream(mut up) => {
                let relay = Relay::to_client_from_upstream(worker, &self.watch, read_timeout);
                let mut sink = Sink::through(&mut self.io, plan.filter.as_mut());
                let relayed = relay_body(
                    &mut up.io,
                    &mut up.buf,
                    plan.read,
                    &mut sink,
                    &mut self.out,
                    chunked_out,
                    &relay,
                )
                .await;
                match relayed {
                    Ok(bytes) => {
                        outcome.bytes = sink.counted(bytes);
                        (outcome, plan.head.keep_alive.then_some(up))
                    }
                    // The head is already sent: closing is the only way to tell the client.
                    Err(_) => {
                        outcome.keep_alive = false;
                        (outcome, None)
                    }
                }
            }
            ReplyBody::Stream(mut stream) => {
                let relay = Relay::to_client_from_upstream(worker, &self.watch, read_timeout);
                let mut sink = Sink::through(&mut self.io, plan.filter.as_mut());
                let relayed = if plan.read == Framing::None {
                    relay.flush(&mut sink, &mut self.out).await.map(|()| 0)
                } else {
                    let relaying = relay_stream(
                        &mut stream.recv,
                        &mut sink,
                        &mut self.out,
                        chunked_out,
                        &relay,
                    );
                    relaying.await.map(|(bytes, _)| bytes)
                };
                match relayed {
                    Ok(bytes) => outcome.bytes = sink.counted(bytes),
                    Err(_) => outcome.keep_alive = false,
                }
                (outcome, None)
            }
            ReplyBody::Bytes(bytes) => {
                let body: &[u8] = if plan.length == BodyLength::None {
                    &[]
                } else {
                    &bytes
                };
                let relay = Relay::to_client(worker, &self.watch);
                match relay.send_bytes(&mut self.io, &mut self.out, body).await {
                    Ok(()) => outcome.bytes = body.len() as u64,
                    Err(_) => outcome.keep_alive = false,
                }
                (outcome, None)
            }
            ReplyBody::File(file) => {
                let sent = if plan.length == BodyLength::None {
                    self.write_out(worker).await.map(|()| 0)
                } else {
                    self.send_file(worker, &file, plan.filter.as_mut(), chunked_out)
                        .await
                };
                match sent {
                    Ok(bytes) => outcome.bytes = bytes,
                    Err(_) => outcome.keep_alive = false,
                }
                (outcome, None)
            }
            ReplyBody::Produced(mut producer) => {
                let relay = Relay::to_client(worker, &self.watch);
                let mut sink = Sink::through(&mut self.io, plan.filter.as_mut());
                let relaying = relay_produced(
                    &mut *producer,
                    &mut sink,
                    &mut self.out,
                    chunked_out,
                    &relay,
                );
                match relaying.await {
                    Ok(bytes) => outcome.bytes = sink.counted(bytes),
                    Err(_) => outcome.keep_alive = false,
                }
                (outcome, None)
            }
            ReplyBody::Local | ReplyBody::Upgrade(_) => {
                // Under client_send_timeout, as every other body: a client that stops reading
                // a local answer is disconnected too.
                if self.write_out(worker).await.is_err() {
                    outcome.keep_alive = false;
                }
                (outcome, None)
            }
        }
    }

    /// The most one `sendfile` call sends: whole segments (TCP's `mss`) within one round of
    /// the kernel's splice. Within one call, the kernel leaves the end of each 64 KiB round
    /// that does not fill a segment corked for the next round, and releases the socket in
    /// between: an ACK processed then sends that end outside the call. BBR (this machine's
    /// congestion control, and the common one) takes such a send for a sample of the
    /// network's bandwidth, not the application's, leaves its start-up phase and paces each
    /// answer's later segments at that rate, with a timer per held segment. Measured on 100 KB
    /// cache hits under wrk: 0.16 pacing timers per request and 14.4–14.7 µs of CPU, against
    /// 11.6–12.6 µs in calls of whole segments (nginx 11.8 µs, whose head goes alone); which
    /// files go so: `SEGMENTED_FROM`.
    fn sendfile_call(&mut self) -> u64 {
        if self.sendfile_call == 0 {
            let mss = self
                .io
                .as_tcp()
                .and_then(|tcp| socket2::SockRef::from(tcp).mss().ok())
                .filter(|&mss| mss > 0)
                .map_or(1448, u64::from);
            self.sendfile_call = (SPLICE_ROUND / mss).max(1) * mss;
        }
        self.sendfile_call
    }

    /// Writes the head in `out`, then the file by `sendfile` (a plain socket only), at most
    /// `call` bytes per call.
    async fn sendfile_after_head(
        &mut self,
        worker: &Worker,
        body: &FileBody,
        call: u64,
    ) -> Result<u64, BodyError> {
        let relay = Relay::to_client(worker, &self.watch);
        relay
            .flush(&mut Sink::plain(Some(&mut self.io)), &mut self.out)
            .await?;
        let file = &*body.file;
        let end = body.offset + body.len;
        let mut offset = body.offset;
        let mut turn_ends = offset + SENDFILE_CHUNK;
        while offset < end {
            let count = (end - offset).min(call) as usize;
            let Some(tcp) = self.io.as_tcp() else {
                return Err(BodyError::Sink);
            };
            let send = tcp.async_io(tokio::io::Interest::WRITABLE, || {
                rustix::fs::sendfile(tcp, file, Some(&mut offset), count)
                    .map_err(std::io::Error::from)
            });
            let (what, limit) = relay.write;
            match self.watch.within(&worker.clock, what, limit, send).await {
                // The file shrank under us: the promised length cannot be sent.
                Ok(Ok(0)) | Ok(Err(_)) => return Err(BodyError::Sink),
                // A chunk per turn, as nginx's sendfile_max_chunk: a fast reader of a large
                // file must not keep the worker from its other connections.
                Ok(Ok(_)) if offset < end && offset >= turn_ends => {
                    turn_ends = offset + SENDFILE_CHUNK;
                    tokio::task::yield_now().await
                }
                Ok(Ok(_)) => {}
                Err(Expired) => return Err(BodyError::SinkStalled),
            }
        }
        Ok(body.len)
    }

    /// Puts a local answer (prebuilt head and its own body) in the output buffer.
    fn local_answer(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        local: &LocalResponse,
        keep_alive: bool,
        broken: bool,
    ) -> Outcome {
        self.put_local(worker, req, local, keep_alive, broken, req.is_head())
    }

    /// Puts a local answer's head, and its body unless `head_only`, in the output buffer. The
    /// outcome counts the body unless the request is HEAD.
    #[inline]
    fn put_local(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        local: &LocalResponse,
        keep_alive: bool,
        broken: bool,
        head_only: bool,
    ) -> Outcome {
        let date = worker.clock.date_header();
        let extra: &[u8] = if keep_alive && req.minor_version == 0 {
            b"connection: keep-alive\r\n"
        } else {
            b""
        };
        local.write(&mut self.out, keep_alive, head_only, extra, &date);
        Outcome {
            keep_alive,
            linger: broken,
            status: local.status,
            bytes: if req.is_head() {
                0
            } else {
                local.body.len() as u64
            },
        }
    }

    /// Writes a local answer's head, then its body from its own buffer, under
    /// client_send_timeout.
    async fn send_large_local(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        local: &LocalResponse,
        keep_alive: bool,
        broken: bool,
    ) -> Outcome {
        let mut outcome = self.put_local(worker, req, local, keep_alive, broken, true);
        let relay = Relay::to_client(worker, &self.watch);
        let sending = relay.send_bytes(&mut self.io, &mut self.out, &local.body);
        if sending.await.is_err() {
            outcome.keep_alive = false;
        }
        outcome
    }

    /// Writes a prebuilt head (a static file's) and the file after it.
    async fn send_local_file(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        local: &LocalResponse,
        file: FileBody,
        keep_alive: bool,
        broken: bool,
    ) -> Outcome {
        // The head alone: `local` has no body of its own.
        let head_request = req.is_head();
        let mut outcome = self.local_answer(worker, req, local, keep_alive, broken);
        let sent = if head_request {
            self.write_out(worker).await.map(|()| 0)
        } else {
            self.send_file(worker, &file, None, false).await
        };
        match sent {
            Ok(bytes) => outcome.bytes = bytes,
            Err(_) => outcome.keep_alive = false,
        }
        outcome
    }

    /// Writes the output buffer under the client's send timeout.
    async fn write_out(&mut self, worker: &Worker) -> Result<(), BodyError> {
        // Not through `Relay::flush`: building a relay and its future for one write cost
        // about 90 instructions per local answer.
        let limit = worker.timeouts.get().send;
        let write = self.io.write_all(&self.out);
        let result = (self.watch)
            .within(&worker.clock, Waiting::ClientWrite, limit, write)
            .await;
        self.out.clear();
        written(result)
    }

    /// Sends a file's bytes after the head in `out`: by `sendfile` on a plain socket, else
    /// read into the output buffer (TLS, or through a body filter). Reads block, as nginx's do without `aio`; the open-file cache spares the
    /// `open` and `stat`. Returns the body bytes sent.
    async fn send_file(
        &mut self,
        worker: &Worker,
        body: &FileBody,
        filter: Option<&mut BodyFilter>,
        chunked_out: bool,
    ) -> Result<u64, BodyError> {
        let segmented = body.len > SEGMENTED_FROM && body.len <= SEGMENTED_UP_TO;
        let call = if filter.is_none() && segmented {
            self.sendfile_call()
        } else {
            SENDFILE_CHUNK
        };
        let relay = Relay::to_client(worker, &self.watch);
        let file = &*body.file;
        let end = body.offset + body.len;
        let mut offset = body.offset;
        if filter.is_none() {
            if let Some(tcp) = self.io.as_tcp() {
                // The head with MSG_MORE, then the file by sendfile, whose last page pushes
                // the segment: no copy of the file through user space, which costs most
                // when many distinct files are served and their pages are not in the CPU's
                // cache (10,000 4 KB files: 1.23x the req/s of pread + writev). Never corked
                // (nginx's tcp_nopush): on kernel 6.18 a corked 100 KB file cost 28.6 µs of
                // CPU per request under wrk against 13.5 µs, a 1 MB one 300 against 80–120.
                let sent = match rustix::net::send(tcp, &self.out, rustix::net::SendFlags::MORE) {
                    Ok(sent) => sent,
                    Err(rustix::io::Errno::AGAIN) => 0,
                    Err(_) => return Err(BodyError::Sink),
                };
                self.out.drain(..sent);
                if self.out.is_empty() {
                    // A small file almost always fits the socket's buffer: done in one call.
                    // A larger one goes in calls of `call` bytes, the first counting the head
                    // that waits in its first segment (`sendfile_call`).
                    let first = (call as usize).checked_sub(sent).filter(|&c| c > 0);
                    let count = body.len.min(first.map_or(call, |c| c as u64));
                    match rustix::fs::sendfile(tcp, file, Some(&mut offset), count as usize) {
                        Ok(_) if offset == end => return Ok(body.len),
                        Ok(_) | Err(rustix::io::Errno::AGAIN) => {}
                        Err(_) => return Err(BodyError::Sink),
                    }
                }
                let rest = FileBody {
                    file: body.file.clone(),
                    offset,
                    len: end - offset,
                    mapped: None,
                };
                return self
                    .sendfile_after_head(worker, &rest, call)
                    .await
                    .map(|_| body.len);
            }
        }
        let mut sink = Sink::through(&mut self.io, filter);
        while offset < end {
            let n = (end - offset).min(FILE_READ_CHUNK) as usize;
            {
                let mut scratch = worker.buffers.scratch(n);
                let chunk = &mut scratch[..n];
                read_exact_at(file, chunk, offset).map_err(|_| BodyError::Source)?;
                sink.push(&mut self.out, chunk, chunked_out)?;
            }
            offset += n as u64;
            if self.out.len() >= FLUSH_AT {
                relay.flush(&mut sink, &mut self.out).await?;
            }
        }
        sink.end(&mut self.out, chunked_out)?;
        if chunked_out {
            self.out.extend_from_slice(b"0\r\n\r\n");
        }
        relay.flush(&mut sink, &mut self.out).await?;
        Ok(sink.counted(body.len))
    }

    /// After a 101, the connection belongs to the upgraded protocol: bytes go both ways as
    /// through a TCP router (`io/relay.rs`), each side's FIN passed on, until both sides are
    /// done or nothing moved either way for `idle`.
    async fn tunnel(
        &mut self,
        worker: &Worker,
        mut up: UpstreamConn,
        resp: &ResponseHead,
        idle: Duration,
    ) -> Outcome {
        self.out.clear();
        status_line(&mut self.out, 101, reason(101));
        for (name, value) in resp.head.iter() {
            codec::header(&mut self.out, name, value);
        }
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(&up.buf);
        up.buf.clear();
        let pending = std::mem::take(&mut self.buf);
        let closed = Outcome {
            keep_alive: false,
            linger: false,
            status: 101,
            bytes: 0,
        };
        if self.io.write_all(&self.out).await.is_err() || up.io.write_all(&pending).await.is_err() {
            return closed;
        }
        let idle = relay::Idle {
            watch: &self.watch,
            clock: &worker.clock,
            limit: idle,
        };
        let moved = match (self.io.as_tcp(), &up.io) {
            (Some(client), UpstreamIo::Plain(server)) => {
                relay::splice_both(client, server, &worker.buffers, idle).await
            }
            _ => relay::copy_both(&mut self.io, &mut up.io, idle).await,
        };
        Outcome {
            bytes: moved.map(|(_, down)| down).unwrap_or(0),
            ..closed
        }
    }
}

/// Reads more bytes into `buf`, taking a buffer from the worker's pool for the read and
/// giving it back if nothing arrives, so a connection that waits holds no buffer.
async fn read_lent<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    worker: &Worker,
) -> std::io::Result<usize> {
    std::future::poll_fn(|cx| {
        if buf.capacity() == 0 {
            *buf = worker.buffers.take_read();
        }
        make_room(buf);
        let polled = std::pin::pin!(io.read_buf(&mut *buf)).poll(cx);
        if polled.is_pending() && buf.is_empty() {
            worker.buffers.give_read(std::mem::take(buf));
        }
        polled
    })
    .await
}

/// Whether a local answer's body goes out from its own buffer rather than copied.
#[inline(always)]
fn large_local_body(req: &RequestHead, local: &LocalResponse) -> bool {
    local.body.len() > LOCAL_BODY_COPIED_UP_TO && !req.is_head()
}

/// The HTTP/1 head of a planned reply: the fields that cross, the length as the plan tells
/// it (a `Content-Length`, chunks, or nothing: the close), `Date` when the head has none, and
/// `Connection` as the client needs it.
fn write_client_head(
    out: &mut Vec<u8>,
    plan: &ResponsePlan,
    keep_alive: bool,
    chunked: bool,
    client_minor: u8,
    date_header: Option<&[u8; DATE_HEADER_LEN]>,
) {
    let resp = &plan.head;
    let text = if resp.reason().is_empty() {
        reason(resp.status)
    } else {
        resp.reason()
    };
    status_line(out, resp.status, text);
    plan.each_field(|name, value| codec::header(out, name, value));
    match plan.length {
        BodyLength::Known(n) => {
            out.extend_from_slice(b"content-length: ");
            push_decimal(out, n);
            out.extend_from_slice(b"\r\n");
        }
        BodyLength::None => {
            if let Some(len) = plan.described_length() {
                codec::header(out, b"content-length", len);
            }
        }
        BodyLength::Unknown if chunked => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        BodyLength::Unknown => {}
    }
    if let Some(line) = date_header {
        out.extend_from_slice(line);
    }
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if client_minor == 0 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}
