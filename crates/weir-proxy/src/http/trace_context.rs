//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): reading a client's
//! `traceparent` and `tracestate`, the sampling decision a traced route makes once per request,
//! and the fields the request sent upstream carries (weir's own span id, new for every try).

use std::cell::{Cell, RefCell};
use std::time::{SystemTime, UNIX_EPOCH};

/// A span attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    /// A value known when weir was built (a method, a protocol version): not copied.
    Static(&'static str),
    Int(i64),
    Bool(bool),
}

pub type Attributes = Vec<(&'static str, AttrValue)>;

/// Something that happened during a span.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    pub time_unix_nano: u64,
    pub name: &'static str,
    pub attributes: Attributes,
}

/// Now, as OTLP times spans.
pub fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The `random-trace-id` flag (section 3.2.2.5.2): weir's trace ids are random.
const FLAG_RANDOM: u8 = 0x02;
const FLAG_SAMPLED: u8 = 0x01;

/// A `traceparent` read from a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: u128,
    pub parent_id: u64,
    pub flags: u8,
}

/// Parses one `traceparent` value. Version `00` must match exactly; a higher version (but
/// `ff`) is read for its first three fields when what follows them starts with `-`
/// (section 3.2.4, "Versioning of traceparent"). Surrounding spaces and tabs are optional
/// whitespace.
pub fn parse_traceparent(value: &[u8]) -> Option<TraceParent> {
    let value = trim_ows(value);
    if value.len() < 55 || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let version = hex_lower(&value[..2])? as u8;
    match version {
        0xff => return None,
        0x00 if value.len() != 55 => return None,
        _ if value.len() > 55 && value[55] != b'-' => return None,
        _ => {}
    }
    let trace_id = hex_lower(&value[3..35])?;
    let parent_id = hex_lower(&value[36..52])? as u64;
    let flags = hex_lower(&value[53..55])? as u8;
    // All zeros is invalid for either id (sections 3.2.2.3 and 3.2.2.4).
    (trace_id != 0 && parent_id != 0).then_some(TraceParent {
        trace_id,
        parent_id,
        // Flags this version does not define are sent as 0 (section 3.2.2.5.3).
        flags: flags & (FLAG_SAMPLED | FLAG_RANDOM),
    })
}

/// The combined `tracestate` of `values` (several fields are one list, RFC 9110 section 5.3),
/// members rejoined with `,` and empty ones left out; `None` when there is none, or when the
/// list is invalid (a bad key or value, more than 32 members), which discards it whole
/// (section 3.3.1.3, as the W3C test suite's strict level expects).
pub fn parse_tracestate<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Box<[u8]>> {
    let mut out = Vec::new();
    let mut members = 0;
    for value in values {
        for member in value.split(|&b| b == b',') {
            let member = trim_ows(member);
            if member.is_empty() {
                continue;
            }
            let eq = member.iter().position(|&b| b == b'=')?;
            let (key, value) = (&member[..eq], &member[eq + 1..]);
            if !is_tracestate_key(key) || !is_tracestate_value(value) {
                return None;
            }
            members += 1;
            if members > 32 {
                return None;
            }
            if !out.is_empty() {
                out.push(b',');
            }
            out.extend_from_slice(member);
        }
    }
    (!out.is_empty()).then(|| out.into_boxed_slice())
}

/// `key = ( lcalpha / DIGIT ) 0*255 ( keychar )` (section 3.3.1.3.1).
fn is_tracestate_key(key: &[u8]) -> bool {
    let keychar = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/@".contains(&b);
    matches!(key.first(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
        && key.len() <= 256
        && key.iter().all(|&b| keychar(b))
}

/// Up to 256 printable characters but `,` and `=`, not ending in a space (section 3.3.1.3.2).
fn is_tracestate_value(value: &[u8]) -> bool {
    value.len() <= 256
        && value.last().is_some_and(|&b| b != b' ')
        && value
            .iter()
            .all(|&b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
}

fn trim_ows(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

/// Lowercase hex digits only (`HEXDIGLC`), up to 32 of them.
fn hex_lower(digits: &[u8]) -> Option<u128> {
    digits.iter().try_fold(0u128, |n, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => return None,
        };
        Some(n << 4 | u128::from(v))
    })
}

/// `method` as the HTTP semantic conventions name it in `http.request.method`: one of the
/// known methods, else `_OTHER`.
pub fn method_name(method: &str) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    KNOWN
        .into_iter()
        .find(|known| *known == method)
        .unwrap_or("_OTHER")
}

/// `n` in decimal (a status code as `error.type` names it), without the formatting machinery.
pub fn decimal(mut n: u16) -> String {
    let mut digits = [0u8; 5];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    digits[at..].iter().map(|&d| char::from(d)).collect()
}

/// How a traced route decides whether a request is sampled; made once per route when the
/// configuration is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampler {
    /// Sampled when the trace id's right-most 7 bytes (the random part, section 3.2.2.5.2) are
    /// below this; 2^56 samples every trace.
    threshold: u64,
    /// A valid parent's sampled flag decides (OpenTelemetry's `ParentBased`).
    parent_based: bool,
}

