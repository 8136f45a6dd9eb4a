//! The validated configuration model: what the rest of weir consumes. Everything here has
//! already been checked (references resolve, values in range), so consumers never re-validate.

use crate::rule::{Rule, TcpMatcher};
use crate::yaml::Pos;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Config {
    pub server: Server,
    pub entrypoints: Vec<Entrypoint>,
    pub routers: Vec<Router>,
    pub services: Vec<Service>,
    pub middlewares: Vec<Middleware>,
    /// Routers and services for raw TCP connections (`tcp:`).
    pub tcp: TcpConfig,
    /// Routers and services for UDP datagrams (`udp:`).
    pub udp: UdpConfig,
    /// Shared response caches (`caches:`), named by routers.
    pub caches: Vec<Cache>,
    /// Where more of the configuration comes from (`providers:`).
    pub providers: Providers,
    /// The instance-wide `lua:` block, when present or when a route uses Lua.
    pub lua: Option<LuaSettings>,
}

/// Stores the dynamic sections also come from (`providers:`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Providers {
    pub etcd: Option<EtcdProvider>,
}

/// `providers.etcd`: a YAML document of dynamic sections at `key`, merged with the file's
/// own and watched for changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdProvider {
    /// `host:port`, `http://host:port` or `https://host:port` of etcd members, tried in order.
    pub endpoints: Vec<String>,
    /// The key holding the document (`/weir/dynamic` by default).
    pub key: String,
    /// For etcd's authentication (both or neither).
    pub username: String,
    pub password: String,
    /// Where the last good document is kept, to serve from when etcd is away at start.
    pub cache_file: Option<std::path::PathBuf>,
    /// TLS settings for `https://` endpoints (the system's roots when absent).
    pub tls: Option<UpstreamTls>,
}

/// A shared response cache (`caches.NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    pub name: String,
    /// Bytes of stored responses (heads and bodies) kept in memory, across all workers.
    pub memory: u64,
    /// Larger responses are passed on without being stored.
    pub max_object_size: u64,
    /// What the primary key is made of (`Vary`'d request fields are added per response).
    pub key: Vec<CacheKeyPart>,
    /// How long a request for a key another request is fetching waits for that answer
    /// before it goes to the origin itself.
    pub lock_timeout: Duration,
    /// Client networks that may send `PURGE` (none: `PURGE` is refused).
    pub purge_allow: Vec<crate::rule::Cidr>,
    /// Where an accepted `PURGE` is published for the fleet's other instances, which apply it
    /// too (`purge.fanout.redis`).
    pub purge_fanout: Option<RedisStore>,
    /// The second tier on disk, which outlives restarts.
    pub disk: Option<CacheDisk>,
}

/// `caches.NAME.disk`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheDisk {
    /// The folder (relative paths are from the config file's folder).
    pub path: PathBuf,
    /// Bytes of files kept; the oldest written leave first.
    pub size: u64,
}

pub const DEFAULT_CACHE_DISK_SIZE: u64 = 1 << 30;

pub const DEFAULT_CACHE_MEMORY: u64 = 256 << 20;
pub const DEFAULT_CACHE_MAX_OBJECT: u64 = 8 << 20;
pub const DEFAULT_CACHE_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKeyPart {
    Method,
    Scheme,
    Host,
    Path,
    Query,
}

impl CacheKeyPart {
    pub const DEFAULT: [CacheKeyPart; 4] = [
        CacheKeyPart::Method,
        CacheKeyPart::Host,
        CacheKeyPart::Path,
        CacheKeyPart::Query,
    ];
}

#[derive(Debug, Clone, Default)]
pub struct UdpConfig {
    pub routers: Vec<UdpRouter>,
    pub services: Vec<UdpService>,
}

/// A UDP router: every datagram on its entrypoints goes to its service (UDP has nothing to
/// match on; one router per entrypoint).
#[derive(Debug, Clone)]
pub struct UdpRouter {
    pub name: String,
    /// Empty means every UDP entrypoint.
    pub entrypoints: Vec<String>,
    pub service: String,
}

#[derive(Debug, Clone)]
pub struct UdpService {
    pub name: String,
    pub servers: Vec<TcpServer>,
    pub load_balancer: Balancer,
    /// A client's session (its upstream socket and server) ends after this long without a
    /// datagram either way.
    pub session_timeout: Duration,
    /// Sessions kept per worker; when full, the oldest ends first.
    pub max_sessions: usize,
}

#[derive(Debug, Clone, Default)]
pub struct TcpConfig {
    pub routers: Vec<TcpRouter>,
    pub services: Vec<TcpService>,
}

/// A TCP router: connections on its entrypoints whose ClientHello (or client address) match
/// its rule go to its service as bytes, before any HTTP routing.
#[derive(Debug, Clone)]
pub struct TcpRouter {
    pub name: String,
    pub pos: Pos,
    /// Empty means every TCP entrypoint.
    pub entrypoints: Vec<String>,
    pub rule_text: String,
    pub rule: Rule<TcpMatcher>,
    pub priority: i64,
    /// `tls.passthrough`: forward the TLS bytes as they are. Otherwise a TLS entrypoint
    /// terminates TLS and forwards the plaintext, and a plain one forwards the bytes.
    pub passthrough: bool,
    pub service: String,
}

#[derive(Debug, Clone)]
pub struct TcpService {
    pub name: String,
    pub servers: Vec<TcpServer>,
    pub load_balancer: Balancer,
    /// A PROXY protocol header (version 1 or 2) sent to the server before the client's bytes.
    pub proxy_protocol: Option<u8>,
    pub connect_timeout: Duration,
    /// A connection with no byte in either direction for this long is closed.
    pub idle_timeout: Duration,
    /// Connections open at once through this service (all workers); more are closed at once.
    pub max_connections: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct TcpServer {
    /// `host:port` as written.
    pub address: String,
    pub host: String,
    pub port: u16,
    pub weight: u32,
}

/// What an entrypoint's socket carries (`address: ":5353/udp"`; `/tcp` is the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

#[derive(Debug, Clone)]
pub struct Server {
    /// `None` means `auto`: one worker per available core.
    pub workers: Option<usize>,
    pub graceful_timeout: Duration,
    /// How long a client connection may wait for (or dribble) a request head.
    pub client_idle_timeout: Duration,
    /// How long a request body may go without a byte arriving (408 while nothing was answered).
    pub client_body_timeout: Duration,
    /// How long a write to the client may wait for it to read (then the connection closes).
    pub client_send_timeout: Duration,
    pub access_log: AccessLog,
    /// `server.request_id`: requests carry an id, the client's or a new one.
    pub request_id: RequestId,
    /// weir's own log (`server.log`).
    pub log: ServerLog,
    /// The admin listener (`/metrics`), when configured.
    pub admin: Option<Admin>,
    pub open_file_cache: OpenFileCache,
    /// Where the running process writes its pid (for `weir reload` and init scripts).
    pub pid_file: Option<std::path::PathBuf>,
    /// Whether exchanges are counted by router and service and timed (entrypoint counts are
    /// always kept).
    pub metrics: bool,
    /// Labels the per-router and per-service answer counts carry beyond the status class
    /// (`server.metrics.labels`).
    pub metric_labels: MetricLabels,
    /// OpenTelemetry tracing (`server.tracing`), when configured.
    pub tracing: Option<Tracing>,
}

/// `server.metrics.labels`: answers counted by exact status code and by method, instead of
/// only by status class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetricLabels {
    pub code: bool,
    pub method: bool,
}

