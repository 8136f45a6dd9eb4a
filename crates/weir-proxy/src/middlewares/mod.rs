//! Filters (configured as `middlewares`): what a route applies around its action, in three
//! phases. Request phase (a plain call): edits the request head, answers it (`Flow::Respond`)
//! or refuses it with one of weir's errors (`Flow::Refuse`), or lets it on holding a place
//! until the answer is sent (`Flow::Hold`) or with what it hands on (`Flow::ContinueWith`); a
//! filter that must wait to decide returns its decision as a boxed future (`Flow::Wait`).
//! Response-head phase: first, on routes with `errors`, a caught answer is replaced by a page
//! (async: [`answer_error_pages`]); then each filter edits the reply's head, local and proxied
//! answers alike, and may install a [`BodyFilter`]. Response-body phase: the installed body filter
//! transforms the body as the driver sends it (compression; `grpc_web`'s, which also takes
//! the trailers into the body); without one, replies take the fused relay. One file per
//! middleware; a new one is a variant of the config's
//! `MiddlewareKind`, its file here, and its arm in [`Filter::on_request`] or
//! [`Filter::on_response_head`]; one that keeps state between requests (`basic_auth`'s verified
//! pairs, `rate_limit`'s buckets, `in_flight_req`'s counts, `digest_auth`'s nonces) builds it
//! in [`Filter::new`], as a variant of `Kept`.

mod add_prefix;
mod authenticated;
mod basic_auth;
pub(crate) mod buffering;
mod circuit_breaker;
mod digest_auth;
mod errors;
mod forward_auth;
pub(crate) mod grpc_web;
mod headers;
mod in_flight_req;
mod ip_allow_list;
mod jwt;
mod rate_limit;
mod redirect_regex;
mod redirect_scheme;
mod replace_path;
mod replace_path_regex;
mod secure_headers;
mod source;
mod strip_prefix;
mod strip_prefix_regex;

use crate::http::codec::{RequestHead, ResponseHead};
use crate::http::compress;
use crate::http::error::LocalError;
use crate::http::local::LocalResponse;
use crate::http::Scheme;
use crate::reply::body_filter::BodyFilter;
use crate::reply::client::ClientSide;
use crate::reply::{Reply, ReplyHead};
use crate::servers::balancer::Service;
use crate::upstream::detached::Requester;
use crate::worker::Worker;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use weir_config::MiddlewareKind;

pub use circuit_breaker::Breaker;

/// A configured middleware; its shape is the config's `MiddlewareKind`, its behaviour is here,
/// with what it keeps between requests.
#[derive(Debug)]
pub struct Filter(pub MiddlewareKind, Kept);

/// What a middleware keeps between requests, built once per configuration.
#[derive(Debug)]
enum Kept {
    Nothing,
    BasicAuth(Box<basic_auth::BasicAuth>),
    DigestAuth(Box<digest_auth::DigestAuth>),
    RateLimit(Box<rate_limit::RateLimit>),
    InFlightReq(Box<in_flight_req::InFlightReq>),
    Jwt(Box<jwt::JwtAuth>),
    /// A router's own breaker (see [`Filter::with_breaker`]).
    CircuitBreaker(Arc<Breaker>),
    ErrorPages(errors::ErrorPages),
    ForwardAuth(forward_auth::ForwardAuth),
    Lua(Box<crate::lua::PhaseScripts>),
}

/// What request filters keep until the exchange's answer is sent (`in_flight_req` counts a
/// request until then). One pointer, null on routes without such a filter, so that the
/// exchange of every other route pays only for setting and testing it.
#[derive(Default)]
pub struct Held(Option<Box<HeldPlace>>);

/// One place held, and those held by earlier filters of the route.
struct HeldPlace {
    _place: in_flight_req::InFlight,
    _earlier: Held,
}

impl Held {
    pub(crate) fn push(&mut self, place: in_flight_req::InFlight) {
        let earlier = Held(self.0.take());
        self.0 = Some(Box::new(HeldPlace {
            _place: place,
            _earlier: earlier,
        }));
    }
}

