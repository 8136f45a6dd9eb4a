//! Upstream services and load balancing: smooth weighted round robin, least connections,
//! weighted random, power of two choices, and a consistent-hash ring. Round-robin cursors are
//! per worker (one padded slot each, never shared); in-flight counts are shared atomics so
//! least_conn and p2c see the whole process.

use crate::http::codec::Head;
use crate::io::kept::Kept;
use crate::observe::metrics::{PerWorker, ServiceCells};
use crate::servers::health::{new_server_state, Padded, ServerState};
use crate::servers::pool::{Pool, UpstreamConn};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weir_config::{
    Balancer, HashKey, HealthCheck, Http2Settings, PassiveHealth, Retry, UpstreamProtocol,
};

#[derive(Debug)]
pub struct Server {
    /// Pool id, in-flight count and health: kept across reloads.
    pub state: Arc<ServerState>,
    pub url: String,
    pub addr: SocketAddr,
    /// `host:port` sent as Host when the client's is not passed through.
    pub authority: String,
    pub weight: u32,
    /// For https:// servers: how to speak TLS to it.
    pub tls: Option<crate::listen::tls::UpstreamTlsTarget>,
}

impl std::ops::Deref for Server {
    type Target = ServerState;

    fn deref(&self) -> &ServerState {
        &self.state
    }
}

#[derive(Debug)]
pub struct Service {
    pub name: String,
    pub servers: Vec<Server>,
    /// HTTP/1.1, or HTTP/2 multiplexed (`upstream_h2.rs`).
    pub protocol: UpstreamProtocol,
    /// With HTTP/2: what weir announces, and the streams it opens per connection.
    pub http2: Http2Settings,
    /// Counters, one set per worker (carried over a reload by name).
    pub cells: Arc<PerWorker<ServiceCells>>,
    policy: Policy,
    pub hash_key: HashKey,
    pub max_idle_per_server: usize,
    pub idle_timeout: Duration,
    /// `timeouts.request`: the whole action, every try included, up to the response head.
    pub request_timeout: Option<Duration>,
    pub connect_timeout: Duration,
    pub response_header_timeout: Duration,
    /// `timeouts.read`: idle time between reads of a response body.
    pub read_timeout: Duration,
    /// `timeouts.write`: idle time while the upstream takes the request.
    pub write_timeout: Duration,
    /// `timeouts.websocket_idle`: idle time of a tunnel after `101` (`None`: the client idle
    /// timeout).
    pub websocket_idle_timeout: Option<Duration>,
    pub pass_host_header: bool,
    pub health_check: Option<HealthCheck>,
    pub passive_health: Option<PassiveHealth>,
    pub retry: Option<Retry>,
    /// The `Authorization` every request to this service's servers carries in place of the
    /// client's, when the route's action sets one (an Elasticsearch service's `auth`:
    /// `EsService::authorization`).
    pub authorization: Option<Box<[u8]>>,
    /// Per-worker cursors for round robin and least_conn tie-breaking.
    cursors: Box<[Padded]>,
}

#[derive(Debug)]
enum Policy {
    /// One period of the smooth weighted round-robin order, as server indexes.
    RoundRobin(Vec<u32>),
    LeastConn,
    /// Cumulative weights for weighted random picks.
    Random(Vec<u32>),
    P2c(Vec<u32>),
    /// Sorted (point, server index) ring.
    ConsistentHash(Vec<(u64, u32)>),
}

/// A server in use by one exchange: counted in flight (for least_conn and p2c) until the
/// exchange finishes, however it ends.
pub struct UpstreamUse<'r> {
    pub server: &'r Server,
    pub service: &'r Service,
    /// How an exchange that failed or was retried went, for the error and access logs
    /// (boxed, and `None` for a first try that got an answer: only those pay for it).
    pub note: Option<Box<TryNote>>,
}

/// An exchange with servers that failed or took more than one try.
pub struct TryNote {
    /// Why it ended in a 502 or 504, for the error line `finish` writes.
    pub failure: Option<FailureNote>,
    /// Tries made (the last one on this server).
    pub tries: usize,
    /// What the server answered; 0 when it did not.
    pub status: u16,
}

