//! The compiled configuration snapshot: per-entrypoint routers over shared routes, services
//! with their balancers, middlewares. Built once per (re)load off the hot path and read
//! through an `ArcSwap` by every worker. A compile carries what has a stable identity over
//! from the previous snapshot: entrypoints keep their slot and counters by name, servers their
//! state by address, routers and services their counters by name (`state/carry.rs`).

use crate::actions::elasticsearch::{EsService, KeptEs};
use crate::actions::static_files::StaticSite;
use crate::http::error::PrebuiltError;
use crate::http::local::LocalResponse;
use crate::http::router::Router;
use crate::http::trace_context::Sampler;
use crate::listen::tls::{server_tls, ServerTls};
use crate::middlewares::{Breaker, Filter, Upstreams};
use crate::observe::accesslog::AccessLog;
use crate::observe::metrics::{EntrypointCounters, PerWorker, RouteCells};
use crate::servers::balancer::Service;
use crate::state::carry::Carried;
use crate::state::l4_routes::{self, TcpRoutes, TcpService, UdpService};
use crate::worker::{ClientTimeouts, WorkerSettings};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use weir_config::{Action, Config, Transport};

/// The snapshot every worker serves from, swapped whole by a reload; connection drivers hold
/// it beside their worker (`worker/` holds no configuration).
pub type SharedRuntime = Arc<arc_swap::ArcSwap<Runtime>>;

pub struct Runtime {
    /// The configuration this was compiled from.
    pub config: Config,
    /// 1 for the configuration the process started with, one more per successful reload.
    pub version: u64,
    /// Every entrypoint name this process has served, in first-seen order. A name's index (its
    /// slot) never changes, so listeners and connections hold it across reloads.
    pub slots: Vec<String>,
    /// By slot; `None` for an entrypoint a reload removed.
    pub entrypoints: Vec<Option<EntrypointRuntime>>,
    /// Every HTTP service (for the control thread's health checks).
    pub services: Vec<Arc<Service>>,
    /// The Elasticsearch services (for the control thread's discovery, shard maps and spool
    /// replays), in file order.
    pub elasticsearch: Vec<Arc<EsService>>,
    pub access_log: Option<AccessLog>,
    /// `server.request_id`'s header, when requests carry an id.
    pub request_id: Option<Box<str>>,
    /// The client-side limits from `server`.
    pub timeouts: ClientTimeouts,
    /// Every HTTP router, in file order.
    pub routes: Vec<Arc<Route>>,
    /// Whether exchanges are counted and timed (`server.metrics`).
    pub metrics: bool,
    /// `server.metrics.labels`: answers also counted by exact status and method.
    pub metric_labels: weir_config::MetricLabels,
    /// The response caches, by name order (for the control thread's purge followers).
    pub caches: Vec<Arc<crate::actions::cache::store::ResponseCache>>,
    /// The `rate_limit`s shared through Redis, by middleware name (for their metrics).
    pub shared_limits: Vec<(String, Arc<crate::stores::redis::Redis>)>,
    /// TCP services, and the UDP services some UDP router sends to, by name (for their
    /// metrics).
    pub tcp_services: Vec<Arc<TcpService>>,
    pub udp_services: Vec<Arc<UdpService>>,
    /// The `lua` section's program (every script compiled), for the workers to make their VM
    /// from at start and on reload.
    pub lua: Option<Arc<crate::lua::LuaProgram>>,
    /// What the next compile carries over.
    carried: Carried,
}