impl Sampler {
    pub fn new(sample_rate: f64, parent_based: bool) -> Sampler {
        let threshold = (sample_rate.clamp(0.0, 1.0) * (1u64 << 56) as f64) as u64;
        Sampler {
            threshold,
            parent_based,
        }
    }

    /// A new trace's id when it is sampled (for what has no parent to follow: a request
    /// without trace context, a TCP connection), else `None`. Only the id's right-most 7
    /// bytes decide, so they are drawn first, and the rest only for a sampled trace: at rate
    /// 0 nothing is drawn.
    pub fn sample_new(&self) -> Option<u128> {
        if self.threshold == 0 {
            return None;
        }
        let decided = fastrand::u64(..) & ((1 << 56) - 1);
        if decided >= self.threshold {
            return None;
        }
        let high = u128::from(fastrand::u64(..)) << 64 | u128::from(fastrand::u8(..)) << 56;
        Some((high | u128::from(decided)).max(1))
    }

    /// A new root trace's context when it is sampled, for a request that came without
    /// trace fields. An unsampled one gets none, so nothing is sent upstream: the processing
    /// model lets a vendor not communicate a decision not to sample (section 3.3, "No
    /// traceparent received", step 2), and the request then costs a test of its fields.
    pub fn start_root(&self) -> Option<TraceContext> {
        let trace_id = self.sample_new()?;
        Some(TraceContext::new(
            trace_id,
            None,
            FLAG_RANDOM | FLAG_SAMPLED,
            None,
        ))
    }

    /// Whether a trace whose id is `trace_id` is sampled by ratio: the same answer for the
    /// same trace wherever it is asked, as OpenTelemetry's `TraceIdRatioBased` sampler gives.
    fn samples(&self, trace_id: u128) -> bool {
        ((trace_id as u64) & ((1 << 56) - 1)) < self.threshold
    }

    /// The request's trace context, from the client's `traceparent` and `tracestate` field
    /// values: the client's trace continued when its `traceparent` is valid, else a new trace
    /// (an invalid one is dropped with its `tracestate`, section 3.3 "Processing model"), with
    /// a new span id for weir's server span. The caller takes the client's fields out of the
    /// request: the upstream gets weir's own.
    pub fn start<'a>(
        &self,
        mut parents: impl Iterator<Item = &'a [u8]>,
        states: impl Iterator<Item = &'a [u8]>,
    ) -> TraceContext {
        // Two `traceparent` fields are an invalid one (the test suite's
        // `test_traceparent_duplicated`).
        let parent = match (parents.next(), parents.next()) {
            (Some(value), None) => parse_traceparent(value),
            _ => None,
        };
        // `tracestate` only with a valid `traceparent` (section 3.3, "No traceparent received").
        let tracestate = parent.and_then(|_| parse_tracestate(states));
        let (trace_id, random, sampled) = match parent {
            Some(p) => {
                let sampled = match self.parent_based {
                    true => p.flags & FLAG_SAMPLED != 0,
                    false => self.samples(p.trace_id),
                };
                (p.trace_id, p.flags & FLAG_RANDOM, sampled)
            }
            None => {
                let trace_id = new_trace_id();
                (trace_id, FLAG_RANDOM, self.samples(trace_id))
            }
        };
        let parent_id = parent.map(|p| p.parent_id);
        TraceContext::new(trace_id, parent_id, random | u8::from(sampled), tracestate)
    }
}

