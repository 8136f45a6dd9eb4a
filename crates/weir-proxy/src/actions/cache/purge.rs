//! `PURGE` through a cached route, from an address in `purge.allow`: the URL's stored
//! answers (every `Vary` variant), or every URL under a prefix when the path ends in `*`, or
//! every answer whose `Cache-Tag` names one of the request's `Cache-Tag` values; from memory
//! and from the disk tier. The answer is JSON with how many keys went. With `purge.fanout`,
//! the order is then published for the fleet's other instances (`fanout.rs`).

use super::store::{host_and_path, ResponseCache};
use crate::http::codec::RequestHead;
use crate::http::error::{ErrorKind, LocalError};
use crate::http::local::LocalResponse;
use crate::reply::Reply;
use std::borrow::Cow;
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Mutex;
use weir_config::CacheKeyPart;

/// Which stored answers a prefix or tag purge takes.
#[derive(Clone)]
struct Picker {
    /// The request's `Cache-Tag` values; when there are none, the prefix decides.
    tags: Vec<Box<[u8]>>,
    prefix: String,
    host: String,
    key_parts: Vec<CacheKeyPart>,
}

impl Picker {
    /// Whether the answer under `key`, whose `Cache-Tag` lines joined are `tag_line`, goes.
    fn picks(&self, key: &[u8], tag_line: &[u8]) -> bool {
        if !self.tags.is_empty() {
            return tag_line
                .split(|&b| b == b',')
                .any(|tag| self.tags.iter().any(|t| **t == *tag.trim_ascii()));
        }
        let (key_host, path) = host_and_path(&self.key_parts, key);
        key_host.is_none_or(|h| h == self.host.as_bytes())
            && path.starts_with(self.prefix.as_bytes())
    }
}

/// What one `PURGE` removes, as the request said it (and as the fleet's other instances get it
/// when the cache has `purge.fanout`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PurgeOrder {
    pub scheme: String,
    pub host: String,
    pub path: String,
    pub query: String,
    /// The request's `Cache-Tag` values; none: the path (a prefix when it ends in `*`).
    pub tags: Vec<Box<[u8]>>,
}

pub(super) async fn purge<'r>(
    cache: &ResponseCache,
    client: IpAddr,
    scheme: &str,
    req: &RequestHead,
) -> Reply<'r> {
    if !cache.purge_allow.iter().any(|net| net.contains(client)) {
        let message = "PURGE is not allowed from this address";
        return Reply::error(LocalError::new(403, ErrorKind::PurgeRefused, message));
    }
    let order = PurgeOrder {
        scheme: scheme.to_string(),
        host: req.host().to_ascii_lowercase(),
        path: req.path().to_string(),
        query: req.query().to_string(),
        tags: req
            .head
            .get_all("cache-tag")
            .flat_map(|line| line.split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|tag| !tag.is_empty())
            .map(Box::from)
            .collect(),
    };
    let count = apply(cache, &order).await;
    // Told to the fleet once applied here; the answer says whether the fleet was told.
    let fanout = match &cache.fanout {
        Some(fanout) => match fanout.publish(&order).await {
            true => ",\"fanout\":\"published\"",
            false => ",\"fanout\":\"failed\"",
        },
        None => "",
    };
    let answer = LocalResponse::new(
        200,
        vec![("content-type".into(), "application/json".into())],
        format!("{{\"purged\":{count}{fanout}}}\n"),
    );
    Reply::local(Cow::Owned(answer))
}

/// Removes what `order` names from memory and disk; how many keys went.
pub(super) async fn apply(cache: &ResponseCache, order: &PurgeOrder) -> usize {
    let store = &cache.store;
    let removed = Mutex::new(HashSet::<Box<[u8]>>::new());
    let note = |key: &[u8]| {
        if let Ok(mut removed) = removed.lock() {
            removed.insert(key.into());
        }
    };
    match order.path.strip_suffix('*') {
        prefix if prefix.is_some() || !order.tags.is_empty() => {
            let picker = Picker {
                tags: order.tags.clone(),
                prefix: prefix.unwrap_or_default().to_string(),
                host: order.host.clone(),
                key_parts: cache.key_parts().to_vec(),
            };
            store.objects.retain(|key, entry| {
                let picked = entry
                    .variants
                    .iter()
                    .any(|o| picker.picks(key, &o.tag_line()));
                if picked {
                    note(key);
                }
                !picked
            });
            if let Some(disk) = store.disk.clone() {
                // The disk's index is walked on a blocking thread: it unlinks files.
                let walk = move || disk.purge(|key, tags| picker.picks(key, tags));
                for key in tokio::task::spawn_blocking(walk).await.unwrap_or_default() {
                    note(&key);
                }
            }
        }
        _ => {
            let key = cache.key_for(&order.scheme, &order.host, &order.path, &order.query);
            let in_memory = store
                .objects
                .peek(&key)
                .is_some_and(|e| !e.variants.is_empty());
            if in_memory || store.disk.as_ref().is_some_and(|d| d.contains(&key)) {
                note(&key);
            }
            store.remove(&key);
        }
    }
    removed.lock().map_or(0, |r| r.len())
}
