//! The client connection as the lifecycle sees it, whatever the protocol: the [`ClientSide`]
//! trait a driver implements (`conn/h1.rs` for HTTP/1, `conn/h2.rs` for HTTP/2), and what the driver reports back: how
//! a body transfer failed, what an exchange ended with.

use crate::conn::watch::ConnWatch;
use crate::conn::Scheme;
use crate::exchange::reply::Reply;
use crate::http::codec::{Framing, RequestHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::process::worker::Worker;
use crate::upstream::balancer::UpstreamUse;
use crate::upstream::h2::pool::BodyPump;
use crate::upstream::pool::{UpstreamConn, UpstreamIo};
use bytes::Bytes;
use h2::SendStream;
use std::net::IpAddr;
use std::time::Duration;

/// What the lifecycle needs from a client connection, whatever its protocol: who the client is,
/// its deadline watch, and the driver's two wire operations (send a request on upstream, write
/// a reply). The HTTP/1 driver implements it (`conn/h1.rs`); actions and filters see only this.
pub(crate) trait ClientSide {
    fn ip(&self) -> IpAddr;
    /// The client's address as text (for the forwarding headers).
    fn ip_text(&self) -> &str;
    fn scheme(&self) -> Scheme;
    fn watch(&self) -> &ConnWatch;

    /// Sends the request on an upstream connection: the head `write_head` writes (HTTP/1 bytes;
    /// it is given the client's address as text and its scheme), then the request body,
    /// re-framed as that head declares. Interim answers the client waits for (`100 Continue`)
    /// are the driver's business.
    async fn send_request(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        write_head: impl FnOnce(&mut Vec<u8>, &str, Scheme),
        upstream: &mut UpstreamIo,
        write_limit: Duration,
    ) -> Result<u64, BodyError>;

    /// Sends the request body on an HTTP/2 upstream stream and ends the stream. An HTTP/2
    /// client's body is handed to a task of its own, so it flows while the response does
    /// (the returned pump is kept as long as the response body); an HTTP/1 client's is
    /// relayed before the response is awaited.
    async fn send_body_h2(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        stream: SendStream<Bytes>,
        write_limit: Duration,
    ) -> Result<Option<BodyPump>, BodyError>;

    /// Whether the request may be sent again after a try that may have reached the server (a
    /// reused connection found dead, a retried status): idempotent and nothing of it consumed,
    /// which means no body (RFC 9110 9.2.2); a side whose body is in memory may say more.
    fn may_resend(&self, req: &RequestHead) -> bool {
        req.framing == Framing::None && req.is_idempotent()
    }

    /// Reads the whole request body into memory (an action that must see all of it before
    /// anything goes upstream: an Elasticsearch `_bulk`), at most `max` bytes, else
    /// [`BodyError::TooLarge`].
    async fn read_body(
        &mut self,
        worker: &Worker,
        req: &RequestHead,
        max: u64,
    ) -> Result<Bytes, BodyError>;

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

#[derive(Debug, Clone, Copy)]
pub enum BodyError {
    /// The sending side closed or failed before the body ended.
    Source,
    /// The sending side went quiet for longer than its limit.
    SourceStalled,
    /// The body's framing is invalid.
    Malformed,
    /// More than the allowed number of bytes.
    TooLarge,
    /// The receiving side failed.
    Sink,
    /// The receiving side took nothing for longer than its limit.
    SinkStalled,
}

/// The status of a request whose client closed before its answer: nginx's 499, written to
/// the access log, never sent.
pub const CLIENT_CLOSED: u16 = 499;

impl BodyError {
    /// The answer owed to a client whose own request body failed: bad framing or silence.
    pub fn client_answer(self) -> Option<LocalError> {
        let (status, kind, message) = self.client_failure()?;
        Some(LocalError::new(status, kind, message))
    }

    /// The same as its parts.
    pub fn client_failure(self) -> Option<(u16, ErrorKind, &'static str)> {
        Some(match self {
            BodyError::Malformed => (400, ErrorKind::MalformedBody, "malformed request body"),
            BodyError::SourceStalled => (
                408,
                ErrorKind::BodyTimeout,
                "timed out reading the request body",
            ),
            BodyError::TooLarge => (
                413,
                ErrorKind::BodyTooLarge,
                "the request body is too large",
            ),
            _ => return None,
        })
    }
}
