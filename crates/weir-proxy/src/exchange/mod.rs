//! One request's lifecycle once its head is read, whatever the protocol driver: route, request
//! filters, action (which returns a [`Reply`]), response-head filters, then the driver writes
//! the reply (the response-body phase), and `finish` checks the upstream connection back into
//! the pool and writes the access-log line.

mod acme;
pub mod grpc;
pub mod plan;
pub mod request_id;
mod trace;

use crate::actions::{cache, elasticsearch, static_files};
use crate::http::codec::RequestHead;
use crate::http::error::{ErrorKind, LocalError, PrebuiltError};
use crate::http::local::LocalResponse;
use crate::middlewares::buffering::{self, Buffered, HeldBody};
use crate::middlewares::{answer_error_pages, grpc_web, AuthCookies, Flow, Held, LetThrough};
use crate::observe::accesslog;
use crate::reply::client::{ClientConn, ClientSide, Outcome, Sent};
use crate::reply::{ErrorHead, Reply, ReplyHead};
use crate::servers::balancer::UpstreamUse;
use crate::state::runtime::{EntrypointRuntime, ErrorForm, Route, RouteAction, Runtime};
use crate::upstream;
use crate::worker::Worker;
use std::borrow::Cow;
use std::rc::Rc;
use std::sync::LazyLock;
use std::time::Instant;

/// The most times `ngx.exec` sends one request on, as nginx's `NGX_HTTP_MAX_URI_CHANGES`.
const MAX_INTERNAL_REDIRECTS: usize = 10;

static NO_ROUTE: LazyLock<PrebuiltError> = LazyLock::new(|| {
    let message = "no route matches this request";
    PrebuiltError::new(LocalError::new(404, ErrorKind::NoRoute, message))
});