impl MetricLabels {
    pub fn any(self) -> bool {
        self.code || self.method
    }
}

/// The open-file cache of `static` routes, per worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileCache {
    /// Entries (open files and misses) kept per worker.
    pub max: usize,
    /// How long an entry is used before the file is looked up again.
    pub valid: Duration,
}

impl Default for OpenFileCache {
    fn default() -> OpenFileCache {
        OpenFileCache {
            max: 16384,
            valid: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    pub address: std::net::SocketAddr,
    /// Bearer token required for everything but `/metrics`.
    pub token: Option<String>,
    /// Whether `/metrics` needs the token too.
    pub token_for_metrics: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AccessLog {
    pub enabled: bool,
    pub format: LogFormat,
    pub path: LogTarget,
    /// The share of requests logged, 0 to 1 (answers of 500 and above always are).
    pub sample: f64,
}

/// How an access log line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// nginx's `combined`.
    Combined,
}

/// `server.request_id`: each request carries an id (the client's when valid, else a new one),
/// sent upstream, back to the client and into the access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId {
    pub enabled: bool,
    /// The header that carries it, lower case.
    pub header: String,
}

impl Default for RequestId {
    fn default() -> RequestId {
        RequestId {
            enabled: false,
            header: "x-request-id".into(),
        }
    }
}

/// `server.log`: weir's own lines (starting, reloads, failures), not requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLog {
    /// The least severe level written.
    pub level: LogLevel,
    pub format: ServerLogFormat,
    pub path: LogTarget,
}

impl Default for ServerLog {
    fn default() -> ServerLog {
        ServerLog {
            level: LogLevel::Info,
            format: ServerLogFormat::Text,
            path: LogTarget::Stderr,
        }
    }
}

/// A log line's severity, most severe first (a level lets through itself and those before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

impl LogLevel {
    pub const NAMES: &'static str = "error, warn, info, debug";

    pub const ALL: [LogLevel; 4] = [
        LogLevel::Error,
        LogLevel::Warn,
        LogLevel::Info,
        LogLevel::Debug,
    ];

    pub fn parse(name: &str) -> Option<LogLevel> {
        LogLevel::ALL.into_iter().find(|level| level.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

/// How a `server.log` line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerLogFormat {
    /// `TIME LEVEL TARGET: message`.
    Text,
    /// One JSON object per line: `time`, `level`, `target`, `message`.
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    Stdout,
    Stderr,
    File(PathBuf),
}

#[derive(Debug, Clone)]
pub struct Entrypoint {
    pub name: String,
    pub address: SocketAddr,
    /// Where `address` is written, for errors that name it.
    pub pos: crate::yaml::Pos,
    pub transport: Transport,
    /// TLS termination on this entrypoint.
    pub tls: Option<EntrypointTls>,
    /// Cleartext HTTP/2 with prior knowledge beside HTTP/1.1 (the connection preface decides).
    pub h2c: bool,
    /// HTTP/2 settings, for `h2` (TLS) and `h2c` connections.
    pub http2: Http2Settings,
    /// `http3: { enabled: true, .. }` on a TLS entrypoint: HTTP/3 over QUIC on its port.
    pub http3: Option<Http3Settings>,
    /// `access_log: false`: requests on this entrypoint get no access-log line.
    pub access_log: bool,
}

/// HTTP/3 over QUIC on a TLS entrypoint's port (UDP), with its certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http3Settings {
    /// `Alt-Svc: h3=":PORT"` on the entrypoint's HTTP/1.1 and HTTP/2 answers.
    pub advertise: bool,
    /// Bidirectional streams a client may have open at once.
    pub max_concurrent_streams: u32,
    /// Per stream; the connection's window is four times this.
    pub initial_window_size: u32,
    /// A connection with no packet for this long is closed.
    pub idle_timeout: Duration,
    /// Accept 0-RTT (early, replayable) data from resuming clients.
    pub zero_rtt: bool,
    /// Past this many QUIC handshakes in progress on a worker, a new client must prove its
    /// address with a Retry token first (0: always).
    pub retry_above: u32,
}

impl Default for Http3Settings {
    fn default() -> Http3Settings {
        Http3Settings {
            advertise: true,
            max_concurrent_streams: 100,
            initial_window_size: 1 << 20,
            idle_timeout: Duration::from_secs(30),
            zero_rtt: false,
            retry_above: 128,
        }
    }
}

/// What weir announces to HTTP/2 clients in its SETTINGS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Settings {
    pub max_concurrent_streams: u32,
    /// Per stream; the connection's window is four times this.
    pub initial_window_size: u32,
    pub max_frame_size: u32,
    /// The largest decoded header block accepted (HPACK bombs stop here).
    pub max_header_list_size: u32,
}

impl Default for Http2Settings {
    fn default() -> Http2Settings {
        Http2Settings {
            max_concurrent_streams: 128,
            initial_window_size: 1 << 20,
            max_frame_size: 1 << 14,
            max_header_list_size: 32 << 10,
        }
    }
}

#[derive(Debug, Clone)]
pub struct EntrypointTls {
    /// Served by SNI against each certificate's own names; at least one.
    pub certificates: Vec<CertificateFiles>,
    /// Served when the client sends no SNI or no certificate matches; default the first.
    pub default_certificate: Option<CertificateFiles>,
    pub min_version: TlsVersion,
    /// ALPN protocols offered, in order of preference.
    pub alpn: Vec<String>,
    /// How long a client may take to complete the handshake.
    pub handshake_timeout: Duration,
    /// `acme`: certificates obtained and renewed from an ACME CA (then `certificates` may be
    /// empty).
    pub acme: Option<Acme>,
    pub pos: Pos,
}