/// What building a filter may need of the rest of the configuration: the compiled services
/// by name (`errors`' page service), and how to compile a service a middleware defines itself
/// (`forward_auth`'s server).
pub struct Upstreams<'a> {
    pub services: &'a HashMap<&'a str, Arc<Service>>,
    pub compile: &'a mut dyn FnMut(&weir_config::Service) -> Result<Service, String>,
    /// The configuration's Lua scripts, for `lua` middlewares.
    pub lua: Option<&'a Arc<crate::lua::LuaProgram>>,
}

pub use forward_auth::AuthCookies;

/// What a filter that lets a request through hands on (`forward_auth`): cookies to set on the
/// answer, and the request's body when it read it (the action then sends these bytes).
pub struct LetThrough {
    pub cookies: Option<Box<AuthCookies>>,
    pub body: Option<bytes::Bytes>,
}

/// What the request phase lets happen next.
pub enum Flow<'a> {
    Continue,
    /// Continue, keeping this until the answer is sent.
    Hold(in_flight_req::InFlight),
    /// Continue with what the filter hands on (`forward_auth`'s cookies for the answer, the
    /// body it read) (boxed: it is rare).
    ContinueWith(Box<LetThrough>),
    /// Answer with this instead of running the action (a redirect).
    Respond(LocalResponse),
    /// Refuse with this error, rendered in the route's flavour as weir's other errors are
    /// (a policy's refusal: plain text, gRPC, Elasticsearch JSON).
    Refuse(LocalError),
    /// Decided once this finishes (a rate limit's short wait, a bcrypt hash verified on a
    /// blocking thread, an auth server's answer). Boxed, and only when a filter has to wait:
    /// the request phase is otherwise a plain call, with no future for every filter.
    Wait(std::pin::Pin<Box<dyn std::future::Future<Output = Flow<'static>> + 'a>>),
}

/// A redirect's status: 301/308 when `permanent`, else 302/307; the first of each when the
/// client may change the method (`get_like`: what the middleware counts as a plain GET).
fn redirect_status(permanent: bool, get_like: bool) -> u16 {
    match (permanent, get_like) {
        (true, true) => 301,
        (false, true) => 302,
        (true, false) => 308,
        (false, false) => 307,
    }
}

impl Filter {
    /// The Redis store a `rate_limit` shares its buckets through, if it does.
    pub fn shared_store(&self) -> Option<&Arc<crate::stores::redis::Redis>> {
        match &self.1 {
            Kept::RateLimit(limit) => limit.shared_store(),
            _ => None,
        }
    }

    pub fn new(
        name: &str,
        kind: MiddlewareKind,
        upstreams: &mut Upstreams<'_>,
    ) -> Result<Filter, String> {
        let kept = match &kind {
            MiddlewareKind::BasicAuth(config) => {
                Kept::BasicAuth(Box::new(basic_auth::BasicAuth::new(config)))
            }
            MiddlewareKind::DigestAuth(config) => {
                Kept::DigestAuth(Box::new(digest_auth::DigestAuth::new(config)))
            }
            // An `average` of 0 limits nothing: no buckets, no work per request.
            MiddlewareKind::RateLimit(config) => rate_limit::RateLimit::new(name, config)?
                .map_or(Kept::Nothing, |limit| Kept::RateLimit(Box::new(limit))),
            MiddlewareKind::InFlightReq(config) => {
                Kept::InFlightReq(Box::new(in_flight_req::InFlightReq::new(config)))
            }
            MiddlewareKind::Jwt(config) => {
                let jwks_server = match &config.jwks_url {
                    Some(url) => Some(Arc::new((upstreams.compile)(&url.service)?)),
                    None => None,
                };
                Kept::Jwt(Box::new(jwt::JwtAuth::new(config, jwks_server)))
            }
            MiddlewareKind::Errors(config) => {
                let service = upstreams.services.get(config.service.as_str()).cloned();
                let service = service
                    .ok_or_else(|| format!("errors: unknown service `{}`", config.service))?;
                Kept::ErrorPages(errors::ErrorPages { service })
            }
            MiddlewareKind::ForwardAuth(config) => {
                let service = Arc::new((upstreams.compile)(&config.service)?);
                Kept::ForwardAuth(forward_auth::ForwardAuth { service })
            }
            MiddlewareKind::Lua(phases) => {
                let program = upstreams.lua.ok_or("its Lua scripts are missing")?;
                Kept::Lua(Box::new(program.phase_scripts(name, phases)))
            }
            _ => Kept::Nothing,
        };
        Ok(Filter(kind, kept))
    }

