//! A `_bulk` body checked and cut into items before anything is sent: each action line must be
//! a JSON object naming one of `index`, `create`, `update` or `delete` with its metadata, and
//! every action but `delete` must be followed by a source line. The body must end with a
//! newline, as Elasticsearch requires. Source lines are not parsed: Elasticsearch judges each
//! document and answers per item.

use memchr::memchr;
use serde::Deserialize;
use std::borrow::Cow;
use std::ops::Range;

/// One item of a bulk body.
#[derive(Debug)]
pub struct Item<'a> {
    /// Its lines in the body (the action line, and the source line if any), newlines included.
    pub lines: Range<usize>,
    pub action: Action,
    pub index: Option<Cow<'a, str>>,
    pub id: Option<Cow<'a, str>>,
    pub routing: Option<Cow<'a, str>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Index,
    Create,
    Update,
    Delete,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Index => "index",
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
        }
    }
}

/// Why a body was refused, in Elasticsearch's terms.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed {
    /// `error.type`.
    pub kind: &'static str,
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum ActionLine<'a> {
    #[serde(borrow)]
    Index(Meta<'a>),
    #[serde(borrow)]
    Create(Meta<'a>),
    #[serde(borrow)]
    Update(Meta<'a>),
    #[serde(borrow)]
    Delete(Meta<'a>),
}

/// The metadata weir needs; the rest is Elasticsearch's to judge.
#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(rename = "_index", borrow, default)]
    index: Option<Cow<'a, str>>,
    #[serde(rename = "_id", borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    routing: Option<Text<'a>>,
}

/// A value Elasticsearch reads as text: a string (borrowed from the body when it has no
/// escapes), or a number written as one. A visitor, not an untagged enum: that would buffer
/// every value before trying each variant.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
        }
        deserializer.deserialize_any(Visitor(std::marker::PhantomData))
    }
}

fn malformed(kind: &'static str, reason: String) -> Malformed {
    Malformed { kind, reason }
}

/// Whether the value of an action line's first member starts as an object: serde would also
/// fill `Meta` from an array (`{"index":["a","1"]}`), which Elasticsearch refuses (found by
/// fuzz/ bulk_request). Other malformations are left to serde.
fn metadata_is_object(line: &[u8]) -> bool {
    let Some(rest) = line.trim_ascii_start().strip_prefix(b"{") else {
        return false;
    };
    let Some(key) = rest.trim_ascii_start().strip_prefix(b"\"") else {
        return false;
    };
    let mut i = 0;
    while i < key.len() && key[i] != b'"' {
        i += if key[i] == b'\\' { 2 } else { 1 };
    }
    let Some(rest) = key.get(i + 1..) else {
        return false;
    };
    rest.trim_ascii_start()
        .strip_prefix(b":")
        .is_some_and(|value| value.trim_ascii_start().starts_with(b"{"))
}

