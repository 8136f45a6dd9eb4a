//! Life of a client connection: read a head, route it, run the route's middlewares, then
//! answer locally or proxy to an upstream over a pooled keep-alive connection, streaming
//! bodies both ways. Everything here runs on one worker thread.

use crate::accesslog;
use crate::balancer::{PickInput, Server, Service};
use crate::h1::{
    self, is_hop_by_hop, lists_token, ChunkEvent, ChunkedDecoder, Framing, RequestHead,
    ResponseHead,
};
use crate::middleware::Flow;
use crate::pool::{Pool, UpstreamConn};
use crate::response::{header, push_decimal, push_hex, reason, status_line, LocalResponse};
use crate::runtime::{Route, RouteAction, Runtime};
use crate::watch::{Clock, ConnWatch, Expired, Waiting, DATE_HEADER_LEN};
use arc_swap::ArcSwap;
use bytes::{Buf, BytesMut};
use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// Largest request body weir reads and discards when it answers a request itself.
const LOCAL_DRAIN_LIMIT: u64 = 1 << 20;
/// Buffered output is written once it reaches this size.
const FLUSH_AT: usize = 64 * 1024;
const READ_CHUNK: usize = 16 * 1024;

/// Process-wide stop signal shared by all workers.
#[derive(Default)]
pub struct Shutdown {
    pub requested: AtomicBool,
    pub notify: Notify,
}

impl Shutdown {
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Relaxed)
    }

    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// The client-side limits from `server`, each enforced through the connection's watch.
#[derive(Debug, Clone, Copy)]
pub struct ClientTimeouts {
    /// `client_idle_timeout`: waiting for (or dribbling) a request head.
    pub idle: Duration,
    /// `client_body_timeout`: between reads of a request body.
    pub body: Duration,
    /// `client_send_timeout`: a write to a client that does not read.
    pub send: Duration,
}

/// What one worker thread owns.
pub struct Worker {
    pub id: usize,
    pub config: Arc<ArcSwap<Runtime>>,
    pub pool: Pool,
    pub shutdown: Arc<Shutdown>,
    /// Every open client connection's watch, so the worker's sweep can fire their deadlines
    /// and a stop can end idle ones. Compacted by the sweep.
    pub connections: RefCell<Vec<Rc<ConnWatch>>>,
    /// Read once per sweep tick, for deadlines and the `Date` header.
    pub clock: Clock,
    pub timeouts: ClientTimeouts,
}

impl Worker {
    pub fn new(
        id: usize,
        config: Arc<ArcSwap<Runtime>>,
        shutdown: Arc<Shutdown>,
        timeouts: ClientTimeouts,
    ) -> Worker {
        Worker {
            id,
            config,
            pool: Pool::default(),
            shutdown,
            connections: RefCell::new(Vec::new()),
            clock: Clock::default(),
            timeouts,
        }
    }

    /// Advances the clock, fires the deadlines that have passed (and idle waits when
    /// stopping), and forgets connections that have ended.
    pub fn sweep_connections(&self) {
        self.clock.tick();
        let now = self.clock.now();
        let stopping = self.shutdown.is_requested();
        self.connections.borrow_mut().retain(|watch| {
            watch.check(now, stopping);
            Rc::strong_count(watch) > 1
        });
    }
}

struct Client {
    io: TcpStream,
    watch: Rc<ConnWatch>,
    buf: BytesMut,
    ip: IpAddr,
    ip_text: String,
}

/// The result of one request/response exchange.
struct Outcome {
    keep_alive: bool,
    /// The connection closes while request bytes may still be arriving: close it gently.
    linger: bool,
    status: u16,
    bytes: u64,
    upstream: Option<SocketAddr>,
}

impl Outcome {
    fn closed(status: u16) -> Outcome {
        Outcome {
            keep_alive: false,
            linger: false,
            status,
            bytes: 0,
            upstream: None,
        }
    }
}

