//! The response plan: what every client driver sends for an editable reply head, decided once
//! for HTTP/1, HTTP/2 (and the next protocol): the body made ready (a mapped file's bytes, a
//! small file or a body in memory filtered whole), whether a body follows the head and how its
//! length is told, which head fields cross to the client, and whether the reply lets the
//! connection stay open; and for a local answer, whether its body follows and which length
//! its head declares. A driver only frames what the plan says.

use crate::actions::static_files::read_exact_at;
use crate::http::ascii::eq_ignore_case;
use crate::http::codec::{is_hop_by_hop, lists_token, Framing, RequestHead, ResponseHead};
use crate::http::compress::WHOLE_BODY_LIMIT;
use crate::http::local::LocalResponse;
use crate::reply::body_filter::BodyFilter;
use crate::reply::relay::BodyError;
use crate::reply::ReplyBody;

/// What the client is told of the body that follows a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyLength {
    /// No body follows: an answer to HEAD, a 1xx, 204 or 304.
    None,
    /// So many bytes: the head declares them.
    Known(u64),
    /// Told only by the body's end (chunks, frames, or the connection's close).
    Unknown,
}

/// How one editable reply goes out, for any driver.
pub(crate) struct ResponsePlan {
    pub(crate) head: ResponseHead,
    /// Ready to send: a body filtered whole is already in its filtered form.
    pub(crate) body: ReplyBody,
    /// A filter the body still passes through as it streams (its length is then unknown).
    pub(crate) filter: Option<BodyFilter>,
    /// How the body is read from its source: the source's own framing, `None` when nothing
    /// is read (an answer to HEAD).
    pub(crate) read: Framing,
    pub(crate) length: BodyLength,
    /// An unknown length can only end with the connection: an HTTP/1.0 client has no chunks.
    pub(crate) close_delimited: bool,
}

impl ResponsePlan {
    /// The plan for `head` and `body`, the answer to `req`, through `filter` if a
    /// response-head filter installed one. `sends_files`: the driver can send a file as it is
    /// (`sendfile`); else a mapped file's bytes are taken instead. Fails when the body cannot
    /// be made ready (a file that cannot be read, a filter that fails): nothing is sent yet.
    /// Inlined so the head and body are moved once, into the plan.
    #[inline(always)]
    pub(crate) fn new(
        req: &RequestHead,
        mut head: ResponseHead,
        mut body: ReplyBody,
        mut filter: Option<BodyFilter>,
        sends_files: bool,
    ) -> Result<ResponsePlan, BodyError> {
        if filter.is_some() || !sends_files {
            body = ready_body(&mut head, body, &mut filter)?;
        }
        let read = if req.is_head() {
            Framing::None
        } else {
            head.framing
        };
        let length = match read {
            Framing::None => BodyLength::None,
            _ if filter.is_some() => BodyLength::Unknown,
            Framing::Length(n) => BodyLength::Known(n),
            Framing::Chunked | Framing::UntilClose => BodyLength::Unknown,
        };
        let close_delimited = length == BodyLength::Unknown && req.minor_version == 0;
        Ok(ResponsePlan {
            head,
            body,
            filter,
            read,
            length,
            close_delimited,
        })
    }

    /// Whether the client connection may carry another request after this reply, as far as
    /// the reply goes (the request and the worker have their say too).
    #[inline]
    pub(crate) fn keeps_connection(&self) -> bool {
        !self.close_delimited
    }

    /// Whether an unknown length goes as chunks (HTTP/1.1), not ended by the close.
    #[inline]
    pub(crate) fn chunked(&self) -> bool {
        self.length == BodyLength::Unknown && !self.close_delimited
    }

    /// Calls `field` with each of the head's fields that cross to the client: not
    /// hop-by-hop, not named by `Connection`, not the length (the driver declares it from the
    /// plan). A loop, not an iterator: through `Iterator::filter` a proxied answer's head cost
    /// ~45 more instructions a field (callgrind).
    #[inline(always)]
    pub(crate) fn each_field(&self, mut field: impl FnMut(&[u8], &[u8])) {
        let head = &self.head;
        let connection = head
            .connection_names_headers
            .then(|| head.head.get("connection"))
            .flatten();
        for (name, value) in head.head.iter() {
            if !crosses(name) || connection.is_some_and(|c| lists_token(c, name)) {
                continue;
            }
            field(name, value);
        }
    }

