//! The HTTP/1.1 codec, pure (no I/O): request and response heads parsed with httparse into a
//! [`Head`] whose header list can be edited without reallocating every header, strict message
//! framing (ambiguous or malformed framing is refused before anything reaches an upstream), a
//! streaming chunked-body decoder, and the helpers that serialize heads.

use crate::http::ascii::eq_ignore_case;
use bytes::BytesMut;

/// Largest request or response head accepted; beyond it the client gets 431.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;
/// Most header lines accepted in one head; beyond it the client gets 431.
pub const MAX_HEADERS: usize = 128;

/// Where an optional span of the request head is absent (no byte range starts there).
const NO_SPAN: TextSpan = TextSpan(Span {
    start: u32::MAX,
    end: u32::MAX,
});

/// A byte range inside [`Head::buf`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    start: u32,
    end: u32,
}

impl Span {
    fn of(base: &[u8], part: &[u8]) -> Span {
        let start = part.as_ptr() as usize - base.as_ptr() as usize;
        Span {
            start: start as u32,
            end: (start + part.len()) as u32,
        }
    }
}

/// A span whose bytes are known to be UTF-8: it was made from a `&str`. Only such spans can be
/// read back as `&str` without re-validating.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextSpan(Span);

impl TextSpan {
    fn of(base: &[u8], text: &str) -> TextSpan {
        TextSpan(Span::of(base, text.as_bytes()))
    }

    /// A span over bytes already checked to be ASCII (so UTF-8), without checking them again.
    fn of_ascii(base: &[u8], ascii: &[u8]) -> TextSpan {
        debug_assert!(ascii.is_ascii());
        TextSpan(Span::of(base, ascii))
    }

    /// The sub-span `[from, to)` in bytes relative to this span's start; callers split only at
    /// ASCII characters, which are always character boundaries.
    fn sub(self, from: usize, to: usize) -> TextSpan {
        TextSpan(Span {
            start: self.0.start + from as u32,
            end: self.0.start + to as u32,
        })
    }
}

/// The header lines of a message plus the bytes they point into. Edits append to `buf`
/// and re-point spans, so untouched headers are never copied.
#[derive(Debug, Default, Clone)]
pub struct Head {
    buf: BytesMut,
    headers: Vec<(Span, Span)>,
    /// Set by any edit; cached facts from the parse-time scan are then re-derived.
    edited: bool,
}

impl Head {
    /// An empty head with room for `bytes` of names and values in `fields` lines.
    pub fn with_capacity(bytes: usize, fields: usize) -> Head {
        Head {
            buf: BytesMut::with_capacity(bytes),
            headers: Vec::with_capacity(fields),
            edited: false,
        }
    }

    pub fn bytes(&self, span: Span) -> &[u8] {
        &self.buf[span.start as usize..span.end as usize]
    }

    pub fn str(&self, span: Span) -> &str {
        std::str::from_utf8(self.bytes(span)).unwrap_or("")
    }

    /// Reads a span known to be UTF-8 without validating it again: re-validating the method,
    /// target and host on every access was about 10% of the instructions of a `respond` request
    /// (callgrind), which is why this one unsafe block exists.
    #[allow(unsafe_code)]
    pub fn text(&self, span: TextSpan) -> &str {
        let bytes = self.bytes(span.0);
        debug_assert!(std::str::from_utf8(bytes).is_ok());
        // SAFETY: a TextSpan is only made from a `&str` lying inside `buf` (`TextSpan::of`,
        // `push_text`), from bytes validated as ASCII (`TextSpan::of_ascii`: a Host value that
        // passed `is_valid_authority`, which admits ASCII only) or from an ASCII-aligned part of
        // one (`TextSpan::sub`), and `buf` is only ever appended to, so the bytes under the
        // span are still that valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    fn push_text(&mut self, text: &str) -> TextSpan {
        TextSpan(self.push_bytes(text.as_bytes()))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers
            .iter()
            .map(move |(n, v)| (self.bytes(*n), self.bytes(*v)))
    }

    /// The first value of header `name` (case-insensitive).
    pub fn get<'a>(&'a self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|(n, _)| eq_ignore_case(self.bytes(*n), name.as_bytes()))
            .map(|(_, v)| self.bytes(*v))
    }

    /// Every value of header `name` (case-insensitive), in order. A value is sliced only for
    /// a field whose name matches: most fields are passed over on their name's length.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| eq_ignore_case(self.bytes(*n), name.as_bytes()))
            .map(|(_, v)| self.bytes(*v))
    }

    pub fn remove(&mut self, name: &str) {
        self.edited = true;
        let buf = &self.buf;
        self.headers.retain(|(n, _)| {
            !eq_ignore_case(&buf[n.start as usize..n.end as usize], name.as_bytes())
        });
    }

    pub fn append(&mut self, name: &str, value: &[u8]) {
        self.append_field(name.as_bytes(), value);
    }

    /// `append` for a name already in bytes (a field copied from another head).
    pub fn append_field(&mut self, name: &[u8], value: &[u8]) {
        self.edited = true;
        let name = self.push_bytes(name);
        let value = self.push_bytes(value);
        self.headers.push((name, value));
    }

    /// Room for `fields` more fields of `bytes` in all, so the appends that follow neither
    /// grow the list nor, for a head parsed in place, copy the bytes into a buffer as large as
    /// the connection's (what `BytesMut` does when a shared buffer must grow).
    pub fn reserve(&mut self, bytes: usize, fields: usize) {
        if self.buf.capacity() - self.buf.len() < bytes {
            self.buf = self.buf_with_room(bytes);
        }
        self.headers.reserve_exact(fields);
    }

    /// A copy with room for `fields` more fields of `bytes` in all: the buffer and the field
    /// list are each copied at once, where appending field by field copied each one.
    pub fn copy_with_room(&self, bytes: usize, fields: usize) -> Head {
        let mut headers = Vec::with_capacity(self.headers.len() + fields);
        headers.extend_from_slice(&self.headers);
        Head {
            buf: self.buf_with_room(bytes),
            headers,
            edited: true,
        }
    }

    /// This head's bytes in a new buffer with `bytes` to spare.
    fn buf_with_room(&self, bytes: usize) -> BytesMut {
        let mut buf = BytesMut::with_capacity(self.buf.len() + bytes);
        buf.extend_from_slice(&self.buf);
        buf
    }

    /// The bytes this head holds: its buffer (with what edits and copies left unused) and its
    /// field list.
    pub fn held_bytes(&self) -> usize {
        self.buf.len() + self.headers.len() * std::mem::size_of::<(Span, Span)>()
    }

    /// A copy without the fields whose names `dropped` picks: the bytes are copied at once
    /// (the dropped fields' stay, unused), which costs less than appending each kept field.
    pub fn without(&self, dropped: impl Fn(&[u8]) -> bool) -> Head {
        // Sized for all the fields at once: collected from a filter, the list grew from four
        // (a reallocation and a copy for every stored answer).
        let mut headers = Vec::with_capacity(self.headers.len());
        headers.extend(
            self.headers
                .iter()
                .filter(|(name, _)| !dropped(self.bytes(*name)))
                .copied(),
        );
        Head {
            buf: self.buf.clone(),
            headers,
            edited: true,
        }
    }

    pub fn set(&mut self, name: &str, value: &[u8]) {
        self.remove(name);
        self.append(name, value);
    }

    fn push_bytes(&mut self, bytes: &[u8]) -> Span {
        let start = self.buf.len() as u32;
        self.buf.extend_from_slice(bytes);
        Span {
            start,
            end: self.buf.len() as u32,
        }
    }

    pub fn len(&self) -> usize {
        self.headers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }
}

