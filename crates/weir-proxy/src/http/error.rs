//! weir's own error answers as values ([`LocalError`]: a status, what went wrong, a message),
//! and their plain rendering. Whoever meets the error makes the value; the exchange renders it
//! once, in the flavour the request and route need (plain text here, gRPC in
//! `exchange/grpc.rs`, Elasticsearch in `actions/elasticsearch`).

use crate::http::codec::HeadError;
use crate::http::local::LocalResponse;
use bytes::Bytes;
use std::borrow::Cow;

/// What went wrong, by cause. The status says how HTTP names it; the kind says why weir answers
/// instead of a server, and carries what only the plain HTTP answer states (`Allow`,
/// `Content-Range`), which a gRPC status or an Elasticsearch error has no place for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request head cannot be read as HTTP (400), or names what weir does not implement
    /// (501).
    MalformedHead,
    /// A head over weir's limits (431).
    HeadTooLarge,
    /// Part of a head arrived and the rest did not in time (408).
    HeadTimeout,
    /// Plain HTTP sent to a TLS port (400).
    PlainHttpOnTls,
    /// The request body's framing is invalid (400).
    MalformedBody,
    /// The request body stopped arriving (408).
    BodyTimeout,
    /// The request body is over a limit (413).
    BodyTooLarge,
    /// The client closed before its answer (499, for the log).
    ClientClosed,
    /// No router takes the request (404).
    NoRoute,
    /// A reload removed the entrypoint of a kept-alive connection (503).
    EntrypointRemoved,
    /// No server of the service is usable (503).
    NoServer,
    /// No connection to the server (refused, TLS failed, timed out): nothing was sent.
    UpstreamUnreachable,
    /// The server did not take the request or answer it in time (504).
    UpstreamTimeout,
    /// The server's connection broke, or its answer is not a valid response (502).
    UpstreamFailed,
    /// The server answered with a status `retry.on` names, and no try was left.
    UpstreamStatus,
    /// The request cannot go over the service's protocol (a request HTTP/2 cannot carry, an
    /// upgrade to an HTTP/2 service).
    ProtocolMismatch,
    /// A method the action does not answer (405): `Allow` lists those it does.
    MethodNotAllowed { allow: &'static str },
    /// A path the `static` action refuses or cannot find (400, 403, 404), or a file it cannot
    /// read (500).
    File,
    /// A conditional request whose condition fails (412).
    PreconditionFailed,
    /// A `Range` outside the representation (416): `Content-Range` states its length, and the
    /// plain answer has no body.
    RangeNotSatisfiable { length: u64 },
    /// `PURGE` from an address `purge_allow` leaves out (403).
    PurgeRefused,
    /// A middleware refuses the request (`strip_prefix_regex` leaving an unclean path: 400)
    /// or cannot make its answer (`redirect_regex` rewriting to no URL: 502).
    MiddlewareRefused,
    /// An authentication middleware found no valid credentials (401); the error's headers
    /// carry the challenge (`WWW-Authenticate`).
    Unauthorized,
    /// A `respond` route's configured error status: its plain answer is the configured one.
    Configured,
    /// A policy middleware refuses the request (`ip_allow_list`), with its configured status.
    /// Its plain answer is the message alone, without a final newline, as Traefik writes it.
    PolicyRefused,
    /// A Lua script failed (500: an error, or it ran past `lua.max_run_time`) or ended the
    /// request with an error status (`ngx.exit(404)`).
    Script,
}

/// An error answer weir makes itself, not yet in wire form.
#[derive(Debug, Clone)]
pub struct LocalError {
    pub status: u16,
    pub kind: ErrorKind,
    /// Said to the client: the plain body (with a final newline), the `grpc-message`, the
    /// Elasticsearch `reason`.
    pub message: Cow<'static, str>,
    /// Header lines every flavour carries (a policy's `Retry-After` or `WWW-Authenticate`).
    pub headers: Vec<(String, String)>,
}

impl LocalError {
    pub fn new(status: u16, kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        LocalError {
            status,
            kind,
            message: message.into(),
            headers: Vec::new(),
        }
    }

    /// The plain rendering: `message` and a newline as UTF-8 text, after the kind's own
    /// header lines; a 416 is its `Content-Range` alone; a policy's refusal is its message
    /// (none for a status that has no body).
    pub fn plain(&self) -> LocalResponse {
        self.plain_with(self.headers.clone())
    }

    /// [`plain`](Self::plain) for an error made for one request: its header lines move into
    /// the answer instead of being copied.
    pub fn into_plain(mut self) -> LocalResponse {
        let own = std::mem::take(&mut self.headers);
        self.plain_with(own)
    }

    fn plain_with(&self, own: Vec<(String, String)>) -> LocalResponse {
        let mut headers = Vec::with_capacity(own.len() + 2);
        let body = match self.kind {
            ErrorKind::RangeNotSatisfiable { length } => {
                headers.push(("content-range".into(), format!("bytes */{length}")));
                Bytes::new()
            }
            ErrorKind::PolicyRefused if matches!(self.status, 204 | 304) => Bytes::new(),
            ErrorKind::PolicyRefused => {
                headers.push(("content-type".into(), "text/plain; charset=utf-8".into()));
                match &self.message {
                    Cow::Borrowed(text) => Bytes::from_static(text.as_bytes()),
                    Cow::Owned(text) => Bytes::copy_from_slice(text.as_bytes()),
                }
            }
            kind => {
                if let ErrorKind::MethodNotAllowed { allow } = kind {
                    headers.push(("allow".into(), allow.into()));
                }
                headers.push(("content-type".into(), "text/plain; charset=utf-8".into()));
                format!("{}\n", self.message).into()
            }
        };
        headers.extend(own);
        LocalResponse::new(self.status, headers, body)
    }
}

/// The answer to a request head the codec refused.
impl From<&HeadError> for LocalError {
    fn from(refused: &HeadError) -> LocalError {
        let kind = match refused {
            HeadError::TooLarge => ErrorKind::HeadTooLarge,
            _ => ErrorKind::MalformedHead,
        };
        LocalError::new(refused.status(), kind, refused.message())
    }
}

/// An error whose plain answer is built once, ahead of any request: answering it plainly is
/// then a copy of prebuilt bytes (no route, a `respond` route's error status).
#[derive(Debug)]
pub struct PrebuiltError {
    pub error: LocalError,
    pub plain: LocalResponse,
}

impl PrebuiltError {
    pub fn new(error: LocalError) -> Self {
        PrebuiltError {
            plain: error.plain(),
            error,
        }
    }

    /// A `respond` route's answer with an error status: plainly the configured answer; in
    /// another flavour, its body is the message.
    pub fn configured(plain: LocalResponse) -> Self {
        let message = String::from_utf8_lossy(&plain.body).trim_end().to_string();
        PrebuiltError {
            error: LocalError::new(plain.status, ErrorKind::Configured, message),
            plain,
        }
    }
}
