//! `buffering` (Traefik's, vulcand/oxy's buffer): the request body read whole before anything
//! goes upstream (413 over `max_request_body_bytes`, by its declared length before reading
//! it), sent with its length, and again on a retry `retry_expression` asks for; the answer's
//! body read whole before the client gets its head (500 over `max_response_body_bytes`). The
//! exchange runs it at the filter's place in the route (`exchange::run_buffered`): only routes
//! with the middleware pay for it.

use crate::actions::whole_body::Reader;
use crate::http::codec::{Framing, RequestHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::io::watch::ConnWatch;
use crate::reply::client::ClientSide;
use crate::reply::relay::BodyError;
use crate::reply::request_body::{BodySource, Outgoing};
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::worker::Worker;
use bytes::Bytes;
use std::net::IpAddr;
use std::time::Duration;
use weir_config::{Buffering, Comparison, RetryExpression, RetryValue};

/// oxy's bound on the retries an expression may ask for (`DefaultMaxRetryAttempts`: a try
/// numbered above it is never retried).
const MAX_RETRIES: u32 = 10;

/// Reads the request body whole when a limit applies (`None`: no body, or streamed as it
/// comes); the head then declares its length. Over the limit: 413, by a declared length
/// before anything is read (no `100 Continue` is sent).
pub(crate) async fn read_request<C: ClientSide>(
    config: &Buffering,
    worker: &Worker,
    client: &mut C,
    head: &mut RequestHead,
) -> Result<Option<Bytes>, LocalError> {
    let max = config.max_request_body_bytes;
    // Without a limit the body streams as it comes: weir does not spill to a file, and
    // holding an unbounded body in memory is no buffering.
    if max == 0 || head.framing == Framing::None {
        return Ok(None);
    }
    if matches!(head.framing, Framing::Length(n) if n > max) {
        client.abandon_body();
        return Err(too_large());
    }
    match client.read_body(worker, head, max).await {
        Ok(body) => {
            head.framing = Framing::Length(body.len() as u64);
            Ok(Some(body))
        }
        Err(BodyError::TooLarge) => Err(too_large()),
        Err(failed) => Err(failed.client_answer().unwrap_or_else(|| {
            LocalError::new(
                400,
                ErrorKind::MalformedBody,
                "the request body did not arrive",
            )
        })),
    }
}

/// oxy's answer to a body over the limit: 413 and its status text.
fn too_large() -> LocalError {
    LocalError::new(413, ErrorKind::PolicyRefused, "Request Entity Too Large")
}

/// `reply` with its body read whole when `max_response_body_bytes` is set: sent with its
/// length; over the limit, a 500 instead (as oxy's buffer answers a body it could not hold).
pub(crate) async fn read_response<'r>(
    config: &Buffering,
    worker: &Worker,
    watch: &ConnWatch,
    req: &RequestHead,
    reply: Reply<'r>,
) -> Reply<'r> {
    let max = config.max_response_body_bytes;
    // No body to hold (oxy's `expectBody`).
    let status = reply.status();
    if max == 0 || req.is_head() || status < 200 || status == 204 || status == 304 {
        return reply;
    }
    let Reply {
        head,
        body,
        upstream,
        body_filter,
    } = reply;
    let mut response = match head {
        ReplyHead::Response(response) => response,
        head => {
            let length = match (&head, &body) {
                (_, ReplyBody::File(file)) => file.len,
                (_, ReplyBody::Bytes(bytes)) => bytes.len() as u64,
                (ReplyHead::Local(local), _) => local.body.len() as u64,
                (ReplyHead::Shared(local), _) => local.body.len() as u64,
                _ => 0,
            };
            if length > max {
                return over_limit(upstream);
            }
            return Reply {
                head,
                body,
                upstream,
                body_filter,
            };
        }
    };
    let body = match body {
        ReplyBody::Stream(stream) if !matches!(response.framing, Framing::Length(_)) => {
            match read_h2_whole(worker, watch, &upstream, stream, max).await {
                Ok(bytes) => bytes,
                Err(error) => return failed(error, upstream),
            }
        }
        body @ (ReplyBody::Upstream(_) | ReplyBody::Stream(_)) => {
            let reader = Reader {
                worker,
                watch,
                read_timeout: read_timeout(&upstream),
                max,
            };
            match reader.reply_body(&response, body, &upstream).await {
                Ok(bytes) => bytes,
                Err(Some(_)) => return over_limit(upstream),
                Err(None) => return failed(upstream_broke(), upstream),
            }
        }
        ReplyBody::Bytes(bytes) if bytes.len() as u64 > max => return over_limit(upstream),
        other => {
            return Reply {
                head: ReplyHead::Response(response),
                body: other,
                upstream,
                body_filter,
            }
        }
    };
    if response.framing != Framing::None {
        response.framing = Framing::Length(body.len() as u64);
    }
    Reply {
        head: ReplyHead::Response(response),
        body: ReplyBody::Bytes(body),
        upstream,
        body_filter,
    }
}

