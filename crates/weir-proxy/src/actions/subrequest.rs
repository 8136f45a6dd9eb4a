//! A request weir sends of its own to a service (a middleware's: `errors`' page,
//! `forward_auth`'s check; a share of an Elasticsearch `_bulk`), through the upstream side as
//! any proxied request goes (its balancer, retries, pools, timeouts and TLS), on behalf of the
//! client whose request caused it, with its answer read whole into memory.

use crate::actions::whole_body::Reader;
use crate::http::codec::{self, RequestHead, ResponseHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::http::local::LocalResponse;
use crate::reply::client::ClientSide;
use crate::reply::{Reply, ReplyHead};
use crate::servers::balancer::Service;
use crate::upstream;
use crate::upstream::detached::{Detached, Requester};
use crate::worker::Worker;
use bytes::{Bytes, BytesMut};

/// An answer read whole.
pub(crate) struct Answer {
    pub(crate) head: ResponseHead,
    pub(crate) body: Bytes,
}

/// The HTTP/1.1 request head `method target` with Host `host`, then `fields` less their
/// framing ones: the body's is a `Content-Length` of `length`, if given. `None` when it does
/// not parse.
pub(crate) fn request_head<'a>(
    method: &str,
    target: &str,
    host: &str,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    length: Option<usize>,
) -> Option<RequestHead> {
    let mut raw = Vec::with_capacity(512);
    raw.extend_from_slice(method.as_bytes());
    raw.push(b' ');
    raw.extend_from_slice(target.as_bytes());
    raw.extend_from_slice(b" HTTP/1.1\r\n");
    codec::header(&mut raw, b"host", host.as_bytes());
    for (name, value) in fields {
        let framing = [
            &b"host"[..],
            b"content-length",
            b"transfer-encoding",
            b"expect",
        ]
        .iter()
        .any(|f| name.eq_ignore_ascii_case(f));
        if !framing {
            codec::header(&mut raw, name, value);
        }
    }
    if let Some(length) = length {
        codec::header(&mut raw, b"content-length", length.to_string().as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    codec::parse_request(&mut BytesMut::from(&raw[..])).ok()?
}

/// Sends `head` with `body` to `service` for `from` (to its server `prefer` first, if usable),
/// and reads the answer, at most `max` bytes of body. `Err`: weir's own error (the service
/// could not be reached or did not answer in time, its answer broke off or was larger than
/// `max`), as a proxied request would get it.
pub(crate) async fn send(
    worker: &Worker,
    service: &Service,
    from: Requester,
    (head, body): (&RequestHead, Bytes),
    prefer: Option<usize>,
    max: u64,
) -> Result<Answer, LocalError> {
    let mut sender = Detached::new(worker, from, body);
    let reply = upstream::forward(worker, service, &mut sender, head, prefer).await;
    let Reply {
        head: reply_head,
        body,
        upstream,
        ..
    } = reply;
    let response = match reply_head {
        ReplyHead::Response(response) => response,
        ReplyHead::Error(error) => return Err(error.error().clone()),
        ReplyHead::Local(answer) => return Err(weirs_answer(&answer)),
        ReplyHead::Shared(answer) => return Err(weirs_answer(&answer)),
    };
    let reader = Reader {
        worker,
        watch: sender.watch(),
        read_timeout: service.read_timeout,
        max,
    };
    match reader.reply_body(&response, body, &upstream).await {
        Ok(body) => Ok(Answer {
            head: response,
            body,
        }),
        Err(_) => {
            let message = "upstream response ended early or was too large";
            Err(LocalError::new(502, ErrorKind::UpstreamFailed, message))
        }
    }
}

/// A local answer in place of a response (the upstream side makes none today) as an error,
/// its text the message.
fn weirs_answer(answer: &LocalResponse) -> LocalError {
    let text = String::from_utf8_lossy(&answer.body).trim_end().to_string();
    LocalError::new(answer.status, ErrorKind::UpstreamFailed, text)
}

/// An answer's fields as a local answer carries them on: the connection's own fields (as
/// Traefik drops them: `Proxy-Authenticate` passes), framing and `Date` (the driver writes its
/// own) dropped.
pub(crate) fn answer_fields(head: &ResponseHead) -> Vec<(String, String)> {
    const DROPPED: [&[u8]; 10] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"date",
    ];
    head.head
        .iter()
        .filter(|(name, _)| !DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d)))
        .map(|(name, value)| {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            (text(name), text(value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client without a Host (HTTP/1.0) still gets its request sent on, with an empty one.
    #[test]
    fn a_head_is_built_with_the_host_given_and_without_the_framing_fields() {
        let fields = [
            (&b"Host"[..], &b"other"[..]),
            (b"content-length", b"3"),
            (b"accept", b"text/html"),
        ];
        let head = request_head("GET", "/a?b", "foo.bar", fields.into_iter(), None).unwrap();
        assert_eq!(
            (head.method(), head.target(), head.host()),
            ("GET", "/a?b", "foo.bar")
        );
        let names: Vec<&[u8]> = head.head.iter().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"host"[..], b"accept"]);
        let head = request_head("GET", "/", "", std::iter::empty(), Some(4)).unwrap();
        assert_eq!(
            (head.host(), head.head.get("content-length")),
            ("", Some(&b"4"[..]))
        );
    }
}