/// A new trace id: random, never all zeros.
fn new_trace_id() -> u128 {
    fastrand::u128(..).max(1)
}

/// A new span id: random, never all zeros (a zero draw, one in 2^64, becomes 1).
pub fn new_span_id() -> u64 {
    fastrand::u64(..).max(1)
}

/// One traced request's context.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceContext {
    pub trace_id: u128,
    /// weir's server span for the request, the parent of each try's span.
    pub span_id: u64,
    /// The client's span, when its `traceparent` was valid.
    pub parent_id: Option<u64>,
    /// The trace-flags weir sends: sampled and random-trace-id.
    pub flags: u8,
    /// The client's `tracestate`, passed on unchanged (section 3.5).
    pub tracestate: Option<Box<[u8]>>,
    /// When the server span started (sampled requests only).
    pub start_unix_nano: u64,
    /// The span id of the latest try, as its `traceparent` carried it.
    pub try_span_id: Cell<u64>,
    /// Whether the latest try went on a pooled connection.
    pub try_reused: Cell<bool>,
    /// What happened during the request, for its server span (sampled requests only).
    pub events: RefCell<Vec<SpanEvent>>,
    /// Server span attributes learnt during the exchange (sampled requests only).
    pub attributes: RefCell<Attributes>,
}

impl TraceContext {
    fn new(
        trace_id: u128,
        parent_id: Option<u64>,
        flags: u8,
        tracestate: Option<Box<[u8]>>,
    ) -> TraceContext {
        let sampled = flags & FLAG_SAMPLED != 0;
        TraceContext {
            trace_id,
            span_id: new_span_id(),
            parent_id,
            flags,
            tracestate,
            start_unix_nano: if sampled { unix_nanos() } else { 0 },
            try_span_id: Cell::new(0),
            try_reused: Cell::new(false),
            events: RefCell::default(),
            attributes: RefCell::default(),
        }
    }

    pub fn sampled(&self) -> bool {
        self.flags & FLAG_SAMPLED != 0
    }

    /// Notes a gRPC answer's `grpc-status` on the server span (`rpc.grpc.status_code`), when
    /// the request is sampled.
    pub fn note_grpc_status(&self, value: &[u8]) {
        let code = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.parse::<i64>().ok());
        if let Some(code) = code.filter(|_| self.sampled()) {
            let attribute = ("rpc.grpc.status_code", AttrValue::Int(code));
            self.attributes.borrow_mut().push(attribute);
        }
    }

    /// Notes an event on the server span, when the request is sampled.
    pub fn event(&self, name: &'static str, attributes: impl FnOnce() -> Attributes) {
        if self.sampled() {
            self.events.borrow_mut().push(SpanEvent {
                time_unix_nano: unix_nanos(),
                name,
                attributes: attributes(),
            });
        }
    }

    /// The `traceparent` value for one try: a new span id (kept in `try_span_id`), the same
    /// trace id and flags.
    pub fn next_try(&self) -> [u8; 55] {
        let span_id = new_span_id();
        self.try_span_id.set(span_id);
        traceparent(self.trace_id, span_id, self.flags)
    }
}

/// A version `00` `traceparent` value.
pub fn traceparent(trace_id: u128, span_id: u64, flags: u8) -> [u8; 55] {
    let mut out = [b'-'; 55];
    out[..2].copy_from_slice(b"00");
    out[3..19].copy_from_slice(&hex16((trace_id >> 64) as u64));
    out[19..35].copy_from_slice(&hex16(trace_id as u64));
    out[36..52].copy_from_slice(&hex16(span_id));
    out[53..55].copy_from_slice(&hex16(u64::from(flags))[14..]);
    out
}