/// How a message body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
    /// Response bodies only: the body runs until the connection closes.
    UntilClose,
}

/// A request target in origin form: the path, and `?` and the query when there is one.
fn origin_form(path: &str, query: &str) -> String {
    if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    }
}

#[derive(Debug, Clone)]
pub struct RequestHead {
    pub head: Head,
    method: TextSpan,
    target: TextSpan,
    /// Parts of `target`, split once at parse time.
    path: TextSpan,
    query: TextSpan,
    /// The authority of an absolute-form target (`GET http://host/ HTTP/1.1`), else
    /// [`NO_SPAN`]. Not `Option`s, this and `host`: with their tags, the head grew past the
    /// size the compiler copies inline, and every move of it became a `memcpy` call (callgrind).
    authority: TextSpan,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    pub framing: Framing,
    pub keep_alive: bool,
    pub upgrade: bool,
    /// An HTTP/1.1 client asked for `100 Continue` before it sends the body (HTTP/1.0 clients'
    /// expectations are ignored, RFC 9110 section 10.1.1).
    pub expect_continue: bool,
    /// The head carries `Expect: 100-continue` (from any version); weir answers it itself, so
    /// it is not forwarded.
    pub has_expect_continue: bool,
    /// The Host header as parsed (valid until the head is edited), else [`NO_SPAN`].
    host: TextSpan,
    /// Some Connection header names other headers, which must not be forwarded.
    pub connection_names_headers: bool,
    /// The client accepts trailers (`TE: trailers`), so weir asks the upstream for them too.
    pub te_trailers: bool,
    /// The request came on an HTTP/2 stream (its head was converted at the edge), or on an
    /// HTTP/3 one, which the lifecycle treats alike (framed by its driver, trailers allowed;
    /// `ClientSide::http3` tells them apart).
    pub http2: bool,
    /// On a traced route: the request's trace context, which every try sends upstream.
    pub trace: Option<Box<crate::http::trace_context::TraceContext>>,
}

impl RequestHead {
    pub fn method(&self) -> &str {
        self.head.text(self.method)
    }

    /// The request target as received (origin form `/path?query`, or absolute form).
    pub fn target(&self) -> &str {
        self.head.text(self.target)
    }

    /// The path part of the target, without query; absolute-form targets are reduced to it.
    pub fn path(&self) -> &str {
        self.head.text(self.path)
    }

    pub fn query(&self) -> &str {
        self.head.text(self.query)
    }

    /// The host the client addressed: the absolute-form authority, else the Host header.
    pub fn host(&self) -> &str {
        // An empty authority (`http:///path`) falls back to the Host header, as in Traefik.
        let authority = self.authority;
        if authority != NO_SPAN && authority.0.start != authority.0.end {
            return self.head.text(authority);
        }
        match (self.head.edited, self.host) {
            (false, NO_SPAN) => "",
            (false, span) => self.head.text(span),
            (true, _) => self
                .head
                .get("host")
                .and_then(|v| std::str::from_utf8(v).ok())
                .unwrap_or(""),
        }
    }

    /// Replaces the method (a `lua` phase's `ngx.req.set_method`).
    pub fn set_method(&mut self, method: &str) {
        self.method = self.head.push_text(method);
    }

    /// Replaces the path, keeping the query string.
    pub fn set_path(&mut self, path: &str) {
        let target = origin_form(path, self.query());
        self.set_origin_target(&target);
    }

    /// Replaces the query string (without its `?`; empty: none), keeping the path.
    pub fn set_query(&mut self, query: &str) {
        let target = origin_form(self.path(), query);
        self.set_origin_target(&target);
    }

    /// Makes `target` (origin form) the request's target.
    fn set_origin_target(&mut self, target: &str) {
        self.target = self.head.push_text(target);
        self.authority = NO_SPAN;
        self.split_target();
    }

    /// Derives `path`, `query` and `authority` from `target`.
    fn split_target(&mut self) {
        let target = self.head.text(self.target);
        let (origin_start, authority) = match target
            .strip_prefix("http://")
            .or_else(|| target.strip_prefix("https://"))
        {
            Some(rest) => {
                let scheme_len = target.len() - rest.len();
                let slash = rest.find('/').unwrap_or(rest.len());
                (
                    scheme_len + slash,
                    Some(self.target.sub(scheme_len, scheme_len + slash)),
                )
            }
            None => (0, None),
        };
        // memchr: `str::find` with a char pattern costs about 80 instructions of set-up even
        // for `/ping` (callgrind).
        let question =
            memchr::memchr(b'?', &target.as_bytes()[origin_start..]).map(|i| origin_start + i);
        let target_len = target.len();
        let path_end = question.unwrap_or(target_len);
        self.path = if origin_start == target_len {
            // `http://host` with no path means `/`.
            TextSpan(self.head.push_bytes(b"/"))
        } else {
            self.target.sub(origin_start, path_end)
        };
        self.query = match question {
            Some(q) => self.target.sub(q + 1, target_len),
            None => self.target.sub(target_len, target_len),
        };
        if let Some(authority) = authority {
            self.authority = authority;
        }
    }

    pub fn is_head(&self) -> bool {
        self.method() == "HEAD"
    }

    /// Whether the method is idempotent (RFC 9110 section 9.2.2), so a request that may have
    /// been lost can be sent again.
    pub fn is_idempotent(&self) -> bool {
        matches!(
            self.method(),
            "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
        )
    }
}

#[derive(Debug, Clone)]
pub struct ResponseHead {
    pub head: Head,
    pub status: u16,
    reason: Span,
    pub minor_version: u8,
    pub framing: Framing,
    pub keep_alive: bool,
    /// Some Connection header names other headers, which must not be forwarded.
    pub connection_names_headers: bool,
    /// The response carries a `Date` header (else the proxy adds one).
    pub has_date: bool,
}

impl ResponseHead {
    pub fn reason(&self) -> &str {
        self.head.str(self.reason)
    }

    /// An editable head from fields another protocol parsed (an HTTP/2 response), framed as
    /// the caller determined.
    pub fn from_fields<'a>(
        status: u16,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        framing: Framing,
    ) -> ResponseHead {
        // Sized for a typical answer's fields: growing the buffer was a miss's main copy.
        let mut head = Head::with_capacity(1024, 16);
        let mut has_date = false;
        for (name, value) in fields {
            has_date |= eq_ignore_case(name, b"date");
            head.append_field(name, value);
        }
        head.edited = false;
        ResponseHead::with_head(status, head, framing, has_date)
    }

    /// A head made of `head`'s fields (no hop-by-hop ones among them), framed as the caller
    /// determined.
    pub fn from_head(status: u16, head: Head, framing: Framing) -> ResponseHead {
        let has_date = head.get("date").is_some();
        ResponseHead::with_head(status, head, framing, has_date)
    }

    fn with_head(status: u16, head: Head, framing: Framing, has_date: bool) -> ResponseHead {
        ResponseHead {
            head,
            status,
            reason: Span::default(),
            minor_version: 1,
            framing,
            keep_alive: true,
            connection_names_headers: false,
            has_date,
        }
    }

    /// An editable head for an answer weir makes itself, framed by its body's length.
    pub fn local(status: u16, headers: &[(String, String)], body_len: usize) -> ResponseHead {
        let mut length = Vec::with_capacity(20);
        push_decimal(&mut length, body_len as u64);
        let fields = headers
            .iter()
            .filter(|(name, _)| !name.eq_ignore_ascii_case("content-length"))
            .map(|(name, value)| (name.as_bytes(), value.as_bytes()))
            .chain([(&b"content-length"[..], length.as_slice())]);
        let framing = match body_len {
            0 => Framing::None,
            n => Framing::Length(n as u64),
        };
        ResponseHead {
            // weir's own answers get the worker's `Date`, whatever their headers say.
            has_date: false,
            ..ResponseHead::from_fields(status, fields, framing)
        }
    }
}