pub async fn serve_connection(
    worker: Rc<Worker>,
    entrypoint: usize,
    io: TcpStream,
    peer: SocketAddr,
) {
    let _ = io.set_nodelay(true);
    let ip = canonical_ip(peer.ip());
    let watch = Rc::new(ConnWatch::default());
    worker.connections.borrow_mut().push(watch.clone());
    let mut client = Client {
        io,
        watch,
        buf: BytesMut::with_capacity(READ_CHUNK),
        ip,
        ip_text: ip.to_string(),
    };
    let mut out = Vec::with_capacity(READ_CHUNK);
    loop {
        let head = match read_request_head(&worker, &mut client, &mut out).await {
            HeadRead::Head(head) => head,
            HeadRead::End => return,
            HeadRead::Refused => return linger(&worker, &mut client).await,
        };
        let runtime = worker.config.load_full();
        let outcome = exchange(&worker, &runtime, entrypoint, &mut client, head, &mut out).await;
        if outcome.linger {
            return linger(&worker, &mut client).await;
        }
        if !outcome.keep_alive || worker.shutdown.is_requested() {
            return;
        }
    }
}

/// How long a closing connection keeps reading (and discarding) what the client still sends,
/// and how much it reads at most: nginx's lingering close.
const LINGER_TIMEOUT: Duration = Duration::from_secs(5);
const LINGER_MAX_BYTES: usize = 8 << 20;

/// Closes a connection whose request may still be arriving without resetting it: weir's side
/// is shut down, then input is read and dropped until the client closes, goes quiet or has
/// sent too much. Closing with unread input sends a reset, which can destroy the answer
/// before the client reads it.
async fn linger(worker: &Worker, client: &mut Client) {
    if client.io.shutdown().await.is_err() {
        return;
    }
    let mut discarded = 0;
    while discarded < LINGER_MAX_BYTES {
        client.buf.clear();
        make_room(&mut client.buf);
        let read = client.io.read_buf(&mut client.buf);
        let wait = Waiting::RequestBody;
        match client
            .watch
            .within(&worker.clock, wait, LINGER_TIMEOUT, read)
            .await
        {
            Ok(Ok(n)) if n > 0 => discarded += n,
            _ => return,
        }
    }
}

/// What waiting for a request head ended with.
enum HeadRead {
    Head(RequestHead),
    /// EOF, idle timeout or stop: close.
    End,
    /// A refused head has been answered: close gently.
    Refused,
}

fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Reads until a full head is buffered, answering a head that is refused or too slow.
async fn read_request_head(worker: &Worker, client: &mut Client, out: &mut Vec<u8>) -> HeadRead {
    loop {
        match h1::parse_request(&mut client.buf) {
            Ok(Some(head)) => return HeadRead::Head(head),
            Ok(None) => {}
            Err(e) => {
                refuse(worker, &mut client.io, out, e.status(), e.message()).await;
                return HeadRead::Refused;
            }
        }
        if client.buf.is_empty() && worker.shutdown.is_requested() {
            return HeadRead::End;
        }
        make_room(&mut client.buf);
        let read = client.io.read_buf(&mut client.buf);
        let idle = worker.timeouts.idle;
        match client
            .watch
            .within(&worker.clock, Waiting::RequestHead, idle, read)
            .await
        {
            Ok(Ok(0)) | Ok(Err(_)) => return HeadRead::End,
            Ok(Ok(_)) => {}
            Err(Expired) => {
                if !client.buf.is_empty() && !worker.shutdown.is_requested() {
                    let message = "timed out reading the request head";
                    refuse(worker, &mut client.io, out, 408, message).await;
                    return HeadRead::Refused;
                }
                return HeadRead::End;
            }
        }
    }
}