    /// Whether a filter of `kind` holds services (`errors`' page service, `forward_auth`'s
    /// server, `jwt`'s JWKS server): it is built afresh by every compile, since they may have changed, and keeps no
    /// state of its own to carry (the servers' pools and counters are carried as services').
    pub fn holds_services(kind: &MiddlewareKind) -> bool {
        match kind {
            MiddlewareKind::Errors(_) | MiddlewareKind::ForwardAuth(_) => true,
            // Its scripts belong to this compile's Lua program: each reload makes new VMs.
            MiddlewareKind::Lua(_) => true,
            // Its JWKS server; the set it fetched is fetched again.
            MiddlewareKind::Jwt(config) => config.jwks_url.is_some(),
            _ => false,
        }
    }

    /// An `errors` filter (the exchange runs [`answer_error_pages`] on routes with one).
    pub fn answers_error_pages(&self) -> bool {
        matches!(self.1, Kept::ErrorPages(_))
    }

    /// A circuit breaker's settings; `None` for the other middlewares.
    pub fn breaker_settings(&self) -> Option<&weir_config::CircuitBreaker> {
        match &self.0 {
            MiddlewareKind::CircuitBreaker(settings) => Some(settings),
            _ => None,
        }
    }

    /// A router's own circuit breaker, with `breaker` as its state: Traefik builds one per
    /// router, so routers naming the same middleware do not share its statistics. A breaker
    /// made by [`Filter::new`] alone lets everything through.
    pub fn with_breaker(&self, breaker: Arc<Breaker>) -> Filter {
        Filter(self.0.clone(), Kept::CircuitBreaker(breaker))
    }

    /// Whether the filter must see how each exchange it let through ended (a circuit
    /// breaker's statistics): the route then calls [`Filter::on_outcome`].
    pub fn watches_outcomes(&self) -> bool {
        matches!(self.1, Kept::CircuitBreaker(_))
    }

    /// How an exchange this filter let through ended: the status sent, and how long it took
    /// from its head read to its last byte sent.
    pub fn on_outcome(&self, status: u16, took: Duration) {
        if let Kept::CircuitBreaker(breaker) = &self.1 {
            breaker.on_outcome(status, took);
        }
    }

    /// A `strip_prefix` or `strip_prefix_regex` filter (it records what it strips in
    /// `X-Forwarded-Prefix`).
    pub fn strips_prefix(&self) -> bool {
        matches!(
            self.0,
            MiddlewareKind::StripPrefix(_) | MiddlewareKind::StripPrefixRegex(_)
        )
    }

    /// A `buffering` filter's settings: the exchange runs it (`exchange::run_buffered`).
    pub fn buffering(&self) -> Option<&weir_config::Buffering> {
        match &self.0 {
            MiddlewareKind::Buffering(config) => Some(config),
            _ => None,
        }
    }

    pub fn has_response_phase(&self) -> bool {
        match &self.0 {
            MiddlewareKind::Headers {
                response,
                cors,
                secure,
                ..
            } => !response.is_empty() || cors.is_some() || secure.is_some(),
            MiddlewareKind::Compress(_) | MiddlewareKind::Errors(_) => true,
            MiddlewareKind::GrpcWeb(_) => true,
            MiddlewareKind::Lua(_) => {
                matches!(&self.1, Kept::Lua(scripts)
                    if scripts.has_header_filter() || scripts.has_body_filter())
            }
            // Its cookies are set on the answer.
            MiddlewareKind::ForwardAuth(config) => !config.add_auth_cookies_to_response.is_empty(),
            _ => false,
        }
    }