static ENTRYPOINT_REMOVED: LazyLock<PrebuiltError> = LazyLock::new(|| {
    let message = "this entrypoint was removed by a configuration reload";
    PrebuiltError::new(LocalError::new(503, ErrorKind::EntrypointRemoved, message))
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
    // HTTP-01 answers (RFC 8555 §8.3) come before any router, on `http_entrypoint`s only.
    let mut route = match ep {
        Some(ep) if ep.answers_acme_http01 && acme::is_http01_answer(&head) => None,
        _ => ep.and_then(|ep| ep.router.route_request(&head, client.ip())),
    };
    // `server.request_id`: the client's id or a new one, on the request before it goes on (the
    // answer gets it back from there, so nothing more is held across the exchange).
    let request_id =
        (runtime.request_id.as_deref()).map(|header| request_id::adopt(&mut head, header));
    // `access_log: false` on the entrypoint or the router: no line for this request.
    let access_log = runtime.access_log.as_ref().filter(|_| {
        ep.is_none_or(|ep| ep.access_log) && route.is_none_or(|route| route.access_log)
    });
    // Routes of a configuration without `server.tracing` skip this (one branch).
    if let Some(sampler) = route.and_then(|r| r.tracing.as_ref()) {
        trace::start(sampler, &mut head);
    }
    // The original request line, kept only when a log line will need it.
    // With whether it is sampled in (answers of 500 and above are logged anyway).
    let mut logged = access_log.map(|log| {
        let header = |name| {
            head.head
                .get(name)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        // Boxed: the exchange's state stays as small as without a log.
        let line = Box::new(accesslog::RequestLine {
            client: client.ip(),
            entrypoint: ep.map(|ep| ep.name.clone()),
            request_id,
            tls: client
                .tls()
                .map(|tls| (tls.version, tls.sni.map(String::from))),
            answered: None,
            upstream_status: None,
            cache: None,
            method: head.method().to_string(),
            host: head.host().to_string(),
            target: head.target().to_string(),
            version: match (head.http2, head.minor_version) {
                _ if client.http3() => "HTTP/3.0",
                (true, _) => "HTTP/2.0",
                (false, 0) => "HTTP/1.0",
                (false, _) => "HTTP/1.1",
            },
            referer: header("referer"),
            user_agent: header("user-agent"),
            trace: head.trace.as_ref().map(|t| (t.trace_id, t.span_id)),
        });
        (line, log.samples())
    });
    // request filters, then the action
    // The filters whose response-head phase sees the reply: all of them for the action's, only
    // those before it for a filter's own answer (as in Traefik, where a middleware that answers
    // is wrapped by the ones before it only).
    let mut wrapped_by = usize::MAX;
    // What the filters keep through the exchange: made by the first that keeps anything.
    let mut kept: Option<Box<FilterState>> = None;
    if route.is_some_and(|r| r.watches_outcomes) {
        // The route's circuit breakers time the exchange from here.
        let since = started.unwrap_or_else(Instant::now);
        kept.get_or_insert_with(Default::default).outcome_since = Some(since);
    }
    // Routes with a `lua` middleware: its phases share the request's `ngx.ctx` until the end.
    let mut lua_scope = route
        .filter(|r| r.runs_lua)
        .map(|_| crate::lua::PhaseScope::enter(&head, client.ip_text(), client.scheme()));
    let mut reply = match route {
        None if ep.is_none() => Reply::prebuilt_error(&ENTRYPOINT_REMOVED),
        None => acme::http01_reply(ep, &head).unwrap_or_else(|| Reply::prebuilt_error(&NO_ROUTE)),
        Some(route) => {
            let filtered = (&mut wrapped_by, &mut kept);
            run_route(worker, route, client, &mut head, filtered).await
        }
    };
    // `ngx.exec`: routed again, on the same entrypoint, for the target a script gave.
    if route.is_some_and(|r| r.may_exec) {
        if let Some(exec) = crate::lua::take_exec(&head) {
            // Boxed: only requests sent on by `ngx.exec` carry its state.
            let rerouted = (&mut route, &mut lua_scope, &mut reply);
            let filtered = (&mut wrapped_by, &mut kept);
            let following = follow_exec(exec, worker, ep, client, &mut head, rerouted, filtered);
            Box::pin(following).await;
        }
    }
    render_error(&mut reply, &head, route.map(|r| &**r));
    if let Some((line, _)) = &mut logged {
        // The action's answer is in: for a proxied request, the upstream's response head.
        line.answered = Some(Instant::now());
        // What the server answered: the reply's own status unless the try was noted (failed,
        // or retried: the note says).
        line.upstream_status = reply.upstream.as_ref().and_then(|used| match &used.note {
            None => Some(reply.status()),
            Some(note) => (note.status != 0).then_some(note.status),
        });
        let caches = route.is_some_and(|r| {
            matches!(
                r.action,
                RouteAction::Cached(..) | RouteAction::Elasticsearch(_)
            )
        });
        if caches {
            line.cache = reply.header("cache-status").map(accesslog::cache_outcome);
        }
    }
    if let Some(trace) = &head.trace {
        trace::note_reply(trace, route.map(|r| &**r), &head, &reply, wrapped_by);
    }
    // response-head filters, on local and proxied replies alike; one may install a body filter
    if let Some(route) = route.filter(|r| r.has_response_phase) {
        if route.has_error_pages {
            let (let_through, original) = (wrapped_by, reply.status());
            // Boxed: only routes with `errors` carry its state.
            let filters = &route.filters;
            let answering = answer_error_pages(
                filters,
                worker,
                &*client,
                &head,
                &mut reply,
                &mut wrapped_by,
            );
            Box::pin(answering).await;
            if wrapped_by != let_through {
                let state = kept.get_or_insert_with(Default::default);
                state.replaced = Some((let_through, original));
            }
        }
        // Only a filter that wraps the answer edits it (not one an `errors` page replaced).
        let edit = kept.as_mut().and_then(|k| k.answer_edit.take());
        if let Some((_, edit)) = edit.filter(|(index, _)| *index < wrapped_by) {
            reply.edit_head(|response| AuthCookies::apply(&edit, response));
        }
        let mut body_filter = None;
        let scheme = client.scheme();
        reply.edit_head(|response| {
            for filter in route.filters.iter().take(wrapped_by) {
                if let Some(installed) = filter.on_response_head(&head, scheme, response) {
                    // A later middleware's filter is inside an earlier one's.
                    body_filter = Some(match body_filter.take() {
                        Some(outer) => installed.then(outer),
                        None => installed,
                    });
                }
            }
        });
        reply.body_filter = body_filter;
    }
    if let Some(header) = runtime.request_id.as_deref() {
        if let Some(id) = head.head.get(header) {
            reply.edit_head(|response| response.head.set(header, id));
        }
    }
    // `http3.advertise`: HTTP/1.1 and HTTP/2 answers name the HTTP/3 port (one branch for
    // entrypoints without it).
    if let Some(alt_svc) = ep.and_then(|ep| ep.alt_svc.as_deref()) {
        if !client.http3() {
            reply.edit_head(|response| response.head.append("alt-svc", alt_svc));
        }
    }
    // response body: the driver writes the reply, through the body filter if one was installed
    let sent = client.send_reply(worker, &head, reply).await;
    // The request is over for the filters once its answer is sent, as in Traefik, where a
    // middleware's handler returns after the body is written.
    if let Some(kept) = &mut kept {
        kept.held = Held::default();
    }
    if let (Some(route), Some(_)) = (route.filter(|r| r.logs_lua), &lua_scope) {
        run_lua_log(route, &head, &sent, wrapped_by);
    }
    let outcome = finish(worker, runtime, route.map(|r| &**r), logged, started, sent);
    if head.trace.is_some() {
        let served = trace::Served {
            route: route.map(|r| &**r),
            client: client.ip_text(),
            scheme: client.scheme(),
            http3: client.http3(),
            outcome: &outcome,
        };
        trace::finish_server_span(worker, &mut head, served);
    }
    if let (Some(route), Some(kept)) = (route, kept) {
        if let Some(since) = kept.outcome_since {
            let seen = (wrapped_by, outcome.status);
            tell_outcome(route, seen, kept.replaced, since.elapsed());
        }
    }
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
        if runtime.metric_labels.any() {
            count_labelled(worker, route, outcome.status, head.method());
        }
    }
    outcome
}

/// What `ngx.exec` changes of an exchange: its route, its Lua phases' scope and its reply.
type Rerouted<'x, 'r> = (
    &'x mut Option<&'r std::sync::Arc<Route>>,
    &'x mut Option<crate::lua::PhaseScope>,
    &'x mut Reply<'r>,
);

/// `ngx.exec`'s internal redirects (lua.md): the request routed again on entrypoint `ep` for
/// each target a script gives (`exec` the first), its filters and action run afresh with a
/// new scope (a fresh `ngx.ctx`), at most `MAX_INTERNAL_REDIRECTS` times.
async fn follow_exec<'r, C: ClientSide>(
    mut exec: crate::lua::Exec,
    worker: &Rc<Worker>,
    ep: Option<&'r EntrypointRuntime>,
    client: &mut C,
    head: &mut RequestHead,
    (route, lua_scope, reply): Rerouted<'_, 'r>,
    (wrapped_by, kept): Filtered<'_>,
) {
    for _ in 0..MAX_INTERNAL_REDIRECTS {
        head.set_path(&exec.path);
        head.set_query(&exec.query);
        drop(lua_scope.take());
        *route = ep.and_then(|ep| ep.router.route_request(head, client.ip()));
        *lua_scope = route
            .filter(|r| r.runs_lua)
            .map(|_| crate::lua::PhaseScope::enter(head, client.ip_text(), client.scheme()));
        *wrapped_by = usize::MAX;
        let filtered = (&mut *wrapped_by, &mut *kept);
        *reply = match (*route, exec.body) {
            (None, _) => Reply::prebuilt_error(&NO_ROUTE),
            // Read by a script already: the next action gets it from memory.
            (Some(route), Some(body)) => {
                head.framing = match body.len() {
                    0 => crate::http::codec::Framing::None,
                    n => crate::http::codec::Framing::Length(n as u64),
                };
                let mut client = Buffered::new(client, Some(HeldBody::Memory(body)));
                run_route(worker, route, &mut client, head, filtered).await
            }
            (Some(route), None) => run_route(worker, route, client, head, filtered).await,
        };
        match crate::lua::take_exec(head) {
            Some(next) if route.is_some_and(|r| r.may_exec) => exec = next,
            _ => return,
        }
    }
    crate::log_error!("lua: ngx.exec: rewrite or internal redirection cycle");
    *reply = Reply::error(LocalError::new(
        500,
        ErrorKind::Script,
        "Internal Server Error",
    ));
}