/// Routes and answers one request (and logs it).
async fn exchange(
    worker: &Worker,
    runtime: &Runtime,
    entrypoint: usize,
    client: &mut Client,
    mut head: RequestHead,
    out: &mut Vec<u8>,
) -> Outcome {
    // Read the clock only when a log line will use it.
    let started = runtime.access_log.as_ref().map(|_| Instant::now());
    let router = &runtime.entrypoints[entrypoint].router;
    let route = router.route_request(&head, client.ip);
    // The original request line, kept only when a log line will need it.
    let logged = runtime.access_log.as_ref().map(|_| {
        (
            head.method().to_string(),
            head.host().to_string(),
            head.path().to_string(),
        )
    });

    let outcome = match route {
        None => {
            local(
                worker,
                client,
                out,
                &head,
                &LocalResponse::text(404, "no route matches this request"),
                None,
            )
            .await
        }
        Some(route) => handle_route(worker, route, client, &mut head, out).await,
    };

    if let (Some(log), Some((method, host, path)), Some(started)) =
        (&runtime.access_log, logged, started)
    {
        let upstream = outcome.upstream.map(|a| a.to_string()).unwrap_or_default();
        log.record(&accesslog::Entry {
            client: client.ip,
            method: &method,
            host: &host,
            path: &path,
            status: outcome.status,
            bytes: outcome.bytes,
            duration: started.elapsed(),
            router: route.map(|r| r.name.as_str()).unwrap_or(""),
            upstream: &upstream,
        });
    }
    outcome
}

async fn handle_route(
    worker: &Worker,
    route: &Route,
    client: &mut Client,
    head: &mut RequestHead,
    out: &mut Vec<u8>,
) -> Outcome {
    for mw in &route.middlewares {
        if let Flow::Respond(response) = mw.on_request(head, "http") {
            return local(worker, client, out, head, &response, Some(route)).await;
        }
    }
    match &route.action {
        RouteAction::Respond(r) | RouteAction::Redirect(r) => {
            local(worker, client, out, head, r, Some(route)).await
        }
        RouteAction::Proxy(service) => proxy(worker, route, service, client, head, out).await,
    }
}

/// Answers with a response weir builds itself, after discarding any request body.
async fn local(
    worker: &Worker,
    client: &mut Client,
    out: &mut Vec<u8>,
    head: &RequestHead,
    response: &LocalResponse,
    route: Option<&Route>,
) -> Outcome {
    let mut keep_alive = head.keep_alive && !worker.shutdown.is_requested();
    if head.framing != Framing::None {
        out.clear();
        let drain = Relay::client_body(worker, &client.watch, LOCAL_DRAIN_LIMIT);
        let drained = relay_body(
            &mut client.io,
            &mut client.buf,
            head.framing,
            None,
            out,
            false,
            &drain,
        )
        .await;
        keep_alive &= drained.is_ok();
        match drained {
            Err(BodyError::Malformed) => return malformed_body(worker, client, out, head).await,
            Err(BodyError::SourceStalled) => {
                return body_timed_out(worker, client, out, head).await
            }
            _ => {}
        }
    }
    let mut extra = Vec::new();
    if let Some(route) = route.filter(|r| r.has_response_phase) {
        for mw in &route.middlewares {
            mw.local_response_headers(&mut extra);
        }
    }
    if keep_alive && head.minor_version == 0 {
        extra.extend_from_slice(b"connection: keep-alive\r\n");
    }
    write_local(worker, client, out, head, response, keep_alive, &extra).await
}

async fn write_local(
    worker: &Worker,
    client: &mut Client,
    out: &mut Vec<u8>,
    head: &RequestHead,
    response: &LocalResponse,
    keep_alive: bool,
    extra: &[u8],
) -> Outcome {
    out.clear();
    response.write(
        out,
        keep_alive,
        head.is_head(),
        extra,
        &worker.clock.date_header(),
    );
    let ok = client.io.write_all(out).await.is_ok();
    Outcome {
        keep_alive: keep_alive && ok,
        linger: false,
        status: response.status,
        bytes: if head.is_head() {
            0
        } else {
            response.body.len() as u64
        },
        upstream: None,
    }
}