/// `entrypoints.NAME.tls.acme` (RFC 8555).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acme {
    /// The account's contact, sent as `mailto:EMAIL`; none when absent.
    pub email: Option<String>,
    /// The CA's directory URL.
    pub directory: String,
    /// A PEM file of roots to trust for the directory (the system's when absent).
    pub ca: Option<PathBuf>,
    /// Names to obtain certificates for, lowercased.
    pub domains: Vec<String>,
    /// Also the names of this entrypoint's routers' `Host` rules.
    pub from_rules: bool,
    /// The challenges offered to the CA, in order of preference.
    pub challenges: Vec<AcmeChallenge>,
    /// The entrypoint answering HTTP-01 (needed with `http-01`), and where it is written.
    pub http_entrypoint: Option<(String, Pos)>,
    pub key_type: AcmeKeyType,
    /// Renew this long before expiry; a third of the certificate's lifetime when absent.
    pub renew_before: Option<Duration>,
    /// The folder of the account key and certificates.
    pub storage: PathBuf,
    /// `storage: { redis }`: kept in Redis instead of `storage`, shared by the fleet.
    pub storage_redis: Option<RedisStore>,
    /// `storage: { etcd }`: kept in etcd instead, shared by the fleet; its `key` is the
    /// `key_prefix` of the ACME keys (`/weir/` by default), its `cache_file` unused.
    pub storage_etcd: Option<EtcdProvider>,
    pub pos: Pos,
}

pub const DEFAULT_ACME_DIRECTORY: &str = "https://acme-v02.api.letsencrypt.org/directory";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeChallenge {
    TlsAlpn01,
    Http01,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcmeKeyType {
    EcdsaP256,
    /// Made by the `rsa` crate (ring cannot generate RSA keys), signed with by ring.
    Rsa2048,
}

/// A PEM certificate chain and its private key, as written in the config (paths resolved
/// against the config file's folder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Where the pair is written, for errors about the files.
    pub pos: Pos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    V1_2,
    V1_3,
}

#[derive(Debug, Clone)]
pub struct Router {
    pub name: String,
    pub pos: Pos,
    /// Empty means every entrypoint.
    pub entrypoints: Vec<String>,
    pub rule_text: String,
    pub rule: Rule,
    pub priority: i64,
    pub middlewares: Vec<String>,
    pub action: Action,
    /// `cache: NAME`: the `service` action's answers go through this cache.
    pub cache: Option<String>,
    /// `access_log: false`: this router's requests get no access-log line.
    pub access_log: bool,
    /// `tracing: { sample_rate }`: this router's share of new traces, over `server.tracing`'s.
    pub tracing_sample_rate: Option<f64>,
}

#[derive(Debug, Clone)]
pub enum Action {
    Service(String),
    Respond(Respond),
    Redirect(Redirect),
    Static(StaticFiles),
    /// `lua: { content }`: the script answers (lua-nginx-module's `content_by_lua`).
    Lua(LuaCode),
}

/// The `static` action: files under `root`.
#[derive(Debug, Clone)]
pub struct StaticFiles {
    /// Absolute, or relative to the config file's folder.
    pub root: std::path::PathBuf,
    /// Tried in order for a directory.
    pub index: Vec<String>,
    /// Serve `file.br` / `file.zst` / `file.gz` beside `file` when the client accepts it.
    pub precompressed: bool,
    /// List a directory without an index (else 403).
    pub autoindex: bool,
    /// Follow symlinks wherever they lead (else only those staying under `root`).
    pub follow_symlinks: bool,
    /// Serve names starting with `.` (else 404).
    pub dotfiles: bool,
    pub cache_control: Option<String>,
    /// A file under `root` sent with status 404 when nothing matches.
    pub not_found: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Respond {
    pub status: u16,
    pub body: String,
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
pub struct Redirect {
    pub to: String,
    pub status: u16,
}

#[derive(Debug, Clone)]
pub struct Service {
    pub name: String,
    /// What the servers are spoken to in.
    pub protocol: UpstreamProtocol,
    /// With HTTP/2: the settings weir announces to the servers; `max_concurrent_streams` caps
    /// the streams weir opens on one connection before it opens another.
    pub http2: Http2Settings,
    pub servers: Vec<UpstreamServer>,
    pub load_balancer: Balancer,
    pub hash_key: HashKey,
    pub keepalive: Keepalive,
    pub timeouts: Timeouts,
    pub pass_host_header: bool,
    /// How `https://` servers are verified and spoken to.
    pub tls: UpstreamTls,
    /// Active checks from the control thread (`health_check`).
    pub health_check: Option<HealthCheck>,
    /// Ejecting a server after failures seen by requests (`passive_health`).
    pub passive_health: Option<PassiveHealth>,
    /// Trying another server when one fails (`retry`).
    pub retry: Option<Retry>,
    /// `elasticsearch:` instead of `servers`: the hosts are seeds, and the cluster's nodes are
    /// found and kept up to date (`servers` then holds the seeds).
    pub elasticsearch: Option<Elasticsearch>,
}

/// `services.NAME.elasticsearch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elasticsearch {
    /// Finding the nodes from `GET _nodes/http`; `None` when `discovery.enabled: false`.
    pub discovery: Option<EsDiscovery>,
    /// How `_bulk` requests are read and sent on.
    pub bulk: EsBulk,
    /// Where `_bulk` writes wait while the cluster cannot take them; `None`: not at all.
    pub spool: Option<EsSpool>,
    /// The `Authorization` value every request to the cluster carries (`auth.basic` or
    /// `auth.api_key`), in place of any the client sent; `None`: the client's passes as is.
    pub authorization: Option<String>,
    /// `_search` answers kept for `ttl`; `None`: not at all.
    pub search_cache: Option<EsSearchCache>,
}

/// `services.NAME.elasticsearch.search_cache`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EsSearchCache {
    /// How long an answer is served from memory.
    pub ttl: std::time::Duration,
    /// The most answers kept (the least used go first).
    pub max_entries: u64,
    /// Larger answers are relayed, not kept.
    pub max_entry_size: u64,
}

pub const DEFAULT_ES_SEARCH_CACHE_ENTRIES: u64 = 10_000;
pub const DEFAULT_ES_SEARCH_CACHE_ENTRY_SIZE: u64 = 1 << 20;

/// `services.NAME.elasticsearch.spool`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EsSpool {
    /// The folder of the queue's files (relative to the config file's folder).
    pub path: std::path::PathBuf,
    /// The most the queue holds; a write that would pass it is refused (503).
    pub max_size: u64,
    /// `fsync: batch` (the default): a write is answered once it is on disk, the writes that
    /// arrived meanwhile synced together. `never`: once the OS has it.
    pub fsync: bool,
}

pub const DEFAULT_ES_SPOOL_SIZE: u64 = 10 << 30;

