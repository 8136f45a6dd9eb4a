//! The client side of a request weir makes itself on a client's behalf: a background
//! revalidation (`actions/cache/revalidate.rs`), or one node's share of a split `_bulk`
//! (`actions/elasticsearch/bulk.rs`). Its body, if any, is already in memory; it has a deadline watch
//! of its own, and is not a [`ClientConn`](crate::reply::client::ClientConn): no reply is
//! written to it (the caller reads the answer itself).

use crate::http::codec::RequestHead;
use crate::http::Scheme;
use crate::io::watch::ConnWatch;
use crate::reply::client::ClientSide;
use crate::reply::relay::BodyError;
use crate::reply::request_body::{BodySource, Outgoing};
use crate::worker::Worker;
use bytes::Bytes;
use std::net::IpAddr;
use std::rc::Rc;
use tokio::io::Empty;

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

/// Room for an upstream head, reserved before each try (allocated by the first).
const HEAD_CAPACITY: usize = 512;

/// A client side whose request body is `body` (empty: none).
pub(crate) struct Detached {
    from: Requester,
    watch: Rc<ConnWatch>,
    body: Bytes,
    /// The upstream head of a try.
    out: Vec<u8>,
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
            out: Vec::new(),
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
    type BodyIo = Empty;

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

    /// The body in memory, for every try (the head goes out in one buffer per request).
    fn outgoing(&mut self, _req: &RequestHead) -> Outgoing<'_, Empty> {
        self.out.clear();
        self.out.reserve(HEAD_CAPACITY);
        let body = if self.body.is_empty() {
            BodySource::None
        } else {
            BodySource::Bytes(self.body.clone())
        };
        Outgoing {
            ip_text: &self.from.ip_text,
            scheme: self.from.scheme,
            watch: &self.watch,
            out: &mut self.out,
            body,
        }
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
}
