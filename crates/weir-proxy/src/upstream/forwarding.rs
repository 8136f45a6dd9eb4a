//! What every try at a server shares, whatever protocol it speaks: opening the connection
//! (TCP, then TLS for an https:// server), the request fields the upstream gets (forwarding
//! headers set, hop-by-hop ones dropped), and why a try failed, which decides the retry.

use crate::http::ascii::eq_ignore_case;
use crate::http::codec::{header, is_hop_by_hop, lists_token, RequestHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::http::Scheme;
use crate::io::watch::{ConnWatch, Expired, Waiting};
use crate::reply::client::CLIENT_CLOSED;
use crate::reply::relay::BodyError;
use crate::servers::balancer::{Server, Service};
use crate::servers::pool::UpstreamIo;
use crate::worker::Worker;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

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
    /// The client's answer, unless another try answers it (kept as `Copy` parts, not a
    /// `LocalError`: the retry loop carries the last one across its waits).
    pub(crate) answer: FailedAnswer,
    pub(crate) cause: Cause,
    /// For the error log: what the system said, or the limit that passed (empty when the
    /// message says it all).
    pub(crate) detail: String,
}

/// What a failed try tells the client.
#[derive(Clone, Copy)]
pub(crate) struct FailedAnswer {
    pub(crate) status: u16,
    pub(crate) kind: ErrorKind,
    pub(crate) message: &'static str,
}

impl FailedAnswer {
    pub(crate) fn error(self) -> LocalError {
        LocalError::new(self.status, self.kind, self.message)
    }
}

impl Failed {
    pub(crate) fn new(
        status: u16,
        kind: ErrorKind,
        message: &'static str,
        cause: Cause,
        detail: String,
    ) -> Failed {
        Failed {
            answer: FailedAnswer {
                status,
                kind,
                message,
            },
            cause,
            detail,
        }
    }
}

/// A try whose request body did not get through (the server's side failed or stalled, or the
/// client's body was bad, slow or cut short). Dropping the upstream request mid-body aborts it:
/// the server never sees a request boundary.
pub(crate) fn body_failed(e: BodyError) -> Failed {
    let (status, kind, message, cause) = match e {
        BodyError::Sink => (
            502,
            ErrorKind::UpstreamFailed,
            "upstream closed the connection",
            Cause::Reset,
        ),
        BodyError::SinkStalled => (
            504,
            ErrorKind::UpstreamTimeout,
            "upstream did not take the request in time",
            Cause::Other,
        ),
        BodyError::Source => (
            CLIENT_CLOSED,
            ErrorKind::ClientClosed,
            "client closed the connection",
            Cause::Other,
        ),
        e => {
            let (status, kind, message) = e.client_failure().unwrap_or((
                400,
                ErrorKind::MalformedBody,
                "malformed request body",
            ));
            (status, kind, message, Cause::Other)
        }
    };
    Failed::new(status, kind, message, cause, String::new())
}

/// A wait's limit, cut to what `timeouts.request` (or a gRPC deadline) leaves of the exchange.
pub(crate) fn within(worker: &Worker, until: Option<Instant>, limit: Duration) -> Duration {
    match until {
        Some(until) => limit.min(until.saturating_duration_since(worker.clock.now())),
        None => limit,
    }
}

/// The failures answered before any of the request was written to a server.
pub(crate) const CONNECT_FAILED: &str = "upstream connection failed";
pub(crate) const CONNECT_TIMED_OUT: &str = "upstream connect timed out";
pub(crate) const HANDSHAKE_FAILED: &str = "upstream TLS handshake failed";
pub(crate) const HANDSHAKE_TIMED_OUT: &str = "upstream TLS handshake timed out";
pub(crate) const NO_SERVER: &str = "no server available";

/// Whether weir's own failure answer (its text) says the request never reached a server, so
/// that nothing of it can have been applied. Any other failure may have come after the
/// server took it.
pub(crate) fn never_sent(answer: &[u8]) -> bool {
    let text = answer.strip_suffix(b"\n").unwrap_or(answer);
    [
        CONNECT_FAILED,
        CONNECT_TIMED_OUT,
        HANDSHAKE_FAILED,
        HANDSHAKE_TIMED_OUT,
        NO_SERVER,
    ]
    .iter()
    .any(|m| m.as_bytes() == text)
}

/// Opens a connection to `server`, with TLS for an https:// one (the handshake shares the
/// connect deadline, `limit`).
pub(crate) async fn connect(
    worker: &Worker,
    server: &Server,
    watch: &ConnWatch,
    limit: std::time::Duration,
) -> Result<UpstreamIo, Failed> {
    let fail = |status, message, detail| {
        let kind = ErrorKind::UpstreamUnreachable;
        Err(Failed::new(status, kind, message, Cause::Connect, detail))
    };
    let connecting = TcpStream::connect(server.addr);
    let io = match watch
        .within(&worker.clock, Waiting::Connect, limit, connecting)
        .await
    {
        Ok(Ok(io)) => io,
        Ok(Err(e)) => return fail(502, CONNECT_FAILED, e.to_string()),
        Err(Expired) => return fail(504, CONNECT_TIMED_OUT, format!("after {limit:?}")),
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
        Ok(Err(e)) => fail(502, HANDSHAKE_FAILED, e.to_string()),
        Err(Expired) => fail(504, HANDSHAKE_TIMED_OUT, format!("after {limit:?}")),
    }
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
/// The service's own `authorization`, when it has one, replaces the client's.
pub(crate) fn forwarded_fields(
    out: &mut impl FieldSink,
    req: &RequestHead,
    client_ip: &str,
    scheme: Scheme,
    authorization: Option<&[u8]>,
) -> bool {
    let connection = req
        .connection_names_headers
        .then(|| req.head.get("connection"))
        .flatten();
    let mut had_length = false;
    for (name, value) in req.head.iter() {
        if is_hop_by_hop(name)
            || is_rewritten_request_header(name)
            || (req.has_expect_continue && eq_ignore_case(name, b"expect"))
            || connection.is_some_and(|c| lists_token(c, name))
            || (authorization.is_some() && eq_ignore_case(name, b"authorization"))
        {
            had_length |= eq_ignore_case(name, b"content-length");
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
    if let Some(authorization) = authorization {
        out.field(b"authorization", authorization);
    }
    if req.te_trailers {
        // TE is hop-by-hop; weir relays trailers, so it asks for them on the client's behalf.
        out.field(b"te", b"trailers");
    }
    if let Some(trace) = &req.trace {
        // A traced route's client fields were taken out: each try sends its own span id.
        out.field(b"traceparent", &trace.next_try());
        if let Some(state) = &trace.tracestate {
            out.field(b"tracestate", state);
        }
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
    .any(|h| eq_ignore_case(h, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_before_sending_are_never_sent() {
        assert!(never_sent(b"upstream connection failed\n"));
        assert!(never_sent(NO_SERVER.as_bytes()));
        assert!(never_sent(HANDSHAKE_TIMED_OUT.as_bytes()));
        assert!(!never_sent(b"upstream response timed out\n"));
        assert!(!never_sent(b"invalid or missing upstream response\n"));
        assert!(!never_sent(b""));
    }
}
