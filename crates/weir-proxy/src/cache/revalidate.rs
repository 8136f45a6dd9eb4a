//! Revalidation in the background (`stale-while-revalidate`, RFC 5861): the request that
//! found the stale answer is answered with it at once, and a task on the same worker repeats
//! the request to the origin, conditionally, through the same retry and balancing code
//! (`upstream::forward`) as any request, on behalf of a `Requester` that sends no body and
//! takes no reply.

use super::object::Object;
use super::store::{Leader, ResponseCache};
use super::Asking;
use crate::balancer::{Service, UpstreamUse};
use crate::client::{BodyError, ClientSide, Outcome, Sent};
use crate::codec::RequestHead;
use crate::conn::watch::{ConnWatch, Waiting};
use crate::conn::Scheme;
use crate::pool::UpstreamIo;
use crate::reply::Reply;
use crate::upstream_h2::pool::BodyPump;
use crate::worker::Worker;
use bytes::Bytes;
use h2::SendStream;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use weir_cache::Directives;

/// Who a background request is made for: the client whose request found the stale answer
/// (its address goes into the forwarding headers).
pub(super) struct Requester {
    ip: IpAddr,
    ip_text: String,
    scheme: Scheme,
}

impl Requester {
    pub(super) fn of(client: &impl ClientSide) -> Requester {
        Requester {
            ip: client.ip(),
            ip_text: client.ip_text().to_string(),
            scheme: client.scheme(),
        }
    }
}

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
    key: Vec<u8>,
    leader: Leader,
) {
    let (worker, cache, service) = (worker.clone(), cache.clone(), service.clone());
    let mut head = head.clone();
    let stale = stale.clone();
    tokio::task::spawn_local(async move {
        let mut client = Detached {
            from,
            watch: worker.watch_connection(),
        };
        let asked = Directives::default();
        let asking = Asking {
            key,
            stale: Some(stale),
            fwd: "stale",
            asked: &asked,
            request_time: super::store::unix_now(),
            _leader: Some(leader),
        };
        let forwarding =
            super::forward_and_fill(&worker, &cache, &service, &mut client, &mut head, asking);
        // The answer was stored (or not) inside; what is left of it is dropped.
        drop(Box::pin(forwarding).await);
    });
}

/// The client side of a background request.
struct Detached {
    from: Requester,
    watch: Rc<ConnWatch>,
}

impl ClientSide for Detached {
    fn ip(&self) -> IpAddr {
        self.from.ip
    }

    fn ip_text(&self) -> &str {
        &self.from.ip_text
    }

    fn scheme(&self) -> Scheme {
        self.from.scheme
    }

    fn watch(&self) -> &ConnWatch {
        &self.watch
    }

    /// The head only: a request revalidated in the background has no body.
    async fn send_request(
        &mut self,
        worker: &Worker,
        _req: &RequestHead,
        write_head: impl FnOnce(&mut Vec<u8>, &str, Scheme),
        upstream: &mut UpstreamIo,
        write_limit: Duration,
    ) -> Result<u64, BodyError> {
        let mut out = Vec::with_capacity(512);
        write_head(&mut out, &self.from.ip_text, self.from.scheme);
        let writing = upstream.write_all(&out);
        match self
            .watch
            .within(&worker.clock, Waiting::UpstreamWrite, write_limit, writing)
            .await
        {
            Ok(Ok(())) => Ok(0),
            Ok(Err(_)) => Err(BodyError::Sink),
            Err(_) => Err(BodyError::SinkStalled),
        }
    }

    async fn send_body_h2(
        &mut self,
        _worker: &Worker,
        _req: &RequestHead,
        mut stream: SendStream<Bytes>,
        _write_limit: Duration,
    ) -> Result<Option<BodyPump>, BodyError> {
        stream
            .send_data(Bytes::new(), true)
            .map_err(|_| BodyError::Sink)?;
        Ok(None)
    }

    /// Never called: the cache keeps what it needs before the reply would be written.
    async fn send_reply<'r>(
        &mut self,
        _worker: &Worker,
        _req: &RequestHead,
        reply: Reply<'r>,
    ) -> Sent<'r> {
        let upstream: Option<UpstreamUse<'r>> = reply.upstream;
        Sent {
            outcome: Outcome {
                keep_alive: false,
                linger: false,
                status: 0,
                bytes: 0,
            },
            reusable: None,
            upstream,
        }
    }
}