/// Writes a plain-text error that closes the connection, for a request that cannot go on.
async fn refuse(
    worker: &Worker,
    io: &mut TcpStream,
    out: &mut Vec<u8>,
    status: u16,
    message: &str,
) {
    out.clear();
    LocalResponse::text(status, message).write(out, false, false, b"", &worker.clock.date_header());
    let _ = io.write_all(out).await;
}

/// A request body with broken framing: 400, and the connection closes (its framing is lost).
async fn malformed_body(
    worker: &Worker,
    client: &mut Client,
    out: &mut Vec<u8>,
    head: &RequestHead,
) -> Outcome {
    let response = LocalResponse::text(400, "malformed request body");
    let mut outcome = write_local(worker, client, out, head, &response, false, b"").await;
    outcome.linger = true;
    outcome
}

/// A request body that stopped arriving: 408, and the connection closes (the rest of the body
/// may still come and could not be told from a next request).
async fn body_timed_out(
    worker: &Worker,
    client: &mut Client,
    out: &mut Vec<u8>,
    head: &RequestHead,
) -> Outcome {
    let response = LocalResponse::text(408, "timed out reading the request body");
    let mut outcome = write_local(worker, client, out, head, &response, false, b"").await;
    outcome.linger = true;
    outcome
}

/// Decrements a server's in-flight count when the exchange ends, however it ends.
struct InflightGuard<'a>(&'a Server);

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.0.inflight.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn proxy(
    worker: &Worker,
    route: &Route,
    service: &Service,
    client: &mut Client,
    head: &mut RequestHead,
    out: &mut Vec<u8>,
) -> Outcome {
    let pick = PickInput {
        client_ip: client.ip,
        path: head.path(),
        headers: &head.head,
    };
    let Some(server) = service.pick(worker.id, &pick) else {
        return local(
            worker,
            client,
            out,
            head,
            &LocalResponse::text(503, "no server available"),
            Some(route),
        )
        .await;
    };
    server.inflight.0.fetch_add(1, Ordering::Relaxed);
    let _inflight = InflightGuard(server);
    let has_body = head.framing != Framing::None;
    // A reused connection can turn out dead after the request went out; only a request that
    // may be repeated (idempotent, no body consumed) is then sent again (RFC 9110 9.2.2).
    let may_resend = !has_body && head.is_idempotent();

    let (mut up, mut response) = loop {
        let mut up = match worker.pool.checkout(server.id) {
            Some(conn) => conn,
            None => match connect(server.addr, service.connect_timeout).await {
                Ok(io) => UpstreamConn::new(io),
                Err(ConnectError::Timeout) => {
                    let (s, m) = (504, "upstream connect timed out");
                    return upstream_failure(worker, client, out, head, route, server, s, m).await;
                }
                Err(ConnectError::Failed) => {
                    let (s, m) = (502, "upstream connection failed");
                    return upstream_failure(worker, client, out, head, route, server, s, m).await;
                }
            },
        };
        out.clear();
        write_upstream_head(out, head, service, server, &client.ip_text);
        if head.expect_continue
            && has_body
            && client
                .io
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
        {
            return Outcome::closed(499);
        }
        let chunked = head.framing == Framing::Chunked;
        let send = Relay::request(worker, &client.watch, service);
        let sent = relay_body(
            &mut client.io,
            &mut client.buf,
            head.framing,
            Some(&mut up.io),
            out,
            chunked,
            &send,
        )
        .await;
        let (status, message) = match sent {
            Ok(_) => {
                let read = read_response_head(&mut up, head.is_head(), head.upgrade);
                let limit = service.response_header_timeout;
                match client
                    .watch
                    .within(&worker.clock, Waiting::ResponseHead, limit, read)
                    .await
                {
                    Ok(Ok(response)) => break (up, response),
                    Ok(Err(ResponseError::ClosedEarly)) if up.reused && may_resend => continue,
                    Ok(Err(_)) => (502, "invalid or missing upstream response"),
                    Err(Expired) => (504, "upstream response timed out"),
                }
            }
            Err(BodyError::Sink) if up.reused && may_resend => continue,
            Err(BodyError::Sink) => (502, "upstream closed the connection"),
            Err(BodyError::SinkStalled) => (504, "upstream did not take the request in time"),
            Err(BodyError::Malformed) | Err(BodyError::TooLarge) => {
                // Dropping `up` aborts the upstream request mid-body; it never sees a request boundary.
                head.keep_alive = false;
                return malformed_body(worker, client, out, head).await;
            }
            Err(BodyError::SourceStalled) => {
                head.keep_alive = false;
                return body_timed_out(worker, client, out, head).await;
            }
            Err(BodyError::Source) => return Outcome::closed(499),
        };
        // Part of the body may be unread: the client connection cannot continue.
        let body_unread = has_body && sent.is_err();
        head.keep_alive &= !body_unread;
        let mut outcome =
            upstream_failure(worker, client, out, head, route, server, status, message).await;
        outcome.linger = body_unread;
        return outcome;
    };

    if response.status == 101 {
        // Only reached when the client asked to upgrade (an unasked 101 is refused above);
        // the connection now belongs to the new protocol and never returns to the pool.
        return tunnel(client, up, &response, out, server.addr).await;
    }
    if route.has_response_phase {
        for mw in &route.middlewares {
            mw.on_response(&mut response.head);
        }
    }
    let body_chunked = head.minor_version == 1
        && matches!(response.framing, Framing::Chunked | Framing::UntilClose);
    let client_can_delimit =
        body_chunked || !matches!(response.framing, Framing::Chunked | Framing::UntilClose);
    let keep_alive = head.keep_alive && client_can_delimit && !worker.shutdown.is_requested();
    out.clear();
    let date = (!response.has_date).then(|| worker.clock.date_header());
    write_client_head(
        out,
        &response,
        keep_alive,
        body_chunked,
        head.minor_version,
        date.as_ref(),
    );
    let receive = Relay::response(worker, &client.watch, service);
    let relayed = relay_body(
        &mut up.io,
        &mut up.buf,
        response.framing,
        Some(&mut client.io),
        out,
        body_chunked,
        &receive,
    )
    .await;
    match relayed {
        Ok(bytes) => {
            if response.keep_alive {
                worker.pool.checkin(
                    server.id,
                    up,
                    service.max_idle_per_server,
                    service.idle_timeout,
                );
            }
            Outcome {
                keep_alive,
                linger: false,
                status: response.status,
                bytes,
                upstream: Some(server.addr),
            }
        }
        // The head is already sent: closing is the only way to tell the client the body broke.
        Err(_) => Outcome {
            keep_alive: false,
            linger: false,
            status: response.status,
            bytes: 0,
            upstream: Some(server.addr),
        },
    }
}

