//! The compiled configuration snapshot: per-entrypoint routers over shared routes, services
//! with their balancers, middlewares. Built once per (re)load off the hot path and read
//! through an `ArcSwap` by every worker.

use crate::accesslog::AccessLog;
use crate::balancer::Service;
use crate::filter::Filter;
use crate::l4::routes::{self, TcpRoutes, UdpService};
use crate::reply::LocalResponse;
use crate::router::Router;
use crate::static_files::StaticSite;
use crate::tls::{server_tls, ServerTls};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use weir_config::{Action, Config, Transport};

pub struct Runtime {
    pub entrypoints: Vec<EntrypointRuntime>,
    /// Every HTTP service (for the control thread's health checks).
    pub services: Vec<Arc<Service>>,
    pub access_log: Option<AccessLog>,
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
}

pub struct Route {
    pub name: String,
    pub rule_text: String,
    pub priority: i64,
    /// The route's middlewares, in order.
    pub filters: Vec<Arc<Filter>>,
    /// True when some filter has a response-head phase.
    pub has_response_phase: bool,
    pub action: RouteAction,
}

pub enum RouteAction {
    Proxy(Arc<Service>),
    Respond(LocalResponse),
    Redirect(LocalResponse),
    Static(StaticSite),
}

impl RouteAction {
    pub fn describe(&self) -> String {
        match self {
            RouteAction::Proxy(svc) => {
                let servers: Vec<&str> = svc.servers.iter().map(|s| s.url.as_str()).collect();
                format!("proxy to service `{}` [{}]", svc.name, servers.join(", "))
            }
            RouteAction::Respond(r) => {
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
        }
    }
}

impl Runtime {
    pub fn compile(config: &Config, workers: usize) -> Result<Runtime, String> {
        let mut services = HashMap::new();
        for svc in &config.services {
            services.insert(svc.name.as_str(), Arc::new(Service::new(svc, workers)?));
        }
        let filters: HashMap<&str, Arc<Filter>> = config
            .middlewares
            .iter()
            .map(|m| (m.name.as_str(), Arc::new(Filter(m.kind.clone()))))
            .collect();
        let mut routes = Vec::with_capacity(config.routers.len());
        for r in &config.routers {
            let mws: Vec<Arc<Filter>> = r
                .middlewares
                .iter()
                .filter_map(|name| filters.get(name.as_str()).cloned())
                .collect();
            let action = match &r.action {
                Action::Service(name) => RouteAction::Proxy(
                    services
                        .get(name.as_str())
                        .cloned()
                        .ok_or_else(|| format!("router `{}`: unknown service `{name}`", r.name))?,
                ),
                Action::Respond(resp) => RouteAction::Respond(LocalResponse::new(
                    resp.status,
                    resp.headers.clone(),
                    resp.body.clone(),
                )),
                Action::Redirect(redirect) => {
                    RouteAction::Redirect(LocalResponse::redirect(redirect.status, &redirect.to))
                }
                Action::Static(files) => RouteAction::Static(
                    StaticSite::open(files).map_err(|e| format!("router `{}`: {e}", r.name))?,
                ),
            };
            routes.push(Arc::new(Route {
                name: r.name.clone(),
                rule_text: r.rule_text.clone(),
                priority: r.priority,
                has_response_phase: mws.iter().any(|m| m.has_response_phase()),
                filters: mws,
                action,
            }));
        }
        let tcp_services = routes::compile_services(config, workers)?;
        let udp_services = routes::compile_udp(config, workers)?;
        let entrypoints = config
            .entrypoints
            .iter()
            .map(|ep| {
                let mine = config
                    .routers
                    .iter()
                    .zip(&routes)
                    .filter(|(r, _)| r.entrypoints.is_empty() || r.entrypoints.contains(&ep.name))
                    .map(|(r, route)| (r.rule.clone(), r.priority, route.clone()))
                    .collect();
                let is_udp = ep.transport == Transport::Udp;
                let tls = ep.tls.as_ref().map(server_tls).transpose()?;
                let tcp = match is_udp {
                    true => None,
                    false => TcpRoutes::compile(config, ep, tls.as_ref(), &tcp_services)?,
                };
                let mine: Vec<_> = if is_udp { Vec::new() } else { mine };
                Ok(EntrypointRuntime {
                    name: ep.name.clone(),
                    address: ep.address,
                    has_http_routes: !mine.is_empty(),
                    tls,
                    router: Router::new(mine),
                    tcp,
                    udp: udp_services.get(&ep.name).cloned(),
                })
            })
            .collect::<Result<_, String>>()?;
        let access_log = if config.server.access_log.enabled {
            Some(AccessLog::open(
                &config.server.access_log.path,
                config.server.access_log.format,
            )?)
        } else {
            None
        };
        Ok(Runtime {
            services: config
                .services
                .iter()
                .filter_map(|s| services.get(s.name.as_str()).cloned())
                .collect(),
            entrypoints,
            access_log,
        })
    }
}
