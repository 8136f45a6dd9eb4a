//! What layer-4 routing compiles to, once per configuration and shared by the workers: an
//! entrypoint's TCP routers in the order they are tried (and whether any needs the
//! ClientHello), TCP services with their balancer and connection cap, and the UDP service each
//! UDP entrypoint sends to. The connection handling that uses them is in `tcp.rs` and
//! `udp.rs`.

use crate::listen::client_hello::{Hello, Peeked};
use crate::listen::tls::ServerTls;
use crate::observe::metrics::{L4Cells, PerWorker};
use crate::servers::balancer::Service;
use crate::state::carry::Carried;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_config::rule::{HostPattern, Rule, TcpMatcher};
use weir_config::{Config, Entrypoint, DEFAULT_TLS_HANDSHAKE_TIMEOUT};

/// One entrypoint's TCP routers, in the order they are tried.
pub struct TcpRoutes {
    routes: Vec<TcpRoute>,
    /// Whether some router looks at the ClientHello (else nothing is peeked: protocols whose
    /// server speaks first work).
    pub(crate) needs_hello: bool,
    /// How long a client may take to send its ClientHello.
    pub(crate) hello_timeout: Duration,
}

pub struct TcpRoute {
    pub name: String,
    rule: Rule<TcpMatcher>,
    /// Forward TLS as it is; only TLS connections match.
    pub(crate) passthrough: bool,
    /// The entrypoint's TLS settings when it terminates TLS for this router (only TLS
    /// connections match then), with ALPN limited to the protocols the rule names.
    pub(crate) terminate: Option<Arc<rustls::ServerConfig>>,
    pub(crate) service: Arc<TcpService>,
    /// With `server.tracing`: how its connections are sampled (one span each).
    pub(crate) tracing: Option<crate::http::trace_context::Sampler>,
}

pub struct TcpService {
    pub balancer: Service,
    pub(crate) proxy_protocol: Option<u8>,
    pub(crate) max_connections: Option<usize>,
    /// Connections open through this service, all workers together.
    pub(crate) open: AtomicUsize,
    pub(crate) cells: Arc<PerWorker<L4Cells>>,
}

impl TcpService {
    /// Connections open now, all workers together.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// What its connections counted, summed over the workers.
    pub fn counts(&self) -> &PerWorker<L4Cells> {
        &self.cells
    }
}

/// A connection counted against its service's `max_connections` until dropped.
pub(crate) struct Counted<'s>(&'s AtomicUsize);

