//! Conditional and range requests (RFC 9110 §13, §14) against one representation's
//! validators, for every action that answers from a whole known body: the `static` action's
//! files and the cache's stored answers. Preconditions decide 304/412, `If-Range` decides
//! whether a range applies, and `parse_ranges` turns `Range` into byte spans.

use crate::http::codec::RequestHead;
use crate::http::error::{ErrorKind, LocalError};
use weir_cache::http_date_secs;

/// Ranges asked of one answer beyond which the `Range` header is ignored (a full 200).
const MAX_RANGES: usize = 64;

/// What a representation can be compared by: its `ETag` (as sent, quotes and any `W/`
/// included) and its `Last-Modified` time in seconds since the epoch.
#[derive(Debug, Clone, Copy, Default)]
pub struct Validators<'a> {
    pub etag: Option<&'a [u8]>,
    pub modified: Option<u64>,
}

impl Validators<'_> {
    /// Strong comparison (§8.8.3.2): both strong and equal.
    fn strong_match(&self, tag: &[u8]) -> bool {
        self.etag
            .is_some_and(|etag| !etag.starts_with(b"W/") && !tag.starts_with(b"W/") && etag == tag)
    }

    /// Weak comparison: equal once any `W/` is taken off.
    fn weak_match(&self, tag: &[u8]) -> bool {
        let opaque = |t: &[u8]| t.strip_prefix(b"W/").unwrap_or(t).to_vec();
        self.etag.is_some_and(|etag| opaque(etag) == opaque(tag))
    }
}

/// The 412 of a precondition that fails.
pub fn precondition_failed() -> LocalError {
    LocalError::new(412, ErrorKind::PreconditionFailed, "precondition failed")
}

/// The 416 of a `Range` outside a representation of `length` bytes.
pub fn range_not_satisfiable(length: u64) -> LocalError {
    LocalError::new(416, ErrorKind::RangeNotSatisfiable { length }, "")
}

/// §13.2.2: `If-Match`, else `If-Unmodified-Since` (412); then `If-None-Match`, else
/// `If-Modified-Since` (304). `None`: answer normally.
pub fn precondition(req: &RequestHead, rep: &Validators<'_>) -> Option<u16> {
    if let Some(list) = req.head.get("if-match") {
        if !list_entries(list).any(|tag| tag == b"*" || rep.strong_match(tag)) {
            return Some(412);
        }
    } else if let Some(date) = req.head.get("if-unmodified-since").and_then(http_date_secs) {
        if rep.modified.is_some_and(|modified| modified > date) {
            return Some(412);
        }
    }
    if let Some(list) = req.head.get("if-none-match") {
        if list_entries(list).any(|tag| tag == b"*" || rep.weak_match(tag)) {
            return Some(304);
        }
    } else if let Some(date) = req.head.get("if-modified-since").and_then(http_date_secs) {
        if rep.modified.is_some_and(|modified| modified <= date) {
            return Some(304);
        }
    }
    None
}

