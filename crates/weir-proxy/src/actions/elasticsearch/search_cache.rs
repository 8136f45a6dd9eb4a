//! The opt-in search cache of an Elasticsearch service (`search_cache: { ttl, max_entries }`):
//! `_search` answers (status 200) kept in memory for `ttl`, keyed by the path (so the
//! indices), the query string and the body, and shared by every worker. Elasticsearch answers
//! carry no freshness of their own, so this is a time-to-live memo, not an RFC 9111 cache: a
//! write shows in searches at most `ttl` late. Scrolls, `request_cache=false`, and requests
//! with `Cache-Control: no-store` never touch it; `no-cache` skips the lookup but stores the
//! fresh answer.

use crate::http::codec::RequestHead;
use crate::http::router::query_values;
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The fields of a node's answer a cached copy keeps.
const KEPT_FIELDS: [&str; 3] = ["content-type", "x-elastic-product", "warning"];

/// One service's cache, kept across reloads that keep its settings.
pub struct SearchCache {
    ttl: Duration,
    pub max_entry_size: u64,
    entries: Entries,
}

type Entries = quick_cache::sync::Cache<
    Vec<u8>,
    Arc<Cached>,
    quick_cache::UnitWeighter,
    foldhash::fast::RandomState,
    quick_cache::sync::DefaultLifecycle<Vec<u8>, Arc<Cached>>,
>;

impl std::fmt::Debug for SearchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchCache")
            .field("ttl", &self.ttl)
            .field("entries", &self.entries.len())
            .finish()
    }
}

/// A kept answer.
pub struct Cached {
    stored_at: Instant,
    fields: Vec<(String, String)>,
    body: Bytes,
}

/// What a request may do with the cache.
pub enum Use {
    /// Nothing: not a search, or one that must reach the cluster and not be kept.
    Bypass,
    /// Look it up under this key (`lookup` false for `no-cache`), and store the answer.
    Key { key: Vec<u8>, lookup: bool },
}

impl SearchCache {
    pub fn new(cfg: &weir_config::EsSearchCache) -> SearchCache {
        let entries = cfg.max_entries as usize;
        SearchCache {
            ttl: cfg.ttl,
            max_entry_size: cfg.max_entry_size,
            entries: Entries::with(
                entries,
                entries as u64,
                quick_cache::UnitWeighter,
                Default::default(),
                Default::default(),
            ),
        }
    }

    /// The reload identity: a cache is kept while these stay the same.
    pub fn identity(service: &str, cfg: &weir_config::EsSearchCache) -> String {
        format!(
            "{service} {:?} {} {}",
            cfg.ttl, cfg.max_entries, cfg.max_entry_size
        )
    }

    /// The answer kept under `key`, while it is younger than `ttl`.
    pub fn get(&self, key: &[u8]) -> Option<Arc<Cached>> {
        let cached = self.entries.get(key)?;
        if cached.stored_at.elapsed() < self.ttl {
            return Some(cached);
        }
        self.entries.remove(key);
        None
    }

    /// Keeps a node's 200 answer (its head's fields `fields`, its plain body).
    pub fn put<'a>(
        &self,
        key: Vec<u8>,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        body: Bytes,
    ) {
        let fields = fields
            .filter(|(name, _)| {
                KEPT_FIELDS
                    .iter()
                    .any(|k| name.eq_ignore_ascii_case(k.as_bytes()))
            })
            .map(|(name, value)| {
                (
                    String::from_utf8_lossy(name).to_ascii_lowercase(),
                    String::from_utf8_lossy(value).into_owned(),
                )
            })
            .collect();
        let cached = Cached {
            stored_at: Instant::now(),
            fields,
            body,
        };
        self.entries.insert(key, Arc::new(cached));
    }

    /// The answer to a request that found `cached` (its status is 200): its fields with its
    /// age and `Cache-Status` (RFC 9211) with the time it has left, and its body.
    pub fn answer(&self, cached: &Cached) -> (Vec<(String, String)>, Bytes) {
        let age = cached.stored_at.elapsed();
        let left = self.ttl.saturating_sub(age).as_secs();
        let mut fields = cached.fields.clone();
        fields.push(("age".into(), age.as_secs().to_string()));
        fields.push(("cache-status".into(), format!("weir; hit; ttl={left}")));
        (fields, cached.body.clone())
    }
}

/// Whether the request is a search (`GET` or `POST` on `_search`).
pub fn is_search(head: &RequestHead) -> bool {
    matches!(head.method(), "GET" | "POST") && head.path().rsplit('/').next() == Some("_search")
}