/// The `log` phase of the `lua` middlewares that saw the request (those up to the one that
/// answered), once its answer is sent (log_by_lua).
#[cold]
fn run_lua_log(route: &Route, head: &RequestHead, sent: &Sent<'_>, wrapped_by: usize) {
    let finished = crate::lua::Finished {
        status: sent.outcome.status,
        body_bytes: sent.outcome.bytes,
        upstream_addr: sent.upstream.as_ref().map(|u| u.server.addr.to_string()),
    };
    for filter in route.filters.iter().take(wrapped_by.saturating_add(1)) {
        filter.on_log(head, &finished);
    }
}

/// `server.metrics.labels`: the answer by exact status and method, for the route and its
/// service.
#[cold]
fn count_labelled(worker: &Worker, route: &Route, status: u16, method: &str) {
    route.cells[worker.id].labelled.count(status, method);
    if let Some(service) = route.action.service() {
        service.cells[worker.id]
            .traffic
            .labelled
            .count(status, method);
    }
}

/// What a route's filters keep through one exchange. Boxed and made by the first filter that
/// keeps anything, so that the exchange of a route whose filters keep nothing carries one null
/// pointer.
#[derive(Default)]
struct FilterState {
    /// The places the filters hold until the answer is sent (`in_flight_req`'s).
    held: Held,
    /// An edit a request filter asks for on the answer, with that filter's index.
    answer_edit: Option<(usize, Box<AuthCookies>)>,
    /// When an `errors` page replaced the answer: the filters that let the request through
    /// (before the replacement narrowed `wrapped_by`) and the status they saw.
    replaced: Option<(usize, u16)>,
    /// When the route's circuit breakers started timing the exchange.
    outcome_since: Option<Instant>,
}

