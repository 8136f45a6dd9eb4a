//! One request's lifecycle once its head is read, whatever the protocol driver: route, request
//! filters, action (which returns a [`Reply`]), response-head filters, then the driver writes
//! the reply (the response-body phase), and `finish` checks the upstream connection back into
//! the pool and writes the access-log line.

pub mod grpc;
pub mod plan;

use crate::actions::{cache, elasticsearch, static_files};
use crate::http::codec::RequestHead;
use crate::http::local::LocalResponse;
use crate::middlewares::Flow;
use crate::observe::accesslog;
use crate::reply::client::{ClientConn, ClientSide, Outcome, Sent};
use crate::reply::Reply;
use crate::servers::balancer::UpstreamUse;
use crate::state::runtime::{ErrorForm, Route, RouteAction, Runtime};
use crate::upstream;
use crate::worker::Worker;
use std::borrow::Cow;
use std::rc::Rc;
use std::sync::LazyLock;
use std::time::Instant;

static NO_ROUTE: LazyLock<LocalResponse> =
    LazyLock::new(|| LocalResponse::text(404, "no route matches this request"));

static ENTRYPOINT_REMOVED: LazyLock<LocalResponse> = LazyLock::new(|| {
    LocalResponse::text(503, "this entrypoint was removed by a configuration reload")
});

/// Runs one exchange on a client connection.
pub(crate) async fn exchange<C: ClientConn>(
    worker: &Rc<Worker>,
    runtime: &Runtime,
    entrypoint: usize,
    client: &mut C,
    mut head: RequestHead,
) -> Outcome {
    // Read the clock only when a log line or the metrics will use it.
    let started = (runtime.metrics || runtime.access_log.is_some()).then(Instant::now);
    // route (a keep-alive connection may outlive its entrypoint: see `conn/h1.rs`)
    let ep = runtime.entrypoint(entrypoint);
    let route = ep.and_then(|ep| ep.router.route_request(&head, client.ip()));
    // The original request line, kept only when a log line will need it.
    // With whether it is sampled in (answers of 500 and above are logged anyway).
    let logged = runtime.access_log.as_ref().map(|log| {
        let header = |name| {
            head.head
                .get(name)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        // Boxed: the exchange's state stays as small as without a log.
        let line = Box::new(accesslog::RequestLine {
            method: head.method().to_string(),
            host: head.host().to_string(),
            target: head.target().to_string(),
            version: match (head.http2, head.minor_version) {
                (true, _) => "HTTP/2.0",
                (false, 0) => "HTTP/1.0",
                (false, _) => "HTTP/1.1",
            },
            referer: header("referer"),
            user_agent: header("user-agent"),
        });
        (line, log.samples())
    });
    // request filters, then the action
    let mut reply = match route {
        None if ep.is_none() => Reply::local(Cow::Borrowed(&*ENTRYPOINT_REMOVED)),
        None => Reply::local(Cow::Borrowed(&*NO_ROUTE)),
        Some(route) => run_route(worker, route, client, &mut head).await,
    };
    grpc::local_errors_in_grpc_form(&head, &mut reply);
    if route.is_some_and(|r| r.error_form == ErrorForm::Elasticsearch) {
        elasticsearch::local_errors_in_es_form(&mut reply);
    }
    // response-head filters, on local and proxied replies alike; one may install a body filter
    if let Some(route) = route.filter(|r| r.has_response_phase) {
        let mut body_filter = None;
        reply.edit_head(|response| {
            for filter in &route.filters {
                if let Some(installed) = filter.on_response_head(&head, response) {
                    body_filter = Some(installed);
                }
            }
        });
        reply.body_filter = body_filter;
    }
    // response body: the driver writes the reply, through the body filter if one was installed
    let sent = client.send_reply(worker, &head, reply).await;
    let outcome = finish(
        worker,
        runtime,
        route.map(|r| &**r),
        client.ip(),
        logged,
        started,
        sent,
    );
    if let Some(ep) = ep {
        ep.cells[worker.id].responded(outcome.status);
    }
    if let (Some(route), Some(started), true) = (route, started, runtime.metrics) {
        let took = started.elapsed();
        route.cells[worker.id].record(outcome.status, took);
        if let Some(service) = route.action.service() {
            service.cells[worker.id]
                .traffic
                .record(outcome.status, took);
        }
    }
    outcome
}

async fn run_route<'r, C: ClientSide>(
    worker: &Rc<Worker>,
    route: &'r Route,
    client: &mut C,
    head: &mut RequestHead,
) -> Reply<'r> {
    for filter in &route.filters {
        if let Flow::Respond(response) = filter.on_request(head, client.scheme().as_str()).await {
            return Reply::local(Cow::Owned(response));
        }
    }
    match &route.action {
        RouteAction::Respond(r) | RouteAction::Redirect(r) => Reply::local(Cow::Borrowed(r)),
        RouteAction::Proxy(service) => upstream::forward(worker, service, client, head, None).await,
        RouteAction::Elasticsearch(es) => {
            let service = &es.service;
            if elasticsearch::has_own_action(es, head) {
                // Boxed: its state is large, and other requests need not carry it.
                Box::pin(elasticsearch::serve(worker, service, es, client, head)).await
            } else {
                upstream::forward(worker, service, client, head, None).await
            }
        }
        // Boxed: a cache's state is large, and routes without one need not carry it.
        RouteAction::Cached(service, cache) => {
            Box::pin(cache::serve(worker, cache, service, client, head)).await
        }
        RouteAction::Static(site) => {
            static_files::serve(site, &worker.open_files, worker.clock.now(), head)
        }
    }
}

/// The error log's line for a 502 or 504: which router, service and server, which try, and
/// why (`connect refused`, `no response head within 5s`).
fn log_failure(route: Option<&Route>, used: &UpstreamUse<'_>) {
    let Some(note) = &used.failure else {
        return;
    };
    let detail = if note.detail.is_empty() {
        String::new()
    } else {
        format!(" ({})", note.detail)
    };
    crate::log_line!(
        "weir: router `{}`: service `{}`: server {}: try {}: {}{detail}",
        route.map_or("", |r| r.name.as_str()),
        used.service.name,
        used.server.url,
        note.tries,
        note.message,
    );
}

/// Phase finish: the upstream connection goes back to the pool when its response was read
/// completely, the server leaves the in-flight count, and the access log gets its line.
fn finish(
    worker: &Worker,
    runtime: &Runtime,
    route: Option<&Route>,
    client: std::net::IpAddr,
    logged: Option<(Box<accesslog::RequestLine>, bool)>,
    started: Option<Instant>,
    sent: Sent<'_>,
) -> Outcome {
    let Sent {
        outcome,
        reusable,
        upstream,
    } = sent;
    if let (Some(conn), Some(used)) = (reusable, &upstream) {
        used.check_in(&worker.pool, conn);
    }
    if let Some(used) = upstream.as_ref().filter(|u| u.failure.is_some()) {
        log_failure(route, used);
    }
    let logged = logged.filter(|(_, sampled)| *sampled || outcome.status >= 500);
    if let (Some(log), Some((request, _)), Some(started)) = (&runtime.access_log, logged, started) {
        let upstream = upstream
            .as_ref()
            .map(|u| u.server.addr.to_string())
            .unwrap_or_default();
        let entry = accesslog::Entry {
            client,
            request: &request,
            status: outcome.status,
            bytes: outcome.bytes,
            duration: started.elapsed(),
            router: route.map(|r| r.name.as_str()).unwrap_or(""),
            upstream: &upstream,
        };
        log.record(&entry, &worker.log_lines);
    }
    outcome
}
