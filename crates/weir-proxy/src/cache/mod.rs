//! The shared response cache (`caches.NAME`, `routers.NAME.cache`): it wraps a route's
//! `service` action. A fresh stored answer is a reply whose body comes from memory; otherwise
//! the action runs, and an answer that may be stored (RFC 9111, `weir-cache`'s policy) is read
//! whole, stored, and answered from the stored copy. Every answer that went through the cache
//! carries `Cache-Status` (RFC 9211), and hits carry `Age`. One store for all workers: a
//! sharded map (quick_cache), bounded by bytes, whose hits take a shard's read lock only.
//!
//! A non-error answer to an unsafe method removes what it may have changed (RFC 9111 §4.4).
//!
//! Not yet here: revalidation, stale answers, request coalescing, purge, ranges served from a
//! stored answer, the disk tier.

use crate::balancer::Service;
use crate::client::ClientSide;
use crate::codec::{is_hop_by_hop, Framing, RequestHead, ResponseHead};
use crate::conn::watch::{Expired, Waiting};
use crate::reply::{LocalResponse, Reply, ReplyBody, ReplyHead};
use crate::upstream;
use crate::worker::{make_room, Worker};
use std::borrow::Cow;
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use weir_cache::{Directives, NotStorable, Outcome, Stored, Usable};

pub mod store;

use store::{unix_now, Object, ObjectFields, ResponseCache, CACHE_NAME};

/// The stored answer as a reply, with `Age` and `Cache-Status`.
fn reply_from<'r>(object: &Object, now: u64, status_value: String) -> Reply<'r> {
    let age = object.meta.age_at(now).to_string();
    // The length as a field too: a HEAD answer declares it without the body.
    let length = object.body.len().to_string();
    let fields = object
        .fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .chain([
            ("content-length", length.as_bytes()),
            ("age", age.as_bytes()),
            ("cache-status", status_value.as_bytes()),
        ]);
    let head = ResponseHead::from_fields(
        object.status,
        fields,
        Framing::Length(object.body.len() as u64),
    );
    Reply {
        head: ReplyHead::Response(head),
        body: ReplyBody::Bytes(object.body.clone()),
        upstream: None,
        body_filter: None,
    }
}

/// Runs the `service` action through `cache`.
pub(crate) async fn serve<'r, C: ClientSide>(
    worker: &Worker,
    cache: &ResponseCache,
    service: &'r Service,
    client: &mut C,
    head: &RequestHead,
) -> Reply<'r> {
    if !matches!(head.method(), "GET" | "HEAD") {
        let reply = upstream::forward(worker, service, client, head).await;
        invalidate_after(cache, head, client.scheme().as_str(), &reply);
        return reply;
    }
    let key = cache.primary_key(head, client.scheme().as_str());
    let asked = Directives::parse(head.head.get_all("cache-control"));
    let now = unix_now();
    let mut fwd = "uri-miss";
    if let Some(entry) = cache.store.get(&key) {
        fwd = "vary-miss";
        let variant = entry.variants.iter().find(|o| {
            weir_cache::secondary_key(&ObjectFields(&o.fields), &head.head).as_deref()
                == Some(o.secondary.as_slice())
        });
        if let Some(object) = variant {
            match object.meta.usable(now, &asked) {
                Usable::Fresh { ttl } | Usable::Stale { ttl } => {
                    let status = weir_cache::cache_status(CACHE_NAME, Outcome::Hit { ttl });
                    return reply_from(object, now, status);
                }
                // Revalidation is a later step: a stale answer is fetched again.
                Usable::StaleWhileRevalidate { .. } | Usable::Revalidate => fwd = "stale",
            }
        }
    }
    let request_time = now;
    let reply = upstream::forward(worker, service, client, head).await;
    fill(worker, cache, key, head, reply, fwd, request_time, client).await
}

