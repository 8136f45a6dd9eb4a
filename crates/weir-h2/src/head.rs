//! Decoded header blocks and the request checks of RFC 9113 §8: pseudo-header rules,
//! connection-specific fields, field name and value characters, content-length.

use bytes::{Bytes, BytesMut};

/// A span of a head's arena.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

const MISSING: Span = Span {
    start: u32::MAX,
    end: u32::MAX,
};

/// Decoded fields, all in one buffer: one allocation for the bytes and one for the list.
#[derive(Debug, Clone)]
pub struct HeaderBlock {
    arena: Bytes,
    /// Name start, value start (name end), value end.
    fields: Vec<[u32; 3]>,
}

impl HeaderBlock {
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Name and value of each field, in the order received.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.fields.iter().map(|&[n, v, e]| {
            (
                &self.arena[n as usize..v as usize],
                &self.arena[v as usize..e as usize],
            )
        })
    }

    /// A field's value as a slice of the block's buffer, without a copy.
    pub fn value_bytes(&self, index: usize) -> Bytes {
        let [_, v, e] = self.fields[index];
        self.arena.slice(v as usize..e as usize)
    }

    /// The first value of `name`.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// A request's head: its pseudo-header fields and the regular ones.
#[derive(Debug, Clone)]
pub struct RequestHead {
    pub fields: HeaderBlock,
    method: Span,
    scheme: Span,
    authority: Span,
    path: Span,
    /// The value of `content-length`, if sent (§8.1.1 checks DATA against it).
    pub content_length: Option<u64>,
}

impl RequestHead {
    fn pseudo(&self, span: Span) -> Option<&[u8]> {
        (span != MISSING).then(|| &self.fields.arena[span.start as usize..span.end as usize])
    }
    pub fn method(&self) -> &[u8] {
        self.pseudo(self.method).unwrap_or_default()
    }
    pub fn scheme(&self) -> Option<&[u8]> {
        self.pseudo(self.scheme)
    }
    pub fn authority(&self) -> Option<&[u8]> {
        self.pseudo(self.authority)
    }
    pub fn path(&self) -> Option<&[u8]> {
        self.pseudo(self.path)
    }
}

/// Why a head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Larger than SETTINGS_MAX_HEADER_LIST_SIZE (counted as §6.5.2 says).
    TooLarge,
    /// Malformed (§8.1.1): a stream error of type PROTOCOL_ERROR.
    Malformed,
}

/// Collects the fields of one block as the HPACK decoder hands them out, checking each.
pub(crate) struct Collector {
    arena: BytesMut,
    fields: Vec<[u32; 3]>,
    pseudo: [Span; 5],
    regular_seen: bool,
    /// A response head (`:status` its one pseudo-header field), not a request's.
    response: bool,
    list_size: usize,
    cap: usize,
    trailers: bool,
    content_length: Option<u64>,
    refusal: Option<Refusal>,
}

const METHOD: usize = 0;
const SCHEME: usize = 1;
const AUTHORITY: usize = 2;
const PATH: usize = 3;
const STATUS: usize = 4;

impl Collector {
    pub fn new(cap: usize, block_len: usize, trailers: bool) -> Self {
        Collector {
            // Huffman codes are at least 5 bits: a field's bytes are at most 8/5 of its code.
            arena: BytesMut::with_capacity((block_len * 8 / 5 + 16).min(cap)),
            fields: Vec::new(),
            pseudo: [MISSING; 5],
            regular_seen: false,
            response: false,
            list_size: 0,
            cap,
            trailers,
            content_length: None,
            refusal: None,
        }
    }

    /// A collector of a response head (the client's side).
    pub fn new_response(cap: usize, block_len: usize) -> Self {
        Collector {
            response: true,
            ..Collector::new(cap, block_len, false)
        }
    }

    fn refuse(&mut self, why: Refusal) {
        self.refusal.get_or_insert(why);
    }

