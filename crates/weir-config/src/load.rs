//! Turns a positioned YAML tree into the validated [`Config`], collecting every error it finds
//! (not just the first) as `FILE:LINE:COLUMN: message`, each saying what was expected.

mod cache;
mod elasticsearch;
mod entrypoints;
mod health;
mod middlewares;
mod routers;
mod server;
mod tcp;
mod values;

use crate::model::*;
use crate::rule;
use crate::yaml::{self, Node, Pos, Value};
use routers::Known;
pub use server::DEFAULT_ADMIN_ADDRESS;
use std::fmt;
pub use values::{expand_env, is_header_name, is_header_value, parse_duration, parse_size};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub pos: Pos,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.pos.line, self.pos.column, self.message
        )
    }
}

/// An error about a config file for the user: one about a place in it (it starts with
/// `LINE:COLUMN:`, as compile errors do) becomes `FILE:LINE:COLUMN: message`, like every other
/// config error.
pub fn located(file: &str, error: &str) -> String {
    if error.starts_with(|c: char| c.is_ascii_digit()) {
        format!("{file}:{error}")
    } else {
        format!("{file}: {error}")
    }
}

/// Reads and validates a config file.
pub fn load_file(path: &str) -> Result<Config, Vec<ConfigError>> {
    match std::fs::read_to_string(path) {
        Ok(text) => load_str(&text, path),
        Err(e) => Err(vec![ConfigError {
            file: path.to_string(),
            pos: Pos { line: 1, column: 1 },
            message: format!("cannot read config file: {e}"),
        }]),
    }
}

/// Validates config text; `file` is only used to label errors.
pub fn load_str(text: &str, file: &str) -> Result<Config, Vec<ConfigError>> {
    let root = yaml::parse(text).map_err(|e| {
        vec![ConfigError {
            file: file.to_string(),
            pos: e.pos,
            message: format!("invalid YAML: {}", e.message),
        }]
    })?;
    let mut loader = Loader {
        errors: Vec::new(),
        env: &|name| std::env::var(name).ok(),
        base: std::path::Path::new(file)
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_default(),
    };
    let config = loader.config(&root);
    if loader.errors.is_empty() {
        Ok(config)
    } else {
        loader.errors.sort_by_key(|(pos, _)| (pos.line, pos.column));
        Err(loader
            .errors
            .into_iter()
            .map(|(pos, message)| ConfigError {
                file: file.to_string(),
                pos,
                message,
            })
            .collect())
    }
}

struct Loader<'e> {
    errors: Vec<(Pos, String)>,
    env: &'e dyn Fn(&str) -> Option<String>,
    /// The config file's folder: relative file paths in the config are resolved against it.
    base: std::path::PathBuf,
}

/// The entries of a mapping whose keys have been checked against the allowed set.
struct Fields<'n> {
    pos: Pos,
    entries: Vec<(&'n str, &'n Node)>,
}

impl<'n> Fields<'n> {
    fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, v)| *k == key && !matches!(v.value, Value::Null))
            .map(|(_, v)| *v)
    }
}