/// `services.NAME.elasticsearch.bulk`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EsBulk {
    /// Where the items go.
    pub route: BulkRoute,
    /// The largest body accepted (after `Content-Encoding: gzip` is undone); larger gets 413.
    pub max_body: u64,
    /// Concurrent bulks' parts for the same node go as one request while one is in flight.
    pub batch: bool,
}

impl Default for EsBulk {
    fn default() -> Self {
        EsBulk {
            route: BulkRoute::Node,
            max_body: 100 << 20,
            batch: true,
        }
    }
}

/// `bulk.route`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkRoute {
    /// Items are split by the node holding their primary shard and sent there concurrently.
    Node,
    /// The body is checked, then sent whole to one node (balanced).
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EsDiscovery {
    /// How often the nodes are asked for again.
    pub refresh: Duration,
    /// Only nodes with one of these roles serve (empty: every node with HTTP).
    pub roles: Vec<String>,
}

pub const DEFAULT_ES_REFRESH: Duration = Duration::from_secs(30);

/// Active health checks: `GET path` to every server of the service every `interval`.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive passes that bring a down server back.
    pub healthy_threshold: u32,
    /// Consecutive failures that take a server out.
    pub unhealthy_threshold: u32,
    /// Statuses that pass, inclusive ranges (default 200-399).
    pub expect_status: Vec<(u16, u16)>,
    pub headers: Vec<(String, String)>,
}

/// Passive checks: `max_failures` failures (connect errors, resets, 502/503/504 from the
/// server) within `window` eject the server for `eject`.
#[derive(Debug, Clone, Copy)]
pub struct PassiveHealth {
    pub max_failures: u32,
    pub window: Duration,
    pub eject: Duration,
}

/// What a failed try may be retried on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOn {
    ConnectFailure,
    Reset,
    Status(u16),
}

#[derive(Debug, Clone)]
pub struct Retry {
    /// Tries in all, the first included.
    pub attempts: u32,
    pub on: Vec<RetryOn>,
    /// Bounds each try's wait for the response head (else `timeouts.response_header` does).
    pub per_try_timeout: Option<Duration>,
    /// Retries allowed per request, as a share over time (0.2 = one retry per five requests,
    /// with a burst of ten); `None`: no limit.
    pub budget: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamTls {
    /// PEM CA certificates to trust instead of the system roots.
    pub ca: Option<PathBuf>,
    /// The name sent as SNI and verified in the certificate; default the URL's host.
    pub server_name: Option<String>,
    pub insecure_skip_verify: bool,
    /// A client certificate for servers that ask for one.
    pub certificate: Option<CertificateFiles>,
    /// Where `tls` is written (the service's position when absent).
    pub pos: Pos,
}

/// The protocol a service speaks to its servers (`protocol:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// `h1`: HTTP/1.1, over TLS for `https://` servers.
    Http1,
    /// `h2`: HTTP/2 over TLS, negotiated by ALPN.
    Http2,
    /// `h2c`: cleartext HTTP/2 with prior knowledge.
    H2c,
}

#[derive(Debug, Clone)]
pub struct UpstreamServer {
    /// As written (or as discovered), e.g. `http://127.0.0.1:9000`.
    pub url: String,
    /// `https://`: spoken to over TLS.
    pub tls: bool,
    /// `host:port` as written in the URL, used as the Host header when it is not passed through.
    pub authority: String,
    pub host: String,
    pub port: u16,
    pub weight: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balancer {
    RoundRobin,
    LeastConn,
    Random,
    P2c,
    ConsistentHash,
}

impl Balancer {
    pub const NAMES: &'static str = "round_robin, least_conn, random, p2c, consistent_hash";
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    ClientIp,
    Header(String),
    Cookie(String),
    Path,
}

#[derive(Debug, Clone, Copy)]
pub struct Keepalive {
    pub max_idle_per_server: usize,
    pub idle_timeout: Duration,
}

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// The whole `service` action, every try included, up to the response head; `None`: off.
    pub request: Option<Duration>,
    pub connect: Duration,
    pub response_header: Duration,
    /// Idle time allowed between reads of a response body.
    pub read: Duration,
    /// Idle time allowed while the upstream takes the request (head and body).
    pub write: Duration,
    /// Idle time allowed, both ways, in a tunnel after `101 Switching Protocols` (WebSocket);
    /// `None`: the server's `client_idle_timeout`.
    pub websocket_idle: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct Middleware {
    pub name: String,
    pub kind: MiddlewareKind,
}

#[derive(Debug, Clone)]
pub enum MiddlewareKind {
    StripPrefix(Vec<String>),
    AddPrefix(String),
    ReplacePathRegex {
        regex: regex::Regex,
        replacement: String,
    },
    Headers {
        request: HeaderOps,
        response: HeaderOps,
        /// Traefik's CORS fields, when any is set (boxed: most `headers` have none).
        cors: Option<Box<Cors>>,
        /// Traefik's security fields, when any is set.
        secure: Option<Box<SecureHeaders>>,
    },
    RedirectScheme {
        scheme: String,
        permanent: bool,
    },
    /// Compresses response bodies in an encoding the client accepts.
    Compress(Compress),
    /// Replaces the whole path (as sent: escapes kept) and records the old one in
    /// `X-Replaced-Path`.
    ReplacePath(String),
    /// Strips the first expression's match when it starts the decoded path.
    StripPrefixRegex(Vec<regex::bytes::Regex>),
    /// Redirects when `regex` matches the request's URL and the replacement changes it.
    RedirectRegex {
        regex: regex::Regex,
        replacement: String,
        permanent: bool,
    },
    /// A named list of middlewares, each with where it is named. The loader flattens chains
    /// into the routers' lists, so a router never names one.
    Chain(Vec<(String, Pos)>),
    /// Refuses clients outside the listed networks.
    IpAllowList(IpAllowList),
    /// Lets through only requests with a known user's password (HTTP Basic authentication).
    BasicAuth(BasicAuth),
    /// Lets through only requests with a known user's digest (HTTP Digest authentication).
    DigestAuth(DigestAuth),
    /// Reads request and response bodies whole before passing them on, within limits.
    Buffering(Buffering),
    /// Limits each source's request rate with a token bucket.
    RateLimit(RateLimit),
    /// Limits each source's requests in progress at once.
    InFlightReq(InFlightReq),
    /// Lets through only requests with a valid JSON Web Token signed by a configured key
    /// (boxed: its keys and claim rules are large beside the other kinds).
    Jwt(Box<Jwt>),
    /// Answers `response_code` instead of calling what follows while its expression holds.
    CircuitBreaker(CircuitBreaker),
    /// Turns browsers' gRPC-Web requests into gRPC for the route's service, and its answers
    /// back (Traefik's `grpcWeb`).
    GrpcWeb(GrpcWeb),
    /// Answers some statuses with a page from another service (boxed: it is large and rare).
    Errors(Box<ErrorPages>),
    /// Lets a request through when an authentication server answers 2xx to a copy of it.
    ForwardAuth(Box<ForwardAuth>),
    /// Lua scripts run at the request's phases (lua-nginx-module's `*_by_lua`).
    Lua(Box<LuaPhases>),
}

impl MiddlewareKind {
    /// The key that names this kind in the configuration (`rate_limit`).
    pub fn key(&self) -> &'static str {
        match self {
            MiddlewareKind::StripPrefix(_) => "strip_prefix",
            MiddlewareKind::AddPrefix(_) => "add_prefix",
            MiddlewareKind::ReplacePathRegex { .. } => "replace_path_regex",
            MiddlewareKind::Headers { .. } => "headers",
            MiddlewareKind::RedirectScheme { .. } => "redirect_scheme",
            MiddlewareKind::Compress(_) => "compress",
            MiddlewareKind::ReplacePath(_) => "replace_path",
            MiddlewareKind::StripPrefixRegex(_) => "strip_prefix_regex",
            MiddlewareKind::RedirectRegex { .. } => "redirect_regex",
            MiddlewareKind::Chain(_) => "chain",
            MiddlewareKind::IpAllowList(_) => "ip_allow_list",
            MiddlewareKind::BasicAuth(_) => "basic_auth",
            MiddlewareKind::DigestAuth(_) => "digest_auth",
            MiddlewareKind::Buffering(_) => "buffering",
            MiddlewareKind::RateLimit(_) => "rate_limit",
            MiddlewareKind::InFlightReq(_) => "in_flight_req",
            MiddlewareKind::Jwt(_) => "jwt",
            MiddlewareKind::CircuitBreaker(_) => "circuit_breaker",
            MiddlewareKind::GrpcWeb(_) => "grpc_web",
            MiddlewareKind::Errors(_) => "errors",
            MiddlewareKind::ForwardAuth(_) => "forward_auth",
            MiddlewareKind::Lua(_) => "lua",
        }
    }
}