#[allow(clippy::too_many_arguments)]
async fn upstream_failure(
    worker: &Worker,
    client: &mut Client,
    out: &mut Vec<u8>,
    head: &RequestHead,
    route: &Route,
    server: &Server,
    status: u16,
    message: &str,
) -> Outcome {
    let mut outcome = local(
        worker,
        client,
        out,
        head,
        &LocalResponse::text(status, message),
        Some(route),
    )
    .await;
    outcome.upstream = Some(server.addr);
    outcome
}

enum ConnectError {
    Timeout,
    Failed,
}

async fn connect(addr: SocketAddr, limit: Duration) -> Result<TcpStream, ConnectError> {
    match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
        Ok(Ok(io)) => {
            let _ = io.set_nodelay(true);
            Ok(io)
        }
        Ok(Err(_)) => Err(ConnectError::Failed),
        Err(_) => Err(ConnectError::Timeout),
    }
}

enum ResponseError {
    /// The connection closed before any byte of a response arrived.
    ClosedEarly,
    Broken,
}

/// Reads the final response head, skipping interim 1xx responses other than 101. A 101 to a
/// request that did not ask to upgrade is invalid: the connection has switched to something
/// weir cannot relay.
async fn read_response_head(
    up: &mut UpstreamConn,
    request_is_head: bool,
    upgrade_requested: bool,
) -> Result<ResponseHead, ResponseError> {
    let mut received = false;
    loop {
        match h1::parse_response(&mut up.buf, request_is_head) {
            Ok(Some(r)) if r.status == 101 && !upgrade_requested => {
                return Err(ResponseError::Broken)
            }
            Ok(Some(r)) if (100..200).contains(&r.status) && r.status != 101 => continue,
            Ok(Some(r)) => return Ok(r),
            Ok(None) => {}
            Err(_) => return Err(ResponseError::Broken),
        }
        make_room(&mut up.buf);
        match up.io.read_buf(&mut up.buf).await {
            Ok(0) | Err(_) if !received && up.buf.is_empty() => {
                return Err(ResponseError::ClosedEarly)
            }
            Ok(0) | Err(_) => return Err(ResponseError::Broken),
            Ok(_) => received = true,
        }
    }
}

