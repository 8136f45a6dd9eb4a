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
            .and_then(|p| self.fields(p, "`purge`", &["allow"]));
        if let Some(p) = purge {
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