pub struct EntrypointRuntime {
    pub name: String,
    pub address: SocketAddr,
    /// TLS termination settings, for TLS entrypoints.
    pub tls: Option<ServerTls>,
    pub router: Router<Arc<Route>>,
    /// Whether some HTTP router serves this entrypoint (else a connection no TCP router
    /// takes is closed).
    pub has_http_routes: bool,
    /// TCP routers, tried before HTTP when present.
    pub tcp: Option<TcpRoutes>,
    /// For a UDP entrypoint: the service its router sends datagrams to.
    pub udp: Option<Arc<UdpService>>,
    /// Counters, one set per worker.
    pub cells: EntrypointCounters,
    /// Plain connections may open with the HTTP/2 preface (`h2c`).
    pub h2c: bool,
    pub http2: weir_config::Http2Settings,
    /// `access_log: false` turns the access log off for this entrypoint's requests.
    pub access_log: bool,
    /// The `http_entrypoint` of some `tls.acme` block: HTTP-01 answers come before routing.
    pub answers_acme_http01: bool,
    /// `http3`: its QUIC server settings, built with the TLS ones.
    pub http3: Option<Http3Runtime>,
    /// The `Alt-Svc` value this entrypoint's HTTP/1.1 and HTTP/2 answers carry (`http3` with
    /// `advertise`), set once its port is known (`Runtime::advertise_http3`).
    pub alt_svc: Option<Box<[u8]>>,
}

/// An `http3` entrypoint's compiled settings.
pub struct Http3Runtime {
    pub settings: weir_config::Http3Settings,
    pub server: quinn::ServerConfig,
}

pub struct Route {
    pub name: String,
    pub rule_text: String,
    pub priority: i64,
    /// The route's middlewares, in order.
    pub filters: Vec<Arc<Filter>>,
    /// Their names, for the spans of traced requests.
    pub filter_names: Vec<String>,
    /// True when some filter has a response-head phase.
    pub has_response_phase: bool,
    /// Where the route's `buffering` filter stands among its filters (one at most): the exchange
    /// reads the bodies there (`exchange::run_buffered`).
    pub buffering_at: Option<usize>,
    /// True when some filter must see how each exchange ended (a circuit breaker).
    pub watches_outcomes: bool,
    /// True when a `grpc_web` filter may hand the action a text-form call, whose base64 body
    /// it decodes before the request goes upstream.
    pub decodes_grpc_web_text: bool,
    /// True when some filter is `errors` (its answers are in the response phase too).
    pub has_error_pages: bool,
    /// True when some filter is a `lua` middleware: its phases share the request's state
    /// (`ngx.ctx`), and its `log` phase runs after the answer.
    pub runs_lua: bool,
    /// True when some `lua` middleware has a `log` phase, run after the answer.
    pub logs_lua: bool,
    /// True when some script of the route may call `ngx.exec` (a `lua` action or middleware):
    /// the exchange then looks for a target to route the request to again.
    pub may_exec: bool,
    pub action: RouteAction,
    /// How weir's own errors on this route are shaped.
    pub error_form: ErrorForm,
    /// Counters, one set per worker (carried over a reload by name).
    pub cells: Arc<PerWorker<RouteCells>>,
    /// `access_log: false` turns the access log off for this router's requests.
    pub access_log: bool,
    /// With `server.tracing`: how the route samples its requests (`None`: not traced, and
    /// the client's trace fields pass through as any other).
    pub tracing: Option<Sampler>,
}

/// The shape of weir's own error answers on a route (a gRPC request's are gRPC-shaped
/// whatever the route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorForm {
    Plain,
    /// As Elasticsearch answers errors (a JSON body), on routes to an Elasticsearch service.
    Elasticsearch,
}

pub enum RouteAction {
    Proxy(Arc<Service>),
    /// A route to an Elasticsearch service: its own actions (`_bulk`, reads with a body,
    /// cached searches), the rest proxied to its service.
    Elasticsearch(Arc<EsService>),
    Respond(LocalResponse),
    /// A `respond` route with an error status: answered in the flavour the request and route
    /// need, as weir's own errors are (plainly, the configured answer).
    RespondError(PrebuiltError),
    Redirect(LocalResponse),
    Static(StaticSite),
    /// `lua: { content }`: a script answers (boxed: rare beside the others).
    Lua(Box<crate::lua::LuaScript>),
    /// `service` with `cache: NAME`: the cache wraps the proxy action.
    Cached(
        Arc<Service>,
        Arc<crate::actions::cache::store::ResponseCache>,
    ),
}