impl<'s> Counted<'s> {
    /// `None` when the service already has `max` connections open.
    pub(crate) fn enter(open: &'s AtomicUsize, max: Option<usize>) -> Option<Counted<'s>> {
        let before = open.fetch_add(1, Ordering::Relaxed);
        let counted = Counted(open);
        match max {
            Some(max) if before >= max => None,
            _ => Some(counted),
        }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The TCP services, compiled once per configuration.
pub fn compile_services(
    config: &Config,
    workers: usize,
    carried: &mut Carried,
) -> Result<HashMap<String, Arc<TcpService>>, String> {
    let mut services = HashMap::new();
    for svc in &config.tcp.services {
        services.insert(
            svc.name.clone(),
            Arc::new(TcpService {
                balancer: Service::for_tcp(svc, workers, &mut carried.servers)?,
                proxy_protocol: svc.proxy_protocol,
                max_connections: svc.max_connections,
                open: AtomicUsize::new(0),
                cells: carried.l4.get(format!("tcp {}", svc.name), || {
                    Arc::new(PerWorker::new(workers))
                }),
            }),
        );
    }
    Ok(services)
}

impl TcpRoutes {
    /// The routers of `ep`, or `None` when it has none (no detect phase then).
    pub fn compile(
        config: &Config,
        ep: &Entrypoint,
        tls: Option<&ServerTls>,
        services: &HashMap<String, Arc<TcpService>>,
    ) -> Result<Option<TcpRoutes>, String> {
        let mut mine: Vec<(i64, usize, TcpRoute)> = Vec::new();
        for (order, r) in config.tcp.routers.iter().enumerate() {
            if !(r.entrypoints.is_empty() || r.entrypoints.contains(&ep.name)) {
                continue;
            }
            let service = services.get(&r.service).cloned().ok_or_else(|| {
                format!("tcp router `{}`: unknown service `{}`", r.name, r.service)
            })?;
            let terminate = match (tls, r.passthrough) {
                (Some(tls), false) => {
                    let mut config = (*tls.config).clone();
                    config.alpn_protocols = alpn_named(&r.rule);
                    Some(Arc::new(config))
                }
                _ => None,
            };
            mine.push((
                r.priority,
                order,
                TcpRoute {
                    name: r.name.clone(),
                    rule: r.rule.clone(),
                    passthrough: r.passthrough,
                    terminate,
                    service,
                    tracing: config.server.tracing.as_ref().map(|t| {
                        crate::http::trace_context::Sampler::new(t.sample_rate, t.parent_based)
                    }),
                },
            ));
        }
        if mine.is_empty() {
            return Ok(None);
        }
        mine.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let routes: Vec<TcpRoute> = mine.into_iter().map(|(_, _, r)| r).collect();
        let needs_hello = routes.iter().any(|r| {
            r.passthrough
                || r.terminate.is_some()
                || r.rule.any_matcher(&|m| match m {
                    TcpMatcher::HostSni(HostPattern::Any) | TcpMatcher::ClientIp(_) => false,
                    TcpMatcher::HostSni(_) | TcpMatcher::HostSniRegexp(_) | TcpMatcher::Alpn(_) => {
                        true
                    }
                })
        });
        Ok(Some(TcpRoutes {
            routes,
            needs_hello,
            hello_timeout: tls
                .map(|t| t.handshake_timeout)
                .unwrap_or(DEFAULT_TLS_HANDSHAKE_TIMEOUT),
        }))
    }

    /// The first router matching a connection from `peer` whose first bytes said `peeked`
    /// (`None`: not peeked, as no router needs it).
    pub(crate) fn find(&self, peer: SocketAddr, peeked: Option<&Peeked>) -> Option<&TcpRoute> {
        let hello = match peeked {
            Some(Peeked::Hello(hello)) => Some(hello),
            _ => None,
        };
        let is_tls = hello.is_some() || matches!(peeked, Some(Peeked::Unreadable));
        self.routes.iter().find(|route| {
            if (route.passthrough || route.terminate.is_some()) && !is_tls {
                return false;
            }
            route.rule.eval(&|m| matches(m, peer, hello))
        })
    }
}

fn matches(m: &TcpMatcher, peer: SocketAddr, hello: Option<&Hello>) -> bool {
    let sni = hello.and_then(|h| h.sni.as_deref());
    match m {
        TcpMatcher::HostSni(HostPattern::Any) => true,
        TcpMatcher::HostSni(pattern) => sni.is_some_and(|s| pattern.matches(s)),
        TcpMatcher::HostSniRegexp(re) => sni.is_some_and(|s| re.is_match(s)),
        TcpMatcher::Alpn(p) => hello.is_some_and(|h| h.alpn.iter().any(|a| a == p)),
        TcpMatcher::ClientIp(net) => net.contains(peer.ip()),
    }
}

/// The protocols a rule's `ALPN` matchers name: what a terminating router agrees to.
fn alpn_named(rule: &Rule<TcpMatcher>) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    collect_alpn(rule, &mut names);
    names
}

fn collect_alpn(rule: &Rule<TcpMatcher>, out: &mut Vec<Vec<u8>>) {
    match rule {
        Rule::And(a, b) | Rule::Or(a, b) => {
            collect_alpn(a, out);
            collect_alpn(b, out);
        }
        Rule::Not(_) => {}
        Rule::Match(TcpMatcher::Alpn(p)) => out.push(p.as_bytes().to_vec()),
        Rule::Match(_) => {}
    }
}

pub struct UdpService {
    pub balancer: Service,
    pub(crate) session_timeout: Duration,
    pub(crate) max_sessions: usize,
    pub(crate) cells: Arc<PerWorker<L4Cells>>,
}

impl UdpService {
    /// What its sessions counted, summed over the workers.
    pub fn counts(&self) -> &PerWorker<L4Cells> {
        &self.cells
    }
}

/// The UDP service each UDP entrypoint's router sends to, by entrypoint name.
pub fn compile_udp(
    config: &Config,
    workers: usize,
    carried: &mut Carried,
) -> Result<HashMap<String, Arc<UdpService>>, String> {
    let mut services = HashMap::new();
    for svc in &config.udp.services {
        let tcp_shaped = weir_config::TcpService {
            name: svc.name.clone(),
            servers: svc.servers.clone(),
            load_balancer: svc.load_balancer,
            proxy_protocol: None,
            connect_timeout: Duration::ZERO,
            idle_timeout: svc.session_timeout,
            max_connections: None,
        };
        services.insert(
            svc.name.clone(),
            Arc::new(UdpService {
                balancer: Service::for_tcp(&tcp_shaped, workers, &mut carried.servers)?,
                session_timeout: svc.session_timeout,
                max_sessions: svc.max_sessions,
                cells: carried.l4.get(format!("udp {}", svc.name), || {
                    Arc::new(PerWorker::new(workers))
                }),
            }),
        );
    }
    let mut by_entrypoint = HashMap::new();
    for ep in &config.entrypoints {
        let router = config
            .udp
            .routers
            .iter()
            .find(|r| r.entrypoints.is_empty() || r.entrypoints.contains(&ep.name));
        if let (weir_config::Transport::Udp, Some(router)) = (ep.transport, router) {
            if let Some(svc) = services.get(&router.service) {
                by_entrypoint.insert(ep.name.clone(), svc.clone());
            }
        }
    }
    Ok(by_entrypoint)
}
