//! `strip_prefix_regex`: removes the first expression's match from the decoded path when the
//! path starts with it, cuts as much from the path as sent (escapes kept), and records the
//! decoded prefix in `X-Forwarded-Prefix` (Traefik's `stripprefixregex`).

use super::Flow;
use crate::http::codec::RequestHead;
use crate::http::error::{ErrorKind, LocalError};
use crate::http::router::path_unescape;
use regex::bytes::Regex;

pub(super) fn on_request(expressions: &[Regex], req: &mut RequestHead) -> Flow<'static> {
    let raw = req.path();
    // A malformed escape names no decoded path to match.
    let Some(decoded) = path_unescape(raw) else {
        return Flow::Continue;
    };
    for expression in expressions {
        let Some(found) = expression.find(&decoded) else {
            continue;
        };
        // As Traefik: the matched text must start the path, wherever it was found.
        let prefix = found.as_bytes();
        if prefix.is_empty() || !decoded.starts_with(prefix) {
            continue;
        }
        // A decoded control character cannot travel in a header.
        if prefix
            .iter()
            .any(|&b| (b < b' ' && b != b'\t') || b == 0x7f)
        {
            return refuse("the stripped prefix holds a control character");
        }
        let rest = &raw[raw_len_of(raw, prefix.len())..];
        let new_path = match rest.starts_with('/') || rest.is_empty() {
            true => rest.to_string(),
            false => format!("/{rest}"),
        };
        // What is left must be a clean path: Traefik refuses one that `.`, `..` or an empty
        // segment would make name another path once normalized.
        if !is_clean(&new_path) {
            return refuse("the path left after the prefix is not clean");
        }
        let prefix = prefix.to_vec();
        req.set_path(if new_path.is_empty() { "/" } else { &new_path });
        req.head.set("x-forwarded-prefix", &prefix);
        break;
    }
    Flow::Continue
}

fn refuse(why: &'static str) -> Flow<'static> {
    Flow::Refuse(LocalError::new(400, ErrorKind::MiddlewareRefused, why))
}

/// How many bytes of `raw` decode to its first `decoded_len` bytes (an escape is three).
fn raw_len_of(raw: &str, decoded_len: usize) -> usize {
    let bytes = raw.as_bytes();
    let mut i = 0;
    for _ in 0..decoded_len {
        i += if bytes.get(i) == Some(&b'%') { 3 } else { 1 };
    }
    i.min(bytes.len())
}

/// Whether the path has no empty, `.` or `..` segment (a trailing `/` is fine).
fn is_clean(path: &str) -> bool {
    let Some(inner) = path.strip_prefix('/') else {
        return true;
    };
    let inner = inner.strip_suffix('/').unwrap_or(inner);
    inner.is_empty() || !inner.split('/').any(|s| matches!(s, "" | "." | ".."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_count_as_one_decoded_byte() {
        assert_eq!(
            raw_len_of("/b/ap%69/test", "/b/api/".len()),
            "/b/ap%69/".len()
        );
        assert_eq!(
            raw_len_of("/t%20/test/a", "/t /test".len()),
            "/t%20/test".len()
        );
        assert_eq!(raw_len_of("/a", 5), 2);
    }

    #[test]
    fn clean_paths_have_no_empty_or_dot_segments() {
        for clean in ["", "/", "/a", "/a/", "/a/b.c", "/%2E%2E/x"] {
            assert!(is_clean(clean), "{clean}");
        }
        for unclean in ["//x", "/./foo", "/../foo", "/a//", "/a/.", "/a/.."] {
            assert!(!is_clean(unclean), "{unclean}");
        }
    }
}