    /// The length an answer without a body describes: the one a HEAD answer would have had,
    /// a 304's representation's.
    #[inline]
    pub(crate) fn described_length(&self) -> Option<&[u8]> {
        match self.length {
            BodyLength::None => self.head.head.get("content-length"),
            _ => None,
        }
    }

    /// The answer ends with its head whatever its length says: an HTTP/2 upstream's answer
    /// that did (gRPC's trailers-only form), or a `101`, whose tunnel only HTTP/1 carries. A
    /// filter that writes the trailers into the body (gRPC-Web) still has a body to send.
    pub(crate) fn ends_with_head(&self) -> bool {
        match &self.body {
            ReplyBody::Stream(stream) => {
                stream.ended() && !self.filter.as_ref().is_some_and(BodyFilter::takes_trailers)
            }
            ReplyBody::Upgrade(_) => true,
            _ => false,
        }
    }
}

/// How a local answer (a prebuilt head: `respond`, `redirect`, an error, a static file's
/// head) goes out through a driver that builds its own head from it. The HTTP/1 driver writes
/// the prebuilt bytes instead, already framed when the answer was built.
pub(crate) struct LocalPlan<'a> {
    pub(crate) local: &'a LocalResponse,
    /// The body's length: the answer's own body's, or its file's.
    pub(crate) len: u64,
    /// Whether a body follows the head: not for HEAD, nor when it is empty.
    pub(crate) body_follows: bool,
}

impl<'a> LocalPlan<'a> {
    /// The plan for `local` with a body of `len` bytes, the answer to a HEAD request when
    /// `head_request`.
    pub(crate) fn new(head_request: bool, local: &'a LocalResponse, len: u64) -> LocalPlan<'a> {
        LocalPlan {
            local,
            len,
            body_follows: !head_request && len > 0,
        }
    }

    /// Calls `field` with each of the answer's fields that cross to the client (its length is
    /// declared apart).
    pub(crate) fn each_field(&self, mut field: impl FnMut(&[u8], &[u8])) {
        for (name, value) in &self.local.headers {
            if crosses(name.as_bytes()) {
                field(name.as_bytes(), value.as_bytes());
            }
        }
    }

    /// The length the head declares: none for a 1xx or a 204, which have no content.
    pub(crate) fn declared_length(&self) -> Option<u64> {
        let status = self.local.status;
        (!(100..200).contains(&status) && status != 204).then_some(self.len)
    }
}

/// Whether a field crosses to the client, from a head or a trailer section: the
/// connection's own fields and the length (each driver declares it) stay behind.
#[inline]
pub(crate) fn crosses(name: &[u8]) -> bool {
    !is_hop_by_hop(name) && !eq_ignore_case(name, b"content-length")
}

/// A body made ready for a driver that cannot send a file as it is, or for a filter: a
/// mapped file's bytes in its place; with a filter, a file up to `WHOLE_BODY_LIMIT` read
/// whole, then a body in memory filtered whole (it keeps a length, and the filter is spent).
fn ready_body(
    head: &mut ResponseHead,
    body: ReplyBody,
    filter: &mut Option<BodyFilter>,
) -> Result<ReplyBody, BodyError> {
    let mut body = body.mapped_as_bytes();
    let Some(whole) = filter else {
        return Ok(body);
    };
    if let ReplyBody::File(file) = &body {
        if file.len <= WHOLE_BODY_LIMIT {
            let mut data = vec![0; file.len as usize];
            read_exact_at(&file.file, &mut data, file.offset).map_err(|_| BodyError::Source)?;
            body = ReplyBody::Bytes(data.into());
        }
    }
    if let ReplyBody::Bytes(bytes) = &body {
        let filtered = filter_whole(whole, bytes).map_err(|_| BodyError::Sink)?;
        head.framing = Framing::Length(filtered.len() as u64);
        body = ReplyBody::Bytes(filtered.into());
        *filter = None;
    }
    Ok(body)
}

/// Runs a body that is already in memory through `filter` whole.
fn filter_whole(filter: &mut BodyFilter, body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut filtered = filter.write(body)?.to_vec();
    filtered.extend_from_slice(filter.finish()?);
    Ok(filtered)
}
