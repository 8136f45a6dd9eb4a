//! A sampled request's client span for each try at a server: its attributes under
//! OpenTelemetry's stable HTTP semantic conventions (client spans), the retry number and
//! whether the try reused a pooled connection.

use crate::http::codec::RequestHead;
use crate::http::trace_context::{decimal, method_name, new_span_id, unix_nanos, TraceContext};
use crate::observe::otlp::{SpanIds, SpanWriter};
use crate::observe::spans::SpanKind;
use crate::reply::{Reply, ReplyHead};
use crate::servers::balancer::{Server, Service};
use crate::upstream::forwarding::Failed;
use crate::worker::Worker;
use weir_config::UpstreamProtocol;

/// Starts timing a try of a sampled request: when it began.
pub(crate) fn start_try(trace: &TraceContext) -> u64 {
    // A try that fails before its head is written has no span id yet.
    trace.try_span_id.set(0);
    trace.try_reused.set(false);
    unix_nanos()
}

/// What a try shows of its server and how it ended.
pub(crate) struct Tried<'a, 'r> {
    pub service: &'a Service,
    pub server: &'a Server,
    /// 0 for the first try, 1 for the first retry...
    pub retry: usize,
    pub started: u64,
    pub result: &'a Result<Reply<'r>, Failed>,
}

/// Records a try's client span, the child of the request's server span.
pub(crate) fn finish_try(worker: &Worker, head: &RequestHead, tried: Tried<'_, '_>) {
    let Some(trace) = &head.trace else { return };
    let span_id = match trace.try_span_id.get() {
        0 => new_span_id(),
        id => id,
    };
    let ids = SpanIds {
        trace_id: trace.trace_id,
        span_id,
        parent_id: trace.span_id,
        tracestate: trace.tracestate.as_deref(),
    };
    worker
        .spans
        .write(ids, SpanKind::Client, tried.started, |span| {
            describe_try(span, trace, head, &tried)
        });
}

/// Names a try's client span and writes its attributes; whether its status is Error.
fn describe_try(
    span: &mut SpanWriter<'_>,
    trace: &TraceContext,
    head: &RequestHead,
    tried: &Tried<'_, '_>,
) -> bool {
    let known_method = method_name(head.method());
    span.name(&[known_method]);
    span.str("http.request.method", known_method);
    // The server's host as its URL names it (`authority` is `host:port`): no formatting.
    let authority = &tried.server.authority;
    let host = authority
        .rsplit_once(':')
        .map_or(authority.as_str(), |(host, _)| host);
    span.str(
        "server.address",
        host.trim_start_matches('[').trim_end_matches(']'),
    );
    span.int("server.port", i64::from(tried.server.addr.port()));
    let base = tried.server.url.trim_end_matches('/');
    span.str_parts("url.full", &[base, head.target()]);
    span.str(
        "network.protocol.version",
        match tried.service.protocol {
            UpstreamProtocol::Http1 => "1.1",
            _ => "2",
        },
    );
    span.bool("weir.upstream.connection_reused", trace.try_reused.get());
    // Set only on a resent request (semantic conventions, `http.request.resend_count`).
    if tried.retry > 0 {
        span.int("http.request.resend_count", tried.retry as i64);
    }
    let error = match tried.result {
        Ok(reply) => {
            let status = match &reply.head {
                ReplyHead::Response(response) => response.status,
                _ => reply.status(),
            };
            span.int("http.response.status_code", i64::from(status));
            // Client spans: 4xx and 5xx are errors.
            (status >= 400).then(|| decimal(status))
        }
        // weir's name for the failure (`UpstreamUnreachable`, `UpstreamTimeout`).
        Err(failed) => Some(format!("{:?}", failed.answer.kind)),
    };
    if let Some(error_type) = &error {
        span.str("error.type", error_type);
    }
    error.is_some()
}