impl RouteAction {
    /// The service the route proxies to, cached or not.
    pub fn service(&self) -> Option<&Arc<Service>> {
        match self {
            RouteAction::Proxy(service) | RouteAction::Cached(service, _) => Some(service),
            RouteAction::Elasticsearch(es) => Some(&es.service),
            _ => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            RouteAction::Proxy(svc) => proxied_to(svc),
            RouteAction::Elasticsearch(es) => proxied_to(&es.service),
            RouteAction::Cached(svc, cache) => {
                format!("{} through cache `{}`", proxied_to(svc), cache.name)
            }
            RouteAction::Respond(r) | RouteAction::RespondError(PrebuiltError { plain: r, .. }) => {
                format!("respond {} with a {}-byte body", r.status, r.body.len())
            }
            RouteAction::Redirect(r) => {
                let to = r
                    .headers
                    .iter()
                    .find(|(n, _)| n == "location")
                    .map(|(_, v)| v.as_str())
                    .unwrap_or("");
                format!("redirect {} to {to}", r.status)
            }
            RouteAction::Static(site) => {
                format!("serve files from {}", site.config.root.display())
            }
            RouteAction::Lua(script) => script.describe(),
        }
    }
}

/// `proxy to service `NAME` [URL, ...]`, for `describe`.
fn proxied_to(svc: &Service) -> String {
    let servers: Vec<&str> = svc.servers.iter().map(|s| s.url.as_str()).collect();
    format!("proxy to service `{}` [{}]", svc.name, servers.join(", "))
}

impl Runtime {
    /// The worker-wide settings of this snapshot (`worker/`).
    pub fn worker_settings(&self) -> WorkerSettings {
        WorkerSettings {
            timeouts: self.timeouts,
            open_file_cache: self.config.server.open_file_cache,
            graceful_timeout: self.config.server.graceful_timeout,
        }
    }

