//! The detect phase for entrypoints with TCP routers, and the TCP proxy. When a router needs
//! it (SNI, ALPN, TLS passthrough or termination), the ClientHello is peeked without being
//! consumed; routers are tried by priority; the first that matches takes the connection: a
//! server is picked by the service's balancer and connected to (PROXY protocol header first
//! when asked), and bytes go both ways: spliced as they are, or decrypted first when the
//! entrypoint terminates TLS for this router. A connection no TCP router takes goes on to
//! HTTP routing, as in Traefik.

use crate::balancer::{PickInput, Service, UpstreamUse};
use crate::codec::Head;
use crate::conn::watch::{ConnWatch, Expired, Waiting};
use crate::l4::client_hello::{self, Hello, Peeked, MAX_HELLO_BYTES};
use crate::l4::proxy_protocol;
use crate::l4::relay::{self, Idle};
use crate::tls::ServerTls;
use crate::worker::Worker;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use weir_config::rule::{HostPattern, Rule, TcpMatcher};
use weir_config::{Config, Entrypoint, DEFAULT_TLS_HANDSHAKE_TIMEOUT};

/// One entrypoint's TCP routers, in the order they are tried.
pub struct TcpRoutes {
    routes: Vec<TcpRoute>,
    /// Whether some router looks at the ClientHello (else nothing is peeked: protocols whose
    /// server speaks first work).
    needs_hello: bool,
    /// How long a client may take to send its ClientHello.
    hello_timeout: Duration,
}

pub struct TcpRoute {
    pub name: String,
    rule: Rule<TcpMatcher>,
    /// Forward TLS as it is; only TLS connections match.
    passthrough: bool,
    /// The entrypoint's TLS settings when it terminates TLS for this router (only TLS
    /// connections match then), with ALPN limited to the protocols the rule names.
    terminate: Option<Arc<rustls::ServerConfig>>,
    service: Arc<TcpService>,
}

pub struct TcpService {
    pub balancer: Service,
    proxy_protocol: Option<u8>,
    max_connections: Option<usize>,
    /// Connections open through this service, all workers together.
    open: AtomicUsize,
}

/// A connection counted against its service's `max_connections` until dropped.
struct Counted<'s>(&'s AtomicUsize);

impl<'s> Counted<'s> {
    /// `None` when the service already has `max` connections open.
    fn enter(open: &'s AtomicUsize, max: Option<usize>) -> Option<Counted<'s>> {
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
) -> Result<HashMap<String, Arc<TcpService>>, String> {
    let mut services = HashMap::new();
    for svc in &config.tcp.services {
        services.insert(
            svc.name.clone(),
            Arc::new(TcpService {
                balancer: Service::for_tcp(svc, workers)?,
                proxy_protocol: svc.proxy_protocol,
                max_connections: svc.max_connections,
                open: AtomicUsize::new(0),
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
    fn find(&self, peer: SocketAddr, peeked: Option<&Peeked>) -> Option<&TcpRoute> {
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

/// The detect phase of an entrypoint with TCP routers: the connection is proxied if a router
/// takes it (and `None` returned), handed back for HTTP otherwise (`Some`), or closed (`None`)
/// when it sent no usable start in time or nothing on the entrypoint serves it.
pub async fn serve(
    worker: &Rc<Worker>,
    entrypoint: usize,
    io: TcpStream,
    peer: SocketAddr,
) -> Option<TcpStream> {
    let config = worker.config.load_full();
    let ep = &config.entrypoints[entrypoint];
    let routes = ep.tcp.as_ref()?;
    let watch = worker.watch_connection();
    let peeked = if routes.needs_hello {
        let peek = peek_hello(&io);
        match watch
            .within(
                &worker.clock,
                Waiting::Handshake,
                routes.hello_timeout,
                peek,
            )
            .await
        {
            Ok(Ok(peeked)) => Some(peeked),
            // Closed, reset, or silent for too long.
            Ok(Err(_)) | Err(Expired) => return None,
        }
    } else {
        None
    };
    let Some(route) = routes.find(peer, peeked.as_ref()) else {
        return ep.has_http_routes.then_some(io);
    };
    proxy(worker, route, io, peer, &watch).await;
    None
}

/// Peeks until the first bytes say whether this is TLS and, if so, the whole ClientHello is
/// there. Waits for more bytes when what arrived is incomplete (a hello in many segments).
async fn peek_hello(io: &TcpStream) -> std::io::Result<Peeked> {
    let mut buf = vec![0u8; MAX_HELLO_BYTES];
    let mut seen = 0;
    loop {
        io.readable().await?;
        let peeked = io.try_io(Interest::READABLE, || {
            let (_, n) = rustix::net::recv(io, &mut buf[..], rustix::net::RecvFlags::PEEK)
                .map_err(std::io::Error::from)?;
            // Nothing new since the last look: wait for the next segment.
            if n == seen && n > 0 && n < buf.len() {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match peeked {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                seen = n;
                match client_hello::parse(&buf[..n]) {
                    Peeked::Incomplete => continue,
                    done => return Ok(done),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

async fn proxy(
    worker: &Rc<Worker>,
    route: &TcpRoute,
    io: TcpStream,
    peer: SocketAddr,
    watch: &ConnWatch,
) {
    let Some(_counted) = Counted::enter(&route.service.open, route.service.max_connections) else {
        // At the cap: closed at once, as nginx's limit_conn does.
        return;
    };
    let balancer = &route.service.balancer;
    let no_headers = Head::default();
    let input = PickInput {
        client_ip: peer.ip(),
        path: "",
        headers: &no_headers,
    };
    let Some(server) = balancer.pick(worker.id, &input) else {
        return;
    };
    let _in_use = UpstreamUse::new(server, balancer);
    let connecting = TcpStream::connect(server.addr);
    let mut upstream = match watch
        .within(
            &worker.clock,
            Waiting::Connect,
            balancer.connect_timeout,
            connecting,
        )
        .await
    {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(e)) => {
            eprintln!(
                "weir: tcp router `{}`: cannot connect to {}: {e}",
                route.name, server.url
            );
            return;
        }
        Err(Expired) => {
            eprintln!(
                "weir: tcp router `{}`: connecting to {} timed out",
                route.name, server.url
            );
            return;
        }
    };
    let _ = upstream.set_nodelay(true);
    if let Some(version) = route.service.proxy_protocol {
        let local = io.local_addr().unwrap_or(peer);
        let header = proxy_protocol::header(version, peer, local);
        if upstream.write_all(&header).await.is_err() {
            return;
        }
    }
    let idle = Idle {
        watch,
        clock: &worker.clock,
        limit: balancer.idle_timeout,
    };
    match &route.terminate {
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.clone());
            let handshake = acceptor.accept(io);
            let limit = DEFAULT_TLS_HANDSHAKE_TIMEOUT;
            let Ok(Ok(mut client)) = watch
                .within(&worker.clock, Waiting::Handshake, limit, handshake)
                .await
            else {
                return;
            };
            let _ = relay::copy_both(&mut client, &mut upstream, idle).await;
        }
        None => {
            let _ = relay::splice_both(&io, &upstream, &worker.buffers, idle).await;
        }
    }
}