/// What the request filters leave for the rest of the exchange: the index of the one that
/// answered (`usize::MAX`: none did) and what they keep.
type Filtered<'f> = (&'f mut usize, &'f mut Option<Box<FilterState>>);

/// The request phase of `$route`'s filters in `$range`, as an `Option<Reply>`: the answer of
/// one that answers or refuses; a body one of them read goes into `$with_body`. A macro, so
/// that it runs in the caller's own state machine: as an async function it cost every request
/// a future of its own and a copy of the reply.
macro_rules! run_filters {
    ($worker:expr, $route:expr, $range:expr, $client:expr, $head:expr, $filtered:expr, $with_body:expr) => {
        'filters: {
            let (wrapped_by, kept): Filtered<'_> = $filtered;
            for index in $range {
                let decided = match $route.filters[index].on_request($worker, $head, $client) {
                    Flow::Wait(waiting) => waiting.await,
                    decided => decided,
                };
                match decided {
                    // A waited decision never waits again.
                    Flow::Continue | Flow::Wait(_) => {}
                    Flow::Hold(place) => {
                        kept.get_or_insert_with(Default::default).held.push(place);
                    }
                    Flow::ContinueWith(through) => {
                        let LetThrough { cookies, body } = *through;
                        if let Some(cookies) = cookies {
                            let state = kept.get_or_insert_with(Default::default);
                            state.answer_edit = Some((index, cookies));
                        }
                        if body.is_some() {
                            *$with_body = body;
                        }
                    }
                    Flow::Respond(response) => {
                        *wrapped_by = index;
                        break 'filters Some(Reply::local(Cow::Owned(response)));
                    }
                    Flow::Refuse(error) => {
                        *wrapped_by = index;
                        break 'filters Some(Reply::error(error));
                    }
                }
            }
            None
        }
    };
}