/// A failed exchange with a server, as the error log tells it.
pub struct FailureNote {
    pub message: &'static str,
    /// What the system said, or the limit that passed; may be empty.
    pub detail: String,
}

impl<'r> UpstreamUse<'r> {
    pub fn new(server: &'r Server, service: &'r Service) -> UpstreamUse<'r> {
        server.inflight.0.fetch_add(1, Ordering::Relaxed);
        UpstreamUse {
            server,
            service,
            note: None,
        }
    }
}

impl UpstreamUse<'_> {
    /// Returns a connection whose answer was read completely to this server's pool, under
    /// its service's keep-alive settings.
    pub fn check_in(&self, pool: &Pool, conn: UpstreamConn) {
        pool.checkin(
            self.server.id,
            conn,
            self.service.max_idle_per_server,
            self.service.idle_timeout,
        );
    }
}

impl Drop for UpstreamUse<'_> {
    fn drop(&mut self) {
        self.server.inflight.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Policy {
    fn new(balancer: Balancer, servers: &[Server]) -> Policy {
        let weights: Vec<u32> = servers.iter().map(|s| s.weight).collect();
        match balancer {
            Balancer::RoundRobin => Policy::RoundRobin(smooth_weighted_order(&weights)),
            Balancer::LeastConn => Policy::LeastConn,
            Balancer::Random => Policy::Random(cumulative(&weights)),
            Balancer::P2c => Policy::P2c(cumulative(&weights)),
            Balancer::ConsistentHash => Policy::ConsistentHash(hash_ring(servers)),
        }
    }
}

/// The first address `host:port` resolves to (once, at start), else the error `why` says.
fn resolve(host: &str, port: u16, why: impl FnOnce() -> String) -> Result<SocketAddr, String> {
    std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(why)
}

/// Each worker starts its turn at a different server, so requests that land on different
/// workers do not all begin with the first server.
fn cursors(workers: usize) -> Box<[Padded]> {
    (0..workers.max(1))
        .map(|w| Padded(AtomicUsize::new(w)))
        .collect()
}

/// What a balancer may look at when picking.
pub struct PickInput<'a> {
    pub client_ip: IpAddr,
    pub path: &'a str,
    pub headers: &'a Head,
}

impl Service {
    pub fn new(
        cfg: &weir_config::Service,
        workers: usize,
        kept_servers: &mut Kept<ServerState>,
        kept_counters: &mut Kept<PerWorker<ServiceCells>>,
    ) -> Result<Service, String> {
        let client_tls = if cfg.servers.iter().any(|s| s.tls) {
            Some(crate::listen::tls::client_config(&cfg.tls, cfg.protocol)?)
        } else {
            None
        };
        let mut servers = Vec::with_capacity(cfg.servers.len());
        for s in &cfg.servers {
            let addr = resolve(&s.host, s.port, || {
                format!("service `{}`: cannot resolve server `{}`", cfg.name, s.url)
            })?;
            let tls = match (&client_tls, s.tls) {
                (Some(config), true) => Some(crate::listen::tls::UpstreamTlsTarget {
                    config: config.clone(),
                    name: crate::listen::tls::server_name(&cfg.tls, &s.host)?,
                }),
                _ => None,
            };
            let tls_name = tls.as_ref().map(|t| format!("{:?}", t.name));
            // A protocol change makes a new server: its pooled connections speak the old one.
            let protocol = match cfg.protocol {
                UpstreamProtocol::Http1 => "http",
                UpstreamProtocol::Http2 => "h2",
                UpstreamProtocol::H2c => "h2c",
            };
            let tls_name = tls_name.unwrap_or_default();
            let key = format!("{} {protocol} {addr} {tls_name}", cfg.name);
            servers.push(Server {
                state: kept_servers.get(key, new_server_state),
                url: s.url.clone(),
                addr,
                authority: s.authority.clone(),
                weight: s.weight,
                tls,
            });
        }
        Ok(Service {
            name: cfg.name.clone(),
            protocol: cfg.protocol,
            http2: cfg.http2,
            policy: Policy::new(cfg.load_balancer, &servers),
            servers,
            hash_key: cfg.hash_key.clone(),
            max_idle_per_server: cfg.keepalive.max_idle_per_server,
            idle_timeout: cfg.keepalive.idle_timeout,
            request_timeout: cfg.timeouts.request,
            connect_timeout: cfg.timeouts.connect,
            response_header_timeout: cfg.timeouts.response_header,
            read_timeout: cfg.timeouts.read,
            write_timeout: cfg.timeouts.write,
            websocket_idle_timeout: cfg.timeouts.websocket_idle,
            pass_host_header: cfg.pass_host_header,
            authorization: None,
            health_check: cfg.health_check.clone(),
            passive_health: cfg.passive_health,
            retry: cfg.retry.clone(),
            cursors: cursors(workers),
            cells: kept_counters.get(cfg.name.clone(), || Arc::new(PerWorker::new(workers))),
        })
    }

