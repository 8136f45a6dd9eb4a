//! What an action answers with: a [`Reply`] is a head and a body source. Actions (`respond`,
//! `redirect`, `service`, `static`; later the cache, Elasticsearch) build replies, response-head
//! filters edit them, and only a connection driver turns one into wire format. Local answers
//! keep prebuilt HTTP/1 bytes so the h1 driver writes them with one copy.

use crate::exchange::body_filter::BodyFilter;
use crate::http::codec::{header, push_decimal, reason, status_line, ResponseHead};
use crate::upstream::balancer::UpstreamUse;
use crate::upstream::pool::UpstreamConn;
use bytes::Bytes;
use std::borrow::Cow;
use std::rc::Rc;

/// An answer weir makes itself (`respond` routes, redirects, errors): serialized once at config
/// compile time where possible, so serving it is a buffer copy.
#[derive(Debug, Clone)]
pub struct LocalResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Status line, headers and Content-Length, without the final CRLF.
    prebuilt: Vec<u8>,
}

impl LocalResponse {
    pub fn new(status: u16, headers: Vec<(String, String)>, body: impl Into<Bytes>) -> Self {
        let body = body.into();
        let prebuilt = prebuild(status, &headers, body.len() as u64);
        LocalResponse {
            status,
            headers,
            body,
            prebuilt,
        }
    }

    /// The head of an answer whose body (`len` bytes) comes from elsewhere, a file say: the
    /// reply carries the body, and the prebuilt head declares its length.
    pub fn head_for(status: u16, headers: Vec<(String, String)>, len: u64) -> Self {
        LocalResponse {
            prebuilt: prebuild(status, &headers, len),
            status,
            headers,
            body: Bytes::new(),
        }
    }

    pub fn text(status: u16, message: &str) -> Self {
        LocalResponse::new(
            status,
            vec![("content-type".into(), "text/plain; charset=utf-8".into())],
            format!("{message}\n"),
        )
    }

    pub fn redirect(status: u16, location: &str) -> Self {
        LocalResponse::new(
            status,
            vec![("location".into(), location.into())],
            Bytes::new(),
        )
    }

    /// Appends the response as HTTP/1 to `out` (for the h1 driver). `extra` are more header
    /// lines; `date_header` is the worker's current `Date` header line.
    pub fn write(
        &self,
        out: &mut Vec<u8>,
        keep_alive: bool,
        head_only: bool,
        extra: &[u8],
        date_header: &[u8],
    ) {
        out.extend_from_slice(&self.prebuilt);
        out.extend_from_slice(date_header);
        out.extend_from_slice(extra);
        if !keep_alive {
            out.extend_from_slice(b"connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if !head_only {
            out.extend_from_slice(&self.body);
        }
    }
}

/// Status line, headers and a Content-Length of `len`, without the final CRLF.
fn prebuild(status: u16, headers: &[(String, String)], len: u64) -> Vec<u8> {
    let mut prebuilt = Vec::with_capacity(128);
    status_line(&mut prebuilt, status, reason(status));
    for (name, value) in headers {
        if !name.eq_ignore_ascii_case("content-length") {
            header(&mut prebuilt, name.as_bytes(), value.as_bytes());
        }
    }
    prebuilt.extend_from_slice(b"content-length: ");
    push_decimal(&mut prebuilt, len);
    prebuilt.extend_from_slice(b"\r\n");
    prebuilt
}

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
}

pub enum ReplyBody {
    /// With `ReplyHead::Local`: the local answer's own body.
    Local,
    Bytes(Bytes),
    /// Still on the upstream connection, framed as the response head says.
    Upstream(UpstreamConn),
    /// Still on an HTTP/2 upstream stream (DATA frames, then trailers).
    Stream(crate::upstream::h2::pool::H2Body),
    /// A part of a file (the `static` action).
    File(FileBody),
    /// After `101 Switching Protocols`: the connection becomes a byte tunnel.
    Upgrade(UpstreamConn),
}

/// `len` bytes of a file from `offset`.
pub struct FileBody {
    pub file: FileHandle,
    pub offset: u64,
    pub len: u64,
    /// The same bytes in memory, when the file is mapped (a cache's stored body): what cannot
    /// go by `sendfile` (TLS, HTTP/2, a body filter) takes them instead of reading the file.
    pub mapped: Option<Bytes>,
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

/// An open file a body is sent from.
#[derive(Clone)]
pub enum FileHandle {
    /// A static file, from one worker's open-file cache.
    Worker(Rc<std::fs::File>),
    /// A cache's stored body, shared by all workers.
    Shared(std::sync::Arc<std::fs::File>),
}

impl std::ops::Deref for FileHandle {
    type Target = std::fs::File;

    fn deref(&self) -> &std::fs::File {
        match self {
            FileHandle::Worker(file) => file,
            FileHandle::Shared(file) => file,
        }
    }
}

impl<'r> Reply<'r> {
    pub fn local(response: Cow<'r, LocalResponse>) -> Reply<'r> {
        Reply {
            head: ReplyHead::Local(response),
            body: ReplyBody::Local,
            upstream: None,
            body_filter: None,
        }
    }

    /// Edits the head as a [`ResponseHead`], turning a prebuilt local answer into one first,
    /// so response-head filters treat local and proxied answers alike.
    pub fn edit_head(&mut self, edit: impl FnOnce(&mut ResponseHead)) {
        let local = match &self.head {
            ReplyHead::Local(local) => Some(&**local),
            ReplyHead::Shared(local) => Some(&**local),
            ReplyHead::Response(_) => None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::codec::push_hex;

    #[test]
    fn writes_prebuilt_response() {
        let r = LocalResponse::new(
            200,
            vec![("content-type".into(), "text/plain".into())],
            "pong",
        );
        let mut out = Vec::new();
        r.write(
            &mut out,
            false,
            false,
            b"x-a: 1\r\n",
            b"date: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 4\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\nx-a: 1\r\nconnection: close\r\n\r\npong"
        );
        let mut digits = Vec::new();
        push_decimal(&mut digits, 1234567);
        push_decimal(&mut digits, 0);
        push_hex(&mut digits, 0x1f0);
        assert_eq!(digits, b"123456701f0");
    }
}