/// The `grpc_web` middleware's settings (Traefik's `grpcWeb`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcWeb {
    /// Origins whose preflights and calls get CORS permission: `*` for any, else exact
    /// `Origin` values. Empty (the default) allows none.
    pub allow_origins: Vec<String>,
}

/// The `in_flight_req` middleware's settings (Traefik's `inFlightReq`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlightReq {
    /// Requests one source may have in progress at once (at least 1).
    pub amount: u64,
    /// The host by default, as in Traefik.
    pub source_criterion: SourceCriterion,
}

/// The `rate_limit` middleware's settings (Traefik's `rateLimit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests allowed per `period` on average; 0 turns the limit off.
    pub average: u64,
    /// The span `average` is counted over (1 s by default, and for 0).
    pub period: Duration,
    /// The bucket's size: how many requests may come at once (at least 1).
    pub burst: u64,
    pub source_criterion: SourceCriterion,
    /// Shared through Redis by every instance naming the same store and middleware; `None`:
    /// this instance's own buckets.
    pub redis: Option<RedisStore>,
}

/// A Redis server the fleet shares (`rate_limit.redis`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStore {
    /// `host:port`, tried in order until one answers.
    pub endpoints: Vec<String>,
    /// For Redis 6 ACLs (`AUTH username password`); empty: `AUTH password` or none.
    pub username: String,
    pub password: String,
    /// Selected after connecting (0 by default).
    pub db: u32,
    /// The longest a request waits on Redis (100ms by default).
    pub timeout: Duration,
    /// Put before each key (`weir:` by default).
    pub key_prefix: String,
    /// When Redis cannot answer in time: admit (true, the default) or answer 503.
    pub fail_open: bool,
    /// With Sentinel: the endpoints are sentinels, asked for this master's address.
    pub sentinel_master: Option<String>,
    /// TLS to Redis (and to the sentinels); `None`: plain TCP.
    pub tls: Option<UpstreamTls>,
}

/// The `circuit_breaker` middleware's settings (Traefik's `circuitBreaker`).
#[derive(Debug, Clone, PartialEq)]
pub struct CircuitBreaker {
    /// When it holds (checked at most once per `check_period`), the breaker trips.
    pub expression: crate::breaker_expression::BreakerCondition,
    /// The expression as written, for the log.
    pub expression_text: String,
    /// 100ms by default.
    pub check_period: Duration,
    /// How long a tripped breaker answers every request itself (10s by default).
    pub fallback_duration: Duration,
    /// How long a recovering breaker takes to let all traffic through again (10s by default).
    pub recovery_duration: Duration,
    /// The status of the breaker's own answers (503 by default); their body is its text.
    pub response_code: u16,
}

/// The `ip_allow_list` middleware's settings (Traefik's `ipAllowList`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpAllowList {
    pub source_range: IpRanges,
    pub ip_strategy: IpStrategy,
    /// The status of a refusal (403 by default); its body is the status's standard text.
    pub reject_status_code: u16,
}

/// Which address a policy takes as the client's (Traefik's `ipStrategy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpStrategy {
    /// The connection's peer (no `ip_strategy`, or one with neither `depth` nor
    /// `excluded_ips`).
    RemoteAddr { ipv6_subnet: Option<u8> },
    /// The `depth`th `X-Forwarded-For` entry counted from the right.
    Depth { depth: u32, ipv6_subnet: Option<u8> },
    /// The first `X-Forwarded-For` entry from the right that is not in the list.
    Excluded(IpRanges),
}

/// What makes requests one source for a per-source policy (Traefik's `sourceCriterion`, for
/// `rate_limit` and `in_flight_req`): one of its keys; none means the connection's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceCriterion {
    /// The client address `ip_strategy` picks.
    Ip(IpStrategy),
    /// The value of the request's first header line of this name (empty when absent).
    RequestHeader(String),
    /// The request's host, as sent (with its port, if any).
    RequestHost,
}

/// No criterion: the connection's address, as Traefik's default.
impl Default for SourceCriterion {
    fn default() -> Self {
        SourceCriterion::Ip(IpStrategy::RemoteAddr { ipv6_subnet: None })
    }
}

/// Addresses and networks, matched as Traefik's `ip.Checker` does: an IPv4 client matches
/// only IPv4 networks (an IPv4-mapped IPv6 address and network count as IPv4), an IPv6
/// client only IPv6 ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpRanges(pub Vec<crate::rule::Cidr>);

impl IpRanges {
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(ip))
    }
}

