//! The `service` action: pick a server, take a pooled keep-alive connection (or connect),
//! send the request head and body, read the response head, and return it as a [`Reply`] whose
//! body is still on the upstream connection: the driver relays it and `finish` pools the
//! connection. Failures become local replies (502, 503, 504).

use crate::balancer::UpstreamUse;
use crate::balancer::{PickInput, Server, Service};
use crate::client::{BodyError, ClientSide};
use crate::codec::{self, is_hop_by_hop, lists_token, push_decimal, RequestHead, ResponseHead};
use crate::codec::{header, Framing};
use crate::conn::watch::{ConnWatch, Expired, Waiting};
use crate::conn::Scheme;
use crate::grpc;
use crate::pool::{UpstreamConn, UpstreamIo};
use crate::reply::{LocalResponse, Reply, ReplyBody, ReplyHead};
use crate::upstream_h2;
use crate::worker::make_room;
use crate::worker::Worker;
use std::borrow::Cow;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use weir_config::{RetryOn, UpstreamProtocol};

/// A local error answer that names the server it concerns (for the access log).
fn failure<'r>(status: u16, message: &str, upstream: Option<UpstreamUse<'r>>) -> Reply<'r> {
    Reply {
        upstream,
        ..Reply::local(Cow::Owned(LocalResponse::text(status, message)))
    }
}

/// Runs the `service` action for one request: a server from the balancer (skipping those down
/// or ejected), and with `retry`, another server after a failure the settings name, as long as
/// the request may be sent again (nothing of it consumed, or idempotent without a body).
pub(crate) async fn forward<'r, C: ClientSide>(
    worker: &Worker,
    service: &'r Service,
    client: &mut C,
    head: &RequestHead,
) -> Reply<'r> {
    let pick = PickInput {
        client_ip: client.ip(),
        path: head.path(),
        headers: &head.head,
    };
    let has_body = head.framing != Framing::None;
    // A reused connection can turn out dead after the request went out; only a request that
    // may be repeated (idempotent, no body consumed) is then sent again (RFC 9110 9.2.2).
    let may_resend = !has_body && head.is_idempotent();
    let attempts = service.retry.as_ref().map_or(1, |r| r.attempts);
    let budget = RetryBudget::new(service, worker.id);
    // `timeouts.request` bounds every wait of every try, and so does a gRPC call's deadline
    // (gRPC needs HTTP/2, so HTTP/1 requests skip the lookup).
    let deadline = head.http2.then(|| grpc::timeout(head)).flatten();
    let limit = match (service.request_timeout, deadline) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let until = limit.map(|limit| worker.clock.now() + limit);
    // Servers tried so far (no allocation unless a retry happens).
    let mut tried: Vec<usize> = Vec::new();
    loop {
        let Some(server) = service.pick_avoiding(worker.id, &pick, &tried) else {
            return failure(503, "no server available", None);
        };
        let used = UpstreamUse::new(server, service);
        let tried_server = match service.protocol {
            UpstreamProtocol::Http1 => {
                try_server(worker, service, server, client, head, may_resend, until).await
            }
            // Boxed: HTTP/2 tries are rarer, and their state is larger.
            _ => {
                Box::pin(upstream_h2::try_server(
                    worker, service, server, client, head, until,
                ))
                .await
            }
        };
        let failed = match tried_server {
            Ok(mut reply) => {
                let status = match &reply.head {
                    ReplyHead::Response(response) => response.status,
                    _ => 0,
                };
                if matches!(status, 502..=504) {
                    note_failure(service, server);
                }
                let retry_status = service
                    .retry
                    .as_ref()
                    .is_some_and(|r| r.on.contains(&RetryOn::Status(status)));
                let may_retry = tried.len() + 1 < attempts as usize && budget.allows();
                if !(retry_status && may_resend && may_retry) {
                    reply.upstream = Some(used);
                    return reply;
                }
                // Retried: this answer's body is never read, so its connection is dropped.
                Failed {
                    status,
                    message: "upstream answered with an error",
                    cause: Cause::Status,
                }
            }
            Err(failed) => failed,
        };
        if matches!(failed.cause, Cause::Connect | Cause::Reset) {
            note_failure(service, server);
        }
        let retry_on = |on| service.retry.as_ref().is_some_and(|r| r.on.contains(&on));
        let retryable = match failed.cause {
            // Nothing was sent: any request may go elsewhere.
            Cause::Connect => retry_on(RetryOn::ConnectFailure),
            Cause::Reset => retry_on(RetryOn::Reset) && may_resend,
            Cause::Status => true,
            // No answer in time (`per_try_timeout`, `response_header`): as a 504.
            Cause::Timeout => retry_on(RetryOn::Status(504)) && may_resend,
            Cause::Other => false,
        };
        if failed.cause == Cause::Connect {
            service.cells[worker.id].connect_errors.add(1);
        }
        let out_of_time = until.is_some_and(|until| worker.clock.now() >= until);
        if retryable && !out_of_time && tried.len() + 1 < attempts as usize && budget.allows() {
            tried.push(server.id);
            budget.spend();
            service.cells[worker.id].retries.add(1);
            continue;
        }
        return failure(failed.status, failed.message, Some(used));
    }
}

