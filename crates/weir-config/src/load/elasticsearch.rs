//! `services.NAME.elasticsearch`: an Elasticsearch (or OpenSearch) cluster as a service. Its
//! `hosts` are the seeds the service starts with; with discovery on (the default), the
//! control thread replaces them by the cluster's nodes.

use super::services::bad_server_url;
use super::Loader;
use crate::model::*;
use crate::yaml::Node;

/// The cluster answers 401 to a probe without the service's credentials: the health check
/// sends them, unless it sets its own `authorization`.
pub(super) fn probe_with_credentials(check: &mut HealthCheck, authorization: &str) {
    if !check
        .headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("authorization"))
    {
        check
            .headers
            .push(("authorization".to_string(), authorization.to_string()));
    }
}

/// The `retry` of an Elasticsearch service that sets none. A node that cannot be reached,
/// resets, or answers 502/503 is not the cluster's answer: try another node once (requests that
/// can be sent again only, as always).
pub(super) fn elasticsearch_retry() -> Retry {
    Retry {
        attempts: 2,
        on: vec![
            RetryOn::ConnectFailure,
            RetryOn::Reset,
            RetryOn::Status(502),
            RetryOn::Status(503),
        ],
        per_try_timeout: None,
        budget: None,
    }
}

impl Loader<'_> {
    /// Reads the block; its hosts go into `servers`.
    pub(super) fn elasticsearch(
        &mut self,
        node: &Node,
        servers: &mut Vec<UpstreamServer>,
    ) -> Option<Elasticsearch> {
        let f = self.fields(
            node,
            "`elasticsearch`",
            &[
                "hosts",
                "discovery",
                "bulk",
                "spool",
                "auth",
                "search_cache",
            ],
        )?;
        match f.get("hosts") {
            Some(list) => {
                for (url, pos) in self.string_list(list, "`hosts`") {
                    match UpstreamServer::from_url(&url, 1) {
                        Some(server) => servers.push(server),
                        None => self.error(pos, bad_server_url(&url)),
                    }
                }
            }
            None => self.error(
                f.pos,
                "`elasticsearch` needs `hosts`, e.g. `hosts: [\"http://127.0.0.1:9200\"]`",
            ),
        }
        let mut discovery = Some(EsDiscovery {
            refresh: DEFAULT_ES_REFRESH,
            roles: Vec::new(),
        });
        if let Some(d) = f.get("discovery") {
            let d = self.fields(d, "`discovery`", &["enabled", "refresh", "roles"])?;
            if let Some(n) = d.get("refresh") {
                if let (Some(refresh), Some(found)) =
                    (self.duration(n, "`discovery.refresh`"), discovery.as_mut())
                {
                    found.refresh = refresh;
                }
            }
            if let Some(n) = d.get("roles") {
                let roles = self.string_list(n, "`discovery.roles`");
                if let Some(found) = discovery.as_mut() {
                    found.roles = roles.into_iter().map(|(role, _)| role).collect();
                }
            }
            if let Some(n) = d.get("enabled") {
                if self.boolean(n, "`discovery.enabled`") == Some(false) {
                    discovery = None;
                }
            }
        }
        let mut bulk = EsBulk::default();
        if let Some(b) = f.get("bulk") {
            let b = self.fields(b, "`bulk`", &["route", "max_body", "batch"])?;
            if let Some(n) = b.get("batch") {
                if let Some(batch) = self.boolean(n, "`bulk.batch`") {
                    bulk.batch = batch;
                }
            }
            if let Some(n) = b.get("route") {
                match self.string(n, "`bulk.route`").as_deref() {
                    Some("node") => bulk.route = BulkRoute::Node,
                    Some("none") => bulk.route = BulkRoute::None,
                    Some(other) => self.error(
                        n.pos,
                        format!("unknown bulk route `{other}`; expected `node` or `none`"),
                    ),
                    None => {}
                }
            }
            if let Some(n) = b.get("max_body") {
                if let Some(size) = self.size(n, "`bulk.max_body`") {
                    bulk.max_body = size;
                }
            }
        }
        let mut spool = None;
        if let Some(node) = f.get("spool") {
            let s = self.fields(node, "`spool`", &["path", "max_size", "fsync"])?;
            let path = match s.get("path") {
                Some(p) => self.string(p, "`spool.path`").map(|p| self.base.join(p)),
                None => {
                    self.error(
                        s.pos,
                        "`spool` needs a `path` (a folder for the queue's files)",
                    );
                    None
                }
            };
            let max_size = match s.get("max_size") {
                Some(n) => self.size(n, "`spool.max_size`"),
                None => Some(DEFAULT_ES_SPOOL_SIZE),
            };
            let mut fsync = true;
            if let Some(n) = s.get("fsync") {
                match self.string(n, "`spool.fsync`").as_deref() {
                    Some("batch") => fsync = true,
                    Some("never") => fsync = false,
                    Some(other) => self.error(
                        n.pos,
                        format!("unknown fsync mode `{other}`; expected `batch` or `never`"),
                    ),
                    None => {}
                }
            }
            if let (Some(path), Some(max_size)) = (path, max_size) {
                spool = Some(EsSpool {
                    path,
                    max_size,
                    fsync,
                });
            }
        }
        let authorization = f.get("auth").and_then(|n| self.es_auth(n));
        let search_cache = f.get("search_cache").and_then(|n| self.es_search_cache(n));
        Some(Elasticsearch {
            discovery,
            bulk,
            spool,
            authorization,
            search_cache,
        })
    }

    /// `search_cache: { ttl, max_entries: 10000, max_entry_size: 1MiB }`.
    fn es_search_cache(&mut self, node: &Node) -> Option<EsSearchCache> {
        let f = self.fields(
            node,
            "`search_cache`",
            &["ttl", "max_entries", "max_entry_size"],
        )?;
        let ttl = match f.get("ttl") {
            Some(n) => self.duration(n, "`search_cache.ttl`")?,
            None => {
                self.error(
                    f.pos,
                    "`search_cache` needs a `ttl` (how long an answer is served), e.g. `ttl: 10s`",
                );
                return None;
            }
        };
        let max_entries = match f.get("max_entries") {
            Some(n) => self.uint(n, "`search_cache.max_entries`", 1, 1 << 32)?,
            None => DEFAULT_ES_SEARCH_CACHE_ENTRIES,
        };
        let max_entry_size = match f.get("max_entry_size") {
            Some(n) => self.size(n, "`search_cache.max_entry_size`")?,
            None => DEFAULT_ES_SEARCH_CACHE_ENTRY_SIZE,
        };
        Some(EsSearchCache {
            ttl,
            max_entries,
            max_entry_size,
        })
    }

    /// `auth: { basic: { username, password } }` or `auth: { api_key: ENCODED }` (the
    /// `encoded` value Elasticsearch's create-API-key call returns): the `Authorization` value.
    fn es_auth(&mut self, node: &Node) -> Option<String> {
        let f = self.fields(node, "`auth`", &["basic", "api_key"])?;
        match (f.get("basic"), f.get("api_key")) {
            (Some(basic), None) => {
                let b = self.fields(basic, "`auth.basic`", &["username", "password"])?;
                let mut part = |name: &str| match b.get(name) {
                    Some(n) => self.string(n, &format!("`auth.basic.{name}`")),
                    None => {
                        self.error(b.pos, format!("`auth.basic` needs `{name}`"));
                        None
                    }
                };
                let (username, password) = (part("username"), part("password"));
                let (username, password) = (username?, password?);
                if username.contains(':') {
                    self.error(
                        basic.pos,
                        "`auth.basic.username` cannot hold `:` (HTTP Basic separates it from the password with one)",
                    );
                    return None;
                }
                use base64::Engine;
                let token = base64::engine::general_purpose::STANDARD
                    .encode(format!("{username}:{password}"));
                Some(format!("Basic {token}"))
            }
            (None, Some(node)) => {
                let key = self.string(node, "`auth.api_key`")?;
                if key.is_empty() || key.bytes().any(|b| !b.is_ascii_graphic()) {
                    self.error(
                        node.pos,
                        "`auth.api_key` must be the key's `encoded` form (base64, no spaces)",
                    );
                    return None;
                }
                Some(format!("ApiKey {key}"))
            }
            _ => {
                self.error(
                    f.pos,
                    "`auth` needs exactly one of `basic: { username, password }` or `api_key`",
                );
                None
            }
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
}
