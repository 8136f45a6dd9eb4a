//! Filling the cache from an origin answer: whether it may be stored (`verdict`), reading its
//! body whole (a declared length, chunked, or until close; from HTTP/1 or HTTP/2), storing it
//! with its freshness, and refreshing a stored answer from a `304 Not Modified`. An answer that
//! turns out too large is passed on untouched: its raw bytes stay in the connection's buffer,
//! where the relay reads them from the start.

use super::body::Body;
use super::object::{stored_fields, Object};
use super::store::{Key, ResponseCache};
use crate::actions::whole_body::Reader;
use crate::http::codec::{Framing, Head, RequestHead, ResponseHead};
use crate::io::watch::ConnWatch;
use crate::reply::{Reply, ReplyHead};
use crate::servers::balancer::UpstreamUse;
use crate::worker::Worker;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use weir_cache::{Directives, NotStorable, Stored};

/// An origin answer read for the cache.
pub(super) enum Filled<'r> {
    /// Stored, with the origin's head and body as they came (the body still in memory, where
    /// the first answer is sent from); the connection (if any) went back to the pool.
    Stored(Arc<Object>, Option<UpstreamUse<'r>>, ResponseHead, Bytes),
    /// Not stored, for this reason: the reply goes on as it came.
    Passed(Reply<'r>, NotStorable),
    /// The body failed midway: nothing to store or pass on.
    Failed(Option<UpstreamUse<'r>>),
}

/// Reads `reply` (the origin's answer to `req`, asked at `request_time`) and stores it under
/// `key` when it may be stored (the key then moves into the store, leaving `key` empty).
pub(super) async fn fill<'r>(
    worker: &Worker,
    watch: &ConnWatch,
    cache: &ResponseCache,
    key: &mut Key,
    (req, asked): (&RequestHead, &Directives),
    reply: Reply<'r>,
    request_time: u64,
) -> Filled<'r> {
    let Reply {
        head,
        body,
        upstream,
        body_filter,
    } = reply;
    let response = match head {
        ReplyHead::Response(response) => response,
        // A local answer (no server, a timeout): never stored.
        head => {
            let reply = Reply {
                head,
                body,
                upstream,
                body_filter,
            };
            return Filled::Passed(reply, NotStorable::Status);
        }
    };
    let answered = Directives::parse(response.head.get_all("cache-control"));
    if let Err(why) = verdict(cache, req, asked, &response, &answered) {
        let reply = Reply {
            head: ReplyHead::Response(response),
            body,
            upstream,
            body_filter,
        };
        return Filled::Passed(reply, why);
    }
    let read_timeout = upstream
        .as_ref()
        .map_or(Duration::from_secs(60), |u| u.service.read_timeout);
    let reader = Reader {
        worker,
        watch,
        read_timeout,
        max: cache.max_object_size,
    };
    let read = reader.reply_body(&response, body, &upstream).await;
    let body = match read {
        Ok(body) => body,
        Err(None) => return Filled::Failed(upstream),
        Err(Some(body)) => {
            let reply = Reply {
                head: ReplyHead::Response(response),
                body,
                upstream,
                body_filter,
            };
            return Filled::Passed(reply, NotStorable::TooLarge);
        }
    };
    let response_time = worker.clock.unix_seconds();
    let judged = (&response.head, &answered);
    let object = Arc::new(Object::new(
        response.status,
        stored_fields(
            &response.head,
            response.connection_names_headers,
            answered.no_cache_fields,
        ),
        Body::keep(body.clone()),
        Stored::new(response.status, judged, request_time, response_time),
        weir_cache::secondary_key(&response.head, &req.head).unwrap_or_default(),
    ));
    cache.store.put(std::mem::take(key), object.clone());
    Filled::Stored(object, upstream, response, body)
}

/// After a `304` to a revalidation (RFC 9111 §4.3.4): the stored answer with the 304's fields
/// in place of its own of the same name (less those that describe the stored body:
/// `weir_cache::updated_by_304`), and the 304's times and freshness (asked at `request_time`,
/// answered at `response_time`). Stored again.
pub(super) fn refresh(
    cache: &ResponseCache,
    key: &Key,
    stale: &Object,
    response: &ResponseHead,
    (request_time, response_time): (u64, u64),
) -> Arc<Object> {
    let update = stored_fields(&response.head, response.connection_names_headers, false);
    let updated = || {
        update
            .iter()
            .filter(|(name, _)| weir_cache::updated_by_304(name))
    };
    let mut fields = Head::default();
    for (name, value) in stale.fields.iter() {
        if !updated().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            fields.append_field(name, value);
        }
    }
    for (name, value) in updated() {
        fields.append_field(name, value);
    }
    // The fields the merged `Cache-Control` lists in `no-cache="..."` go, as on a fill.
    if Directives::parse(fields.get_all("cache-control")).no_cache_fields {
        fields = stored_fields(&fields, false, true);
    }
    // Judged with the 304's `Age`, which is not kept among the fields.
    let mut judged = fields.clone();
    if let Some(age) = response.head.get("age") {
        judged.append("age", age);
    }
    let answered = Directives::parse(judged.get_all("cache-control"));
    let meta = Stored::new(
        stale.status,
        (&judged, &answered),
        request_time,
        response_time,
    );
    let object = Arc::new(Object::new(
        stale.status,
        fields,
        stale.body.clone(),
        meta,
        stale.secondary.clone(),
    ));
    cache.store.put(key.clone(), object.clone());
    object
}

/// Whether the answer may be stored: the policy's verdict, a GET (HEAD answers have no body
/// to store), and, when declared, a length within `max_object_size`.
fn verdict(
    cache: &ResponseCache,
    req: &RequestHead,
    asked: &Directives,
    response: &ResponseHead,
    answered: &Directives,
) -> Result<(), NotStorable> {
    let request = (&req.head, asked);
    weir_cache::storable(
        req.method(),
        response.status,
        request,
        (&response.head, answered),
    )?;
    if req.is_head() {
        return Err(NotStorable::Method);
    }
    match response.framing {
        Framing::Length(n) if n > cache.max_object_size => Err(NotStorable::TooLarge),
        _ => Ok(()),
    }
}