    pub fn add(&mut self, name: &[u8], value: &[u8]) {
        if self.refusal.is_some() {
            return;
        }
        self.list_size += name.len() + value.len() + 32;
        if self.list_size > self.cap {
            return self.refuse(Refusal::TooLarge);
        }
        if !value_is_valid(value) {
            return self.refuse(Refusal::Malformed);
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            // §8.3: pseudo-header fields come before regular ones, each at most once, only
            // those defined for requests, and none in trailers.
            let slot = match (pseudo, self.response) {
                (b"method", false) => METHOD,
                (b"scheme", false) => SCHEME,
                (b"authority", false) => AUTHORITY,
                (b"path", false) => PATH,
                (b"status", true) => STATUS,
                _ => return self.refuse(Refusal::Malformed),
            };
            if self.trailers || self.regular_seen || self.pseudo[slot] != MISSING {
                return self.refuse(Refusal::Malformed);
            }
            self.pseudo[slot] = self.push(value);
            return;
        }
        self.regular_seen = true;
        if !name_is_valid(name) || is_connection_specific(name, value) {
            return self.refuse(Refusal::Malformed);
        }
        if name == b"content-length" {
            match parse_content_length(value) {
                Some(n) if self.content_length.is_none_or(|seen| seen == n) => {
                    self.content_length = Some(n)
                }
                _ => return self.refuse(Refusal::Malformed),
            }
        }
        let n = self.arena.len() as u32;
        self.arena.extend_from_slice(name);
        let v = self.push(value);
        self.fields.push([n, v.start, v.end]);
    }

    fn push(&mut self, bytes: &[u8]) -> Span {
        let start = self.arena.len() as u32;
        self.arena.extend_from_slice(bytes);
        Span {
            start,
            end: self.arena.len() as u32,
        }
    }

    /// The request head, or why not (§8.3.1: :method, :scheme and a non-empty :path, except
    /// for CONNECT, §8.5: :authority only).
    pub fn finish_request(self) -> Result<RequestHead, Refusal> {
        if let Some(why) = self.refusal {
            return Err(why);
        }
        let [method, scheme, authority, path, _] = self.pseudo;
        let arena = self.arena.freeze();
        let is_connect =
            method != MISSING && &arena[method.start as usize..method.end as usize] == b"CONNECT";
        let complete = if is_connect {
            authority != MISSING && scheme == MISSING && path == MISSING
        } else {
            method != MISSING && scheme != MISSING && path != MISSING && path.end > path.start
        };
        if !complete {
            return Err(Refusal::Malformed);
        }
        Ok(RequestHead {
            fields: HeaderBlock {
                arena,
                fields: self.fields,
            },
            method,
            scheme,
            authority,
            path,
            content_length: self.content_length,
        })
    }

    /// A response's status and fields (§8.3.2: `:status`, three digits), and its declared
    /// content-length.
    pub fn finish_response(self) -> Result<(u16, HeaderBlock, Option<u64>), Refusal> {
        if let Some(why) = self.refusal {
            return Err(why);
        }
        let span = self.pseudo[STATUS];
        let digits = match span {
            MISSING => return Err(Refusal::Malformed),
            _ => &self.arena[span.start as usize..span.end as usize],
        };
        let status = match digits {
            [a @ b'1'..=b'9', b, c] if b.is_ascii_digit() && c.is_ascii_digit() => {
                (*a - b'0') as u16 * 100 + (*b - b'0') as u16 * 10 + (*c - b'0') as u16
            }
            _ => return Err(Refusal::Malformed),
        };
        let fields = HeaderBlock {
            arena: self.arena.freeze(),
            fields: self.fields,
        };
        Ok((status, fields, self.content_length))
    }

    pub fn finish_trailers(self) -> Result<HeaderBlock, Refusal> {
        match self.refusal {
            Some(why) => Err(why),
            None => Ok(HeaderBlock {
                arena: self.arena.freeze(),
                fields: self.fields,
            }),
        }
    }
}

/// §8.2.1: a name is a lowercase token.
fn name_is_valid(name: &[u8]) -> bool {
    !name.is_empty()
        && name.iter().all(|&b| {
            matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*'
                | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
        })
}

/// §8.2.1: no NUL, CR or LF, and no leading or trailing whitespace.
fn value_is_valid(value: &[u8]) -> bool {
    let edge_is_space = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
    !edge_is_space(value.first())
        && !edge_is_space(value.last())
        && !value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n')
}

/// §8.2.2: connection-specific fields are malformed in HTTP/2; TE only as "trailers". HTTP/3
/// says the same (RFC 9114 §4.2), so weir's protocol-neutral request head asks this too.
pub fn is_connection_specific(name: &[u8], value: &[u8]) -> bool {
    match name {
        b"connection" | b"proxy-connection" | b"keep-alive" | b"transfer-encoding" | b"upgrade" => {
            true
        }
        b"te" => value != b"trailers",
        _ => false,
    }
}