/// `retry.budget` in one worker: a bucket of retries, ten when full, refilled by `budget` of a
/// retry per request; a retry takes one. Kept as a debt in thousandths (0 = full) in the
/// service's cells, so it starts full and carries over reloads.
struct RetryBudget<'s> {
    debt: Option<&'s crate::metrics::Cell>,
}

/// Retries a full bucket holds, in thousandths.
const RETRY_BURST: u64 = 10_000;

impl<'s> RetryBudget<'s> {
    /// Refills for this request.
    fn new(service: &'s Service, worker: usize) -> RetryBudget<'s> {
        let Some(share) = service.retry.as_ref().and_then(|r| r.budget) else {
            return RetryBudget { debt: None };
        };
        let debt = &service.cells[worker].retry_debt;
        debt.set(debt.get().saturating_sub((share * 1000.0) as u64));
        RetryBudget { debt: Some(debt) }
    }

    fn allows(&self) -> bool {
        self.debt
            .is_none_or(|debt| debt.get() + 1000 <= RETRY_BURST)
    }

    fn spend(&self) {
        if let Some(debt) = self.debt {
            debt.add(1000);
        }
    }
}

/// Counts a failure towards the server's passive ejection, if the service has it.
fn note_failure(service: &Service, server: &Server) {
    if let Some(policy) = &service.passive_health {
        if server.health.record_failure(policy) {
            eprintln!(
                "weir: service `{}`: server {} ejected for {:?} after {} failures",
                service.name, server.url, policy.eject, policy.max_failures
            );
        }
    }
}

/// Why a try at one server failed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// No connection (refused, unreachable, timed out, TLS failed): nothing was sent.
    Connect,
    /// The connection broke or closed before a response.
    Reset,
    /// A response whose status `retry.on` names.
    Status,
    /// No response head in time (`retry.per_try_timeout` or `timeouts.response_header`).
    Timeout,
    /// Anything else (the client's side, a timeout after sending): never retried.
    Other,
}

pub(crate) struct Failed {
    pub(crate) status: u16,
    pub(crate) message: &'static str,
    pub(crate) cause: Cause,
}

/// Sends the request to `server` (a pooled connection or a new one) and reads the response
/// head: a reply whose body is still on the connection (its `upstream` is the caller's).
async fn try_server<'r, C: ClientSide>(
    worker: &Worker,
    service: &Service,
    server: &Server,
    client: &mut C,
    head: &RequestHead,
    may_resend: bool,
    until: Option<std::time::Instant>,
) -> Result<Reply<'r>, Failed> {
    // A wait's limit, cut to what `timeouts.request` leaves.
    let within = |limit: std::time::Duration| match until {
        Some(until) => limit.min(until.saturating_duration_since(worker.clock.now())),
        None => limit,
    };
    let fail = |status, message, cause| {
        Err(Failed {
            status,
            message,
            cause,
        })
    };
    loop {
        let mut up = match worker.pool.checkout(server.id) {
            Some(conn) => conn,
            None => {
                // Boxed: connecting is rare with pooling, and its future is large.
                let limit = within(service.connect_timeout);
                UpstreamConn::new(Box::pin(connect(worker, server, client.watch(), limit)).await?)
            }
        };
        let write_head = |out: &mut Vec<u8>, client_ip: &str, scheme: Scheme| {
            write_upstream_head(out, head, service, server, client_ip, scheme);
        };
        let sent = client
            .send_request(worker, head, write_head, &mut up.io, service.write_timeout)
            .await;
        let (status, message, cause) = match sent {
            Ok(_) => {
                let read = read_response_head(&mut up, head.is_head(), head.upgrade);
                let per_try = service.retry.as_ref().and_then(|r| r.per_try_timeout);
                let limit = within(per_try.unwrap_or(service.response_header_timeout));
                match client
                    .watch()
                    .within(&worker.clock, Waiting::ResponseHead, limit, read)
                    .await
                {
                    Ok(Ok(response)) => {
                        let body = if response.status == 101 {
                            // Only reached when the client asked to upgrade (an unasked 101
                            // is refused below); the connection never returns to the pool.
                            ReplyBody::Upgrade(up)
                        } else {
                            ReplyBody::Upstream(up)
                        };
                        return Ok(Reply {
                            head: ReplyHead::Response(response),
                            body,
                            upstream: None,
                            body_filter: None,
                        });
                    }
                    Ok(Err(ResponseError::ClosedEarly)) if up.reused && may_resend => continue,
                    Ok(Err(ResponseError::ClosedEarly)) => {
                        (502, "invalid or missing upstream response", Cause::Reset)
                    }
                    Ok(Err(_)) => (502, "invalid or missing upstream response", Cause::Other),
                    Err(Expired) => (504, "upstream response timed out", Cause::Timeout),
                }
            }
            Err(BodyError::Sink) if up.reused && may_resend => continue,
            Err(BodyError::Sink) => (502, "upstream closed the connection", Cause::Reset),
            Err(BodyError::SinkStalled) => (
                504,
                "upstream did not take the request in time",
                Cause::Other,
            ),
            Err(BodyError::Source) => (499, "client closed the connection", Cause::Other),
            // Dropping `up` aborts the upstream request mid-body: it never sees a request
            // boundary. The client's body is bad (400) or stalled (408).
            Err(e) => {
                let (status, message) =
                    e.client_answer().unwrap_or((400, "malformed request body"));
                (status, message, Cause::Other)
            }
        };
        return fail(status, message, cause);
    }
}

