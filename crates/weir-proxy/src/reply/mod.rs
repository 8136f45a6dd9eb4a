//! What an action answers with: a [`Reply`] is a head and a body source. Actions (`respond`,
//! `redirect`, `service`, `static`, the cache, Elasticsearch) build replies, response-head
//! filters edit them, and only a connection driver turns one into wire format. Local answers
//! (`http/local.rs`) keep prebuilt HTTP/1 bytes so the h1 driver writes them with one copy.
//! weir's own errors travel as values ([`ErrorHead`]) until the exchange renders them.

pub mod body_filter;
pub mod client;
pub mod h2_edge;
pub mod h3_body;
pub mod relay;
pub mod request_body;

use crate::http::codec::ResponseHead;
use crate::http::error::{LocalError, PrebuiltError};
use crate::http::file_body::FileBody;
use crate::http::local::LocalResponse;
use crate::reply::body_filter::BodyFilter;
use crate::servers::balancer::UpstreamUse;
use crate::servers::pool::UpstreamConn;
use bytes::Bytes;
use std::borrow::Cow;
use std::rc::Rc;
use std::task::{Context, Poll};

/// An action's answer: what to send, and the upstream it came from (if any).
pub struct Reply<'r> {
    pub head: ReplyHead<'r>,
    pub body: ReplyBody,
    /// The server that answered: logged, counted in flight until the exchange finishes, and
    /// where `finish` returns the connection.
    pub upstream: Option<UpstreamUse<'r>>,
    /// Installed by a response-head filter: the body passes through it on its way out.
    pub body_filter: Option<BodyFilter>,
}

pub enum ReplyHead<'r> {
    /// A local answer, written from its prebuilt bytes; its body is its own, unless the
    /// reply's body is a file.
    Local(Cow<'r, LocalResponse>),
    /// The same, kept by a cache (a static file's head, built once per open file).
    Shared(Rc<LocalResponse>),
    /// An editable head: an upstream's response, or a local answer that a response-head filter
    /// edited.
    Response(ResponseHead),
    /// weir's own error, not yet in wire form: the exchange renders it once, in the flavour
    /// the request and route need, before the response-head filters (`exchange::render_error`).
    Error(ErrorHead<'r>),
}

/// An error as a reply carries it: made for this request, or prebuilt with its plain answer.
pub enum ErrorHead<'r> {
    Made(LocalError),
    Prebuilt(&'r PrebuiltError),
}

impl<'r> ErrorHead<'r> {
    pub fn error(&self) -> &LocalError {
        match self {
            ErrorHead::Made(error) => error,
            ErrorHead::Prebuilt(prebuilt) => &prebuilt.error,
        }
    }

    /// The plain rendering: a prebuilt error's answer is borrowed, not built again.
    pub fn plain(&self) -> Cow<'r, LocalResponse> {
        match self {
            ErrorHead::Made(error) => Cow::Owned(error.plain()),
            ErrorHead::Prebuilt(prebuilt) => Cow::Borrowed(&prebuilt.plain),
        }
    }

    /// The same, moving a made error's header lines into its answer.
    pub fn into_plain(self) -> Cow<'r, LocalResponse> {
        match self {
            ErrorHead::Made(error) => Cow::Owned(error.into_plain()),
            ErrorHead::Prebuilt(prebuilt) => Cow::Borrowed(&prebuilt.plain),
        }
    }
}

pub enum ReplyBody {
    /// With `ReplyHead::Local`: the local answer's own body.
    Local,
    Bytes(Bytes),
    /// Still on the upstream connection, framed as the response head says.
    Upstream(UpstreamConn),
    /// Still on an HTTP/2 upstream stream (DATA frames, then trailers).
    Stream(crate::servers::h2_pool::H2Body),
    /// A part of a file (the `static` action).
    File(FileBody),
    /// After `101 Switching Protocols`: the connection becomes a byte tunnel.
    Upgrade(UpstreamConn),
    /// Made as the relay pulls it: a Lua script's answer once it flushed (`ngx.flush`).
    Produced(Box<dyn BodyProducer>),
}

