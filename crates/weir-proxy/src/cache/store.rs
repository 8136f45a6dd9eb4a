//! The cache's store: stored answers (`Object`) by primary key, each key holding its `Vary`
//! variants, in one quick_cache map shared by every worker and bounded by bytes. A lookup
//! takes a shard's read lock and clones an `Arc`; a stored answer turns into a reply with
//! `Age` and `Cache-Status`.

use crate::codec::{Head, RequestHead};
use bytes::Bytes;
use std::sync::Arc;
use weir_cache::{Fields, Stored};
use weir_config::CacheKeyPart;

/// The identifier in `Cache-Status`.
pub(super) const CACHE_NAME: &str = "weir";

impl Fields for Head {
    fn lines<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.get_all(name)
    }
}

/// One stored answer.
pub(super) struct Object {
    pub(super) status: u16,
    /// The fields the client gets (hop-by-hop ones, `Age` and the length left out).
    pub(super) fields: Vec<(String, Vec<u8>)>,
    pub(super) body: Bytes,
    pub(super) meta: Stored,
    /// The request's values of the fields `Vary` names (empty without `Vary`).
    pub(super) secondary: Vec<u8>,
}

impl Object {
    fn weight(&self) -> u64 {
        let head: usize = self.fields.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        (head + self.body.len() + self.secondary.len() + 128) as u64
    }
}

pub(super) struct ObjectFields<'a>(pub(super) &'a [(String, Vec<u8>)]);

impl Fields for ObjectFields<'_> {
    fn lines<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// What a primary key holds: the stored variants (one per secondary key).
#[derive(Clone, Default)]
pub(super) struct Entry {
    pub(super) variants: Vec<Arc<Object>>,
}

#[derive(Clone)]
pub(super) struct Weigh;

impl quick_cache::Weighter<Vec<u8>, Entry> for Weigh {
    fn weight(&self, key: &Vec<u8>, entry: &Entry) -> u64 {
        key.len() as u64 + entry.variants.iter().map(|o| o.weight()).sum::<u64>()
    }
}

/// A compiled `caches.NAME`.
pub struct ResponseCache {
    pub name: String,
    pub(super) store: quick_cache::sync::Cache<Vec<u8>, Entry, Weigh>,
    pub(super) max_object_size: u64,
    key: Vec<CacheKeyPart>,
}

impl std::fmt::Debug for ResponseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCache")
            .field("name", &self.name)
            .finish()
    }
}

impl ResponseCache {
    pub fn new(cfg: &weir_config::Cache) -> ResponseCache {
        // quick_cache sizes its shards from an item estimate: one per 16 KiB.
        let items = (cfg.memory / (16 << 10)).clamp(64, 1 << 22) as usize;
        ResponseCache {
            name: cfg.name.clone(),
            store: quick_cache::sync::Cache::with_weighter(items, cfg.memory, Weigh),
            max_object_size: cfg.max_object_size,
            key: cfg.key.clone(),
        }
    }

    /// The primary key: the configured parts of the request (HEAD is looked up as GET, so a
    /// stored GET answers it).
    pub(super) fn primary_key(&self, req: &RequestHead, scheme: &str) -> Vec<u8> {
        self.key_for(scheme, req.host(), req.path(), req.query())
    }

    /// The primary key of a GET for this URL.
    pub(super) fn key_for(&self, scheme: &str, host: &str, path: &str, query: &str) -> Vec<u8> {
        let mut key = Vec::with_capacity(128);
        for part in &self.key {
            match part {
                CacheKeyPart::Method => key.extend_from_slice(b"GET"),
                CacheKeyPart::Scheme => key.extend_from_slice(scheme.as_bytes()),
                CacheKeyPart::Host => key.extend_from_slice(host.to_ascii_lowercase().as_bytes()),
                CacheKeyPart::Path => key.extend_from_slice(path.as_bytes()),
                CacheKeyPart::Query => key.extend_from_slice(query.as_bytes()),
            }
            key.push(0);
        }
        key
    }
}

pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