    /// Compiles `config` for `workers` workers, carrying over from `previous` (the snapshot in
    /// service, on a reload) what keeps its identity.
    pub fn compile(
        config: &Config,
        workers: usize,
        previous: Option<&Runtime>,
    ) -> Result<Runtime, String> {
        let mut carried = Carried::carrying(previous.map(|p| &p.carried));
        let mut services = HashMap::new();
        for svc in &config.services {
            let mut service =
                Service::new(svc, workers, &mut carried.servers, &mut carried.services)?;
            service.authorization = EsService::authorization(svc);
            services.insert(svc.name.as_str(), Arc::new(service));
        }
        let mut elasticsearch = Vec::new();
        let mut es_by_name = HashMap::new();
        for svc in &config.services {
            if let (Some(es), Some(service)) = (&svc.elasticsearch, services.get(svc.name.as_str()))
            {
                let compiled = Arc::new(EsService::new(
                    svc,
                    es,
                    service.clone(),
                    KeptEs {
                        clusters: &mut carried.clusters,
                        spools: &mut carried.spools,
                        search_caches: &mut carried.search_caches,
                    },
                )?);
                es_by_name.insert(svc.name.as_str(), compiled.clone());
                elasticsearch.push(compiled);
            }
        }
        let mut compile = |svc: &weir_config::Service| {
            Service::new(svc, workers, &mut carried.servers, &mut carried.services)
        };
        let lua = crate::lua::LuaProgram::compile(config);
        let mut upstreams = Upstreams {
            services: &services,
            compile: &mut compile,
            lua: lua.as_ref(),
        };
        // Keyed by the whole configuration: a middleware whose keys all stayed the same keeps
        // its state, one with any change starts afresh. One that holds services is built
        // afresh: the services it names may have changed.
        let mut filters: HashMap<&str, Arc<Filter>> = HashMap::new();
        for m in &config.middlewares {
            let mut build = || {
                let filter = Filter::new(&m.name, m.kind.clone(), &mut upstreams);
                filter
                    .map(Arc::new)
                    .map_err(|e| within(&format!("middleware `{}`", m.name), &e))
            };
            let filter = match Filter::holds_services(&m.kind) {
                true => build()?,
                false => {
                    let identity = format!("{} {:?}", m.name, m.kind);
                    carried.filters.try_get(identity, build)?
                }
            };
            filters.insert(m.name.as_str(), filter);
        }
        let mut shared_limits: Vec<(String, Arc<crate::stores::redis::Redis>)> = filters
            .iter()
            .filter_map(|(name, f)| Some((name.to_string(), f.shared_store()?.clone())))
            .collect();
        shared_limits.sort_by(|a, b| a.0.cmp(&b.0));
        // A cache keeps what it stored over a reload while its size and key stay the same.
        let mut caches = HashMap::new();
        for c in &config.caches {
            use crate::actions::cache::store::{ResponseCache, Store};
            let store = carried
                .caches
                .try_get(ResponseCache::store_identity(c), || {
                    Store::new(c.memory, c.disk.as_ref(), workers).map(Arc::new)
                })
                .map_err(|e| format!("cache `{}`: {e}", c.name))?;
            let cache = ResponseCache::new(c, store)
                .map_err(|e| within(&format!("cache `{}`", c.name), &e))?;
            caches.insert(c.name.as_str(), Arc::new(cache));
        }
        let mut routes = Vec::with_capacity(config.routers.len());
        for r in &config.routers {
            let mws: Vec<Arc<Filter>> = r
                .middlewares
                .iter()
                .enumerate()
                .filter_map(|(at, name)| {
                    let shared = filters.get(name.as_str())?;
                    let Some(settings) = shared.breaker_settings() else {
                        return Some(shared.clone());
                    };
                    // The router's own breaker, as Traefik builds one per router. Keyed as the
                    // shared middlewares are, with the router and the place in its list: it
                    // keeps its state over a reload that leaves all of them the same.
                    let key = format!("{} {at} {name} {settings:?}", r.name);
                    let breaker = carried.breakers.get(key, || {
                        let label = format!("router `{}`: circuit breaker `{name}`", r.name);
                        Arc::new(Breaker::new(settings, label))
                    });
                    Some(Arc::new(shared.with_breaker(breaker)))
                })
                .collect();
            let mut error_form = ErrorForm::Plain;
            let action = match &r.action {
                Action::Service(name) => {
                    let service = services
                        .get(name.as_str())
                        .cloned()
                        .ok_or_else(|| format!("router `{}`: unknown service `{name}`", r.name))?;
                    let es = es_by_name.get(name.as_str());
                    if es.is_some() {
                        error_form = ErrorForm::Elasticsearch;
                    }
                    match (r.cache.as_deref().and_then(|c| caches.get(c)), es) {
                        (Some(cache), _) => RouteAction::Cached(service, cache.clone()),
                        (None, Some(es)) => RouteAction::Elasticsearch(es.clone()),
                        (None, None) => RouteAction::Proxy(service),
                    }
                }
                Action::Respond(resp) => {
                    let answer =
                        LocalResponse::new(resp.status, resp.headers.clone(), resp.body.clone());
                    if answer.status >= 400 {
                        RouteAction::RespondError(PrebuiltError::configured(answer))
                    } else {
                        RouteAction::Respond(answer)
                    }
                }
                Action::Redirect(redirect) => {
                    RouteAction::Redirect(LocalResponse::redirect(redirect.status, &redirect.to))
                }
                Action::Static(files) => {
                    let mut site =
                        StaticSite::open(files).map_err(|e| format!("router `{}`: {e}", r.name))?;
                    site.behind_strip_prefix = mws.iter().any(|m| m.strips_prefix());
                    RouteAction::Static(site)
                }
                Action::Lua(_) => {
                    let script = lua
                        .as_ref()
                        .and_then(|program| program.content_script(&r.name));
                    let script = script
                        .ok_or_else(|| format!("router `{}`: its Lua script is missing", r.name))?;
                    RouteAction::Lua(Box::new(script))
                }
            };
            routes.push(Arc::new(Route {
                name: r.name.clone(),
                rule_text: r.rule_text.clone(),
                priority: r.priority,
                has_response_phase: mws.iter().any(|m| m.has_response_phase()),
                buffering_at: mws.iter().position(|m| m.buffering().is_some()),
                watches_outcomes: mws.iter().any(|m| m.watches_outcomes()),
                decodes_grpc_web_text: mws
                    .iter()
                    .any(|m| matches!(m.0, weir_config::MiddlewareKind::GrpcWeb(_))),
                has_error_pages: mws.iter().any(|m| m.answers_error_pages()),
                runs_lua: mws.iter().any(|m| m.runs_lua()),
                logs_lua: mws.iter().any(|m| m.logs_lua()),
                may_exec: mws.iter().any(|m| m.runs_lua()) || matches!(action, RouteAction::Lua(_)),
                filters: mws,
                filter_names: r
                    .middlewares
                    .iter()
                    .filter(|name| filters.contains_key(name.as_str()))
                    .cloned()
                    .collect(),
                action,
                error_form,
                cells: carried
                    .routes
                    .get(r.name.clone(), || Arc::new(PerWorker::new(workers))),
                access_log: r.access_log,
                tracing: config.server.tracing.as_ref().map(|t| {
                    Sampler::new(
                        r.tracing_sample_rate.unwrap_or(t.sample_rate),
                        t.parent_based,
                    )
                }),
            }));
        }
        let tcp_services = l4_routes::compile_services(config, workers, &mut carried)?;
        let udp_services = l4_routes::compile_udp(config, workers, &mut carried)?;
        let mut slots = previous.map(|p| p.slots.clone()).unwrap_or_default();
        for ep in &config.entrypoints {
            if !slots.contains(&ep.name) {
                slots.push(ep.name.clone());
            }
        }
        let mut entrypoints: Vec<Option<EntrypointRuntime>> = slots.iter().map(|_| None).collect();
        for ep in &config.entrypoints {
            let Some(slot) = slots.iter().position(|name| *name == ep.name) else {
                continue;
            };
            let is_udp = ep.transport == Transport::Udp;
            let mine: Vec<_> = config
                .routers
                .iter()
                .zip(&routes)
                .filter(|(r, _)| {
                    !is_udp && (r.entrypoints.is_empty() || r.entrypoints.contains(&ep.name))
                })
                .map(|(r, route)| (r.rule.clone(), r.priority, route.clone()))
                .collect();
            let tls = ep.tls.as_ref().map(server_tls).transpose()?;
            let http3 = http3_runtime(ep, tls.as_ref())?;
            let tcp = match is_udp {
                true => None,
                false => TcpRoutes::compile(config, ep, tls.as_ref(), &tcp_services)?,
            };
            let answers_acme_http01 = config.entrypoints.iter().any(|other| {
                let acme = other.tls.as_ref().and_then(|tls| tls.acme.as_ref());
                acme.filter(|a| a.challenges.contains(&weir_config::AcmeChallenge::Http01))
                    .and_then(|a| a.http_entrypoint.as_ref())
                    .is_some_and(|(name, _)| *name == ep.name)
            });
            entrypoints[slot] = Some(EntrypointRuntime {
                name: ep.name.clone(),
                address: ep.address,
                has_http_routes: !mine.is_empty() || answers_acme_http01,
                answers_acme_http01,
                tls,
                router: Router::new(mine),
                tcp,
                udp: udp_services.get(&ep.name).cloned(),
                h2c: ep.h2c,
                http2: ep.http2,
                access_log: ep.access_log,
                http3,
                alt_svc: None,
                cells: carried
                    .entrypoints
                    .get(ep.name.clone(), || Arc::new(PerWorker::new(workers))),
            });
        }
        let access_log = if config.server.access_log.enabled {
            Some(AccessLog::open(&config.server.access_log)?)
        } else {
            None
        };
        Ok(Runtime {
            config: config.clone(),
            version: previous.map_or(1, |p| p.version + 1),
            slots,
            timeouts: ClientTimeouts {
                idle: config.server.client_idle_timeout,
                body: config.server.client_body_timeout,
                send: config.server.client_send_timeout,
            },
            routes,
            metrics: config.server.metrics,
            metric_labels: config.server.metric_labels,
            shared_limits,
            lua: lua.clone(),
            tcp_services: {
                let mut all: Vec<_> = tcp_services.values().cloned().collect();
                all.sort_by(|a, b| a.balancer.name.cmp(&b.balancer.name));
                all
            },
            udp_services: {
                let mut all: Vec<Arc<UdpService>> = Vec::new();
                for svc in udp_services.values() {
                    if !all.iter().any(|known| Arc::ptr_eq(known, svc)) {
                        all.push(svc.clone());
                    }
                }
                all.sort_by(|a, b| a.balancer.name.cmp(&b.balancer.name));
                all
            },
            caches: {
                let mut all: Vec<_> = caches.values().cloned().collect();
                all.sort_by(|a, b| a.name.cmp(&b.name));
                all
            },
            carried: carried.finish(),
            services: config
                .services
                .iter()
                .filter_map(|s| services.get(s.name.as_str()).cloned())
                .collect(),
            elasticsearch,
            entrypoints,
            access_log,
            request_id: (config.server.request_id.enabled)
                .then(|| config.server.request_id.header.as_str().into()),
        })
    }

