//! The client as the lifecycle sees it, whatever the protocol: the [`ClientSide`] trait the
//! actions and the upstream side use (`conn/h1.rs` for HTTP/1, `conn/h2.rs` for HTTP/2, and
//! `upstream/detached.rs` for requests weir makes itself), the [`ClientConn`] trait of the
//! connections the exchange answers, and what a driver reports back: what an exchange ended
//! with (how a body transfer failed is `reply/relay.rs`'s [`BodyError`]).

use crate::http::codec::{Framing, RequestHead};
use crate::http::Scheme;
use crate::io::watch::ConnWatch;
use crate::reply::relay::BodyError;
use crate::reply::request_body::Outgoing;
use crate::reply::Reply;
use crate::servers::balancer::UpstreamUse;
use crate::servers::pool::UpstreamConn;
use crate::worker::Worker;
use bytes::Bytes;
use std::net::IpAddr;
use tokio::io::{AsyncRead, AsyncWrite};

/// A client's TLS session as the access log shows it.
#[derive(Clone, Copy)]
pub struct TlsInfo<'a> {
    /// `TLSv1.2` or `TLSv1.3`.
    pub version: &'static str,
    /// The name the client asked for (SNI), if it sent one.
    pub sni: Option<&'a str>,
}

/// A [`TlsInfo`] kept for a connection's HTTP/2 streams (the session itself is inside the
/// `h2` connection).
pub struct TlsSession {
    pub version: &'static str,
    pub sni: Option<Box<str>>,
}

impl TlsSession {
    pub fn of(info: TlsInfo<'_>) -> TlsSession {
        TlsSession {
            version: info.version,
            sni: info.sni.map(Into::into),
        }
    }

    pub fn info(&self) -> TlsInfo<'_> {
        TlsInfo {
            version: self.version,
            sni: self.sni.as_deref(),
        }
    }
}

/// What the actions and the upstream side need from the client of a request, whatever its
/// protocol: who the client is, its deadline watch, and its request body. The upstream side
/// writes the upstream request itself, from what [`ClientSide::outgoing`] lends it.
pub(crate) trait ClientSide {
    /// The stream an HTTP/1 client's body is read from (unused by other sides).
    type BodyIo: AsyncRead + AsyncWrite + Unpin;

    fn ip(&self) -> IpAddr;
    /// Whether the request came over HTTP/3 (its head reads as an HTTP/2 one otherwise).
    fn http3(&self) -> bool {
        false
    }
    /// The client's address as text (for the forwarding headers).
    fn ip_text(&self) -> &str;
    fn scheme(&self) -> Scheme;
    fn watch(&self) -> &ConnWatch;

    /// The TLS session under the request, for the access log (asked only when it logs).
    fn tls(&self) -> Option<TlsInfo<'_>> {
        None
    }

    /// What one try of the request needs from the client: its forwarding fields, its watch,
    /// a buffer for the upstream head, and the request body's source (taken by the first
    /// try unless it is in memory).
    fn outgoing(&mut self, req: &RequestHead) -> Outgoing<'_, Self::BodyIo>;

    /// Whether the request may be sent again after a try that may have reached the server (a
    /// reused connection found dead, a retried status): idempotent and nothing of it consumed,
    /// which means no body (RFC 9110 9.2.2); a side whose body is in memory may say more.
    fn may_resend(&self, req: &RequestHead) -> bool {
        req.framing == Framing::None && req.is_idempotent()
    }

    /// Gives the request body up unread (a refusal by its declared length, `buffering`'s):
    /// the connection then answers without reading it and closes. A side whose body goes with
    /// the request's stream (HTTP/2) or is in memory has nothing to do.
    fn abandon_body(&mut self) {}

    /// Reads the whole request body into memory (an action that must see all of it before
    /// anything goes upstream: an Elasticsearch `_bulk`), at most `max` bytes, else
    /// [`BodyError::TooLarge`].
    async fn read_body(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        max: u64,
    ) -> Result<Bytes, BodyError>;
}

/// A client connection the exchange answers (the HTTP/1 and HTTP/2 drivers): the driver
/// writes the reply.
pub(crate) trait ClientConn: ClientSide {
    /// Writes the reply to the client (the response-body phase happens here).
    async fn send_reply<'r>(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        reply: Reply<'r>,
    ) -> Sent<'r>;
}

/// The result of one exchange, for the access log and the connection loop.
pub struct Outcome {
    pub keep_alive: bool,
    /// The connection closes while request bytes may still be arriving: close it gently.
    pub linger: bool,
    pub status: u16,
    /// Response body bytes sent.
    pub bytes: u64,
}

/// What writing a reply ended with; `finish` takes it from here.
pub struct Sent<'r> {
    pub outcome: Outcome,
    /// The upstream connection, when its response was read completely and it may be reused.
    pub reusable: Option<UpstreamConn>,
    pub upstream: Option<UpstreamUse<'r>>,
}

/// The status of a request whose client closed before its answer: nginx's 499, written to
/// the access log, never sent.
pub const CLIENT_CLOSED: u16 = 499;