fn parse_content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 19 {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + (b - b'0') as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(fields: &[(&str, &str)]) -> Result<RequestHead, Refusal> {
        let mut c = Collector::new(32 * 1024, 100, false);
        for (n, v) in fields {
            c.add(n.as_bytes(), v.as_bytes());
        }
        c.finish_request()
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/a"),
        (":authority", "x"),
    ];

    fn with(extra: &[(&str, &str)]) -> Vec<(&'static str, &'static str)> {
        let mut v = GET.to_vec();
        v.extend(extra.iter().map(|&(n, v)| {
            (
                String::leak(n.to_string()) as &str,
                String::leak(v.to_string()) as &str,
            )
        }));
        v
    }

    #[test]
    fn a_complete_request_is_taken() {
        let head = request(&with(&[("accept", "*/*"), ("te", "trailers")])).unwrap();
        assert_eq!(head.method(), b"GET");
        assert_eq!(head.path(), Some(&b"/a"[..]));
        assert_eq!(head.authority(), Some(&b"x"[..]));
        assert_eq!(head.fields.get(b"accept"), Some(&b"*/*"[..]));
        assert_eq!(head.fields.len(), 2);
    }

    #[test]
    fn malformed_requests_of_rfc_9113_section_8() {
        let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
            (
                "§8.3.1 missing :path",
                GET.iter().copied().filter(|f| f.0 != ":path").collect(),
            ),
            (
                "§8.3.1 missing :method",
                GET.iter().copied().filter(|f| f.0 != ":method").collect(),
            ),
            (
                "§8.3.1 missing :scheme",
                GET.iter().copied().filter(|f| f.0 != ":scheme").collect(),
            ),
            (
                "§8.3.1 empty :path",
                vec![(":method", "GET"), (":scheme", "http"), (":path", "")],
            ),
            ("§8.3 duplicate :path", with(&[(":path", "/b")])),
            (
                "§8.3 pseudo after regular",
                vec![
                    (":method", "GET"),
                    ("accept", "*/*"),
                    (":scheme", "http"),
                    (":path", "/"),
                ],
            ),
            ("§8.3 unknown pseudo", with(&[(":foo", "x")])),
            (
                "§8.3 response pseudo in a request",
                with(&[(":status", "200")]),
            ),
            ("§8.2.1 uppercase name", with(&[("Accept", "x")])),
            ("§8.2.1 CR in a value", with(&[("x-a", "a\rb")])),
            ("§8.2.1 leading space", with(&[("x-a", " a")])),
            ("§8.2.2 connection", with(&[("connection", "keep-alive")])),
            (
                "§8.2.2 transfer-encoding",
                with(&[("transfer-encoding", "chunked")]),
            ),
            ("§8.2.2 te other than trailers", with(&[("te", "gzip")])),
            (
                "§8.1.1 bad content-length",
                with(&[("content-length", "1x")]),
            ),
            (
                "§8.1.1 two content-lengths",
                with(&[("content-length", "1"), ("content-length", "2")]),
            ),
            (
                "§8.5 CONNECT with :path",
                vec![
                    (":method", "CONNECT"),
                    (":authority", "a:1"),
                    (":path", "/"),
                ],
            ),
        ];
        for (what, fields) in cases {
            assert_eq!(request(&fields).err(), Some(Refusal::Malformed), "{what}");
        }
        let connect = request(&[(":method", "CONNECT"), (":authority", "a:443")]).unwrap();
        assert_eq!(connect.path(), None);
    }

    #[test]
    fn the_list_size_counts_32_bytes_per_field() {
        // RFC 9113 §6.5.2 (SETTINGS_MAX_HEADER_LIST_SIZE) counts as RFC 7541 §4.1 does.
        let mut c = Collector::new(100, 10, false);
        c.add(b":method", b"GET"); // 42
        c.add(b":path", b"/"); // 38: 80
        c.add(b":scheme", b"http"); // 43: 123
        assert_eq!(c.finish_request().err(), Some(Refusal::TooLarge));
    }

    #[test]
    fn a_response_head_has_a_three_digit_status_and_no_request_pseudo_fields() {
        let mut c = Collector::new_response(1000, 10);
        c.add(b":status", b"204");
        c.add(b"server", b"x");
        let (status, fields, _) = c.finish_response().unwrap();
        assert_eq!((status, fields.get(b"server")), (204, Some(&b"x"[..])));
        for bad in [
            &[(":status", "20")][..],
            &[(":path", "/")],
            &[("server", "x")],
        ] {
            let mut c = Collector::new_response(1000, 10);
            for (n, v) in bad {
                c.add(n.as_bytes(), v.as_bytes());
            }
            assert_eq!(
                c.finish_response().err(),
                Some(Refusal::Malformed),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn trailers_may_not_carry_pseudo_fields() {
        let mut c = Collector::new(1000, 10, true);
        c.add(b":path", b"/");
        assert_eq!(c.finish_trailers().err(), Some(Refusal::Malformed));
    }
}