    /// Request phase, for a request from `client`.
    pub(crate) fn on_request<'a, C: ClientSide>(
        &'a self,
        worker: &'a Worker,
        req: &'a mut RequestHead,
        client: &'a mut C,
    ) -> Flow<'a> {
        match &self.0 {
            MiddlewareKind::StripPrefix(prefixes) => strip_prefix::on_request(prefixes, req),
            MiddlewareKind::AddPrefix(prefix) => add_prefix::on_request(prefix, req),
            MiddlewareKind::ReplacePathRegex { regex, replacement } => {
                replace_path_regex::on_request(regex, replacement, req)
            }
            MiddlewareKind::Headers {
                request,
                cors,
                secure,
                ..
            } => {
                // As Traefik nests them: CORS (the preflight) around the request edits,
                // around the security part (the host check).
                if let Some(answer) = cors.as_ref().and_then(|c| headers::preflight(c, req)) {
                    return Flow::Respond(answer);
                }
                headers::apply(&mut req.head, request);
                if let Some(refused) = secure
                    .as_ref()
                    .and_then(|s| secure_headers::check_host(s, req))
                {
                    return Flow::Respond(refused);
                }
            }
            MiddlewareKind::RedirectScheme { scheme, permanent } => {
                let redirect =
                    redirect_scheme::on_request(scheme, *permanent, req, client.scheme());
                if let Some(answer) = redirect {
                    return Flow::Respond(answer);
                }
            }
            MiddlewareKind::IpAllowList(list) => {
                if let Some(refusal) = ip_allow_list::on_request(list, req, client.ip()) {
                    return Flow::Refuse(refusal);
                }
            }
            MiddlewareKind::ReplacePath(path) => replace_path::on_request(path, req),
            MiddlewareKind::StripPrefixRegex(expressions) => {
                return strip_prefix_regex::on_request(expressions, req);
            }
            MiddlewareKind::RedirectRegex {
                regex,
                replacement,
                permanent,
            } => {
                return redirect_regex::on_request(
                    regex,
                    replacement,
                    *permanent,
                    req,
                    client.scheme(),
                );
            }
            MiddlewareKind::BasicAuth(_) => {
                if let Kept::BasicAuth(auth) = &self.1 {
                    return auth.on_request(req);
                }
            }
            MiddlewareKind::RateLimit(_) => {
                if let Kept::RateLimit(limit) = &self.1 {
                    return limit.on_request(req, client.ip());
                }
            }
            MiddlewareKind::InFlightReq(_) => {
                if let Kept::InFlightReq(limit) = &self.1 {
                    return match limit.on_request(req, client.ip()) {
                        Ok(counted) => Flow::Hold(counted),
                        Err(refusal) => Flow::Refuse(refusal),
                    };
                }
            }
            MiddlewareKind::Jwt(_) => {
                if let Kept::Jwt(auth) = &self.1 {
                    return auth.on_request(worker, req, client);
                }
            }
            MiddlewareKind::DigestAuth(_) => {
                if let Kept::DigestAuth(auth) = &self.1 {
                    if let Err(refusal) = auth.on_request(req) {
                        return Flow::Refuse(refusal);
                    }
                }
            }
            MiddlewareKind::CircuitBreaker(_) => {
                if let Kept::CircuitBreaker(breaker) = &self.1 {
                    if let Some(fallback) = breaker.on_request() {
                        return Flow::Refuse(fallback);
                    }
                }
            }
            MiddlewareKind::GrpcWeb(config) => return grpc_web::on_request(config, req),
            MiddlewareKind::ForwardAuth(config) => {
                if let Kept::ForwardAuth(auth) = &self.1 {
                    return Flow::Wait(Box::pin(auth.on_request(config, worker, req, client)));
                }
            }
            // Its work is on the answer.
            MiddlewareKind::Errors(_) => {}
            // The loader flattens chains into the routers' lists: none reaches a route. The
            // exchange runs `buffering` itself, where it stands among the filters.
            MiddlewareKind::Lua(_) => {
                if let Kept::Lua(scripts) = &self.1 {
                    if scripts.has_request_phase() {
                        let (remote_addr, scheme) = (client.ip_text().to_string(), client.scheme());
                        return Flow::Wait(Box::pin(async move {
                            let mut reader = LuaBodyReader { worker, client };
                            match scripts
                                .on_request(req, &remote_addr, scheme, &mut reader)
                                .await
                            {
                                Err(answer) => Flow::Respond(answer),
                                Ok(None) => Flow::Continue,
                                Ok(Some(body)) => Flow::ContinueWith(Box::new(LetThrough {
                                    cookies: None,
                                    body: Some(body),
                                })),
                            }
                        }));
                    }
                }
            }
            MiddlewareKind::Compress(_)
            | MiddlewareKind::Chain(_)
            | MiddlewareKind::Buffering(_) => {}
        }
        Flow::Continue
    }

    /// Response-head phase, for an answer to `req`, which came over `scheme`: edits the head;
    /// may return a filter for the body.
    pub fn on_response_head(
        &self,
        req: &RequestHead,
        scheme: Scheme,
        resp: &mut ResponseHead,
    ) -> Option<BodyFilter> {
        match &self.0 {
            MiddlewareKind::Headers {
                response,
                cors,
                secure,
                ..
            } => {
                // Inside out, as Traefik nests them: the security fields, then the edits, then CORS.
                if let Some(secure) = secure {
                    secure_headers::on_response(secure, req, scheme, &mut resp.head);
                }
                headers::apply(&mut resp.head, response);
                if let Some(cors) = cors {
                    headers::on_response(cors, req, &mut resp.head);
                }
                None
            }
            MiddlewareKind::Compress(config) => {
                compress::install(config, req, resp).map(BodyFilter::compress)
            }
            MiddlewareKind::GrpcWeb(config) => grpc_web::on_response_head(config, req, resp),
            MiddlewareKind::Lua(_) => {
                if let Kept::Lua(scripts) = &self.1 {
                    scripts.on_response_head(req, scheme, resp);
                    return scripts.body_filter(req, scheme, resp);
                }
                None
            }
            _ => None,
        }
    }
}