/// Why a head was refused; maps to the status the client receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Malformed syntax or ambiguous framing: 400.
    Malformed(&'static str),
    /// Well-formed but asks for something weir does not implement (a transfer coding): 501.
    Unsupported(&'static str),
    /// Head or header count over the limit: 431.
    TooLarge,
}

impl HeadError {
    pub fn status(&self) -> u16 {
        match self {
            HeadError::Malformed(_) => 400,
            HeadError::Unsupported(_) => 501,
            HeadError::TooLarge => 431,
        }
    }

    /// The plain-text explanation sent with the status.
    pub fn message(&self) -> &'static str {
        match self {
            HeadError::Malformed(why) | HeadError::Unsupported(why) => why,
            HeadError::TooLarge => "request head too large",
        }
    }
}

/// The length of a complete head, `None` while more bytes are needed, or why it is refused.
fn head_length(
    parsed: httparse::Result<usize>,
    buffered: usize,
    malformed: &'static str,
) -> Result<Option<usize>, HeadError> {
    match parsed {
        Ok(httparse::Status::Complete(len)) if len > MAX_HEAD_BYTES => Err(HeadError::TooLarge),
        Ok(httparse::Status::Complete(len)) => Ok(Some(len)),
        Ok(httparse::Status::Partial) if buffered > MAX_HEAD_BYTES => Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge),
        Err(_) => Err(HeadError::Malformed(malformed)),
    }
}

/// The spans of the parsed fields, in a list with room for `spare` more.
fn header_spans(base: &[u8], raw: &[httparse::Header<'_>], spare: usize) -> Vec<(Span, Span)> {
    let mut spans = Vec::with_capacity(raw.len() + spare);
    spans.extend(
        raw.iter()
            .map(|h| (Span::of(base, h.name.as_bytes()), Span::of(base, h.value))),
    );
    spans
}

/// Parses a request head from the front of `buf`. On success the head's bytes are split off
/// `buf`, leaving any body or pipelined bytes behind. `Ok(None)` means more bytes are needed.
pub fn parse_request(buf: &mut BytesMut) -> Result<Option<RequestHead>, HeadError> {
    let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut raw);
    let Some(len) = head_length(req.parse(buf), buf.len(), "malformed request head")? else {
        return Ok(None);
    };
    let base: &[u8] = buf;
    let method = TextSpan::of(base, req.method.unwrap_or(""));
    let target = TextSpan::of(base, req.path.unwrap_or(""));
    let minor_version = req.version.unwrap_or(1);
    let headers = header_spans(base, req.headers, 0);
    let head = Head {
        buf: buf.split_to(len),
        headers,
        edited: false,
    };
    request_from_head(head, method, target, minor_version).map(Some)
}

/// The request a head's fields make, its request line already in `head` (`method`, `target`):
/// the known fields' scan, framing, the Host rules and the target's form, shared by the
/// HTTP/1 parse and the heads built from HTTP/2 and HTTP/3 fields. Inlined: called apart, its
/// head was moved through memory once more, 70 instructions of an HTTP/1 `ping` (callgrind).
#[inline(always)]
fn request_from_head(
    head: Head,
    method: TextSpan,
    target: TextSpan,
    minor_version: u8,
) -> Result<RequestHead, HeadError> {
    let known = Known::scan(&head)?;
    let framing = known.framing(minor_version)?;
    if known.hosts > 1 {
        return Err(HeadError::Malformed("more than one Host header"));
    }
    if minor_version == 1 && known.hosts == 0 {
        return Err(HeadError::Malformed(
            "HTTP/1.1 request without a Host header",
        ));
    }
    let mut req = RequestHead {
        head,
        method,
        target,
        path: TextSpan::default(),
        query: TextSpan::default(),
        authority: NO_SPAN,
        minor_version,
        framing,
        keep_alive: known.keep_alive(minor_version),
        upgrade: known.upgrade_token && known.upgrade_header,
        expect_continue: known.expect_continue && minor_version == 1,
        has_expect_continue: known.expect_continue,
        host: known.host.unwrap_or(NO_SPAN),
        connection_names_headers: known.names_headers,
        te_trailers: known.te_trailers,
        http2: false,
        trace: None,
    };
    req.split_target();
    if req.authority != NO_SPAN && !is_valid_authority(req.head.text(req.authority).as_bytes()) {
        return Err(HeadError::Malformed(
            "invalid authority in the request target",
        ));
    }
    let target = req.target();
    if !(target.starts_with('/')
        || target.starts_with("http://")
        || target.starts_with("https://")
        || (target == "*" && req.method() == "OPTIONS"))
    {
        return Err(HeadError::Malformed("unsupported request target"));
    }
    Ok(req)
}

impl RequestHead {
    /// A request head from an HTTP/2 or HTTP/3 request's fields, built directly (no HTTP/1
    /// text parsed back): the method and target (`:method`, `:path`), `Host` from `authority`
    /// (given when no `host` field came), the fields with `cookie` ones joined by `; ` (RFC
    /// 9113 8.2.3), and `transfer-encoding: chunked` for a body of unknown length (`chunked`;
    /// so an HTTP/1 upstream gets it chunked). The names come checked by the protocol's codec
    /// (lowercase tokens); the rest is checked here as the HTTP/1 parse checks it (the method
    /// a token, the target's and values' bytes, the field-count and size limits: 431), then by
    /// the same scan of known fields, Host and target rules. Connection-specific fields are
    /// refused, as both protocols require.
    pub fn from_fields<'f>(
        method: &[u8],
        target: &[u8],
        authority: Option<&[u8]>,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        chunked: bool,
    ) -> Result<RequestHead, HeadError> {
        const MALFORMED: HeadError = HeadError::Malformed("malformed request head");
        if !is_field_name(method) {
            return Err(MALFORMED);
        }
        // A token is ASCII: this only makes it a `&str`.
        let method = std::str::from_utf8(method).map_err(|_| MALFORMED)?;
        let target = std::str::from_utf8(target).map_err(|_| MALFORMED)?;
        if target.is_empty() || !all_bytes(target.as_bytes(), is_target_byte) {
            return Err(MALFORMED);
        }
        // Written where the head keeps it, as the HTTP/1 parse leaves it (no copy).
        let mut head = Head::with_capacity(512, fields.size_hint().0 + 2);
        let method = head.push_text(method);
        let target = head.push_text(target);
        let field = |head: &mut Head, name: &[u8], value: &[u8]| {
            field_count_ok(head)?;
            let name = head.push_bytes(name);
            let value = head.push_bytes(value);
            head.headers.push((name, value));
            Ok(())
        };
        if let Some(authority) = authority {
            field(&mut head, b"host", authority)?;
        }
        let mut cookies: Vec<&[u8]> = Vec::new();
        for (name, value) in fields {
            debug_assert!(is_field_name(name));
            if !is_field_value(value) {
                return Err(MALFORMED);
            }
            if weir_h2::is_connection_specific(name, value) {
                return Err(HeadError::Malformed("connection-specific header field"));
            }
            if name == b"cookie" {
                cookies.push(value);
            } else {
                field(&mut head, name, value)?;
            }
        }
        if !cookies.is_empty() {
            field_count_ok(&head)?;
            let name = head.push_bytes(b"cookie");
            let start = head.buf.len() as u32;
            for (i, cookie) in cookies.iter().enumerate() {
                if i > 0 {
                    head.buf.extend_from_slice(b"; ");
                }
                head.buf.extend_from_slice(cookie);
            }
            let end = head.buf.len() as u32;
            head.headers.push((name, Span { start, end }));
        }
        if chunked {
            field(&mut head, b"transfer-encoding", b"chunked")?;
        }
        // The limit counts the head as HTTP/1 text: the request line's ` ` and ` HTTP/1.1\r\n`,
        // each field's `: ` and `\r\n`, the final `\r\n`.
        if head.buf.len() + 12 + 4 * head.headers.len() + 2 > MAX_HEAD_BYTES {
            return Err(HeadError::TooLarge);
        }
        let mut req = request_from_head(head, method, target, 1)?;
        req.http2 = true;
        Ok(req)
    }
}