/// Go's `http.StatusText`, which names the statuses Traefik accepts as a configured reject
/// status and is the body of its refusals.
pub fn status_text(status: u16) -> Option<&'static str> {
    Some(match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        208 => "Already Reported",
        226 => "IM Used",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Request Entity Too Large",
        414 => "Request URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Requested Range Not Satisfiable",
        417 => "Expectation Failed",
        418 => "I'm a teapot",
        421 => "Misdirected Request",
        422 => "Unprocessable Entity",
        423 => "Locked",
        424 => "Failed Dependency",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        506 => "Variant Also Negotiates",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        510 => "Not Extended",
        511 => "Network Authentication Required",
        _ => return None,
    })
}

/// The `basic_auth` middleware's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// Each user's password hash as `htpasswd` writes it: `users_file`'s lines, then `users`
    /// (a name in both keeps its `users` hash).
    pub users: std::collections::BTreeMap<String, String>,
    /// Named in the `WWW-Authenticate` challenge.
    pub realm: String,
    /// The request header that carries the authenticated user's name upstream.
    pub header_field: Option<String>,
    /// Whether `Authorization` is removed before the request goes upstream.
    pub remove_header: bool,
}

pub const DEFAULT_BASIC_AUTH_REALM: &str = "weir";

/// The `digest_auth` middleware's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestAuth {
    /// Each user's HA1 (MD5 of `name:realm:password`, 32 lowercase hex digits), by name and
    /// realm as `htdigest` writes them: `users_file`'s lines, then `users` (a name and realm
    /// in both keep the `users` hash).
    pub users: std::collections::BTreeMap<(String, String), String>,
    /// Named in the challenge; only the users of this realm are let through.
    pub realm: String,
    /// The request header that carries the authenticated user's name upstream.
    pub header_field: Option<String>,
    /// Whether `Authorization` is removed before the request goes upstream.
    pub remove_header: bool,
}

/// Traefik's: a users file written for Traefik names this realm.
pub const DEFAULT_DIGEST_AUTH_REALM: &str = "traefik";

/// The `buffering` middleware's settings (Traefik's `buffering`, vulcand/oxy's buffer). A
/// limit of 0 is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffering {
    pub max_request_body_bytes: u64,
    pub mem_request_body_bytes: u64,
    pub max_response_body_bytes: u64,
    pub mem_response_body_bytes: u64,
    /// When to send the request again, judged on each try's answer.
    pub retry_expression: Option<RetryExpression>,
}

/// oxy's default for the `mem_*` sizes.
pub const DEFAULT_BUFFERING_MEM_BYTES: u64 = 1 << 20;

/// A `retry_expression`, parsed (vulcand/predicate's grammar, with oxy buffer's functions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryExpression {
    And(Box<RetryExpression>, Box<RetryExpression>),
    Or(Box<RetryExpression>, Box<RetryExpression>),
    /// `IsNetworkError()`: the try was answered 502 or 504.
    IsNetworkError,
    /// A comparison of `Attempts()`, `ResponseCode()` or `RequestMethod()` with a value.
    Compare(RetryValue, Comparison, RetryValue),
}

/// A value a retry expression compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryValue {
    /// `Attempts()`: how many tries were made, this one included.
    Attempts,
    /// `ResponseCode()`: the status of this try's answer.
    ResponseCode,
    /// `RequestMethod()`.
    RequestMethod,
    Number(i64),
    Text(String),
}

/// How a retry expression compares (the grammar's, shared with `circuit_breaker`).
pub use crate::predicate::Comparison;

/// The `errors` middleware's settings (Traefik's `errors`): an answer whose status is in
/// `status` is replaced by the page `service` answers for `query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPages {
    /// The statuses caught, as inclusive ranges (`"404"` is 404 to 404).
    pub status: Vec<(u16, u16)>,
    /// The service the page is asked of.
    pub service: String,
    /// Where `service` is written (a name that is not defined is told there).
    pub service_pos: Pos,
    /// The page's path and query, starting with `/`, where `{status}`, `{originalStatus}` and
    /// `{url}` are replaced.
    pub query: String,
    /// The status the client gets in place of one in a range (the first range holding it).
    pub status_rewrites: Vec<((u16, u16), u16)>,
}

/// The `forward_auth` middleware's settings (Traefik's `forwardAuth`).
#[derive(Debug, Clone)]
pub struct ForwardAuth {
    /// `address` as written.
    pub address: String,
    /// The authentication server as a service of one server (the address's scheme, host and
    /// port, with `tls`), the Host it gets its own, its timeouts the defaults with a `request`
    /// of 30 s (Traefik's client timeout).
    pub service: Service,
    /// The address's path and query, asked of the server (`/` when it has none).
    pub target: String,
    /// Whether the client's `X-Forwarded-*` fields are passed on (else they are replaced).
    pub trust_forward_header: bool,
    /// The answer's fields copied into the request when it is let through.
    pub auth_response_headers: Vec<String>,
    /// The same, for every field whose name matches (names in Go's canonical form).
    pub auth_response_headers_regex: Option<regex::Regex>,
    /// When not empty, only these request fields are sent to the server.
    pub auth_request_headers: Vec<String>,
    /// The names of the server's cookies that are set on the answer to the client.
    pub add_auth_cookies_to_response: Vec<String>,
    /// Whether the server gets the request's body too (read into memory first).
    pub forward_body: bool,
    /// With `forward_body`, the largest body read (a larger one is refused with 401); `None`:
    /// no limit, as Traefik's default.
    pub max_body_size: Option<u64>,
    /// Whether a refusal's `Location` is passed as the server sent it (else made absolute
    /// against the address).
    pub preserve_location_header: bool,
}

/// A content coding weir can compress with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Zstd,
    Br,
    Gzip,
}

impl Encoding {
    pub const ALL: [Encoding; 3] = [Encoding::Zstd, Encoding::Br, Encoding::Gzip];

    /// The coding's name in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Zstd => "zstd",
            Encoding::Br => "br",
            Encoding::Gzip => "gzip",
        }
    }
}

/// The `compress` middleware's settings.
#[derive(Debug, Clone)]
pub struct Compress {
    /// The encodings offered, in order of preference (which breaks ties between q-values).
    pub algorithms: Vec<Encoding>,
    pub gzip_level: u32,
    pub br_level: u32,
    pub zstd_level: i32,
    /// Bodies known to be shorter than this are sent as they are.
    pub min_length: u64,
    /// Media types compressed, lowercase; `type/*` matches every subtype.
    pub types: Vec<String>,
}