/// `n`'s 16 lowercase hex digits: its nibbles spread one to a byte, then each turned into
/// its digit, all at once (a digit at a time cost 5 instructions a digit, callgrind).
fn hex16(n: u64) -> [u8; 16] {
    const fn lanes(byte: u8) -> u128 {
        u128::from_ne_bytes([byte; 16])
    }
    let mut x = u128::from(n);
    x = (x | x << 32) & 0x0000_0000_ffff_ffff_0000_0000_ffff_ffff;
    x = (x | x << 16) & 0x0000_ffff_0000_ffff_0000_ffff_0000_ffff;
    x = (x | x << 8) & 0x00ff_00ff_00ff_00ff_00ff_00ff_00ff_00ff;
    x = (x | x << 4) & lanes(0x0f);
    // 1 in each byte whose nibble is 10 or more: those skip from '9' + 1 to 'a'.
    let letters = ((x + lanes(0x06)) >> 4) & lanes(0x01);
    (x + lanes(b'0') + letters * u128::from(b'a' - b'0' - 10)).to_be_bytes()
}

#[cfg(test)]
mod tests {
    //! Each case names the W3C test suite's test it ports (github.com/w3c/trace-context,
    //! test/test.py), which checks a vendor from outside; here the same inputs go through
    //! the parser and `Sampler::start`.

    use super::*;

    const TRACE: u128 = 0x12345678901234567890123456789012;

    fn start(fields: &[(&str, &str)]) -> TraceContext {
        start_with(Sampler::new(1.0, true), fields)
    }

