//! A sampled request's server span: its attributes under OpenTelemetry's stable HTTP semantic
//! conventions (https://opentelemetry.io/docs/specs/semconv/http/http-spans/), built once the
//! answer is sent and handed to the worker's spans.

use crate::http::ascii::eq_ignore_case;
use crate::http::codec::{Framing, RequestHead};
use crate::http::error::LocalError;
use crate::http::local::LocalResponse;
use crate::http::trace_context::{decimal, method_name, AttrValue, Sampler, TraceContext};
use crate::http::Scheme;
use crate::observe::otlp::{SpanIds, SpanWriter};
use crate::observe::spans::SpanKind;
use crate::reply::client::Outcome;
use crate::reply::{Reply, ReplyHead};
use crate::state::runtime::{Route, RouteAction};
use crate::worker::Worker;

/// What the server span needs of the exchange besides the request.
pub(crate) struct Served<'a> {
    pub route: Option<&'a Route>,
    /// The client's address as text.
    pub client: &'a str,
    pub scheme: Scheme,
    /// The request came over HTTP/3.
    pub http3: bool,
    pub outcome: &'a Outcome,
}

/// Starts `head`'s trace on a route that `sampler` samples, taking the client's trace fields
/// out of the request: every try writes weir's own. A request without trace fields that is
/// not sampled gets no trace (see `Sampler::start_root`).
pub(crate) fn start(sampler: &Sampler, head: &mut RequestHead) {
    // One pass over the fields: most requests carry neither.
    let has_fields = head.head.iter().any(|(name, _)| {
        eq_ignore_case(name, b"traceparent") || eq_ignore_case(name, b"tracestate")
    });
    let context = if has_fields {
        let fields = &head.head;
        let context = sampler.start(fields.get_all("traceparent"), fields.get_all("tracestate"));
        head.head.remove("traceparent");
        head.head.remove("tracestate");
        Some(context)
    } else {
        sampler.start_root()
    };
    head.trace = context.map(Box::new);
}

/// Records the server span of `head`'s request, if it is sampled.
pub(crate) fn finish_server_span(worker: &Worker, head: &mut RequestHead, served: Served<'_>) {
    let Some(trace) = head.trace.take().filter(|t| t.sampled()) else {
        return;
    };
    let ids = SpanIds {
        trace_id: trace.trace_id,
        span_id: trace.span_id,
        parent_id: trace.parent_id.unwrap_or(0),
        tracestate: trace.tracestate.as_deref(),
    };
    let start = trace.start_unix_nano;
    worker.spans.write(ids, SpanKind::Server, start, |span| {
        describe_server_span(span, &trace, head, served)
    });
}

/// Names the server span and writes its attributes and events; whether its status is Error.
fn describe_server_span(
    span: &mut SpanWriter<'_>,
    trace: &TraceContext,
    head: &RequestHead,
    served: Served<'_>,
) -> bool {
    let Served {
        route,
        client,
        scheme,
        http3,
        outcome,
    } = served;
    let method = method_name(head.method());
    match route {
        Some(route) => span.name(&[method, " ", &route.name]),
        None => span.name(&[method]),
    }
    span.str("http.request.method", method);
    span.str("url.path", head.path());
    span.str("url.scheme", scheme.as_str());
    span.str("client.address", client);
    span.str(
        "network.protocol.version",
        match (head.http2, head.minor_version) {
            _ if http3 => "3",
            (true, _) => "2",
            (false, 0) => "1.0",
            (false, _) => "1.1",
        },
    );
    span.int("http.response.status_code", i64::from(outcome.status));
    span.int("http.response.body.size", outcome.bytes as i64);
    if let Some(route) = route {
        span.str("http.route", &route.name);
    }
    let host = head.host();
    if !host.is_empty() {
        let (address, port) = split_host_port(host);
        span.str("server.address", address);
        let port = port.unwrap_or(match scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        });
        span.int("server.port", i64::from(port));
    }
    if let Framing::Length(n) = head.framing {
        span.int("http.request.body.size", n as i64);
    }
    if let Some(agent) = head.head.get("user-agent") {
        span.str("user_agent.original", &String::from_utf8_lossy(agent));
    }
    span.attributes(&trace.attributes.borrow());
    // Server spans: 5xx is an error, 4xx is the client's (semantic conventions, "Status").
    let error = outcome.status >= 500;
    if error {
        span.str("error.type", &decimal(outcome.status));
    }
    span.events(&trace.events.borrow());
    error
}

/// What the answer tells the server span before it is sent: a middleware's refusal (the one
/// at `wrapped_by` answered with an error status), a cached route's lookup result (its
/// `Cache-Status`) and a gRPC answer's status when its head carries it (weir's own errors and
/// trailers-only answers).
pub(crate) fn note_reply(
    trace: &TraceContext,
    route: Option<&Route>,
    head: &RequestHead,
    reply: &Reply<'_>,
    wrapped_by: usize,
) {
    if !trace.sampled() {
        return;
    }
    let refused_by = route.and_then(|r| r.filter_names.get(wrapped_by));
    if let Some(filter) = refused_by.filter(|_| reply.status() >= 400) {
        trace.event("weir.middleware.refused", || {
            vec![
                ("weir.middleware", AttrValue::Str(filter.clone())),
                (
                    "http.response.status_code",
                    AttrValue::Int(i64::from(reply.status())),
                ),
            ]
        });
    }
    if route.is_some_and(|r| matches!(r.action, RouteAction::Cached(..))) {
        if let Some(status) = reply_header(reply, "cache-status") {
            trace.event("weir.cache.lookup", || {
                vec![("weir.cache.status", AttrValue::Str(status))]
            });
        }
    }
    if crate::http::grpc::is_grpc(head) {
        if let Some(status) = reply_header(reply, "grpc-status") {
            trace.note_grpc_status(status.as_bytes());
        }
    }
}

/// A header of the reply's head, as text.
fn reply_header(reply: &Reply<'_>, name: &str) -> Option<String> {
    let local = |local: &LocalResponse| {
        local
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    match &reply.head {
        ReplyHead::Local(l) => local(l),
        ReplyHead::Shared(l) => local(l),
        ReplyHead::Response(r) => r
            .head
            .get(name)
            .map(|v| String::from_utf8_lossy(v).into_owned()),
        ReplyHead::Error(_) => None,
    }
}

/// Notes weir's own error on the server span (rendered once, on the cold path).
pub(crate) fn note_error(head: &RequestHead, error: &LocalError) {
    if let Some(trace) = &head.trace {
        trace.event("weir.error", || {
            vec![
                ("error.type", AttrValue::Str(format!("{:?}", error.kind))),
                (
                    "http.response.status_code",
                    AttrValue::Int(i64::from(error.status)),
                ),
                (
                    "weir.error.message",
                    AttrValue::Str(error.message.trim_end().to_string()),
                ),
            ]
        });
    }
}

/// `host[:port]` (an IPv6 literal in brackets) split into host and port.
fn split_host_port(host: &str) -> (&str, Option<u16>) {
    let port_at = match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => i,
        _ => return (host.trim_start_matches('[').trim_end_matches(']'), None),
    };
    let address = host[..port_at]
        .trim_start_matches('[')
        .trim_end_matches(']');
    (address, host[port_at + 1..].parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_split_into_address_and_port() {
        assert_eq!(split_host_port("example.com"), ("example.com", None));
        assert_eq!(
            split_host_port("example.com:8080"),
            ("example.com", Some(8080))
        );
        assert_eq!(split_host_port("[::1]:443"), ("::1", Some(443)));
        assert_eq!(split_host_port("[::1]"), ("::1", None));
    }
}