/// The request head as the upstream sees it: hop-by-hop headers dropped, forwarding
/// headers set, framing rewritten to match what weir will send.
fn write_upstream_head(
    out: &mut Vec<u8>,
    req: &RequestHead,
    service: &Service,
    server: &Server,
    client_ip: &str,
) {
    out.extend_from_slice(req.method().as_bytes());
    out.push(b' ');
    let target = req.target();
    if target.starts_with('/') || target == "*" {
        out.extend_from_slice(target.as_bytes());
    } else {
        out.extend_from_slice(req.path().as_bytes());
        if !req.query().is_empty() {
            out.push(b'?');
            out.extend_from_slice(req.query().as_bytes());
        }
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let original_host = req.host();
    let host = if service.pass_host_header && !original_host.is_empty() {
        original_host
    } else {
        server.authority.as_str()
    };
    header(out, b"host", host.as_bytes());
    let connection = req
        .connection_names_headers
        .then(|| req.head.get("connection"))
        .flatten();
    let mut had_length = false;
    for (name, value) in req.head.iter() {
        if is_hop_by_hop(name)
            || is_rewritten_request_header(name)
            || (req.has_expect_continue && name.eq_ignore_ascii_case(b"expect"))
            || connection.is_some_and(|c| lists_token(c, name))
        {
            had_length |= name.eq_ignore_ascii_case(b"content-length");
            continue;
        }
        header(out, name, value);
    }
    out.extend_from_slice(b"x-forwarded-for: ");
    for previous in req.head.get_all("x-forwarded-for") {
        out.extend_from_slice(previous);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(client_ip.as_bytes());
    out.extend_from_slice(b"\r\nx-forwarded-proto: http\r\n");
    if !original_host.is_empty() {
        header(out, b"x-forwarded-host", original_host.as_bytes());
    }
    header(out, b"x-real-ip", client_ip.as_bytes());
    if req.upgrade {
        if let Some(protocol) = req.head.get("upgrade") {
            out.extend_from_slice(b"connection: upgrade\r\n");
            header(out, b"upgrade", protocol);
        }
    }
    match req.framing {
        Framing::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            push_decimal(out, n);
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        _ if had_length => out.extend_from_slice(b"content-length: 0\r\n"),
        _ => {}
    }
    out.extend_from_slice(b"\r\n");
}

fn is_rewritten_request_header(name: &[u8]) -> bool {
    [
        &b"host"[..],
        b"content-length",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-real-ip",
    ]
    .iter()
    .any(|h| h.eq_ignore_ascii_case(name))
}

fn write_client_head(
    out: &mut Vec<u8>,
    resp: &ResponseHead,
    keep_alive: bool,
    chunked: bool,
    client_minor: u8,
    date_header: Option<&[u8; DATE_HEADER_LEN]>,
) {
    let text = if resp.reason().is_empty() {
        reason(resp.status)
    } else {
        resp.reason()
    };
    status_line(out, resp.status, text);
    let connection = resp
        .connection_names_headers
        .then(|| resp.head.get("connection"))
        .flatten();
    for (name, value) in resp.head.iter() {
        if is_hop_by_hop(name)
            || name.eq_ignore_ascii_case(b"content-length")
            || connection.is_some_and(|c| lists_token(c, name))
        {
            continue;
        }
        header(out, name, value);
    }
    match resp.framing {
        Framing::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            push_decimal(out, n);
            out.extend_from_slice(b"\r\n");
        }
        Framing::None => {
            // HEAD and 304 answers describe the length they would have had.
            if let Some(len) = resp.head.get("content-length") {
                header(out, b"content-length", len);
            }
        }
        Framing::Chunked | Framing::UntilClose if chunked => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        _ => {}
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

/// After a 101, the connection belongs to the upgraded protocol: copy bytes both ways.
async fn tunnel(
    client: &mut Client,
    mut up: UpstreamConn,
    resp: &ResponseHead,
    out: &mut Vec<u8>,
    upstream: SocketAddr,
) -> Outcome {
    out.clear();
    status_line(out, 101, reason(101));
    for (name, value) in resp.head.iter() {
        header(out, name, value);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&up.buf);
    up.buf.clear();
    let pending = std::mem::take(&mut client.buf);
    if client.io.write_all(out).await.is_err() || up.io.write_all(&pending).await.is_err() {
        return Outcome::closed(101);
    }
    let copied = tokio::io::copy_bidirectional(&mut client.io, &mut up.io).await;
    Outcome {
        keep_alive: false,
        linger: false,
        status: 101,
        bytes: copied.map(|(_, down)| down).unwrap_or(0),
        upstream: Some(upstream),
    }
}

#[derive(Debug, Clone, Copy)]
enum BodyError {
    /// The sending side closed or failed before the body ended.
    Source,
    /// The sending side went quiet for longer than its limit.
    SourceStalled,
    /// The body's framing is invalid.
    Malformed,
    /// More than the allowed number of bytes.
    TooLarge,
    /// The receiving side failed.
    Sink,
    /// The receiving side took nothing for longer than its limit.
    SinkStalled,
}

/// The limits of one body relay: how long a read from the source and a write to the sink may
/// wait (each wait re-arms the connection's watch), and how many bytes may pass.
struct Relay<'a> {
    clock: &'a Clock,
    watch: &'a ConnWatch,
    read: (Waiting, Duration),
    write: (Waiting, Duration),
    max_bytes: u64,
}

impl<'a> Relay<'a> {
    /// A request body read from the client and discarded (up to `max_bytes`).
    fn client_body(worker: &'a Worker, watch: &'a ConnWatch, max_bytes: u64) -> Relay<'a> {
        Relay {
            clock: &worker.clock,
            watch,
            read: (Waiting::RequestBody, worker.timeouts.body),
            // Never used: a drained body has no sink.
            write: (Waiting::UpstreamWrite, Duration::ZERO),
            max_bytes,
        }
    }

    /// A request (head and body) sent from the client to an upstream.
    fn request(worker: &'a Worker, watch: &'a ConnWatch, service: &Service) -> Relay<'a> {
        Relay {
            clock: &worker.clock,
            watch,
            read: (Waiting::RequestBody, worker.timeouts.body),
            write: (Waiting::UpstreamWrite, service.write_timeout),
            max_bytes: u64::MAX,
        }
    }

    /// A response body relayed from an upstream to the client.
    fn response(worker: &'a Worker, watch: &'a ConnWatch, service: &Service) -> Relay<'a> {
        Relay {
            clock: &worker.clock,
            watch,
            read: (Waiting::ResponseBody, service.read_timeout),
            write: (Waiting::ClientWrite, worker.timeouts.send),
            max_bytes: u64::MAX,
        }
    }

    async fn fill(&self, src: &mut TcpStream, buf: &mut BytesMut) -> Result<(), BodyError> {
        make_room(buf);
        let (what, limit) = self.read;
        let read = src.read_buf(buf);
        match self.watch.within(self.clock, what, limit, read).await {
            Ok(Ok(0)) | Ok(Err(_)) => Err(BodyError::Source),
            Ok(Ok(_)) => Ok(()),
            Err(Expired) => Err(BodyError::SourceStalled),
        }
    }

    async fn flush(
        &self,
        sink: &mut Option<&mut TcpStream>,
        out: &mut Vec<u8>,
    ) -> Result<(), BodyError> {
        if !out.is_empty() {
            if let Some(io) = sink {
                let (what, limit) = self.write;
                let write = io.write_all(out);
                match self.watch.within(self.clock, what, limit, write).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return Err(BodyError::Sink),
                    Err(Expired) => return Err(BodyError::SinkStalled),
                }
            }
            out.clear();
        }
        Ok(())
    }
}