/// The route's action, once its request filters let the request through: the reply. A macro
/// for the reason `run_filters!` is one; [`run_action`] is it as a function, for the paths
/// where a filter holds the request's body.
macro_rules! run_action {
    ($worker:expr, $route:expr, $client:expr, $head:expr) => {
        match &$route.action {
            RouteAction::Respond(r) | RouteAction::Redirect(r) => Reply::local(Cow::Borrowed(r)),
            RouteAction::RespondError(error) => Reply::prebuilt_error(error),
            // Boxed: only gRPC-Web's text form reads its body first.
            RouteAction::Proxy(service)
                if $route.decodes_grpc_web_text && grpc_web::is_text($head) =>
            {
                Box::pin(grpc_web::forward_text($worker, service, $client, $head)).await
            }
            RouteAction::Proxy(service) => {
                upstream::forward($worker, service, $client, $head, None).await
            }
            RouteAction::Elasticsearch(es) => {
                let service = &es.service;
                if elasticsearch::has_own_action(es, $head) {
                    // Boxed: its state is large, and other requests need not carry it.
                    Box::pin(elasticsearch::serve($worker, service, es, $client, $head)).await
                } else {
                    upstream::forward($worker, service, $client, $head, None).await
                }
            }
            // Boxed: a cache's state is large, and routes without one need not carry it.
            RouteAction::Cached(service, cache) => {
                Box::pin(cache::serve($worker, cache, service, $client, $head)).await
            }
            RouteAction::Static(site) => {
                static_files::serve(site, &$worker.open_files, $worker.clock.now(), $head)
            }
            // Boxed: a script's run is large, and other routes need not carry it.
            RouteAction::Lua(script) => {
                Box::pin(crate::lua::serve_content(script, $worker, $client, $head)).await
            }
        }
    };
}

async fn run_route<'r, C: ClientSide>(
    worker: &Rc<Worker>,
    route: &'r Route,
    client: &mut C,
    head: &mut RequestHead,
    filtered: Filtered<'_>,
) -> Reply<'r> {
    if let Some(at) = route.buffering_at {
        // Boxed: its state is large, and routes without it need not carry it.
        let buffered = run_buffered(worker, route, at, client, head, filtered);
        return Box::pin(buffered).await;
    }
    if !route.filters.is_empty() {
        // What holds the request's body when a filter read it (`forward_auth`'s `forward_body`).
        let mut with_body = None;
        let all = 0..route.filters.len();
        let answered = run_filters!(worker, route, all, client, head, filtered, &mut with_body);
        if let Some(answer) = answered {
            return answer;
        }
        if let Some(body) = with_body {
            // Boxed: only requests whose body a filter read go this way.
            let mut client = Buffered::new(client, Some(HeldBody::Memory(body)));
            return Box::pin(run_action(worker, route, &mut client, head)).await;
        }
    }
    run_action!(worker, route, client, head)
}

/// [`run_action!`] as a function, for the paths where a filter holds the request's body.
async fn run_action<'r, C: ClientSide>(
    worker: &Rc<Worker>,
    route: &'r Route,
    client: &mut C,
    head: &mut RequestHead,
) -> Reply<'r> {
    run_action!(worker, route, client, head)
}