    /// The fields named `name` (case-insensitive, as the request's head finds them).
    fn values<'a>(
        fields: &'a [(&str, &str)],
        name: &'a str,
    ) -> impl Iterator<Item = &'a [u8]> + 'a {
        fields
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_bytes())
    }

    fn start_with(sampler: Sampler, fields: &[(&str, &str)]) -> TraceContext {
        sampler.start(values(fields, "traceparent"), values(fields, "tracestate"))
    }

    fn tracestate(fields: &[(&str, &str)]) -> Option<String> {
        let mut all = vec![(
            "traceparent",
            "00-12345678901234567890123456789012-1234567890123456-00",
        )];
        all.extend_from_slice(fields);
        start(&all)
            .tracestate
            .map(|t| String::from_utf8(t.into_vec()).unwrap())
    }

    /// A restarted trace: not the client's trace id, no parent, no tracestate.
    fn assert_restarted(value: &str) {
        let context = start(&[("traceparent", value), ("tracestate", "foo=1")]);
        assert_ne!(context.trace_id, TRACE, "{value}");
        assert_eq!(context.parent_id, None, "{value}");
        assert_eq!(context.tracestate, None, "{value}");
    }

    #[test]
    fn test_both_traceparent_and_tracestate_missing() {
        let context = start(&[]);
        assert_ne!(context.trace_id, 0);
        assert_eq!(context.parent_id, None);
        // A new trace: random id, sampled at rate 1.
        assert_eq!(context.flags, 0x03);
    }

    #[test]
    fn test_traceparent_included_tracestate_missing() {
        let v = "00-12345678901234567890123456789012-1234567890123456-01";
        let context = start(&[("traceparent", v)]);
        assert_eq!(context.trace_id, TRACE);
        assert_eq!(context.parent_id, Some(0x1234567890123456));
        assert_ne!(context.span_id, 0x1234567890123456);
        let sent = context.next_try();
        let sent = std::str::from_utf8(&sent).unwrap();
        assert!(sent.starts_with("00-12345678901234567890123456789012-"));
        assert!(!sent.contains("1234567890123456-01"), "{sent}");
        assert!(sent.ends_with("-01"), "{sent}");
    }

    #[test]
    fn test_traceparent_duplicated() {
        let context = start(&[
            (
                "traceparent",
                "00-12345678901234567890123456789011-1234567890123456-01",
            ),
            (
                "traceparent",
                "00-12345678901234567890123456789012-1234567890123456-01",
            ),
        ]);
        assert_ne!(context.trace_id, TRACE);
        assert_ne!(context.trace_id, TRACE - 1);
    }

    #[test]
    fn test_traceparent_header_name_valid_casing() {
        let v = "00-12345678901234567890123456789012-1234567890123456-01";
        for name in ["TraceParent", "TrAcEpArEnT", "TRACEPARENT"] {
            assert_eq!(start(&[(name, v)]).trace_id, TRACE, "{name}");
        }
    }

    #[test]
    fn test_traceparent_header_name() {
        let v = "00-12345678901234567890123456789012-1234567890123456-01";
        for name in ["trace-parent", "trace.parent"] {
            assert_ne!(start(&[(name, v)]).trace_id, TRACE, "{name}");
        }
    }

    #[test]
    fn invalid_traceparents_restart_the_trace() {
        for value in [
            // test_traceparent_version_0x00
            "00-12345678901234567890123456789012-1234567890123456-01.",
            "00-12345678901234567890123456789012-1234567890123456-01-what-the-future-will-be-like",
            // test_traceparent_version_0xcc: a future version needs `-` after the flags
            "cc-12345678901234567890123456789012-1234567890123456-01.what-the-future-will-be-like",
            // test_traceparent_version_0xff
            "ff-12345678901234567890123456789012-1234567890123456-01",
            // test_traceparent_version_illegal_characters
            ".0-12345678901234567890123456789012-1234567890123456-01",
            "0.-12345678901234567890123456789012-1234567890123456-01",
            // test_traceparent_version_too_long, test_traceparent_version_too_short
            "000-12345678901234567890123456789012-1234567890123456-01",
            "0000-12345678901234567890123456789012-1234567890123456-01",
            "0-12345678901234567890123456789012-1234567890123456-01",
            // test_traceparent_trace_id_all_zero
            "00-00000000000000000000000000000000-1234567890123456-01",
            // test_traceparent_trace_id_illegal_characters
            "00-.2345678901234567890123456789012-1234567890123456-01",
            "00-1234567890123456789012345678901.-1234567890123456-01",
            // test_traceparent_trace_id_too_long, test_traceparent_trace_id_too_short
            "00-123456789012345678901234567890123-1234567890123456-01",
            "00-1234567890123456789012345678901-1234567890123456-01",
            // test_traceparent_parent_id_all_zero
            "00-12345678901234567890123456789012-0000000000000000-01",
            // test_traceparent_parent_id_illegal_characters
            "00-12345678901234567890123456789012-.234567890123456-01",
            "00-12345678901234567890123456789012-123456789012345.-01",
            // test_traceparent_parent_id_too_long, test_traceparent_parent_id_too_short
            "00-12345678901234567890123456789012-12345678901234567-01",
            "00-12345678901234567890123456789012-123456789012345-01",
            // test_traceparent_trace_flags_illegal_characters
            "00-12345678901234567890123456789012-1234567890123456-.0",
            "00-12345678901234567890123456789012-1234567890123456-0.",
            // test_traceparent_trace_flags_too_long, test_traceparent_trace_flags_too_short
            "00-12345678901234567890123456789012-1234567890123456-001",
            "00-12345678901234567890123456789012-1234567890123456-1",
            // HEXDIGLC: uppercase hex is not a version 00 value (section 3.2.2.2)
            "00-1234567890123456789012345678901A-1234567890123456-01",
        ] {
            assert_restarted(value);
        }
    }

    #[test]
    fn test_traceparent_version_0xcc() {
        for value in [
            "cc-12345678901234567890123456789012-1234567890123456-01",
            "cc-12345678901234567890123456789012-1234567890123456-01-what-the-future-will-be-like",
        ] {
            let context = start(&[("traceparent", value)]);
            assert_eq!(context.trace_id, TRACE, "{value}");
            // Sent on as version 00 (section 3.2.4).
            assert!(context.next_try().starts_with(b"00-"));
        }
    }

    #[test]
    fn test_traceparent_ows_handling() {
        for value in [
            " 00-12345678901234567890123456789012-1234567890123456-01",
            "\t00-12345678901234567890123456789012-1234567890123456-01",
            "00-12345678901234567890123456789012-1234567890123456-01 ",
            "00-12345678901234567890123456789012-1234567890123456-01\t",
            "\t 00-12345678901234567890123456789012-1234567890123456-01 \t",
        ] {
            assert_eq!(
                start(&[("traceparent", value)]).trace_id,
                TRACE,
                "{value:?}"
            );
        }
    }

    #[test]
    fn test_tracestate_included_traceparent_missing() {
        // Section 3.3 "No traceparent received": discarded.
        assert_eq!(start(&[("tracestate", "foo=1")]).tracestate, None);
    }

    #[test]
    fn test_tracestate_included_traceparent_included() {
        assert_eq!(
            tracestate(&[("tracestate", "foo=1,bar=2")]).unwrap(),
            "foo=1,bar=2"
        );
    }

    #[test]
    fn test_tracestate_header_name() {
        assert_eq!(tracestate(&[("trace-state", "foo=1")]), None);
        assert_eq!(tracestate(&[("trace.state", "foo=1")]), None);
    }

    #[test]
    fn test_tracestate_header_name_valid_casing() {
        for name in ["TraceState", "TrAcEsTaTe", "TRACESTATE"] {
            assert_eq!(tracestate(&[(name, "foo=1")]).unwrap(), "foo=1");
        }
    }

    #[test]
    fn test_tracestate_empty_header() {
        assert_eq!(tracestate(&[("tracestate", "")]), None);
        let both = tracestate(&[("tracestate", "foo=1"), ("tracestate", "")]);
        assert_eq!(both.unwrap(), "foo=1");
        let both = tracestate(&[("tracestate", ""), ("tracestate", "foo=1")]);
        assert_eq!(both.unwrap(), "foo=1");
    }

    #[test]
    fn test_tracestate_multiple_headers_different_keys() {
        let combined = tracestate(&[
            ("tracestate", "foo=1,bar=2"),
            ("tracestate", "rojo=1,congo=2"),
            ("tracestate", "baz=3"),
        ]);
        assert_eq!(combined.unwrap(), "foo=1,bar=2,rojo=1,congo=2,baz=3");
    }

    #[test]
    fn test_tracestate_duplicated_keys() {
        // Kept as they are (either way passes the suite).
        assert_eq!(
            tracestate(&[("tracestate", "foo=1,foo=2")]).unwrap(),
            "foo=1,foo=2"
        );
    }

    #[test]
    fn test_tracestate_all_allowed_characters() {
        let key = "abcdefghijklmnopqrstuvwxyz0123456789_-*/";
        let value: String = (0x20u8..=0x7e)
            .filter(|b| *b != b',' && *b != b'=')
            .map(char::from)
            .collect();
        for key in [key.to_string(), format!("{key}@a-z0-9_-*/")] {
            let member = format!("{key}={value}");
            assert_eq!(tracestate(&[("tracestate", &member)]).unwrap(), member);
        }
    }

    #[test]
    fn test_tracestate_ows_handling() {
        let list = tracestate(&[("tracestate", "foo=1 \t , \t bar=2, \t baz=3")]);
        assert_eq!(list.unwrap(), "foo=1,bar=2,baz=3");
        for value in [" foo=1", "\tfoo=1", "foo=1 ", "foo=1\t", "\t foo=1 \t"] {
            assert_eq!(tracestate(&[("tracestate", value)]).unwrap(), "foo=1");
        }
    }

    #[test]
    fn test_tracestate_key_illegal_characters_and_vendor_format() {
        for value in ["foo =1", "FOO=1", "foo.bar=1", "@foo=1,bar=2"] {
            assert_eq!(tracestate(&[("tracestate", value)]), None, "{value}");
        }
        for value in ["foo@=1,bar=2", "foo@@bar=1,bar=2", "foo@bar@baz=1,bar=2"] {
            assert_eq!(tracestate(&[("tracestate", value)]).unwrap(), value);
        }
    }

    #[test]
    fn test_tracestate_member_count_limit() {
        let members: Vec<String> = (1..=33).map(|i| format!("bar{i:02}={i:02}")).collect();
        let fields = |n: usize| members[..n].join(",");
        let kept = tracestate(&[("tracestate", &fields(32))]).unwrap();
        assert_eq!(kept.split(',').count(), 32);
        assert_eq!(tracestate(&[("tracestate", &fields(33))]), None);
    }

    #[test]
    fn test_tracestate_key_length_limit() {
        let long = format!("{}=1", "z".repeat(256));
        assert!(tracestate(&[("tracestate", "foo=1"), ("tracestate", &long)]).is_some());
        let too_long = format!("{}=1", "z".repeat(257));
        assert_eq!(
            tracestate(&[("tracestate", "foo=1"), ("tracestate", &too_long)]),
            None
        );
    }

    #[test]
    fn test_tracestate_value_illegal_characters() {
        for value in ["foo=bar=baz", "foo=,bar=3", "foo=1 ,bar=2\u{7f}"] {
            let kept = tracestate(&[("tracestate", value)]);
            assert!(kept.as_deref() != Some(value), "{value}: {kept:?}");
        }
        assert_eq!(tracestate(&[("tracestate", "foo=bar=baz")]), None);
    }

    #[test]
    fn hex_digits_are_lowercase_and_in_order() {
        for n in [0, 1, 0x0123_4567_89ab_cdef, u64::MAX, 0xa0b0_c0d0_e0f0_0909] {
            assert_eq!(hex16(n), *format!("{n:016x}").as_bytes(), "{n:x}");
        }
        let value = traceparent(0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, 1);
        assert_eq!(
            &value,
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
    }

    #[test]
    fn decimals() {
        assert_eq!(
            (decimal(0), decimal(503), decimal(65535)),
            ("0".into(), "503".into(), "65535".into())
        );
    }

    #[test]
    fn unknown_methods_are_other() {
        assert_eq!(method_name("GET"), "GET");
        assert_eq!(method_name("PURGE"), "_OTHER");
    }

    #[test]
    fn each_try_gets_a_new_span_id_and_the_same_trace() {
        let v = "00-12345678901234567890123456789012-1234567890123456-01";
        let context = start(&[("traceparent", v)]);
        let first = context.next_try();
        let first_id = context.try_span_id.get();
        let second = context.next_try();
        assert_ne!(first, second);
        assert_ne!(first_id, context.try_span_id.get());
        assert_eq!(first[..36], second[..36]);
        assert_eq!(
            parse_traceparent(&second).unwrap().parent_id,
            context.try_span_id.get()
        );
    }

    #[test]
    fn sampling_is_parent_based_or_by_trace_id() {
        let sampled = "00-12345678901234567890123456789012-1234567890123456-01";
        let unsampled = "00-12345678901234567890123456789012-1234567890123456-00";
        // A parent's sampled flag decides (OpenTelemetry's ParentBased, whose remote-parent
        // samplers default to AlwaysOn / AlwaysOff).
        let never = Sampler::new(0.0, true);
        assert!(start_with(never, &[("traceparent", sampled)]).sampled());
        let always = Sampler::new(1.0, true);
        assert!(!start_with(always, &[("traceparent", unsampled)]).sampled());
        // Without parent_based the ratio decides on the trace id, whatever the flag.
        let none = Sampler::new(0.0, false);
        assert!(!start_with(none, &[("traceparent", sampled)]).sampled());
        // The random-trace-id flag is kept from the parent (unset here), and set on a new trace.
        assert_eq!(start_with(always, &[("traceparent", sampled)]).flags, 0x01);
        assert_eq!(start_with(always, &[]).flags, 0x03);
        // Unknown flags are sent as 0 (section 3.2.2.5.3).
        let odd = "00-12345678901234567890123456789012-1234567890123456-ff";
        assert_eq!(start(&[("traceparent", odd)]).flags, 0x03);
    }

    #[test]
    fn a_root_is_made_only_when_sampled() {
        assert_eq!(Sampler::new(0.0, true).start_root(), None);
        let root = Sampler::new(1.0, true).start_root().unwrap();
        assert_eq!((root.parent_id, root.flags), (None, 0x03));
        assert_ne!(root.trace_id, 0);
        // A drawn trace is one the same ratio samples wherever it is asked again.
        let tenth = Sampler::new(0.1, false);
        let mut made = 0;
        for _ in 0..100_000 {
            if let Some(trace_id) = tenth.sample_new() {
                assert!(tenth.samples(trace_id));
                made += 1;
            }
        }
        // Binomial(100,000, 0.1): standard deviation 95.
        assert!((9_500..10_500).contains(&made), "{made}");
    }

    #[test]
    fn ratio_sampling_is_decided_by_the_right_most_seven_bytes() {
        let half = Sampler::new(0.5, false);
        assert!(half.samples(0x00ff_0000_0000_0000_007f_ffff_ffff_ffff));
        assert!(!half.samples(0x0000_0000_0000_0000_0080_0000_0000_0000));
        let mut sampled = 0;
        for _ in 0..100_000 {
            sampled += usize::from(Sampler::new(0.01, false).samples(fastrand::u128(..)));
        }
        assert!((800..1200).contains(&sampled), "{sampled}");
    }
}
