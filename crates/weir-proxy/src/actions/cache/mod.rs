//! The shared response cache (`caches.NAME`, `routers.NAME.cache`): it wraps a route's
//! `service` action. `serve` is the lifecycle of a request through it:
//!
//! 1. `PURGE` from an allowed address removes a URL, a prefix or a tag (`purge.rs`); other
//!    unsafe methods go to the origin, and a non-error answer removes what it may have changed
//!    (RFC 9111 §4.4).
//! 2. A GET or HEAD looks up its variant (`store.rs`). A fresh one, or a stale one the client
//!    accepts, is the answer (`answer.rs`: 304, 206, or the whole). One inside
//!    `stale-while-revalidate` is the answer too, and one request revalidates it in the
//!    background (`revalidate.rs`).
//! 3. Otherwise the request goes to the origin, one per key at a time: the first leads, the
//!    others wait for its answer (at most `lock_timeout`), then look again. The origin is
//!    asked for the whole answer, conditionally when a stale copy has validators; the
//!    client's own conditions and range are applied to what is stored.
//! 4. The answer is stored when it may be (`fill.rs`), a 304 refreshes the stale copy, and
//!    an error lets a stale copy answer within `stale-if-error`. Every answer that went
//!    through the cache carries `Cache-Status` (RFC 9211).
//!
//! 5. With a disk tier (`disk.rs`), what is stored is written to disk too, and a key missing
//!    from memory is read from disk before the origin is asked.

use crate::http::ascii::eq_ignore_case;
use crate::http::codec::{Framing, RequestHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::io::watch::Waiting;
use crate::reply::client::ClientSide;
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::servers::balancer::Service;
use crate::upstream;
use crate::worker::Worker;
use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;
use weir_cache::{Directives, Fields, NotStorable, Outcome, Usable};

mod answer;
mod body;
mod disk;
pub mod fanout;
mod fill;
mod object;
mod purge;
mod revalidate;
pub mod store;

use fill::Filled;
use object::Object;
use store::{Join, Key, Leader, ResponseCache, CACHE_NAME};

/// The request fields the cache answers itself from a stored answer, so the origin is asked
/// without them.
const CLIENT_CONDITIONS: [&str; 6] = [
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "if-range",
    "range",
];

/// Whether a field may be one of `CLIENT_CONDITIONS`: an `If-` field, or `Range`.
fn is_client_condition(name: &[u8]) -> bool {
    name.get(..3).is_some_and(|p| eq_ignore_case(p, b"if-")) || eq_ignore_case(name, b"range")
}

/// Runs the `service` action through `cache`.
pub(crate) async fn serve<'r, C: ClientSide>(
    worker: &Rc<Worker>,
    cache: &Arc<ResponseCache>,
    service: &'r Arc<Service>,
    client: &mut C,
    head: &mut RequestHead,
) -> Reply<'r> {
    match head.method() {
        "GET" | "HEAD" => {}
        "PURGE" => {
            return purge::purge(cache, client.ip(), client.scheme().as_str(), head).await;
        }
        _ => {
            let reply = upstream::forward(worker, service, client, head, None).await;
            invalidate_after(cache, head, client.scheme().as_str(), &reply);
            return reply;
        }
    }
    let key = cache.primary_key(head, client.scheme().as_str());
    let asked = Directives::parse(head.head.get_all("cache-control"));
    let mut waited = false;
    loop {
        let now = worker.clock.unix_seconds();
        let mut found = cache.store.lookup(&key, &head.head, now);
        if found.object.is_none() && !found.other_variants && cache.store.load_from_disk(&key).await
        {
            found = cache.store.lookup(&key, &head.head, now);
        }
        let stale = match &found.object {
            Some(object) => match object.meta.usable(now, &asked) {
                Usable::Fresh { ttl } | Usable::Stale { ttl } => {
                    cache.store.counts[worker.id].hits.add(1);
                    let status = weir_cache::cache_status(CACHE_NAME, Outcome::Hit { ttl });
                    return answer::stored(object, head, now, &status);
                }
                Usable::StaleWhileRevalidate { ttl } => {
                    cache.store.counts[worker.id].hits.add(1);
                    // One request revalidates (a GET without a body, which a background
                    // fetch can repeat); every one is answered with the stale copy now.
                    if !head.is_head() && head.framing == Framing::None {
                        if let Some(leader) = cache.store.flights.lead(&key) {
                            let from = crate::upstream::detached::Requester::of(client);
                            revalidate::in_background(
                                worker, cache, service, from, head, object, key, leader,
                            );
                        }
                    }
                    let hit = weir_cache::cache_status(CACHE_NAME, Outcome::Hit { ttl });
                    let status = format!("{hit}; detail=stale-while-revalidate");
                    return answer::stored(object, head, now, &status);
                }
                Usable::Revalidate => Some(object.clone()),
            },
            None => None,
        };
        let fwd = match (&stale, found.other_variants) {
            (Some(_), _) => "stale",
            (None, true) => "vary-miss",
            (None, false) => "uri-miss",
        };
        // Coalescing: a GET that may fill the key leads or waits, once.
        let coalesce = !head.is_head() && !waited && !found.pass && !asked.no_store;
        let leader = match coalesce.then(|| cache.store.flights.join(&key)) {
            Some(Join::Follow(flight)) => {
                let landed = flight.landed();
                let watch = client.watch();
                let _ = watch
                    .within(
                        &worker.clock,
                        Waiting::ResponseHead,
                        cache.lock_timeout,
                        landed,
                    )
                    .await;
                waited = true;
                continue;
            }
            Some(Join::Lead(leader)) => Some(leader),
            None => None,
        };
        let asking = Asking {
            key,
            stale,
            fwd,
            asked: &asked,
            request_time: now,
            _leader: leader,
        };
        cache.store.counts[worker.id].misses.add(1);
        return forward_and_fill(worker, cache, service, client, head, asking).await;
    }
}

