//! Answers from a stored object, as the origin would have answered this request: a 304 or
//! 412 for a conditional request (RFC 9110 §13), a 206 or 416 for a range (§14), else the
//! whole stored answer; each with `Age` and `Cache-Status`. The stored body is shared
//! (`Bytes`, or a mapped memory file sent by `sendfile`), so a hit or a single range copies
//! no body bytes.

use super::body::Part;
use super::object::Object;
use crate::http::codec::{Framing, RequestHead, ResponseHead};
use crate::http::conditional::{
    if_range_holds, multipart_body, parse_ranges, precondition, precondition_failed,
    range_not_satisfiable, Ranges,
};
use crate::reply::{Reply, ReplyBody, ReplyHead};
use bytes::Bytes;
use std::convert::Infallible;

/// The answer to `req` from `object`, `now` (for `Age`), with `Cache-Status: cache_status`.
pub(super) fn stored<'r>(
    object: &Object,
    req: &RequestHead,
    now: u64,
    cache_status: &str,
) -> Reply<'r> {
    let age = object.meta.age_at(now).to_string();
    let len = object.body.len();
    let extra: [(&[u8], &[u8]); 2] = [
        (b"age", age.as_bytes()),
        (b"cache-status", cache_status.as_bytes()),
    ];
    // Conditions and ranges apply to a stored 200 (RFC 9110 §13.2.1, §14.2).
    if object.status == 200 {
        let validators = object.validators();
        match precondition(req, &validators) {
            Some(304) => {
                // A 304 carries the stored fields that describe the answer, not its body's.
                let fields = object
                    .fields
                    .iter()
                    .filter(|(n, _)| {
                        !n.get(..8)
                            .is_some_and(|p| p.eq_ignore_ascii_case(b"content-"))
                            || n.eq_ignore_ascii_case(b"content-location")
                    })
                    .chain(extra);
                let head = ResponseHead::from_fields(304, fields, Framing::None);
                return with_body(head, ReplyBody::Bytes(Bytes::new()));
            }
            Some(_) => return Reply::error(precondition_failed()),
            None => {}
        }
        let range = req
            .head
            .get("range")
            .filter(|_| if_range_holds(req, &validators));
        if let Some(range) = range {
            match parse_ranges(range, len) {
                Ranges::Ignore => {}
                Ranges::Unsatisfiable => return Reply::error(range_not_satisfiable(len)),
                Ranges::One(start, end) => {
                    let content_range = format!("bytes {start}-{}/{len}", end - 1);
                    let part_len = end - start;
                    let head = head_with(
                        object,
                        206,
                        &[(b"content-range", content_range.as_bytes())],
                        &extra,
                        part_len as usize,
                        None,
                    );
                    return with_body(head, reply_body(object.body.part(start, part_len)));
                }
                Ranges::Many(ranges) => {
                    let part_type = object.field("content-type").unwrap_or_default();
                    let part_type = String::from_utf8_lossy(part_type);
                    let stored = object.body.bytes();
                    let copy = |buf: &mut [u8], start: u64| {
                        let start = start as usize;
                        buf.copy_from_slice(&stored[start..start + buf.len()]);
                        Ok::<(), Infallible>(())
                    };
                    let Ok((body, content_type)) = multipart_body(&part_type, len, &ranges, copy);
                    let head = head_with(
                        object,
                        206,
                        &[(b"content-type", content_type.as_bytes())],
                        &extra,
                        body.len(),
                        Some("content-type"),
                    );
                    return with_body(head, ReplyBody::Bytes(body.into()));
                }
            }
        }
    }
    let head = head_with(object, object.status, &[], &extra, len as usize, None);
    with_body(head, reply_body(object.body.part(0, len)))
}

fn reply_body(part: Part) -> ReplyBody {
    match part {
        Part::Bytes(bytes) => ReplyBody::Bytes(bytes),
        Part::File(file) => ReplyBody::File(file),
    }
}

/// A head of the stored fields (less `replaced`, when named), then `more` and `extra`, and
/// the length.
fn head_with(
    object: &Object,
    status: u16,
    more: &[(&[u8], &[u8])],
    extra: &[(&[u8], &[u8])],
    len: usize,
    replaced: Option<&str>,
) -> ResponseHead {
    // The length as a field too: a HEAD answer declares it without the body.
    let length = len.to_string();
    let length: (&[u8], &[u8]) = (b"content-length", length.as_bytes());
    let added = more.iter().chain(extra).chain([&length]);
    let bytes = added.clone().map(|(n, v)| n.len() + v.len()).sum();
    let mut head = object.fields.copy_with_room(bytes, added.clone().count());
    if let Some(name) = replaced {
        head.remove(name);
    }
    for (name, value) in added {
        head.append_field(name, value);
    }
    ResponseHead::from_head(status, head, Framing::Length(len as u64))
}

fn with_body<'r>(head: ResponseHead, body: ReplyBody) -> Reply<'r> {
    Reply {
        head: ReplyHead::Response(head),
        body,
        upstream: None,
        body_filter: None,
    }
}