impl Loader<'_> {
    fn config(&mut self, root: &Node) -> Config {
        let top = self
            .fields(
                root,
                "the top level",
                &[
                    "server",
                    "entrypoints",
                    "routers",
                    "services",
                    "middlewares",
                    "tcp",
                    "udp",
                    "caches",
                ],
            )
            .unwrap_or(Fields {
                pos: root.pos,
                entries: Vec::new(),
            });
        let server = self.server(top.get("server"));
        let entrypoints: Vec<Entrypoint> = self
            .named(top.get("entrypoints"), "entrypoints")
            .into_iter()
            .filter_map(|(name, node)| self.entrypoint(name, node))
            .collect();
        self.check_addresses_unique(&entrypoints);
        if top.get("entrypoints").is_none() {
            self.error(
                top.pos,
                "missing `entrypoints`: at least one is needed, e.g. `entrypoints: { web: { address: \":8080\" } }`",
            );
        }
        let services: Vec<Service> = self
            .named(top.get("services"), "services")
            .into_iter()
            .filter_map(|(name, node)| self.service(name, node))
            .collect();
        let middlewares: Vec<Middleware> = self
            .named(top.get("middlewares"), "middlewares")
            .into_iter()
            .filter_map(|(name, node)| self.middleware(name, node))
            .collect();
        let caches: Vec<Cache> = self
            .named(top.get("caches"), "caches")
            .into_iter()
            .filter_map(|(name, node)| self.cache(name, node))
            .collect();
        let mut routers = Vec::new();
        for (name, node) in self.named(top.get("routers"), "routers") {
            let known = Known {
                entrypoints: &entrypoints,
                services: &services,
                middlewares: &middlewares,
                caches: &caches,
            };
            if let Some(router) = self.router(name, node, &known) {
                routers.push(router);
            }
        }
        let tcp = self.tcp(top.get("tcp"), &entrypoints);
        let udp = self.udp(top.get("udp"), &entrypoints);
        for r in &routers {
            self.check_tcp_entrypoints(&r.name, r.pos, &r.entrypoints, &entrypoints, "router");
        }
        Config {
            server,
            entrypoints,
            routers,
            services,
            middlewares,
            tcp,
            udp,
            caches,
        }
    }

    fn service(&mut self, name: String, node: &Node) -> Option<Service> {
        let what = format!("service `{name}`");
        let f = self.fields(
            node,
            &what,
            &[
                "servers",
                "load_balancer",
                "hash_key",
                "keepalive",
                "timeouts",
                "pass_host_header",
                "tls",
                "health_check",
                "passive_health",
                "retry",
                "protocol",
                "http2",
                "elasticsearch",
            ],
        )?;
        let health_check = f.get("health_check").and_then(|n| self.health_check(n));
        let passive_health = f.get("passive_health").and_then(|n| self.passive_health(n));
        let mut retry = f.get("retry").and_then(|n| self.retry(n));
        let mut servers = Vec::new();
        let elasticsearch = match (f.get("elasticsearch"), f.get("servers")) {
            (Some(es), None) => self.elasticsearch(es, &mut servers),
            (Some(es), Some(_)) => {
                self.error(
                    es.pos,
                    format!("{what} has both `servers` and `elasticsearch`; an Elasticsearch service finds its servers from `elasticsearch.hosts`"),
                );
                None
            }
            (None, _) => None,
        };
        let mut health_check = health_check;
        if let (Some(check), Some(authorization)) = (
            health_check.as_mut(),
            elasticsearch
                .as_ref()
                .and_then(|es| es.authorization.as_ref()),
        ) {
            // The cluster answers 401 to a probe without the service's credentials.
            if !check
                .headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case("authorization"))
            {
                check
                    .headers
                    .push(("authorization".to_string(), authorization.clone()));
            }
        }
        if elasticsearch.is_some() && f.get("retry").is_none() {
            // A node that cannot be reached, resets, or answers 502/503 is not the cluster's
            // answer: try another node once (requests that can be sent again only, as always).
            retry = Some(Retry {
                attempts: 2,
                on: vec![
                    RetryOn::ConnectFailure,
                    RetryOn::Reset,
                    RetryOn::Status(502),
                    RetryOn::Status(503),
                ],
                per_try_timeout: None,
                budget: None,
            });
        }
        match f.get("servers") {
            None if f.get("elasticsearch").is_some() => {}
            None => self.error(
                f.pos,
                format!("{what} needs `servers`, e.g. `servers: [{{ url: \"http://127.0.0.1:9000\" }}]`"),
            ),
            Some(list) => match &list.value {
                Value::Seq(items) => {
                    for item in items {
                        if let Some(s) = self.upstream_server(item) {
                            servers.push(s);
                        }
                    }
                }
                _ => self.error(
                    list.pos,
                    format!("`servers` must be a list, found {}", list.kind_name()),
                ),
            },
        }
        let mut load_balancer = Balancer::RoundRobin;
        if let Some(lb) = f.get("load_balancer") {
            if let Some(s) = self.string(lb, "`load_balancer`") {
                load_balancer = match s.as_str() {
                    "round_robin" => Balancer::RoundRobin,
                    "least_conn" => Balancer::LeastConn,
                    "random" => Balancer::Random,
                    "p2c" => Balancer::P2c,
                    "consistent_hash" => Balancer::ConsistentHash,
                    _ => {
                        self.error(
                            lb.pos,
                            format!(
                                "unknown load balancer `{s}`; expected one of: {}",
                                Balancer::NAMES
                            ),
                        );
                        Balancer::RoundRobin
                    }
                };
            }
        }
        let mut hash_key = HashKey::ClientIp;
        if let Some(hk) = f.get("hash_key") {
            if let Some(s) = self.string(hk, "`hash_key`") {
                let parsed = match s.split_once(':') {
                    None if s == "client_ip" => Some(HashKey::ClientIp),
                    None if s == "path" => Some(HashKey::Path),
                    Some(("header", h)) if is_header_name(h) => {
                        Some(HashKey::Header(h.to_string()))
                    }
                    Some(("cookie", c)) if !c.is_empty() => Some(HashKey::Cookie(c.to_string())),
                    _ => None,
                };
                match parsed {
                    Some(k) => hash_key = k,
                    None => self.error(
                        hk.pos,
                        format!("unknown hash_key `{s}`; expected client_ip, path, header:NAME or cookie:NAME"),
                    ),
                }
            }
            if load_balancer != Balancer::ConsistentHash {
                self.error(
                    hk.pos,
                    "`hash_key` only applies to `load_balancer: consistent_hash`",
                );
            }
        }
        let mut keepalive = Keepalive {
            max_idle_per_server: DEFAULT_MAX_IDLE_PER_SERVER,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        };
        if let Some(k) = f.get("keepalive") {
            if let Some(kf) =
                self.fields(k, "`keepalive`", &["max_idle_per_server", "idle_timeout"])
            {
                if let Some(n) = kf.get("max_idle_per_server") {
                    if let Some(n) = self.uint(n, "`max_idle_per_server`", 0, 1_000_000) {
                        keepalive.max_idle_per_server = n as usize;
                    }
                }
                if let Some(d) = kf.get("idle_timeout") {
                    if let Some(d) = self.duration(d, "`idle_timeout`") {
                        keepalive.idle_timeout = d;
                    }
                }
            }
        }
        let mut timeouts = Timeouts {
            request: None,
            connect: DEFAULT_CONNECT_TIMEOUT,
            response_header: DEFAULT_RESPONSE_HEADER_TIMEOUT,
            read: DEFAULT_UPSTREAM_READ_TIMEOUT,
            write: DEFAULT_UPSTREAM_WRITE_TIMEOUT,
            websocket_idle: None,
        };
        if let Some(t) = f.get("timeouts") {
            if let Some(tf) = self.fields(
                t,
                "`timeouts`",
                &[
                    "request",
                    "connect",
                    "response_header",
                    "read",
                    "write",
                    "websocket_idle",
                ],
            ) {
                timeouts.request = tf
                    .get("request")
                    .and_then(|d| self.duration(d, "`timeouts.request`"))
                    .filter(|d| !d.is_zero());
                timeouts.websocket_idle = tf
                    .get("websocket_idle")
                    .and_then(|d| self.duration(d, "`timeouts.websocket_idle`"));
                for (key, slot) in [
                    ("connect", &mut timeouts.connect),
                    ("response_header", &mut timeouts.response_header),
                    ("read", &mut timeouts.read),
                    ("write", &mut timeouts.write),
                ] {
                    if let Some(d) = tf
                        .get(key)
                        .and_then(|d| self.duration(d, &format!("`{key}`")))
                    {
                        *slot = d;
                    }
                }
            }
        }
        let pass_host_header = match f.get("pass_host_header") {
            Some(b) => self.boolean(b, "`pass_host_header`").unwrap_or(true),
            None => true,
        };
        let mut tls = UpstreamTls {
            pos: f.pos,
            ..UpstreamTls::default()
        };
        if let Some(t) = f.get("tls") {
            tls.pos = t.pos;
            if let Some(tf) = self.fields(
                t,
                "`tls`",
                &["ca", "server_name", "insecure_skip_verify", "certificate"],
            ) {
                if let Some(ca) = tf.get("ca").and_then(|n| self.string(n, "`ca`")) {
                    tls.ca = Some(self.base.join(ca));
                }
                tls.server_name = tf
                    .get("server_name")
                    .and_then(|n| self.string(n, "`server_name`"));
                if let Some(b) = tf.get("insecure_skip_verify") {
                    tls.insecure_skip_verify =
                        self.boolean(b, "`insecure_skip_verify`").unwrap_or(false);
                }
                tls.certificate = tf
                    .get("certificate")
                    .and_then(|c| self.certificate_files(c, "`certificate`"));
            }
            if !servers.iter().any(|s: &UpstreamServer| s.tls) {
                self.error(
                    t.pos,
                    "`tls` applies to https:// servers; this service has none",
                );
            }
        }
        let protocol = self.upstream_protocol(&f, &servers);
        let http2 = match f.get("http2") {
            Some(h) if protocol == UpstreamProtocol::Http1 => {
                self.error(h.pos, "`http2` applies to `protocol: h2` or `h2c`");
                Http2Settings::default()
            }
            Some(h) => self.http2_settings(h),
            None => Http2Settings::default(),
        };
        Some(Service {
            name,
            protocol,
            http2,
            servers,
            load_balancer,
            hash_key,
            keepalive,
            timeouts,
            pass_host_header,
            tls,
            health_check,
            passive_health,
            retry,
            elasticsearch,
        })
    }

    /// `protocol:` h1 (the default), h2 (TLS with ALPN, `https://` servers) or h2c (prior
    /// knowledge, `http://` servers).
    fn upstream_protocol(
        &mut self,
        f: &Fields<'_>,
        servers: &[UpstreamServer],
    ) -> UpstreamProtocol {
        let Some(node) = f.get("protocol") else {
            return UpstreamProtocol::Http1;
        };
        let protocol = match self.string(node, "`protocol`").as_deref() {
            Some("h1") => UpstreamProtocol::Http1,
            Some("h2") => UpstreamProtocol::Http2,
            Some("h2c") => UpstreamProtocol::H2c,
            Some(other) => {
                self.error(
                    node.pos,
                    format!("unknown protocol `{other}`; expected h1, h2 or h2c"),
                );
                return UpstreamProtocol::Http1;
            }
            None => return UpstreamProtocol::Http1,
        };
        let mismatch = match protocol {
            UpstreamProtocol::Http2 => servers.iter().find(|s| !s.tls).map(|s| {
                format!("`protocol: h2` is HTTP/2 over TLS, but {} is http:// (cleartext HTTP/2 is `h2c`)", s.url)
            }),
            UpstreamProtocol::H2c => servers.iter().find(|s| s.tls).map(|s| {
                format!("`protocol: h2c` is cleartext HTTP/2, but {} is https:// (HTTP/2 over TLS is `h2`)", s.url)
            }),
            UpstreamProtocol::Http1 => None,
        };
        if let Some(message) = mismatch {
            self.error(node.pos, message);
        }
        protocol
    }

    fn upstream_server(&mut self, node: &Node) -> Option<UpstreamServer> {
        let f = self.fields(node, "a server", &["url", "weight"])?;
        let Some(url_node) = f.get("url") else {
            self.error(
                f.pos,
                "a server needs a `url`, e.g. \"http://127.0.0.1:9000\"",
            );
            return None;
        };
        let url = self.string(url_node, "`url`")?;
        let weight = match f.get("weight") {
            Some(w) => self.uint(w, "`weight`", 1, 10_000)? as u32,
            None => 1,
        };
        let server = UpstreamServer::from_url(&url, weight);
        if server.is_none() {
            self.error(url_node.pos, bad_server_url(&url));
        }
        server
    }
}