impl Default for Compress {
    fn default() -> Compress {
        Compress {
            algorithms: Encoding::ALL.to_vec(),
            gzip_level: 6,
            br_level: 4,
            zstd_level: 3,
            min_length: 1024,
            types: [
                "text/*",
                "application/json",
                "application/javascript",
                "application/xml",
                "image/svg+xml",
                "application/wasm",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

/// CORS as Traefik's `headers` middleware answers it: preflights answered by weir, the
/// `Access-Control-*` fields added to other answers.
#[derive(Debug, Clone, Default)]
pub struct Cors {
    pub allow_origin_list: Vec<String>,
    pub allow_origin_list_regex: Vec<regex::Regex>,
    pub allow_methods: Vec<String>,
    pub allow_headers: Vec<String>,
    pub expose_headers: Vec<String>,
    pub allow_credentials: bool,
    /// Seconds; `None` sends no `Access-Control-Max-Age`.
    pub max_age: Option<u64>,
    pub add_vary_header: bool,
}

/// The security fields of Traefik's `headers` middleware (its `secure` part, after
/// unrolled/secure): a host check on the request, security fields on the answer.
#[derive(Debug, Clone, Default)]
pub struct SecureHeaders {
    /// Hosts a request may name (compared without case); empty: any.
    pub allowed_hosts: Vec<String>,
    /// Request fields that carry the host in place of `Host` (the first present wins).
    pub hosts_proxy_headers: Vec<String>,
    /// Request fields whose value says the client came over HTTPS, `{ NAME: value }`.
    pub ssl_proxy_headers: Vec<(String, String)>,
    /// `Strict-Transport-Security: max-age=N`, over HTTPS (or always with `force_sts_header`).
    pub sts_seconds: u64,
    pub sts_include_subdomains: bool,
    pub sts_preload: bool,
    pub force_sts_header: bool,
    pub frame_deny: bool,
    pub custom_frame_options_value: String,
    pub content_type_nosniff: bool,
    pub browser_xss_filter: bool,
    pub custom_browser_xss_value: String,
    pub content_security_policy: String,
    pub content_security_policy_report_only: String,
    pub referrer_policy: String,
    pub permissions_policy: String,
    /// Skips the host check and `Strict-Transport-Security`, for development.
    pub is_development: bool,
}

#[derive(Debug, Clone, Default)]
pub struct HeaderOps {
    pub set: Vec<(String, String)>,
    pub add: Vec<(String, String)>,
    pub remove: Vec<String>,
}

impl HeaderOps {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_GRACEFUL_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_CLIENT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_CLIENT_SEND_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_UPSTREAM_READ_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_UPSTREAM_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_MAX_IDLE_PER_SERVER: usize = 256;
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_UDP_SESSION_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_UDP_MAX_SESSIONS: usize = 10_000;
pub const DEFAULT_TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(60);

/// The `jwt` middleware's settings: the keys tokens must be signed with and the claims they
/// must carry (RFC 7519), and where a request carries its token.
#[derive(Debug, Clone)]
pub struct Jwt {
    /// The verification keys: `keys`, then `jwks_file`'s (keys meant for encryption left out).
    pub keys: Vec<Jwk>,
    /// `jwks_url`: a JWK Set fetched while serving, its keys counted beside `keys`.
    pub jwks_url: Option<JwksUrl>,
    /// The signature algorithms accepted; every one weir verifies when the config names none.
    pub algorithms: Vec<JwsAlgorithm>,
    /// Accepted `iss` values; empty: any issuer.
    pub issuers: Vec<String>,
    /// Accepted `aud` values, one of which the token must name; empty: any audience.
    pub audiences: Vec<String>,
    /// Claims every token must carry.
    pub required_claims: Vec<String>,
    /// Clock skew allowed when checking `exp`, `nbf` and `iat`.
    pub leeway: Duration,
    /// Where the token is looked for, in order; the first found is the token.
    pub token_source: Vec<TokenSource>,
    /// Claims copied into request headers (claim, header), in order.
    pub claims_to_headers: Vec<(String, String)>,
    /// Whether the token goes upstream where it came from.
    pub forward_token: bool,
}

pub const DEFAULT_JWT_LEEWAY: Duration = Duration::from_secs(30);

/// The `jwt` middleware's `jwks_url`: where its JWK Set is fetched, through the upstream side.
#[derive(Debug, Clone)]
pub struct JwksUrl {
    /// `jwks_url` as written.
    pub url: String,
    /// The JWKS server as a service of one server (the URL's scheme, host and port, with
    /// `tls`).
    pub service: Service,
    /// The URL's path and query, asked of the server.
    pub target: String,
}

/// The longest a request waits on a JWKS fetch; past it, the request is judged on the keys
/// already held.
pub const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a fetched JWK Set is used when its answer has no `Cache-Control: max-age`.
pub const DEFAULT_JWKS_MAX_AGE: Duration = Duration::from_secs(300);
/// The least time between two fetches started by tokens of unknown `kid` or after a failure.
pub const JWKS_REFETCH_SPACING: Duration = Duration::from_secs(5);

/// Where a request carries its JSON Web Token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// A request header, lowercase: `authorization` holds `Bearer TOKEN` (RFC 6750 section
    /// 2.1); any other header holds the token alone.
    Header(String),
    /// A cookie of this name.
    Cookie(String),
    /// A query parameter of this name.
    Query(String),
}

/// A public key (or HMAC secret) from a JSON Web Key (RFC 7517), decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jwk {
    /// Matched against a token's `kid`; a key without one is tried for any token.
    pub kid: Option<String>,
    /// The one algorithm the key is for, when its JWK says so.
    pub alg: Option<JwsAlgorithm>,
    pub key: JwkKey,
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub enum JwkKey {
    /// Modulus and public exponent, big-endian, without leading zero bytes.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An uncompressed point (`0x04`, x, y) on the curve.
    Ec { curve: EcCurve, point: Vec<u8> },
    /// An Ed25519 public key (`OKP`, RFC 8037).
    Ed25519(Vec<u8>),
    /// An HMAC secret (`oct`).
    Oct(Vec<u8>),
}

/// Shows a fingerprint of the key material, not the material: the secret stays out, and a
/// reload still tells a rotated key from the old one (a middleware's state is carried by its
/// configuration's debug text).
impl std::fmt::Debug for JwkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut hasher);
        let print = hasher.finish();
        match self {
            JwkKey::Rsa { n, .. } => write!(f, "Rsa({} bits, {print:016x})", n.len() * 8),
            JwkKey::Ec { curve, .. } => write!(f, "Ec({curve:?}, {print:016x})"),
            JwkKey::Ed25519(_) => write!(f, "Ed25519({print:016x})"),
            JwkKey::Oct(k) => write!(f, "Oct({} bytes, {print:016x})", k.len()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EcCurve {
    P256,
    P384,
}

/// A JWS signature algorithm weir verifies (RFC 7518 section 3, RFC 8037 section 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwsAlgorithm {
    HS256,
    HS384,
    HS512,
    RS256,
    RS384,
    RS512,
    PS256,
    PS384,
    PS512,
    ES256,
    ES384,
    EdDSA,
}

impl JwsAlgorithm {
    pub const ALL: [JwsAlgorithm; 12] = [
        JwsAlgorithm::HS256,
        JwsAlgorithm::HS384,
        JwsAlgorithm::HS512,
        JwsAlgorithm::RS256,
        JwsAlgorithm::RS384,
        JwsAlgorithm::RS512,
        JwsAlgorithm::PS256,
        JwsAlgorithm::PS384,
        JwsAlgorithm::PS512,
        JwsAlgorithm::ES256,
        JwsAlgorithm::ES384,
        JwsAlgorithm::EdDSA,
    ];

    /// The algorithm's `alg` value.
    pub fn name(self) -> &'static str {
        match self {
            JwsAlgorithm::HS256 => "HS256",
            JwsAlgorithm::HS384 => "HS384",
            JwsAlgorithm::HS512 => "HS512",
            JwsAlgorithm::RS256 => "RS256",
            JwsAlgorithm::RS384 => "RS384",
            JwsAlgorithm::RS512 => "RS512",
            JwsAlgorithm::PS256 => "PS256",
            JwsAlgorithm::PS384 => "PS384",
            JwsAlgorithm::PS512 => "PS512",
            JwsAlgorithm::ES256 => "ES256",
            JwsAlgorithm::ES384 => "ES384",
            JwsAlgorithm::EdDSA => "EdDSA",
        }
    }

    /// The algorithm an `alg` value names (case-sensitive, as RFC 7515 section 4.1.1 says).
    pub fn from_name(name: &str) -> Option<JwsAlgorithm> {
        JwsAlgorithm::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Whether `key` is of the type this algorithm verifies with: an RSA key never serves as
    /// an HMAC secret, nor a P-256 key for ES384 (the algorithm-confusion guard). An HMAC
    /// secret must be at least as long as the hash (RFC 7518 section 3.2).
    pub fn fits(self, key: &JwkKey) -> bool {
        use JwsAlgorithm::*;
        match (self, key) {
            (HS256, JwkKey::Oct(k)) => k.len() >= 32,
            (HS384, JwkKey::Oct(k)) => k.len() >= 48,
            (HS512, JwkKey::Oct(k)) => k.len() >= 64,
            (RS256 | RS384 | RS512 | PS256 | PS384 | PS512, JwkKey::Rsa { .. }) => true,
            (ES256, JwkKey::Ec { curve, .. }) => *curve == EcCurve::P256,
            (ES384, JwkKey::Ec { curve, .. }) => *curve == EcCurve::P384,
            (EdDSA, JwkKey::Ed25519(_)) => true,
            _ => false,
        }
    }
}

// tracing: begin
/// `server.tracing`: OpenTelemetry traces exported over OTLP, and W3C Trace Context passed on.
#[derive(Debug, Clone, PartialEq)]
pub struct Tracing {
    pub otlp: Otlp,
    /// The share of requests without a sampled parent that start a sampled trace, 0 to 1.
    pub sample_rate: f64,
    /// Whether a client's `traceparent` decides the sampling (its sampled flag), as
    /// OpenTelemetry's `ParentBased` sampler does.
    pub parent_based: bool,
    /// `service.name` of the exported resource.
    pub service_name: String,
    /// More attributes of the exported resource, in the order written.
    pub resource_attributes: Vec<(String, String)>,
    /// Finished spans waiting for export, across workers; more are dropped and counted.
    pub max_queue: usize,
    /// Spans per export request.
    pub batch: usize,
    /// The longest a finished span waits before its batch is sent.
    pub flush_interval: Duration,
}

/// `server.tracing.otlp`: where and how spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Otlp {
    /// The collector's base URL as written (`http://host:4318`).
    pub endpoint: String,
    /// The collector's address, from `endpoint`.
    pub authority: String,
    pub protocol: OtlpProtocol,
    /// Header lines sent with every export request.
    pub headers: Vec<(String, String)>,
    /// How long one export request may take.
    pub timeout: Duration,
    pub compression: OtlpCompression,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `http/protobuf`: `POST {endpoint}/v1/traces`, a protobuf body.
    HttpProtobuf,
    /// `grpc`: `TraceService/Export` over HTTP/2 without TLS.
    Grpc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpCompression {
    None,
    Gzip,
}

pub const DEFAULT_TRACING_SAMPLE_RATE: f64 = 1.0;
pub const DEFAULT_TRACING_SERVICE_NAME: &str = "weir";
pub const DEFAULT_TRACING_MAX_QUEUE: usize = 2048;
pub const DEFAULT_TRACING_BATCH: usize = 512;
pub const DEFAULT_TRACING_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// OpenTelemetry's default export timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`).
pub const DEFAULT_OTLP_TIMEOUT: Duration = Duration::from_secs(10);
// tracing: end

// lua: begin
/// The instance-wide `lua:` block (docs/lua.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LuaSettings {
    /// `lua_package_path`: `;`-separated templates, relative ones already made absolute
    /// against the config file's folder (`None`: LuaJIT's default).
    pub package_path: Option<String>,
    /// `lua_shared_dict`s: each name with its size in bytes.
    pub shared_dicts: Vec<(String, u64)>,
    /// `init_by_lua`: run in each worker's VM as it is made, before it serves.
    pub init: Option<LuaCode>,
    /// `init_worker_by_lua`: run once per worker, after `init`.
    pub init_worker: Option<LuaCode>,
    /// A script running this long without yielding is stopped (a 500).
    pub max_run_time: Duration,
    /// The most memory one worker's VM may hold, in bytes.
    pub max_memory: u64,
    /// The config file's folder, absolute, with a trailing `/` (`ngx.config.prefix()`).
    pub prefix: String,
}

impl Default for LuaSettings {
    fn default() -> Self {
        LuaSettings {
            package_path: None,
            shared_dicts: Vec::new(),
            init: None,
            init_worker: None,
            max_run_time: Duration::from_secs(1),
            max_memory: 64 << 20,
            prefix: String::new(),
        }
    }
}

/// One script: its source, already compiled once by the loader, and the name its errors
/// carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LuaCode {
    /// Lua's chunk name: `@FILE`, the config file for inline code (whose source is padded
    /// with newlines so Lua's line numbers are the config file's) or the script file.
    pub chunk_name: String,
    pub source: String,
}

/// The `lua` middleware's scripts, one per phase it runs in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LuaPhases {
    pub rewrite: Option<LuaCode>,
    pub access: Option<LuaCode>,
    pub header_filter: Option<LuaCode>,
    pub body_filter: Option<LuaCode>,
    pub log: Option<LuaCode>,
}
// lua: end