/// Reads the request's body for a `lua` middleware's phase (`ngx.req.read_body`), within
/// nginx's default `client_max_body_size` (1 MiB).
struct LuaBodyReader<'a, C> {
    worker: &'a Worker,
    client: &'a mut C,
}

impl<C: ClientSide> crate::lua::ReadBody for LuaBodyReader<'_, C> {
    fn read_body<'b>(
        &'b mut self,
        head: &'b RequestHead,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<bytes::Bytes, u16>> + 'b>> {
        Box::pin(async move {
            let read = self.client.read_body(self.worker, head, 1 << 20).await;
            read.map_err(|e| match e {
                crate::reply::relay::BodyError::TooLarge => 413,
                _ => 400,
            })
        })
    }
}

impl Filter {
    /// A `lua` middleware: the exchange holds a [`crate::lua::PhaseScope`] for its phases.
    pub fn runs_lua(&self) -> bool {
        matches!(self.1, Kept::Lua(_))
    }

    /// True for a `lua` middleware with a `log` phase.
    pub fn logs_lua(&self) -> bool {
        matches!(&self.1, Kept::Lua(scripts) if scripts.has_log())
    }

    /// The `log` phase of a `lua` middleware, once the answer to `req` is sent.
    pub fn on_log(&self, req: &RequestHead, finished: &crate::lua::Finished) {
        if let Kept::Lua(scripts) = &self.1 {
            scripts.on_log(req, finished);
        }
    }
}

/// The `errors` filters among the first `wrapped_by` of `filters`, innermost first, over the
/// reply to `req`: one that catches the reply's status replaces it with its page, and only the
/// filters before it see the page (`wrapped_by` becomes its index), as in Traefik, where a
/// middleware's answer is wrapped by the ones before it. The original answer's body is read and
/// dropped; its upstream stays on the reply, for the log.
pub(crate) async fn answer_error_pages<'r>(
    filters: &[Arc<Filter>],
    worker: &Worker,
    client: &impl ClientSide,
    req: &RequestHead,
    reply: &mut Reply<'r>,
    wrapped_by: &mut usize,
) {
    for index in (0..filters.len().min(*wrapped_by)).rev() {
        let Filter(MiddlewareKind::Errors(config), Kept::ErrorPages(pages)) = &*filters[index]
        else {
            continue;
        };
        let status = reply.status();
        if !errors::catches(config, status) {
            continue;
        }
        errors::drop_body(worker, client.watch(), reply).await;
        let from = Requester::of(client);
        let page = pages.page(config, worker, req, from, client.scheme(), status);
        reply.head = ReplyHead::Local(Cow::Owned(page.await));
        *wrapped_by = index;
    }
}