/// A body made while it is sent (`relay::relay_produced` pulls it): each piece the producer
/// hands over is written before it is asked for the next, so a producer that waits for its
/// piece to be written (`ngx.flush(true)`) goes on when asked again; one that `runs_on` is
/// asked while its piece is written.
pub trait BodyProducer {
    /// The next piece; `None` at the body's end; `Err` when the producer failed (the answer
    /// is then cut short: its head is out).
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, ()>>>;
    /// Runs the producer to its own end once nothing it makes is sent any more: after the
    /// body's end (a script goes on after `ngx.eof`), or, when `gone`, after the client left
    /// (the producer is told so: a script's next output or flush fails).
    fn poll_rest(&mut self, cx: &mut Context<'_>, gone: bool) -> Poll<()>;
    /// Whether the producer may be asked for its next piece while the last one is being
    /// written (a script's `ngx.flush()` without `true` goes on once its output is queued).
    fn runs_on(&self) -> bool;
}

impl ReplyBody {
    /// A mapped file's bytes in its place, for a path that cannot send the file by `sendfile`
    /// (no read into a buffer); any other body as it is.
    pub fn mapped_as_bytes(self) -> ReplyBody {
        match self {
            ReplyBody::File(FileBody {
                mapped: Some(bytes),
                ..
            }) => ReplyBody::Bytes(bytes),
            other => other,
        }
    }
}

impl<'r> Reply<'r> {
    pub fn local(response: Cow<'r, LocalResponse>) -> Reply<'r> {
        Reply::local_head(ReplyHead::Local(response))
    }

    /// A local answer kept to be sent again (its body is its own).
    pub fn shared(response: Rc<LocalResponse>) -> Reply<'r> {
        Reply::local_head(ReplyHead::Shared(response))
    }

    /// weir's own error answer for this request, not yet rendered.
    pub fn error(error: LocalError) -> Reply<'r> {
        Reply::local_head(ReplyHead::Error(ErrorHead::Made(error)))
    }

    /// The same for an error prebuilt once.
    pub fn prebuilt_error(error: &'r PrebuiltError) -> Reply<'r> {
        Reply::local_head(ReplyHead::Error(ErrorHead::Prebuilt(error)))
    }

    fn local_head(head: ReplyHead<'r>) -> Reply<'r> {
        Reply {
            head,
            body: ReplyBody::Local,
            upstream: None,
            body_filter: None,
        }
    }

    /// The status the client gets (or, for an unrendered error, would get plainly).
    pub fn status(&self) -> u16 {
        match &self.head {
            ReplyHead::Local(local) => local.status,
            ReplyHead::Shared(local) => local.status,
            ReplyHead::Response(response) => response.status,
            ReplyHead::Error(error) => error.error().status,
        }
    }

    /// A header of the answer, for what the access log reads back (`Cache-Status`).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        fn local<'a>(local: &'a LocalResponse, name: &str) -> Option<&'a [u8]> {
            (local.headers.iter())
                .find(|(field, _)| field.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.as_bytes())
        }
        match &self.head {
            ReplyHead::Local(answer) => local(answer, name),
            ReplyHead::Shared(answer) => local(answer, name),
            ReplyHead::Response(response) => response.head.get(name),
            ReplyHead::Error(_) => None,
        }
    }

    /// Edits the head as a [`ResponseHead`], turning a prebuilt local answer into one first,
    /// so response-head filters treat local and proxied answers alike. An error not rendered
    /// yet is edited in its plain form (a cache's answer to a failure carries `Cache-Status`).
    pub fn edit_head(&mut self, edit: impl FnOnce(&mut ResponseHead)) {
        if let ReplyHead::Error(error) = &self.head {
            self.head = ReplyHead::Local(error.plain());
        }
        let local = match &self.head {
            ReplyHead::Local(local) => Some(&**local),
            ReplyHead::Shared(local) => Some(&**local),
            ReplyHead::Response(_) | ReplyHead::Error(_) => None,
        };
        if let Some(local) = local {
            let head = match &self.body {
                ReplyBody::File(file) => {
                    ResponseHead::local(local.status, &local.headers, file.len as usize)
                }
                _ => {
                    let head = ResponseHead::local(local.status, &local.headers, local.body.len());
                    self.body = ReplyBody::Bytes(local.body.clone());
                    head
                }
            };
            self.head = ReplyHead::Response(head);
        }
        if let ReplyHead::Response(head) = &mut self.head {
            edit(head);
        }
    }
}