/// Whether another field fits under [`MAX_HEADERS`].
fn field_count_ok(head: &Head) -> Result<(), HeadError> {
    match head.headers.len() < MAX_HEADERS {
        true => Ok(()),
        false => Err(HeadError::TooLarge),
    }
}

/// Whether every byte of `bytes` passes `valid`, without stopping at the first that fails (a
/// loop the compiler vectorizes: bad bytes are rare).
fn all_bytes(bytes: &[u8], valid: impl Fn(u8) -> bool) -> bool {
    bytes.iter().fold(true, |ok, &b| ok & valid(b))
}

/// Whether `name` is a field name (a token), as httparse and the `http` crate admit one.
pub fn is_field_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&b| is_token_byte(b))
}

/// Appends `name` lowercased (HTTP/2 and HTTP/3 names, RFC 9113 section 8.2.1) and tells
/// whether it was a field name (a token): one table lookup a byte for both, in one pass (a
/// search for the 0 a byte that is not a token's becomes cost more than the pass, callgrind).
pub fn push_lowercase_name(out: &mut Vec<u8>, name: &[u8]) -> bool {
    let mut token = !name.is_empty();
    out.extend(name.iter().map(|&b| {
        let lower = LOWER_TOKEN[b as usize];
        token &= lower != 0;
        lower
    }));
    token
}

/// Each byte lowercased if it is a token's, else 0 (see [`push_lowercase_name`]).
static LOWER_TOKEN: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() {
            table[b] = c.to_ascii_lowercase();
        }
        b += 1;
    }
    let extra = b"!#$%&'*+-.^_`|~";
    let mut i = 0;
    while i < extra.len() {
        table[extra[i] as usize] = extra[i];
        i += 1;
    }
    table
};

/// Whether `value` is a field value as httparse and the `http` crate admit one (a tab, any
/// byte from space up but DEL). Eight bytes at a time: byte by byte, the check was most of the
/// cost of an HTTP/2 answer's head (callgrind h2proxy).
pub fn is_field_value(value: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    /// The high bit of each byte of `x` that is zero (exact, no borrow across bytes).
    fn zero_bytes(x: u64) -> u64 {
        !(((x & !HIGH) + !HIGH) | x) & HIGH
    }
    let mut words = value.chunks_exact(8);
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let x = u64::from_le_bytes(bytes);
        // Under 0x20: the high bit clear, and still clear once 0x60 is added to the low seven.
        let control = !((x & !HIGH) + 0x60 * ONES) & !x & HIGH;
        let tab = zero_bytes(x ^ (b'\t' as u64 * ONES));
        let del = zero_bytes(x ^ (0x7f * ONES));
        if (control & !tab) | del != 0 {
            return false;
        }
    }
    all_bytes(words.remainder(), is_value_byte)
}

/// A token's bytes (RFC 9110 section 5.6.2), as httparse admits in a method.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The bytes httparse admits in a request target: visible ASCII and any byte past it.
fn is_target_byte(b: u8) -> bool {
    b > b' ' && b != 0x7f
}

/// The bytes httparse admits in a field value: a tab, visible ASCII and space, any byte past it.
fn is_value_byte(b: u8) -> bool {
    b == b'\t' || (b >= b' ' && b != 0x7f)
}

/// Fields a parsed response head has room for beyond its own (see `parse_response`).
const RESPONSE_SPARE_FIELDS: usize = 2;

/// Parses a response head from the front of `buf`; `request_is_head` suppresses the body.
pub fn parse_response(
    buf: &mut BytesMut,
    request_is_head: bool,
) -> Result<Option<ResponseHead>, HeadError> {
    let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut raw);
    let Some(len) = head_length(res.parse(buf), buf.len(), "malformed response head")? else {
        return Ok(None);
    };
    let base: &[u8] = buf;
    let status = res.code.unwrap_or(0);
    // httparse gives a reason that is not UTF-8 as a `""` of its own, outside `buf`: it reads
    // as empty, like a missing one (and the canonical reason is sent).
    let reason = match res.reason {
        Some(reason) if !reason.is_empty() => Span::of(base, reason.as_bytes()),
        _ => Span::default(),
    };
    let minor_version = res.version.unwrap_or(1);
    // Room for two more fields: the cache adds `Age` and `Cache-Status` to an answer it
    // stores, and growing the list then cost a reallocation and a copy.
    let headers = header_spans(base, res.headers, RESPONSE_SPARE_FIELDS);
    let head = Head {
        buf: buf.split_to(len),
        headers,
        edited: false,
    };
    let known = Known::scan(&head)?;
    let framing = if request_is_head || status < 200 || status == 204 || status == 304 {
        Framing::None
    } else {
        match known.framing(minor_version)? {
            Framing::None if known.length.is_none() => Framing::UntilClose,
            other => other,
        }
    };
    let keep_alive = framing != Framing::UntilClose && known.keep_alive(minor_version);
    Ok(Some(ResponseHead {
        head,
        status,
        reason,
        minor_version,
        framing,
        keep_alive,
        connection_names_headers: known.names_headers,
        has_date: known.date,
    }))
}

/// What one pass over the header lines learns about the headers weir interprets itself.
#[derive(Default)]
struct Known {
    host: Option<TextSpan>,
    hosts: usize,
    /// Transfer-Encoding header lines.
    transfer_encodings: usize,
    /// Transfer codings listed over all those lines, in order.
    codings: usize,
    /// How many of the codings are `chunked`, and whether the last one is.
    chunked_codings: usize,
    chunked_last: bool,
    date: bool,
    te_trailers: bool,
    /// The Content-Length value; all copies must agree.
    length: Option<u64>,
    close: bool,
    keep: bool,
    upgrade_token: bool,
    /// A Connection header lists something other than close, keep-alive or upgrade.
    names_headers: bool,
    upgrade_header: bool,
    expect_continue: bool,
}

