//! The `service` action: pick a server, take a pooled keep-alive connection (or connect),
//! write the request head and relay the client's body from its source
//! ([`BodySource`](crate::reply::request_body::BodySource)), read the response head, and
//! return it as a [`Reply`] whose body is still on the upstream connection: the driver relays
//! it and `finish` pools the connection. Failures become local replies (502, 503, 504).

pub mod detached;
pub mod forwarding;
pub mod h2;
mod trace;

use crate::http::codec::{self, header, push_decimal, Framing, RequestHead, ResponseHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::http::{grpc, Scheme};
use crate::io::buffers::make_room;
use crate::io::watch::{Expired, Waiting};
use crate::reply::client::ClientSide;
use crate::reply::relay::{BodyError, Relay};
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::servers::balancer::{FailureNote, PickInput, Server, Service, TryNote, UpstreamUse};
use crate::servers::pool::UpstreamConn;
use crate::worker::Worker;
use forwarding::{connect, forwarded_fields, upstream_host, Cause, Failed};
use tokio::io::AsyncReadExt;
use weir_config::{RetryOn, UpstreamProtocol};

/// A local error answer that names the server it concerns (for the access log).
fn failure<'r>(error: LocalError, upstream: Option<UpstreamUse<'r>>) -> Reply<'r> {
    Reply {
        upstream,
        ..Reply::error(error)
    }
}

/// Runs the `service` action for one request: a server from the balancer (skipping those down
/// or ejected), and with `retry`, another server after a failure the settings name, as long as
/// the request may be sent again (nothing of it consumed, or idempotent without a body).
/// `prefer` (a server's index in the service) is tried first when it is usable.
pub(crate) async fn forward<'r, C: ClientSide>(
    worker: &Worker,
    service: &'r Service,
    client: &mut C,
    head: &RequestHead,
    mut prefer: Option<usize>,
) -> Reply<'r> {
    let pick = PickInput {
        client_ip: client.ip(),
        path: head.path(),
        headers: &head.head,
    };
    // A reused connection can turn out dead after the request went out; only a request that
    // may be repeated is then sent again.
    let may_resend = client.may_resend(head);
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
    // The last try's failure and its server: the answer when no other server is left to
    // retry on (boxed: only retries pay for it, and the future's drop stays a null check).
    let mut last_failure: Option<Box<(Failed, &'r Server)>> = None;
    loop {
        // Only the first try goes to the preferred server.
        let preferred = prefer
            .take()
            .and_then(|i| service.servers.get(i))
            .filter(|s| s.health.usable());
        let Some(server) = preferred.or_else(|| service.pick_avoiding(worker.id, &pick, &tried))
        else {
            return match last_failure {
                Some(last) => {
                    let (failed, server) = *last;
                    failed_on(service, server, failed, tried.len())
                }
                None => failure(
                    LocalError::new(503, ErrorKind::NoServer, forwarding::NO_SERVER),
                    None,
                ),
            };
        };
        let used = UpstreamUse::new(server, service);
        let try_started = head
            .trace
            .as_ref()
            .filter(|t| t.sampled())
            .map(|t| trace::start_try(t));
        let tried_server = match service.protocol {
            UpstreamProtocol::Http1 => {
                try_server(worker, service, server, client, head, may_resend, until).await
            }
            // Boxed: HTTP/2 tries are rarer, and their state is larger.
            _ => Box::pin(h2::try_server(worker, service, server, client, head, until)).await,
        };
        if let Some(started) = try_started {
            let result = &tried_server;
            let retry = tried.len();
            let tried = trace::Tried {
                service,
                server,
                retry,
                started,
                result,
            };
            trace::finish_try(worker, head, tried);
        }
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
                    let mut used = used;
                    if !tried.is_empty() {
                        let tries = tried.len() + 1;
                        let note = TryNote {
                            failure: None,
                            tries,
                            status,
                        };
                        used.note = Some(Box::new(note));
                    }
                    reply.upstream = Some(used);
                    return reply;
                }
                // Retried: this answer's body is never read, so its connection is dropped.
                let message = "upstream answered with an error";
                let kind = ErrorKind::UpstreamStatus;
                Failed::new(status, kind, message, Cause::Status, String::new())
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
            crate::log_debug!(
                "service `{}`: server {}: try {}: {}{}; retrying",
                service.name,
                server.url,
                tried.len(),
                failed.answer.message,
                Parenthesized(&failed.detail)
            );
            last_failure = Some(Box::new((failed, server)));
            budget.spend();
            service.cells[worker.id].retries.add(1);
            continue;
        }
        drop(used);
        return failed_on(service, server, failed, tried.len() + 1);
    }
}

