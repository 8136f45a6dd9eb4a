//! The client side of a request weir makes itself on a client's behalf: a background
//! revalidation (`actions/cache/revalidate.rs`), or one node's share of a split `_bulk`
//! (`actions/elasticsearch/bulk.rs`). Its body, if any, is already in memory; it has a deadline watch
//! of its own, and takes no reply (the caller reads the answer itself).

use crate::http::codec::RequestHead;
use crate::http::Scheme;
use crate::io::watch::{ConnWatch, Waiting};
use crate::reply::client::{BodyError, ClientSide, Outcome, Sent};
use crate::reply::Reply;
use crate::servers::balancer::UpstreamUse;
use crate::servers::h2_pool::BodyPump;
use crate::servers::pool::UpstreamIo;
use crate::worker::Worker;
use bytes::Bytes;
use h2::SendStream;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Who a request is made for: the client whose request caused it (its address goes into the
/// forwarding headers).
#[derive(Clone)]
pub(crate) struct Requester {
    ip: IpAddr,
    ip_text: String,
    scheme: Scheme,
}

impl Requester {
    pub(crate) fn of(client: &impl ClientSide) -> Requester {
        Requester {
            ip: client.ip(),
            ip_text: client.ip_text().to_string(),
            scheme: client.scheme(),
        }
    }
}

/// A client side whose request body is `body` (empty: none).
pub(crate) struct Detached {
    from: Requester,
    watch: Rc<ConnWatch>,
    body: Bytes,
    /// The request only reads (an Elasticsearch search, say): sent again after a failed try
    /// whatever its method, since its body is at hand.
    reads_only: bool,
}

impl Detached {
    pub(crate) fn new(worker: &Worker, from: Requester, body: Bytes) -> Detached {
        Detached {
            from,
            watch: worker.watch_connection(),
            body,
            reads_only: false,
        }
    }

    /// A request that only reads, with its body in memory: it may be sent again.
    pub(crate) fn reading(worker: &Worker, from: Requester, body: Bytes) -> Detached {
        Detached {
            reads_only: true,
            ..Detached::new(worker, from, body)
        }
    }
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

    fn may_resend(&self, req: &RequestHead) -> bool {
        self.reads_only || (self.body.is_empty() && req.is_idempotent())
    }

    /// The head and the body, in one write when the body is small.
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
        let body = &self.body;
        let writing = async {
            if body.len() <= 16 * 1024 {
                out.extend_from_slice(body);
                upstream.write_all(&out).await
            } else {
                upstream.write_all(&out).await?;
                upstream.write_all(body).await
            }
        };
        match self
            .watch
            .within(&worker.clock, Waiting::UpstreamWrite, write_limit, writing)
            .await
        {
            Ok(Ok(())) => Ok(self.body.len() as u64),
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
        // Buffered by the h2 crate beyond the stream's window; sent as the window opens.
        stream
            .send_data(self.body.clone(), true)
            .map_err(|_| BodyError::Sink)?;
        Ok(None)
    }

    async fn read_body(
        &mut self,
        _worker: &Worker,
        _req: &RequestHead,
        max: u64,
    ) -> Result<Bytes, BodyError> {
        if self.body.len() as u64 > max {
            return Err(BodyError::TooLarge);
        }
        Ok(std::mem::take(&mut self.body))
    }

    /// Never called: the caller reads the answer before a reply would be written.
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