/// Opens a connection to `server`, with TLS for an https:// one (the handshake shares the
/// connect deadline, `limit`).
pub(crate) async fn connect(
    worker: &Worker,
    server: &Server,
    watch: &ConnWatch,
    limit: std::time::Duration,
) -> Result<UpstreamIo, Failed> {
    let fail = |status, message| {
        Err(Failed {
            status,
            message,
            cause: Cause::Connect,
        })
    };
    let connecting = TcpStream::connect(server.addr);
    let io = match watch
        .within(&worker.clock, Waiting::Connect, limit, connecting)
        .await
    {
        Ok(Ok(io)) => io,
        Ok(Err(_)) => return fail(502, "upstream connection failed"),
        Err(Expired) => return fail(504, "upstream connect timed out"),
    };
    let _ = io.set_nodelay(true);
    let Some(tls) = &server.tls else {
        return Ok(UpstreamIo::Plain(io));
    };
    let connector = TlsConnector::from(tls.config.clone());
    let handshake = connector.connect(tls.name.clone(), io);
    match watch
        .within(&worker.clock, Waiting::Connect, limit, handshake)
        .await
    {
        Ok(Ok(io)) => Ok(UpstreamIo::Tls(Box::new(io))),
        Ok(Err(_)) => fail(502, "upstream TLS handshake failed"),
        Err(Expired) => fail(504, "upstream TLS handshake timed out"),
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
        match codec::parse_response(&mut up.buf, request_is_head) {
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

/// The request head as an HTTP/1 upstream sees it: hop-by-hop headers dropped, forwarding
/// headers set, framing rewritten to match what weir will send.
fn write_upstream_head(
    out: &mut Vec<u8>,
    req: &RequestHead,
    service: &Service,
    server: &Server,
    client_ip: &str,
    scheme: Scheme,
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
    header(out, b"host", upstream_host(req, service, server).as_bytes());
    let had_length = forwarded_fields(out, req, client_ip, scheme);
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

/// The Host (or `:authority`) the upstream gets: the client's, unless the service says not
/// to pass it (then the server's own `host:port`).
pub(crate) fn upstream_host<'a>(
    req: &'a RequestHead,
    service: &Service,
    server: &'a Server,
) -> &'a str {
    let original_host = req.host();
    if service.pass_host_header && !original_host.is_empty() {
        original_host
    } else {
        server.authority.as_str()
    }
}

/// Where a forwarded request's fields are written: HTTP/1 head bytes, or an HTTP/2 header map.
pub(crate) trait FieldSink {
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// A field whose value `write` builds piece by piece.
    fn field_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>));
}

impl FieldSink for Vec<u8> {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        header(self, name, value);
    }

    fn field_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
        self.extend_from_slice(name);
        self.extend_from_slice(b": ");
        write(self);
        self.extend_from_slice(b"\r\n");
    }
}

/// The client's fields as any upstream gets them, whatever the protocol on either side:
/// hop-by-hop ones and those the `Connection` header names dropped, the forwarding headers
/// set, `te: trailers` kept. Host and framing are the caller's. Returns whether the client
/// sent a `Content-Length` (an HTTP/1 upstream then gets `0` for a request without a body).
pub(crate) fn forwarded_fields(
    out: &mut impl FieldSink,
    req: &RequestHead,
    client_ip: &str,
    scheme: Scheme,
) -> bool {
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
        out.field(name, value);
    }
    out.field_with(b"x-forwarded-for", |out| {
        for previous in req.head.get_all("x-forwarded-for") {
            out.extend_from_slice(previous);
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(client_ip.as_bytes());
    });
    out.field(b"x-forwarded-proto", scheme.as_str().as_bytes());
    let original_host = req.host();
    if !original_host.is_empty() {
        out.field(b"x-forwarded-host", original_host.as_bytes());
    }
    out.field(b"x-real-ip", client_ip.as_bytes());
    if req.te_trailers {
        // TE is hop-by-hop; weir relays trailers, so it asks for them on the client's behalf.
        out.field(b"te", b"trailers");
    }
    had_length
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
