//! Revalidation in the background (`stale-while-revalidate`, RFC 5861): the request that
//! found the stale answer is answered with it at once, and a task on the same worker repeats
//! the request to the origin, conditionally, through the same retry and balancing code
//! (`upstream::forward`) as any request, on behalf of a `Requester`, as a `Detached` client
//! side that sends no body and takes no reply.

use super::object::Object;
use super::store::{Key, Leader, ResponseCache};
use super::Asking;
use crate::http::codec::RequestHead;
use crate::servers::balancer::Service;
use crate::upstream::detached::{Detached, Requester};
use crate::worker::Worker;
use bytes::Bytes;
use std::rc::Rc;
use std::sync::Arc;
use weir_cache::Directives;

/// Revalidates `stale` (stored under `key`) for a copy of `head` on a task of this worker;
/// `leader` is held until the answer is stored.
#[allow(clippy::too_many_arguments)]
pub(super) fn in_background(
    worker: &Rc<Worker>,
    cache: &Arc<ResponseCache>,
    service: &Arc<Service>,
    from: Requester,
    head: &RequestHead,
    stale: &Arc<Object>,
    key: Key,
    leader: Leader,
) {
    let (worker, cache, service) = (worker.clone(), cache.clone(), service.clone());
    let mut head = head.clone();
    let stale = stale.clone();
    tokio::task::spawn_local(async move {
        let mut client = Detached::new(&worker, from, Bytes::new());
        let asked = Directives::default();
        let asking = Asking {
            key,
            stale: Some(stale),
            fwd: "stale",
            asked: &asked,
            request_time: worker.clock.unix_seconds(),
            _leader: Some(leader),
        };
        let forwarding =
            super::forward_and_fill(&worker, &cache, &service, &mut client, &mut head, asking);
        // The answer was stored (or not) inside; what is left of it is dropped.
        drop(Box::pin(forwarding).await);
    });
}