/// `http://HOST[:PORT][/]` into host and port.
/// `http://HOST[:PORT]` or `https://HOST[:PORT]` → (is https, host, port).
fn bad_server_url(url: &str) -> String {
    format!("`{url}` is not a server URL; expected http://HOST[:PORT] or https://HOST[:PORT]")
}

impl UpstreamServer {
    /// A server from its URL (`http://HOST[:PORT]` or `https://...`); `None` when it is not one.
    pub fn from_url(url: &str, weight: u32) -> Option<UpstreamServer> {
        let (tls, host, port) = parse_http_url(url)?;
        let authority = url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_string();
        Some(UpstreamServer {
            url: url.to_string(),
            tls,
            authority,
            host,
            port,
            weight,
        })
    }
}

fn parse_http_url(url: &str) -> Option<(bool, String, u16)> {
    let (tls, rest) = match url.strip_prefix("https://") {
        Some(rest) => (true, rest),
        None => (false, url.strip_prefix("http://")?),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return None;
    }
    let host = rule::strip_port(rest);
    let port = if host.len() == rest.len() {
        if tls {
            443
        } else {
            80
        }
    } else {
        rest[host.len() + 1..].parse().ok()?
    };
    if host.is_empty() {
        return None;
    }
    Some((
        tls,
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_address_used_by_two_entrypoints_is_refused() {
        let errs = errors(
            "entrypoints:\n  a: { address: \"127.0.0.1:18090\" }\n  b: { address: \"127.0.0.1:18090\" }\n",
        );
        assert_eq!(
            errs,
            ["t.yaml:3:17: entrypoint `b` listens on 127.0.0.1:18090, which entrypoint `a` already uses (line 2, column 17): an address serves one entrypoint"]
        );
        // A wildcard overlaps a specific address of its port; UDP and TCP do not clash.
        let errs = errors(
            "entrypoints:\n  a: { address: \":18090\" }\n  b: { address: \"127.0.0.1:18090\" }\n  c: { address: \"127.0.0.1:18090/udp\" }\n",
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("entrypoint `b`"), "{errs:?}");
        // Any free port, and different ports, are fine.
        let ok = "entrypoints:\n  a: { address: \"127.0.0.1:0\" }\n  b: { address: \"127.0.0.1:0\" }\n  c: { address: \"127.0.0.1:18091\" }\n  d: { address: \"127.0.0.2:18091\" }\n";
        assert!(load_str(ok, "t.yaml").is_ok());
    }

    fn errors(text: &str) -> Vec<String> {
        load_str(text, "t.yaml")
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    const BASE: &str = "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\n";

    #[test]
    fn minimal_config_loads() {
        let cfg = load_str(
            &format!(
                "{BASE}routers:\n  r:\n    rule: \"Path(`/`)\"\n    respond: {{ body: hi }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.routers[0].priority, 9);
        assert!(matches!(cfg.routers[0].action, Action::Respond(_)));
    }

    #[test]
    fn caches_and_the_routers_that_name_them() {
        let text = format!(
            "{BASE}caches:\n  main: {{ memory: 1MiB, max_object_size: 2MiB, key: [host, query, color] }}\n\
             routers:\n  a: {{ rule: \"Path(`/a`)\", respond: {{ body: x }}, cache: main }}\n  \
             b: {{ rule: \"Path(`/b`)\", service: s, cache: nope }}\n\
             services:\n  s: {{ servers: [{{ url: \"http://a:1\" }}] }}\n"
        );
        let errs = errors(&text);
        assert_eq!(errs.len(), 5, "{errs:?}");
        assert!(
            errs[0].contains("`max_object_size` is larger than `memory`"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("t.yaml:4:53: `key` must include `path`"),
            "{errs:?}"
        );
        assert!(
            errs[2].starts_with("t.yaml:4:67: unknown `key` part `color`"),
            "{errs:?}"
        );
        assert!(
            errs[3].ends_with("`cache` applies to routers with a `service`"),
            "{errs:?}"
        );
        assert!(
            errs[4].contains("router `b` names cache `nope`, which is not defined; defined: main"),
            "{errs:?}"
        );
        let cfg = load_str(
            &format!("{BASE}caches:\n  main: {{}}\nrouters:\n  b: {{ rule: \"Path(`/b`)\", service: s, cache: main }}\nservices:\n  s: {{ servers: [{{ url: \"http://a:1\" }}] }}\n"),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.caches[0].memory, DEFAULT_CACHE_MEMORY);
        assert_eq!(cfg.caches[0].key, CacheKeyPart::DEFAULT.to_vec());
        assert_eq!(cfg.caches[0].lock_timeout, DEFAULT_CACHE_LOCK_TIMEOUT);
        assert!(cfg.caches[0].purge_allow.is_empty());
        assert_eq!(cfg.routers[0].cache.as_deref(), Some("main"));
    }

    #[test]
    fn cache_lock_and_purge_settings() {
        let errs = errors(&format!(
            "{BASE}caches:\n  main: {{ lock_timeout: soon, purge: {{ allow: [127.0.0.1/32, 10.0.0.0/33], deny: [] }} }}\n"
        ));
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs[0].starts_with("t.yaml:4:25: "), "{errs:?}");
        assert!(
            errs.iter()
                .any(|e| e.contains("`10.0.0.0/33` is not an address or network")),
            "{errs:?}"
        );
        assert!(errs.iter().any(|e| e.contains("deny")), "{errs:?}");
        let cfg = load_str(
            &format!("{BASE}caches:\n  main: {{ lock_timeout: 2s, purge: {{ allow: [127.0.0.1, \"::1\"] }} }}\n"),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.caches[0].lock_timeout, Duration::from_secs(2));
        assert_eq!(cfg.caches[0].purge_allow.len(), 2);
        assert_eq!(cfg.caches[0].disk, None);
        // The disk tier: a folder (relative to the config file's), and a size.
        let errs = errors(&format!(
            "{BASE}caches:\n  main: {{ disk: {{ size: 1GiB }} }}\n"
        ));
        assert!(errs[0].contains("`disk` needs a `path`"), "{errs:?}");
        let cfg = load_str(
            &format!("{BASE}caches:\n  a: {{ disk: {{ path: data/cache }} }}\n  b: {{ disk: {{ path: /var/cache/w, size: 2GiB }} }}\n"),
            "conf/t.yaml",
        )
        .unwrap();
        let disk = |i: usize| cfg.caches[i].disk.clone().unwrap();
        assert_eq!(disk(0).path, std::path::Path::new("conf/data/cache"));
        assert_eq!(disk(0).size, DEFAULT_CACHE_DISK_SIZE);
        assert_eq!(disk(1).path, std::path::Path::new("/var/cache/w"));
        assert_eq!(disk(1).size, 2 << 30);
    }

    #[test]
    fn elasticsearch_services() {
        let errs = errors(&format!(
            "{BASE}services:\n  a: {{ elasticsearch: {{ discovery: {{ refresh: 5s }} }} }}\n  \
             b: {{ servers: [{{ url: \"http://x:1\" }}], elasticsearch: {{ hosts: [\"http://x:9200\"] }} }}\n  \
             c: {{ elasticsearch: {{ hosts: [\"ftp://x\"] }} }}\n"
        ));
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].contains("`elasticsearch` needs `hosts`"),
            "{errs:?}"
        );
        assert!(
            errs[1].contains("has both `servers` and `elasticsearch`"),
            "{errs:?}"
        );
        assert!(
            errs[2].contains("`ftp://x` is not a server URL"),
            "{errs:?}"
        );
        let cfg = load_str(
            &format!(
                "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://127.0.0.1:9200\"], discovery: {{ roles: [data] }} }} }}\n  \
                 fixed: {{ elasticsearch: {{ hosts: [\"http://a:9200\", \"http://b:9200\"], discovery: {{ enabled: false }} }} }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        let es = &cfg.services[0];
        assert_eq!(es.servers[0].url, "http://127.0.0.1:9200");
        let discovery = es
            .elasticsearch
            .as_ref()
            .unwrap()
            .discovery
            .clone()
            .unwrap();
        assert_eq!(discovery.refresh, DEFAULT_ES_REFRESH);
        assert_eq!(discovery.roles, ["data"]);
        assert_eq!(cfg.services[1].servers.len(), 2);
        assert_eq!(
            cfg.services[1].elasticsearch.as_ref().unwrap().discovery,
            None
        );
        assert_eq!(es.elasticsearch.as_ref().unwrap().bulk, EsBulk::default());
        let cfg = load_str(
            &format!(
                "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], bulk: {{ route: none, max_body: 1MiB, batch: false }} }} }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        let bulk = &cfg.services[0].elasticsearch.as_ref().unwrap().bulk;
        assert_eq!(
            (bulk.route, bulk.max_body, bulk.batch),
            (BulkRoute::None, 1 << 20, false)
        );
        let errs = errors(&format!(
            "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], bulk: {{ route: shard }} }} }}\n"
        ));
        assert!(
            errs[0].contains("unknown bulk route `shard`; expected `node` or `none`"),
            "{errs:?}"
        );
        let cfg = load_str(
            &format!(
                "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], spool: {{ path: data/spool, max_size: 1GiB, fsync: never }} }} }}\n"
            ),
            "conf/t.yaml",
        )
        .unwrap();
        let spool = cfg.services[0]
            .elasticsearch
            .as_ref()
            .unwrap()
            .spool
            .clone()
            .unwrap();
        assert_eq!(spool.path, std::path::Path::new("conf/data/spool"));
        assert_eq!((spool.max_size, spool.fsync), (1 << 30, false));
        let errs = errors(&format!(
            "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], spool: {{ fsync: always }} }} }}\n"
        ));
        assert!(errs[0].contains("`spool` needs a `path`"), "{errs:?}");
        assert!(errs[1].contains("unknown fsync mode `always`"), "{errs:?}");
    }

    #[test]
    fn elasticsearch_credentials() {
        let authorization = |auth: &str| {
            let cfg = load_str(
                &format!(
                    "{BASE}services:\n  es:\n    elasticsearch: {{ hosts: [\"http://a:9200\"], auth: {auth} }}\n    health_check: {{ path: /_cluster/health }}\n"
                ),
                "t.yaml",
            )
            .unwrap();
            let service = &cfg.services[0];
            let value = service
                .elasticsearch
                .as_ref()
                .unwrap()
                .authorization
                .clone();
            let probe = service.health_check.as_ref().unwrap().headers.clone();
            assert_eq!(
                probe,
                [("authorization".to_string(), value.clone().unwrap())]
            );
            value
        };
        assert_eq!(
            authorization("{ basic: { username: elastic, password: \"p:w\" } }").as_deref(),
            Some("Basic ZWxhc3RpYzpwOnc=")
        );
        assert_eq!(
            authorization(
                "{ api_key: VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw== }"
            )
            .as_deref(),
            Some("ApiKey VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==")
        );
        let errs = errors(&format!(
            "{BASE}services:\n  a: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], auth: {{ basic: {{ username: x }}, api_key: k }} }} }}\n  \
             b: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], auth: {{ basic: {{ username: \"a:b\", password: p }} }} }} }}\n  \
             c: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], auth: {{ basic: {{ password: p }} }} }} }}\n  \
             d: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], auth: {{ api_key: \"two words\" }} }} }}\n"
        ));
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(errs[0].contains("exactly one of `basic"), "{errs:?}");
        assert!(errs[1].contains("cannot hold `:`"), "{errs:?}");
        assert!(
            errs[2].contains("`auth.basic` needs `username`"),
            "{errs:?}"
        );
        assert!(errs[3].contains("`encoded` form"), "{errs:?}");
        assert!(errs[3].starts_with("t.yaml:"), "{errs:?}");
    }

    #[test]
    fn elasticsearch_search_cache() {
        let cfg = load_str(
            &format!(
                "{BASE}services:\n  es: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], search_cache: {{ ttl: 10s }} }} }}\n"
            ),
            "t.yaml",
        )
        .unwrap();
        let es = cfg.services[0].elasticsearch.as_ref().unwrap();
        assert_eq!(
            es.search_cache,
            Some(EsSearchCache {
                ttl: Duration::from_secs(10),
                max_entries: DEFAULT_ES_SEARCH_CACHE_ENTRIES,
                max_entry_size: 1 << 20,
            })
        );
        let errs = errors(&format!(
            "{BASE}services:\n  a: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], search_cache: {{ max_entries: 5 }} }} }}\n  \
             b: {{ elasticsearch: {{ hosts: [\"http://a:9200\"], search_cache: {{ ttl: 1s, max_entries: 0 }} }} }}\n"
        ));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].contains("`search_cache` needs a `ttl`"), "{errs:?}");
        assert!(errs[1].contains("`search_cache.max_entries`"), "{errs:?}");
    }

    #[test]
    fn upstream_protocols_match_their_servers() {
        let services =
            "services:\n  s:\n    protocol: h3\n    servers: [{ url: \"http://a:1\" }]\n  \
            t:\n    protocol: h2\n    servers: [{ url: \"http://a:1\" }]\n  \
            u:\n    protocol: h2c\n    servers: [{ url: \"https://a:1\" }]\n  \
            v:\n    http2: { max_concurrent_streams: 4 }\n    servers: [{ url: \"http://a:1\" }]\n";
        let errs = errors(&format!("{BASE}{services}"));
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(
            errs[0].starts_with("t.yaml:5:15: unknown protocol `h3`"),
            "{errs:?}"
        );
        assert!(
            errs[1].contains("`protocol: h2` is HTTP/2 over TLS, but http://a:1"),
            "{errs:?}"
        );
        assert!(
            errs[2].contains("`protocol: h2c` is cleartext HTTP/2, but https://a:1"),
            "{errs:?}"
        );
        assert!(
            errs[3].starts_with("t.yaml:14:12: `http2` applies to `protocol: h2` or `h2c`"),
            "{errs:?}"
        );
        let cfg = load_str(
            &format!("{BASE}services:\n  g:\n    protocol: h2c\n    http2: {{ max_concurrent_streams: 4 }}\n    servers: [{{ url: \"http://a:1\" }}]\n"),
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.services[0].protocol, UpstreamProtocol::H2c);
        assert_eq!(cfg.services[0].http2.max_concurrent_streams, 4);
    }

    #[test]
    fn admin_beyond_loopback_needs_a_long_token() {
        let errs = errors(&format!(
            "server:\n  admin: {{ address: \"0.0.0.0:9900\" }}\n{BASE}"
        ));
        assert!(
            errs[0].contains("is not a loopback address: set `server.admin.token` too"),
            "{errs:?}"
        );
        let errs = errors(&format!(
            "server:\n  admin: {{ address: \"0.0.0.0:9900\", token: short }}\n{BASE}"
        ));
        assert!(errs[0].contains("at least 16 characters"), "{errs:?}");
        let cfg = load_str(&format!("server:\n  admin: {{ address: \"0.0.0.0:9900\", token: \"0123456789abcdef\" }}\n{BASE}"), "t.yaml").unwrap();
        assert_eq!(
            cfg.server.admin.unwrap().token.as_deref(),
            Some("0123456789abcdef")
        );
        // `admin: {}` listens on loopback.
        let cfg = load_str(&format!("server:\n  admin: {{}}\n{BASE}"), "t.yaml").unwrap();
        let admin = cfg.server.admin.unwrap();
        assert_eq!(admin.address.to_string(), DEFAULT_ADMIN_ADDRESS);
        assert!(!admin.token_for_metrics);
    }

    #[test]
    fn retry_budget_per_try_and_request_timeouts() {
        let cfg = load_str(
            &format!("{BASE}services:\n  s:\n    servers: [{{ url: \"http://127.0.0.1:1\" }}]\n    retry: {{ per_try_timeout: 250ms, budget: 20% }}\n    timeouts: {{ request: 3s }}\n"),
            "t.yaml",
        )
        .unwrap();
        let s = &cfg.services[0];
        let retry = s.retry.as_ref().unwrap();
        assert_eq!(retry.per_try_timeout, Some(Duration::from_millis(250)));
        assert_eq!(retry.budget, Some(0.2));
        assert_eq!(s.timeouts.request, Some(Duration::from_secs(3)));
        assert_eq!(s.timeouts.websocket_idle, None);
        let errs = errors(&format!("{BASE}services:\n  s:\n    servers: [{{ url: \"http://127.0.0.1:1\" }}]\n    retry: {{ budget: 2 }}\n"));
        assert!(
            errs[0].contains("`retry.budget` must be a share"),
            "{errs:?}"
        );
    }

    #[test]
    fn websocket_idle_timeout_and_its_error() {
        let service = |timeouts: &str| {
            format!("{BASE}services:\n  s:\n    servers: [{{ url: \"http://127.0.0.1:1\" }}]\n    timeouts: {{ {timeouts} }}\n")
        };
        let cfg = load_str(&service("websocket_idle: 5m"), "t.yaml").unwrap();
        assert_eq!(
            cfg.services[0].timeouts.websocket_idle,
            Some(Duration::from_secs(300))
        );
        let errs = errors(&service("read: 1s, websocket_idle: forever"));
        assert!(
            errs[0].starts_with("t.yaml:6:43: `timeouts.websocket_idle` must be a duration"),
            "{errs:?}"
        );
    }

    #[test]
    fn health_and_retry_settings_and_their_errors() {
        let cfg = load_str(
            &format!("{BASE}services:\n  s:\n    servers: [{{ url: \"http://127.0.0.1:1\" }}]\n    health_check: {{ path: /healthz, interval: 1s, expect_status: \"200, 204-299\" }}\n    passive_health: {{ max_failures: 5 }}\n    retry: {{ attempts: 3, on: [connect_failure, 503] }}\n"),
            "t.yaml",
        )
        .unwrap();
        let s = &cfg.services[0];
        let check = s.health_check.as_ref().unwrap();
        assert_eq!(check.path, "/healthz");
        assert_eq!(check.interval, Duration::from_secs(1));
        assert_eq!(check.expect_status, vec![(200, 200), (204, 299)]);
        assert_eq!((check.healthy_threshold, check.unhealthy_threshold), (2, 3));
        assert_eq!(s.passive_health.unwrap().max_failures, 5);
        assert_eq!(s.passive_health.unwrap().eject, Duration::from_secs(30));
        let retry = s.retry.as_ref().unwrap();
        assert_eq!(retry.attempts, 3);
        assert_eq!(
            retry.on,
            vec![RetryOn::ConnectFailure, RetryOn::Status(503)]
        );
        let errs = errors(&format!("{BASE}services:\n  s:\n    servers: []\n    health_check: {{ expect_status: \"2xx\" }}\n    retry: {{ on: [404, sometimes] }}\n"));
        assert!(
            errs.iter().any(|e| e.starts_with("t.yaml:6:")
                && e.contains("`expect_status` must be statuses or ranges")),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e
                    .contains("`on` takes connect_failure, reset or a 5xx status, found `404`")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e.contains("found `sometimes`")),
            "{errs:?}"
        );
    }

    #[test]
    fn unknown_key_names_key_and_allowed_keys() {
        let errs = errors(&format!("{BASE}servr: {{}}\n"));
        assert_eq!(
            errs,
            vec!["t.yaml:3:1: unknown key `servr` in the top level; expected one of: server, entrypoints, routers, services, middlewares, tcp, udp, caches"]
        );
        let errs = errors(&format!(
            "{BASE}services:\n  s:\n    servers: []\n    lb: x\n"
        ));
        assert!(
            errs[0].starts_with(
                "t.yaml:6:5: unknown key `lb` in service `s`; expected one of: servers,"
            ),
            "{errs:?}"
        );
    }

    #[test]
    fn missing_references_are_named() {
        let errs = errors(&format!(
            "{BASE}routers:\n  r:\n    entrypoints: [websecure]\n    rule: \"Path(`/`)\"\n    middlewares: [nope]\n    service: api\n"
        ));
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert_eq!(errs[0], "t.yaml:5:19: router `r` names entrypoint `websecure`, which is not defined; defined: web");
        assert_eq!(
            errs[1],
            "t.yaml:7:19: router `r` names middleware `nope`, which is not defined; defined: none"
        );
        assert_eq!(
            errs[2],
            "t.yaml:8:14: router `r` names service `api`, which is not defined; defined: none"
        );
    }

    #[test]
    fn tcp_and_udp_routers_name_what_is_defined() {
        let yaml = "entrypoints:\n  db: { address: \"127.0.0.1:0\" }\n  dns: { address: \"127.0.0.1:0/udp\" }\n\
            tcp:\n  services:\n    pg: { servers: [{ address: \"127.0.0.1:5432\" }] }\n\
            \x20 routers:\n    t: { entrypoints: [dbx], rule: \"HostSNI(`*`)\", service: pgx }\n\
            udp:\n  services:\n    ns: { servers: [{ address: \"127.0.0.1:53\" }] }\n\
            \x20 routers:\n    u: { entrypoints: [dnsx], service: nsx }\n";
        let errs = errors(yaml);
        let expected = [
            "tcp router `t` names entrypoint `dbx`, which is not defined; defined: db, dns",
            "tcp router `t` names tcp service `pgx`, which is not defined; defined: pg",
            "udp router `u` names entrypoint `dnsx`, which is not defined; defined: db, dns",
            "udp router `u` names udp service `nsx`, which is not defined; defined: ns",
        ];
        assert_eq!(errs.len(), expected.len(), "{errs:?}");
        for (err, want) in errs.iter().zip(expected) {
            assert!(err.ends_with(want), "{err} does not end with {want}");
        }
    }

    #[test]
    fn rule_errors_point_inside_the_rule() {
        let errs = errors(&format!(
            "{BASE}routers:\n  r:\n    rule: \"Host(`a`) && Paht(`/`)\"\n    respond: {{}}\n"
        ));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("t.yaml:5:25: invalid rule: unknown matcher `Paht`"),
            "{errs:?}"
        );
    }

    #[test]
    fn every_error_is_reported() {
        let errs = errors(&format!(
            "{BASE}server:\n  workers: many\n  graceful_timeout: soon\nservices:\n  s:\n    servers: [{{ url: \"ftp://x\" }}]\n    load_balancer: fastest\n"
        ));
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(errs[0].starts_with("t.yaml:4:12:"));
        assert!(errs[1].starts_with("t.yaml:5:21:"));
        assert!(errs[2].contains("ftp://x"));
        assert!(errs[3].contains("unknown load balancer `fastest`"));
    }

    #[test]
    fn exactly_one_action() {
        let errs = errors(&format!("{BASE}routers:\n  r:\n    rule: \"Path(`/`)\"\n    respond: {{}}\n    redirect: {{ to: /x }}\n"));
        assert!(
            errs[0].starts_with("t.yaml:7:15: router `r` must have exactly one action"),
            "{errs:?}"
        );
        let errs = errors(&format!("{BASE}routers:\n  r:\n    rule: \"Path(`/`)\"\n"));
        assert!(errs[0].contains("exactly one action"));
    }

    #[test]
    fn yaml_syntax_errors_have_positions() {
        let errs = errors("entrypoints:\n  web: [\n");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("t.yaml:3:"), "{errs:?}");
    }

    #[test]
    fn compress_settings_and_their_errors() {
        let mw = |body: &str| format!("{BASE}middlewares:\n  gz:\n    compress: {body}\n");
        let cfg = load_str(&mw("{}"), "t.yaml").unwrap();
        let MiddlewareKind::Compress(c) = &cfg.middlewares[0].kind else {
            panic!("not compress");
        };
        assert_eq!(c.algorithms, Encoding::ALL.to_vec());
        assert_eq!(
            (c.gzip_level, c.br_level, c.zstd_level, c.min_length),
            (6, 4, 3, 1024)
        );
        let cfg = load_str(
            &mw("{ algorithms: [gzip, zstd], level: { gzip: 9 }, min_length: 2KiB, types: [Text/HTML] }"),
            "t.yaml",
        )
        .unwrap();
        let MiddlewareKind::Compress(c) = &cfg.middlewares[0].kind else {
            panic!("not compress");
        };
        assert_eq!(c.algorithms, vec![Encoding::Gzip, Encoding::Zstd]);
        assert_eq!((c.gzip_level, c.min_length), (9, 2048));
        assert_eq!(c.types, vec!["text/html".to_string()]);
        assert_eq!(
            errors(&mw("{ algorithms: [gzip, lz4, gzip] }")),
            vec![
                "t.yaml:5:36: unknown algorithm `lz4`; expected zstd, br or gzip",
                "t.yaml:5:41: `gzip` is listed twice"
            ]
        );
        assert_eq!(
            errors(&mw("{ level: { br: 12 } }")),
            vec!["t.yaml:5:30: `level.br` must be a whole number from 0 to 11, found `12`"]
        );
        assert_eq!(
            errors(&mw("{ min_length: big, types: [json] }")),
            vec![
                "t.yaml:5:29: `min_length` must be a size like `1024`, `64KiB` or `256MiB`, found `big`",
                "t.yaml:5:42: `json` is not a media type like `text/html` or `text/*`"
            ]
        );
    }

    #[test]
    fn urls() {
        assert_eq!(
            parse_http_url("http://127.0.0.1:9000"),
            Some((false, "127.0.0.1".into(), 9000))
        );
        assert_eq!(
            parse_http_url("http://backend/"),
            Some((false, "backend".into(), 80))
        );
        assert_eq!(
            parse_http_url("http://[::1]:81"),
            Some((false, "::1".into(), 81))
        );
        assert_eq!(parse_http_url("https://x"), Some((true, "x".into(), 443)));
        assert_eq!(parse_http_url("ftp://x"), None);
        assert_eq!(parse_http_url("http://x/path"), None);
    }
}