/// ` (detail)`, or nothing for an empty detail.
pub(crate) struct Parenthesized<'a>(pub &'a str);

impl std::fmt::Display for Parenthesized<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            "" => Ok(()),
            detail => write!(f, " ({detail})"),
        }
    }
}

/// The answer to a request whose last try (number `tries`, on `server`) failed: a 502 or 504
/// carries its note, so `finish` logs which server failed and why, retried or not.
fn failed_on<'r>(
    service: &'r Service,
    server: &'r Server,
    failed: Failed,
    tries: usize,
) -> Reply<'r> {
    let mut used = UpstreamUse::new(server, service);
    let why = matches!(failed.answer.status, 502 | 504).then(|| FailureNote {
        message: failed.answer.message,
        detail: failed.detail,
    });
    // A retried status with no server left to retry on: the server did answer.
    let answered = failed.cause == Cause::Status;
    let status = if answered { failed.answer.status } else { 0 };
    used.note = Some(Box::new(TryNote {
        failure: why,
        tries,
        status,
    }));
    failure(failed.answer.error(), Some(used))
}

/// `retry.budget` in one worker: a bucket of retries, ten when full, refilled by `budget` of a
/// retry per request; a retry takes one. Kept as a debt in thousandths (0 = full) in the
/// service's cells, so it starts full and carries over reloads.
struct RetryBudget<'s> {
    debt: Option<&'s crate::observe::metrics::Cell>,
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
            crate::log_warn!(
                "service `{}`: server {} ejected for {:?} after {} failures",
                service.name,
                server.url,
                policy.eject,
                policy.max_failures
            );
        }
    }
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
    let within = |limit| forwarding::within(worker, until, limit);
    loop {
        let mut up = match worker.pool.checkout(server.id) {
            Some(conn) => conn,
            None => {
                // Boxed: connecting is rare with pooling, and its future is large.
                let limit = within(service.connect_timeout);
                UpstreamConn::new(Box::pin(connect(worker, server, client.watch(), limit)).await?)
            }
        };
        // The head, then the body re-framed as the head declares; a small body goes out in
        // the same write as the head.
        let outgoing = client.outgoing(head);
        outgoing.out.clear();
        let (ip_text, scheme) = (outgoing.ip_text, outgoing.scheme);
        write_upstream_head(outgoing.out, head, service, server, ip_text, scheme);
        if let Some(trace) = &head.trace {
            trace.try_reused.set(up.reused);
        }
        let relay = Relay::to_upstream(worker, outgoing.watch, service.write_timeout);
        let chunked = head.framing == Framing::Chunked;
        let relaying = outgoing
            .body
            .relay(&mut up.io, outgoing.out, chunked, &relay);
        let sent = relaying.await;
        let mut detail = String::new();
        let (status, kind, message, cause) = match sent {
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
                    Ok(Err(e)) => {
                        let cause = match e {
                            ResponseError::ClosedEarly => Cause::Reset,
                            _ => Cause::Other,
                        };
                        let message = "invalid or missing upstream response";
                        (502, ErrorKind::UpstreamFailed, message, cause)
                    }
                    Err(Expired) => {
                        detail = format!("no response head within {limit:?}");
                        let message = "upstream response timed out";
                        (504, ErrorKind::UpstreamTimeout, message, Cause::Timeout)
                    }
                }
            }
            Err(BodyError::Sink) if up.reused && may_resend => continue,
            Err(e) => return Err(forwarding::body_failed(e)),
        };
        return Err(Failed::new(status, kind, message, cause, detail));
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
    let had_length = forwarded_fields(
        out,
        req,
        client_ip,
        scheme,
        service.authorization.as_deref(),
    );
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