    /// A TCP service's servers and balancer (`tcp.services`): the same policies, hashing on
    /// the client's address; the HTTP settings keep their defaults and are not used.
    pub fn for_tcp(
        cfg: &weir_config::TcpService,
        workers: usize,
        kept_servers: &mut Kept<ServerState>,
    ) -> Result<Service, String> {
        let mut servers = Vec::with_capacity(cfg.servers.len());
        for s in &cfg.servers {
            let addr = resolve(&s.host, s.port, || {
                format!(
                    "tcp service `{}`: cannot resolve server `{}`",
                    cfg.name, s.address
                )
            })?;
            servers.push(Server {
                state: kept_servers.get(format!("{} tcp {addr}", cfg.name), new_server_state),
                url: s.address.clone(),
                addr,
                authority: s.address.clone(),
                weight: s.weight,
                tls: None,
            });
        }
        Ok(Service {
            name: cfg.name.clone(),
            protocol: UpstreamProtocol::Http1,
            http2: Http2Settings::default(),
            policy: Policy::new(cfg.load_balancer, &servers),
            servers,
            hash_key: HashKey::ClientIp,
            max_idle_per_server: 0,
            idle_timeout: cfg.idle_timeout,
            request_timeout: None,
            connect_timeout: cfg.connect_timeout,
            response_header_timeout: cfg.idle_timeout,
            read_timeout: cfg.idle_timeout,
            write_timeout: cfg.idle_timeout,
            websocket_idle_timeout: None,
            pass_host_header: false,
            authorization: None,
            health_check: None,
            passive_health: None,
            retry: None,
            cursors: cursors(workers),
            // Not rendered: TCP services have no HTTP counters.
            cells: Arc::new(PerWorker::new(1)),
        })
    }

    /// Picks a server for a request; `None` when the service has no usable server.
    pub fn pick(&self, worker: usize, input: &PickInput) -> Option<&Server> {
        self.pick_avoiding(worker, input, &[])
    }

    /// Picks a usable server whose id is not in `tried`: the policy's choice, or when that one
    /// is down, ejected or tried already, the next usable one after it.
    pub fn pick_avoiding(
        &self,
        worker: usize,
        input: &PickInput,
        tried: &[usize],
    ) -> Option<&Server> {
        let n = self.servers.len();
        // A retry goes on from the server that failed, without moving the policy's cursor
        // (else round robin would skip a server per retry and send every first try to the
        // same one).
        let after_failed = tried
            .last()
            .and_then(|&id| self.servers.iter().position(|s| s.id == id))
            .map(|i| i + 1);
        let first = match after_failed {
            _ if n <= 1 => 0,
            Some(next) => next,
            None => self.policy_choice(worker, input),
        };
        (0..n)
            .map(|k| &self.servers[(first + k) % n])
            .find(|s| s.health.usable() && !tried.contains(&s.id))
    }