impl Known {
    fn scan(head: &Head) -> Result<Known, HeadError> {
        let mut k = Known::default();
        for &(name_span, value_span) in &head.headers {
            let name = head.bytes(name_span);
            let value = head.bytes(value_span);
            // Dispatch on length first: most headers are none of these and cost one compare.
            match name.len() {
                4 if eq_ignore_case(name, b"host") => {
                    k.hosts += 1;
                    if !is_valid_authority(value) {
                        return Err(HeadError::Malformed("invalid Host header"));
                    }
                    // A valid authority is ASCII: no second UTF-8 check.
                    k.host.get_or_insert(TextSpan::of_ascii(&head.buf, value));
                }
                4 if eq_ignore_case(name, b"date") => k.date = true,
                2 if eq_ignore_case(name, b"te") => {
                    k.te_trailers |= lists_token(value, b"trailers");
                }
                6 if eq_ignore_case(name, b"expect") => {
                    k.expect_continue = eq_ignore_case(value, b"100-continue");
                }
                7 if eq_ignore_case(name, b"upgrade") => k.upgrade_header = true,
                10 if eq_ignore_case(name, b"connection") => {
                    for token in value.split(|&b| b == b',') {
                        let token = token.trim_ascii();
                        if eq_ignore_case(token, b"close") {
                            k.close = true;
                        } else if eq_ignore_case(token, b"keep-alive") {
                            k.keep = true;
                        } else if eq_ignore_case(token, b"upgrade") {
                            k.upgrade_token = true;
                        } else if !token.is_empty() {
                            k.names_headers = true;
                        }
                    }
                }
                14 if eq_ignore_case(name, b"content-length") => {
                    let n = parse_content_length(value)?;
                    if k.length.is_some_and(|prev| prev != n) {
                        return Err(HeadError::Malformed("conflicting Content-Length headers"));
                    }
                    k.length = Some(n);
                }
                17 if eq_ignore_case(name, b"transfer-encoding") => {
                    k.transfer_encodings += 1;
                    // Several lines form one list (RFC 9110 section 5.3).
                    for coding in value.split(|&b| b == b',') {
                        let coding = coding.trim_ascii();
                        if coding.is_empty() {
                            continue;
                        }
                        k.codings += 1;
                        k.chunked_last = eq_ignore_case(coding, b"chunked");
                        k.chunked_codings += usize::from(k.chunked_last);
                    }
                }
                _ => {}
            }
        }
        Ok(k)
    }

    fn keep_alive(&self, minor_version: u8) -> bool {
        if minor_version == 1 {
            !self.close
        } else {
            self.keep && !self.close
        }
    }

    /// Framing per RFC 9112 section 6, refusing every ambiguous case instead of guessing.
    /// Only `chunked` alone is decoded: another coding before it is 501 (section 6.1), a list
    /// that does not end in `chunked` leaves the length unknown and is 400.
    fn framing(&self, minor_version: u8) -> Result<Framing, HeadError> {
        if self.transfer_encodings == 0 {
            return Ok(match self.length {
                None | Some(0) => Framing::None,
                Some(n) => Framing::Length(n),
            });
        }
        if self.length.is_some() {
            return Err(HeadError::Malformed(
                "both Transfer-Encoding and Content-Length",
            ));
        }
        if minor_version != 1 {
            return Err(HeadError::Malformed(
                "Transfer-Encoding in an HTTP/1.0 message",
            ));
        }
        if !self.chunked_last {
            return Err(HeadError::Malformed(
                "Transfer-Encoding does not end in chunked",
            ));
        }
        if self.chunked_codings > 1 {
            return Err(HeadError::Malformed("chunked applied more than once"));
        }
        if self.codings > 1 {
            return Err(HeadError::Unsupported("unsupported transfer coding"));
        }
        Ok(Framing::Chunked)
    }
}

/// One Content-Length header value: digits only, or a comma list of identical values.
fn parse_content_length(value: &[u8]) -> Result<u64, HeadError> {
    let mut result = None;
    for part in value.split(|&b| b == b',') {
        let part = part.trim_ascii();
        if part.is_empty() || part.len() > 18 || !part.iter().all(u8::is_ascii_digit) {
            return Err(HeadError::Malformed("invalid Content-Length"));
        }
        let n = part
            .iter()
            .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
        if result.is_some_and(|prev| prev != n) {
            return Err(HeadError::Malformed("conflicting Content-Length values"));
        }
        result = Some(n);
    }
    result.ok_or(HeadError::Malformed("invalid Content-Length"))
}

/// Whether `text` is `uri-host [":" port]` (RFC 9112 section 3.2, RFC 3986 section 3.2.2):
/// a reg-name or IPv4 address, or an IPv6 / IPvFuture literal in brackets, then an optional
/// all-digit port. Userinfo (`user@host`), paths, spaces and non-ASCII bytes are refused (so a
/// valid authority is always ASCII). Runs on every request: one table lookup per byte.
pub fn is_valid_authority(text: &[u8]) -> bool {
    if let Some(rest) = text.strip_prefix(b"[") {
        let Some(close) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let port = match &rest[close + 1..] {
            [] => &[][..],
            [b':', port @ ..] => port,
            _ => return false,
        };
        return is_ip_literal(&rest[..close]) && port.iter().all(u8::is_ascii_digit);
    }
    let mut colon = None;
    let mut i = 0;
    while i < text.len() {
        match AUTHORITY_BYTE[text[i] as usize] {
            REG_NAME => {}
            COLON if colon.is_none() => colon = Some(i),
            PERCENT if colon.is_none() => {
                if !text
                    .get(i + 1..i + 3)
                    .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
                {
                    return false;
                }
                i += 2;
            }
            _ => return false,
        }
        i += 1;
    }
    // After the colon only the port's digits may follow.
    colon.is_none_or(|c| text[c + 1..].iter().all(u8::is_ascii_digit))
}

const OTHER: u8 = 0;
const REG_NAME: u8 = 1;
const COLON: u8 = 2;
const PERCENT: u8 = 3;

/// Byte classes for [`is_valid_authority`]: unreserved and sub-delims (RFC 3986) are reg-name.
static AUTHORITY_BYTE: [u8; 256] = {
    let mut table = [OTHER; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() {
            table[b] = REG_NAME;
        }
        b += 1;
    }
    let extra = b"-._~!$&'()*+,;=";
    let mut i = 0;
    while i < extra.len() {
        table[extra[i] as usize] = REG_NAME;
        i += 1;
    }
    table[b':' as usize] = COLON;
    table[b'%' as usize] = PERCENT;
    table
};

fn is_unreserved_or_sub_delim(b: u8) -> bool {
    AUTHORITY_BYTE[b as usize] == REG_NAME
}

/// The inside of `[...]`: an IPv6 address or `v` HEXDIG+ `.` (unreserved / sub-delims / `:`)+.
fn is_ip_literal(inner: &[u8]) -> bool {
    if let Some(rest) = inner
        .strip_prefix(b"v")
        .or_else(|| inner.strip_prefix(b"V"))
    {
        let Some(dot) = rest.iter().position(|&b| b == b'.') else {
            return false;
        };
        let (version, tail) = (&rest[..dot], &rest[dot + 1..]);
        return !version.is_empty()
            && version.iter().all(u8::is_ascii_hexdigit)
            && !tail.is_empty()
            && tail
                .iter()
                .all(|&b| b == b':' || is_unreserved_or_sub_delim(b));
    }
    std::str::from_utf8(inner).is_ok_and(|t| t.parse::<std::net::Ipv6Addr>().is_ok())
}

/// Headers that describe one connection and are never forwarded (RFC 9110 section 7.6.1),
/// plus the framing headers that weir always writes itself.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    // `Trailer` (which fields follow a chunked body) is end-to-end and passes.
    const HOP: [&[u8]; 8] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-authenticate",
        b"proxy-authorization",
    ];
    // A length check rejects most names before any byte is compared (measured faster than a
    // dispatch on length).
    HOP.iter().any(|h| eq_ignore_case(h, name))
}

/// An HTTP/1 chunked body's trailer section as HTTP/2-style trailers; fields that may not be
/// trailers (framing, hop-by-hop) are dropped, and so is one HTTP/2 cannot carry.
pub fn trailer_fields(raw: &[u8]) -> http::HeaderMap {
    let mut fields = http::HeaderMap::new();
    let mut section = raw.to_vec();
    section.extend_from_slice(b"\r\n");
    let mut parsed = [httparse::EMPTY_HEADER; 32];
    if let Ok(httparse::Status::Complete((_, lines))) =
        httparse::parse_headers(&section, &mut parsed)
    {
        for line in lines {
            let name = line.name.as_bytes();
            if is_hop_by_hop(name) || eq_ignore_case(name, b"content-length") {
                continue;
            }
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(name),
                http::HeaderValue::from_bytes(line.value),
            ) {
                fields.append(name, value);
            }
        }
    }
    fields
}