fn read_timeout(upstream: &Option<crate::servers::balancer::UpstreamUse<'_>>) -> Duration {
    upstream
        .as_ref()
        .map_or(Duration::from_secs(60), |u| u.service.read_timeout)
}

/// An HTTP/2 answer of undeclared length, read whole up to `max`.
async fn read_h2_whole(
    worker: &Worker,
    watch: &ConnWatch,
    upstream: &Option<crate::servers::balancer::UpstreamUse<'_>>,
    mut stream: crate::servers::h2_pool::H2Body,
    max: u64,
) -> Result<Bytes, LocalError> {
    let mut body = bytes::BytesMut::new();
    loop {
        let data = stream.recv.data();
        let waited = watch.within(
            &worker.clock,
            crate::io::watch::Waiting::ResponseBody,
            read_timeout(upstream),
            data,
        );
        match waited.await {
            Ok(Some(Ok(chunk))) => {
                let _ = stream.recv.flow_control().release_capacity(chunk.len());
                if (body.len() + chunk.len()) as u64 > max {
                    return Err(internal_error());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body.freeze()),
            _ => return Err(upstream_broke()),
        }
    }
}

fn internal_error() -> LocalError {
    LocalError::new(500, ErrorKind::PolicyRefused, "Internal Server Error")
}

fn upstream_broke() -> LocalError {
    LocalError::new(
        502,
        ErrorKind::UpstreamFailed,
        "the server's answer broke off before its end",
    )
}

fn over_limit(upstream: Option<crate::servers::balancer::UpstreamUse<'_>>) -> Reply<'_> {
    failed(internal_error(), upstream)
}

fn failed(
    error: LocalError,
    upstream: Option<crate::servers::balancer::UpstreamUse<'_>>,
) -> Reply<'_> {
    Reply {
        upstream,
        ..Reply::error(error)
    }
}

/// Whether `retry_expression` asks for another try after try number `attempt` was answered
/// with `status` (oxy retries ten times at most whatever it says).
pub(crate) fn retries(config: &Buffering, attempt: u32, status: u16, method: &str) -> bool {
    let Some(expression) = &config.retry_expression else {
        return false;
    };
    attempt <= MAX_RETRIES && holds(expression, attempt, status, method)
}

fn holds(expression: &RetryExpression, attempt: u32, status: u16, method: &str) -> bool {
    match expression {
        RetryExpression::And(a, b) => {
            holds(a, attempt, status, method) && holds(b, attempt, status, method)
        }
        RetryExpression::Or(a, b) => {
            holds(a, attempt, status, method) || holds(b, attempt, status, method)
        }
        // oxy counts a 502 or a 504 as a network error.
        RetryExpression::IsNetworkError => matches!(status, 502 | 504),
        RetryExpression::Compare(value, comparison, constant) => {
            let (left, right) = match (value, constant) {
                (RetryValue::RequestMethod, RetryValue::Text(text)) => {
                    let equal = method == text;
                    return match comparison {
                        Comparison::Ne => !equal,
                        _ => equal,
                    };
                }
                (RetryValue::Attempts, RetryValue::Number(n)) => (i64::from(attempt), *n),
                (RetryValue::ResponseCode, RetryValue::Number(n)) => (i64::from(status), *n),
                // The loader builds no other pair.
                _ => return false,
            };
            match comparison {
                Comparison::Eq => left == right,
                Comparison::Ne => left != right,
                Comparison::Lt => left < right,
                Comparison::Gt => left > right,
                Comparison::Le => left <= right,
                Comparison::Ge => left >= right,
            }
        }
    }
}

/// A client whose request body was read into memory: the upstream side sends it from there,
/// and may send it again.
pub(crate) struct Buffered<'c, C> {
    client: &'c mut C,
    body: Option<Bytes>,
}