/// One trip to the origin for the cache.
struct Asking<'a> {
    key: Key,
    /// The stored answer this trip revalidates.
    stale: Option<Arc<Object>>,
    /// Why the trip is made (`Cache-Status`'s `fwd`).
    fwd: &'static str,
    /// The request's `Cache-Control`.
    asked: &'a Directives,
    /// When the request was made (Unix seconds; the RFC's `request_time`).
    request_time: u64,
    /// Held until the answer is stored (or not): the key's followers wait for it.
    _leader: Option<Leader>,
}

/// Asks the origin, then stores, refreshes, or falls back to the stale copy.
async fn forward_and_fill<'r, C: ClientSide>(
    worker: &Worker,
    cache: &ResponseCache,
    service: &'r Service,
    client: &mut C,
    head: &mut RequestHead,
    asking: Asking<'_>,
) -> Reply<'r> {
    let Asking {
        mut key,
        stale,
        fwd,
        asked,
        request_time,
        _leader,
    } = asking;
    // A GET asks for the whole answer (validated against the stale copy); the client's
    // conditions and range are applied to it afterwards. A HEAD goes as it came.
    let mut taken = Vec::new();
    let mut validated = false;
    if !head.is_head() {
        // Most requests carry none: one pass over the fields spares six lookups.
        let any = head.head.iter().any(|(name, _)| is_client_condition(name));
        for name in CLIENT_CONDITIONS.into_iter().filter(|_| any) {
            let before = taken.len();
            taken.extend(head.head.get_all(name).map(|value| (name, value.to_vec())));
            if taken.len() > before {
                head.head.remove(name);
            }
        }
        if let Some(stale) = &stale {
            if let Some(etag) = stale.field("etag") {
                head.head.append("if-none-match", etag);
                validated = true;
            }
            if let Some(modified) = stale.field("last-modified") {
                head.head.append("if-modified-since", modified);
                validated = true;
            }
        }
    }
    let reply = upstream::forward(worker, service, client, head, None).await;
    // The head goes back to what the client sent (the access log and filters read it).
    let conditions_or_range = !taken.is_empty();
    if validated {
        head.head.remove("if-none-match");
        head.head.remove("if-modified-since");
    }
    for (name, value) in taken {
        head.head.append(name, &value);
    }
    let status = reply.status();
    let answered_at = worker.clock.unix_seconds();
    let reply = match (stale.as_deref(), reply) {
        (
            Some(stale),
            Reply {
                head: ReplyHead::Response(response),
                body,
                upstream,
                ..
            },
        ) if status == 304 => {
            cache.store.counts[worker.id].revalidated.add(1);
            let object = fill::refresh(cache, &key, stale, &response, (request_time, answered_at));
            if let (ReplyBody::Upstream(up), true, Some(used)) =
                (body, response.keep_alive, &upstream)
            {
                used.check_in(&worker.pool, up);
            }
            let value = forwarded(fwd, 304, true, None);
            return Reply {
                upstream,
                ..answer::stored(&object, head, answered_at, &value)
            };
        }
        (Some(stale), reply)
            if (500..=504).contains(&status) && stale.meta.usable_on_error(answered_at, asked) =>
        {
            let value = forwarded(fwd, status, false, Some("stale-if-error"));
            return Reply {
                upstream: reply.upstream,
                ..answer::stored(stale, head, answered_at, &value)
            };
        }
        (_, reply) => reply,
    };
    let request = (&*head, asked);
    let watch = client.watch();
    match fill::fill(worker, watch, cache, &mut key, request, reply, request_time).await {
        Filled::Stored(object, upstream, mut response, body) => {
            cache.store.counts[worker.id].stores.add(1);
            let value = forwarded(fwd, object.status, true, None);
            if !conditions_or_range {
                // The origin's head as it came, with the stored body: nothing to cut or
                // compare, so nothing to build again.
                response.framing = Framing::Length(body.len() as u64);
                // Just stored, its age is nearly always 0: no number to format.
                let age: Cow<str> = match object.meta.age_at(answered_at) {
                    0 => Cow::Borrowed("0"),
                    age => Cow::Owned(age.to_string()),
                };
                let added = "age".len() + age.len() + "cache-status".len() + value.len();
                response.head.reserve(added, 2);
                response.head.set("age", age.as_bytes());
                response.head.append("cache-status", value.as_bytes());
                return Reply {
                    head: ReplyHead::Response(response),
                    body: ReplyBody::Bytes(body),
                    upstream,
                    body_filter: None,
                };
            }
            Reply {
                upstream,
                ..answer::stored(&object, head, answered_at, &value)
            }
        }
        Filled::Passed(mut reply, why) => {
            // An answer the origin made unstorable skips coalescing for a while; one the
            // request made so (or an error) does not.
            let from_origin = matches!(reply.head, ReplyHead::Response(_));
            let request_caused =
                matches!(why, NotStorable::Method | NotStorable::Authorization) || asked.no_store;
            if from_origin && !request_caused && status < 500 {
                cache.store.mark_pass(key, answered_at);
            }
            let value = forwarded(fwd, status, false, Some(why.detail()));
            reply.edit_head(|response| response.head.append("cache-status", value.as_bytes()));
            reply
        }
        Filled::Failed(upstream) => {
            let message = "upstream body ended early";
            Reply {
                upstream,
                ..Reply::error(LocalError::new(502, ErrorKind::UpstreamFailed, message))
            }
        }
    }
}