fn list_entries(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    list.split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

/// `If-Range` (§13.1.5): the range applies only if the validator still matches (a strong
/// ETag, or the exact `Last-Modified` date).
pub fn if_range_holds(req: &RequestHead, rep: &Validators<'_>) -> bool {
    match req.head.get("if-range").map(<[u8]>::trim_ascii) {
        None => true,
        Some(tag) if tag.starts_with(b"\"") || tag.starts_with(b"W/") => rep.strong_match(tag),
        Some(date) => rep.modified.is_some() && http_date_secs(date) == rep.modified,
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Ranges {
    /// Not a byte-range request weir honours: send the whole body.
    Ignore,
    Unsatisfiable,
    /// `[start, end)`.
    One(u64, u64),
    Many(Vec<(u64, u64)>),
}

/// Parses `bytes=a-b, c-, -n` against a length; unsatisfiable ranges are dropped, and
/// overlapping ones merged.
pub fn parse_ranges(header: &[u8], len: u64) -> Ranges {
    let Some(spec) = std::str::from_utf8(header)
        .ok()
        .and_then(|h| h.trim().strip_prefix("bytes="))
    else {
        return Ranges::Ignore;
    };
    let mut ranges = Vec::new();
    let mut asked = 0;
    for part in spec.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        asked += 1;
        if asked > MAX_RANGES {
            return Ranges::Ignore;
        }
        let Some((first, last)) = part.split_once('-') else {
            return Ranges::Ignore;
        };
        let (first, last) = (first.trim(), last.trim());
        let range = if first.is_empty() {
            let Ok(suffix) = last.parse::<u64>() else {
                return Ranges::Ignore;
            };
            (suffix > 0 && len > 0).then(|| (len.saturating_sub(suffix), len))
        } else {
            let Ok(start) = first.parse::<u64>() else {
                return Ranges::Ignore;
            };
            let end = if last.is_empty() {
                len
            } else {
                match last.parse::<u64>() {
                    Ok(last) if last >= start => last.saturating_add(1).min(len),
                    _ => return Ranges::Ignore,
                }
            };
            (start < len).then_some((start, end))
        };
        ranges.extend(range);
    }
    if asked == 0 {
        return Ranges::Ignore;
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    match merged.len() {
        0 => Ranges::Unsatisfiable,
        1 => Ranges::One(merged[0].0, merged[0].1),
        _ => Ranges::Many(merged),
    }
}

/// A `multipart/byteranges` body of `ranges` of a `len`-byte representation whose parts are
/// `part_type`; `read` fills a part from its start offset. Returns the body and the answer's
/// `Content-Type`.
pub fn multipart_body<E>(
    part_type: &str,
    len: u64,
    ranges: &[(u64, u64)],
    mut read: impl FnMut(&mut [u8], u64) -> Result<(), E>,
) -> Result<(Vec<u8>, String), E> {
    let total: u64 = ranges.iter().map(|(s, e)| e - s).sum();
    let boundary = format!("weir-{:016x}", len ^ (total << 20) ^ ranges.len() as u64);
    let mut body = Vec::with_capacity(total as usize + ranges.len() * 128);
    for &(start, end) in ranges {
        body.extend_from_slice(
            format!(
                "\r\n--{boundary}\r\ncontent-type: {part_type}\r\ncontent-range: bytes {start}-{}/{len}\r\n\r\n",
                end - 1,
            )
            .as_bytes(),
        );
        let from = body.len();
        body.resize(from + (end - start) as usize, 0);
        read(&mut body[from..], start)?;
    }
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    Ok((body, format!("multipart/byteranges; boundary={boundary}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_ranges(b"bytes=0-99", 1000), Ranges::One(0, 100));
        assert_eq!(parse_ranges(b"bytes=900-", 1000), Ranges::One(900, 1000));
        assert_eq!(parse_ranges(b"bytes=-100", 1000), Ranges::One(900, 1000));
        assert_eq!(parse_ranges(b"bytes=-5000", 1000), Ranges::One(0, 1000));
        assert_eq!(parse_ranges(b"bytes=0-5000", 1000), Ranges::One(0, 1000));
        assert_eq!(parse_ranges(b"bytes=1000-", 1000), Ranges::Unsatisfiable);
        assert_eq!(parse_ranges(b"bytes=-0", 1000), Ranges::Unsatisfiable);
        assert_eq!(
            parse_ranges(b"bytes=0-9, 20-29", 1000),
            Ranges::Many(vec![(0, 10), (20, 30)])
        );
        assert_eq!(parse_ranges(b"bytes=0-9, 5-19", 1000), Ranges::One(0, 20));
        assert_eq!(parse_ranges(b"bytes=0-9, 2000-", 1000), Ranges::One(0, 10));
        assert_eq!(parse_ranges(b"bytes=5-1", 1000), Ranges::Ignore);
        assert_eq!(parse_ranges(b"items=0-1", 1000), Ranges::Ignore);
        assert_eq!(parse_ranges(b"bytes=a-b", 1000), Ranges::Ignore);
        let many = format!("bytes={}", vec!["0-0"; 65].join(","));
        assert_eq!(parse_ranges(many.as_bytes(), 1000), Ranges::Ignore);
    }

    #[test]
    fn etag_comparisons() {
        let strong = Validators {
            etag: Some(b"\"a\""),
            modified: None,
        };
        let weak = Validators {
            etag: Some(b"W/\"a\""),
            modified: None,
        };
        assert!(strong.strong_match(b"\"a\"") && !strong.strong_match(b"W/\"a\""));
        assert!(!weak.strong_match(b"W/\"a\""));
        assert!(weak.weak_match(b"\"a\"") && strong.weak_match(b"W/\"a\""));
        assert!(!Validators::default().weak_match(b"\"a\""));
    }
}
