//! `services.NAME`: HTTP services: their servers (`http://` or `https://` URLs), balancing,
//! keep-alive, timeouts, TLS towards the servers, protocol (h1, h2, h2c) and HTTP/2 settings;
//! health checks and retries are in `health.rs`, Elasticsearch in `elasticsearch.rs`.

use super::elasticsearch::{elasticsearch_retry, probe_with_credentials};
use super::values::is_header_name;
use super::{Fields, Loader};
use crate::model::*;
use crate::rule;
use crate::yaml::Node;

/// What is said of a `url` (or an Elasticsearch host) that is not a server URL.
pub(super) fn bad_server_url(url: &str) -> String {
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

/// `http://HOST[:PORT][/]` or `https://HOST[:PORT][/]` → (is https, host, port).
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

impl Loader<'_> {
    pub(super) fn service(&mut self, name: String, node: &Node) -> Option<Service> {
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
        let mut health_check = f.get("health_check").and_then(|n| self.health_check(n));
        let passive_health = f.get("passive_health").and_then(|n| self.passive_health(n));
        let mut retry = f.get("retry").and_then(|n| self.retry(n));
        let mut servers = Vec::new();
        let elasticsearch = self.service_elasticsearch(&f, &what, &mut servers);
        if let Some(es) = &elasticsearch {
            if let (Some(check), Some(authorization)) =
                (health_check.as_mut(), es.authorization.as_ref())
            {
                probe_with_credentials(check, authorization);
            }
            if f.get("retry").is_none() {
                retry = Some(elasticsearch_retry());
            }
        }
        if f.get("servers").is_some() || f.get("elasticsearch").is_none() {
            let example = "url: \"http://127.0.0.1:9000\"";
            servers.extend(self.servers(&f, &what, example, Self::upstream_server));
        }
        let load_balancer = self.load_balancer(&f).unwrap_or(Balancer::RoundRobin);
        let hash_key = self.hash_key(f.get("hash_key"), load_balancer);
        let keepalive = self.keepalive(f.get("keepalive"));
        let timeouts = self.upstream_timeouts(f.get("timeouts"));
        let pass_host_header = match f.get("pass_host_header") {
            Some(b) => self.boolean(b, "`pass_host_header`").unwrap_or(true),
            None => true,
        };
        let tls = self.upstream_tls(&f, &servers);
        let protocol = self.upstream_protocol(&f, &servers);
        let http2 = self.upstream_http2(f.get("http2"), protocol);
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

    /// `elasticsearch:`, which finds the servers itself (into `servers`): a service has it or
    /// `servers`, not both.
    fn service_elasticsearch(
        &mut self,
        f: &Fields<'_>,
        what: &str,
        servers: &mut Vec<UpstreamServer>,
    ) -> Option<Elasticsearch> {
        match (f.get("elasticsearch"), f.get("servers")) {
            (Some(es), None) => self.elasticsearch(es, servers),
            (Some(es), Some(_)) => {
                self.error(
                    es.pos,
                    format!("{what} has both `servers` and `elasticsearch`; an Elasticsearch service finds its servers from `elasticsearch.hosts`"),
                );
                None
            }
            (None, _) => None,
        }
    }

    fn upstream_server(&mut self, node: &Node) -> Option<UpstreamServer> {
        let needs = "a server needs a `url`, e.g. \"http://127.0.0.1:9000\"";
        let (url, pos, weight) = self.server_entry(node, "url", needs)?;
        let server = UpstreamServer::from_url(&url, weight);
        if server.is_none() {
            self.error(pos, bad_server_url(&url));
        }
        server
    }

    /// `hash_key:` (client_ip by default), which only `consistent_hash` reads.
    fn hash_key(&mut self, node: Option<&Node>, load_balancer: Balancer) -> HashKey {
        let mut hash_key = HashKey::ClientIp;
        let Some(hk) = node else { return hash_key };
        if let Some(s) = self.string(hk, "`hash_key`") {
            let parsed = match s.split_once(':') {
                None if s == "client_ip" => Some(HashKey::ClientIp),
                None if s == "path" => Some(HashKey::Path),
                Some(("header", h)) if is_header_name(h) => Some(HashKey::Header(h.to_string())),
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
        hash_key
    }

    /// `keepalive:`, the idle connections kept to each server.
    pub(super) fn keepalive(&mut self, node: Option<&Node>) -> Keepalive {
        let mut keepalive = Keepalive {
            max_idle_per_server: DEFAULT_MAX_IDLE_PER_SERVER,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        };
        let keys = ["max_idle_per_server", "idle_timeout"];
        let Some(kf) = node.and_then(|k| self.fields(k, "`keepalive`", &keys)) else {
            return keepalive;
        };
        if let Some(n) = kf
            .get("max_idle_per_server")
            .and_then(|n| self.uint(n, "`max_idle_per_server`", 0, 1_000_000))
        {
            keepalive.max_idle_per_server = n as usize;
        }
        self.duration_field(&kf, "idle_timeout", &mut keepalive.idle_timeout);
        keepalive
    }

    /// `timeouts:` towards the servers; `request` (0 is none) and `websocket_idle` have no
    /// default.
    pub(super) fn upstream_timeouts(&mut self, node: Option<&Node>) -> Timeouts {
        let mut timeouts = Timeouts {
            request: None,
            connect: DEFAULT_CONNECT_TIMEOUT,
            response_header: DEFAULT_RESPONSE_HEADER_TIMEOUT,
            read: DEFAULT_UPSTREAM_READ_TIMEOUT,
            write: DEFAULT_UPSTREAM_WRITE_TIMEOUT,
            websocket_idle: None,
        };
        let keys = [
            "request",
            "connect",
            "response_header",
            "read",
            "write",
            "websocket_idle",
        ];
        let Some(tf) = node.and_then(|t| self.fields(t, "`timeouts`", &keys)) else {
            return timeouts;
        };
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
            self.duration_field(&tf, key, slot);
        }
        timeouts
    }

    /// `tls:` towards `https://` servers (its position is the service's when it is not given).
    pub(super) fn upstream_tls(
        &mut self,
        f: &Fields<'_>,
        servers: &[UpstreamServer],
    ) -> UpstreamTls {
        let tls = UpstreamTls {
            pos: f.pos,
            ..UpstreamTls::default()
        };
        let Some(t) = f.get("tls") else { return tls };
        let tls = self.client_tls(t);
        if !servers.iter().any(|s| s.tls) {
            self.error(
                t.pos,
                "`tls` applies to https:// servers; this service has none",
            );
        }
        tls
    }

    /// A client side's `tls: { ca, server_name, insecure_skip_verify, certificate }` (a
    /// service's towards its servers, a store's).
    pub(super) fn client_tls(&mut self, t: &Node) -> UpstreamTls {
        let mut tls = UpstreamTls {
            pos: t.pos,
            ..UpstreamTls::default()
        };
        let keys = ["ca", "server_name", "insecure_skip_verify", "certificate"];
        if let Some(tf) = self.fields(t, "`tls`", &keys) {
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
        tls
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

    /// `http2:` settings towards the servers, for `protocol: h2` or `h2c` only.
    fn upstream_http2(&mut self, node: Option<&Node>, protocol: UpstreamProtocol) -> Http2Settings {
        match node {
            Some(h) if protocol == UpstreamProtocol::Http1 => {
                self.error(h.pos, "`http2` applies to `protocol: h2` or `h2c`");
                Http2Settings::default()
            }
            Some(h) => self.http2_settings(h),
            None => Http2Settings::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};
    use std::time::Duration;

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
