//! A sampled request's client span for each try at a server: its attributes under
//! OpenTelemetry's stable HTTP semantic conventions (client spans), the retry number and
//! whether the try reused a pooled connection.

use crate::http::codec::RequestHead;
use crate::http::trace_context::{
    decimal, method_name, new_span_id, unix_nanos, AttrValue, TraceContext,
};
use crate::observe::spans::{SpanKind, SpanRecord};
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
    let method = head.method();
    let known_method = method_name(method);
    let str = |s: &str| AttrValue::Str(s.to_string());
    // The server's host as its URL names it (`authority` is `host:port`): no formatting.
    let authority = &tried.server.authority;
    let host = authority
        .rsplit_once(':')
        .map_or(authority.as_str(), |(host, _)| host);
    let base = tried.server.url.trim_end_matches('/');
    let mut url = String::with_capacity(base.len() + head.target().len());
    url.push_str(base);
    url.push_str(head.target());
    let mut attributes = Vec::with_capacity(10);
    attributes.extend([
        ("http.request.method", AttrValue::Static(known_method)),
        (
            "server.address",
            str(host.trim_start_matches('[').trim_end_matches(']')),
        ),
        (
            "server.port",
            AttrValue::Int(i64::from(tried.server.addr.port())),
        ),
        ("url.full", AttrValue::Str(url)),
        (
            "network.protocol.version",
            AttrValue::Static(match tried.service.protocol {
                UpstreamProtocol::Http1 => "1.1",
                _ => "2",
            }),
        ),
        (
            "weir.upstream.connection_reused",
            AttrValue::Bool(trace.try_reused.get()),
        ),
    ]);
    // Set only on a resent request (semantic conventions, `http.request.resend_count`).
    if tried.retry > 0 {
        attributes.push((
            "http.request.resend_count",
            AttrValue::Int(tried.retry as i64),
        ));
    }
    let error = match tried.result {
        Ok(reply) => {
            let status = match &reply.head {
                ReplyHead::Response(response) => response.status,
                _ => reply.status(),
            };
            attributes.push((
                "http.response.status_code",
                AttrValue::Int(i64::from(status)),
            ));
            // Client spans: 4xx and 5xx are errors.
            (status >= 400).then(|| decimal(status))
        }
        // weir's name for the failure (`UpstreamUnreachable`, `UpstreamTimeout`).
        Err(failed) => Some(format!("{:?}", failed.answer.kind)),
    };
    if let Some(error_type) = &error {
        attributes.push(("error.type", str(error_type)));
    }
    let span_id = match trace.try_span_id.get() {
        0 => new_span_id(),
        id => id,
    };
    worker.spans.record(SpanRecord {
        trace_id: trace.trace_id,
        span_id,
        parent_id: trace.span_id,
        tracestate: trace.tracestate.clone(),
        name: known_method.to_string(),
        kind: SpanKind::Client,
        start_unix_nano: tried.started,
        end_unix_nano: unix_nanos(),
        attributes,
        events: Vec::new(),
        error: error.is_some(),
    });
}