/// Whether a Connection header value lists `name` as a token.
pub fn lists_token(list: &[u8], name: &[u8]) -> bool {
    list.split(|&b| b == b',')
        .any(|t| eq_ignore_case(t.trim_ascii(), name))
}

/// Decodes a chunked body incrementally. Feed it the buffered bytes; it reports data ranges
/// and how much input it consumed. Strict: bare LF, bad hex or oversized sizes are errors.
#[derive(Debug, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ChunkEvent {
    /// Body data at `input[start..end]`.
    Data(usize, usize),
    /// The terminating chunk and the trailer section have been read; `input[start..end]` are
    /// the trailer field lines, each ending in CRLF (empty when there are none).
    End(usize, usize),
    /// More input is needed.
    NeedMore,
}

impl ChunkedDecoder {
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes from `input`, returning the event and the number of bytes consumed.
    pub fn decode(&mut self, input: &[u8]) -> Result<(ChunkEvent, usize), &'static str> {
        let mut pos = 0;
        loop {
            match self.state {
                ChunkState::Done => return Ok((ChunkEvent::End(pos, pos), pos)),
                ChunkState::Size => {
                    let Some(line_end) = find_crlf(&input[pos..])? else {
                        if input.len() - pos > 1024 {
                            return Err("chunk size line too long");
                        }
                        return Ok((ChunkEvent::NeedMore, pos));
                    };
                    let line = &input[pos..pos + line_end];
                    let hex = match line.iter().position(|&b| b == b';') {
                        Some(i) => &line[..i],
                        None => line,
                    };
                    let hex = hex.trim_ascii_end();
                    if hex.is_empty() || hex.len() > 15 {
                        return Err("invalid chunk size");
                    }
                    let mut size: u64 = 0;
                    for &b in hex {
                        let digit = (b as char).to_digit(16).ok_or("invalid chunk size")?;
                        size = size * 16 + u64::from(digit);
                    }
                    pos += line_end + 2;
                    self.state = if size == 0 {
                        ChunkState::Trailers
                    } else {
                        ChunkState::Data(size)
                    };
                }
                ChunkState::Data(remaining) => {
                    if pos == input.len() {
                        return Ok((ChunkEvent::NeedMore, pos));
                    }
                    let take = remaining.min((input.len() - pos) as u64) as usize;
                    let left = remaining - take as u64;
                    self.state = if left == 0 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left)
                    };
                    return Ok((ChunkEvent::Data(pos, pos + take), pos + take));
                }
                ChunkState::DataEnd => {
                    if input.len() - pos < 2 {
                        return Ok((ChunkEvent::NeedMore, pos));
                    }
                    if &input[pos..pos + 2] != b"\r\n" {
                        return Err("chunk data not followed by CRLF");
                    }
                    pos += 2;
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    // The trailer section is taken whole, so it can be passed on as one block.
                    let rest = &input[pos..];
                    let Some(len) = trailer_section_len(rest)? else {
                        if rest.len() > MAX_HEAD_BYTES {
                            return Err("trailers too large");
                        }
                        return Ok((ChunkEvent::NeedMore, pos));
                    };
                    self.state = ChunkState::Done;
                    return Ok((ChunkEvent::End(pos, pos + len - 2), pos + len));
                }
            }
        }
    }
}

/// The length of a complete trailer section (field lines and the final empty line), `None`
/// while incomplete. Lines must be well-formed fields ending in CRLF: the section is forwarded
/// verbatim, so nothing a downstream parser could read differently may pass.
fn trailer_section_len(rest: &[u8]) -> Result<Option<usize>, &'static str> {
    if rest.starts_with(b"\r\n") {
        return Ok(Some(2));
    }
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match httparse::parse_headers(rest, &mut fields) {
        Ok(httparse::Status::Complete((len, _))) => {
            let section = &rest[..len];
            let bare_lf = section
                .iter()
                .enumerate()
                .any(|(i, &b)| b == b'\n' && (i == 0 || section[i - 1] != b'\r'));
            if bare_lf {
                return Err("bare LF in trailers");
            }
            Ok(Some(len))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err("malformed trailers"),
    }
}

/// Offset of the next CRLF; a bare LF is an error (a classic request smuggling vector).
fn find_crlf(input: &[u8]) -> Result<Option<usize>, &'static str> {
    match input.iter().position(|&b| b == b'\n') {
        Some(0) => Err("bare LF in chunked body"),
        Some(i) if input[i - 1] == b'\r' => Ok(Some(i - 1)),
        Some(_) => Err("bare LF in chunked body"),
        None => Ok(None),
    }
}

// ---- HTTP/1 serialization helpers: status lines, header lines, numbers without allocating.

pub fn status_line(out: &mut Vec<u8>, status: u16, reason: &str) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub fn header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal, without allocating.
pub fn push_decimal(out: &mut Vec<u8>, n: u64) {
    push_radix(out, n, 10);
}

/// Appends `n` in lower-case hex (chunk sizes), without allocating.
pub fn push_hex(out: &mut Vec<u8>, n: u64) {
    push_radix(out, n, 16);
}