/// A route with `buffering` (the filter at `at`): the filters before it, then the request
/// body held whole (in memory, or a temporary file past its size), the filters after it and
/// the action with the held body, the answer's body held whole, and the action again while
/// `retry_expression` asks for it (as oxy's buffer wraps the handlers after it in Traefik's
/// chain).
async fn run_buffered<'r, C: ClientSide>(
    worker: &Rc<Worker>,
    route: &'r Route,
    at: usize,
    client: &mut C,
    head: &mut RequestHead,
    (wrapped_by, kept): Filtered<'_>,
) -> Reply<'r> {
    let mut read_before = None;
    let before = 0..at;
    let filtered = (&mut *wrapped_by, &mut *kept);
    let answered = run_filters!(
        worker,
        route,
        before,
        client,
        head,
        filtered,
        &mut read_before
    );
    if let Some(answer) = answered {
        return answer;
    }
    let Some(config) = route.filters[at].buffering() else {
        return run_action(worker, route, client, head).await;
    };
    // A body a filter before this one read (`forward_auth`'s) is held as it is, within the
    // limit; else it is read from the client now.
    let body = match read_before {
        Some(bytes) => buffering::hold_read(config, bytes).map(Some),
        None => buffering::read_request(config, worker, client, head).await,
    };
    let body = match body {
        Ok(body) => body,
        Err(refusal) => {
            *wrapped_by = at;
            return Reply::error(refusal);
        }
    };
    let mut client = Buffered::new(client, body);
    let after = at + 1..route.filters.len();
    // A filter after this one reads the held body: it stays held.
    let mut read_after = None;
    let filtered = (&mut *wrapped_by, &mut *kept);
    let buffered = &mut client;
    let answered = run_filters!(
        worker,
        route,
        after,
        buffered,
        head,
        filtered,
        &mut read_after
    );
    if let Some(answer) = answered {
        return answer;
    }
    let mut attempt = 1;
    loop {
        let reply = run_action(worker, route, &mut client, head).await;
        let watch = client.watch();
        let was_error = matches!(reply.head, ReplyHead::Error(_));
        let reply = buffering::read_response(config, worker, watch, head, reply).await;
        if !was_error && matches!(reply.head, ReplyHead::Error(_)) {
            // The answer was replaced (over the limit): the filters after this one never
            // wrap it, as in Traefik, where the buffer writes its own answer outside them.
            *wrapped_by = at;
        }
        // The body is held whole, so the request can always be sent again.
        if !buffering::retries(config, attempt, reply.status(), head.method()) {
            return reply;
        }
        attempt += 1;
    }
}

/// The filters that let the exchange through (all, or those before the one that answered)
/// and watch outcomes learn its status and how long it took: `seen` is the filters that saw
/// the answer sent and its status; when an `errors` page replaced an answer, the filters after
/// it (those `replaced` says let the request through) saw the answer it replaced (for
/// `errors` in `errors`, the innermost one's).
fn tell_outcome(
    route: &Route,
    (wrapped_by, status): (usize, u16),
    replaced: Option<(usize, u16)>,
    took: std::time::Duration,
) {
    for (index, filter) in route.filters.iter().enumerate() {
        let seen = match replaced {
            _ if index < wrapped_by => status,
            Some((let_through, original)) if index < let_through => original,
            _ => break,
        };
        filter.on_outcome(seen, took);
    }
}

/// Renders weir's own error answer, once, in the flavour the request and route need: gRPC's
/// trailers-only form for a gRPC request (whatever the route), Elasticsearch's JSON on a route
/// to an Elasticsearch service, else plain text (a prebuilt error's answer as it was built).
#[inline]
fn render_error(reply: &mut Reply<'_>, head: &RequestHead, route: Option<&Route>) {
    if matches!(reply.head, ReplyHead::Error(_)) {
        render_error_head(reply, head, route);
    }
}

/// `render_error`'s work, out of line (most replies are not errors): takes the error out of
/// the reply's head, so its header lines move rather than being copied, and puts its rendering
/// in.
#[cold]
#[inline(never)]
fn render_error_head(reply: &mut Reply<'_>, head: &RequestHead, route: Option<&Route>) {
    let ReplyHead::Error(error) = &mut reply.head else {
        return;
    };
    let error = match error {
        ErrorHead::Made(made) => {
            let taken = LocalError::new(made.status, made.kind, Cow::Borrowed(""));
            ErrorHead::Made(std::mem::replace(made, taken))
        }
        ErrorHead::Prebuilt(prebuilt) => ErrorHead::Prebuilt(prebuilt),
    };
    reply.head = ReplyHead::Local(rendered(error, head, route));
}