impl<'c, C: ClientSide> Buffered<'c, C> {
    pub(crate) fn new(client: &'c mut C, body: Option<Bytes>) -> Self {
        Buffered { client, body }
    }

    /// Whether `req` can be sent again: it has no body, or its body is in memory (one
    /// streamed from the client is gone once sent).
    pub(crate) fn replayable(&self, req: &RequestHead) -> bool {
        self.body.is_some() || req.framing == Framing::None
    }
}

impl<C: ClientSide> ClientSide for Buffered<'_, C> {
    type BodyIo = C::BodyIo;

    fn ip(&self) -> IpAddr {
        self.client.ip()
    }

    fn ip_text(&self) -> &str {
        self.client.ip_text()
    }

    fn scheme(&self) -> crate::http::Scheme {
        self.client.scheme()
    }

    fn watch(&self) -> &ConnWatch {
        self.client.watch()
    }

    fn outgoing(&mut self, req: &RequestHead) -> Outgoing<'_, Self::BodyIo> {
        let mut outgoing = self.client.outgoing(req);
        if let Some(body) = &self.body {
            outgoing.body = if body.is_empty() {
                BodySource::None
            } else {
                BodySource::Bytes(body.clone())
            };
        }
        outgoing
    }

    fn abandon_body(&mut self) {
        self.client.abandon_body();
    }

    fn may_resend(&self, req: &RequestHead) -> bool {
        match self.body {
            Some(_) => req.is_idempotent(),
            None => self.client.may_resend(req),
        }
    }

    async fn read_body(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        max: u64,
    ) -> Result<Bytes, BodyError> {
        match &self.body {
            Some(body) if body.len() as u64 > max => Err(BodyError::TooLarge),
            Some(body) => Ok(body.clone()),
            None => self.client.read_body(worker, req, max).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(expression: RetryExpression) -> Buffering {
        Buffering {
            max_request_body_bytes: 0,
            mem_request_body_bytes: 0,
            max_response_body_bytes: 0,
            mem_response_body_bytes: 0,
            retry_expression: Some(expression),
        }
    }

    #[test]
    fn retry_expressions_as_oxy_judges_them() {
        use RetryExpression::*;
        // `IsNetworkError() && Attempts() <= 2`, oxy's retry_test.go.
        let network = config(And(
            Box::new(IsNetworkError),
            Box::new(Compare(
                RetryValue::Attempts,
                Comparison::Le,
                RetryValue::Number(2),
            )),
        ));
        assert!(retries(&network, 1, 502, "GET"));
        assert!(retries(&network, 2, 504, "GET"));
        assert!(!retries(&network, 3, 502, "GET"));
        assert!(!retries(&network, 1, 503, "GET"));
        assert!(!retries(&network, 1, 200, "GET"));
        let method = config(Compare(
            RetryValue::RequestMethod,
            Comparison::Ne,
            RetryValue::Text("POST".into()),
        ));
        assert!(retries(&method, 1, 200, "GET") && !retries(&method, 1, 200, "POST"));
        // Ten retries at most, whatever the expression says.
        let always = config(Compare(
            RetryValue::ResponseCode,
            Comparison::Ge,
            RetryValue::Number(0),
        ));
        assert!(retries(&always, 10, 200, "GET") && !retries(&always, 11, 200, "GET"));
    }
}