fn push_radix(out: &mut Vec<u8>, mut n: u64, radix: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[(n % radix) as usize];
        n /= radix;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str) -> Result<Option<RequestHead>, HeadError> {
        parse_request(&mut BytesMut::from(text))
    }

    #[test]
    fn parses_and_splits_pipelined_requests() {
        let mut buf =
            BytesMut::from("GET /a?x=1 HTTP/1.1\r\nHost: Ex.com:80\r\n\r\nGET /b HTTP/1.1\r\n");
        let r = parse_request(&mut buf).unwrap().unwrap();
        assert_eq!(r.method(), "GET");
        assert_eq!(r.path(), "/a");
        assert_eq!(r.query(), "x=1");
        assert_eq!(r.host(), "Ex.com:80");
        assert!(r.keep_alive);
        assert_eq!(&buf[..], b"GET /b HTTP/1.1\r\n");
        assert!(parse_request(&mut buf).unwrap().is_none());
    }

    #[test]
    fn splits_targets_once() {
        let r = req("GET http://Api.Test:81/a/b?x=1&y HTTP/1.1\r\nHost: other\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.host(), r.path(), r.query()),
            ("Api.Test:81", "/a/b", "x=1&y")
        );
        let r = req("GET http://api.test HTTP/1.1\r\nHost: other\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((r.host(), r.path(), r.query()), ("api.test", "/", ""));
        let mut r = req("GET /p?q=%20 HTTP/1.1\r\nHost: h\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((r.path(), r.query()), ("/p", "q=%20"));
        r.set_path("/new/é");
        assert_eq!(
            (r.target(), r.path(), r.query()),
            ("/new/é?q=%20", "/new/é", "q=%20")
        );
        r.head.set("host", b"edited");
        assert_eq!(r.host(), "edited");
        let invalid = parse_request(&mut BytesMut::from(
            &b"GET / HTTP/1.1\r\nHost: \xff\r\n\r\n"[..],
        ));
        assert!(matches!(invalid, Err(HeadError::Malformed(_))));
    }

    #[test]
    fn refuses_ambiguous_framing() {
        let bad = [
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 4\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -3\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n",
        ];
        for text in bad {
            assert!(
                matches!(req(text), Err(HeadError::Malformed(_))),
                "accepted: {text:?}"
            );
        }
        for unsupported in [
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            let err = req(unsupported).unwrap_err();
            assert_eq!(err.status(), 501, "{unsupported:?}");
        }
        let same =
            req("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n");
        assert_eq!(same.unwrap().unwrap().framing, Framing::Length(3));
    }

    #[test]
    fn a_request_head_stays_small_enough_to_copy_inline() {
        // 152 bytes made every move of a head a `memcpy` call (callgrind, issue 40).
        assert!(std::mem::size_of::<RequestHead>() <= 144);
    }

    #[test]
    fn host_must_be_an_authority() {
        let valid = [
            "example.com",
            "Example.COM:8080",
            "example.com.",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:8080",
            "[2001:db8::7]:443",
            "[v1.fe80::a+en1]",
            "xn--bcher-kva.example",
            "a%2Db.test",
            "",
            "host:",
        ];
        for host in valid {
            assert!(is_valid_authority(host.as_bytes()), "refused {host:?}");
        }
        let invalid = [
            "a.test/evil",
            "a b",
            "user@a.test",
            "a.test:80:80",
            "a.test:8o",
            "[::1",
            "[::g]",
            "[::1]x",
            "::1",
            "a%2",
            "a%zz.test",
            "a\\b",
            "a.test?x",
            "bücher.example",
            "[::ü]",
        ];
        for host in invalid {
            assert!(!is_valid_authority(host.as_bytes()), "accepted {host:?}");
        }
        for text in [
            "GET / HTTP/1.1\r\nHost: a.test/evil\r\n\r\n",
            "GET http://user@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            "GET http://a.test:x/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
        ] {
            assert!(
                matches!(req(text), Err(HeadError::Malformed(_))),
                "{text:?}"
            );
        }
        let ok = req("GET http://[::1]:8080/p HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n");
        assert_eq!(ok.unwrap().unwrap().host(), "[::1]:8080");
    }

    #[test]
    fn expect_continue_only_from_http_1_1() {
        let r = req("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!r.expect_continue && r.has_expect_continue);
        let r =
            req("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
                .unwrap()
                .unwrap();
        assert!(r.expect_continue && r.has_expect_continue);
    }

    #[test]
    fn hop_by_hop_names() {
        for name in [
            "Connection",
            "keep-alive",
            "Proxy-Connection",
            "TE",
            "Transfer-Encoding",
            "UPGRADE",
            "proxy-authenticate",
            "Proxy-Authorization",
        ] {
            assert!(is_hop_by_hop(name.as_bytes()), "{name}");
        }
        for name in [
            "host",
            "tE2",
            "trailers",
            "connectio",
            "x-upgrade",
            "content-length",
        ] {
            assert!(!is_hop_by_hop(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn oversized_heads_are_431() {
        let big = format!(
            "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        assert_eq!(req(&big).unwrap_err(), HeadError::TooLarge);
        let mut many = String::from("GET / HTTP/1.1\r\nHost: a\r\n");
        for i in 0..MAX_HEADERS {
            many.push_str(&format!("X-{i}: 1\r\n"));
        }
        many.push_str("\r\n");
        assert_eq!(req(&many).unwrap_err(), HeadError::TooLarge);
    }

    #[test]
    fn header_edits() {
        let mut r = req("GET /p?q=1 HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-a: 2\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.head.get_all("X-A").count(), 2);
        r.head.set("x-a", b"3");
        assert_eq!(r.head.get_all("x-a").collect::<Vec<_>>(), vec![b"3"]);
        r.set_path("/new");
        assert_eq!(r.target(), "/new?q=1");
        assert_eq!(r.head.get("host"), Some(&b"a"[..]));
    }

    #[test]
    fn response_framing() {
        let mut buf = BytesMut::from("HTTP/1.1 200 OK\r\n\r\nrest");
        let r = parse_response(&mut buf, false).unwrap().unwrap();
        assert_eq!(r.framing, Framing::UntilClose);
        assert!(!r.keep_alive);
        let mut buf = BytesMut::from("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(
            parse_response(&mut buf, false).unwrap().unwrap().framing,
            Framing::None
        );
        let mut buf = BytesMut::from("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(
            parse_response(&mut buf, true).unwrap().unwrap().framing,
            Framing::None
        );
    }

    #[test]
    fn a_reason_phrase_that_is_not_utf8_reads_as_empty() {
        // Found by the fuzz target http_response: httparse gives such a reason as a `""` of its
        // own, outside the buffer, and its span's offset underflowed (an out-of-range span,
        // whose read panicked, in a release build).
        let mut buf = BytesMut::from(&b"HTTP/1.1 200 \x8c\x9c OK\r\nContent-Length: 0\r\n\r\n"[..]);
        let r = parse_response(&mut buf, false).unwrap().unwrap();
        assert_eq!((r.status, r.reason()), (200, ""));
        assert_eq!(r.head.get("content-length"), Some(&b"0"[..]));
    }

    /// A request's fields as HTTP/2 or HTTP/3 carries them: method, target, `:authority`,
    /// fields, whether a body of unknown length follows.
    type Fields<'a> = (
        &'a str,
        &'a str,
        Option<&'a str>,
        &'a [(&'a str, &'a str)],
        bool,
    );

    fn from_fields(f: Fields<'_>) -> Result<RequestHead, HeadError> {
        let (method, target, authority, fields, chunked) = f;
        let fields = fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()));
        RequestHead::from_fields(
            method.as_bytes(),
            target.as_bytes(),
            authority.map(str::as_bytes),
            fields,
            chunked,
        )
    }

    /// The round trip `from_fields` replaced: the fields written as HTTP/1 text and parsed.
    fn via_text(f: Fields<'_>) -> Result<RequestHead, HeadError> {
        let (method, target, authority, fields, chunked) = f;
        let mut text = format!("{method} {target} HTTP/1.1\r\n");
        if let Some(authority) = authority {
            text.push_str(&format!("host: {authority}\r\n"));
        }
        let cookies: Vec<&str> = fields
            .iter()
            .filter(|(n, _)| *n == "cookie")
            .map(|(_, v)| *v)
            .collect();
        for (name, value) in fields.iter().filter(|(n, _)| *n != "cookie") {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
        if !cookies.is_empty() {
            text.push_str(&format!("cookie: {}\r\n", cookies.join("; ")));
        }
        if chunked {
            text.push_str("transfer-encoding: chunked\r\n");
        }
        text.push_str("\r\n");
        parse_request(&mut BytesMut::from(text.as_str())).map(|r| r.expect("a whole head"))
    }

    /// What the lifecycle reads of a request head.
    fn answers(r: &RequestHead) -> String {
        let fields: Vec<(String, String)> = r
            .head
            .iter()
            .map(|(n, v)| {
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                (text(n), text(v))
            })
            .collect();
        format!(
            "{} {} {} {} {} {:?} keep={} upgrade={} expect={}/{} names={} te={} {:?}",
            r.method(),
            r.target(),
            r.path(),
            r.query(),
            r.host(),
            r.framing,
            r.keep_alive,
            r.upgrade,
            r.expect_continue,
            r.has_expect_continue,
            r.connection_names_headers,
            r.te_trailers,
            fields,
        )
    }

    #[test]
    fn heads_from_fields_answer_as_the_text_round_trip_did() {
        let long = "v".repeat(MAX_HEAD_BYTES);
        let many: Vec<(String, String)> = (0..MAX_HEADERS)
            .map(|i| (format!("x-{i}"), "1".to_string()))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let table: &[Fields<'_>] = &[
            ("GET", "/", Some("a.test"), &[], false),
            (
                "GET",
                "/p/q?x=1&y",
                Some("A.Test:8443"),
                &[("accept", "*/*")],
                false,
            ),
            (
                "POST",
                "/up",
                Some("a.test"),
                &[("content-length", "12")],
                false,
            ),
            (
                "POST",
                "/up",
                Some("a.test"),
                &[("content-type", "a/b")],
                true,
            ),
            (
                "POST",
                "/up",
                Some("a.test"),
                &[("content-length", "0")],
                false,
            ),
            ("GET", "/", None, &[("host", "h.test")], false),
            ("OPTIONS", "*", Some("a.test"), &[], false),
            ("GET", "http://abs.test/x?y", Some("a.test"), &[], false),
            ("GET", "/é?q=ü", Some("a.test"), &[], false),
            (
                "GET",
                "/",
                Some("a.test"),
                &[
                    ("cookie", "a=1"),
                    ("x-b", "2"),
                    ("cookie", "c=3"),
                    ("cookie", "d"),
                ],
                false,
            ),
            ("GET", "/", Some("a.test"), &[("cookie", "only=1")], false),
            (
                "POST",
                "/g.S/M",
                Some("a.test"),
                &[("te", "trailers"), ("content-type", "application/grpc")],
                true,
            ),
            (
                "PUT",
                "/",
                Some("a.test"),
                &[("expect", "100-continue")],
                true,
            ),
            (
                "GET",
                "/",
                Some("a.test"),
                &[("x-tab", "a\tb"), ("x-empty", "")],
                false,
            ),
            // Refused alike: no Host, two, an invalid one, bad lengths, bad bytes, targets.
            ("GET", "/", None, &[], false),
            (
                "GET",
                "/",
                Some("a.test"),
                &[("host", "b.test"), ("host", "c.test")],
                false,
            ),
            ("GET", "/", None, &[("host", "a.test/evil")], false),
            ("GET", "/", Some("user@a.test"), &[], false),
            (
                "POST",
                "/",
                Some("a.test"),
                &[("content-length", "1, 2")],
                false,
            ),
            (
                "POST",
                "/",
                Some("a.test"),
                &[("content-length", "-1")],
                false,
            ),
            (
                "POST",
                "/",
                Some("a.test"),
                &[("content-length", "1"), ("content-length", "2")],
                false,
            ),
            ("GET", "/", Some("a.test"), &[("x", "a\x01b")], false),
            ("GET", "/", Some("a.test"), &[("x", "a\x7fb")], false),
            ("GET", "/a b", Some("a.test"), &[], false),
            ("GET", "/a\x7f", Some("a.test"), &[], false),
            ("GET", "relative", Some("a.test"), &[], false),
            ("GET", "*", Some("a.test"), &[], false),
            ("G@T", "/", Some("a.test"), &[], false),
            ("", "/", Some("a.test"), &[], false),
            ("GET", "http://a.test:x/", Some("a.test"), &[], false),
            // The limits: 431.
            ("GET", "/", Some("a.test"), &[("x", &long)], false),
            ("GET", "/", Some("a.test"), &many, false),
            ("GET", "/", None, &many[1..], true),
            ("GET", "/", Some("a.test"), &many[1..], false),
            ("GET", "/", Some("a.test"), &many[2..], true),
            ("GET", "/", Some("a.test"), &many[1..], true),
        ];
        for &fields in table {
            let built = from_fields(fields);
            let parsed = via_text(fields);
            match (&built, &parsed) {
                (Ok(built), Ok(parsed)) => {
                    assert!(built.http2, "{fields:?}");
                    assert_eq!(answers(built), answers(parsed), "{fields:?}");
                }
                (Err(built), Err(parsed)) => {
                    assert_eq!(built.status(), parsed.status(), "{fields:?}");
                }
                _ => panic!("{fields:?}: built {built:?}, parsed {parsed:?}"),
            }
        }
    }

    #[test]
    fn field_checks_agree_with_the_byte_rules() {
        // Every byte at every place of values of every length up to 20.
        for len in 0..=20 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut value = vec![b'v'; len];
                    value[at] = b;
                    assert_eq!(
                        is_field_value(&value),
                        value.iter().all(|&b| is_value_byte(b)),
                        "{value:?}"
                    );
                }
            }
        }
        for b in 0..=255u8 {
            let name = [b'x', b, b'Y', b'-', b'a', b'b', b'c', b'd', b'E'];
            let mut out = vec![b'z'];
            let token = push_lowercase_name(&mut out, &name);
            assert_eq!(token, is_field_name(&name), "{b:#x}");
            if token {
                assert_eq!(out[1..], name.to_ascii_lowercase(), "{b:#x}");
            }
        }
        assert!(!push_lowercase_name(&mut Vec::new(), b""));
    }

    #[test]
    fn heads_from_fields_refuse_connection_specific_fields() {
        for (name, value) in [
            ("connection", "close"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("te", "gzip"),
        ] {
            let fields = [(name, value)];
            let refused = from_fields(("GET", "/", Some("a.test"), &fields, false));
            assert_eq!(
                refused.unwrap_err(),
                HeadError::Malformed("connection-specific header field"),
                "{name}: {value}"
            );
        }
        let ok = from_fields(("GET", "/", Some("a.test"), &[("te", "trailers")], false));
        assert!(ok.unwrap().te_trailers);
    }

    fn decode_all(input: &[u8]) -> Result<Vec<u8>, &'static str> {
        let mut d = ChunkedDecoder::default();
        let mut out = Vec::new();
        let mut pos = 0;
        loop {
            let (ev, used) = d.decode(&input[pos..])?;
            match ev {
                ChunkEvent::Data(s, e) => out.extend_from_slice(&input[pos + s..pos + e]),
                ChunkEvent::End(..) => return Ok(out),
                ChunkEvent::NeedMore => return Err("incomplete"),
            }
            pos += used;
        }
    }

    #[test]
    fn chunked_decoding() {
        assert_eq!(
            decode_all(b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nT: x\r\n\r\n").unwrap(),
            b"hello world"
        );
        assert!(decode_all(b"5\nhello\r\n0\r\n\r\n").is_err());
        assert!(decode_all(b"zz\r\n").is_err());
        assert!(decode_all(b"5\r\nhelloXX0\r\n\r\n").is_err());
        assert!(decode_all(b"fffffffffffffffff\r\n").is_err());
        assert_eq!(decode_all(b"5\r\nhel"), Err("incomplete"));
        // Trailers come back whole, as one block of field lines.
        let input = b"3\r\nabc\r\n0\r\nGrpc-Status: 0\r\nX-Sum: 9\r\n\r\nNEXT";
        let mut d = ChunkedDecoder::default();
        let (ev, used) = d.decode(input).unwrap();
        assert_eq!((ev, used), (ChunkEvent::Data(3, 6), 6));
        let (ev, used) = d.decode(&input[6..]).unwrap();
        let ChunkEvent::End(start, end) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(
            &input[6 + start..6 + end],
            b"Grpc-Status: 0\r\nX-Sum: 9\r\n"
        );
        assert_eq!(&input[6 + used..], b"NEXT");
        // A trailer section split across reads waits for the rest.
        let mut d = ChunkedDecoder::default();
        assert_eq!(
            d.decode(b"0\r\nX: 1\r\n").unwrap(),
            (ChunkEvent::NeedMore, 3)
        );
        assert!(decode_all(b"0\r\nX: 1\nY: 2\r\n\r\n").is_err());
        assert!(decode_all(b"0\r\nnot a field\r\n\r\n").is_err());
    }
}