/// An error in the flavour the request and route need.
fn rendered<'r>(
    error: ErrorHead<'r>,
    head: &RequestHead,
    route: Option<&Route>,
) -> Cow<'r, LocalResponse> {
    trace::note_error(head, error.error());
    // A gRPC-Web call turned into gRPC gets the gRPC form over HTTP/1 too (see `grpc_web`).
    if crate::http::grpc::is_grpc(head) || grpc_web::converted(head) {
        Cow::Owned(grpc::error_answer(error.error()))
    } else if route.is_some_and(|r| r.error_form == ErrorForm::Elasticsearch) {
        Cow::Owned(elasticsearch::error_answer(error.error()))
    } else {
        error.into_plain()
    }
}

/// The error log's line for a 502 or 504: which router, service and server, which try, and
/// why (`connect refused`, `no response head within 5s`).
fn log_failure(route: Option<&Route>, used: &UpstreamUse<'_>) {
    let Some((note, tries)) =
        (used.note.as_ref()).and_then(|n| Some((n.failure.as_ref()?, n.tries)))
    else {
        return;
    };
    crate::log_error!(
        "router `{}`: service `{}`: server {}: try {}: {}{}",
        route.map_or("", |r| r.name.as_str()),
        used.service.name,
        used.server.url,
        tries,
        note.message,
        upstream::Parenthesized(&note.detail),
    );
}