/// How `head` (with `body`, read whole) may use the cache. The key holds what changes the
/// answer: the path, the query string, the body, and the client's `Accept` and, unless the
/// service sends its own credentials (`own_credentials`), the client's `Authorization`, so
/// users the cluster shows different documents never share an answer.
pub fn use_for(head: &RequestHead, body: &[u8], own_credentials: bool) -> Use {
    let query = head.query();
    let never = query_values(query, "scroll").next().is_some()
        || query_values(query, "request_cache").any(|v| v == "false")
        || head.head.get("content-encoding").is_some()
        || cache_control_has(head, "no-store");
    if !is_search(head) || never {
        return Use::Bypass;
    }
    let mut key = Vec::with_capacity(head.path().len() + query.len() + body.len() + 64);
    for part in [
        head.path().as_bytes(),
        query.as_bytes(),
        head.head.get("accept").unwrap_or_default(),
        if own_credentials {
            b""
        } else {
            head.head.get("authorization").unwrap_or_default()
        },
    ] {
        key.extend_from_slice(part);
        key.push(0);
    }
    key.extend_from_slice(body);
    Use::Key {
        key,
        lookup: !cache_control_has(head, "no-cache"),
    }
}

fn cache_control_has(head: &RequestHead, directive: &str) -> bool {
    head.head.get_all("cache-control").any(|value| {
        value.split(|&b| b == b',').any(|d| {
            let d = d.trim_ascii();
            d.len() >= directive.len()
                && d[..directive.len()].eq_ignore_ascii_case(directive.as_bytes())
                && d.get(directive.len()).is_none_or(|&b| b == b'=')
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn head(raw: &str) -> RequestHead {
        crate::http::codec::parse_request(&mut BytesMut::from(raw.as_bytes()))
            .unwrap()
            .unwrap()
    }

    fn key(raw: &str, body: &[u8], own_credentials: bool) -> Option<(Vec<u8>, bool)> {
        match use_for(
            &head(&format!("{raw}\r\nhost: x\r\n\r\n")),
            body,
            own_credentials,
        ) {
            Use::Key { key, lookup } => Some((key, lookup)),
            Use::Bypass => None,
        }
    }

    #[test]
    fn what_is_kept_and_under_which_key() {
        let plain = key("POST /logs/_search HTTP/1.1", b"{}", false).unwrap();
        assert!(plain.1);
        // GET and POST with the same body are the same search.
        assert_eq!(
            key("GET /logs/_search HTTP/1.1", b"{}", false).unwrap(),
            plain
        );
        for other in [
            key("POST /logs/_search HTTP/1.1", b"{\"size\":1}", false),
            key("POST /other/_search HTTP/1.1", b"{}", false),
            key("POST /logs/_search?size=1 HTTP/1.1", b"{}", false),
            key(
                "POST /logs/_search HTTP/1.1\r\naccept: application/yaml",
                b"{}",
                false,
            ),
            key(
                "POST /logs/_search HTTP/1.1\r\nauthorization: Basic eDp5",
                b"{}",
                false,
            ),
        ] {
            assert_ne!(other.unwrap(), plain);
        }
        // With the service's own credentials, the client's do not matter.
        assert_eq!(
            key(
                "POST /logs/_search HTTP/1.1\r\nauthorization: Basic eDp5",
                b"{}",
                true
            )
            .unwrap(),
            key("POST /logs/_search HTTP/1.1", b"{}", true).unwrap()
        );
        for never in [
            "POST /logs/_search?scroll=1m HTTP/1.1",
            "POST /logs/_search?request_cache=false HTTP/1.1",
            "POST /logs/_search HTTP/1.1\r\ncache-control: no-store",
            "POST /logs/_search HTTP/1.1\r\ncontent-encoding: gzip",
            "POST /logs/_count HTTP/1.1",
            "POST /_search/scroll HTTP/1.1",
            "PUT /logs/_search HTTP/1.1",
        ] {
            assert!(key(never, b"{}", false).is_none(), "{never}");
        }
        let no_cache = key(
            "POST /logs/_search HTTP/1.1\r\ncache-control: no-cache",
            b"{}",
            false,
        );
        assert!(!no_cache.unwrap().1);
    }

    #[test]
    fn answers_live_for_their_ttl() {
        let cache = SearchCache::new(&weir_config::EsSearchCache {
            ttl: Duration::from_millis(50),
            max_entries: 2,
            max_entry_size: 1 << 20,
        });
        let fields = [
            (&b"Content-Type"[..], &b"application/json"[..]),
            (b"X-Other", b"dropped"),
        ];
        cache.put(b"a".to_vec(), fields.into_iter(), Bytes::from_static(b"{}"));
        let cached = cache.get(b"a").unwrap();
        let (headers, body) = cache.answer(&cached);
        assert_eq!(body, Bytes::from_static(b"{}"));
        assert!(headers.contains(&("content-type".into(), "application/json".into())));
        assert!(!headers.iter().any(|(n, _)| n == "x-other"));
        assert!(headers
            .iter()
            .any(|(n, v)| n == "cache-status" && v.starts_with("weir; hit; ttl=")));
        std::thread::sleep(Duration::from_millis(60));
        assert!(cache.get(b"a").is_none());
    }
}
