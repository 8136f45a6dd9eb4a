//! `caches.NAME`: the shared response caches routers name with `cache:`.

use super::Loader;
use crate::model::*;
use crate::yaml::Node;

impl Loader<'_> {
    pub(super) fn cache(&mut self, name: String, node: &Node) -> Option<Cache> {
        let what = format!("cache `{name}`");
        let f = self.fields(
            node,
            &what,
            &[
                "memory",
                "max_object_size",
                "key",
                "lock_timeout",
                "purge",
                "disk",
            ],
        )?;
        let mut cache = Cache {
            name,
            memory: DEFAULT_CACHE_MEMORY,
            max_object_size: DEFAULT_CACHE_MAX_OBJECT,
            key: CacheKeyPart::DEFAULT.to_vec(),
            lock_timeout: DEFAULT_CACHE_LOCK_TIMEOUT,
            purge_allow: Vec::new(),
            purge_fanout: None,
            disk: None,
        };
        if let Some(node) = f.get("disk") {
            if let Some(d) = self.fields(node, "`disk`", &["path", "size"]) {
                let path = match d.get("path") {
                    Some(p) => self.string(p, "`disk.path`").map(|p| self.base.join(p)),
                    None => {
                        self.error(
                            d.pos,
                            "`disk` needs a `path` (a folder for the cache files)",
                        );
                        None
                    }
                };
                let size = match d.get("size") {
                    Some(n) => self.size(n, "`disk.size`"),
                    None => Some(DEFAULT_CACHE_DISK_SIZE),
                };
                if let (Some(path), Some(size)) = (path, size) {
                    cache.disk = Some(CacheDisk { path, size });
                }
            }
        }
        if let Some(n) = f.get("lock_timeout") {
            cache.lock_timeout = self.duration(n, "`lock_timeout`").unwrap_or_default();
        }
        let purge = f
            .get("purge")
            .and_then(|p| self.fields(p, "`purge`", &["allow", "fanout"]));
        if let Some(p) = purge {
            if let Some(fanout) = p.get("fanout") {
                let store = self.fields(fanout, "`purge.fanout`", &["redis"]);
                match store.as_ref().and_then(|f| f.get("redis")) {
                    Some(redis) => cache.purge_fanout = self.redis_store(redis),
                    None if store.is_some() => self.error(
                        fanout.pos,
                        "`purge.fanout` needs `redis`, the store the fleet's purges go through",
                    ),
                    None => {}
                }
            }
            if let Some(list) = p.get("allow") {
                for (text, pos) in self.string_list(list, "`purge.allow`") {
                    match crate::rule::Cidr::parse(&text) {
                        Some(net) => cache.purge_allow.push(net),
                        None => self.error(
                            pos,
                            format!("`{text}` is not an address or network; expected e.g. 127.0.0.1/32 or ::1"),
                        ),
                    }
                }
            }
        }
        if let Some(n) = f.get("memory") {
            cache.memory = self.size(n, "`memory`")?;
        }
        if let Some(n) = f.get("max_object_size") {
            cache.max_object_size = self.size(n, "`max_object_size`")?;
        }
        if cache.max_object_size > cache.memory {
            self.error(
                f.pos,
                format!("{what}: `max_object_size` is larger than `memory`"),
            );
        }
        if let Some(list) = f.get("key") {
            let mut parts = Vec::new();
            for (part, pos) in self.string_list(list, "`key`") {
                let parsed = match part.as_str() {
                    "method" => Some(CacheKeyPart::Method),
                    "scheme" => Some(CacheKeyPart::Scheme),
                    "host" => Some(CacheKeyPart::Host),
                    "path" => Some(CacheKeyPart::Path),
                    "query" => Some(CacheKeyPart::Query),
                    _ => None,
                };
                match parsed {
                    Some(p) if !parts.contains(&p) => parts.push(p),
                    Some(_) => self.error(pos, format!("`key` names `{part}` twice")),
                    None => self.error(
                        pos,
                        format!("unknown `key` part `{part}`; expected method, scheme, host, path, query"),
                    ),
                }
            }
            if !parts.contains(&CacheKeyPart::Path) {
                self.error(list.pos, "`key` must include `path`");
            }
            cache.key = parts;
        }
        Some(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_str;
    use crate::load::tests::{errors, BASE};
    use std::time::Duration;

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

    /// `purge.fanout.redis`: the store a fleet's purges go through, with the store's defaults.
    #[test]
    fn purge_fanout_settings_and_errors() {
        let cfg = load_str(
            &format!("{BASE}caches:\n  main: {{ purge: {{ allow: [127.0.0.1], fanout: {{ redis: {{ endpoints: [\"127.0.0.1:6379\"] }} }} }} }}\n"),
            "t.yaml",
        )
        .unwrap();
        let redis = cfg.caches[0].purge_fanout.as_ref().expect("a fanout");
        assert_eq!(redis.endpoints, ["127.0.0.1:6379"]);
        assert_eq!(redis.key_prefix, "weir:");
        assert_eq!(
            errors(&format!("{BASE}caches:\n  main: {{ purge: {{ fanout: {{}} }} }}\n")),
            ["t.yaml:4:28: `purge.fanout` needs `redis`, the store the fleet's purges go through"]
        );
        assert_eq!(
            errors(&format!("{BASE}caches:\n  main: {{ purge: {{ fanout: {{ redis: {{ endpoints: [x] }} }} }} }}\n")),
            ["t.yaml:4:51: a Redis endpoint must be `host:port` such as `127.0.0.1:6379`, found \"x\""]
        );
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
}
