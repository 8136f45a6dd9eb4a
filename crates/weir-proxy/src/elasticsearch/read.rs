//! Reads with a body on an Elasticsearch service (`_search`, `_msearch`, `_count`, `_mget`,
//! scroll and search templates): the body is read into memory first, so a try that failed on
//! one node (a reset connection, a 502 or a 503) goes to another with the same body. A read
//! changes nothing, so sending it twice is safe whatever its method. Bodies of unknown length
//! or over [`MAX_READ_BODY`] are relayed as they come, without that second chance.

use super::body_failure;
use crate::balancer::Service;
use crate::client::ClientSide;
use crate::codec::{Framing, RequestHead};
use crate::detached::{Detached, Requester};
use crate::reply::Reply;
use crate::upstream;
use crate::worker::Worker;
use std::borrow::Cow;

/// The largest read body kept in memory to be sent again.
pub const MAX_READ_BODY: u64 = 16 << 20;

/// Whether the request is a read whose body is worth keeping.
pub(crate) fn is_read_with_body(head: &RequestHead) -> bool {
    matches!(head.framing, Framing::Length(n) if n > 0 && n <= MAX_READ_BODY)
        && matches!(head.method(), "GET" | "POST")
        && is_read_path(head.path())
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

/// Runs a read: its body in memory, then the service's usual tries, each free to resend.
pub(crate) async fn serve<'r, C: ClientSide>(
    worker: &Worker,
    service: &'r Service,
    client: &mut C,
    head: &RequestHead,
) -> Reply<'r> {
    let body = match client.read_body(worker, head, MAX_READ_BODY).await {
        Ok(body) => body,
        Err(e) => return Reply::local(Cow::Owned(body_failure(e, None))),
    };
    let mut sender = Detached::reading(worker, Requester::of(client), body);
    upstream::forward(worker, service, &mut sender, head, None).await
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