/// The items of `body`, in order.
pub fn parse(body: &[u8]) -> Result<Vec<Item<'_>>, Malformed> {
    if body.iter().all(u8::is_ascii_whitespace) {
        let reason = if body.is_empty() {
            "request body is required"
        } else {
            "Validation Failed: 1: no requests added;"
        };
        return Err(malformed("parse_exception", reason.into()));
    }
    if body.last() != Some(&b'\n') {
        return Err(malformed(
            "illegal_argument_exception",
            "The bulk request must be terminated by a newline [\\n]".into(),
        ));
    }
    let mut items = Vec::new();
    let mut at = 0;
    let mut line_number = 0;
    while at < body.len() {
        // Ends with a newline (checked above), so every line has one.
        let end = at + memchr(b'\n', &body[at..]).unwrap_or(body.len() - at);
        let line = &body[at..end];
        line_number += 1;
        let start = at;
        at = end + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // Read as text first: serde skips the members it ignores without checking their UTF-8,
        // and Elasticsearch refuses a line that is not UTF-8 (found by fuzz/ bulk_request).
        let parsed: Result<ActionLine, String> = match std::str::from_utf8(line) {
            Ok(_) if !metadata_is_object(line) => Err("the metadata is not an object".into()),
            Ok(text) => serde_json::from_str(text).map_err(|e| e.to_string()),
            Err(e) => Err(format!("invalid UTF-8: {e}")),
        };
        let parsed = parsed.map_err(|e| {
            malformed(
                "illegal_argument_exception",
                format!(
                    "Malformed action/metadata line [{line_number}], expected an object with one of [create], [delete], [index] or [update]: {e}"
                ),
            )
        })?;
        let (action, meta) = match parsed {
            ActionLine::Index(m) => (Action::Index, m),
            ActionLine::Create(m) => (Action::Create, m),
            ActionLine::Update(m) => (Action::Update, m),
            ActionLine::Delete(m) => (Action::Delete, m),
        };
        if action != Action::Delete {
            if at >= body.len() {
                return Err(malformed(
                    "illegal_argument_exception",
                    format!(
                        "the [{}] action on line [{line_number}] needs a source line after it",
                        action.name()
                    ),
                ));
            }
            at += memchr(b'\n', &body[at..]).unwrap_or(body.len() - at) + 1;
            line_number += 1;
        }
        items.push(Item {
            lines: start..at,
            action,
            index: meta.index,
            id: meta.id.map(|t| t.0),
            routing: meta.routing.map(|t| t.0),
        });
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_keep_their_lines_and_metadata() {
        let body = b"{\"index\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"f\":1}\n\n{\"delete\":{\"_id\":2,\"routing\":\"r\"}}\n{\"create\":{}}\n{\"f\":\"\\n\"}\n{ \"update\" : {\"_id\":\"x\\\"y\"} }\n{\"doc\":{}}\n";
        let items = parse(body).unwrap();
        assert_eq!(items.len(), 4);
        assert_eq!(items[0].action, Action::Index);
        assert_eq!(items[0].index.as_deref(), Some("a"));
        assert_eq!(items[0].id.as_deref(), Some("1"));
        assert_eq!(
            &body[items[0].lines.clone()],
            b"{\"index\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"f\":1}\n"
        );
        assert_eq!(items[1].action, Action::Delete);
        assert_eq!(items[1].id.as_deref(), Some("2"));
        assert_eq!(items[1].routing.as_deref(), Some("r"));
        assert_eq!(items[2].action, Action::Create);
        assert_eq!((items[2].index.clone(), items[2].id.clone()), (None, None));
        assert_eq!(items[3].id.as_deref(), Some("x\"y"));
        assert_eq!(items[3].lines.end, body.len());
    }

    #[test]
    fn malformed_bodies_are_refused_with_the_line() {
        let refused = |body: &[u8]| parse(body).unwrap_err();
        assert_eq!(refused(b"").reason, "request body is required");
        assert!(refused(b"{\"index\":{}}\n{}")
            .reason
            .contains("terminated by a newline"));
        let e = refused(b"{\"index\":{}}\n{}\n{\"upsert\":{}}\n{}\n");
        assert!(e.reason.contains("line [3]"), "{e:?}");
        assert!(e.reason.contains("unknown variant `upsert`"), "{e:?}");
        assert!(refused(b"not json\n").reason.contains("line [1]"));
        assert!(refused(b"{\"index\":{}}\n")
            .reason
            .contains("needs a source line"));
        assert!(refused(b"{\"index\":{\"_index\":7}}\n{}\n")
            .reason
            .contains("line [1]"));
        assert!(refused(b"[1]\n").reason.contains("line [1]"));
    }

    #[test]
    fn metadata_that_is_not_an_object_is_refused() {
        // Found by the fuzz target bulk_request: serde filled the metadata from an array, in
        // the order of its fields, so `["a","1"]` read as index `a`, id `1`.
        for body in [
            &b"{\"index\":[\"a\",\"1\"]}\n{}\n"[..],
            b"{\"delete\" : [\r]\r}\n",
        ] {
            let e = parse(body).unwrap_err();
            assert!(e.reason.contains("line [1]"), "{e:?}");
            assert!(e.reason.contains("not an object"), "{e:?}");
        }
        // A key with an escaped quote is skipped whole: serde then judges the name.
        let e = parse(b" { \"del\\\"ete\" :{}}\n").unwrap_err();
        assert!(e.reason.contains("unknown variant"), "{e:?}");
        assert!(parse(b"\t{ \"delete\"\t:\r\n").is_err());
        assert!(parse(b" { \"delete\" :\t{\"_id\":1} }\n").is_ok());
    }

    #[test]
    fn an_action_line_that_is_not_utf8_is_refused() {
        // Found by the fuzz target bulk_request: the invalid byte sat in a member serde
        // ignores, so the line passed; `with_ids`, whose own parse of it then failed, sent
        // `{"index":null}` in its place.
        let e = parse(b"{\"index\":{\"_x\":\"lo\xe7s\",\"_index\":\"a\"}}\n{}\n").unwrap_err();
        assert_eq!(e.kind, "illegal_argument_exception");
        assert!(e.reason.contains("line [1]"), "{e:?}");
        assert!(e.reason.contains("invalid UTF-8"), "{e:?}");
        assert!(parse("{\"index\":{\"_x\":\"lo\u{e7}s\"}}\n{}\n".as_bytes()).is_ok());
    }
}
