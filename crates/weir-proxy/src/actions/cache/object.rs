//! One stored answer (`Object`): the origin's status, the fields a client gets, the body,
//! and what the policy needs to judge it later; built from an origin head by
//! `stored_fields`, and what both tiers (memory and disk) keep.

use super::body::Body;
use crate::http::ascii::eq_ignore_case;
use crate::http::codec::{is_hop_by_hop, lists_token, Head};
use crate::http::conditional::Validators;
use weir_cache::{http_date_secs, listed_fields, Stored};

/// One stored answer.
pub(super) struct Object {
    pub(super) status: u16,
    /// The fields the client gets (hop-by-hop ones, `Age` and the length left out).
    pub(super) fields: Head,
    pub(super) body: Body,
    pub(super) meta: Stored,
    /// The request's values of the fields `Vary` names (empty without `Vary`).
    pub(super) secondary: Vec<u8>,
    /// The fields include `Vary`: without it, every request matches (`Store::lookup` then
    /// skips building the request's secondary key, a walk through the stored fields).
    pub(super) varies: bool,
}

impl Object {
    pub(super) fn new(
        status: u16,
        fields: Head,
        body: Body,
        meta: Stored,
        secondary: Vec<u8>,
    ) -> Object {
        Object {
            status,
            varies: fields.get("vary").is_some(),
            fields,
            body,
            meta,
            secondary,
        }
    }

    pub(super) fn weight(&self) -> u64 {
        // The stored head keeps the origin head's whole buffer (`stored_fields`): weighed as held.
        self.fields.held_bytes() as u64 + self.body.held_bytes() + self.secondary.len() as u64 + 128
    }

    pub(super) fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields.get(name)
    }

    /// What conditional and range requests compare against.
    pub(super) fn validators(&self) -> Validators<'_> {
        Validators {
            etag: self.field("etag"),
            modified: self.field("last-modified").and_then(http_date_secs),
        }
    }

    /// Its `Cache-Tag` lines, comma-joined (what a purge by tag reads).
    pub(super) fn tag_line(&self) -> Box<[u8]> {
        tag_line(&self.fields)
    }
}

/// The fields of an upstream head worth storing: all but hop-by-hop ones, those its
/// `Connection` names, the length and `Age` (both are written per answer), and, when its
/// `Cache-Control` has `no-cache="..."` (`no_cache_fields`), the fields listed there (RFC 9111
/// §5.2.2.4: without them, the rest may be reused without revalidation).
pub(super) fn stored_fields(
    head: &Head,
    connection_names_headers: bool,
    no_cache_fields: bool,
) -> Head {
    let connection = connection_names_headers
        .then(|| head.get("connection"))
        .flatten();
    let listed = match no_cache_fields {
        true => listed_fields(head.get_all("cache-control"), "no-cache"),
        false => Vec::new(),
    };
    head.without(|name| {
        is_hop_by_hop(name)
            || eq_ignore_case(name, b"content-length")
            || eq_ignore_case(name, b"age")
            || connection.is_some_and(|c| lists_token(c, name))
            || listed.iter().any(|l| eq_ignore_case(l, name))
    })
}

/// The `Cache-Tag` lines of `fields`, comma-joined.
pub(super) fn tag_line(fields: &Head) -> Box<[u8]> {
    let lines: Vec<&[u8]> = fields.get_all("cache-tag").collect();
    lines.join(&b","[..]).into()
}