/// Stores the answer when it may be stored, then answers from the stored copy; otherwise
/// passes it on, marked as not stored.
#[allow(clippy::too_many_arguments)]
async fn fill<'r, C: ClientSide>(
    worker: &Worker,
    cache: &ResponseCache,
    key: Vec<u8>,
    head: &RequestHead,
    reply: Reply<'r>,
    fwd: &'static str,
    request_time: u64,
    client: &C,
) -> Reply<'r> {
    let Reply {
        head: reply_head,
        body,
        upstream: upstream_use,
        body_filter,
    } = reply;
    let (response, mut up) = match (reply_head, body) {
        (ReplyHead::Response(response), ReplyBody::Upstream(up)) => (response, up),
        // A local answer (no server, a timeout), or one that is not a plain body.
        (head, body) => {
            let status = match &head {
                ReplyHead::Local(local) => local.status,
                ReplyHead::Shared(local) => local.status,
                ReplyHead::Response(response) => response.status,
            };
            let reply = Reply {
                head,
                body,
                upstream: upstream_use,
                body_filter,
            };
            return not_stored(reply, fwd, status, NotStorable::Status);
        }
    };
    let length = match verdict(cache, head, &response) {
        Ok(length) => length,
        Err(why) => {
            let status = response.status;
            let reply = Reply {
                head: ReplyHead::Response(response),
                body: ReplyBody::Upstream(up),
                upstream: upstream_use,
                body_filter,
            };
            return not_stored(reply, fwd, status, why);
        }
    };
    // Read the whole body (at most `max_object_size`) under the service's read timeout.
    let read_timeout = upstream_use
        .as_ref()
        .map_or(std::time::Duration::from_secs(60), |u| {
            u.service.read_timeout
        });
    while (up.buf.len() as u64) < length {
        make_room(&mut up.buf);
        let read = up.io.read_buf(&mut up.buf);
        match client
            .watch()
            .within(&worker.clock, Waiting::ResponseBody, read_timeout, read)
            .await
        {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) | Err(Expired) => {
                let failed = LocalResponse::text(502, "upstream body ended early");
                return Reply {
                    upstream: upstream_use,
                    ..Reply::local(Cow::Owned(failed))
                };
            }
        }
    }
    let body = up.buf.split_to(length as usize).freeze();
    if let Some(used) = &upstream_use {
        if response.keep_alive && up.buf.is_empty() {
            let service = used.service;
            worker.pool.checkin(
                used.server.id,
                up,
                service.max_idle_per_server,
                service.idle_timeout,
            );
        }
    }
    let connection = response
        .connection_names_headers
        .then(|| response.head.get("connection"))
        .flatten();
    let fields: Vec<(String, Vec<u8>)> = response
        .head
        .iter()
        .filter(|(name, _)| {
            !is_hop_by_hop(name)
                && !name.eq_ignore_ascii_case(b"content-length")
                && !name.eq_ignore_ascii_case(b"age")
                && !connection.is_some_and(|c| crate::codec::lists_token(c, name))
        })
        .map(|(n, v)| (String::from_utf8_lossy(n).to_ascii_lowercase(), v.to_vec()))
        .collect();
    let secondary = weir_cache::secondary_key(&response.head, &head.head).unwrap_or_default();
    let response_time = unix_now();
    let object = Arc::new(Object {
        status: response.status,
        meta: Stored::new(response.status, &response.head, request_time, response_time),
        fields,
        body,
        secondary,
    });
    let mut entry = cache.store.get(&key).unwrap_or_default();
    entry.variants.retain(|o| o.secondary != object.secondary);
    entry.variants.push(object.clone());
    cache.store.insert(key, entry);
    let value = weir_cache::cache_status(
        CACHE_NAME,
        Outcome::Forward {
            fwd,
            fwd_status: object.status,
            stored: true,
            detail: None,
        },
    );
    Reply {
        upstream: upstream_use,
        ..reply_from(&object, response_time, value)
    }
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
    cache
        .store
        .remove(&cache.key_for(scheme, host, req.path(), req.query()));
    for name in ["location", "content-location"] {
        let Some(target) = response.head.get(name) else {
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
        cache
            .store
            .remove(&cache.key_for(scheme, host, path, query));
    }
}

/// Passes an answer on with a `Cache-Status` that says it was not stored, and why.
fn not_stored<'r>(mut reply: Reply<'r>, fwd: &str, status: u16, why: NotStorable) -> Reply<'r> {
    let value = weir_cache::cache_status(
        CACHE_NAME,
        Outcome::Forward {
            fwd,
            fwd_status: status,
            stored: false,
            detail: Some(why.detail()),
        },
    );
    reply.edit_head(|response| response.head.append("cache-status", value.as_bytes()));
    reply
}

/// Whether the answer may be stored: the policy's verdict, a GET (HEAD answers have no body
/// to store), and a known length within `max_object_size`; the length when it may.
fn verdict(
    cache: &ResponseCache,
    req: &RequestHead,
    response: &ResponseHead,
) -> Result<u64, NotStorable> {
    weir_cache::storable(req.method(), response.status, &req.head, &response.head)?;
    if req.is_head() {
        return Err(NotStorable::Method);
    }
    match response.framing {
        Framing::Length(n) if n <= cache.max_object_size => Ok(n),
        Framing::Length(_) => Err(NotStorable::TooLarge),
        _ => Err(NotStorable::UnknownLength),
    }
}