/// Phase finish: the upstream connection goes back to the pool when its response was read
/// completely, the server leaves the in-flight count, and the access log gets its line.
fn finish(
    worker: &Worker,
    runtime: &Runtime,
    route: Option<&Route>,
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
    if let Some(used) = upstream.as_ref().filter(|u| u.note.is_some()) {
        log_failure(route, used);
    }
    let logged = logged.filter(|(_, sampled)| *sampled || outcome.status >= 500);
    if let (Some(log), Some((request, _)), Some(started)) = (&runtime.access_log, logged, started) {
        let address = upstream
            .as_ref()
            .map(|u| u.server.addr.to_string())
            .unwrap_or_default();
        let answered = request
            .answered
            .map(|at| at.saturating_duration_since(started));
        let entry = accesslog::Entry {
            request: &request,
            status: outcome.status,
            bytes: outcome.bytes,
            duration: started.elapsed(),
            router: route.map(|r| r.name.as_str()).unwrap_or(""),
            upstream: &address,
            upstream_time: upstream.as_ref().and(answered),
            tries: upstream
                .as_ref()
                .map(|u| u.note.as_ref().map_or(1, |n| n.tries as u16)),
        };
        log.record(&entry, &worker.log_lines);
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATE: &[u8] = b"date: Sun, 06 Nov 1994 08:49:37 GMT\r\n";

    /// An answer as the HTTP/1 driver writes it on a kept-alive connection.
    fn wire(answer: &LocalResponse) -> String {
        let mut out = Vec::new();
        answer.write(&mut out, true, false, b"", DATE);
        String::from_utf8(out).expect("UTF-8")
    }

    fn too_many() -> LocalError {
        let mut error = LocalError::new(429, ErrorKind::BodyTooLarge, "slow down: 100% used");
        error.headers.push(("retry-after".into(), "5".into()));
        error
    }

    #[test]
    fn one_error_renders_in_each_flavour() {
        let error = LocalError::new(
            504,
            ErrorKind::UpstreamTimeout,
            "upstream response timed out",
        );
        assert_eq!(
            wire(&error.plain()),
            "HTTP/1.1 504 Gateway Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n\
             content-length: 28\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n\
             upstream response timed out\n"
        );
        assert_eq!(
            wire(&grpc::error_answer(&error)),
            "HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ngrpc-status: 4\r\n\
             grpc-message: upstream response timed out\r\ncontent-length: 0\r\n\
             date: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n"
        );
        let body = "{\"error\":{\"reason\":\"upstream response timed out\",\"root_cause\":\
                    [{\"reason\":\"upstream response timed out\",\"type\":\"timeout_exception\"}],\
                    \"type\":\"timeout_exception\"},\"status\":504}";
        assert_eq!(
            wire(&elasticsearch::error_answer(&error)),
            format!(
                "HTTP/1.1 504 Gateway Timeout\r\ncontent-type: application/json; charset=UTF-8\r\n\
                 content-length: {}\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n{body}",
                body.len()
            )
        );
    }

    #[test]
    fn an_error_s_own_headers_go_in_every_flavour_after_the_flavour_s() {
        let error = too_many();
        let names = |answer: LocalResponse| -> Vec<String> {
            answer.headers.into_iter().map(|(name, _)| name).collect()
        };
        assert_eq!(names(error.plain()), ["content-type", "retry-after"]);
        let grpc = grpc::error_answer(&error);
        assert_eq!(grpc.headers[2].1, "slow down: 100%25 used");
        assert_eq!(
            names(grpc),
            ["content-type", "grpc-status", "grpc-message", "retry-after"]
        );
        let es = elasticsearch::error_answer(&error);
        assert!(String::from_utf8_lossy(&es.body).contains("es_rejected_execution_exception"));
        assert_eq!(names(es), ["content-type", "retry-after"]);
    }

    #[test]
    fn what_only_http_states_stays_in_the_plain_answer() {
        let range = crate::http::conditional::range_not_satisfiable(120);
        let plain = wire(&range.plain());
        assert_eq!(
            plain.split_once("\r\n").map(|(_, rest)| rest),
            Some("content-range: bytes */120\r\ncontent-length: 0\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n")
        );
        let allow = "GET, HEAD";
        let method = LocalError::new(405, ErrorKind::MethodNotAllowed { allow }, "GET only");
        let plain = method.plain();
        assert_eq!(plain.headers[0], ("allow".into(), allow.into()));
        assert_eq!(&plain.body[..], b"GET only\n");
        for answer in [
            grpc::error_answer(&method),
            elasticsearch::error_answer(&method),
        ] {
            assert!(answer.headers.iter().all(|(name, _)| name != "allow"));
        }
        assert_eq!(grpc::error_answer(&range).headers[2].1, "");
    }

    #[test]
    fn a_prebuilt_error_lends_its_plain_answer() {
        let error = LocalError::new(404, ErrorKind::NoRoute, "no route matches this request");
        let prebuilt = PrebuiltError::new(error);
        let head = crate::reply::ErrorHead::Prebuilt(&prebuilt);
        assert!(matches!(head.plain(), Cow::Borrowed(p) if std::ptr::eq(p, &prebuilt.plain)));
        let configured = LocalResponse::new(403, vec![("x-why".into(), "policy".into())], "no \n");
        let configured = PrebuiltError::configured(configured);
        assert_eq!(configured.error.message, "no");
        assert_eq!(
            wire(&configured.plain),
            wire(&crate::reply::ErrorHead::Prebuilt(&configured).plain())
        );
        assert_eq!(grpc::error_answer(&configured.error).headers[1].1, "7");
    }

    /// Traefik's ipAllowList answers with the status and its text, no newline, as Go's
    /// sniffed `text/plain`; gRPC and Elasticsearch routes get their own forms.
    #[test]
    fn a_policy_refusal_is_the_status_text_alone() {
        let refusal = LocalError::new(403, ErrorKind::PolicyRefused, "Forbidden");
        assert_eq!(
            wire(&refusal.plain()),
            "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain; charset=utf-8\r\n\
             content-length: 9\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\nForbidden"
        );
        assert_eq!(grpc::error_answer(&refusal).headers[1].1, "7");
        let es = elasticsearch::error_answer(&refusal);
        assert_eq!(es.status, 403);
        assert!(String::from_utf8_lossy(&es.body).contains("\"reason\":\"Forbidden\""));
        let no_body = LocalError::new(204, ErrorKind::PolicyRefused, "No Content").plain();
        assert!(no_body.body.is_empty() && no_body.headers.is_empty());
    }
}