/// `Cache-Status` of the usual miss: a new key, answered 200 and stored.
const URI_MISS_STORED: &str = "weir; fwd=uri-miss; fwd-status=200; stored";

/// `Cache-Status` for an answer that went to the origin. The usual miss is a constant: built,
/// it cost a string and about 250 instructions per miss.
fn forwarded(
    fwd: &str,
    fwd_status: u16,
    stored: bool,
    detail: Option<&'static str>,
) -> Cow<'static, str> {
    if (fwd, fwd_status, stored, detail) == ("uri-miss", 200, true, None) {
        return Cow::Borrowed(URI_MISS_STORED);
    }
    let outcome = Outcome::Forward {
        fwd,
        fwd_status,
        stored,
        detail,
    };
    Cow::Owned(weir_cache::cache_status(CACHE_NAME, outcome))
}

/// After an unsafe method's non-error answer, the stored answers it may have changed go
/// (RFC 9111 §4.4): the request's URL, and `Location` and `Content-Location` when they are
/// on the same host.
fn invalidate_after(cache: &ResponseCache, req: &RequestHead, scheme: &str, reply: &Reply<'_>) {
    if matches!(req.method(), "OPTIONS" | "TRACE") {
        return;
    }
    let response = match &reply.head {
        ReplyHead::Response(response) if (200..400).contains(&response.status) => response,
        _ => return,
    };
    let host = req.host();
    let store = &cache.store;
    store.remove(&cache.key_for(scheme, host, req.path(), req.query()));
    for name in ["location", "content-location"] {
        let Some(target) = response.head.first(name) else {
            continue;
        };
        let target = String::from_utf8_lossy(target);
        // Relative, or absolute on the same host (another host's entries stay).
        let path_and_query = match target.split_once("://") {
            Some((_, rest)) => match rest.split_once('/') {
                Some((authority, path)) if authority.eq_ignore_ascii_case(host) => {
                    format!("/{path}")
                }
                _ => continue,
            },
            None if target.starts_with('/') => target.into_owned(),
            None => continue,
        };
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query.as_str(), ""));
        store.remove(&cache.key_for(scheme, host, path, query));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usual_miss_status_is_the_one_built() {
        let outcome = Outcome::Forward {
            fwd: "uri-miss",
            fwd_status: 200,
            stored: true,
            detail: None,
        };
        let built = weir_cache::cache_status(CACHE_NAME, outcome);
        assert_eq!(forwarded("uri-miss", 200, true, None), built);
        assert_eq!(URI_MISS_STORED, built);
        assert!(matches!(
            forwarded("uri-miss", 203, true, None),
            Cow::Owned(_)
        ));
    }
}
