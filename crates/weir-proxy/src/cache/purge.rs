//! `PURGE` through a cached route, from an address in `purge.allow`: the URL's stored
//! answers (every `Vary` variant), or every URL under a prefix when the path ends in `*`, or
//! every answer whose `Cache-Tag` names one of the request's `Cache-Tag` values. The answer
//! is JSON with how many keys went.

use super::store::ResponseCache;
use crate::codec::RequestHead;
use crate::reply::{LocalResponse, Reply};
use std::borrow::Cow;
use std::cell::Cell;
use std::net::IpAddr;

pub(super) fn purge<'r>(
    cache: &ResponseCache,
    client: IpAddr,
    scheme: &str,
    req: &RequestHead,
) -> Reply<'r> {
    if !cache.purge_allow.iter().any(|net| net.contains(client)) {
        let refused = LocalResponse::text(403, "PURGE is not allowed from this address");
        return Reply::local(Cow::Owned(refused));
    }
    let objects = &cache.store.objects;
    let tags: Vec<&[u8]> = req
        .head
        .get_all("cache-tag")
        .flat_map(|line| line.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|tag| !tag.is_empty())
        .collect();
    let host = req.host().to_ascii_lowercase();
    let removed = Cell::new(0u64);
    if !tags.is_empty() {
        objects.retain(|_, entry| {
            let hit = entry.variants.iter().any(|o| o.tagged(&tags));
            removed.set(removed.get() + u64::from(hit));
            !hit
        });
    } else if let Some(prefix) = req.path().strip_suffix('*') {
        objects.retain(|key, entry| {
            let (key_host, path) = cache.host_and_path(key);
            let hit = key_host.is_none_or(|h| h == host.as_bytes())
                && path.starts_with(prefix.as_bytes())
                && !entry.variants.is_empty();
            removed.set(removed.get() + u64::from(hit));
            !hit
        });
    } else {
        let key = cache.key_for(scheme, &host, req.path(), req.query());
        let gone = objects.remove(&key);
        removed.set(u64::from(gone.is_some_and(|(_, e)| !e.variants.is_empty())));
    }
    let body = format!("{{\"purged\":{}}}\n", removed.get());
    let answer = LocalResponse::new(
        200,
        vec![("content-type".into(), "application/json".into())],
        body,
    );
    Reply::local(Cow::Owned(answer))
}