    fn policy_choice(&self, worker: usize, input: &PickInput) -> usize {
        match &self.policy {
            Policy::RoundRobin(order) => order[self.advance(worker) % order.len()] as usize,
            Policy::LeastConn => {
                let n = self.servers.len();
                let start = self.advance(worker);
                let mut best = start % n;
                for k in 1..n {
                    let i = (start + k) % n;
                    if less_loaded(&self.servers[i], &self.servers[best]) {
                        best = i;
                    }
                }
                best
            }
            Policy::Random(cum) => weighted_random(cum),
            Policy::P2c(cum) => {
                let a = weighted_random(cum);
                let mut b = weighted_random(cum);
                if a == b {
                    b = (a + 1 + fastrand::usize(..self.servers.len() - 1)) % self.servers.len();
                }
                if less_loaded(&self.servers[b], &self.servers[a]) {
                    b
                } else {
                    a
                }
            }
            Policy::ConsistentHash(ring) => {
                let key = self.hash_input(input);
                let i = ring.partition_point(|(point, _)| *point < key);
                ring[if i == ring.len() { 0 } else { i }].1 as usize
            }
        }
    }

    fn advance(&self, worker: usize) -> usize {
        let cursor = &self.cursors[worker % self.cursors.len()].0;
        let n = cursor.load(Ordering::Relaxed);
        cursor.store(n.wrapping_add(1), Ordering::Relaxed);
        n
    }

    fn hash_input(&self, input: &PickInput) -> u64 {
        let ip_hash = || match input.client_ip {
            IpAddr::V4(v4) => hash_bytes(&v4.octets()),
            IpAddr::V6(v6) => hash_bytes(&v6.octets()),
        };
        match &self.hash_key {
            HashKey::ClientIp => ip_hash(),
            HashKey::Path => hash_bytes(input.path.as_bytes()),
            HashKey::Header(name) => input
                .headers
                .get(name)
                .map(hash_bytes)
                .unwrap_or_else(ip_hash),
            HashKey::Cookie(name) => input
                .headers
                .get_all("cookie")
                .flat_map(|v| v.split(|&b| b == b';'))
                .find_map(|pair| {
                    let pair = pair.trim_ascii();
                    let (k, v) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
                    (k == name.as_bytes()).then(|| hash_bytes(&v[1..]))
                })
                .unwrap_or_else(ip_hash),
        }
    }
}

/// `a` carries fewer in-flight requests per unit of weight than `b`.
fn less_loaded(a: &Server, b: &Server) -> bool {
    let la = a.inflight.0.load(Ordering::Relaxed) as u64 * u64::from(b.weight);
    let lb = b.inflight.0.load(Ordering::Relaxed) as u64 * u64::from(a.weight);
    la < lb
}

/// One full period of nginx's smooth weighted round robin: weights 5,1,1 give a,a,b,a,c,a,a.
fn smooth_weighted_order(weights: &[u32]) -> Vec<u32> {
    let total: i64 = weights.iter().map(|&w| i64::from(w)).sum();
    let mut current = vec![0i64; weights.len()];
    let mut order = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for (i, &w) in weights.iter().enumerate() {
            current[i] += i64::from(w);
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        order.push(best as u32);
    }
    order
}

fn cumulative(weights: &[u32]) -> Vec<u32> {
    weights
        .iter()
        .scan(0u32, |sum, &w| {
            *sum += w;
            Some(*sum)
        })
        .collect()
}

fn weighted_random(cumulative: &[u32]) -> usize {
    let total = cumulative.last().copied().unwrap_or(1);
    let x = fastrand::u32(..total);
    cumulative.partition_point(|&c| c <= x)
}

/// 160 points per unit of weight, like ketama.
fn hash_ring(servers: &[Server]) -> Vec<(u64, u32)> {
    let mut ring = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        for v in 0..160 * s.weight {
            ring.push((hash_bytes(format!("{}#{v}", s.url).as_bytes()), i as u32));
        }
    }
    ring.sort_unstable();
    ring
}

/// FNV-1a with a final avalanche; stable across processes and workers.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ceb9fe1a85ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smooth_order_interleaves() {
        assert_eq!(smooth_weighted_order(&[5, 1, 1]), vec![0, 0, 1, 0, 2, 0, 0]);
        assert_eq!(smooth_weighted_order(&[2, 1]), vec![0, 1, 0]);
    }

    #[test]
    fn weighted_random_spreads_by_weight() {
        let cum = cumulative(&[3, 1]);
        let hits = (0..40_000).filter(|_| weighted_random(&cum) == 0).count();
        assert!((28_000..32_000).contains(&hits), "{hits}");
    }
}
