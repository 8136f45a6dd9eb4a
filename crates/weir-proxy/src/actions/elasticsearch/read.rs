//! Reads with a body on an Elasticsearch service (`_search`, `_msearch`, `_count`, `_mget`,
//! scroll and search templates): the body is read into memory first, so a try that failed on
//! one node (a reset connection, a 502 or a 503) goes to another with the same body. A read
//! changes nothing, so sending it twice is safe whatever its method. Bodies of unknown length
//! or over [`MAX_READ_BODY`] are relayed as they come, without that second chance. With a
//! search cache (`search_cache.rs`), searches are answered from it, or kept once answered.

use super::search_cache::{use_for, SearchCache, Use};
use super::EsService;
use super::{body_failure, error_type, es_error, plain_request_head};
use crate::actions::whole_body::Reader;
use crate::http::codec::{Framing, RequestHead};
use crate::http::local::LocalResponse;
use crate::io::watch::ConnWatch;
use crate::reply::client::ClientSide;
use crate::reply::{Reply, ReplyBody, ReplyHead};
use crate::servers::balancer::Service;
use crate::upstream;
use crate::upstream::detached::{Detached, Requester};
use crate::worker::Worker;
use std::borrow::Cow;

/// The largest read body kept in memory to be sent again.
pub const MAX_READ_BODY: u64 = 16 << 20;

/// Whether the request is a read whose body is worth keeping.
pub(crate) fn is_read_with_body(head: &RequestHead) -> bool {
    matches!(head.framing, Framing::Length(n) if n > 0)
        && kept_whole(head)
        && matches!(head.method(), "GET" | "POST")
        && is_read_path(head.path())
}

/// Whether the request's body (if any) is small enough, and of a known length, to be read
/// into memory first: larger or chunked bodies are relayed as they come.
pub(crate) fn kept_whole(head: &RequestHead) -> bool {
    match head.framing {
        Framing::None => true,
        Framing::Length(n) => n <= MAX_READ_BODY,
        Framing::Chunked | Framing::UntilClose => false,
    }
}

fn is_read_path(path: &str) -> bool {
    let mut segments = path.rsplit('/');
    matches!(
        (segments.next(), segments.next()),
        (Some("_search" | "_msearch" | "_count" | "_mget"), _)
            | (Some("scroll" | "template"), Some("_search"))
            | (Some("template"), Some("_msearch"))
    )
}

/// Runs a read: its body in memory, then the service's usual tries, each free to resend; a
/// search goes through the service's search cache when it has one.
pub(crate) async fn serve<'r, C: ClientSide>(
    worker: &Worker,
    service: &'r Service,
    es: &EsService,
    client: &mut C,
    head: &RequestHead,
) -> Reply<'r> {
    let body = match client.read_body(worker, head, MAX_READ_BODY).await {
        Ok(body) => body,
        Err(e) => return Reply::local(Cow::Owned(body_failure(e, None))),
    };
    let cache = es.search_cache.as_deref();
    let cached = cache.map(|c| (c, use_for(head, &body, service.authorization.is_some())));
    let (cache, key) = match cached {
        Some((cache, Use::Key { key, lookup })) => {
            if let Some(hit) = lookup.then(|| cache.get(&key)).flatten() {
                let (fields, body) = cache.answer(&hit);
                return Reply::local(Cow::Owned(LocalResponse::new(200, fields, body)));
            }
            (cache, key)
        }
        _ => {
            let mut sender = Detached::reading(worker, Requester::of(client), body);
            return upstream::forward(worker, service, &mut sender, head, None).await;
        }
    };
    // Asked without `Accept-Encoding`: what is kept must suit every client.
    let Some(plain) = plain_request_head(head, body.len()) else {
        return Reply::local(Cow::Owned(es_error(
            400,
            error_type(400),
            "invalid request head",
        )));
    };
    let mut sender = Detached::reading(worker, Requester::of(client), body);
    let reply = upstream::forward(worker, service, &mut sender, &plain, None).await;
    keep(worker, service, cache, key, sender.watch(), reply).await
}

/// Keeps a node's 200 answer to a search (read whole, within `max_entry_size`) and answers
/// with it; any other answer goes on as it came.
async fn keep<'r>(
    worker: &Worker,
    service: &Service,
    cache: &SearchCache,
    key: Vec<u8>,
    watch: &ConnWatch,
    reply: Reply<'r>,
) -> Reply<'r> {
    let Reply {
        head: ReplyHead::Response(mut response),
        body,
        upstream,
        body_filter,
    } = reply
    else {
        return reply;
    };
    if response.status != 200 {
        return Reply {
            head: ReplyHead::Response(response),
            body,
            upstream,
            body_filter,
        };
    }
    let reader = Reader {
        worker,
        watch,
        read_timeout: service.read_timeout,
        max: cache.max_entry_size,
    };
    let (body, status) = match reader.reply_body(&response, body, &upstream).await {
        Ok(bytes) => {
            cache.put(key, response.head.iter(), bytes.clone());
            response.framing = Framing::Length(bytes.len() as u64);
            (ReplyBody::Bytes(bytes), "weir; fwd=miss; stored")
        }
        Err(Some(body)) => (body, "weir; fwd=miss; detail=too-large"),
        Err(None) => {
            let failed = es_error(502, error_type(502), "the node's answer ended early");
            return Reply {
                upstream,
                ..Reply::local(Cow::Owned(failed))
            };
        }
    };
    response.head.append("cache-status", status.as_bytes());
    Reply {
        head: ReplyHead::Response(response),
        body,
        upstream,
        body_filter,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_paths() {
        for path in [
            "/_search",
            "/logs/_search",
            "/a,b/_msearch",
            "/logs/_count",
            "/_mget",
            "/_search/scroll",
            "/logs/_search/template",
            "/_msearch/template",
        ] {
            assert!(is_read_path(path), "{path}");
        }
        for path in [
            "/_bulk",
            "/logs/_doc/1",
            "/logs/_update/1",
            "/scroll",
            "/template",
        ] {
            assert!(!is_read_path(path), "{path}");
        }
    }
}