    /// The entrypoint in `slot`, unless a reload removed it.
    pub fn entrypoint(&self, slot: usize) -> Option<&EntrypointRuntime> {
        self.entrypoints.get(slot).and_then(Option::as_ref)
    }

    /// The slot of the entrypoint called `name`.
    pub fn slot(&self, name: &str) -> Option<usize> {
        self.slots.iter().position(|n| n == name)
    }

    /// Entrypoint `name` answers HTTP/3 on UDP `port`: with `advertise`, its HTTP/1.1 and
    /// HTTP/2 answers say so (RFC 7838's `Alt-Svc`, kept a day as Caddy and nginx do).
    pub fn advertise_http3(&mut self, name: &str, port: u16) {
        let slot = self.slot(name);
        let ep = slot.and_then(|slot| self.entrypoints.get_mut(slot)?.as_mut());
        if let Some(ep) = ep.filter(|ep| ep.http3.as_ref().is_some_and(|h| h.settings.advertise)) {
            ep.alt_svc = Some(format!("h3=\":{port}\"; ma=86400").into_bytes().into());
        }
    }
}

/// The QUIC side of an `http3` entrypoint, from its TLS settings.
fn http3_runtime(
    ep: &weir_config::Entrypoint,
    tls: Option<&ServerTls>,
) -> Result<Option<Http3Runtime>, String> {
    let (Some(settings), Some(tls)) = (ep.http3, tls) else {
        return Ok(None);
    };
    let server = crate::listen::quic::server_config(tls, &settings)
        .map_err(|e| format!("entrypoint `{}`: {e}", ep.name))?;
    Ok(Some(Http3Runtime { settings, server }))
}
/// `error` about `what`: a placed one (`LINE:COLUMN: message`) keeps its place in front, so
/// that it is reported as `FILE:LINE:COLUMN: what: message`.
fn within(what: &str, error: &str) -> String {
    let placed = error.split_once(": ").filter(|(at, _)| {
        at.split_once(':')
            .is_some_and(|(l, c)| l.parse::<usize>().is_ok() && c.parse::<usize>().is_ok())
    });
    match placed {
        Some((at, message)) => format!("{at}: {what}: {message}"),
        None => format!("{what}: {error}"),
    }
}
