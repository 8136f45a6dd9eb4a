//! A client side whose request body a middleware has read into memory (`forward_auth`'s
//! `forward_body`): the action sends those bytes, and again on a retry, where it would have
//! relayed the body from the client.

use crate::http::codec::RequestHead;
use crate::http::Scheme;
use crate::io::watch::ConnWatch;
use crate::reply::client::ClientSide;
use crate::reply::relay::BodyError;
use crate::reply::request_body::{BodySource, Outgoing};
use crate::worker::Worker;
use bytes::Bytes;
use std::net::IpAddr;

/// `client`, its request body `body` (already read from it).
pub(crate) struct ReadBody<'c, C> {
    client: &'c mut C,
    body: Bytes,
}

impl<'c, C: ClientSide> ReadBody<'c, C> {
    pub(crate) fn new(client: &'c mut C, body: Bytes) -> ReadBody<'c, C> {
        ReadBody { client, body }
    }
}

impl<C: ClientSide> ClientSide for ReadBody<'_, C> {
    type BodyIo = C::BodyIo;

    fn ip(&self) -> IpAddr {
        self.client.ip()
    }

    fn ip_text(&self) -> &str {
        self.client.ip_text()
    }

    fn scheme(&self) -> Scheme {
        self.client.scheme()
    }

    fn watch(&self) -> &ConnWatch {
        self.client.watch()
    }

    /// The body is in memory: it may go again whatever was sent of it.
    fn may_resend(&self, req: &RequestHead) -> bool {
        req.is_idempotent()
    }

    /// The client's, with the body in memory in place of the client's (read already).
    fn outgoing(&mut self, req: &RequestHead) -> Outgoing<'_, C::BodyIo> {
        let body = self.body.clone();
        let mut outgoing = self.client.outgoing(req);
        outgoing.body = match body.is_empty() {
            true => BodySource::None,
            false => BodySource::Bytes(body),
        };
        outgoing
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
        Ok(self.body.clone())
    }
}