/// Streams one message body from `src` (its buffered bytes first) to `sink`, re-framing it
/// as chunked when `chunked_out`. Bytes already in `out` (a head) go out first, in the
/// same write when the body is small. Returns the body bytes relayed.
async fn relay_body(
    src: &mut TcpStream,
    buf: &mut BytesMut,
    framing: Framing,
    mut sink: Option<&mut TcpStream>,
    out: &mut Vec<u8>,
    chunked_out: bool,
    relay: &Relay<'_>,
) -> Result<u64, BodyError> {
    let mut relayed: u64 = 0;
    match framing {
        Framing::None => {}
        Framing::Length(total) => {
            let mut remaining = total;
            while remaining > 0 {
                if buf.is_empty() {
                    relay.flush(&mut sink, out).await?;
                    relay.fill(src, buf).await?;
                }
                let take = remaining.min(buf.len() as u64) as usize;
                push_data(out, &buf[..take], chunked_out);
                buf.advance(take);
                remaining -= take as u64;
                relayed += take as u64;
                if relayed > relay.max_bytes {
                    return Err(BodyError::TooLarge);
                }
                if out.len() >= FLUSH_AT {
                    relay.flush(&mut sink, out).await?;
                }
            }
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::default();
            loop {
                let (event, used) = decoder.decode(buf).map_err(|_| BodyError::Malformed)?;
                match event {
                    ChunkEvent::Data(start, end) => {
                        push_data(out, &buf[start..end], chunked_out);
                        relayed += (end - start) as u64;
                        buf.advance(used);
                        if relayed > relay.max_bytes {
                            return Err(BodyError::TooLarge);
                        }
                        if out.len() >= FLUSH_AT {
                            relay.flush(&mut sink, out).await?;
                        }
                    }
                    ChunkEvent::End => {
                        buf.advance(used);
                        if chunked_out {
                            out.extend_from_slice(b"0\r\n\r\n");
                        }
                        break;
                    }
                    ChunkEvent::NeedMore => {
                        buf.advance(used);
                        relay.flush(&mut sink, out).await?;
                        relay.fill(src, buf).await?;
                    }
                }
            }
        }
        Framing::UntilClose => loop {
            if !buf.is_empty() {
                push_data(out, buf, chunked_out);
                relayed += buf.len() as u64;
                buf.clear();
            }
            relay.flush(&mut sink, out).await?;
            if relayed > relay.max_bytes {
                return Err(BodyError::TooLarge);
            }
            match relay.fill(src, buf).await {
                Ok(()) => {}
                Err(BodyError::SourceStalled) => return Err(BodyError::SourceStalled),
                Err(_) => {
                    if chunked_out {
                        out.extend_from_slice(b"0\r\n\r\n");
                    }
                    break;
                }
            }
        },
    }
    relay.flush(&mut sink, out).await?;
    Ok(relayed)
}

fn push_data(out: &mut Vec<u8>, data: &[u8], chunked: bool) {
    if data.is_empty() {
        return;
    }
    if chunked {
        push_hex(out, data.len() as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    } else {
        out.extend_from_slice(data);
    }
}

/// Ensures a read has room for at least 1 KiB, growing by `READ_CHUNK`.
fn make_room(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(READ_CHUNK);
    }
}
